//! Crash and I/O-fault tests on the in-memory engine.
//!
//! A scripted history touches every write path and every kind of execution state. For each
//! operation of the history, and for each write that operation makes, two faults are injected:
//! the write fails with an I/O error, or the process crashes with only the first N of the
//! operation's unsynced batches surviving (N = 0 ..= all). After the fault, and again after the
//! store is reopened on the same engine, no guarded read may answer `Authoritative` with anything
//! but the true chain: the model's answer from just before the operation or just after it. Then
//! the operation is retried without faults, and every read must equal the model's.

mod common;

use chainstore_model::{AppendRequest, ChainEvent, Guarded, LogEvent};
use common::model::Model;
use common::*;
use raft_store::{ChainStore, MemEngine, StoreConfig};

#[derive(Clone)]
enum Op {
    Append(&'static str, AppendRequest),
    Replicate(&'static str, Vec<ChainEvent>),
    Populate(&'static str, Vec<LogEvent>),
}

const EXECS: [&str; 5] = ["plain", "gen", "logged", "repl", "empty"];

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i}")).collect()
}

fn log_of(prefix: &str, n: usize) -> Vec<LogEvent> {
    let ids = names(prefix, n);
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    linked_log(&refs)
}

fn history() -> Vec<Op> {
    let mut forked = log_of("l", 6);
    forked[4].payload = serde_json::json!({ "rewritten": true });
    vec![
        Op::Append("plain", req("p1", None)),
        Op::Append("plain", req("p2", Some("p1"))),
        Op::Append("gen", genesis("g1")),
        Op::Append("gen", req("g2", Some("g1"))),
        Op::Populate("logged", log_of("l", 5)),
        Op::Populate("logged", log_of("l", 9)),
        Op::Populate("logged", log_of("l", 3)),
        Op::Append("logged", req("l9", Some("l8"))),
        Op::Populate("logged", log_of("l", 10)),
        Op::Populate("logged", forked),
        Op::Populate("logged", log_of("l", 11)),
        Op::Replicate("repl", vec![chain_event("repl", 3, "c", Some("b"))]),
        Op::Replicate(
            "repl",
            vec![
                chain_event("repl", 1, "a", None),
                chain_event("repl", 2, "b", Some("a")),
            ],
        ),
        Op::Populate("repl", linked_log(&["a", "b", "c", "d"])),
        Op::Populate("empty", vec![]),
        Op::Populate("plain", linked_log(&["p1", "p2", "p3"])),
        Op::Append("plain", req("p4", Some("p3"))),
    ]
}

fn config(sync_writes: bool) -> StoreConfig {
    StoreConfig {
        populate_batch_events_max: 2,
        sync_writes,
        ..StoreConfig::default()
    }
}

fn apply_store(store: &ChainStore<MemEngine>, op: &Op, commit_index: u64) -> bool {
    match op {
        Op::Append(x, r) => store.append(&exec(x), r, commit_index).is_ok(),
        Op::Replicate(x, events) => store
            .apply_replicated(&exec(x), events, commit_index)
            .is_ok(),
        Op::Populate(x, log) => store.populate_from_log(&exec(x), log, commit_index).is_ok(),
    }
}

fn apply_model(model: &mut Model, op: &Op, commit_index: u64) {
    // Rejections (not_head, forked, ...) change nothing in the model either.
    let _ = match op {
        Op::Append(x, r) => model
            .append(&exec(x), r, commit_index)
            .map(|_| ())
            .map_err(|_| ()),
        Op::Replicate(x, events) => model
            .replicated(&exec(x), events, commit_index)
            .map(|_| ())
            .map_err(|_| ()),
        Op::Populate(x, log) => model
            .populate(&exec(x), log, commit_index)
            .map(|_| ())
            .map_err(|_| ()),
    };
}

/// A fresh store with the first `k` operations applied durably, and the models before and after
/// operation `k`.
fn prepared(k: usize, sync_writes: bool) -> (MemEngine, ChainStore<MemEngine>, Model, Model) {
    let ops = history();
    let engine = MemEngine::new();
    let store = ChainStore::open(engine.clone(), config(true)).unwrap();
    let mut before = Model::default();
    for (i, op) in ops[..k].iter().enumerate() {
        apply_store(&store, op, i as u64 + 1);
        apply_model(&mut before, op, i as u64 + 1);
    }
    drop(store);
    let store = ChainStore::open(engine.clone(), config(sync_writes)).unwrap();
    let mut after = Model::default();
    for (i, op) in ops[..=k].iter().enumerate() {
        apply_model(&mut after, op, i as u64 + 1);
    }
    (engine, store, before, after)
}

/// The first law, checked on every execution: an authoritative answer is the model's answer
/// from before or after the operation, never anything else.
fn assert_never_wrong(store: &ChainStore<MemEngine>, before: &Model, after: &Model, context: &str) {
    for name in EXECS {
        let x = exec(name);
        let got = store.chain_if_authoritative(&x).unwrap();
        if let Guarded::Authoritative(_) = got {
            assert!(
                got == before.guarded(&x) || got == after.guarded(&x),
                "{context}: {name} answered {got:?}, before {:?}, after {:?}",
                before.guarded(&x),
                after.guarded(&x)
            );
        }
    }
}

fn assert_equals_model(store: &ChainStore<MemEngine>, model: &Model, context: &str) {
    for name in EXECS {
        let x = exec(name);
        assert_eq!(
            store.chain_if_authoritative(&x).unwrap(),
            model.guarded(&x),
            "{context}: {name}"
        );
        assert_eq!(
            store.chain(&x).unwrap(),
            model.chain(&x),
            "{context}: {name} raw"
        );
    }
}

/// Counts the batches operation `k` writes when nothing fails.
fn writes_of(k: usize) -> u64 {
    let (engine, store, _, _) = prepared(k, true);
    let before = engine.writes_total();
    apply_store(&store, &history()[k], k as u64 + 1);
    engine.writes_total() - before
}

#[test]
fn an_io_error_at_any_write_of_any_operation_never_serves_a_wrong_chain() {
    let ops = history();
    let mut faults = 0;
    for (k, op) in ops.iter().enumerate() {
        for failing in 1..=writes_of(k) {
            let context = format!("op {k}, write {failing} fails");
            let (engine, store, before, after) = prepared(k, true);
            engine.fail_write_after(failing);
            assert!(
                !apply_store(&store, op, k as u64 + 1),
                "{context}: the fault must surface"
            );
            assert_never_wrong(&store, &before, &after, &context);
            let reopened = ChainStore::open(engine.clone(), config(true)).unwrap();
            assert_never_wrong(&reopened, &before, &after, &format!("{context}, reopened"));
            apply_store(&reopened, op, k as u64 + 1);
            assert_equals_model(&reopened, &after, &format!("{context}, retried"));
            faults += 1;
        }
    }
    assert!(
        faults >= ops.len(),
        "every operation was faulted at least once ({faults})"
    );
}

#[test]
fn a_crash_after_any_write_of_any_operation_never_serves_a_wrong_chain() {
    let ops = history();
    let mut crashes = 0;
    for (k, op) in ops.iter().enumerate() {
        let batches = writes_of(k) as usize;
        for keep in 0..=batches {
            let context = format!("op {k}, crash keeping {keep} of {batches} batches");
            let (engine, store, before, after) = prepared(k, false);
            apply_store(&store, op, k as u64 + 1);
            assert_eq!(
                engine.pending_batches(),
                batches,
                "{context}: nothing synced yet"
            );
            drop(store);
            engine.crash_keeping(keep);
            let reopened = ChainStore::open(engine.clone(), config(true)).unwrap();
            assert_never_wrong(&reopened, &before, &after, &context);
            apply_store(&reopened, op, k as u64 + 1);
            assert_equals_model(&reopened, &after, &format!("{context}, retried"));
            crashes += 1;
        }
    }
    assert!(crashes > ops.len());
}

#[test]
fn the_history_exercises_multi_batch_populates() {
    assert!((0..history().len()).any(|k| writes_of(k) >= 3));
}
