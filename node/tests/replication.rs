//! Replication of entries too large to travel together: a follower that was down while large
//! populates and a large replicated delivery were committed catches up, whether the leader
//! splits the range itself or the follower refuses an oversized append with 413. (Before ranges
//! were bounded in bytes, the follower's 413 read as a network error and the same range was
//! resent forever; before deliveries were split by bytes, one delivery was one entry larger than
//! a peer accepts, and no range holding it could ever be sent.)

mod common;

use std::time::{Duration, Instant};

use common::inproc::Cluster;
use serde_json::{json, Value};

/// Payloads of 96 KiB: a populate of 8 events is one entry of about 0.8 MiB.
fn populate_body(exec: usize) -> Value {
    let payload = "p".repeat(96 << 10);
    let events: Vec<Value> = (0..8)
        .map(|i| {
            json!({
                "event_id": format!("x{exec}-{i}"),
                "prev_event_id": (i > 0).then(|| format!("x{exec}-{}", i - 1)),
                "payload": payload,
            })
        })
        .collect();
    json!({ "events": events })
}

/// One replicated delivery of 16 events of 256 KiB: 4 MiB, twice what a peer accepts per RPC.
fn replicated_body() -> Value {
    let payload = "r".repeat(256 << 10);
    let events: Vec<Value> = (1..=16u64)
        .map(|seq| {
            json!({
                "execution_id": "delivered",
                "exec_seq": seq,
                "event_id": format!("r{seq}"),
                "prev_event_id": (seq > 1).then(|| format!("r{}", seq - 1)),
                "payload": payload,
            })
        })
        .collect();
    json!({ "events": events })
}

async fn a_follower_back_from_downtime_catches_up(c: &mut Cluster, populates: usize) {
    let leader = c
        .leader_among(&[1, 2, 3], Duration::from_secs(20))
        .await
        .expect("a leader");
    let follower = (1..=3).find(|id| *id != leader).expect("a follower");
    c.crash(follower).await;
    // Populates of ~0.8 MiB each, where a peer accepts 2 MiB per RPC.
    let (status, body) = c
        .call(
            leader,
            "POST",
            "/v1/executions/delivered/replicated",
            Some(replicated_body()),
        )
        .await;
    assert_eq!(status, 200, "replicated: {body}");
    for exec in 0..populates {
        let (status, body) = c
            .call(
                leader,
                "POST",
                &format!("/v1/executions/big{exec}/populate"),
                Some(populate_body(exec)),
            )
            .await;
        assert_eq!(status, 200, "populate {exec}: {body}");
    }
    let target = c
        .node(leader)
        .raft_metrics()
        .last_applied
        .expect("applied")
        .index;
    c.restart(follower).await;
    // Wedged is no progress: the follower must apply something new every 30 s (a debug build
    // on a loaded machine catches up at a few MiB/s, so a deadline for the whole catch-up would
    // measure the machine).
    let started = Instant::now();
    let mut progress = (0, started);
    loop {
        let applied = c
            .node(follower)
            .raft_metrics()
            .last_applied
            .map_or(0, |l| l.index);
        if applied >= target {
            break;
        }
        if applied > progress.0 {
            progress = (applied, Instant::now());
        }
        assert!(
            progress.1.elapsed() < Duration::from_secs(30),
            "n{follower} stuck at {applied} of {target} for 30 s: replication of large entries \
             wedged"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "n{follower} caught up on {populates} populates of 0.8 MiB and a 4 MiB delivery in {:?}",
        started.elapsed()
    );
    let last = format!(
        "/v1/executions/big{}/chain?consistency=local",
        populates - 1
    );
    let (status, body) = c.call(follower, "GET", &last, None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["events"].as_array().map(Vec::len), Some(8));
    let (status, body) = c
        .call(
            follower,
            "GET",
            "/v1/executions/delivered/chain/raw?consistency=local",
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["events"].as_array().map(Vec::len), Some(16));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_that_refuses_an_oversized_append_still_catches_up() {
    // Node 1 accepts and sends up to 256 MiB per RPC, and stands first in elections; nodes 2
    // and 3 accept 2 MiB and refuse the 64-entry ranges the leader sends them.
    let mut c = Cluster::start_with(|config| {
        if config.id == 1 {
            config.raft.election_min = Duration::from_millis(150);
            config.raft.election_max = Duration::from_millis(300);
        } else {
            config.limits.raft_body_bytes_max = 2 << 20;
            config.raft.election_min = Duration::from_millis(3_000);
            config.raft.election_max = Duration::from_millis(4_000);
        }
    })
    .await;
    let leader = c
        .leader_among(&[1, 2, 3], Duration::from_secs(20))
        .await
        .expect("a leader");
    assert_eq!(leader, 1, "node 1 stands first");
    a_follower_back_from_downtime_catches_up(&mut c, 24).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_splits_ranges_to_what_its_peers_accept() {
    // Every node accepts 2 MiB per RPC; the leader bounds what it sends by the same figure. The
    // follower misses 256 populates: 200 MiB.
    let mut c = Cluster::start_with(|config| {
        config.limits.raft_body_bytes_max = 2 << 20;
    })
    .await;
    a_follower_back_from_downtime_catches_up(&mut c, 256).await;
}
