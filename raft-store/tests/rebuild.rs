//! Rebuild and quarantine: a diverged execution is rebuilt from the log in one batch, and what
//! it held is kept, readable, under a numbered quarantine record. Each property on both engines.

mod common;

use chainstore_model::{FromLog, Guarded, LogEvent, Reason, RebuildError, Refusal};
use common::*;
use raft_store::{ApplyError, ChainStore, Engine, StoreConfig};

fn authoritative_ids<E: Engine>(store: &ChainStore<E>, e: &str) -> Vec<String> {
    match store
        .chain_if_authoritative(&exec(e))
        .expect("guarded read")
    {
        Guarded::Authoritative(events) => ids(&events),
        other => panic!("expected an authoritative answer, got {other:?}"),
    }
}

/// Every key and value of the store, to show that a refused rebuild changed nothing.
fn everything<E: Engine>(store: &ChainStore<E>) -> Vec<(Vec<u8>, Vec<u8>)> {
    store
        .engine()
        .scan(
            b"",
            &[0xff; 8],
            raft_store::engine::ScanOrder::Forward,
            usize::MAX,
        )
        .expect("scan")
}

/// `x`: the log's `a, b, c` populated, then a second writer's `intruder` appended after `c`.
fn diverged<E: Engine>(store: &ChainStore<E>) {
    assert!(matches!(
        store.populate_from_log(&exec("x"), &linked_log(&["a", "b", "c"]), 3),
        Ok(FromLog::InSync { .. })
    ));
    store
        .append(&exec("x"), &req("intruder", Some("c")), 4)
        .expect("the second writer's append");
    let outcome = store
        .populate_from_log(&exec("x"), &linked_log(&["a", "b", "c", "d"]), 5)
        .expect("populate");
    assert!(
        matches!(outcome, FromLog::Diverged { at_position: 3, .. }),
        "{outcome:?}"
    );
    assert!(matches!(
        store.chain_if_authoritative(&exec("x")).unwrap(),
        Guarded::CannotAnswer(_)
    ));
}

fn rebuild_moves_the_partition_aside_and_serves_the_log<E: Engine>(store: ChainStore<E>) {
    diverged(&store);
    let log = linked_log(&["a", "b", "c", "d"]);
    let (record, total) = store
        .rebuild(&exec("x"), &log, "a second writer", 1_700_000_000_000, 50)
        .expect("rebuild");
    assert_eq!(total, 4);
    assert_eq!(
        (record.number, record.events, record.commit_index),
        (1, 4, 50)
    );
    assert_eq!(record.reason, "a second writer");
    assert_eq!(record.quarantined_at_ms, 1_700_000_000_000);
    assert!(
        record.diagnosis.contains("position 3") && record.diagnosis.contains("intruder"),
        "{}",
        record.diagnosis
    );
    assert_eq!(
        record
            .head
            .as_ref()
            .map(|h| (h.exec_seq, h.event_id.to_string())),
        Some((4, "intruder".to_string()))
    );
    // The divergence revoked the coverage; the record keeps the watermark it had.
    assert!(record.coverage.is_none() && record.watermark.is_some());

    // The log's chain is served, every event written at the rebuild's index.
    assert_eq!(authoritative_ids(&store, "x"), ["a", "b", "c", "d"]);
    match store.chain_if_authoritative(&exec("x")).unwrap() {
        Guarded::Authoritative(events) => assert!(events.iter().all(|e| e.commit_index == 50)),
        other => panic!("{other:?}"),
    }
    // The evidence: the record and the events as they were stored, commit indexes included.
    let (records, truncated) = store.quarantine_records(&exec("x"), 10).unwrap();
    assert_eq!(
        (records.as_slice(), truncated),
        (std::slice::from_ref(&record), false)
    );
    let kept = store
        .quarantined_page(&exec("x"), 1, 1, 100, usize::MAX)
        .unwrap()
        .expect("record 1");
    assert_eq!(kept.record, record);
    assert_eq!(ids(&kept.events), ["a", "b", "c", "intruder"]);
    assert_eq!(kept.next_from_seq, None);
    assert_eq!(kept.events[3].commit_index, 4);
    assert_eq!(kept.events[3].exec_seq, 4);
    // Pages: from seq 2, two at a time.
    let page = store
        .quarantined_page(&exec("x"), 1, 2, 2, usize::MAX)
        .unwrap()
        .unwrap();
    assert_eq!(
        (ids(&page.events), page.next_from_seq),
        (vec!["b".into(), "c".into()], Some(4))
    );
    assert!(store
        .quarantined_page(&exec("x"), 2, 1, 10, usize::MAX)
        .unwrap()
        .is_none());

    // The id index went with the partition: the intruder's id is unknown to the execution now,
    // and the log's next event appends on the rebuilt head.
    assert!(store.event(&exec("x"), &eid("intruder")).unwrap().is_none());
    assert!(store.event(&exec("x"), &eid("d")).unwrap().is_some());
    assert!(matches!(
        store.populate_from_log(&exec("x"), &linked_log(&["a", "b", "c", "d", "e"]), 60),
        Ok(FromLog::InSync { appended: 1, .. })
    ));

    // Rebuilt again after another divergence: a second record, the first kept.
    store
        .append(&exec("x"), &req("intruder", Some("e")), 61)
        .unwrap();
    let log = linked_log(&["a", "b", "c", "d", "e", "f"]);
    let (second, _) = store.rebuild(&exec("x"), &log, "again", 2, 62).unwrap();
    assert_eq!((second.number, second.events), (2, 6));
    let (records, _) = store.quarantine_records(&exec("x"), 10).unwrap();
    assert_eq!(records.iter().map(|r| r.number).collect::<Vec<_>>(), [1, 2]);
    let (records, truncated) = store.quarantine_records(&exec("x"), 1).unwrap();
    assert_eq!((records[0].number, truncated), (2, true));
    assert_eq!(
        authoritative_ids(&store, "x"),
        ["a", "b", "c", "d", "e", "f"]
    );
}

#[test]
fn a_rebuild_moves_a_diverged_partition_into_quarantine_and_serves_the_log() {
    rebuild_moves_the_partition_aside_and_serves_the_log(mem_store().1);
    let dir = tempfile::tempdir().unwrap();
    rebuild_moves_the_partition_aside_and_serves_the_log(rocks_store(dir.path()));
}

fn refusals_change_nothing<E: Engine>(store: ChainStore<E>) {
    diverged(&store);
    store
        .populate_from_log(&exec("prefix"), &linked_log(&["p1", "p2"]), 9)
        .unwrap();
    let before = everything(&store);
    let log = linked_log(&["a", "b", "c", "d"]);
    let mut two_roots = linked_log(&["a", "b"]);
    two_roots.push(log_event("other-root", None));
    let cases: Vec<(&str, &str, Vec<LogEvent>, String)> = vec![
        (
            "prefix",
            "the stored chain is the log's beginning",
            linked_log(&["p1", "p2", "p3"]),
            "r".into(),
        ),
        ("unknown", "nothing stored", linked_log(&["u1"]), "r".into()),
        ("x", "two roots", two_roots, "r".into()),
        ("x", "no reason", log.clone(), "  ".into()),
        (
            "x",
            "a reason over the limit",
            log.clone(),
            "r".repeat(5_000),
        ),
    ];
    for (e, what, log, reason) in cases {
        let err = store.rebuild(&exec(e), &log, &reason, 1, 70).unwrap_err();
        match what {
            "the stored chain is the log's beginning" => assert_eq!(
                err,
                RebuildError::NotDiverged {
                    stored_len: 2,
                    log_len: 3
                }
            ),
            "nothing stored" => assert!(matches!(
                err,
                RebuildError::NotDiverged { stored_len: 0, .. }
            )),
            "two roots" => assert_eq!(err, RebuildError::LogRefused(Refusal::MultipleRoots)),
            "no reason" => assert!(matches!(err, RebuildError::InvalidInput(_))),
            _ => assert!(matches!(err, RebuildError::TooLarge(_))),
        }
        assert_eq!(
            everything(&store),
            before,
            "{what}: the refusal changed the store"
        );
    }
}

#[test]
fn a_rebuild_that_is_not_needed_or_has_no_chain_to_build_is_refused_and_changes_nothing() {
    refusals_change_nothing(mem_store().1);
    let dir = tempfile::tempdir().unwrap();
    refusals_change_nothing(rocks_store(dir.path()));
}

#[test]
fn a_long_log_is_rebuilt_in_batches_and_the_execution_is_unservable_until_the_last() {
    let (_, store) = mem_store_with(StoreConfig {
        populate_batch_events_max: 2,
        ..StoreConfig::default()
    });
    diverged(&store);
    let names: Vec<String> = (0..7).map(|i| format!("l{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut log = linked_log(&names);
    // The log arrives in any order.
    log.reverse();
    let plan = store
        .evaluate_rebuild(&exec("x"), &log, "long", 1)
        .expect("plan");
    assert_eq!((plan.total, plan.rest.len()), (7, 3));
    let (batch, record, applied) = store.stage_rebuild(&plan.rebuild, 80).unwrap();
    assert_eq!((record.events, applied.applied), (4, 2));
    store.engine().write(batch).unwrap();
    // Moved aside, the chain's first batch stored, no watermark yet: the store cannot answer.
    assert_eq!(
        store.chain_if_authoritative(&exec("x")).unwrap(),
        Guarded::CannotAnswer(Reason::NotPopulated)
    );
    for effect in &plan.rest {
        store.apply_effect(effect, 81).unwrap();
    }
    assert_eq!(authoritative_ids(&store, "x"), names);
}

#[test]
fn a_rebuild_is_refused_at_apply_when_the_execution_moved_since_its_evaluation() {
    let (_, store) = mem_store();
    diverged(&store);
    let plan = store
        .evaluate_rebuild(&exec("x"), &linked_log(&["a", "b", "c", "d"]), "r", 1)
        .unwrap();
    store
        .append(&exec("x"), &req("late", Some("intruder")), 90)
        .unwrap();
    let before = everything(&store);
    assert!(matches!(
        store.stage_rebuild(&plan.rebuild, 91),
        Err(ApplyError::HeadMoved { .. })
    ));
    assert_eq!(everything(&store), before);
}

#[test]
fn an_execution_the_log_never_held_is_rebuilt_empty_and_its_events_kept() {
    let (_, store) = mem_store();
    store.append(&exec("ghost"), &genesis("g1"), 1).unwrap();
    store
        .append(&exec("ghost"), &req("g2", Some("g1")), 2)
        .unwrap();
    let (record, total) = store
        .rebuild(&exec("ghost"), &[], "not in the log", 1, 3)
        .unwrap();
    assert_eq!((record.events, total), (2, 0));
    assert!(
        record.coverage.is_some(),
        "the genesis coverage is kept in the record"
    );
    assert_eq!(
        store.chain_if_authoritative(&exec("ghost")).unwrap(),
        Guarded::Authoritative(Vec::new())
    );
}
