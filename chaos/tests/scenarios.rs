//! Scripted simulations: the moments a random fault schedule reaches only by chance, placed on
//! purpose. Each is a property a leader must keep while leadership moves.

use std::time::Duration;

use chainstore_client::{ClientError, ReadOptions};
use chainstore_model::{AppendRequest, EventId, ExecutionId, Guarded};
use chaos::actors::client;
use chaos::scenario::Scenario;
use serde_json::json;

const SEED: u64 = 7;

fn exec(name: &str) -> ExecutionId {
    ExecutionId::new(name).unwrap()
}

fn append(event: &str, prev: Option<&str>) -> AppendRequest {
    AppendRequest {
        event_id: EventId::new(event).unwrap(),
        prev_event_id: prev.map(|p| EventId::new(p).unwrap()),
        parent_execution_id: None,
        payload: json!({ "event": event }),
        genesis: prev.is_none(),
    }
}

/// Appends through node `via` (one attempt, no retry) and steps until the answer is back.
fn acknowledged(s: &mut Scenario<'_>, via: u64, event: &str, prev: Option<&str>) {
    let c = client(&[via], 1, 3);
    let request = append(event, prev);
    let answer = s
        .call_and_wait(event, Duration::from_secs(20), async move {
            c.append(&exec("x"), &request).await
        })
        .unwrap();
    assert!(answer.is_ok(), "{event} through n{via}: {answer:?}");
}

fn ids(events: &[chainstore_model::ChainEvent]) -> Vec<String> {
    events.iter().map(|e| e.event_id.to_string()).collect()
}

/// A leader cut off from the others keeps believing it leads. Asked to append after the head
/// the new leader acknowledged, it must not answer `not_head` from its own stale state, and
/// asked for a linearizable read it must not serve the chain without the new event: both need
/// it to confirm its leadership first, which it cannot.
#[test]
fn a_deposed_leader_answers_nothing_from_its_own_state() {
    let mut s = Scenario::start(SEED, 3).unwrap();
    let old = s.ready_leader().unwrap();
    acknowledged(&mut s, old, "a1", None);
    s.isolate(old);
    s.run_until("the others elect a leader", Duration::from_secs(20), |s| {
        s.ready_leader().is_some_and(|l| l != old)
    })
    .unwrap();
    let new = s.ready_leader().unwrap();
    acknowledged(&mut s, new, "a2", Some("a1"));
    assert!(
        s.is_leader(old),
        "the test needs n{old} to still believe it leads"
    );

    let writer = client(&[old], 2, 1);
    let appended =
        s.call(async move { writer.append(&exec("x"), &append("a3", Some("a2"))).await });
    let reader = client(&[old], 3, 1);
    let read = s.call(async move { reader.chain(&exec("x"), ReadOptions::default()).await });
    s.run_until("both answers", Duration::from_secs(20), |_| {
        appended.borrow().is_some() && read.borrow().is_some()
    })
    .unwrap();

    let appended = appended.borrow_mut().take().unwrap();
    assert!(
        !matches!(appended, Err(ClientError::NotHead { .. }) | Ok(_)),
        "the deposed leader n{old} answered an append after a2 from its own state: {appended:?}"
    );
    let read = read.borrow_mut().take().unwrap();
    if let Ok(read) = &read {
        if let Guarded::Authoritative(events) = &read.answer {
            assert_eq!(
                ids(events),
                ["a1", "a2"],
                "the deposed leader n{old} served a linearizable read from its own state"
            );
        }
    }
}

/// An entry the old leader acknowledged can reach a follower without the news that it was
/// committed. When that follower becomes leader, the entry is in its log but not yet in its
/// state; it is committed (and applied) only with the first entry of the new term. A leader that
/// evaluated a write before then would answer from a state that lacks an acknowledged event.
#[test]
fn a_new_leader_evaluates_writes_only_once_it_has_applied_an_entry_of_its_term() {
    let mut s = Scenario::start(SEED, 3).unwrap();
    let old = s.ready_leader().unwrap();
    let followers: Vec<u64> = s.ids.iter().copied().filter(|id| *id != old).collect();
    let (next, other) = (followers[0], followers[1]);
    acknowledged(&mut s, old, "a1", None);
    let applied_a1 = s.node(old).unwrap().applied_index();
    s.run_until("both followers apply a1", Duration::from_secs(5), |s| {
        followers
            .iter()
            .all(|f| s.node(*f).is_some_and(|n| n.applied_index() >= applied_a1))
    })
    .unwrap();

    // `other` no longer hears the old leader; `next` receives a2 but never learns it committed.
    s.sim.partition(format!("n{old}"), format!("n{other}"));
    let logged = s
        .node(next)
        .unwrap()
        .raft_metrics()
        .last_log_index
        .unwrap_or(0);
    let writer = client(&[old], 4, 1);
    let a2 = s.call(async move { writer.append(&exec("x"), &append("a2", Some("a1"))).await });
    s.run_until(
        "a2 reaches the next leader's log",
        Duration::from_secs(5),
        |s| {
            s.node(next)
                .and_then(|n| n.raft_metrics().last_log_index)
                .is_some_and(|i| i > logged)
        },
    )
    .unwrap();
    s.sim.hold(format!("n{old}"), format!("n{next}"));
    s.crash(old);
    assert!(
        s.node(next).unwrap().applied_index() < logged + 1,
        "the test needs a2 unapplied on n{next}"
    );

    // The new term's first entry takes over 100 ms to commit (four trips of 30 ms on a new
    // connection): a write arriving meanwhile must wait for it.
    s.sim.set_link_latency(
        format!("n{next}"),
        format!("n{other}"),
        Duration::from_millis(30),
    );
    s.run_until(&format!("n{next} leads"), Duration::from_secs(20), |s| {
        s.is_leader(next)
    })
    .unwrap();
    let writer = client(&[next], 5, 1);
    let a3 = s.call(async move { writer.append(&exec("x"), &append("a3", Some("a2"))).await });
    s.run_until("the answer", Duration::from_secs(20), |_| {
        a3.borrow().is_some()
    })
    .unwrap();
    let a3 = a3.borrow_mut().take().unwrap();
    assert!(
        a3.is_ok(),
        "a write after a2 to the new leader n{next}, which holds a2 in its log: {a3:?} \
         (a2 answered {:?} before its leader crashed)",
        a2.borrow()
    );
    let reader = client(&[next], 6, 3);
    let read = s
        .call_and_wait("the chain", Duration::from_secs(20), async move {
            reader.chain(&exec("x"), ReadOptions::default()).await
        })
        .unwrap()
        .unwrap();
    match read.answer {
        Guarded::Authoritative(events) => assert_eq!(ids(&events), ["a1", "a2", "a3"]),
        other => panic!("the chain is not served: {other:?}"),
    }
}
