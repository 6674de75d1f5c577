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

/// A chain longer than one answer may carry: the unpaged read is refused with 413 (never served
/// short), the paged read cuts pages at the byte cap and names the next one, and every page's
/// parameters are checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_over_the_answer_cap_is_read_in_pages_and_never_served_short() {
    let c = Cluster::start_with(|config| config.limits.read_bytes_max = 2_000).await;
    let leader = c
        .leader_among(&[1, 2, 3], Duration::from_secs(20))
        .await
        .expect("a leader");
    let follower = (1..=3).find(|id| *id != leader).expect("a follower");
    // 20 events of about 300 stored bytes each: about 6,000 bytes.
    let events: Vec<_> = (0..20)
        .map(|i| {
            json!({
                "event_id": format!("e{i}"),
                "prev_event_id": (i > 0).then(|| format!("e{}", i - 1)),
                "payload": "p".repeat(280),
            })
        })
        .collect();
    let (status, answer) = c
        .call(
            leader,
            "POST",
            "/v1/executions/long/populate",
            Some(json!({ "events": events })),
        )
        .await;
    assert_eq!(status, 200, "{answer}");

    for node in [leader, follower] {
        for path in ["/v1/executions/long/chain", "/v1/executions/long/chain/raw"] {
            let (status, answer) = c.call(node, "GET", path, None).await;
            assert_eq!(
                (status, answer["error"].as_str()),
                (413, Some("too_large")),
                "n{node} {path}: {answer}"
            );
        }
        // Page by page: each under the cap, every event once, in order.
        for path in ["/v1/executions/long/chain", "/v1/executions/long/chain/raw"] {
            let mut from = 1u64;
            let mut seen = Vec::new();
            let mut pages = 0;
            loop {
                let (status, answer) = c
                    .call(node, "GET", &format!("{path}?from_seq={from}"), None)
                    .await;
                assert_eq!(status, 200, "n{node} {path} from {from}: {answer}");
                let ids = common::inproc::event_ids(&answer);
                assert!(
                    !ids.is_empty() && ids.len() < 20,
                    "{path}: {} events",
                    ids.len()
                );
                seen.extend(ids);
                pages += 1;
                if path.ends_with("/chain") {
                    assert_eq!(answer["through_seq"], 20, "{answer}");
                }
                match answer["next_from_seq"].as_u64() {
                    Some(next) => from = next,
                    None => break,
                }
            }
            let want: Vec<String> = (0..20).map(|i| format!("e{i}")).collect();
            assert_eq!(seen, want, "n{node} {path}");
            assert!(pages >= 3, "{path}: {pages} pages");
        }
    }

    // A pinned end and a limit.
    let (status, answer) = c
        .call(
            leader,
            "GET",
            "/v1/executions/long/chain?from_seq=3&to_seq=4&limit=5",
            None,
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(common::inproc::event_ids(&answer), ["e2", "e3"]);
    assert_eq!(answer["next_from_seq"], serde_json::Value::Null);
    let (_, answer) = c
        .call(leader, "GET", "/v1/executions/long/chain?limit=1", None)
        .await;
    assert_eq!(common::inproc::event_ids(&answer), ["e0"]);
    assert_eq!(answer["next_from_seq"], 2);

    // Bad paging parameters are 400, with the JSON error.
    for query in [
        "from_seq=0",
        "to_seq=0",
        "limit=0",
        "limit=10001",
        "from_seq=x",
        "after=3",
    ] {
        let (status, answer) = c
            .call(
                leader,
                "GET",
                &format!("/v1/executions/long/chain?{query}"),
                None,
            )
            .await;
        assert_eq!(
            (status, answer["error"].as_str()),
            (400, Some("invalid_input")),
            "{query}: {answer}"
        );
    }
}
