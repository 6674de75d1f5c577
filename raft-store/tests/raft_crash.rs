//! Crash points on the Raft side of the storage, on the in-memory engine.
//!
//! `crash.rs` faults every write of the chain operations; this file does the same for the
//! operations openraft drives and the offline restore: snapshot install, the apply of an effect,
//! of an entry holding the effects of three requests (one an append of three events), of a
//! membership and of a blank entry, log append, truncation and purge, the vote, and restoring a
//! backup into an empty store. For each of them, and for each write and each sync it makes:
//! - the write (or the sync) fails: the operation reports the failure, and a reader at that
//!   moment sees the whole state as it was before or as it is after the operation, nothing in
//!   between (the reader runs exactly between two writes);
//! - then the process crashes keeping every prefix of the unsynced batches in turn: the reopened
//!   store is again the old state or the new one, its log, vote and applied state read back, and
//!   retrying the operation yields the new state;
//! - with no fault, a crash keeping any prefix leaves the old or the new state, and the new one
//!   whenever the operation is one openraft relies on being durable once it returns.
//!
//! "The state" is every stored key and value (state machine, log, vote, purge marker), and the
//! guarded reads of every execution: never newer than the applied index says (a snapshot's
//! contents without its applied id, or the reverse), never older than what was acknowledged.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use chainstore_model::Guarded;
use common::*;
use openraft::storage::{RaftLogReader, RaftLogStorage, RaftStateMachine};
use openraft::{BasicNode, RaftSnapshotBuilder};
use raft_store::raft::{
    restore_backup, take_backup, Command, CommandResult, Entry, EntryPayload, LogId, LogStore,
    Membership, NodeId, SnapshotData, SnapshotMeta, StateMachine, Vote,
};
use raft_store::{AppendPlan, BatchPlan, ChainStore, Engine, MemEngine, StoreConfig};

type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

const EXECS: [&str; 3] = ["x", "y", "z"];

/// A node's storage over one engine, as the node opens it.
struct Parts {
    engine: MemEngine,
    log: LogStore<MemEngine>,
    sm: StateMachine<MemEngine>,
}

fn open(engine: &MemEngine) -> Parts {
    let shared = Arc::new(engine.clone());
    let store = ChainStore::open(
        Arc::clone(&shared),
        StoreConfig {
            sync_writes: false,
            ..StoreConfig::default()
        },
    )
    .expect("the store opens");
    Parts {
        engine: engine.clone(),
        log: LogStore::new(Arc::clone(&shared)),
        sm: StateMachine::new(Arc::new(store)),
    }
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime")
        .block_on(future)
}

fn log_id(term: u64, index: u64) -> LogId {
    raft_store::raft::log_id(term, 1, index)
}

fn blank(term: u64, index: u64) -> Entry {
    Entry {
        log_id: log_id(term, index),
        payload: EntryPayload::Blank,
    }
}

fn membership(term: u64, index: u64, voters: &[NodeId]) -> Entry {
    let ids: BTreeSet<NodeId> = voters.iter().copied().collect();
    let nodes: BTreeMap<NodeId, BasicNode> = voters
        .iter()
        .map(|id| (*id, BasicNode::new(format!("node{id}:7001"))))
        .collect();
    Entry {
        log_id: log_id(term, index),
        payload: EntryPayload::Membership(Membership::new(vec![ids], nodes).expect("a membership")),
    }
}

/// The entry that appends `id` after `prev` to `x`, evaluated against the current state.
fn append_entry(
    parts: &Parts,
    term: u64,
    index: u64,
    x: &str,
    id: &str,
    prev: Option<&str>,
) -> Entry {
    let request = if prev.is_none() {
        genesis(id)
    } else {
        req(id, prev)
    };
    match parts.sm.store().evaluate_append(&exec(x), &request) {
        Ok(AppendPlan::Write(effect)) => Entry {
            log_id: log_id(term, index),
            payload: EntryPayload::Normal(Command::Effect(effect)),
        },
        other => panic!("{x}/{id} must be a write, got {other:?}"),
    }
}

fn write_and_apply(parts: &mut Parts, entry: Entry) {
    parts.log.write_entries([entry.clone()]).expect("log write");
    parts.sm.apply_entries([entry]).expect("apply");
}

/// The node before every operation: a membership, four appends over two executions and a blank
/// in terms 1 and 2, applied through index 5; entry 6 (an append) is in the log, not applied;
/// the vote is for term 2. Everything is durable.
fn base() -> Parts {
    let mut parts = open(&MemEngine::new());
    write_and_apply(&mut parts, membership(1, 1, &[1, 2, 3]));
    let e = append_entry(&parts, 1, 2, "x", "a1", None);
    write_and_apply(&mut parts, e);
    let e = append_entry(&parts, 1, 3, "x", "a2", Some("a1"));
    write_and_apply(&mut parts, e);
    write_and_apply(&mut parts, blank(2, 4));
    let e = append_entry(&parts, 2, 5, "y", "b1", None);
    write_and_apply(&mut parts, e);
    let next = unapplied(&parts);
    parts.log.write_entries([next]).expect("log write");
    block_on(parts.log.save_vote(&Vote::new(2, 1))).expect("vote");
    parts.engine.sync().expect("sync");
    parts
}

/// Entry 6 of the base: the next append to `x`.
fn unapplied(parts: &Parts) -> Entry {
    append_entry(parts, 2, 6, "x", "a3", Some("a2"))
}

/// Entry 6 as the writes of three requests in one entry: an append of three events to `x`
/// (`a3`, `a4`, `a5`, linked in order), the first event of `z` and the next of `y`.
fn effects_entry(parts: &Parts) -> Entry {
    let three = [
        req("a3", Some("a2")),
        req("a4", Some("a3")),
        req("a5", Some("a4")),
    ];
    let x = match parts.sm.store().evaluate_append_batch(&exec("x"), &three) {
        Ok(BatchPlan {
            write: Some(effect),
            ..
        }) => effect,
        other => panic!("three new events must be a write, got {other:?}"),
    };
    Entry {
        log_id: log_id(2, 6),
        payload: EntryPayload::Normal(Command::Effects(vec![
            x,
            effect(append_entry(parts, 2, 6, "z", "c1", None)),
            effect(append_entry(parts, 2, 6, "y", "b2", Some("b1"))),
        ])),
    }
}

fn effect(entry: Entry) -> raft_store::Effect {
    match entry.payload {
        EntryPayload::Normal(Command::Effect(effect)) => effect,
        other => panic!("an append entry holds one effect, not {other:?}"),
    }
}

/// A node further on than the base (through index 9, a third execution, a membership change),
/// whose snapshot and backup the install and restore operations use.
fn donor() -> Parts {
    let mut parts = base();
    let e = unapplied(&parts);
    parts.sm.apply_entries([e]).expect("apply");
    let e = append_entry(&parts, 3, 7, "z", "c1", None);
    write_and_apply(&mut parts, e);
    write_and_apply(&mut parts, membership(3, 8, &[1, 2]));
    let e = append_entry(&parts, 3, 9, "x", "a4", Some("a3"));
    write_and_apply(&mut parts, e);
    parts.engine.sync().expect("sync");
    parts
}

fn donor_snapshot() -> (SnapshotMeta, Vec<u8>) {
    let mut sm = donor().sm;
    let mut snapshot = block_on(sm.build_snapshot()).expect("snapshot");
    let bytes = snapshot.snapshot.to_vec().expect("snapshot bytes");
    (snapshot.meta, bytes)
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Op {
    InstallSnapshot,
    ApplyEffect,
    /// One entry holding the writes of three requests on three executions, one of them an
    /// append of three events.
    ApplyEffects,
    ApplyMembership,
    ApplyBlank,
    AppendLog,
    Truncate,
    Purge,
    SaveVote,
    Restore,
}

const OPS: [Op; 10] = [
    Op::InstallSnapshot,
    Op::ApplyEffect,
    Op::ApplyEffects,
    Op::ApplyMembership,
    Op::ApplyBlank,
    Op::AppendLog,
    Op::Truncate,
    Op::Purge,
    Op::SaveVote,
    Op::Restore,
];

impl Op {
    /// Whether openraft (or the operator) is told the operation is durable when it returns.
    /// Applies are not synced: the log is the durable record and they are re-applied.
    fn durable(self) -> bool {
        !matches!(
            self,
            Op::ApplyEffect | Op::ApplyEffects | Op::ApplyMembership | Op::ApplyBlank
        )
    }

    /// The store the operation starts from, durable.
    fn prepare(self) -> MemEngine {
        match self {
            // An empty store, opened once (the format record written), as `restore` finds it.
            Op::Restore => open(&MemEngine::new()).engine,
            _ => base().engine,
        }
    }

    fn run(self, parts: &mut Parts, inputs: &Inputs) -> Result<(), String> {
        let err = |e: &dyn std::fmt::Display| e.to_string();
        match self {
            Op::InstallSnapshot => {
                let (meta, data) = inputs.snapshot.clone();
                block_on(parts.sm.install_snapshot(&meta, SnapshotData::memory(data)))
                    .map_err(|e| err(&e))
            }
            Op::ApplyEffect => {
                let entry = unapplied(parts);
                parts
                    .sm
                    .apply_entries([entry])
                    .map(drop)
                    .map_err(|e| err(&e))
            }
            Op::ApplyEffects => {
                let entry = effects_entry(parts);
                let results = parts.sm.apply_entries([entry]).map_err(|e| err(&e))?;
                match results.as_slice() {
                    [CommandResult::Each(each)]
                        if each.len() == 3
                            && each.iter().all(|r| matches!(r, CommandResult::Applied(_))) =>
                    {
                        Ok(())
                    }
                    other => Err(format!("three effects applied as {other:?}")),
                }
            }
            Op::ApplyMembership => parts
                .sm
                .apply_entries([membership(2, 6, &[1, 2, 3, 4])])
                .map(drop)
                .map_err(|e| err(&e)),
            Op::ApplyBlank => parts
                .sm
                .apply_entries([blank(2, 6)])
                .map(drop)
                .map_err(|e| err(&e)),
            Op::AppendLog => parts
                .log
                .write_entries([blank(3, 7), membership(3, 8, &[1, 2]), blank(3, 9)])
                .map_err(|e| err(&e)),
            Op::Truncate => {
                block_on(parts.log.truncate_after(Some(log_id(1, 2)))).map_err(|e| err(&e))
            }
            Op::Purge => block_on(parts.log.purge(log_id(1, 3))).map_err(|e| err(&e)),
            Op::SaveVote => block_on(parts.log.save_vote(&Vote::new(3, 2))).map_err(|e| err(&e)),
            Op::Restore => {
                let voters: BTreeMap<NodeId, String> =
                    (1..=3).map(|id| (id, format!("new{id}:7001"))).collect();
                block_on(restore_backup(
                    Arc::new(parts.engine.clone()),
                    1,
                    &voters,
                    inputs.backup.clone(),
                ))
                .map(drop)
                .map_err(|e| err(&e))
            }
        }
    }
}

/// What the operations install.
struct Inputs {
    snapshot: (SnapshotMeta, Vec<u8>),
    backup: Vec<u8>,
}

fn inputs() -> Inputs {
    Inputs {
        snapshot: donor_snapshot(),
        backup: take_backup(&donor().engine).expect("backup").data,
    }
}

/// Everything a reader or a restarted node can observe.
#[derive(Debug, PartialEq)]
struct View {
    pairs: Pairs,
    reads: Vec<Guarded>,
}

fn view(parts: &Parts) -> View {
    View {
        pairs: parts.engine.dump(),
        reads: EXECS
            .iter()
            .map(|x| {
                parts
                    .sm
                    .store()
                    .chain_if_authoritative(&exec(x))
                    .expect("guarded read")
            })
            .collect(),
    }
}

/// The operation's state before and after, and the writes and syncs it makes, fault-free.
struct Reference {
    old: View,
    new: View,
    writes: u64,
    syncs: u64,
}

fn reference(op: Op, inputs: &Inputs) -> Reference {
    let mut parts = open(&op.prepare());
    let old = view(&parts);
    let (writes, syncs) = (parts.engine.writes_total(), parts.engine.syncs_total());
    op.run(&mut parts, inputs)
        .unwrap_or_else(|e| panic!("{op:?} fails with no fault: {e}"));
    let writes = parts.engine.writes_total() - writes;
    let syncs = parts.engine.syncs_total() - syncs;
    parts.engine.sync().expect("sync");
    let new = view(&open(&parts.engine));
    assert_ne!(old, new, "{op:?} must change the state");
    Reference {
        old,
        new,
        writes,
        syncs,
    }
}

fn assert_old_or_new(got: &View, reference: &Reference, context: &str) {
    assert!(
        *got == reference.old || *got == reference.new,
        "{context}: the state is neither the old nor the new one\n got reads {:?}\n old reads {:?}\n new reads {:?}\n got keys {:?}",
        got.reads,
        reference.old.reads,
        reference.new.reads,
        got.pairs
            .iter()
            .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
            .collect::<Vec<_>>(),
    );
}

/// Reopens the store after a crash: the store, the log state, the vote and the applied state
/// read back, the state is the old or the new one, and a retry (when needed) reaches the new.
fn reopen_and_retry(
    engine: &MemEngine,
    op: Op,
    inputs: &Inputs,
    reference: &Reference,
    context: &str,
) {
    let mut parts = open(engine);
    block_on(parts.log.get_log_state()).unwrap_or_else(|e| panic!("{context}: log state: {e}"));
    block_on(parts.log.read_vote()).unwrap_or_else(|e| panic!("{context}: vote: {e}"));
    block_on(parts.sm.applied_state()).unwrap_or_else(|e| panic!("{context}: applied: {e}"));
    let got = view(&parts);
    assert_old_or_new(&got, reference, &format!("{context}, reopened"));
    if got != reference.new {
        op.run(&mut parts, inputs)
            .unwrap_or_else(|e| panic!("{context}: the retry fails: {e}"));
        assert!(
            view(&parts) == reference.new,
            "{context}: the retry does not reach the new state"
        );
    }
}

#[derive(Clone, Copy, Debug)]
enum Fault {
    Write(u64),
    Sync(u64),
}

/// Runs `op` with `fault`, reads at the moment it fails, then crashes keeping `keep` of the
/// unsynced batches (`None`: count them and keep none). Returns the number of unsynced batches.
fn faulted_run(
    op: Op,
    inputs: &Inputs,
    reference: &Reference,
    fault: Fault,
    keep: Option<usize>,
) -> usize {
    let context = format!("{op:?}, {fault:?} fails, crash keeping {keep:?}");
    let mut parts = open(&op.prepare());
    match fault {
        Fault::Write(n) => parts.engine.fail_write_after(n),
        Fault::Sync(n) => parts.engine.fail_sync_after(n),
    }
    assert!(
        op.run(&mut parts, inputs).is_err(),
        "{context}: the fault must surface"
    );
    parts.engine.clear_faults();
    assert_old_or_new(
        &view(&parts),
        reference,
        &format!("{context}, read at the failure"),
    );
    let pending = parts.engine.pending_batches();
    let engine = parts.engine.clone();
    drop(parts);
    engine.crash_keeping(keep.unwrap_or(0));
    reopen_and_retry(&engine, op, inputs, reference, &context);
    pending
}

#[test]
fn a_fault_at_any_write_or_sync_of_a_raft_storage_operation_leaves_the_old_state_or_the_new() {
    let inputs = inputs();
    let mut faults = 0;
    for op in OPS {
        let reference = reference(op, &inputs);
        assert!(reference.writes >= 1, "{op:?} writes");
        let all = (1..=reference.writes)
            .map(Fault::Write)
            .chain((1..=reference.syncs).map(Fault::Sync));
        for fault in all {
            let pending = faulted_run(op, &inputs, &reference, fault, None);
            for keep in 1..=pending {
                faulted_run(op, &inputs, &reference, fault, Some(keep));
            }
            faults += 1;
        }
    }
    assert!(faults > OPS.len(), "every operation faulted ({faults})");
}

#[test]
fn a_crash_after_a_raft_storage_operation_keeps_the_old_state_or_the_new_and_the_new_once_durable()
{
    let inputs = inputs();
    for op in OPS {
        let reference = reference(op, &inputs);
        let mut keep = 0;
        loop {
            let context = format!("{op:?} done, crash keeping {keep}");
            let mut parts = open(&op.prepare());
            op.run(&mut parts, &inputs).expect("no fault");
            let pending = parts.engine.pending_batches();
            let engine = parts.engine.clone();
            drop(parts);
            engine.crash_keeping(keep);
            let got = view(&open(&engine));
            assert_old_or_new(&got, &reference, &context);
            if op.durable() {
                assert!(
                    got == reference.new,
                    "{context}: {op:?} returned, so it must survive a crash"
                );
            }
            reopen_and_retry(&engine, op, &inputs, &reference, &context);
            if keep >= pending {
                break;
            }
            keep += 1;
        }
    }
}

/// Effects of one entry are staged against the store as it was before the entry, so two on one
/// execution would not see each other: the second is refused, deterministically, on every
/// replica, and the first applies.
#[test]
fn a_second_effect_on_one_execution_in_an_entry_is_refused_and_the_first_applies() {
    let parts = base();
    let first = effect(unapplied(&parts));
    let mut second = effect(append_entry(&parts, 2, 6, "x", "a3-twin", Some("a2")));
    second.events[0].exec_seq = 3;
    let entry = Entry {
        log_id: log_id(2, 6),
        payload: EntryPayload::Normal(Command::Effects(vec![first, second])),
    };
    let results = parts.sm.apply_entries([entry]).expect("apply");
    match results.as_slice() {
        [CommandResult::Each(each)] => {
            assert!(matches!(each[0], CommandResult::Applied(_)), "{each:?}");
            assert!(
                matches!(&each[1], CommandResult::Rejected(raft_store::raft::Rejection::Malformed(m)) if m.contains("second effect")),
                "{each:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    let chain = parts
        .sm
        .store()
        .chain_if_authoritative(&exec("x"))
        .expect("read");
    let Guarded::Authoritative(events) = chain else {
        panic!("{chain:?}")
    };
    let ids: Vec<&str> = events.iter().map(|e| e.event_id.as_str()).collect();
    assert_eq!(ids, ["a1", "a2", "a3"]);
}

#[test]
fn the_restored_store_is_the_backup_with_the_new_membership_and_a_purged_log() {
    let inputs = inputs();
    let mut parts = open(&Op::Restore.prepare());
    Op::Restore.run(&mut parts, &inputs).expect("restore");
    let parts = open(&parts.engine);
    let donor = donor();
    for x in EXECS {
        assert_eq!(
            parts.sm.store().chain_if_authoritative(&exec(x)).unwrap(),
            donor.sm.store().chain_if_authoritative(&exec(x)).unwrap(),
            "{x}"
        );
    }
    let mut log = parts.log;
    let state = block_on(log.get_log_state()).unwrap();
    assert_eq!(state.last_purged_log_id, Some(log_id(3, 9)));
    assert_eq!(state.last_log_id, Some(log_id(3, 9)));
    assert_eq!(block_on(log.read_vote()).unwrap(), Some(Vote::new(3, 1)));
    let mut sm = parts.sm;
    let (applied, membership) = block_on(sm.applied_state()).unwrap();
    assert_eq!(applied, Some(log_id(3, 9)));
    let voters: Vec<NodeId> = membership.membership().voter_ids().collect();
    assert_eq!(voters, vec![1, 2, 3]);
}

/// Every cut and every damaged byte of a snapshot (installed over the base) and of a backup
/// (restored into an empty store) is refused, and refused before anything is written: the
/// engine's writes counter has not moved and every key and guarded read is as it was.
#[test]
fn a_damaged_or_truncated_snapshot_or_backup_is_refused_before_anything_is_written() {
    let inputs = inputs();
    let (meta, snapshot) = inputs.snapshot.clone();
    let variants = |bytes: &[u8]| {
        let mut all: Vec<(String, Vec<u8>)> = (0..bytes.len())
            .map(|cut| (format!("cut at byte {cut}"), bytes[..cut].to_vec()))
            .collect();
        for at in 0..bytes.len() {
            let mut damaged = bytes.to_vec();
            damaged[at] ^= 0x10;
            all.push((format!("byte {at} changed"), damaged));
        }
        all
    };
    for op in [Op::InstallSnapshot, Op::Restore] {
        let mut parts = open(&op.prepare());
        let before = view(&parts);
        let writes = parts.engine.writes_total();
        let source = match op {
            Op::InstallSnapshot => &snapshot,
            _ => &inputs.backup,
        };
        let tried = variants(source);
        for (what, bytes) in &tried {
            let outcome = match op {
                Op::InstallSnapshot => block_on(
                    parts
                        .sm
                        .install_snapshot(&meta, SnapshotData::memory(bytes.clone())),
                )
                .map_err(|e| e.to_string()),
                _ => {
                    let voters: BTreeMap<NodeId, String> =
                        (1..=3).map(|id| (id, format!("new{id}:7001"))).collect();
                    block_on(restore_backup(
                        Arc::new(parts.engine.clone()),
                        1,
                        &voters,
                        bytes.clone(),
                    ))
                    .map(drop)
                    .map_err(|e| e.to_string())
                }
            };
            assert!(outcome.is_err(), "{op:?}: {what}: accepted");
            assert_eq!(
                parts.engine.writes_total(),
                writes,
                "{op:?}: {what}: refused, but after a write"
            );
        }
        assert_eq!(view(&parts), before, "{op:?}: the state changed");
        println!("{op:?}: {} damaged or cut files refused", tried.len());
        // The undamaged file still goes in: the refusals were the damage's doing.
        op.run(&mut parts, &inputs)
            .expect("the whole file installs");
        assert_ne!(view(&parts), before);
    }
}

/// A node keeps its snapshots in files and replaces its state through RocksDB's table
/// ingestion: a snapshot received into a file installs exactly as one held in memory, a snapshot
/// built into a file is byte for byte the same file, a damaged one changes nothing, and only the
/// current snapshot's file stays in the directory.
#[test]
fn snapshots_kept_in_files_on_rocksdb_install_and_build_like_those_in_memory() {
    use raft_store::engine::{RocksEngine, RocksOptions, ScanOrder};
    use raft_store::raft::SnapshotDir;
    use tokio::io::AsyncWriteExt;

    let (meta, bytes) = donor_snapshot();
    fn state_of(engine: &dyn Engine) -> Result<Pairs, chainstore_model::StorageError> {
        engine.scan(b"a", b"y", ScanOrder::Forward, usize::MAX)
    }

    // The reference: installed in memory.
    let mut reference = open(&base().engine);
    block_on(
        reference
            .sm
            .install_snapshot(&meta, SnapshotData::memory(bytes.clone())),
    )
    .expect("install in memory");
    let expected = state_of(&reference.engine).expect("scan");

    let dir = tempfile::tempdir().expect("temp dir");
    let engine =
        Arc::new(RocksEngine::open(&RocksOptions::new(dir.path().join("db"))).expect("open"));
    let store =
        Arc::new(ChainStore::open(Arc::clone(&engine), StoreConfig::default()).expect("store"));
    // A stale record the snapshot does not hold: the install removes it.
    let mut stale = raft_store::engine::WriteBatch::new();
    stale.put(b"cstale/h".to_vec(), b"old".to_vec());
    engine.write(stale).expect("write");
    let snapshots = dir.path().join("snapshots");
    let mut sm =
        StateMachine::with_snapshot_dir(store, SnapshotDir::open(&snapshots).expect("dir"));
    let files = || std::fs::read_dir(&snapshots).expect("dir").count();

    let receive = |sm: &mut StateMachine<RocksEngine>, bytes: &[u8]| {
        block_on(async {
            let mut data = sm.begin_receiving_snapshot().expect("begin");
            for piece in bytes.chunks(bytes.len() / 3 + 1) {
                data.write_all(piece).await.expect("write a piece");
            }
            data.shutdown().await.expect("shutdown");
            sm.install_snapshot(&meta, data).await
        })
    };
    receive(&mut sm, &bytes).expect("install from a file");
    assert_eq!(state_of(&*engine).expect("scan"), expected);
    assert_eq!(files(), 1, "the received file is the current snapshot");

    // Damaged in its middle: refused, nothing written, the current snapshot kept.
    let mut damaged = bytes.clone();
    let middle = damaged.len() / 2;
    damaged[middle] ^= 0x01;
    assert!(receive(&mut sm, &damaged).is_err());
    assert_eq!(state_of(&*engine).expect("scan"), expected);
    let mut current = block_on(sm.get_current_snapshot())
        .expect("current")
        .expect("held");
    assert_eq!(current.snapshot.to_vec().expect("read"), bytes);

    // Built into a file: the same bytes; the file it replaces goes.
    let mut built = block_on(sm.build_snapshot()).expect("build");
    assert_eq!(built.snapshot.to_vec().expect("read"), bytes);
    assert_eq!(built.meta.last_log_id, meta.last_log_id);
    drop((built, current));
    // The refused file and the replaced current one are gone.
    assert_eq!(files(), 1);
    drop(sm);
    SnapshotDir::open(&snapshots).expect("reopen");
    assert_eq!(files(), 0, "opening clears the directory");
}
