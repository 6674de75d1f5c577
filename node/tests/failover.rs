//! Failures of whole nodes against a real cluster of processes: the leader SIGKILLed mid-load, a
//! node restarted on its data (catching up from the log, or from a snapshot once the log is
//! purged), a follower paused while writes go on, and five-node clusters and membership changes.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{event, Cluster, Options};
use serde_json::Value;

/// An acknowledged append: execution, event id, sequence.
type Ack = (String, String, u64);

/// Appends `e1, e2, ...` to `exec` through any node until `stop`, retrying an unanswered append
/// unchanged (idempotent by event id) on the next node. Records every acknowledgement and the
/// time of each.
async fn writer(
    http: reqwest::Client,
    urls: Vec<String>,
    exec: String,
    stop: Instant,
    acks: Arc<Mutex<Vec<(Instant, Instant, Ack)>>>,
) {
    let mut n = 1u64;
    let mut turn = 0usize;
    while Instant::now() < stop {
        let id = format!("e{n}");
        let prev = (n > 1).then(|| format!("e{}", n - 1));
        let body = event(&id, prev.as_deref());
        turn += 1;
        let url = format!("{}/v1/executions/{exec}/events", urls[turn % urls.len()]);
        let sent_at = Instant::now();
        let response = match http
            .post(&url)
            .json(&body)
            .timeout(Duration::from_secs(3))
            .send()
            .await
        {
            Ok(response) => response,
            Err(_) => continue,
        };
        let status = response.status().as_u16();
        let answer: Value = response.json().await.unwrap_or(Value::Null);
        match status {
            200 => {
                let seq = answer["exec_seq"].as_u64().expect("exec_seq");
                assert_eq!(
                    seq, n,
                    "{exec}/{id}: acknowledged at the wrong seq: {answer}"
                );
                acks.lock()
                    .unwrap()
                    .push((sent_at, Instant::now(), (exec.clone(), id, seq)));
                n += 1;
            }
            503 => tokio::time::sleep(Duration::from_millis(20)).await,
            other => panic!("{exec}/{id}: unexpected {other}: {answer}"),
        }
    }
}

/// Every acknowledged append is in the chain at its seq, and each chain is contiguous and linked.
async fn assert_acks_present(c: &Cluster, node: u64, acks: &[Ack]) {
    let mut by_exec: BTreeMap<&str, Vec<&Ack>> = BTreeMap::new();
    for ack in acks {
        by_exec.entry(ack.0.as_str()).or_default().push(ack);
    }
    for (exec, acked) in by_exec {
        let (status, raw) = c
            .get(node, &format!("/v1/executions/{exec}/chain/raw"))
            .await;
        assert_eq!(status, 200);
        let events = raw["events"].as_array().expect("events");
        for (i, e) in events.iter().enumerate() {
            assert_eq!(
                e["exec_seq"].as_u64(),
                Some(i as u64 + 1),
                "{exec}: contiguous"
            );
            let prev = if i == 0 {
                Value::Null
            } else {
                events[i - 1]["event_id"].clone()
            };
            assert_eq!(e["prev_event_id"], prev, "{exec}: linked, no fork");
        }
        for (_, id, seq) in acked {
            let stored = &events[(*seq - 1) as usize];
            assert_eq!(
                stored["event_id"].as_str(),
                Some(id.as_str()),
                "{exec}: acked {id} at {seq}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_leader_mid_load_loses_no_acknowledged_append() {
    let mut c = Cluster::start(3).await;
    let old_leader = c.leader().await;
    let urls: Vec<String> = c
        .procs
        .values()
        .map(|p| format!("http://{}", p.addr))
        .collect();
    let acks = Arc::new(Mutex::new(Vec::new()));
    let stop = Instant::now() + Duration::from_secs(8);
    let writers: Vec<_> = (0..8)
        .map(|w| {
            tokio::spawn(writer(
                c.http.clone(),
                urls.clone(),
                format!("load-{w}"),
                stop,
                Arc::clone(&acks),
            ))
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let killed_at = Instant::now();
    c.kill(old_leader);
    for w in writers {
        w.await.expect("writer");
    }
    let acks = acks.lock().unwrap().clone();
    let before = acks
        .iter()
        .filter(|(_, acked, _)| *acked < killed_at)
        .count();
    // The first append sent after the kill and acknowledged: a leader served again.
    let first_after = acks
        .iter()
        .filter(|(sent, _, _)| *sent > killed_at)
        .map(|(_, acked, _)| *acked)
        .min()
        .expect("writes resumed");
    let failover = first_after - killed_at;
    println!(
        "acked {} appends ({before} before the kill); first ack {failover:?} after the kill",
        acks.len()
    );
    assert!(before > 0, "load was running when the leader died");
    assert!(
        failover < Duration::from_secs(5),
        "a new leader served after {failover:?}"
    );

    let new_leader = c.leader().await;
    assert_ne!(new_leader, old_leader);
    let acked: Vec<Ack> = acks.into_iter().map(|(_, _, a)| a).collect();
    assert_acks_present(&c, new_leader, &acked).await;

    // The killed node restarts on its data and converges.
    c.restart(old_leader).await;
    let (_, status) = c.get(new_leader, "/v1/cluster").await;
    let applied = status["last_applied"].as_u64().unwrap();
    c.wait_applied(old_leader, applied, Duration::from_secs(20))
        .await;
    for w in 0..8 {
        let path = format!("/v1/executions/load-{w}/chain/raw?consistency=local");
        assert_eq!(
            c.get(old_leader, &path).await.1["events"],
            c.get(new_leader, &path).await.1["events"]
        );
    }
}

/// SIGTERM to the leader under load: it hands its leadership over before it stops, so a
/// successor leads within a second (an election timeout and the leader's lease would take
/// longer), no acknowledged append is lost, and the process exits cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_to_the_leader_hands_leadership_over_within_a_second_and_loses_no_append() {
    let mut c = Cluster::start(3).await;
    let old_leader = c.leader().await;
    let others: Vec<u64> = c
        .running()
        .into_iter()
        .filter(|id| *id != old_leader)
        .collect();
    let urls: Vec<String> = c
        .procs
        .values()
        .map(|p| format!("http://{}", p.addr))
        .collect();
    let acks = Arc::new(Mutex::new(Vec::new()));
    let stop = Instant::now() + Duration::from_secs(6);
    let writers: Vec<_> = (0..8)
        .map(|w| {
            tokio::spawn(writer(
                c.http.clone(),
                urls.clone(),
                format!("term-{w}"),
                stop,
                Arc::clone(&acks),
            ))
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let termed_at = Instant::now();
    c.signal(old_leader, "TERM");
    // The first moment another node reports itself leader.
    let successor = loop {
        let mut found = None;
        for id in &others {
            let (_, status) = c.get(*id, "/v1/cluster").await;
            if status["leader_id"].as_u64() == Some(*id) && status["state"] == "leader" {
                found = Some(*id);
            }
        }
        if let Some(id) = found {
            break id;
        }
        assert!(
            termed_at.elapsed() < Duration::from_secs(5),
            "no successor 5 s after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let handed_over = termed_at.elapsed();
    for w in writers {
        w.await.expect("writer");
    }
    let acks = acks.lock().unwrap().clone();
    let first_after = acks
        .iter()
        .filter(|(sent, _, _)| *sent > termed_at)
        .map(|(_, acked, _)| *acked - termed_at)
        .min()
        .expect("writes resumed");
    println!(
        "acked {} appends; node {successor} led {handed_over:?} after SIGTERM to node \
         {old_leader}; the first append sent after it was acknowledged at {first_after:?}",
        acks.len()
    );
    let log = |id: u64| -> String {
        c.log_of(id)
            .lines()
            .filter(|l| l.contains("hand") || l.contains("stand") || l.contains("stopping"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(
        handed_over < Duration::from_secs(1),
        "a successor led only {handed_over:?} after SIGTERM\nn{old_leader}: {}\nothers: {}\n{}",
        log(old_leader),
        log(others[0]),
        log(others[1])
    );
    let exit = c.wait_exit(old_leader, Duration::from_secs(15)).await;
    assert!(
        exit.is_some_and(|status| status.success()),
        "the stopped leader exits cleanly: {exit:?}"
    );
    let acked: Vec<Ack> = acks.into_iter().map(|(_, _, a)| a).collect();
    let leader = c.leader().await;
    assert_acks_present(&c, leader, &acked).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_node_catches_up_from_the_log() {
    let mut c = Cluster::start(3).await;
    let l = c.leader().await;
    let f = c.follower().await;
    c.kill(f);
    let mut prev: Option<String> = None;
    for n in 1..=100 {
        let id = format!("e{n}");
        let (status, _) = c
            .post(
                l,
                "/v1/executions/catch/events",
                &event(&id, prev.as_deref()),
            )
            .await;
        assert_eq!(status, 200);
        prev = Some(id);
    }
    c.restart(f).await;
    let applied = c.get(l, "/v1/cluster").await.1["last_applied"]
        .as_u64()
        .unwrap();
    c.wait_applied(f, applied, Duration::from_secs(20)).await;
    let path = "/v1/executions/catch/chain/raw?consistency=local";
    let events = c.get(f, path).await.1["events"].clone();
    assert_eq!(events.as_array().map(Vec::len), Some(100));
    assert_eq!(events, c.get(l, path).await.1["events"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_node_catches_up_through_a_snapshot_once_the_log_is_purged() {
    let options = Options {
        snapshot_after_entries: 50,
        log_entries_kept: 5,
        purge_batch_entries: 1,
        ..Options::default()
    };
    let mut c = Cluster::start_with(3, options).await;
    let l = c.leader().await;
    let f = c.follower().await;
    c.post(
        l,
        "/v1/executions/snap/populate",
        &common::log(&["r0", "r1", "r2"]),
    )
    .await;
    c.kill(f);
    let applied_before = c.get(l, "/v1/cluster").await.1["last_applied"]
        .as_u64()
        .unwrap();
    for n in 0..200 {
        let exec = format!("/v1/executions/s{}/events", n % 20);
        let prev = (n >= 20).then(|| format!("e{}", n - 20));
        assert_eq!(
            c.post(l, &exec, &event(&format!("e{n}"), prev.as_deref()))
                .await
                .0,
            200
        );
    }
    // Wait for the leader to snapshot and purge past what the follower holds.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let purged = c.get(l, "/v1/cluster").await.1["purged_index"]
            .as_u64()
            .unwrap_or(0);
        if purged > applied_before {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the leader never purged past {applied_before}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    c.restart(f).await;
    let applied = c.get(l, "/v1/cluster").await.1["last_applied"]
        .as_u64()
        .unwrap();
    c.wait_applied(f, applied, Duration::from_secs(30)).await;
    let snapshot_index = c.get(f, "/v1/cluster").await.1["snapshot_index"]
        .as_u64()
        .unwrap_or(0);
    assert!(
        snapshot_index > applied_before,
        "the follower installed a snapshot ({snapshot_index})"
    );
    for path in [
        "/v1/executions/snap/chain?consistency=local",
        "/v1/executions/s7/chain/raw?consistency=local",
        "/v1/changes?limit=1000&consistency=local",
    ] {
        let (mine, theirs) = (c.get(f, path).await.1, c.get(l, path).await.1);
        assert_eq!(mine["events"], theirs["events"], "{path}");
        assert_eq!(mine["changes"], theirs["changes"], "{path}");
    }
    assert_eq!(
        c.get(f, "/v1/executions/snap/chain?consistency=local")
            .await
            .1["answer"],
        "authoritative"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_linearizable_read_after_an_acknowledged_append_always_sees_it() {
    let c = Cluster::start(3).await;
    let mut prev: Option<String> = None;
    for n in 1..=40u64 {
        let id = format!("e{n}");
        let writer_node = 1 + n % 3;
        let reader_node = 1 + (n + 1) % 3;
        let (status, _) = c
            .post(
                writer_node,
                "/v1/executions/lin/events",
                &event(&id, prev.as_deref()),
            )
            .await;
        assert_eq!(status, 200);
        let (status, raw) = c.get(reader_node, "/v1/executions/lin/chain/raw").await;
        assert_eq!(status, 200);
        assert_eq!(
            raw["events"].as_array().map(Vec::len),
            Some(n as usize),
            "read on {reader_node} after write on {writer_node}"
        );
        prev = Some(id);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_read_on_a_lagging_follower_reports_its_applied_index_and_honours_min_index() {
    let c = Cluster::start(3).await;
    let l = c.leader().await;
    let f = c.follower().await;
    c.signal(f, "STOP");
    let mut last_commit = 0;
    let mut prev: Option<String> = None;
    for n in 1..=20 {
        let id = format!("e{n}");
        let (status, ack) = c
            .post(l, "/v1/executions/lag/events", &event(&id, prev.as_deref()))
            .await;
        assert_eq!(status, 200);
        last_commit = ack["commit_index"].as_u64().unwrap();
        prev = Some(id);
    }
    c.signal(f, "CONT");
    let (status, answer) = c
        .get(f, "/v1/executions/lag/chain/raw?consistency=local")
        .await;
    assert_eq!(status, 200);
    let applied = answer["applied_index"]
        .as_u64()
        .expect("a local read says what it reflects");
    let seen = answer["events"].as_array().unwrap().len() as u64;
    assert!(
        applied < last_commit || seen == 20,
        "applied {applied} reflects {seen} events"
    );

    let (status, answer) = c
        .get(
            f,
            &format!("/v1/executions/lag/chain/raw?consistency=local&min_index={last_commit}"),
        )
        .await;
    assert_eq!(status, 200);
    assert!(answer["applied_index"].as_u64() >= Some(last_commit));
    assert_eq!(
        answer["events"].as_array().map(Vec::len),
        Some(20),
        "min_index waited for the writes"
    );

    let far = last_commit + 1_000_000;
    let (status, answer) = c
        .get(
            f,
            &format!("/v1/executions/lag/chain?consistency=local&min_index={far}"),
        )
        .await;
    assert_eq!(
        (status, answer["error"].as_str()),
        (503, Some("unavailable"))
    );
    assert!(answer["applied_index"].as_u64() >= Some(last_commit));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_five_node_cluster_survives_two_failures() {
    let mut c = Cluster::start(5).await;
    let l = c.leader().await;
    assert_eq!(
        c.post(l, "/v1/executions/five/events", &event("a", None))
            .await
            .0,
        200
    );
    let other = c.follower().await;
    c.kill(l);
    c.kill(other);
    let survivor = c.running()[0];
    let started = Instant::now();
    let mut status = 0;
    while started.elapsed() < Duration::from_secs(15) {
        status = c
            .post(
                survivor,
                "/v1/executions/five/events",
                &event("b", Some("a")),
            )
            .await
            .0;
        if status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(status, 200, "three of five still form a quorum");
    c.restart(l).await;
    c.restart(other).await;
    let leader = c.leader().await;
    let applied = c.get(leader, "/v1/cluster").await.1["last_applied"]
        .as_u64()
        .unwrap();
    for id in 1..=5 {
        c.wait_applied(id, applied, Duration::from_secs(20)).await;
        let raw = c
            .get(id, "/v1/executions/five/chain/raw?consistency=local")
            .await
            .1;
        assert_eq!(raw["events"].as_array().map(Vec::len), Some(2), "node {id}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_learner_joins_catches_up_and_is_promoted_to_voter() {
    let mut c = Cluster::start(3).await;
    let l = c.leader().await;
    c.post(l, "/v1/executions/grow/events", &event("a", None))
        .await;
    c.add_proc(4).await;
    let addr = c.procs[&4].addr.clone();
    let (status, body) = c
        .post(
            l,
            "/v1/cluster/learners",
            &serde_json::json!({ "node_id": 4, "addr": addr }),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (_, view) = c.get(l, "/v1/cluster").await;
    assert_eq!(view["learners"], serde_json::json!([4]));
    let follower = c.follower().await;
    let (status, body) = c
        .post(
            follower,
            "/v1/cluster/voters",
            &serde_json::json!({ "voters": [1, 2, 3, 4] }),
        )
        .await;
    assert_eq!(status, 200, "forwarded to the leader: {body}");
    let (_, view) = c.get(l, "/v1/cluster").await;
    assert_eq!(view["voters"], serde_json::json!([1, 2, 3, 4]));
    let raw = c
        .get(4, "/v1/executions/grow/chain/raw?consistency=local")
        .await
        .1;
    assert_eq!(raw["events"].as_array().map(Vec::len), Some(1));
    assert_eq!(
        c.post(4, "/v1/executions/grow/events", &event("b", Some("a")))
            .await
            .0,
        200
    );
}
