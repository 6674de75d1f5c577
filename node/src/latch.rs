//! Per-execution latches: the leader evaluates and proposes at most one write per execution at
//! a time, so each evaluation sees every earlier write to that execution applied.
//!
//! Latches are striped: an execution maps to one of a fixed number of async mutexes by a stable
//! hash. Two executions may share a stripe and then wait for each other, which costs throughput,
//! never correctness. The number of stripes bounds the memory, whatever the number of executions.

use chainstore_model::ExecutionId;
use tokio::sync::{Mutex, MutexGuard};

/// Number of stripes.
pub const LATCH_STRIPES: usize = 4096;

/// The latch table.
pub struct Latches {
    stripes: Vec<Mutex<()>>,
}

impl Default for Latches {
    fn default() -> Self {
        Self {
            stripes: (0..LATCH_STRIPES).map(|_| Mutex::new(())).collect(),
        }
    }
}

impl Latches {
    /// Waits for the latch of `exec`; it is released when the guard drops.
    pub async fn acquire(&self, exec: &ExecutionId) -> MutexGuard<'_, ()> {
        self.stripes[stripe_of(exec)].lock().await
    }
}

/// FNV-1a: stable across runs and platforms (the simulations need the same stripe every run).
fn stripe_of(exec: &ExecutionId) -> usize {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in exec.as_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    (hash % LATCH_STRIPES as u64) as usize
}
