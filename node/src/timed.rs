//! An engine wrapper that times writes for the metrics: durable writes (Raft log appends, votes)
//! and syncs as fsync time, plain batch writes (state-machine applies) as apply time.
//!
//! It reads `tokio::time::Instant`, which a simulation controls, never the wall clock directly.

use std::sync::Arc;

use raft_store::engine::{KeyValue, ScanOrder, WriteBatch};
use raft_store::{Engine, StorageError};
use tokio::time::Instant;

use crate::metrics::Metrics;

/// Forwards to the inner engine and records write durations.
pub struct TimedEngine {
    inner: Arc<dyn Engine>,
    metrics: Arc<Metrics>,
}

impl TimedEngine {
    /// Wraps `inner`, reporting to `metrics`.
    pub fn new(inner: Arc<dyn Engine>, metrics: Arc<Metrics>) -> Self {
        Self { inner, metrics }
    }
}

impl Engine for TimedEngine {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        self.inner.get(key)
    }

    fn scan(
        &self,
        start: &[u8],
        end: &[u8],
        order: ScanOrder,
        limit: usize,
    ) -> Result<Vec<KeyValue>, StorageError> {
        self.inner.scan(start, end, order, limit)
    }

    fn write(&self, batch: WriteBatch) -> Result<(), StorageError> {
        let started = Instant::now();
        let result = self.inner.write(batch);
        self.metrics.observe_apply(started.elapsed().as_secs_f64());
        result
    }

    fn sync(&self) -> Result<(), StorageError> {
        let started = Instant::now();
        let result = self.inner.sync();
        self.metrics.observe_sync(started.elapsed().as_secs_f64());
        result
    }

    fn write_durable(&self, batch: WriteBatch) -> Result<(), StorageError> {
        let started = Instant::now();
        let result = self.inner.write_durable(batch);
        self.metrics.observe_sync(started.elapsed().as_secs_f64());
        result
    }
}
