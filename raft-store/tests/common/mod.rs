//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod model;

use chainstore_model::{AppendRequest, ChainEvent, EventId, ExecutionId, LogEvent};
use raft_store::{ChainStore, MemEngine, RocksEngine, RocksOptions, StoreConfig};
use serde_json::{json, Value};

pub fn exec(s: &str) -> ExecutionId {
    ExecutionId::new(s).expect("valid execution id")
}

pub fn eid(s: &str) -> EventId {
    EventId::new(s).expect("valid event id")
}

pub fn payload(id: &str) -> Value {
    json!({ "kind": "step", "id": id })
}

/// An append of `id` after `prev` with the payload `payload(id)`.
pub fn req(id: &str, prev: Option<&str>) -> AppendRequest {
    AppendRequest {
        event_id: eid(id),
        prev_event_id: prev.map(eid),
        parent_execution_id: None,
        payload: payload(id),
        genesis: false,
    }
}

pub fn genesis(id: &str) -> AppendRequest {
    AppendRequest {
        genesis: true,
        ..req(id, None)
    }
}

pub fn log_event(id: &str, prev: Option<&str>) -> LogEvent {
    LogEvent {
        event_id: eid(id),
        prev_event_id: prev.map(eid),
        parent_execution_id: None,
        payload: payload(id),
    }
}

/// A linked log `ids[0] <- ids[1] <- ...`.
pub fn linked_log(ids: &[&str]) -> Vec<LogEvent> {
    ids.iter()
        .enumerate()
        .map(|(i, id)| log_event(id, if i == 0 { None } else { Some(ids[i - 1]) }))
        .collect()
}

/// A replicated event at `seq` with the same payload convention.
pub fn chain_event(exec_id: &str, seq: u64, id: &str, prev: Option<&str>) -> ChainEvent {
    ChainEvent {
        execution_id: exec(exec_id),
        exec_seq: seq,
        event_id: eid(id),
        prev_event_id: prev.map(eid),
        parent_execution_id: None,
        payload: payload(id),
        commit_index: 0,
    }
}

pub fn ids(events: &[ChainEvent]) -> Vec<String> {
    events.iter().map(|e| e.event_id.to_string()).collect()
}

pub fn mem_store() -> (MemEngine, ChainStore<MemEngine>) {
    mem_store_with(StoreConfig::default())
}

pub fn mem_store_with(config: StoreConfig) -> (MemEngine, ChainStore<MemEngine>) {
    let engine = MemEngine::new();
    let store = ChainStore::open(engine.clone(), config).expect("open store");
    (engine, store)
}

pub fn rocks_store(dir: &std::path::Path) -> ChainStore<RocksEngine> {
    let engine = RocksEngine::open(&RocksOptions::new(dir)).expect("open rocksdb");
    ChainStore::open(engine, StoreConfig::default()).expect("open store")
}
