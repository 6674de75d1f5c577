//! One test per rule of SPEC §4, each named for the property it proves and asserting exactly
//! that property. They run on the in-memory engine; `model.rs` runs every rule on both engines.

mod common;

use chainstore_model::{
    AppendError, Authority, Completeness, Coverage, FromLog, Guarded, Origin, PartOutcome,
    PopulateError, PopulateSession, Reason, Refusal, ReplicateError, SessionId, Watermark,
};
use common::*;
use raft_store::{
    ChainStore, CoverageChange, Effect, HeadCheck, MemEngine, SessionChange, StoreConfig,
};
use serde_json::json;

fn guarded(store: &ChainStore<MemEngine>, e: &str) -> Guarded {
    store
        .chain_if_authoritative(&exec(e))
        .expect("guarded read")
}

fn authoritative_ids(store: &ChainStore<MemEngine>, e: &str) -> Vec<String> {
    match guarded(store, e) {
        Guarded::Authoritative(events) => ids(&events),
        other => panic!("expected an authoritative answer, got {other:?}"),
    }
}

fn populate(store: &ChainStore<MemEngine>, e: &str, log: &[chainstore_model::LogEvent]) -> FromLog {
    store.populate_from_log(&exec(e), log, 7).expect("populate")
}

// ---- 4.1 append ----

#[test]
fn append_assigns_sequences_from_one_and_records_the_commit_index() {
    let (_, store) = mem_store();
    let a = store.append(&exec("x"), &req("e1", None), 10).unwrap();
    let b = store
        .append(&exec("x"), &req("e2", Some("e1")), 11)
        .unwrap();
    assert_eq!((a.exec_seq, a.commit_index, a.duplicate), (1, 10, false));
    assert_eq!((b.exec_seq, b.commit_index, b.duplicate), (2, 11, false));
    let chain = store.chain(&exec("x")).unwrap();
    assert_eq!(
        chain
            .iter()
            .map(|e| (e.exec_seq, e.commit_index))
            .collect::<Vec<_>>(),
        [(1, 10), (2, 11)]
    );
    assert_eq!(
        store.authority(&exec("x")).unwrap(),
        Authority::Authoritative {
            first_seq: 1,
            through_seq: 2
        }
    );
}

#[test]
fn append_with_a_prev_that_is_not_the_head_is_not_head() {
    let (_, store) = mem_store();
    store.append(&exec("x"), &req("e1", None), 1).unwrap();
    store.append(&exec("x"), &req("e2", Some("e1")), 2).unwrap();
    let err = store
        .append(&exec("x"), &req("e3", Some("e1")), 3)
        .unwrap_err();
    assert_eq!(
        err,
        AppendError::NotHead {
            expected: Some(eid("e2")),
            got: Some(eid("e1"))
        }
    );
    let err = store.append(&exec("x"), &req("e3", None), 3).unwrap_err();
    assert_eq!(
        err,
        AppendError::NotHead {
            expected: Some(eid("e2")),
            got: None
        }
    );
    assert_eq!(
        store.chain(&exec("x")).unwrap().len(),
        2,
        "a rejection writes nothing"
    );
}

#[test]
fn a_retried_append_answers_duplicate_with_its_original_seq_even_after_the_head_moved() {
    let (_, store) = mem_store();
    store.append(&exec("x"), &req("e1", None), 1).unwrap();
    store.append(&exec("x"), &req("e2", Some("e1")), 2).unwrap();
    let retry = store.append(&exec("x"), &req("e1", None), 3).unwrap();
    assert_eq!(
        (retry.exec_seq, retry.commit_index, retry.duplicate),
        (1, 1, true)
    );
    assert_eq!(store.chain(&exec("x")).unwrap().len(), 2);
}

#[test]
fn a_stored_event_id_with_different_content_is_event_conflict() {
    let (_, store) = mem_store();
    store.append(&exec("x"), &req("e1", None), 1).unwrap();
    let mut changed = req("e1", None);
    changed.payload = json!({"other": true});
    let err = store.append(&exec("x"), &changed, 2).unwrap_err();
    assert_eq!(
        err,
        AppendError::EventConflict {
            event_id: eid("e1"),
            exec_seq: 1
        }
    );
    assert_eq!(store.chain(&exec("x")).unwrap()[0].payload, payload("e1"));
}

#[test]
fn a_failed_first_append_leaves_the_execution_not_populated() {
    // The common mid-flight case: the first event seen carries a prev the empty store lacks.
    let (_, store) = mem_store();
    let err = store
        .append(&exec("x"), &req("e7", Some("e6")), 1)
        .unwrap_err();
    assert!(matches!(err, AppendError::NotHead { expected: None, .. }));
    assert_eq!(
        store.authority(&exec("x")).unwrap(),
        Authority::NotPopulated
    );
    assert_eq!(
        guarded(&store, "x"),
        Guarded::CannotAnswer(Reason::NotPopulated)
    );
}

#[test]
fn a_first_append_that_fails_on_io_leaves_the_execution_not_populated() {
    let (engine, store) = mem_store();
    engine.fail_write_after(1);
    let err = store.append(&exec("x"), &req("e1", None), 1).unwrap_err();
    assert!(matches!(err, AppendError::Storage(_)));
    assert_eq!(
        store.authority(&exec("x")).unwrap(),
        Authority::NotPopulated
    );
    assert!(store.chain(&exec("x")).unwrap().is_empty());
}

#[test]
fn a_partition_built_only_by_appends_is_never_served() {
    let (_, store) = mem_store();
    store.append(&exec("x"), &req("e1", None), 1).unwrap();
    store.append(&exec("x"), &req("e2", Some("e1")), 2).unwrap();
    assert_eq!(
        guarded(&store, "x"),
        Guarded::CannotAnswer(Reason::NoCoverage)
    );
}

#[test]
fn a_genesis_append_is_served_and_every_later_append_extends_the_coverage() {
    let (_, store) = mem_store();
    store.append(&exec("g"), &genesis("e1"), 1).unwrap();
    assert_eq!(
        store.coverage(&exec("g")).unwrap(),
        Some(Coverage {
            root_event_id: Some(eid("e1")),
            total: 1,
            origin: Origin::Genesis
        })
    );
    assert_eq!(authoritative_ids(&store, "g"), ["e1"]);
    store.append(&exec("g"), &req("e2", Some("e1")), 2).unwrap();
    store.append(&exec("g"), &req("e3", Some("e2")), 3).unwrap();
    assert_eq!(
        store.coverage(&exec("g")).unwrap().map(|c| c.total),
        Some(3)
    );
    assert_eq!(authoritative_ids(&store, "g"), ["e1", "e2", "e3"]);
}

#[test]
fn genesis_with_a_prev_is_invalid_input() {
    let (_, store) = mem_store();
    let mut bad = genesis("e1");
    bad.prev_event_id = Some(eid("e0"));
    assert!(matches!(
        store.append(&exec("g"), &bad, 1),
        Err(AppendError::GenesisWithPrev)
    ));
    assert_eq!(
        store.authority(&exec("g")).unwrap(),
        Authority::NotPopulated
    );
}

#[test]
fn genesis_on_an_execution_with_events_fails_the_head_check() {
    let (_, store) = mem_store();
    store.append(&exec("x"), &req("e1", None), 1).unwrap();
    let err = store.append(&exec("x"), &genesis("g1"), 2).unwrap_err();
    assert_eq!(
        err,
        AppendError::NotHead {
            expected: Some(eid("e1")),
            got: None
        }
    );
}

#[test]
fn genesis_on_an_execution_populated_as_empty_is_invalid_input() {
    let (_, store) = mem_store();
    populate(&store, "x", &[]);
    assert!(matches!(
        store.append(&exec("x"), &genesis("g1"), 2),
        Err(AppendError::InvalidInput(_))
    ));
    assert_eq!(guarded(&store, "x"), Guarded::Authoritative(vec![]));
}

#[test]
fn genesis_on_an_execution_whose_log_was_refused_is_invalid_input() {
    // Populated as empty, then a refused log revoked its coverage: the watermark stays as
    // evidence, and the store has still seen the execution.
    let (_, store) = mem_store();
    populate(&store, "x", &[]);
    let two_roots = [log_event("a", None), log_event("b", None)];
    assert!(matches!(
        populate(&store, "x", &two_roots),
        FromLog::Refused { .. }
    ));
    assert!(matches!(
        store.append(&exec("x"), &genesis("g1"), 3),
        Err(AppendError::InvalidInput(_))
    ));
    assert!(!matches!(guarded(&store, "x"), Guarded::Authoritative(_)));
}

#[test]
fn an_append_to_a_log_covered_execution_revokes_coverage_until_the_log_confirms_it() {
    let (_, store) = mem_store();
    populate(&store, "x", &linked_log(&["a", "b"]));
    store.append(&exec("x"), &req("c", Some("b")), 9).unwrap();
    assert_eq!(store.coverage(&exec("x")).unwrap(), None);
    assert_eq!(
        guarded(&store, "x"),
        Guarded::CannotAnswer(Reason::NoCoverage)
    );
    let outcome = populate(&store, "x", &linked_log(&["a", "b", "c"]));
    assert_eq!(
        outcome,
        FromLog::InSync {
            total: 3,
            appended: 0
        }
    );
    assert_eq!(authoritative_ids(&store, "x"), ["a", "b", "c"]);
}

#[test]
fn appends_after_an_interrupted_populate_cannot_reach_its_coverage_total() {
    // A populate of [a, b, c, d] in batches of two fails after its first batch: coverage says 4
    // events rooted at a, and a, b are stored. A writer then appends its own c', d'. Were the
    // coverage left in place, the four stored events would match it and be served, though c'
    // and d' are not the log's events.
    let config = StoreConfig {
        populate_batch_events_max: 2,
        ..StoreConfig::default()
    };
    let (engine, store) = mem_store_with(config);
    engine.fail_write_after(2);
    assert!(store
        .populate_from_log(&exec("x"), &linked_log(&["a", "b", "c", "d"]), 1)
        .is_err());
    store
        .append(&exec("x"), &req("c-other", Some("b")), 2)
        .unwrap();
    store
        .append(&exec("x"), &req("d-other", Some("c-other")), 3)
        .unwrap();
    assert_eq!(store.chain(&exec("x")).unwrap().len(), 4);
    assert!(matches!(guarded(&store, "x"), Guarded::CannotAnswer(_)));
    let outcome = populate(&store, "x", &linked_log(&["a", "b", "c", "d"]));
    assert_eq!(
        outcome,
        FromLog::Diverged {
            at_position: 2,
            stored: eid("c-other"),
            log: eid("c")
        }
    );
}

#[test]
fn an_oversized_payload_is_too_large_and_writes_nothing() {
    let config = StoreConfig {
        payload_bytes_max: 64,
        ..StoreConfig::default()
    };
    let (_, store) = mem_store_with(config);
    let mut big = req("e1", None);
    // 63 characters and two quotes: one byte over.
    big.payload = json!("x".repeat(63));
    assert!(matches!(
        store.append(&exec("x"), &big, 1),
        Err(AppendError::TooLarge(_))
    ));
    assert_eq!(
        store.authority(&exec("x")).unwrap(),
        Authority::NotPopulated
    );
    // Exactly at the limit, it is stored.
    big.payload = json!("x".repeat(62));
    assert_eq!(store.append(&exec("x"), &big, 1).unwrap().exec_seq, 1);
}

#[test]
fn a_log_longer_than_the_limit_is_too_large_and_writes_nothing() {
    let config = StoreConfig {
        populate_events_max: 3,
        ..StoreConfig::default()
    };
    let (_, store) = mem_store_with(config);
    let four = linked_log(&["a", "b", "c", "d"]);
    assert!(matches!(
        store.populate_from_log(&exec("x"), &four, 7),
        Err(PopulateError::TooLarge(_))
    ));
    assert_eq!(
        store.authority(&exec("x")).unwrap(),
        Authority::NotPopulated
    );
    // At the limit, the log is taken.
    let three = linked_log(&["a", "b", "c"]);
    assert_eq!(
        populate(&store, "x", &three),
        FromLog::InSync {
            total: 3,
            appended: 3
        }
    );
    assert_eq!(authoritative_ids(&store, "x"), ["a", "b", "c"]);
}

// ---- 4.2 apply_replicated ----

#[test]
fn a_delivery_longer_than_the_limit_is_too_large_and_writes_nothing() {
    let config = StoreConfig {
        replicated_events_max: 2,
        ..StoreConfig::default()
    };
    let (_, store) = mem_store_with(config);
    let x = exec("x");
    let three = [
        chain_event("x", 1, "a", None),
        chain_event("x", 2, "b", Some("a")),
        chain_event("x", 3, "c", Some("b")),
    ];
    assert!(matches!(
        store.apply_replicated(&x, &three, 1),
        Err(ReplicateError::TooLarge(_))
    ));
    assert_eq!(store.head(&x).unwrap(), None);
    let applied = store.apply_replicated(&x, &three[..2], 1).unwrap();
    assert_eq!(applied.applied, 2, "at the limit, the delivery is applied");
}

#[test]
fn a_delivery_larger_than_one_batch_is_written_in_several_and_a_redelivery_completes_it() {
    let config = StoreConfig {
        populate_batch_events_max: 2,
        ..StoreConfig::default()
    };
    let x = exec("x");
    let delivery = [
        chain_event("x", 5, "e", Some("d")),
        chain_event("x", 1, "a", None),
        chain_event("x", 2, "b", Some("a")),
        chain_event("x", 4, "d", Some("c")),
        chain_event("x", 3, "c", Some("b")),
    ];
    let (engine, store) = mem_store_with(config.clone());
    let effects = store.evaluate_replicated(&x, &delivery).unwrap();
    assert_eq!(
        effects.iter().map(|e| e.events.len()).collect::<Vec<_>>(),
        [2, 2, 1]
    );
    let writes = engine.writes_total();
    assert_eq!(
        store.apply_replicated(&x, &delivery, 1).unwrap(),
        chainstore_model::Replicated {
            applied: 5,
            duplicates: 0
        }
    );
    assert_eq!(engine.writes_total(), writes + 3);
    assert_eq!(store.chain_is_complete(&x).unwrap(), Completeness::Complete);

    // Interrupted after its first batch: a part is stored, never served; the same delivery
    // again stores the rest.
    let (engine, store) = mem_store_with(config);
    populate(&store, "x", &linked_log(&["a"]));
    engine.fail_write_after(2);
    assert!(store.apply_replicated(&x, &delivery, 1).is_err());
    engine.clear_faults();
    assert_eq!(ids(&store.chain(&x).unwrap()), ["a", "e"]);
    assert!(matches!(guarded(&store, "x"), Guarded::CannotAnswer(_)));
    assert_eq!(
        store.apply_replicated(&x, &delivery, 2).unwrap(),
        chainstore_model::Replicated {
            applied: 3,
            duplicates: 2
        }
    );
    assert_eq!(store.chain_is_complete(&x).unwrap(), Completeness::Complete);
    assert!(matches!(guarded(&store, "x"), Guarded::CannotAnswer(_)));
}

#[test]
fn replicated_events_arrive_out_of_order_the_gap_is_named_then_the_chain_completes() {
    let (_, store) = mem_store();
    let x = exec("x");
    store
        .apply_replicated(&x, &[chain_event("x", 3, "c", Some("b"))], 1)
        .unwrap();
    store
        .apply_replicated(&x, &[chain_event("x", 1, "a", None)], 2)
        .unwrap();
    assert_eq!(
        store.chain_is_complete(&x).unwrap(),
        Completeness::Incomplete {
            gap_at: Some(eid("b")),
            walked: 1,
            span: 3
        }
    );
    store
        .apply_replicated(&x, &[chain_event("x", 2, "b", Some("a"))], 3)
        .unwrap();
    assert_eq!(store.chain_is_complete(&x).unwrap(), Completeness::Complete);
    assert_eq!(ids(&store.chain(&x).unwrap()), ["a", "b", "c"]);
    assert_eq!(ids(&store.walk_from_head(&x).unwrap()), ["c", "b", "a"]);
}

#[test]
fn identical_redelivery_is_a_no_op() {
    let (engine, store) = mem_store();
    let x = exec("x");
    let delivery = [
        chain_event("x", 1, "a", None),
        chain_event("x", 2, "b", Some("a")),
    ];
    store.apply_replicated(&x, &delivery, 1).unwrap();
    let before = engine.dump();
    let again = store.apply_replicated(&x, &delivery, 2).unwrap();
    assert_eq!((again.applied, again.duplicates), (0, 2));
    assert_eq!(
        engine.dump(),
        before,
        "a redelivery writes nothing, not even the commit index"
    );
}

#[test]
fn a_different_event_at_an_occupied_seq_is_forked_and_writes_nothing() {
    let (engine, store) = mem_store();
    let x = exec("x");
    store
        .apply_replicated(&x, &[chain_event("x", 1, "a", None)], 1)
        .unwrap();
    let before = engine.dump();
    let delivery = [
        chain_event("x", 2, "b", Some("a")),
        chain_event("x", 1, "z", None),
    ];
    let err = store.apply_replicated(&x, &delivery, 2).unwrap_err();
    assert!(matches!(
        err,
        ReplicateError::Forked(chainstore_model::Fork::SeqTaken { exec_seq: 1, .. })
    ));
    assert_eq!(engine.dump(), before);
}

#[test]
fn a_known_event_id_at_another_seq_is_forked() {
    let (_, store) = mem_store();
    let x = exec("x");
    store
        .apply_replicated(&x, &[chain_event("x", 1, "a", None)], 1)
        .unwrap();
    let err = store
        .apply_replicated(&x, &[chain_event("x", 2, "a", None)], 2)
        .unwrap_err();
    assert!(matches!(
        err,
        ReplicateError::Forked(chainstore_model::Fork::IdElsewhere {
            stored_seq: 1,
            offered_seq: 2,
            ..
        })
    ));
}

#[test]
fn the_head_advances_only_for_newer_events_and_the_watermark_widens_both_ways() {
    let (_, store) = mem_store();
    let x = exec("x");
    store
        .apply_replicated(&x, &[chain_event("x", 5, "e", Some("d"))], 1)
        .unwrap();
    store
        .apply_replicated(&x, &[chain_event("x", 3, "c", Some("b"))], 2)
        .unwrap();
    assert_eq!(store.head(&x).unwrap().map(|h| h.exec_seq), Some(5));
    assert_eq!(
        store.authority(&x).unwrap(),
        Authority::Authoritative {
            first_seq: 3,
            through_seq: 5
        }
    );
    store
        .apply_replicated(&x, &[chain_event("x", 7, "g", Some("f"))], 3)
        .unwrap();
    assert_eq!(store.head(&x).unwrap().map(|h| h.exec_seq), Some(7));
    assert_eq!(
        store.authority(&x).unwrap(),
        Authority::Authoritative {
            first_seq: 3,
            through_seq: 7
        }
    );
}

#[test]
fn replicated_events_never_make_a_partition_servable() {
    let (_, store) = mem_store();
    let x = exec("x");
    let all = [
        chain_event("x", 1, "a", None),
        chain_event("x", 2, "b", Some("a")),
    ];
    store.apply_replicated(&x, &all, 1).unwrap();
    assert_eq!(
        guarded(&store, "x"),
        Guarded::CannotAnswer(Reason::NoCoverage)
    );
}

// ---- 4.3 populate_from_log ----

#[test]
fn an_unpopulated_execution_answers_not_populated_never_an_empty_chain() {
    let (_, store) = mem_store();
    assert_eq!(
        guarded(&store, "never-seen"),
        Guarded::CannotAnswer(Reason::NotPopulated)
    );
}

#[test]
fn a_populated_empty_execution_answers_authoritative_empty() {
    let (_, store) = mem_store();
    assert_eq!(
        populate(&store, "x", &[]),
        FromLog::InSync {
            total: 0,
            appended: 0
        }
    );
    assert_eq!(
        store.authority(&exec("x")).unwrap(),
        Authority::Authoritative {
            first_seq: 0,
            through_seq: 0
        }
    );
    assert_eq!(guarded(&store, "x"), Guarded::Authoritative(vec![]));
}

#[test]
fn a_log_already_in_the_store_plans_no_write_and_a_new_one_does() {
    let (_, store) = mem_store();
    let x = exec("x");
    for log in [Vec::new(), linked_log(&["a", "b"])] {
        let first = store.evaluate_populate(&x, &log).unwrap();
        assert!(!first.effects.is_empty(), "the first populate writes");
        populate(&store, "x", &log);
        let again = store.evaluate_populate(&x, &log).unwrap();
        assert!(
            again.effects.is_empty(),
            "the same log again plans nothing to write: {again:?}"
        );
    }
}

#[test]
fn an_empty_log_over_stored_events_is_stale_log() {
    let (_, store) = mem_store();
    populate(&store, "x", &linked_log(&["a", "b"]));
    assert_eq!(
        populate(&store, "x", &[]),
        FromLog::StaleLog {
            stored_len: 2,
            log_len: 0
        }
    );
    assert_eq!(authoritative_ids(&store, "x"), ["a", "b"]);
}

#[test]
fn a_log_is_populated_then_served_and_the_same_log_twice_appends_nothing() {
    let (engine, store) = mem_store();
    let log = linked_log(&["a", "b", "c"]);
    assert_eq!(
        populate(&store, "x", &log),
        FromLog::InSync {
            total: 3,
            appended: 3
        }
    );
    assert_eq!(authoritative_ids(&store, "x"), ["a", "b", "c"]);
    let before = engine.dump();
    assert_eq!(
        populate(&store, "x", &log),
        FromLog::InSync {
            total: 3,
            appended: 0
        }
    );
    assert_eq!(engine.dump(), before);
}

#[test]
fn a_longer_log_extends_the_partition_incrementally() {
    let (_, store) = mem_store();
    populate(&store, "x", &linked_log(&["a", "b"]));
    let outcome = populate(&store, "x", &linked_log(&["a", "b", "c", "d"]));
    assert_eq!(
        outcome,
        FromLog::InSync {
            total: 4,
            appended: 2
        }
    );
    assert_eq!(outcome.label(), "extended");
    assert_eq!(authoritative_ids(&store, "x"), ["a", "b", "c", "d"]);
}

#[test]
fn a_lower_id_committed_later_causes_no_divergence_because_order_follows_links() {
    let (_, store) = mem_store();
    populate(
        &store,
        "x",
        &[log_event("m", None), log_event("q", Some("m"))],
    );
    // "b" sorts before both but links after "q"; the log hands the events over in id order.
    let log = [
        log_event("b", Some("q")),
        log_event("m", None),
        log_event("q", Some("m")),
    ];
    assert_eq!(
        populate(&store, "x", &log),
        FromLog::InSync {
            total: 3,
            appended: 1
        }
    );
    assert_eq!(authoritative_ids(&store, "x"), ["m", "q", "b"]);
}

#[test]
fn a_stale_log_is_stale_log_not_divergence_and_the_partition_stays_servable() {
    let (_, store) = mem_store();
    populate(&store, "x", &linked_log(&["a", "b", "c", "d", "e"]));
    let outcome = populate(&store, "x", &linked_log(&["a", "b"]));
    assert_eq!(
        outcome,
        FromLog::StaleLog {
            stored_len: 5,
            log_len: 2
        }
    );
    assert!(outcome.is_healthy());
    assert_eq!(authoritative_ids(&store, "x"), ["a", "b", "c", "d", "e"]);
}

#[test]
fn a_content_conflict_in_a_shorter_log_is_diverged_not_stale() {
    let (_, store) = mem_store();
    populate(&store, "x", &linked_log(&["a", "b", "c", "d"]));
    let outcome = populate(&store, "x", &linked_log(&["a", "z"]));
    assert_eq!(
        outcome,
        FromLog::Diverged {
            at_position: 1,
            stored: eid("b"),
            log: eid("z")
        }
    );
    assert!(!outcome.is_healthy());
}

#[test]
fn divergence_revokes_serve_trust_but_keeps_events_and_watermark_as_evidence() {
    let (_, store) = mem_store();
    populate(&store, "x", &linked_log(&["a", "b", "c"]));
    let mut log = linked_log(&["a", "b", "c", "d"]);
    log[2].payload = json!({"rewritten": true});
    let outcome = populate(&store, "x", &log);
    assert_eq!(
        outcome,
        FromLog::Diverged {
            at_position: 2,
            stored: eid("c"),
            log: eid("c")
        }
    );
    assert_eq!(store.coverage(&exec("x")).unwrap(), None);
    assert_eq!(
        guarded(&store, "x"),
        Guarded::CannotAnswer(Reason::NoCoverage)
    );
    assert_eq!(
        ids(&store.chain(&exec("x")).unwrap()),
        ["a", "b", "c"],
        "nothing appended"
    );
    assert_eq!(
        store.authority(&exec("x")).unwrap(),
        Authority::Authoritative {
            first_seq: 1,
            through_seq: 3
        }
    );
}

#[test]
fn each_malformed_log_is_refused_appends_nothing_and_revokes_coverage() {
    let cases = [
        (
            vec![
                log_event("a", None),
                log_event("b", Some("a")),
                log_event("c", Some("a")),
            ],
            Refusal::Fork,
        ),
        (
            vec![log_event("a", None), log_event("b", None)],
            Refusal::MultipleRoots,
        ),
        (
            vec![log_event("a", None), log_event("b", Some("ghost"))],
            Refusal::DanglingPrev,
        ),
        (
            vec![log_event("a", Some("b")), log_event("b", Some("a"))],
            Refusal::NoRoot,
        ),
        (
            vec![
                log_event("a", None),
                log_event("c", Some("d")),
                log_event("d", Some("c")),
            ],
            Refusal::Unreachable,
        ),
    ];
    for (log, reason) in cases {
        let (_, store) = mem_store();
        populate(&store, "x", &linked_log(&["a"]));
        assert_eq!(authoritative_ids(&store, "x"), ["a"]);
        assert_eq!(populate(&store, "x", &log), FromLog::Refused { reason });
        assert_eq!(
            ids(&store.chain(&exec("x")).unwrap()),
            ["a"],
            "{reason:?}: nothing appended"
        );
        assert_eq!(
            store.coverage(&exec("x")).unwrap(),
            None,
            "{reason:?}: coverage revoked"
        );
        assert_eq!(
            guarded(&store, "x"),
            Guarded::CannotAnswer(Reason::NoCoverage)
        );
    }
}

#[test]
fn a_refused_log_on_a_fresh_execution_leaves_it_not_populated() {
    let (_, store) = mem_store();
    let log = [log_event("a", None), log_event("b", None)];
    assert_eq!(
        populate(&store, "x", &log),
        FromLog::Refused {
            reason: Refusal::MultipleRoots
        }
    );
    assert_eq!(
        guarded(&store, "x"),
        Guarded::CannotAnswer(Reason::NotPopulated)
    );
}

#[test]
fn a_log_repeating_an_event_id_is_invalid_input() {
    let (_, store) = mem_store();
    let log = [log_event("a", None), log_event("a", None)];
    let err = store.populate_from_log(&exec("x"), &log, 1).unwrap_err();
    assert!(matches!(err, PopulateError::InvalidInput(_)));
    assert_eq!(
        guarded(&store, "x"),
        Guarded::CannotAnswer(Reason::NotPopulated)
    );
}

#[test]
fn coverage_never_shrinks_so_a_stale_log_cannot_serve_an_interrupted_long_one_short() {
    // A populate of 10 events in batches of 4 fails after its first batch: coverage says 10,
    // four events are stored, no watermark. A stale log of 6 then arrives. It reaches the
    // coverage write (the store holds less than it), where the total must stay 10: had it shrunk
    // to 6, the six stored events would be served as the whole chain.
    let config = StoreConfig {
        populate_batch_events_max: 4,
        ..StoreConfig::default()
    };
    let (engine, store) = mem_store_with(config);
    let names: Vec<String> = (0..10).map(|i| format!("e{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    engine.fail_write_after(2);
    assert!(store
        .populate_from_log(&exec("x"), &linked_log(&names), 1)
        .is_err());
    assert_eq!(
        store.coverage(&exec("x")).unwrap().map(|c| c.total),
        Some(10)
    );
    assert_eq!(store.chain(&exec("x")).unwrap().len(), 4);

    let outcome = populate(&store, "x", &linked_log(&names[..6]));
    assert_eq!(
        outcome,
        FromLog::InSync {
            total: 10,
            appended: 2
        }
    );
    assert_eq!(
        store.coverage(&exec("x")).unwrap().map(|c| c.total),
        Some(10)
    );
    assert_eq!(
        guarded(&store, "x"),
        Guarded::CannotAnswer(Reason::CoverageMismatch)
    );

    populate(&store, "x", &linked_log(&names));
    assert_eq!(authoritative_ids(&store, "x"), names);
}

#[test]
fn coverage_raise_keeps_the_larger_total_under_the_same_root_only() {
    let old = Coverage {
        root_event_id: Some(eid("r")),
        total: 9,
        origin: Origin::Log,
    };
    let smaller = Coverage {
        total: 4,
        ..old.clone()
    };
    assert_eq!(smaller.raise(Some(&old)).total, 9);
    let larger = Coverage {
        total: 12,
        ..old.clone()
    };
    assert_eq!(larger.clone().raise(Some(&old)), larger);
    let other_root = Coverage {
        root_event_id: Some(eid("s")),
        total: 2,
        origin: Origin::Log,
    };
    assert_eq!(other_root.clone().raise(Some(&old)), other_root);
}

#[test]
fn an_interrupted_populate_is_refused_until_a_retry_completes_it() {
    let config = StoreConfig {
        populate_batch_events_max: 2,
        ..StoreConfig::default()
    };
    let names = ["a", "b", "c", "d", "e"];
    for failing_write in 1..=3 {
        let (engine, store) = mem_store_with(config.clone());
        engine.fail_write_after(failing_write);
        assert!(store
            .populate_from_log(&exec("x"), &linked_log(&names), 1)
            .is_err());
        assert!(
            matches!(guarded(&store, "x"), Guarded::CannotAnswer(_)),
            "write {failing_write}"
        );
        populate(&store, "x", &linked_log(&names));
        assert_eq!(authoritative_ids(&store, "x"), names);
    }
}

// ---- 4.4 reads ----

#[test]
fn a_watermark_ahead_of_the_content_refuses() {
    // The seed's "restart freezes the chain while the watermark advances": the watermark says 4,
    // the store holds 3.
    let (_, store) = mem_store();
    populate(&store, "x", &linked_log(&["a", "b", "c"]));
    let bump = Effect {
        execution_id: exec("x"),
        head_check: HeadCheck::Any,
        events: vec![],
        watermark: Some(Watermark {
            first_seq: 1,
            through_seq: 4,
        }),
        coverage: CoverageChange::Keep,
        session: SessionChange::Keep,
    };
    store.apply_effect(&bump, 9).unwrap();
    assert_eq!(
        guarded(&store, "x"),
        Guarded::CannotAnswer(Reason::WatermarkAhead)
    );
}

#[test]
fn a_watermark_behind_the_content_refuses() {
    // A populate of an authoritative execution interrupted after its first batch: events beyond
    // the watermark are stored.
    let config = StoreConfig {
        populate_batch_events_max: 1,
        ..StoreConfig::default()
    };
    let (engine, store) = mem_store_with(config);
    populate(&store, "x", &linked_log(&["a"]));
    engine.fail_write_after(2);
    assert!(store
        .populate_from_log(&exec("x"), &linked_log(&["a", "b", "c"]), 2)
        .is_err());
    assert_eq!(store.head(&exec("x")).unwrap().map(|h| h.exec_seq), Some(2));
    assert_eq!(
        guarded(&store, "x"),
        Guarded::CannotAnswer(Reason::WatermarkAhead)
    );
}

#[test]
fn a_chain_whose_length_or_root_disagrees_with_coverage_refuses() {
    let (_, store) = mem_store();
    populate(&store, "x", &linked_log(&["a", "b"]));
    let claim = |root: &str, total: u64| Effect {
        execution_id: exec("x"),
        head_check: HeadCheck::Any,
        events: vec![],
        watermark: None,
        coverage: CoverageChange::Raise(Coverage {
            root_event_id: Some(eid(root)),
            total,
            origin: Origin::Log,
        }),
        session: SessionChange::Keep,
    };
    store.apply_effect(&claim("a", 3), 9).unwrap();
    assert_eq!(
        guarded(&store, "x"),
        Guarded::CannotAnswer(Reason::CoverageMismatch)
    );
    store.apply_effect(&claim("z", 2), 9).unwrap();
    assert_eq!(
        guarded(&store, "x"),
        Guarded::CannotAnswer(Reason::CoverageMismatch)
    );
}

#[test]
fn a_chain_with_a_broken_link_refuses() {
    // Replicated events link c -> a, skipping b; a coverage record claims three events.
    let (_, store) = mem_store();
    let x = exec("x");
    let delivery = [
        chain_event("x", 1, "a", None),
        chain_event("x", 2, "b", Some("a")),
        chain_event("x", 3, "c", Some("a")),
    ];
    store.apply_replicated(&x, &delivery, 1).unwrap();
    let cover = Effect {
        execution_id: x.clone(),
        head_check: HeadCheck::Any,
        events: vec![],
        watermark: None,
        coverage: CoverageChange::Raise(Coverage {
            root_event_id: Some(eid("a")),
            total: 3,
            origin: Origin::Log,
        }),
        session: SessionChange::Keep,
    };
    store.apply_effect(&cover, 2).unwrap();
    assert_eq!(
        guarded(&store, "x"),
        Guarded::CannotAnswer(Reason::BrokenChain)
    );
    assert!(!store.chain_is_complete(&x).unwrap().is_complete());
}

#[test]
fn a_chain_with_a_hole_refuses_and_names_the_gap() {
    let (_, store) = mem_store();
    let x = exec("x");
    let delivery = [
        chain_event("x", 1, "a", None),
        chain_event("x", 3, "c", Some("b")),
    ];
    store.apply_replicated(&x, &delivery, 1).unwrap();
    let cover = Effect {
        execution_id: x.clone(),
        head_check: HeadCheck::Any,
        events: vec![],
        watermark: None,
        coverage: CoverageChange::Raise(Coverage {
            root_event_id: Some(eid("a")),
            total: 2,
            origin: Origin::Log,
        }),
        session: SessionChange::Keep,
    };
    store.apply_effect(&cover, 2).unwrap();
    assert_eq!(
        guarded(&store, "x"),
        Guarded::CannotAnswer(Reason::BrokenChain)
    );
    assert_eq!(
        store.chain_is_complete(&x).unwrap().gap_at(),
        Some(&eid("b"))
    );
}

#[test]
fn completeness_compares_the_walk_with_the_span_not_a_count() {
    // Two pseudo-roots: seq 3 has no prev. Every seq 1..3 is present, so a count would say
    // complete; the walk from the head stops at seq 3.
    let (_, store) = mem_store();
    let x = exec("x");
    let delivery = [
        chain_event("x", 1, "a", None),
        chain_event("x", 2, "b", Some("a")),
        chain_event("x", 3, "c", None),
    ];
    store.apply_replicated(&x, &delivery, 1).unwrap();
    assert_eq!(
        store.chain_is_complete(&x).unwrap(),
        Completeness::Incomplete {
            gap_at: None,
            walked: 1,
            span: 3
        }
    );
}

#[test]
fn event_reads_one_event_by_id() {
    let (_, store) = mem_store();
    store.append(&exec("x"), &req("e1", None), 4).unwrap();
    let event = store.event(&exec("x"), &eid("e1")).unwrap().unwrap();
    assert_eq!((event.exec_seq, event.commit_index), (1, 4));
    assert_eq!(store.event(&exec("x"), &eid("nope")).unwrap(), None);
    assert_eq!(store.event(&exec("y"), &eid("e1")).unwrap(), None);
}

#[test]
fn the_change_feed_is_commit_ordered_and_pages_never_split_a_commit() {
    let (_, store) = mem_store();
    store.append(&exec("b"), &req("b1", None), 1).unwrap();
    populate(&store, "a", &linked_log(&["a1", "a2", "a3"]));
    store.append(&exec("c"), &req("c1", None), 9).unwrap();
    let all = store.changes(0, 100).unwrap();
    let seen: Vec<(u64, String)> = all
        .changes
        .iter()
        .map(|c| (c.commit_index, c.event_id.to_string()))
        .collect();
    assert_eq!(
        seen,
        [
            (1, "b1".into()),
            (7, "a1".into()),
            (7, "a2".into()),
            (7, "a3".into()),
            (9, "c1".into())
        ]
    );
    assert_eq!(all.next, 9);
    let exact = store.changes(0, 5).unwrap();
    assert_eq!(
        exact.changes.len(),
        5,
        "a page exactly as long as what is left holds all of it"
    );

    let first = store.changes(0, 2).unwrap();
    assert_eq!(
        first.changes.len(),
        4,
        "the page takes the whole of commit 7"
    );
    assert_eq!(first.next, 7);
    let second = store.changes(first.next, 2).unwrap();
    assert_eq!(second.changes.len(), 1);
    assert_eq!(second.next, 9);
    let empty = store.changes(9, 2).unwrap();
    assert!(empty.changes.is_empty());
    assert_eq!(empty.next, 9);
}

// ---- 4.3 populate sessions: a log sent in parts ----

fn session(id: &str, position: u64, total: u64) -> PopulateSession {
    PopulateSession {
        id: SessionId::new(id).unwrap(),
        position,
        total,
    }
}

fn part(
    store: &ChainStore<MemEngine>,
    e: &str,
    s: &PopulateSession,
    events: &[chainstore_model::LogEvent],
) -> Result<PartOutcome, PopulateError> {
    store.populate_part(&exec(e), s, events, 7)
}

fn ten() -> Vec<chainstore_model::LogEvent> {
    linked_log(&["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"])
}

#[test]
fn a_log_sent_in_parts_is_unservable_until_its_last_part_then_authoritative() {
    let (_, store) = mem_store();
    let log = ten();
    let accepted = |next_position, appended| PartOutcome::Accepted {
        next_position,
        total: 10,
        appended,
    };
    // Within a part the events may come in any order; the parts come in link order.
    let mut first: Vec<_> = log[..3].to_vec();
    first.reverse();
    assert_eq!(
        part(&store, "x", &session("s", 0, 10), &first),
        Ok(accepted(3, 3))
    );
    assert_eq!(
        guarded(&store, "x"),
        Guarded::CannotAnswer(Reason::NotPopulated)
    );
    assert_eq!(
        part(&store, "x", &session("s", 3, 10), &log[3..6]),
        Ok(accepted(6, 3))
    );
    assert!(matches!(guarded(&store, "x"), Guarded::CannotAnswer(_)));
    assert_eq!(
        part(&store, "x", &session("s", 6, 10), &log[6..]),
        Ok(PartOutcome::Finished(FromLog::InSync {
            total: 10,
            appended: 4
        }))
    );
    assert_eq!(
        authoritative_ids(&store, "x"),
        ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"]
    );
    // The same log again, whole or in parts, appends nothing and keeps the answer.
    assert_eq!(
        populate(&store, "x", &log),
        FromLog::InSync {
            total: 10,
            appended: 0
        }
    );
    assert_eq!(
        part(&store, "x", &session("t", 0, 10), &log[..5]),
        Ok(accepted(5, 0))
    );
    assert_eq!(authoritative_ids(&store, "x").len(), 10);
}

#[test]
fn a_session_extends_an_authoritative_chain_which_is_refused_until_the_last_part() {
    let (_, store) = mem_store();
    let log = ten();
    populate(&store, "x", &log[..4]);
    assert_eq!(authoritative_ids(&store, "x").len(), 4);
    part(&store, "x", &session("s", 0, 10), &log[..5]).unwrap();
    // Coverage now says 10 while 5 are stored: never served short.
    assert!(matches!(guarded(&store, "x"), Guarded::CannotAnswer(_)));
    assert_eq!(
        store.coverage(&exec("x")).unwrap().map(|c| c.total),
        Some(10)
    );
    part(&store, "x", &session("s", 5, 10), &log[5..]).unwrap();
    assert_eq!(authoritative_ids(&store, "x").len(), 10);
}

#[test]
fn a_session_over_a_stored_chain_keeps_it_served_until_a_part_appends() {
    let (_, store) = mem_store();
    let mut log = ten();
    populate(&store, "x", &log);
    log.extend(linked_log(&["j", "k", "l"]).into_iter().skip(1));
    for (from, to) in [(0, 4), (4, 8)] {
        part(
            &store,
            "x",
            &session("s", from, 12),
            &log[from as usize..to as usize],
        )
        .unwrap();
        assert_eq!(authoritative_ids(&store, "x").len(), 10, "after {to}");
    }
    part(&store, "x", &session("s", 8, 12), &log[8..11]).unwrap();
    assert!(matches!(guarded(&store, "x"), Guarded::CannotAnswer(_)));
    part(&store, "x", &session("s", 11, 12), &log[11..]).unwrap();
    assert_eq!(authoritative_ids(&store, "x").len(), 12);
}

#[test]
fn a_part_that_skips_ahead_or_names_no_open_session_is_a_conflict_and_writes_nothing() {
    let (engine, store) = mem_store();
    let log = ten();
    let conflict = |next_position| Err(PopulateError::SessionConflict { next_position });
    assert_eq!(
        part(&store, "x", &session("s", 3, 10), &log[3..6]),
        conflict(None)
    );
    part(&store, "x", &session("s", 0, 10), &log[..3]).unwrap();
    let writes = engine.writes_total();
    assert_eq!(
        part(&store, "x", &session("s", 4, 10), &log[4..6]),
        conflict(Some(3))
    );
    assert_eq!(
        part(&store, "x", &session("other", 3, 10), &log[3..6]),
        conflict(None)
    );
    assert!(matches!(
        part(&store, "x", &session("s", 3, 12), &log[3..6]),
        Err(PopulateError::InvalidInput(_))
    ));
    assert!(matches!(
        part(&store, "x", &session("s", 3, 5), &log[3..6]),
        Err(PopulateError::InvalidInput(_))
    ));
    assert!(matches!(
        part(&store, "x", &session("s", 3, 10), &[]),
        Err(PopulateError::InvalidInput(_))
    ));
    assert_eq!(engine.writes_total(), writes, "a refused part wrote");
    // Positions the session has not checked stay unchecked even when the store holds events
    // there (appended by another writer): a part may not start after them.
    store.append(&exec("x"), &req("d", Some("c")), 8).unwrap();
    store.append(&exec("x"), &req("e", Some("d")), 9).unwrap();
    let writes = engine.writes_total();
    assert_eq!(
        part(&store, "x", &session("s", 5, 10), &log[5..]),
        conflict(Some(3))
    );
    assert_eq!(engine.writes_total(), writes, "a refused part wrote");
    // A new session's first part replaces the open one.
    part(&store, "x", &session("t", 0, 10), &log[..2]).unwrap();
    assert_eq!(
        part(&store, "x", &session("s", 3, 10), &log[3..6]),
        conflict(None)
    );
    part(&store, "x", &session("t", 2, 10), &log[2..]).unwrap();
    assert_eq!(authoritative_ids(&store, "x").len(), 10);
}

#[test]
fn a_part_sent_again_is_answered_again_and_appends_nothing() {
    let (_, store) = mem_store();
    let log = ten();
    part(&store, "x", &session("s", 0, 10), &log[..4]).unwrap();
    part(&store, "x", &session("s", 4, 10), &log[4..7]).unwrap();
    // A retry of a part already taken (its answer was lost) and an overlapping part.
    assert_eq!(
        part(&store, "x", &session("s", 4, 10), &log[4..7]),
        Ok(PartOutcome::Accepted {
            next_position: 7,
            total: 10,
            appended: 0
        })
    );
    assert_eq!(
        part(&store, "x", &session("s", 2, 10), &log[2..8]),
        Ok(PartOutcome::Accepted {
            next_position: 8,
            total: 10,
            appended: 1
        })
    );
    let done = FromLog::InSync {
        total: 10,
        appended: 2,
    };
    assert_eq!(
        part(&store, "x", &session("s", 8, 10), &log[8..]),
        Ok(PartOutcome::Finished(done))
    );
    assert_eq!(
        part(&store, "x", &session("s", 8, 10), &log[8..]),
        Ok(PartOutcome::Finished(FromLog::InSync {
            total: 10,
            appended: 0
        }))
    );
    assert_eq!(authoritative_ids(&store, "x").len(), 10);
}

#[test]
fn a_part_that_disagrees_with_the_stored_chain_is_diverged_revokes_and_ends_the_session() {
    let (_, store) = mem_store();
    let log = ten();
    populate(&store, "x", &log[..4]);
    let mut other = ten();
    other[2].payload = json!({"rewritten": true});
    part(&store, "x", &session("s", 0, 10), &other[..2]).unwrap();
    assert_eq!(
        part(&store, "x", &session("s", 2, 10), &other[2..5]),
        Ok(PartOutcome::Finished(FromLog::Diverged {
            at_position: 2,
            stored: eid("c"),
            log: eid("c"),
        }))
    );
    assert_eq!(
        guarded(&store, "x"),
        Guarded::CannotAnswer(Reason::NoCoverage)
    );
    assert_eq!(
        part(&store, "x", &session("s", 5, 10), &other[5..]),
        Err(PopulateError::SessionConflict {
            next_position: None
        })
    );
    // The events stay as evidence.
    assert_eq!(store.head(&exec("x")).unwrap().map(|h| h.exec_seq), Some(4));
}

#[test]
fn a_part_that_is_not_a_chain_segment_after_the_parts_before_is_refused() {
    let cases = [
        (
            vec![log_event("d", Some("c")), log_event("z", None)],
            Refusal::MultipleRoots,
        ),
        (
            vec![log_event("d", Some("e")), log_event("e", Some("d"))],
            Refusal::NoRoot,
        ),
        (
            vec![log_event("d", Some("c")), log_event("e", Some("q"))],
            Refusal::DanglingPrev,
        ),
        (
            vec![log_event("d", Some("c")), log_event("e", Some("c"))],
            Refusal::Fork,
        ),
    ];
    for (events, reason) in cases {
        let (_, store) = mem_store();
        part(&store, "x", &session("s", 0, 10), &ten()[..3]).unwrap();
        assert_eq!(
            part(&store, "x", &session("s", 3, 10), &events),
            Ok(PartOutcome::Finished(FromLog::Refused { reason })),
            "{events:?}"
        );
        assert_eq!(
            guarded(&store, "x"),
            Guarded::CannotAnswer(Reason::NotPopulated)
        );
        assert_eq!(store.coverage(&exec("x")).unwrap(), None);
        assert_eq!(
            part(&store, "x", &session("s", 3, 10), &ten()[3..]),
            Err(PopulateError::SessionConflict {
                next_position: None
            })
        );
    }
    // An id the log already holds at an earlier position.
    let (_, store) = mem_store();
    part(&store, "x", &session("s", 0, 10), &ten()[..3]).unwrap();
    assert!(matches!(
        part(
            &store,
            "x",
            &session("s", 3, 10),
            &[log_event("c", Some("c"))]
        ),
        Err(PopulateError::InvalidInput(_))
    ));
    assert!(matches!(
        part(
            &store,
            "x",
            &session("s", 3, 10),
            &[log_event("a", Some("c"))]
        ),
        Err(PopulateError::Forked(_))
    ));
}

#[test]
fn a_store_longer_than_the_sessions_log_answers_stale_log_at_the_last_part_and_stays_served() {
    let (engine, store) = mem_store();
    populate(&store, "x", &ten());
    let writes = engine.writes_total();
    let log = &ten()[..6];
    part(&store, "x", &session("s", 0, 6), &log[..3]).unwrap();
    assert_eq!(authoritative_ids(&store, "x").len(), 10);
    assert_eq!(
        part(&store, "x", &session("s", 3, 6), &log[3..]),
        Ok(PartOutcome::Finished(FromLog::StaleLog {
            stored_len: 10,
            log_len: 6
        }))
    );
    assert_eq!(authoritative_ids(&store, "x").len(), 10);
    // Only the session's own record was written.
    assert_eq!(engine.writes_total(), writes + 2);
}

#[test]
fn an_append_between_parts_is_checked_by_the_part_that_covers_it() {
    let log = ten();
    for same in [true, false] {
        let (_, store) = mem_store();
        part(&store, "x", &session("s", 0, 10), &log[..3]).unwrap();
        let mut appended = req("d", Some("c"));
        if !same {
            appended.payload = json!("not the log's");
        }
        store.append(&exec("x"), &appended, 8).unwrap();
        let answer = part(&store, "x", &session("s", 3, 10), &log[3..6]).unwrap();
        if same {
            assert_eq!(
                answer,
                PartOutcome::Accepted {
                    next_position: 6,
                    total: 10,
                    appended: 2
                }
            );
            part(&store, "x", &session("s", 6, 10), &log[6..]).unwrap();
            assert_eq!(authoritative_ids(&store, "x").len(), 10);
        } else {
            assert_eq!(
                answer,
                PartOutcome::Finished(FromLog::Diverged {
                    at_position: 3,
                    stored: eid("d"),
                    log: eid("d")
                })
            );
            assert!(matches!(guarded(&store, "x"), Guarded::CannotAnswer(_)));
        }
    }
}

#[test]
fn a_failure_at_any_write_of_a_session_never_serves_a_short_chain_and_a_new_session_completes() {
    let config = StoreConfig {
        populate_batch_events_max: 2,
        ..StoreConfig::default()
    };
    let log = ten();
    let parts = [(0usize, 4usize), (4, 7), (7, 10)];
    for fail_after in 0..12 {
        let (engine, store) = mem_store_with(config.clone());
        populate(&store, "x", &log[..2]);
        engine.fail_write_after(fail_after);
        let mut failed = false;
        for (from, to) in parts {
            let s = session("s", from as u64, 10);
            if part(&store, "x", &s, &log[from..to]).is_err() {
                failed = true;
                break;
            }
        }
        engine.clear_faults();
        match guarded(&store, "x") {
            Guarded::Authoritative(events) => assert!(
                events.len() == 10 || (failed && events.len() == 2),
                "failure after {fail_after} writes served {} events",
                events.len()
            ),
            Guarded::CannotAnswer(_) => assert!(failed, "no failure, yet not served"),
        }
        for (from, to) in parts {
            part(
                &store,
                "x",
                &session("again", from as u64, 10),
                &log[from..to],
            )
            .unwrap();
        }
        assert_eq!(
            authoritative_ids(&store, "x").len(),
            10,
            "after {fail_after}"
        );
    }
}

/// Requests for events `ids`, each naming the one before it (the first names `prev`).
fn linked_requests(ids: &[&str], prev: Option<&str>) -> Vec<chainstore_model::AppendRequest> {
    ids.iter()
        .enumerate()
        .map(|(i, id)| req(id, if i == 0 { prev } else { Some(ids[i - 1]) }))
        .collect()
}

#[test]
fn an_append_of_several_events_is_one_batch_with_one_commit_index_and_consecutive_seqs() {
    let (engine, store) = mem_store();
    let mut first = linked_requests(&["g1", "g2", "g3"], None);
    first[0].genesis = true;
    let answers = store.append_batch(&exec("b"), &first, 7).unwrap();
    assert_eq!(
        answers
            .iter()
            .map(|a| (a.exec_seq, a.commit_index, a.duplicate))
            .collect::<Vec<_>>(),
        [(1, 7, false), (2, 7, false), (3, 7, false)]
    );
    // A genesis batch raises coverage over all of its events: served at once.
    assert_eq!(authoritative_ids(&store, "b"), ["g1", "g2", "g3"]);
    let writes_before = engine.writes_total();
    store
        .append_batch(&exec("b"), &linked_requests(&["g4", "g5"], Some("g3")), 8)
        .unwrap();
    assert_eq!(engine.writes_total() - writes_before, 1, "one atomic batch");
    assert_eq!(
        authoritative_ids(&store, "b"),
        ["g1", "g2", "g3", "g4", "g5"]
    );
}

#[test]
fn a_retried_append_of_several_answers_duplicates_and_a_partly_stored_one_appends_the_rest() {
    let (_, store) = mem_store();
    let batch = linked_requests(&["e1", "e2", "e3"], None);
    store.append(&exec("x"), &batch[0], 1).unwrap();
    let answers = store.append_batch(&exec("x"), &batch, 2).unwrap();
    assert_eq!(
        answers
            .iter()
            .map(|a| (a.exec_seq, a.commit_index, a.duplicate))
            .collect::<Vec<_>>(),
        [(1, 1, true), (2, 2, false), (3, 2, false)]
    );
    let again = store.append_batch(&exec("x"), &batch, 3).unwrap();
    assert!(again.iter().all(|a| a.duplicate), "{again:?}");
    assert_eq!(ids(&store.chain(&exec("x")).unwrap()), ["e1", "e2", "e3"]);
}

#[test]
fn an_append_of_several_is_refused_whole_and_writes_nothing() {
    let (engine, store) = mem_store();
    store.append(&exec("x"), &req("e1", None), 1).unwrap();
    let before = engine.writes_total();
    let refused = |requests: Vec<chainstore_model::AppendRequest>| {
        store.append_batch(&exec("x"), &requests, 2).unwrap_err()
    };
    // Not linked in order.
    let mut unlinked = linked_requests(&["a", "b", "c"], Some("e1"));
    unlinked[2].prev_event_id = Some(eid("a"));
    assert!(matches!(refused(unlinked), AppendError::InvalidInput(_)));
    // Genesis past the first event.
    let mut late_genesis = linked_requests(&["a", "b"], Some("e1"));
    late_genesis[1].genesis = true;
    assert!(matches!(
        refused(late_genesis),
        AppendError::InvalidInput(_)
    ));
    // The first does not continue the head: one head check for all.
    assert!(matches!(
        refused(linked_requests(&["a", "b"], Some("zz"))),
        AppendError::NotHead { .. }
    ));
    // A stored event after a new one cannot be placed.
    assert!(matches!(
        refused(vec![req("a", Some("e1")), req("e1", Some("a"))]),
        AppendError::EventConflict { .. }
    ));
    // An empty append, and one over the count limit.
    assert!(matches!(refused(Vec::new()), AppendError::InvalidInput(_)));
    let many: Vec<String> = (0..1_001).map(|i| format!("m{i}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    assert!(matches!(
        refused(linked_requests(&many, Some("e1"))),
        AppendError::TooLarge(chainstore_model::Oversize {
            what: chainstore_model::Limit::AppendEvents,
            ..
        })
    ));
    assert_eq!(engine.writes_total(), before, "nothing was written");
    assert_eq!(ids(&store.chain(&exec("x")).unwrap()), ["e1"]);
}

#[test]
fn an_append_of_several_that_fails_on_io_stores_none_of_its_events() {
    let (engine, store) = mem_store();
    store.append(&exec("x"), &req("e1", None), 1).unwrap();
    engine.fail_write_after(1);
    let batch = linked_requests(&["e2", "e3", "e4"], Some("e1"));
    assert!(matches!(
        store.append_batch(&exec("x"), &batch, 2),
        Err(AppendError::Storage(_))
    ));
    assert_eq!(ids(&store.chain(&exec("x")).unwrap()), ["e1"]);
    store.append_batch(&exec("x"), &batch, 3).unwrap();
    assert_eq!(
        ids(&store.chain(&exec("x")).unwrap()),
        ["e1", "e2", "e3", "e4"]
    );
}
