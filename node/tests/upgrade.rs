//! Data written by the previous release opens with this build. `tests/fixtures/upgrade-0.9`
//! holds the data directories of a three-node cluster that ran chainstore on openraft 0.9
//! (`scripts/upgrade-fixture.sh` wrote them: genesis appends, a populate, a replicated delivery,
//! snapshots taken and the log purged behind them) and what it answered before it stopped.
//! Each store opened directly reads back its applied index, vote, purge marker and every log
//! entry; the three restarted on this build elect a leader and serve the same chains, states
//! and change feed, and take new writes after the old log.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::{Cluster, Options};
use openraft::storage::{RaftLogReader, RaftLogStorage, RaftStateMachine};
use raft_store::raft::{LogStore, StateMachine};
use raft_store::{ChainStore, RocksEngine, RocksOptions, StoreConfig};
use serde_json::{json, Value};

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/upgrade-0.9");

/// `value` without the `applied_index` fields (the index an answer reflects, which the new
/// leader's first entry moves on).
fn without_applied_index(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(key, _)| key.as_str() != "applied_index")
                .map(|(key, v)| (key.clone(), without_applied_index(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_applied_index).collect()),
        other => other.clone(),
    }
}

/// Opens the store in `dir` as a node does and checks what the Raft side reads back.
async fn check_store(dir: &Path, applied: u64, purged: u64) {
    let engine = Arc::new(RocksEngine::open(&RocksOptions::new(dir)).expect("the store opens"));
    let store = ChainStore::open(Arc::clone(&engine), StoreConfig::default()).expect("its format");
    let mut sm = StateMachine::new(Arc::new(store));
    let (last_applied, membership) = sm.applied_state().await.expect("the applied state");
    assert_eq!(last_applied.map(|id| id.index), Some(applied), "{dir:?}");
    let voters: Vec<u64> = membership.membership().voter_ids().collect();
    assert_eq!(voters, vec![1, 2, 3], "{dir:?}");

    let mut log = LogStore::new(Arc::clone(&engine));
    let state = log.get_log_state().await.expect("the log state");
    let purged_id = state.last_purged_log_id.expect("a purged log");
    assert!(
        purged_id.index >= purged,
        "{dir:?}: purged through {purged_id:?}"
    );
    let last = state.last_log_id.expect("a log").index;
    assert!(
        last >= applied,
        "{dir:?}: the log ends at {last}, before {applied}"
    );
    let entries = log
        .try_get_log_entries(purged_id.index + 1..=last)
        .await
        .expect("every entry decodes");
    assert_eq!(entries.len() as u64, last - purged_id.index, "{dir:?}");
    let vote = log.read_vote().await.expect("the vote").expect("a vote");
    assert!(vote.is_committed(), "{dir:?}: {vote:?}");
    assert_eq!(
        log.read_committed()
            .await
            .expect("the committed id")
            .map(|id| id.index),
        Some(applied),
        "{dir:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_written_by_the_previous_release_serves_the_same_chains_and_takes_writes() {
    let expected: Value =
        serde_json::from_slice(&std::fs::read(format!("{FIXTURE}/expected.json")).unwrap())
            .expect("expected.json");
    let root = tempfile::tempdir().expect("temp dir");
    let unpacked = std::process::Command::new("tar")
        .arg("-xzf")
        .arg(format!("{FIXTURE}/data.tar.gz"))
        .arg("-C")
        .arg(root.path())
        .status()
        .expect("tar runs");
    assert!(unpacked.success());
    let dir = |id: u64| root.path().join(format!("node-{id}"));
    let figure = |name: &str, id: u64| expected[name][id.to_string()].as_u64().expect(name);

    for id in 1..=3 {
        check_store(&dir(id), figure("applied", id), figure("purged_index", id)).await;
    }

    let nodes = (1..=3)
        .map(|id| {
            let addr = expected["addresses"][id.to_string()]
                .as_str()
                .expect("an address")
                .to_string();
            (id, addr, dir(id))
        })
        .collect();
    let c = Cluster::adopt(nodes, Options::default()).await;
    let leader = c.wait_for_leader(Duration::from_secs(20)).await;
    let old_applied = figure("applied", leader);
    for id in 1..=3 {
        c.wait_applied(id, old_applied, Duration::from_secs(10))
            .await;
    }

    let executions = expected["executions"].as_object().expect("executions");
    for (exec, answers) in executions {
        for id in 1..=3 {
            for (kind, path) in [
                ("chain", format!("/v1/executions/{exec}/chain")),
                ("raw", format!("/v1/executions/{exec}/chain/raw")),
                ("state", format!("/v1/executions/{exec}/state")),
            ] {
                let (status, body) = c.get(id, &path).await;
                assert_eq!(status, 200, "node {id} {path}: {body}");
                assert_eq!(
                    without_applied_index(&body),
                    without_applied_index(&answers[kind]),
                    "node {id} {path}"
                );
            }
        }
    }
    let (status, changes) = c.get(leader, "/v1/changes").await;
    assert_eq!(status, 200);
    assert_eq!(changes, expected["changes"], "the change feed");

    // New writes continue the old chains, after the old log.
    let head = executions["order-1"]["state"]["head"]["event_id"]
        .as_str()
        .expect("a head")
        .to_string();
    let (status, body) = c
        .post(
            leader,
            "/v1/executions/order-1/events",
            &json!({"event_id": "after-upgrade", "prev_event_id": head, "payload": {}}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let commit_index = body["commit_index"].as_u64().expect("a commit index");
    assert!(commit_index > old_applied, "{body}");
    let (status, chain) = c
        .get(c.follower().await, "/v1/executions/order-1/chain")
        .await;
    assert_eq!(status, 200);
    let events = chain["events"].as_array().expect("events");
    assert_eq!(events.last().unwrap()["event_id"], "after-upgrade");
}
