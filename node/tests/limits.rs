//! The node's limits reach the store it opens: a payload over the configured limit is refused
//! with 413 on the leader and on a follower (which forwards), and nothing is stored.

mod common;

use std::time::Duration;

use common::inproc::Cluster;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_over_the_configured_limit_is_too_large_and_stores_nothing() {
    let c = Cluster::start_with(|config| config.limits.payload_bytes_max = 1_024).await;
    let leader = c
        .leader_among(&[1, 2, 3], Duration::from_secs(20))
        .await
        .expect("a leader");
    let follower = (1..=3).find(|id| *id != leader).expect("a follower");
    for node in [leader, follower] {
        let body = json!({
            "event_id": "big",
            "genesis": true,
            "payload": "x".repeat(2_000),
        });
        let (status, answer) = c
            .call(node, "POST", "/v1/executions/x/events", Some(body))
            .await;
        assert_eq!(
            (status, answer["error"].as_str()),
            (413, Some("too_large")),
            "{answer}"
        );
    }
    let (status, answer) = c.chain(leader, "x").await;
    assert!(
        answer.get("events").is_none(),
        "nothing was stored: {status} {answer}"
    );
    // Within the limit, the same append is stored.
    let (status, answer) = c
        .call(
            leader,
            "POST",
            "/v1/executions/x/events",
            Some(json!({ "event_id": "small", "genesis": true, "payload": "x".repeat(500) })),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_populate_longer_than_the_configured_batch_is_proposed_as_several_entries() {
    let c = Cluster::start_with(|config| config.limits.populate_batch_events_max = 2).await;
    let leader = c
        .leader_among(&[1, 2, 3], Duration::from_secs(20))
        .await
        .expect("a leader");
    let applied = |c: &Cluster| {
        c.node(leader)
            .raft_metrics()
            .last_applied
            .map_or(0, |l| l.index)
    };
    let before = applied(&c);
    let events: Vec<_> = (0..5)
        .map(|i| {
            json!({
                "event_id": format!("e{i}"),
                "prev_event_id": (i > 0).then(|| format!("e{}", i - 1)),
                "payload": i,
            })
        })
        .collect();
    let (status, answer) = c
        .call(
            leader,
            "POST",
            "/v1/executions/p/populate",
            Some(json!({ "events": events })),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        applied(&c) - before,
        3,
        "five events in batches of two are three entries"
    );
    let (status, answer) = c.chain(leader, "p").await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["events"].as_array().map(Vec::len), Some(5));
}
