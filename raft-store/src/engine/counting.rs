//! A wrapper that counts engine operations. The cost rules of SPEC §3 ("append = O(1) point reads
//! and one batch", "a chain read = one scan") are tested by counting, not by timing.

use std::sync::atomic::{AtomicU64, Ordering};

use super::{Engine, EngineView, KeyValue, ScanOrder, StorageError, WriteBatch};

/// Operation counts since creation or the last [`CountingEngine::reset`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpCounts {
    /// Point reads.
    pub gets: u64,
    /// Range scans.
    pub scans: u64,
    /// Key/value pairs returned by all scans.
    pub scanned_pairs: u64,
    /// Write batches (durable or not).
    pub batches: u64,
    /// Syncs, counting the sync inside `write_durable`.
    pub syncs: u64,
}

/// An [`Engine`] that forwards to `inner` and counts what passes through.
pub struct CountingEngine<E> {
    inner: E,
    gets: AtomicU64,
    scans: AtomicU64,
    scanned_pairs: AtomicU64,
    batches: AtomicU64,
    syncs: AtomicU64,
}

impl<E: Engine> CountingEngine<E> {
    /// Wraps `inner` with all counters at zero.
    pub fn new(inner: E) -> Self {
        Self {
            inner,
            gets: AtomicU64::new(0),
            scans: AtomicU64::new(0),
            scanned_pairs: AtomicU64::new(0),
            batches: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
        }
    }

    /// The counts so far.
    pub fn counts(&self) -> OpCounts {
        OpCounts {
            gets: self.gets.load(Ordering::Relaxed),
            scans: self.scans.load(Ordering::Relaxed),
            scanned_pairs: self.scanned_pairs.load(Ordering::Relaxed),
            batches: self.batches.load(Ordering::Relaxed),
            syncs: self.syncs.load(Ordering::Relaxed),
        }
    }

    /// Sets every counter back to zero.
    pub fn reset(&self) {
        for counter in [
            &self.gets,
            &self.scans,
            &self.scanned_pairs,
            &self.batches,
            &self.syncs,
        ] {
            counter.store(0, Ordering::Relaxed);
        }
    }

    /// The wrapped engine.
    pub fn inner(&self) -> &E {
        &self.inner
    }

    /// Counts one scan and the pairs it returned.
    fn counted(
        &self,
        scanned: Result<Vec<KeyValue>, StorageError>,
    ) -> Result<Vec<KeyValue>, StorageError> {
        self.scans.fetch_add(1, Ordering::Relaxed);
        let pairs = scanned?;
        self.scanned_pairs
            .fetch_add(pairs.len() as u64, Ordering::Relaxed);
        Ok(pairs)
    }
}

impl<E: Engine> Engine for CountingEngine<E> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        self.gets.fetch_add(1, Ordering::Relaxed);
        self.inner.get(key)
    }

    fn scan(
        &self,
        start: &[u8],
        end: &[u8],
        order: ScanOrder,
        limit: usize,
    ) -> Result<Vec<KeyValue>, StorageError> {
        self.counted(self.inner.scan(start, end, order, limit))
    }

    fn write(&self, batch: WriteBatch) -> Result<(), StorageError> {
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.inner.write(batch)
    }

    fn sync(&self) -> Result<(), StorageError> {
        self.syncs.fetch_add(1, Ordering::Relaxed);
        self.inner.sync()
    }

    fn write_durable(&self, batch: WriteBatch) -> Result<(), StorageError> {
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.syncs.fetch_add(1, Ordering::Relaxed);
        self.inner.write_durable(batch)
    }

    fn replace_range(
        &self,
        start: &[u8],
        end: &[u8],
        pairs: &mut dyn Iterator<Item = Result<KeyValue, StorageError>>,
    ) -> Result<(), StorageError> {
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.syncs.fetch_add(1, Ordering::Relaxed);
        self.inner.replace_range(start, end, pairs)
    }

    fn view(&self) -> Box<dyn EngineView + '_> {
        Box::new(CountingView {
            counts: self,
            inner: self.inner.view(),
        })
    }
}

/// A view whose reads count towards the engine's counters.
struct CountingView<'a, E> {
    counts: &'a CountingEngine<E>,
    inner: Box<dyn EngineView + 'a>,
}

impl<E: Engine> EngineView for CountingView<'_, E> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        self.counts.gets.fetch_add(1, Ordering::Relaxed);
        self.inner.get(key)
    }

    fn scan(
        &self,
        start: &[u8],
        end: &[u8],
        order: ScanOrder,
        limit: usize,
    ) -> Result<Vec<KeyValue>, StorageError> {
        self.counts
            .counted(self.inner.scan(start, end, order, limit))
    }

    fn scan_bounded(
        &self,
        start: &[u8],
        end: &[u8],
        limit: usize,
        bytes_max: usize,
    ) -> Result<Vec<KeyValue>, StorageError> {
        self.counts
            .counted(self.inner.scan_bounded(start, end, limit, bytes_max))
    }
}
