//! openraft's own storage test suite (`openraft::testing::log::Suite::test_all`) run against the
//! log store and state machine on both engines.

// openraft's `StorageError` is what its suite returns.
#![allow(clippy::result_large_err)]

use std::sync::Arc;

use openraft::testing::log::{StoreBuilder, Suite};
use openraft::StorageError;
use raft_store::raft::{LogStore, StateMachine, TypeConfig};
use raft_store::{ChainStore, Engine, MemEngine, RocksEngine, RocksOptions, StoreConfig};

fn parts<E: Engine>(engine: E) -> (LogStore<E>, StateMachine<E>) {
    let engine = Arc::new(engine);
    let store = ChainStore::open(Arc::clone(&engine), StoreConfig::default()).expect("open store");
    (
        LogStore::new(Arc::clone(&engine)),
        StateMachine::new(Arc::new(store)),
    )
}

struct MemBuilder;

impl StoreBuilder<TypeConfig, LogStore<MemEngine>, StateMachine<MemEngine>> for MemBuilder {
    async fn build(
        &self,
    ) -> Result<((), LogStore<MemEngine>, StateMachine<MemEngine>), StorageError<TypeConfig>> {
        let (log, sm) = parts(MemEngine::new());
        Ok(((), log, sm))
    }
}

struct RocksBuilder;

impl StoreBuilder<TypeConfig, LogStore<RocksEngine>, StateMachine<RocksEngine>, tempfile::TempDir>
    for RocksBuilder
{
    async fn build(
        &self,
    ) -> Result<
        (
            tempfile::TempDir,
            LogStore<RocksEngine>,
            StateMachine<RocksEngine>,
        ),
        StorageError<TypeConfig>,
    > {
        let dir = tempfile::tempdir().expect("temp dir");
        let engine = RocksEngine::open(&RocksOptions::new(dir.path())).expect("open rocksdb");
        let (log, sm) = parts(engine);
        Ok((dir, log, sm))
    }
}

/// The suite sleeps (a second, several times), so its runtime has a clock.
fn run<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(future)
}

#[test]
fn openraft_suite_passes_on_the_memory_engine() -> Result<(), StorageError<TypeConfig>> {
    run(Suite::test_all(MemBuilder))
}

#[test]
fn openraft_suite_passes_on_rocksdb() -> Result<(), StorageError<TypeConfig>> {
    run(Suite::test_all(RocksBuilder))
}
