//! openraft's async runtime: tokio, except that the randomness openraft draws (its election
//! timeouts) comes from a per-thread generator that can be seeded. A simulation seeds it with
//! [`seed_thread_rng`] and gets the same elections on every run of a seed; in production it is
//! seeded from the process's random hasher keys on first use.

use std::cell::Cell;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use openraft::{AsyncRuntime, OptionalSend, TokioInstant, TokioRuntime};

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

impl rand::RngCore for ThreadRng {
    fn next_u32(&mut self) -> u32 {
        (next_u64() >> 32) as u32
    }

    fn next_u64(&mut self) -> u64 {
        next_u64()
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        for chunk in dest.chunks_mut(8) {
            let bytes = next_u64().to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
    }

    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}

/// Tokio with a seedable generator.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ChainRuntime;

impl AsyncRuntime for ChainRuntime {
    type JoinError = <TokioRuntime as AsyncRuntime>::JoinError;
    type JoinHandle<T: OptionalSend + 'static> = <TokioRuntime as AsyncRuntime>::JoinHandle<T>;
    type Sleep = <TokioRuntime as AsyncRuntime>::Sleep;
    type Instant = TokioInstant;
    type TimeoutError = <TokioRuntime as AsyncRuntime>::TimeoutError;
    type Timeout<R, T: Future<Output = R> + OptionalSend> =
        <TokioRuntime as AsyncRuntime>::Timeout<R, T>;
    type ThreadLocalRng = ThreadRng;
    type OneshotSender<T: OptionalSend> = <TokioRuntime as AsyncRuntime>::OneshotSender<T>;
    type OneshotReceiverError = <TokioRuntime as AsyncRuntime>::OneshotReceiverError;
    type OneshotReceiver<T: OptionalSend> = <TokioRuntime as AsyncRuntime>::OneshotReceiver<T>;

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

    fn oneshot<T>() -> (Self::OneshotSender<T>, Self::OneshotReceiver<T>)
    where
        T: OptionalSend,
    {
        TokioRuntime::oneshot()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    #[test]
    fn a_seed_fixes_the_sequence() {
        let draw = |seed| {
            seed_thread_rng(seed);
            (0..4)
                .map(|_| ThreadRng.gen_range(150..300u64))
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
    }
}
