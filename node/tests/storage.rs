//! Storage faults on a cluster of in-process nodes over `MemEngine` (real openraft, the real
//! router, reqwest on loopback): a node whose disk fails a sync, or hands back a damaged value,
//! stops Raft, says so in `/readyz`, refuses reads and no longer votes; the rest of the cluster
//! serves on, and the node rejoins with everything once restarted on a sound disk.

mod common;

use std::time::{Duration, Instant};

use common::inproc::{event_ids, Cluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_reads_a_damaged_value_stops_voting_and_says_so() {
    let mut c = Cluster::start().await;
    let leader = c
        .leader_among(&[1, 2, 3], Duration::from_secs(20))
        .await
        .expect("a leader");
    let mut prev: Option<String> = None;
    for i in 0..5 {
        let event = format!("e{i}");
        let (status, body) = c.append(leader, "x", &event, prev.as_deref()).await;
        assert_eq!(status, 200, "{body}");
        prev = Some(event);
    }
    let followers: Vec<u64> = (1..=3).filter(|id| *id != leader).collect();
    let (damaged, healthy) = (followers[0], followers[1]);

    // Wait until the follower has applied everything, then damage the next value it reads: a
    // client's read of the chain, which must be refused, not answered.
    let local_chain = "/v1/executions/x/chain?consistency=local";
    let deadline = Instant::now() + Duration::from_secs(10);
    while event_ids(&c.call(damaged, "GET", local_chain, None).await.1).len() < 5 {
        assert!(Instant::now() < deadline, "n{damaged} never caught up");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    c.engines[&damaged].corrupt_read_after(1);
    let (status, body) = c.call(damaged, "GET", local_chain, None).await;
    assert!(
        status >= 500 && body.get("events").is_none(),
        "a damaged value was answered: {status} {body}"
    );
    let ready = c.failed_readyz(damaged).await;
    assert!(
        ready["storage_failure"]
            .as_str()
            .is_some_and(|f| f.contains("checksum mismatch")),
        "{ready}"
    );
    c.raft_stopped(damaged).await;
    let (status, body) = c
        .call(
            damaged,
            "GET",
            "/v1/executions/x/chain?consistency=local",
            None,
        )
        .await;
    assert_eq!(
        status, 503,
        "a node whose storage failed serves no read: {body}"
    );
    assert!(body["message"]
        .as_str()
        .unwrap_or("")
        .contains("storage failed"));
    let (status, body) = c.append(leader, "x", "e5", prev.as_deref()).await;
    assert_eq!(
        status, 200,
        "two of three nodes still make a quorum: {body}"
    );

    // Without the damaged node's vote, the healthy follower alone cannot elect itself.
    c.crash(leader).await;
    assert_eq!(
        c.leader_among(&[healthy], Duration::from_secs(5)).await,
        None,
        "a leader was elected with the vote of a node whose storage failed"
    );

    // Restarted on a sound disk, the node votes again and has every acknowledged event.
    c.crash(damaged).await;
    c.restart(damaged).await;
    let new_leader = c
        .leader_among(&[damaged, healthy], Duration::from_secs(20))
        .await
        .expect("a leader once the damaged node is restarted");
    let (status, body) = c.chain(new_leader, "x").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(event_ids(&body), ["e0", "e1", "e2", "e3", "e4", "e5"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_fsync_fails_stops_before_it_acknowledges() {
    let mut c = Cluster::start().await;
    let leader = c
        .leader_among(&[1, 2, 3], Duration::from_secs(20))
        .await
        .expect("a leader");
    let (status, body) = c.append(leader, "y", "a", None).await;
    assert_eq!(status, 200, "{body}");

    // The leader's next sync fails having written nothing durable, and forgets the write (as
    // Linux may drop dirty pages after a failed fsync). The leader sends its entries to the
    // followers before its own sync, and two followers' syncs are a majority of their own: one
    // follower's disk is held, so only the leader's copy could complete the majority.
    let held = (1..=3).find(|id| *id != leader).expect("a follower");
    c.engines[&held].hold_syncs();
    c.engines[&leader].fail_sync_after_losing(1, 0);
    let (status, body) = c.append(leader, "y", "b", Some("a")).await;
    c.engines[&held].release_syncs();
    assert_ne!(
        status, 200,
        "an append was acknowledged by a leader whose log write failed: {body}"
    );
    let ready = c.failed_readyz(leader).await;
    assert!(
        ready["storage_failure"]
            .as_str()
            .is_some_and(|f| f.contains("injected sync failure")),
        "{ready}"
    );
    c.raft_stopped(leader).await;

    // The others elect a leader; the lost answer is retried and settles exactly once.
    let others: Vec<u64> = (1..=3).filter(|id| *id != leader).collect();
    let new_leader = c
        .leader_among(&others, Duration::from_secs(20))
        .await
        .expect("a new leader");
    let (status, body) = c.append(new_leader, "y", "b", Some("a")).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = c.append(new_leader, "y", "c", Some("b")).await;
    assert_eq!(status, 200, "{body}");

    // The failed node, restarted (its unsynced writes lost), catches up.
    c.crash(leader).await;
    c.restart(leader).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, body) = c
            .call(
                leader,
                "GET",
                "/v1/executions/y/chain?consistency=local",
                None,
            )
            .await;
        if status == 200 && event_ids(&body) == ["a", "b", "c"] {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the restarted node never caught up: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
