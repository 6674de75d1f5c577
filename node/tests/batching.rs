//! Batching on a real three-node cluster, counted rather than timed: an append of several events
//! costs ONE Raft entry and at most one durable log write (fsync) on each replica, and is stored
//! whole or not at all; appends to different executions sent at once share entries; linearizable
//! reads that wait at once share leadership confirmations.

mod common;

use std::time::{Duration, Instant};

use common::inproc::Cluster;
use serde_json::{json, Value};

/// The value of the metric line that starts with `series ` on node `id`.
async fn metric(c: &Cluster, id: u64, series: &str) -> u64 {
    let text = c
        .http
        .get(format!("http://{}/metrics", c.addrs[&id]))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let prefix = format!("{series} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("node {id} exposes no {series}"))
}

/// The durable writes node `id` has made.
async fn fsyncs(c: &Cluster, id: u64) -> u64 {
    metric(c, id, "chainstore_fsync_seconds_count").await
}

/// Waits until every node has applied `index`.
async fn applied_everywhere(c: &Cluster, index: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while (1..=3).any(|id| {
        c.node(id)
            .raft_metrics()
            .last_applied
            .is_none_or(|applied| applied.index < index)
    }) {
        assert!(
            Instant::now() < deadline,
            "index {index} not applied everywhere"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn batch(exec_prefix: &str, n: u64, prev: Option<&str>) -> Value {
    let events: Vec<Value> = (1..=n)
        .map(|i| {
            let prev = if i == 1 {
                prev.map(str::to_string)
            } else {
                Some(format!("{exec_prefix}{}", i - 1))
            };
            json!({
                "event_id": format!("{exec_prefix}{i}"),
                "prev_event_id": prev,
                "genesis": i == 1 && prev.is_none(),
                "payload": { "n": i },
            })
        })
        .collect();
    json!({ "events": events })
}

/// One measured append of ten events to `exec`: `None` when an election came in between (its
/// own entry and votes would be counted too), else the per-node log growth and fsyncs.
async fn measured_append_of_ten(c: &Cluster, exec: &str) -> Option<Vec<(u64, u64)>> {
    let leader = c
        .leader_among(&[1, 2, 3], Duration::from_secs(10))
        .await
        .expect("a leader");
    let (status, _) = c.append(leader, &format!("{exec}-warm"), "w1", None).await;
    assert_eq!(status, 200);
    let term = c.node(leader).raft_metrics().current_term;
    let last = c.node(leader).raft_metrics().last_log_index.unwrap();
    applied_everywhere(c, last).await;
    // Let the commit index reach every follower before counting.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut before = Vec::new();
    for id in 1..=3 {
        before.push((
            c.node(id).raft_metrics().last_log_index.unwrap_or(0),
            fsyncs(c, id).await,
        ));
    }
    let (status, answer) = c
        .call(
            leader,
            "POST",
            &format!("/v1/executions/{exec}/events"),
            Some(batch("t", 10, None)),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    let events = answer["events"].as_array().expect("one answer per event");
    let seqs: Vec<u64> = events
        .iter()
        .map(|e| e["exec_seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, (1..=10).collect::<Vec<u64>>());
    let commit_index = events[0]["commit_index"].as_u64().unwrap();
    assert!(
        events
            .iter()
            .all(|e| e["commit_index"] == json!(commit_index)),
        "{answer}"
    );
    applied_everywhere(c, commit_index).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    if (1..=3).any(|id| c.node(id).raft_metrics().current_term != term) {
        return None;
    }
    let (status, chain) = c.chain(leader, exec).await;
    assert_eq!(status, 200);
    assert_eq!(common::inproc::event_ids(&chain).len(), 10);
    let mut growth = Vec::new();
    for id in 1..=3u64 {
        let (log_before, fsyncs_before) = before[id as usize - 1];
        let log_after = c.node(id).raft_metrics().last_log_index.unwrap_or(0);
        growth.push((log_after - log_before, fsyncs(c, id).await - fsyncs_before));
    }
    Some(growth)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_of_ten_events_is_one_raft_entry_and_one_fsync_per_replica() {
    let c = Cluster::start().await;
    // A loaded machine may hold an election in the middle; measure again then.
    for attempt in 0..3 {
        let Some(growth) = measured_append_of_ten(&c, &format!("ten{attempt}")).await else {
            continue;
        };
        for (id, (entries, fsyncs)) in (1..=3u64).zip(growth) {
            assert_eq!(
                entries, 1,
                "node {id}: {entries} log entries for one append"
            );
            assert!(
                fsyncs <= 1,
                "node {id} made {fsyncs} durable writes for one append"
            );
        }
        return;
    }
    panic!("three elections in three measurements: the machine is too loaded to count");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_to_different_executions_sent_at_once_share_raft_entries() {
    let c = Cluster::start().await;
    let leader = c
        .leader_among(&[1, 2, 3], Duration::from_secs(10))
        .await
        .expect("a leader");
    const WRITERS: usize = 64;
    let mut sending = Vec::new();
    for w in 0..WRITERS {
        let (http, url) = (
            c.http.clone(),
            format!(
                "http://{}/v1/executions/shared-{w}/events",
                c.addrs[&leader]
            ),
        );
        let body = json!({ "event_id": format!("s{w}"), "genesis": true, "payload": { "w": w } });
        sending.push(tokio::spawn(async move {
            // A write whose outcome a loaded machine left unknown (503) is retried unchanged,
            // as the client library would: a stored one answers as a duplicate.
            for _ in 0..50 {
                let answer = http.post(&url).json(&body).send().await.unwrap();
                let status = answer.status().as_u16();
                let body = answer.json::<Value>().await.unwrap();
                if status != 503 {
                    return (status, body);
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            (503, Value::Null)
        }));
    }
    let mut answers = Vec::new();
    for sent in sending {
        answers.push(sent.await.unwrap());
    }
    let mut indexes = std::collections::BTreeSet::new();
    for (w, (status, answer)) in answers.iter().enumerate() {
        assert_eq!(*status, 200, "writer {w}: {answer}");
        assert_eq!(answer["exec_seq"], 1, "{answer}");
        indexes.insert(answer["commit_index"].as_u64().expect("a commit index"));
    }
    eprintln!(
        "{WRITERS} appends on {WRITERS} executions in {} entries",
        indexes.len()
    );
    assert!(
        indexes.len() < WRITERS,
        "{WRITERS} appends sent at once took {} entries: none shared",
        indexes.len()
    );
    // Every one of them is stored, at the index it was answered with.
    for (w, (_, answer)) in answers.iter().enumerate() {
        let (status, chain) = c.chain(leader, &format!("shared-{w}")).await;
        assert_eq!(status, 200, "{chain}");
        assert_eq!(common::inproc::event_ids(&chain), [format!("s{w}")]);
        assert_eq!(chain["events"][0]["commit_index"], answer["commit_index"]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_of_several_is_stored_whole_or_not_at_all_and_a_retry_answers_duplicates() {
    let c = Cluster::start().await;
    let leader = c
        .leader_among(&[1, 2, 3], Duration::from_secs(10))
        .await
        .expect("a leader");
    let path = "/v1/executions/whole/events";
    let (status, _) = c
        .call(leader, "POST", path, Some(batch("a", 3, None)))
        .await;
    assert_eq!(status, 200);
    // The second batch does not continue the head: nothing of it is stored.
    let (status, refused) = c
        .call(leader, "POST", path, Some(batch("b", 4, Some("zz"))))
        .await;
    assert_eq!((status, refused["error"].as_str()), (409, Some("not_head")));
    // Sent through a follower (forwarded to the leader), then retried whole.
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    let body = batch("b", 4, Some("a3"));
    let (status, first) = c.call(follower, "POST", path, Some(body.clone())).await;
    assert_eq!(status, 200, "{first}");
    let (status, retried) = c.call(follower, "POST", path, Some(body)).await;
    assert_eq!(status, 200, "{retried}");
    for (a, b) in first["events"]
        .as_array()
        .unwrap()
        .iter()
        .zip(retried["events"].as_array().unwrap())
    {
        assert_eq!(a["exec_seq"], b["exec_seq"]);
        assert_eq!(a["commit_index"], b["commit_index"]);
        assert_eq!(b["duplicate"], true);
    }
    let (_, chain) = c.chain(leader, "whole").await;
    assert_eq!(
        common::inproc::event_ids(&chain),
        ["a1", "a2", "a3", "b1", "b2", "b3", "b4"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn linearizable_reads_waiting_at_once_share_leadership_confirmations() {
    let c = Cluster::start().await;
    let leader = c
        .leader_among(&[1, 2, 3], Duration::from_secs(10))
        .await
        .expect("a leader");
    let (status, _) = c.append(leader, "read", "r1", None).await;
    assert_eq!(status, 200);
    let reads = r#"chainstore_linearizable_reads_total{stage="read"}"#;
    let followers: Vec<u64> = (1..=3).filter(|id| *id != leader).collect();
    // Every message a follower hears from the leader (heartbeats included), by either path.
    let heard = |id: u64| {
        let c = &c;
        async move {
            metric(
                c,
                id,
                r#"chainstore_raft_append_rpcs_received_total{via="stream"}"#,
            )
            .await
                + metric(
                    c,
                    id,
                    r#"chainstore_raft_append_rpcs_received_total{via="http"}"#,
                )
                .await
        }
    };
    let reads_before = metric(&c, leader, reads).await;
    let mut heard_before = Vec::new();
    for id in &followers {
        heard_before.push(heard(*id).await);
    }
    let mut waiting = Vec::new();
    for _ in 0..64 {
        let (http, url) = (
            c.http.clone(),
            format!("http://{}/v1/executions/read/chain", c.addrs[&leader]),
        );
        waiting.push(tokio::spawn(async move {
            // A confirmation that misses its quorum in time (a loaded machine) answers a
            // retryable 503, as the client library would retry it.
            for _ in 0..50 {
                let answer = http.get(&url).send().await.unwrap();
                let status = answer.status().as_u16();
                let body = answer.json::<Value>().await.unwrap();
                if status != 503 {
                    return (status, body);
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            (503, Value::Null)
        }));
    }
    for read in waiting {
        let (status, body) = read.await.unwrap();
        assert_eq!(
            (status, body["answer"].as_str()),
            (200, Some("authoritative")),
            "{body}"
        );
    }
    let read_count = metric(&c, leader, reads).await - reads_before;
    assert!(read_count >= 64, "{read_count} reads counted");
    for (id, before) in followers.iter().zip(heard_before) {
        let messages = heard(*id).await - before;
        eprintln!("{read_count} linearizable reads, {messages} messages to follower {id}");
        assert!(
            messages * 2 <= read_count,
            "{read_count} linearizable reads took {messages} messages to follower {id}"
        );
    }
}

/// The leader sends a new entry to its followers while its own fsync is under way, and the
/// client hears of it only once a majority holds it durably. With the leader's sync and one
/// follower's held back, both followers receive the entry and the other one syncs it, but one
/// durable copy of three is no majority: no answer. Once the held follower's sync goes through,
/// two copies are durable and the append is answered, the leader's own sync still held. A node
/// that acknowledged its copy before its fsync (the leader or the held follower) would let the
/// append be answered in the first phase.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_reaches_the_followers_during_the_leaders_fsync_and_is_answered_once_a_majority_synced_it(
) {
    let c = Cluster::start().await;
    let leader = c
        .leader_among(&[1, 2, 3], Duration::from_secs(20))
        .await
        .expect("a leader");
    let (status, body) = c.append(leader, "overlap", "a", None).await;
    assert_eq!(status, 200, "{body}");
    let index = c.node(leader).raft_metrics().last_log_index.unwrap();
    applied_everywhere(&c, index).await;
    let followers: Vec<u64> = (1..=3).filter(|id| *id != leader).collect();
    let (held, free) = (followers[0], followers[1]);
    let free_synced_before = c.engines[&free].syncs_total();

    c.engines[&leader].hold_syncs();
    c.engines[&held].hold_syncs();
    let url = format!("http://{}/v1/executions/overlap/events", c.addrs[&leader]);
    let http = c.http.clone();
    let appending = tokio::spawn(async move {
        let response = http
            .post(url)
            .json(&json!({"event_id": "b", "prev_event_id": "a", "payload": {"n": "b"}}))
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (
            status,
            response.json::<Value>().await.unwrap_or(Value::Null),
        )
    });
    // Well within the followers' election timeout (600 ms at least).
    let deadline = Instant::now() + Duration::from_millis(400);
    let received = |id: u64| {
        c.node(id)
            .raft_metrics()
            .last_log_index
            .is_some_and(|last| last > index)
    };
    while !(followers.iter().all(|id| received(*id))
        && c.engines[&free].syncs_total() > free_synced_before)
    {
        assert!(
            Instant::now() < deadline,
            "the followers did not receive the entry while the leader's fsync was held"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(
        !appending.is_finished(),
        "an append was answered with one durable copy of three"
    );

    c.engines[&held].release_syncs();
    let answered = tokio::time::timeout(Duration::from_secs(5), appending)
        .await
        .expect("answered once two copies are durable, the leader's still held")
        .unwrap();
    assert_eq!(answered.0, 200, "{}", answered.1);
    c.engines[&leader].release_syncs();
    applied_everywhere(&c, index + 1).await;
}
