//! A cluster of several shards: `cluster init` with `shards` gives every node the same layout,
//! every node runs a Raft group per shard, and any node serves any execution from its shard's
//! group, which alone holds it.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use chainstore_model::{ExecutionId, ShardCount};
use common::inproc::{event_ids, Cluster};
use serde_json::{json, Value};

const SHARDS: u32 = 4;

/// Waits until every node names a leader for every shard, the same one on every node; returns
/// them by shard.
async fn leaders(cluster: &Cluster) -> BTreeMap<u64, u64> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut seen: Vec<BTreeMap<u64, u64>> = Vec::new();
        for id in 1..=3 {
            let (_, status) = cluster.call(id, "GET", "/v1/cluster", None).await;
            let groups = status["groups"].as_array().cloned().unwrap_or_default();
            seen.push(
                groups
                    .iter()
                    .filter_map(|g| Some((g["shard"].as_u64()?, g["leader_id"].as_u64()?)))
                    .collect(),
            );
        }
        if seen
            .iter()
            .all(|s| s.len() == SHARDS as usize && *s == seen[0])
        {
            return seen.swap_remove(0);
        }
        assert!(
            Instant::now() < deadline,
            "not every shard has one leader on every node: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn shard_of(exec: &str) -> u32 {
    ShardCount::new(SHARDS)
        .unwrap()
        .shard_of(&ExecutionId::new(exec).unwrap())
        .0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_execution_lives_in_its_shards_group_and_any_node_serves_it() {
    let mut cluster = Cluster::start_sharded(SHARDS).await;
    leaders(&cluster).await;

    let (status, body) = cluster.call(2, "GET", "/v1/cluster", None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["shards"], SHARDS);
    let groups = body["groups"].as_array().unwrap();
    assert_eq!(groups.len(), SHARDS as usize, "{body}");
    for group in groups {
        assert_eq!(group["voters"], json!([1, 2, 3]), "{group}");
        assert!(group["preferred_leader"].is_u64(), "{group}");
    }

    // Executions in every shard, each written through a node in turn (most of them not its
    // shard's leader: the write is forwarded within the shard's group).
    let execs: Vec<String> = (0..24).map(|i| format!("wf-{i}")).collect();
    let mut shards_used = std::collections::BTreeSet::new();
    for (i, exec) in execs.iter().enumerate() {
        shards_used.insert(shard_of(exec));
        let via = (i as u64 % 3) + 1;
        let (status, body) = cluster.append(via, exec, &format!("{exec}-a"), None).await;
        assert_eq!(status, 200, "{exec} via n{via}: {body}");
        let via = ((i as u64 + 1) % 3) + 1;
        let (status, body) = cluster
            .append(via, exec, &format!("{exec}-b"), Some(&format!("{exec}-a")))
            .await;
        assert_eq!(status, 200, "{exec} via n{via}: {body}");
    }
    assert_eq!(
        shards_used.len(),
        SHARDS as usize,
        "the ids reach every shard"
    );

    // Each execution is in its own shard's group, on every node, and in no other group.
    let deadline = Instant::now() + Duration::from_secs(10);
    for id in 1..=3 {
        for exec in &execs {
            let key = ExecutionId::new(exec.as_str()).unwrap();
            for shard in 0..SHARDS {
                let group = cluster
                    .host(id)
                    .group(shard)
                    .expect("every node runs every group");
                loop {
                    let head = group.store().head(&key).unwrap();
                    if shard != shard_of(exec) {
                        assert!(head.is_none(), "{exec} is in shard {shard} on n{id}");
                        break;
                    }
                    if head.as_ref().is_some_and(|h| h.exec_seq == 2) {
                        break;
                    }
                    assert!(Instant::now() < deadline, "{exec} never reached n{id}");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
    }

    // Read back through every node: the whole chain, from its shard.
    for id in 1..=3 {
        for exec in &execs {
            let (status, body) = cluster.chain(id, exec).await;
            assert_eq!(status, 200, "{exec} via n{id}: {body}");
            assert_eq!(
                event_ids(&body),
                vec![format!("{exec}-a"), format!("{exec}-b")],
                "{exec} via n{id}"
            );
        }
    }

    // Each shard has a change feed of its own; the cluster's feed has to be named by shard.
    let (status, body) = cluster.call(1, "GET", "/v1/changes", None).await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = cluster.call(1, "GET", "/v1/changes?shard=4", None).await;
    assert_eq!(status, 400, "{body}");
    let mut fed = 0;
    for shard in 0..SHARDS {
        let (status, body) = cluster
            .call(3, "GET", &format!("/v1/changes?shard={shard}"), None)
            .await;
        assert_eq!(status, 200, "{body}");
        for change in body["changes"].as_array().unwrap() {
            let exec = change["execution_id"].as_str().unwrap();
            assert_eq!(shard_of(exec), shard, "{change} in shard {shard}'s feed");
            fed += 1;
        }
    }
    assert_eq!(fed, execs.len() * 2, "every event is in one feed");

    // The layout is the cluster's for life: the same init again is a no-op, another is refused,
    // and so are membership changes.
    let members = cluster.members();
    let (status, body) = cluster
        .call(
            2,
            "POST",
            "/v1/cluster/init",
            Some(json!({ "nodes": members, "shards": SHARDS })),
        )
        .await;
    assert_eq!(status, 200, "the same init again: {body}");
    let (status, body) = cluster
        .call(
            2,
            "POST",
            "/v1/cluster/init",
            Some(json!({ "nodes": members, "shards": 8 })),
        )
        .await;
    assert_eq!(status, 400, "another layout: {body}");
    let (status, body) = cluster
        .call(
            1,
            "POST",
            "/v1/cluster/voters",
            Some(json!({ "voters": [1, 2] })),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    // Backups are per shard: one must be named (a backup of one would pass for the cluster's),
    // and any node serves any shard's (relayed to the shard's leader).
    let (status, body) = cluster.call(1, "GET", "/v1/snapshot", None).await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = cluster.call(1, "GET", "/v1/snapshot?shard=4", None).await;
    assert_eq!(status, 400, "{body}");
    for shard in 0..SHARDS {
        let (status, body) = cluster
            .call(3, "GET", &format!("/v1/snapshot?shard={shard}"), None)
            .await;
        assert_eq!(status, 200, "shard {shard}'s backup: {body}");
    }

    // A node that restarts runs its groups again from the stored layout, with their data.
    cluster.crash(3).await;
    cluster.restart(3).await;
    leaders(&cluster).await;
    for exec in &execs {
        let (status, body) = cluster
            .append(3, exec, &format!("{exec}-c"), Some(&format!("{exec}-b")))
            .await;
        assert_eq!(status, 200, "{exec} after n3 restarted: {body}");
    }
    let (_, body) = cluster.call(3, "GET", "/v1/cluster", None).await;
    assert_eq!(body["shards"], SHARDS, "{body}");
    for exec in &execs {
        let (status, body) = cluster
            .call(
                3,
                "GET",
                &format!("/v1/executions/{exec}/chain?consistency=local"),
                None,
            )
            .await;
        assert_eq!(status, 200, "{body}");
        let ids: Vec<String> = event_ids(&body);
        // n3 may not have applied the latest append of a group it follows yet.
        assert!(ids.len() >= 2, "{exec} on n3: {ids:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_refuses_a_layout_that_cannot_be_made_and_a_single_shard_cluster_shows_one() {
    let cluster = Cluster::start().await;
    let (_, body) = cluster.call(1, "GET", "/v1/cluster", None).await;
    assert_eq!(body["shards"], 1, "{body}");
    assert_eq!(body["groups"].as_array().map(Vec::len), Some(1), "{body}");
    assert_eq!(body["groups"][0]["preferred_leader"], Value::Null, "{body}");

    // A member of a single-shard cluster does not take a layout.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cluster.node(2).is_member() {
        assert!(Instant::now() < deadline, "n2 never heard of its cluster");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (status, body) = cluster
        .call(
            2,
            "POST",
            "/v1/cluster/init",
            Some(json!({ "nodes": cluster.members(), "shards": 4 })),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    for bad in [
        json!({ "nodes": cluster.members(), "shards": 0 }),
        json!({ "nodes": cluster.members(), "shards": 2000 }),
        json!({ "nodes": cluster.members(), "shards": 4, "replicas": 4 }),
        json!({ "nodes": cluster.members(), "replicas": 3 }),
    ] {
        let (status, body) = cluster
            .call(2, "POST", "/v1/cluster/init", Some(bad.clone()))
            .await;
        assert_eq!(status, 400, "{bad}: {body}");
    }
}

/// Each shard's leader and preferred leader, as node `id` sees them.
async fn leadership(cluster: &Cluster, id: u64) -> Vec<(u64, Option<u64>, u64)> {
    let (_, status) = cluster.call(id, "GET", "/v1/cluster", None).await;
    status["groups"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter_map(|g| {
            Some((
                g["shard"].as_u64()?,
                g["leader_id"].as_u64(),
                g["preferred_leader"].as_u64()?,
            ))
        })
        .collect()
}

/// Waits until every shard is led by its preferred leader, as every running node sees it.
async fn preferred_lead(cluster: &Cluster, shards: usize, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let mut views = Vec::new();
        for id in cluster.running.keys() {
            views.push(leadership(cluster, *id).await);
        }
        if views
            .iter()
            .all(|v| v.len() == shards && v.iter().all(|(_, l, p)| *l == Some(*p)))
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the leaders did not go back to their preferred nodes: {views:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaderships_go_back_to_their_preferred_leaders_after_a_move_and_a_restart() {
    let mut cluster = Cluster::start_sharded(6).await;
    preferred_lead(&cluster, 6, Duration::from_secs(20)).await;
    let mut led = BTreeMap::new();
    for (_, leader, _) in leadership(&cluster, 1).await {
        *led.entry(leader.unwrap()).or_insert(0) += 1;
    }
    assert_eq!(
        led,
        [(1, 2), (2, 2), (3, 2)].into_iter().collect(),
        "six shards over three nodes: two each"
    );

    // A leadership moved away by hand comes back.
    let (shard, _, home) = leadership(&cluster, 1).await[0];
    let away = if home == 1 { 2 } else { 1 };
    let group = cluster.host(home).group(shard as u32).unwrap();
    group.raft().trigger().transfer_leader(away).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while group.raft_metrics().current_leader == Some(home) {
        assert!(
            Instant::now() < deadline,
            "shard {shard} never left n{home}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    preferred_lead(&cluster, 6, Duration::from_secs(10)).await;

    // A node that stops loses its leaderships, and gets them back when it has restarted and
    // caught up.
    cluster.crash(2).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let view = leadership(&cluster, 1).await;
        if view.iter().all(|(_, l, _)| l.is_some() && *l != Some(2)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "n2's shards were not taken over: {view:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cluster.restart(2).await;
    preferred_lead(&cluster, 6, Duration::from_secs(20)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_passes_an_execution_of_a_shard_it_does_not_hold_to_that_shards_leader() {
    // Four nodes, four shards of three replicas: each node holds three of them.
    let cluster = Cluster::start_sharded_on(4, SHARDS).await;
    preferred_lead(&cluster, 3, Duration::from_secs(20)).await;
    let execs: Vec<String> = (0..16).map(|i| format!("far-{i}")).collect();
    let mut passed_on = 0;
    for exec in &execs {
        let shard = shard_of(exec);
        for via in 1..=4u64 {
            if cluster.host(via).group(shard).is_some() {
                continue;
            }
            // The one node without a replica of the execution's shard takes the writes.
            passed_on += 1;
            let (status, body) = cluster.append(via, exec, &format!("{exec}-a"), None).await;
            assert_eq!(status, 200, "{exec} (shard {shard}) via n{via}: {body}");
            let (status, body) = cluster.chain(via, exec).await;
            assert_eq!(status, 200, "{exec} via n{via}: {body}");
            assert_eq!(event_ids(&body), vec![format!("{exec}-a")]);
        }
    }
    assert_eq!(passed_on, execs.len(), "each shard misses exactly one node");
}
