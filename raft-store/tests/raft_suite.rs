//! openraft's own storage test suite (`openraft::testing::Suite::test_all`) run against the log
//! store and state machine on both engines.

// openraft's `StorageError` is what its suite returns.
#![allow(clippy::result_large_err)]

use std::sync::Arc;

use openraft::testing::{StoreBuilder, Suite};
use openraft::StorageError;
use raft_store::raft::{LogStore, NodeId, StateMachine, TypeConfig};
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
    ) -> Result<((), LogStore<MemEngine>, StateMachine<MemEngine>), StorageError<NodeId>> {
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
        StorageError<NodeId>,
    > {
        let dir = tempfile::tempdir().expect("temp dir");
        let engine = RocksEngine::open(&RocksOptions::new(dir.path())).expect("open rocksdb");
        let (log, sm) = parts(engine);
        Ok((dir, log, sm))
    }
}

#[test]
fn openraft_suite_passes_on_the_memory_engine() -> Result<(), StorageError<NodeId>> {
    Suite::test_all(MemBuilder)
}

#[test]
fn openraft_suite_passes_on_rocksdb() -> Result<(), StorageError<NodeId>> {
    Suite::test_all(RocksBuilder)
}
