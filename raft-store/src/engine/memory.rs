//! An in-memory engine for tests and deterministic simulations.
//!
//! It keeps durable and pending writes apart. Reads see every write; [`Engine::sync`] makes the
//! pending writes durable; [`MemEngine::crash`] throws the pending ones away, as a power cut
//! would. `crash_keeping(n)` keeps the first `n` pending batches, which models a write-ahead log
//! recovered up to some point: a crash never tears a batch, and never keeps a later batch
//! without the earlier ones. Faults can be scheduled: the Nth write or sync from now fails with an
//! I/O error and changes nothing; a sync fails after making only some of the pending batches
//! durable and forgetting the rest (which reads still see, as a page cache does after a failed
//! fsync); the Nth read fails, or returns a value with a flipped bit; a stored value is damaged
//! in place. Values are stored sealed with their checksum ([`super::seal`]), so damage reads as
//! `Corrupted`.
//!
//! A test may also hold every sync back ([`MemEngine::hold_syncs`]) to see what happens while
//! a node's disk has not answered yet.
//!
//! Determinism: ordered maps only, no clock, no threads, no randomness. Clones share one store,
//! so a simulation can hold a handle outside a node and "restart" the node on it.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use super::{
    seal, unseal, Engine, EngineView, KeyValue, ScanOrder, StorageError, WriteBatch, WriteOp,
};

type Map = BTreeMap<Vec<u8>, Vec<u8>>;

#[derive(Default)]
struct State {
    /// What survives a crash.
    durable: Map,
    /// What reads see: `durable` with every pending batch applied.
    /// Shared with the views taken of it: a write copies it only while a view holds it.
    current: Arc<Map>,
    /// Batches written since the last sync, oldest first.
    pending: Vec<WriteBatch>,
    /// Writes still to go before the scheduled write failure (1 = the next write fails).
    fail_write_in: Option<u64>,
    /// Syncs still to go before the scheduled sync failure.
    fail_sync_in: Option<u64>,
    /// When the scheduled sync fails: how many pending batches it made durable before failing
    /// (the rest are forgotten); `None`: it made nothing durable and forgot nothing.
    fail_sync_keeps: Option<usize>,
    /// Reads still to go before the scheduled read failure.
    fail_read_in: Option<u64>,
    /// Reads returning a value still to go before one returns a damaged value.
    corrupt_read_in: Option<u64>,
    /// Every write from now on fails (a disk that went read-only).
    fail_all_writes: bool,
    /// Number of successful writes since creation.
    writes_total: u64,
    /// Number of successful syncs since creation.
    syncs_total: u64,
}

/// An in-memory [`Engine`] that can simulate crashes and I/O faults. Cheap to clone; clones share
/// the same store.
#[derive(Clone, Default)]
pub struct MemEngine {
    state: Arc<Mutex<State>>,
    /// While `true`, every sync waits (see [`MemEngine::hold_syncs`]).
    held: Arc<(Mutex<bool>, Condvar)>,
}

fn lock_gate(gate: &Mutex<bool>) -> MutexGuard<'_, bool> {
    gate.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl MemEngine {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock can only come from a bug in this file; the state is
        // still a consistent map, so recovering the guard is sound.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Simulates a crash: every write not yet synced is lost.
    pub fn crash(&self) {
        self.crash_keeping(0);
    }

    /// Simulates a crash after which the first `keep` unsynced batches survive (a write-ahead log
    /// recovered up to that point). `keep` larger than the pending count keeps them all.
    pub fn crash_keeping(&self, keep: usize) {
        let mut state = self.lock();
        let pending = std::mem::take(&mut state.pending);
        for batch in pending.into_iter().take(keep) {
            apply(&mut state.durable, &batch);
        }
        state.current = Arc::new(state.durable.clone());
    }

    /// Number of batches written since the last sync.
    pub fn pending_batches(&self) -> usize {
        self.lock().pending.len()
    }

    /// Number of writes that succeeded since the engine was created.
    pub fn writes_total(&self) -> u64 {
        self.lock().writes_total
    }

    /// Number of syncs that succeeded since the engine was created.
    pub fn syncs_total(&self) -> u64 {
        self.lock().syncs_total
    }

    /// Makes the `n`th write from now fail (`n = 1`: the next one). The failing write changes
    /// nothing; later writes succeed again.
    pub fn fail_write_after(&self, n: u64) {
        self.lock().fail_write_in = Some(n.max(1));
    }

    /// Makes the `n`th sync from now fail without making anything durable.
    pub fn fail_sync_after(&self, n: u64) {
        let mut state = self.lock();
        state.fail_sync_in = Some(n.max(1));
        state.fail_sync_keeps = None;
    }

    /// Makes the `n`th sync from now fail after making the first `keep` pending batches durable;
    /// the later ones stay visible to reads but are forgotten: no later sync makes them durable,
    /// and a crash loses them (what a failed fsync does to dirty pages on Linux).
    pub fn fail_sync_after_losing(&self, n: u64, keep: usize) {
        let mut state = self.lock();
        state.fail_sync_in = Some(n.max(1));
        state.fail_sync_keeps = Some(keep);
    }

    /// Makes the `n`th read (`get` or `scan`) from now fail with an I/O error.
    pub fn fail_read_after(&self, n: u64) {
        self.lock().fail_read_in = Some(n.max(1));
    }

    /// Makes the `n`th read from now that returns a value see one bit of it flipped (a fault on
    /// the read path: the stored copy is intact).
    pub fn corrupt_read_after(&self, n: u64) {
        self.lock().corrupt_read_in = Some(n.max(1));
    }

    /// Flips bit `bit` (modulo the value's length) of the stored value of the `nth` key (modulo
    /// the number of keys) that reads see, in the durable copy too when it holds the same bytes.
    /// Returns the key damaged, or `None` on an empty store.
    pub fn corrupt_stored(&self, nth: usize, bit: usize) -> Option<Vec<u8>> {
        let mut state = self.lock();
        let count = state.current.len();
        if count == 0 {
            return None;
        }
        let (key, value) = state.current.iter().nth(nth % count)?;
        let key = key.clone();
        let original = value.clone();
        let mut damaged = original.clone();
        flip(&mut damaged, bit);
        if state.durable.get(&key) == Some(&original) {
            state.durable.insert(key.clone(), damaged.clone());
        }
        Arc::make_mut(&mut state.current).insert(key.clone(), damaged);
        Some(key)
    }

    /// Makes every sync from now on wait, blocking its thread, until [`MemEngine::release_syncs`]
    /// (a disk that takes its time): for tests of what a node does meanwhile, never for the
    /// simulation, whose syncs run on its only thread.
    pub fn hold_syncs(&self) {
        *lock_gate(&self.held.0) = true;
    }

    /// Lets held syncs, and every later one, go on.
    pub fn release_syncs(&self) {
        *lock_gate(&self.held.0) = false;
        self.held.1.notify_all();
    }

    /// Makes every write fail until [`MemEngine::clear_faults`].
    pub fn fail_all_writes(&self) {
        self.lock().fail_all_writes = true;
    }

    /// Cancels every scheduled fault.
    pub fn clear_faults(&self) {
        let mut state = self.lock();
        state.fail_write_in = None;
        state.fail_sync_in = None;
        state.fail_sync_keeps = None;
        state.fail_read_in = None;
        state.corrupt_read_in = None;
        state.fail_all_writes = false;
    }

    fn mem_view(&self) -> MemView<'_> {
        MemView {
            engine: self,
            map: Arc::clone(&self.lock().current),
        }
    }

    /// Every key/value pair that reads see, in key order (for digests and debugging); a damaged
    /// value is given as stored, checksum included.
    pub fn dump(&self) -> Vec<KeyValue> {
        self.lock()
            .current
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    unseal(k, v.clone()).unwrap_or_else(|_| v.clone()),
                )
            })
            .collect()
    }
}

impl State {
    /// Counts down the scheduled read faults for a read returning `values` values: an error
    /// when the read fails, else whether it sees a damaged value.
    fn read_faults(&mut self, values: usize) -> Result<bool, StorageError> {
        if fault_fires(&mut self.fail_read_in) {
            return Err(StorageError::io(
                std::io::ErrorKind::Other,
                "injected read failure",
            ));
        }
        Ok(values > 0 && fault_fires(&mut self.corrupt_read_in))
    }
}

fn flip(bytes: &mut [u8], bit: usize) {
    if !bytes.is_empty() {
        let bit = bit % (bytes.len() * 8);
        bytes[bit / 8] ^= 1 << (bit % 8);
    }
}

/// `batch` with every put's value sealed under its key.
fn sealed(batch: WriteBatch) -> WriteBatch {
    let mut out = WriteBatch::new();
    for op in batch.into_ops() {
        match op {
            WriteOp::Put { key, value } => {
                let value = seal(&key, value);
                out.put(key, value);
            }
            WriteOp::Delete { key } => out.delete(key),
            WriteOp::DeleteRange { start, end } => out.delete_range(start, end),
        }
    }
    out
}

/// Counts down a scheduled fault; true when it fires now.
fn fault_fires(countdown: &mut Option<u64>) -> bool {
    match countdown {
        Some(1) => {
            *countdown = None;
            true
        }
        Some(n) => {
            *n -= 1;
            false
        }
        None => false,
    }
}

fn apply(map: &mut Map, batch: &WriteBatch) {
    for op in batch.ops() {
        match op {
            WriteOp::Put { key, value } => {
                map.insert(key.clone(), value.clone());
            }
            WriteOp::Delete { key } => {
                map.remove(key);
            }
            WriteOp::DeleteRange { start, end } => {
                if start < end {
                    let doomed: Vec<Vec<u8>> = map
                        .range(start.clone()..end.clone())
                        .map(|(k, _)| k.clone())
                        .collect();
                    for key in doomed {
                        map.remove(&key);
                    }
                }
            }
        }
    }
}

impl Engine for MemEngine {
    // A single read is a read through a view taken for it: one code path for faults and
    // checksums.
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        self.mem_view().get(key)
    }

    fn scan(
        &self,
        start: &[u8],
        end: &[u8],
        order: ScanOrder,
        limit: usize,
    ) -> Result<Vec<KeyValue>, StorageError> {
        self.mem_view().scan(start, end, order, limit)
    }

    fn write(&self, batch: WriteBatch) -> Result<(), StorageError> {
        let mut state = self.lock();
        if state.fail_all_writes || fault_fires(&mut state.fail_write_in) {
            return Err(StorageError::io(
                std::io::ErrorKind::Other,
                "injected write failure",
            ));
        }
        let batch = sealed(batch);
        apply(Arc::make_mut(&mut state.current), &batch);
        state.pending.push(batch);
        state.writes_total += 1;
        Ok(())
    }

    fn sync(&self) -> Result<(), StorageError> {
        let mut held = lock_gate(&self.held.0);
        while *held {
            held = self.held.1.wait(held).unwrap_or_else(|p| p.into_inner());
        }
        drop(held);
        let mut state = self.lock();
        if fault_fires(&mut state.fail_sync_in) {
            if let Some(keep) = state.fail_sync_keeps.take() {
                let pending = std::mem::take(&mut state.pending);
                for batch in pending.iter().take(keep) {
                    apply(&mut state.durable, batch);
                }
            }
            return Err(StorageError::io(
                std::io::ErrorKind::Other,
                "injected sync failure",
            ));
        }
        let pending = std::mem::take(&mut state.pending);
        for batch in &pending {
            apply(&mut state.durable, batch);
        }
        state.syncs_total += 1;
        Ok(())
    }

    /// The current map, shared: the next write copies it if the view is still alive. Reads
    /// through a view still count down the scheduled read faults.
    fn view(&self) -> Box<dyn EngineView + '_> {
        Box::new(self.mem_view())
    }
}

struct MemView<'a> {
    engine: &'a MemEngine,
    map: Arc<Map>,
}

impl EngineView for MemView<'_> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        let mut stored = self.map.get(key).cloned();
        if self
            .engine
            .lock()
            .read_faults(usize::from(stored.is_some()))?
        {
            if let Some(bytes) = stored.as_mut() {
                flip(bytes, 0);
            }
        }
        stored.map(|bytes| unseal(key, bytes)).transpose()
    }

    fn scan(
        &self,
        start: &[u8],
        end: &[u8],
        order: ScanOrder,
        limit: usize,
    ) -> Result<Vec<KeyValue>, StorageError> {
        let pairs = range_of(&self.map, start, end, order, limit);
        let damaged = self.engine.lock().read_faults(pairs.len())?;
        unseal_all(pairs, damaged)
    }
}

/// The stored pairs of `[start, end)` in `order`, at most `limit`.
fn range_of(map: &Map, start: &[u8], end: &[u8], order: ScanOrder, limit: usize) -> Vec<KeyValue> {
    if start >= end {
        return Vec::new();
    }
    let range = map
        .range::<[u8], _>((Bound::Included(start), Bound::Excluded(end)))
        .map(|(k, v)| (k.clone(), v.clone()));
    match order {
        ScanOrder::Forward => range.take(limit).collect(),
        ScanOrder::Reverse => range.rev().take(limit).collect(),
    }
}

/// Unseals scanned pairs; `damaged`: the first one's bytes are flipped first (a read fault).
fn unseal_all(mut pairs: Vec<KeyValue>, damaged: bool) -> Result<Vec<KeyValue>, StorageError> {
    if damaged {
        flip(&mut pairs[0].1, 0);
    }
    pairs
        .into_iter()
        .map(|(key, stored)| {
            let value = unseal(&key, stored)?;
            Ok((key, value))
        })
        .collect()
}
