//! The cost rules of SPEC §3, proven by counting engine operations rather than timing them:
//! an append does a constant number of point reads and exactly one write batch whatever the
//! chain's length, and reading a chain of k events is one range scan returning k pairs whatever
//! else the store holds.

mod common;

use common::*;
use raft_store::{ChainStore, CountingEngine, MemEngine, OpCounts, StoreConfig};

type Counted = ChainStore<CountingEngine<MemEngine>>;

fn counted_store() -> Counted {
    ChainStore::open(
        CountingEngine::new(MemEngine::new()),
        StoreConfig::default(),
    )
    .unwrap()
}

fn id(i: u64) -> String {
    format!("e{i}")
}

/// A store holding one execution "x" with a chain of `k` appended events.
fn chain_of(k: u64) -> Counted {
    let store = counted_store();
    for i in 1..=k {
        let prev = (i > 1).then(|| id(i - 1));
        store
            .append(&exec("x"), &req(&id(i), prev.as_deref()), i)
            .unwrap();
    }
    store
}

fn measure(store: &Counted, f: impl FnOnce(&Counted)) -> OpCounts {
    store.engine().reset();
    f(store);
    store.engine().counts()
}

#[test]
fn an_append_costs_the_same_at_every_chain_length() {
    let costs: Vec<(u64, OpCounts)> = [1u64, 100, 10_000]
        .into_iter()
        .map(|k| {
            let store = chain_of(k);
            let next = id(k + 1);
            let prev = id(k);
            let counts = measure(&store, |s| {
                s.append(&exec("x"), &req(&next, Some(&prev)), k + 1)
                    .unwrap();
            });
            (k, counts)
        })
        .collect();
    for (k, counts) in &costs {
        assert_eq!(counts.batches, 1, "k = {k}: one atomic batch");
        assert_eq!(counts.scans, 0, "k = {k}: no scans");
        assert!(
            counts.gets <= 10,
            "k = {k}: a small constant number of point reads, got {}",
            counts.gets
        );
    }
    assert!(
        costs.windows(2).all(|w| w[0].1 == w[1].1),
        "identical at k = 1, 100, 10000: {costs:?}"
    );
}

#[test]
fn a_duplicate_append_and_a_rejected_append_cost_the_same_at_every_chain_length() {
    let mut seen = Vec::new();
    for k in [1u64, 100, 10_000] {
        let store = chain_of(k);
        let duplicate = measure(&store, |s| {
            let r = s.append(&exec("x"), &req(&id(1), None), 0).unwrap();
            assert!(r.duplicate);
        });
        let rejected = measure(&store, |s| {
            assert!(s.append(&exec("x"), &req("new", Some("wrong")), 0).is_err());
        });
        assert_eq!(
            (duplicate.batches, rejected.batches),
            (0, 0),
            "neither writes"
        );
        seen.push((duplicate, rejected));
    }
    assert!(seen.windows(2).all(|w| w[0] == w[1]), "{seen:?}");
}

/// A store with "x" holding a 100-event chain (populated, so it is servable) and `others`
/// other executions of 3 events each.
fn store_with_others(others: u64) -> Counted {
    let store = counted_store();
    let names: Vec<String> = (1..=100).map(id).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    store
        .populate_from_log(&exec("x"), &linked_log(&refs), 1)
        .unwrap();
    for o in 0..others {
        // Executions on both sides of "x" in key order.
        let name = if o % 2 == 0 {
            format!("a{o}")
        } else {
            format!("z{o}")
        };
        store
            .populate_from_log(&exec(&name), &linked_log(&["o1", "o2", "o3"]), 2)
            .unwrap();
    }
    store
}

#[test]
fn a_chain_read_is_one_scan_of_k_pairs_whatever_else_is_stored() {
    let mut seen = Vec::new();
    for others in [1u64, 10_000] {
        let store = store_with_others(others);
        let raw = measure(&store, |s| {
            assert_eq!(s.chain(&exec("x")).unwrap().len(), 100)
        });
        assert_eq!(
            (raw.scans, raw.gets, raw.scanned_pairs),
            (1, 0, 100),
            "raw read, {others} others"
        );
        let guarded = measure(&store, |s| {
            assert!(matches!(
                s.chain_if_authoritative(&exec("x")).unwrap(),
                chainstore_model::Guarded::Authoritative(events) if events.len() == 100
            ));
        });
        // The partition scan returns the 100 events plus head, watermark and coverage.
        assert_eq!(
            (guarded.scans, guarded.gets, guarded.scanned_pairs),
            (1, 0, 103),
            "guarded, {others} others"
        );
        seen.push((raw, guarded));
    }
    assert_eq!(
        seen[0], seen[1],
        "identical with 1 and with 10,000 other executions"
    );
}

#[test]
fn reading_one_event_is_two_point_reads() {
    let store = store_with_others(1);
    let counts = measure(&store, |s| {
        assert!(s.event(&exec("x"), &eid("e50")).unwrap().is_some());
    });
    assert_eq!((counts.gets, counts.scans), (2, 0));
}
