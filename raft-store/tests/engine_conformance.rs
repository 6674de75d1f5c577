//! One conformance suite for every engine: the contract of `raft_store::engine::Engine`
//! (ordered scans in both directions, half-open ranges, limits, atomic ordered batches, range
//! deletes, durability across a restart) checked identically on RocksDB and on the in-memory
//! engine. The in-memory engine's fault model (losing unsynced writes, failing chosen writes) is
//! tested at the end.

use chainstore_model::StorageError;
use std::sync::Arc;

use raft_store::engine::{
    Engine, GroupEngine, KeyValue, MemEngine, RocksEngine, RocksOptions, ScanOrder, WriteBatch,
};

/// An engine under test that can be restarted: RocksDB is closed and reopened from its
/// directory; the in-memory engine crashes, losing what was not synced.
trait Harness {
    fn engine(&self) -> &dyn Engine;
    fn restart(&mut self);
}

struct Rocks {
    dir: tempfile::TempDir,
    engine: Option<RocksEngine>,
}

impl Rocks {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let engine = RocksEngine::open(&RocksOptions::new(dir.path())).expect("open rocksdb");
        Self {
            dir,
            engine: Some(engine),
        }
    }
}

impl Harness for Rocks {
    fn engine(&self) -> &dyn Engine {
        self.engine.as_ref().expect("engine is open")
    }
    fn restart(&mut self) {
        self.engine = None;
        self.engine = Some(RocksEngine::open(&RocksOptions::new(self.dir.path())).expect("reopen"));
    }
}

struct Mem(MemEngine);

impl Harness for Mem {
    fn engine(&self) -> &dyn Engine {
        &self.0
    }
    fn restart(&mut self) {
        self.0.crash();
    }
}

/// One group's keyspace ([`GroupEngine`], group 3) in a RocksDB shared with its neighbours:
/// group 0 (the unprefixed layout) and groups 2 and 4 hold keys of their own, which the suite
/// run in group 3 must leave exactly as they were (checked when the harness is dropped).
struct Group {
    dir: tempfile::TempDir,
    shared: Option<Arc<RocksEngine>>,
    group: Option<GroupEngine<RocksEngine>>,
}

const NEIGHBOURS: [u32; 3] = [0, 2, 4];
const NEIGHBOUR_KEYS: [&[u8]; 4] = [b"\0", b"a", b"m05", b"x\xff"];

impl Group {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let shared = Arc::new(RocksEngine::open(&RocksOptions::new(dir.path())).expect("open"));
        for neighbour in NEIGHBOURS {
            let engine = GroupEngine::new(Arc::clone(&shared), neighbour);
            let pairs: Vec<(&[u8], &[u8])> = NEIGHBOUR_KEYS.iter().map(|k| (*k, *k)).collect();
            put(&engine, &pairs);
            engine.sync().expect("sync");
        }
        let group = GroupEngine::new(Arc::clone(&shared), 3);
        Self {
            dir,
            shared: Some(shared),
            group: Some(group),
        }
    }
}

impl Harness for Group {
    fn engine(&self) -> &dyn Engine {
        self.group.as_ref().expect("engine is open")
    }
    fn restart(&mut self) {
        self.group = None;
        self.shared = None;
        let shared =
            Arc::new(RocksEngine::open(&RocksOptions::new(self.dir.path())).expect("reopen"));
        self.group = Some(GroupEngine::new(Arc::clone(&shared), 3));
        self.shared = Some(shared);
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        let shared = self.shared.as_ref().expect("engine is open");
        for neighbour in NEIGHBOURS {
            let engine = GroupEngine::new(Arc::clone(shared), neighbour);
            let expected: Vec<KeyValue> = NEIGHBOUR_KEYS
                .iter()
                .map(|k| (k.to_vec(), k.to_vec()))
                .collect();
            assert_eq!(
                all(&engine),
                expected,
                "group {neighbour} was changed by group 3's operations"
            );
        }
    }
}

fn put(engine: &dyn Engine, pairs: &[(&[u8], &[u8])]) {
    let mut batch = WriteBatch::new();
    for (k, v) in pairs {
        batch.put(*k, *v);
    }
    engine.write(batch).expect("write");
}

fn keys_of(pairs: Vec<(Vec<u8>, Vec<u8>)>) -> Vec<Vec<u8>> {
    pairs.into_iter().map(|(k, _)| k).collect()
}

fn point_reads_see_puts_overwrites_and_deletes(h: &mut dyn Harness) {
    let e = h.engine();
    assert_eq!(e.get(b"k").unwrap(), None);
    put(e, &[(b"k", b"1")]);
    assert_eq!(e.get(b"k").unwrap(), Some(b"1".to_vec()));
    put(e, &[(b"k", b"2")]);
    assert_eq!(e.get(b"k").unwrap(), Some(b"2".to_vec()));
    let mut batch = WriteBatch::new();
    batch.delete(b"k".to_vec());
    e.write(batch).unwrap();
    assert_eq!(e.get(b"k").unwrap(), None);
}

fn a_batch_applies_its_ops_in_order(h: &mut dyn Harness) {
    let e = h.engine();
    let mut batch = WriteBatch::new();
    batch.put(b"a".to_vec(), b"1".to_vec());
    batch.delete(b"a".to_vec());
    batch.delete(b"b".to_vec());
    batch.put(b"b".to_vec(), b"2".to_vec());
    e.write(batch).unwrap();
    assert_eq!(e.get(b"a").unwrap(), None);
    assert_eq!(e.get(b"b").unwrap(), Some(b"2".to_vec()));
}

fn scans_are_ordered_half_open_and_limited(h: &mut dyn Harness) {
    let e = h.engine();
    let keys: [&[u8]; 7] = [b"a", b"b\x00", b"b\xff", b"ba", b"c", b"\x00", b"\xfe"];
    put(e, &keys.iter().map(|k| (*k, &b"v"[..])).collect::<Vec<_>>());
    let forward = keys_of(e.scan(b"b", b"c", ScanOrder::Forward, 100).unwrap());
    assert_eq!(
        forward,
        vec![b"b\x00".to_vec(), b"ba".to_vec(), b"b\xff".to_vec()]
    );
    let reverse = keys_of(e.scan(b"b", b"c", ScanOrder::Reverse, 100).unwrap());
    assert_eq!(
        reverse,
        vec![b"b\xff".to_vec(), b"ba".to_vec(), b"b\x00".to_vec()]
    );
    let limited = keys_of(e.scan(b"a", b"z", ScanOrder::Forward, 2).unwrap());
    assert_eq!(limited, vec![b"a".to_vec(), b"b\x00".to_vec()]);
    let limited_rev = keys_of(e.scan(b"a", b"z", ScanOrder::Reverse, 1).unwrap());
    assert_eq!(limited_rev, vec![b"c".to_vec()]);
    let everything = keys_of(e.scan(b"", b"\xff", ScanOrder::Forward, 100).unwrap());
    assert_eq!(everything.len(), 7);
    assert!(everything.windows(2).all(|w| w[0] < w[1]));
    assert!(e
        .scan(b"c", b"c", ScanOrder::Forward, 10)
        .unwrap()
        .is_empty());
    assert!(e
        .scan(b"d", b"c", ScanOrder::Reverse, 10)
        .unwrap()
        .is_empty());
    assert!(e
        .scan(b"a", b"z", ScanOrder::Forward, 0)
        .unwrap()
        .is_empty());
    let values: Vec<_> = e.scan(b"a", b"b", ScanOrder::Forward, 10).unwrap();
    assert_eq!(values, vec![(b"a".to_vec(), b"v".to_vec())]);
}

fn range_delete_removes_exactly_the_half_open_range(h: &mut dyn Harness) {
    let e = h.engine();
    put(e, &[(b"r1", b""), (b"r2", b""), (b"r3", b""), (b"r4", b"")]);
    let mut batch = WriteBatch::new();
    batch.delete_range(b"r2".to_vec(), b"r4".to_vec());
    e.write(batch).unwrap();
    let left = keys_of(e.scan(b"r", b"s", ScanOrder::Forward, 10).unwrap());
    assert_eq!(left, vec![b"r1".to_vec(), b"r4".to_vec()]);
}

fn synced_writes_survive_a_restart(h: &mut dyn Harness) {
    put(h.engine(), &[(b"kept", b"1")]);
    let mut batch = WriteBatch::new();
    batch.put(b"durable".to_vec(), b"2".to_vec());
    h.engine().write_durable(batch).unwrap();
    put(h.engine(), &[(b"also", b"3")]);
    h.engine().sync().unwrap();
    h.restart();
    let e = h.engine();
    assert_eq!(e.get(b"kept").unwrap(), Some(b"1".to_vec()));
    assert_eq!(e.get(b"durable").unwrap(), Some(b"2".to_vec()));
    assert_eq!(e.get(b"also").unwrap(), Some(b"3".to_vec()));
}

fn large_values_and_many_keys_round_trip(h: &mut dyn Harness) {
    let e = h.engine();
    let big = vec![0xabu8; 1 << 20];
    let mut batch = WriteBatch::new();
    batch.put(b"big".to_vec(), big.clone());
    for i in 0u32..5000 {
        batch.put(
            [b"n".as_slice(), &i.to_be_bytes()].concat(),
            i.to_le_bytes().to_vec(),
        );
    }
    e.write(batch).unwrap();
    assert_eq!(e.get(b"big").unwrap(), Some(big));
    let all = e.scan(b"n", b"o", ScanOrder::Forward, usize::MAX).unwrap();
    assert_eq!(all.len(), 5000);
    assert!(all
        .iter()
        .zip(0u32..)
        .all(|((k, v), i)| k[1..] == i.to_be_bytes() && v[..] == i.to_le_bytes()));

    // Long reads step by bytes as well as by pairs: 12 values of 1 MiB come in pieces of at
    // most a few, every key once, in order.
    let mut large = WriteBatch::new();
    for i in 0u8..12 {
        large.put(vec![b'L', i], vec![i; 1 << 20]);
    }
    e.write(large).unwrap();
    let view = e.view();
    let mut seen = Vec::new();
    let mut largest_piece = 0;
    raft_store::engine::scan_in_steps(&*view, b"L", b"M", 1024, |piece| {
        largest_piece = largest_piece.max(piece.len());
        seen.extend(piece.into_iter().map(|(k, v)| (k[1], v.len())));
        Ok(true)
    })
    .unwrap();
    assert_eq!(seen, (0u8..12).map(|i| (i, 1 << 20)).collect::<Vec<_>>());
    let per_step = raft_store::engine::STEP_BYTES_MAX >> 20;
    assert!(
        largest_piece <= per_step + 1,
        "a piece of {largest_piece} MiB"
    );
}

fn a_view_reads_the_store_as_it_was_when_taken(h: &mut dyn Harness) {
    let e = h.engine();
    put(e, &[(b"a", b"1"), (b"b", b"2"), (b"c", b"3")]);
    let view = e.view();
    let mut later = WriteBatch::new();
    later.put(b"a".to_vec(), b"changed".to_vec());
    later.delete(b"b".to_vec());
    later.put(b"bb".to_vec(), b"new".to_vec());
    e.write(later).unwrap();
    assert_eq!(view.get(b"a").unwrap(), Some(b"1".to_vec()));
    assert_eq!(view.get(b"b").unwrap(), Some(b"2".to_vec()));
    assert_eq!(view.get(b"bb").unwrap(), None);
    let forward = view.scan(b"a", b"z", ScanOrder::Forward, 10).unwrap();
    assert_eq!(
        keys_of(forward),
        vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]
    );
    let reverse = view.scan(b"a", b"z", ScanOrder::Reverse, 2).unwrap();
    assert_eq!(keys_of(reverse), vec![b"c".to_vec(), b"b".to_vec()]);
    assert!(view
        .scan(b"c", b"c", ScanOrder::Forward, 10)
        .unwrap()
        .is_empty());
    // A bounded scan stops after the pair that reaches its byte budget, and returns one at
    // least.
    assert_eq!(
        keys_of(view.scan_bounded(b"a", b"z", 10, 1).unwrap()),
        vec![b"a".to_vec()]
    );
    assert_eq!(
        keys_of(view.scan_bounded(b"a", b"z", 10, 3).unwrap()),
        vec![b"a".to_vec(), b"b".to_vec()]
    );
    // The engine itself reads the new state.
    assert_eq!(e.get(b"a").unwrap(), Some(b"changed".to_vec()));
    // Stepped scans of a view see every key once, in order, whatever the step.
    for step in [1, 2, 3, 100] {
        let mut seen = Vec::new();
        raft_store::engine::scan_in_steps(&*view, b"a", b"z", step, |piece| {
            seen.extend(keys_of(piece));
            Ok(true)
        })
        .unwrap();
        assert_eq!(
            seen,
            vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()],
            "step {step}"
        );
    }
}

fn all(e: &dyn Engine) -> Vec<KeyValue> {
    e.scan(b"", b"\xff", ScanOrder::Forward, usize::MAX)
        .unwrap()
}

fn pairs(items: &[(&[u8], &[u8])]) -> Vec<Result<KeyValue, StorageError>> {
    items
        .iter()
        .map(|(k, v)| Ok((k.to_vec(), v.to_vec())))
        .collect()
}

fn replace_range_swaps_the_range_in_one_durable_step(h: &mut dyn Harness) {
    let e = h.engine();
    let mut before = WriteBatch::new();
    for key in [&b"a"[..], b"b1", b"b2", b"b3", b"c"] {
        before.put(key, b"old".to_vec());
    }
    e.write_durable(before).unwrap();
    let view = e.view();
    // Keys outside the range may ride along (a restore writes its vote and purge marker so).
    e.replace_range(
        b"b",
        b"c",
        &mut pairs(&[(b"b2", b"new2"), (b"b4", b"new4"), (b"d", b"outside")]).into_iter(),
    )
    .unwrap();
    let expected: Vec<KeyValue> = [
        (&b"a"[..], &b"old"[..]),
        (b"b2", b"new2"),
        (b"b4", b"new4"),
        (b"c", b"old"),
        (b"d", b"outside"),
    ]
    .iter()
    .map(|(k, v)| (k.to_vec(), v.to_vec()))
    .collect();
    assert_eq!(all(e), expected);
    assert_eq!(
        view.get(b"b1").unwrap(),
        Some(b"old".to_vec()),
        "a view keeps its time"
    );
    assert_eq!(view.get(b"b4").unwrap(), None);
    drop(view);

    // Pairs out of order, or a failing source, change nothing.
    let refused = e.replace_range(
        b"a",
        b"z",
        &mut pairs(&[(b"x", b"1"), (b"m", b"2")]).into_iter(),
    );
    assert!(refused.is_err());
    let mut failing = pairs(&[(b"b5", b"1")]);
    failing.push(Err(StorageError::io(
        std::io::ErrorKind::Other,
        "the source broke",
    )));
    assert!(e
        .replace_range(b"a", b"z", &mut failing.into_iter())
        .is_err());
    assert_eq!(all(e), expected);

    // Durable without a sync; later writes win over the replaced range.
    h.restart();
    let e = h.engine();
    assert_eq!(all(e), expected);
    put(e, &[(b"b2", b"later")]);
    let mut gone = WriteBatch::new();
    gone.delete(b"b4".to_vec());
    e.write(gone).unwrap();
    assert_eq!(e.get(b"b2").unwrap(), Some(b"later".to_vec()));
    assert_eq!(e.get(b"b4").unwrap(), None);

    // Many pairs, replacing many.
    let many: Vec<Result<KeyValue, StorageError>> = (0..5_000u32)
        .map(|i| Ok((format!("m{i:05}").into_bytes(), vec![(i % 251) as u8; 300])))
        .collect();
    e.replace_range(b"b", b"z", &mut many.into_iter()).unwrap();
    let after = all(e);
    assert_eq!(after.len(), 5_001);
    assert_eq!(after[0].0, b"a".to_vec());
    assert_eq!(after[5_000].0, b"m04999".to_vec());
    assert_eq!(after[5_000].1, vec![(4_999 % 251) as u8; 300]);
}

macro_rules! conformance {
    ($module:ident, $make:expr) => {
        mod $module {
            use super::*;

            #[test]
            fn point_reads_see_puts_overwrites_and_deletes() {
                super::point_reads_see_puts_overwrites_and_deletes(&mut $make);
            }
            #[test]
            fn a_batch_applies_its_ops_in_order() {
                super::a_batch_applies_its_ops_in_order(&mut $make);
            }
            #[test]
            fn scans_are_ordered_half_open_and_limited() {
                super::scans_are_ordered_half_open_and_limited(&mut $make);
            }
            #[test]
            fn range_delete_removes_exactly_the_half_open_range() {
                super::range_delete_removes_exactly_the_half_open_range(&mut $make);
            }
            #[test]
            fn synced_writes_survive_a_restart() {
                super::synced_writes_survive_a_restart(&mut $make);
            }
            #[test]
            fn a_view_reads_the_store_as_it_was_when_taken() {
                super::a_view_reads_the_store_as_it_was_when_taken(&mut $make);
            }
            #[test]
            fn replace_range_swaps_the_range_in_one_durable_step() {
                super::replace_range_swaps_the_range_in_one_durable_step(&mut $make);
            }
            #[test]
            fn large_values_and_many_keys_round_trip() {
                super::large_values_and_many_keys_round_trip(&mut $make);
            }
        }
    };
}

conformance!(rocks, Rocks::new());
conformance!(memory, Mem(MemEngine::new()));
conformance!(group, Group::new());

// The in-memory engine's fault model.

#[test]
fn memory_crash_loses_exactly_the_unsynced_batches() {
    let e = MemEngine::new();
    put(&e, &[(b"a", b"1")]);
    e.sync().unwrap();
    put(&e, &[(b"b", b"2")]);
    put(&e, &[(b"a", b"overwritten")]);
    assert_eq!(e.pending_batches(), 2);
    e.crash();
    assert_eq!(e.get(b"a").unwrap(), Some(b"1".to_vec()));
    assert_eq!(e.get(b"b").unwrap(), None);
    assert_eq!(e.pending_batches(), 0);
}

#[test]
fn memory_crash_keeping_a_prefix_keeps_whole_batches_in_order() {
    let e = MemEngine::new();
    for (i, key) in [b"x", b"y", b"z"].iter().enumerate() {
        let mut batch = WriteBatch::new();
        batch.put(key.to_vec(), vec![i as u8]);
        batch.put(b"last".to_vec(), vec![i as u8]);
        e.write(batch).unwrap();
    }
    e.crash_keeping(2);
    assert_eq!(e.get(b"x").unwrap(), Some(vec![0]));
    assert_eq!(e.get(b"y").unwrap(), Some(vec![1]));
    assert_eq!(e.get(b"z").unwrap(), None);
    assert_eq!(
        e.get(b"last").unwrap(),
        Some(vec![1]),
        "a kept batch is kept whole"
    );
}

#[test]
fn memory_injected_write_failure_hits_the_nth_write_and_changes_nothing() {
    let e = MemEngine::new();
    e.fail_write_after(2);
    put(&e, &[(b"first", b"")]);
    let mut batch = WriteBatch::new();
    batch.put(b"second".to_vec(), b"".to_vec());
    batch.put(b"second-b".to_vec(), b"".to_vec());
    assert!(e.write(batch).is_err());
    assert_eq!(e.get(b"second").unwrap(), None);
    assert_eq!(e.get(b"second-b").unwrap(), None);
    put(&e, &[(b"third", b"")]);
    assert_eq!(e.get(b"third").unwrap(), Some(vec![]));
    assert_eq!(e.writes_total(), 2);
}

#[test]
fn memory_failed_sync_makes_nothing_durable() {
    let e = MemEngine::new();
    put(&e, &[(b"a", b"1")]);
    e.fail_sync_after(1);
    assert!(e.sync().is_err());
    e.crash();
    assert_eq!(e.get(b"a").unwrap(), None);
}

#[test]
fn memory_clones_share_one_store_across_a_restart() {
    let e = MemEngine::new();
    let handle = e.clone();
    let mut batch = WriteBatch::new();
    batch.put(b"k".to_vec(), b"v".to_vec());
    e.write_durable(batch).unwrap();
    drop(e);
    handle.crash();
    assert_eq!(handle.get(b"k").unwrap(), Some(b"v".to_vec()));
}
