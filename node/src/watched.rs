//! An engine wrapper that watches every storage call: it times writes for the metrics (durable
//! writes and syncs as fsync time, plain batch writes as apply time) and records the first
//! storage error of any call ([`StorageHealth`]).
//!
//! A storage error is final for the running process: a disk that failed a write or a sync may
//! have lost what it acknowledged (a failed fsync can drop dirty pages), and a value that fails
//! its checksum says the disk or the memory above it cannot be trusted. The node then stops Raft
//! (it no longer votes, appends or acknowledges), refuses reads, and says so in `/readyz`
//! until it is restarted on a sound disk.
//!
//! It reads `tokio::time::Instant`, which a simulation controls, never the wall clock directly.

use std::sync::Arc;

use chainstore_model::StorageError;
use raft_store::engine::{EngineView, KeyValue, PairSource, ScanOrder, WriteBatch};
use raft_store::Engine;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::metrics::Metrics;

/// The first storage error this process saw, if any.
pub struct StorageHealth {
    failure: watch::Sender<Option<String>>,
}

impl Default for StorageHealth {
    fn default() -> Self {
        Self {
            failure: watch::Sender::new(None),
        }
    }
}

impl StorageHealth {
    /// Records `err` unless an earlier failure is already recorded.
    pub fn record(&self, err: &StorageError) {
        self.failure.send_if_modified(|failure| {
            if failure.is_some() {
                return false;
            }
            *failure = Some(err.to_string());
            true
        });
    }

    /// The first failure, if storage failed.
    pub fn failure(&self) -> Option<String> {
        self.failure.borrow().clone()
    }

    /// Waits until storage fails; returns the failure.
    pub async fn failed(&self) -> String {
        let mut watching = self.failure.subscribe();
        let failure = watching
            .wait_for(Option::is_some)
            .await
            .map(|failure| failure.clone().unwrap_or_default());
        match failure {
            Ok(failure) => failure,
            // The sender lives in `self`, which outlives this wait.
            Err(_) => std::future::pending().await,
        }
    }
}

/// Forwards to the inner engine, records write durations and the first storage error.
pub struct WatchedEngine {
    inner: Arc<dyn Engine>,
    metrics: Arc<Metrics>,
    health: Arc<StorageHealth>,
}

impl WatchedEngine {
    /// Wraps `inner`, reporting timings to `metrics` and failures to `health`.
    pub fn new(inner: Arc<dyn Engine>, metrics: Arc<Metrics>, health: Arc<StorageHealth>) -> Self {
        Self {
            inner,
            metrics,
            health,
        }
    }

    fn watch<T>(&self, result: Result<T, StorageError>) -> Result<T, StorageError> {
        if let Err(err) = &result {
            self.health.record(err);
        }
        result
    }
}

impl Engine for WatchedEngine {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        self.watch(self.inner.get(key))
    }

    fn scan(
        &self,
        start: &[u8],
        end: &[u8],
        order: ScanOrder,
        limit: usize,
    ) -> Result<Vec<KeyValue>, StorageError> {
        self.watch(self.inner.scan(start, end, order, limit))
    }

    fn write(&self, batch: WriteBatch) -> Result<(), StorageError> {
        let started = Instant::now();
        let result = self.inner.write(batch);
        self.metrics.observe_apply(started.elapsed().as_secs_f64());
        self.watch(result)
    }

    fn sync(&self) -> Result<(), StorageError> {
        let started = Instant::now();
        let result = self.inner.sync();
        self.metrics.observe_sync(started.elapsed().as_secs_f64());
        self.watch(result)
    }

    fn write_durable(&self, batch: WriteBatch) -> Result<(), StorageError> {
        let started = Instant::now();
        let result = self.inner.write_durable(batch);
        self.metrics.observe_sync(started.elapsed().as_secs_f64());
        self.watch(result)
    }

    fn replace_range(
        &self,
        start: &[u8],
        end: &[u8],
        pairs: &mut dyn Iterator<Item = Result<KeyValue, StorageError>>,
    ) -> Result<(), StorageError> {
        let started = Instant::now();
        let mut source = PairSource::new(pairs);
        let result = self.inner.replace_range(start, end, &mut source);
        self.metrics.observe_sync(started.elapsed().as_secs_f64());
        if source.failed() {
            // The input was damaged (a snapshot file that changed under us, pairs out of
            // order): refused, nothing written, and no sign that this node's disk failed.
            return result;
        }
        self.watch(result)
    }

    fn view(&self) -> Box<dyn EngineView + '_> {
        Box::new(WatchedView {
            engine: self,
            inner: self.inner.view(),
        })
    }
}

/// A view whose failed reads count towards the node's storage health, as the engine's do.
struct WatchedView<'a> {
    engine: &'a WatchedEngine,
    inner: Box<dyn EngineView + 'a>,
}

impl EngineView for WatchedView<'_> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        self.engine.watch(self.inner.get(key))
    }

    fn scan(
        &self,
        start: &[u8],
        end: &[u8],
        order: ScanOrder,
        limit: usize,
    ) -> Result<Vec<KeyValue>, StorageError> {
        self.engine.watch(self.inner.scan(start, end, order, limit))
    }

    fn scan_bounded(
        &self,
        start: &[u8],
        end: &[u8],
        limit: usize,
        bytes_max: usize,
    ) -> Result<Vec<KeyValue>, StorageError> {
        self.engine
            .watch(self.inner.scan_bounded(start, end, limit, bytes_max))
    }
}
