//! openraft's async runtime: tokio, except that the randomness openraft draws (its election
//! timeouts) comes from a per-thread generator that can be seeded. A simulation seeds it with
//! [`seed_thread_rng`] and gets the same elections on every run of a seed; in production it is
//! seeded from the process's random hasher keys on first use.

use std::cell::Cell;
use std::convert::Infallible;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use openraft::{AsyncRuntime, OptionalSend};
use openraft_rt_tokio::{
    TokioInstant, TokioMpsc, TokioMutex, TokioOneshot, TokioRuntime, TokioWatch,
};

thread_local! {
    /// xorshift64* state; 0 means "not seeded yet".
    static STATE: Cell<u64> = const { Cell::new(0) };
}

/// Seeds this thread's generator; every later draw on this thread follows from `seed`.
pub fn seed_thread_rng(seed: u64) {
    STATE.with(|s| s.set(mix(seed) | 1));
}

/// SplitMix64 finalizer: spreads a small seed over all bits.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn next_u64() -> u64 {
    STATE.with(|s| {
        let mut x = s.get();
        if x == 0 {
            x = mix(std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish())
                | 1;
        }
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        s.set(x);
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    })
}

/// A handle on this thread's generator.
#[derive(Debug, Default, Clone, Copy)]
pub struct ThreadRng;

impl rand_core::TryRng for ThreadRng {
    type Error = Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        Ok((next_u64() >> 32) as u32)
    }

    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        Ok(next_u64())
    }

    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), Infallible> {
        for chunk in dest.chunks_mut(8) {
            let bytes = next_u64().to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
        Ok(())
    }
}

/// Tokio with a seedable generator. openraft builds a value of it only in its own tests
/// (`new`, `block_on`); a node runs on the tokio runtime it is started on.
pub struct ChainRuntime(TokioRuntime);

impl std::fmt::Debug for ChainRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ChainRuntime")
    }
}

impl AsyncRuntime for ChainRuntime {
    // The tokio runtime's own types, named directly: through a projection on `TokioRuntime`
    // the compiler cannot prove futures holding a `Raft` to be `Send`.
    type JoinError = tokio::task::JoinError;
    type JoinHandle<T: OptionalSend + 'static> = tokio::task::JoinHandle<T>;
    type Sleep = tokio::time::Sleep;
    type Instant = TokioInstant;
    type TimeoutError = tokio::time::error::Elapsed;
    type Timeout<R, T: Future<Output = R> + OptionalSend> = tokio::time::Timeout<T>;
    type ThreadLocalRng = ThreadRng;
    type Mpsc = TokioMpsc;
    type Watch = TokioWatch;
    type Oneshot = TokioOneshot;
    type Mutex<T: OptionalSend + 'static> = TokioMutex<T>;

    fn spawn<T>(future: T) -> Self::JoinHandle<T::Output>
    where
        T: Future + OptionalSend + 'static,
        T::Output: OptionalSend + 'static,
    {
        TokioRuntime::spawn(future)
    }

    fn sleep(duration: Duration) -> Self::Sleep {
        TokioRuntime::sleep(duration)
    }

    fn sleep_until(deadline: Self::Instant) -> Self::Sleep {
        TokioRuntime::sleep_until(deadline)
    }

    fn timeout<R, F: Future<Output = R> + OptionalSend>(
        duration: Duration,
        future: F,
    ) -> Self::Timeout<R, F> {
        TokioRuntime::timeout(duration, future)
    }

    fn timeout_at<R, F: Future<Output = R> + OptionalSend>(
        deadline: Self::Instant,
        future: F,
    ) -> Self::Timeout<R, F> {
        TokioRuntime::timeout_at(deadline, future)
    }

    fn is_panic(join_error: &Self::JoinError) -> bool {
        TokioRuntime::is_panic(join_error)
    }

    fn thread_rng() -> Self::ThreadLocalRng {
        ThreadRng
    }

    fn new(threads: usize) -> Self {
        ChainRuntime(TokioRuntime::new(threads))
    }

    fn block_on<F, T>(&mut self, future: F) -> T
    where
        F: Future<Output = T>,
    {
        self.0.block_on(future)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_core::Rng;

    #[test]
    fn a_seed_fixes_the_sequence() {
        let draw = |seed| {
            seed_thread_rng(seed);
            (0..4).map(|_| ThreadRng.next_u64()).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
    }
}
