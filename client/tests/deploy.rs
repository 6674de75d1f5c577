//! What deployments rely on, against real in-process clusters: the automatic bootstrap forms a
//! cluster once and never beside an existing one; a backup taken through the client restores
//! into a new cluster that serves every acknowledged event and continues after the backup's index.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chainstore_client::{Client, ReadOptions};
use chainstore_model::ShardCount;
use chainstore_model::{AppendRequest, EventId, ExecutionId, FromLog, Guarded, LogEvent};
use chainstore_node::{bootstrap, Bootstrapped};
use chainstore_node::{Host, NodeConfig};
use common::{Formation, InProcCluster};
use raft_store::raft::{restore_backup, BackupError};
use raft_store::{Engine, MemEngine};
use serde_json::json;

fn exec(s: &str) -> ExecutionId {
    ExecutionId::new(s).unwrap()
}

fn append(id: &str, prev: Option<&str>, genesis: bool) -> AppendRequest {
    AppendRequest {
        event_id: EventId::new(id).unwrap(),
        prev_event_id: prev.map(|p| EventId::new(p).unwrap()),
        parent_execution_id: None,
        payload: json!({ "id": id }),
        genesis,
    }
}

fn client(cluster: &InProcCluster) -> Client {
    Client::builder(cluster.urls())
        .jitter_seed(3)
        .build()
        .unwrap()
}

async fn authoritative(client: &Client, x: &ExecutionId) -> Vec<chainstore_model::ChainEvent> {
    match client
        .chain(x, ReadOptions::default())
        .await
        .unwrap()
        .answer
    {
        Guarded::Authoritative(events) => events,
        other => panic!("{x}: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_forms_the_cluster_once_and_never_beside_an_existing_one() {
    // Every node runs the bootstrap; only node 1 initializes (asserted by the harness).
    let cluster = InProcCluster::form(3, Vec::new(), Formation::Bootstrap, None).await;
    let client = client(&cluster);
    client
        .append(&exec("boot"), &append("e1", None, true))
        .await
        .unwrap();
    let voters: BTreeMap<u64, String> = cluster
        .addrs
        .iter()
        .map(|(id, a)| (*id, a.to_string()))
        .collect();

    // A restart of the bootstrapper: its storage holds the membership, so nothing happens.
    let again = bootstrap(
        cluster.host(1),
        voters.clone(),
        ShardCount::ONE,
        Duration::from_millis(50),
    )
    .await;
    assert_eq!(again, Bootstrapped::AlreadyMember);

    // Node 1 again, but on a wiped disk: its peers belong to a cluster, so it must not found a
    // second one.
    let wiped: Arc<dyn Engine> = Arc::new(MemEngine::new());
    let fresh = Host::start(
        NodeConfig::new(1, "127.0.0.1:1".to_string(), common::peer_auth()),
        wiped,
        Arc::new(common::transport()),
    )
    .await
    .unwrap();
    let outcome = bootstrap(
        Arc::clone(&fresh),
        voters,
        ShardCount::ONE,
        Duration::from_millis(50),
    )
    .await;
    assert_eq!(outcome, Bootstrapped::PeerHasCluster(2));
    assert!(
        fresh
            .first()
            .unwrap()
            .raft_metrics()
            .membership_config
            .membership()
            .voter_ids()
            .next()
            .is_none(),
        "the wiped node initialized a cluster of its own"
    );
    fresh.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_restores_into_a_new_cluster_with_every_acknowledged_event() {
    let source = InProcCluster::start(3).await;
    let old = client(&source);
    let native = exec("native");
    let mut prev: Option<String> = None;
    for n in 1..=25 {
        let id = format!("e{n}");
        old.append(&native, &append(&id, prev.as_deref(), n == 1))
            .await
            .unwrap();
        prev = Some(id);
    }
    let populated = exec("populated");
    let log: Vec<LogEvent> = (0..7)
        .map(|i| LogEvent {
            event_id: EventId::new(format!("l{i}")).unwrap(),
            prev_event_id: (i > 0).then(|| EventId::new(format!("l{}", i - 1)).unwrap()),
            parent_execution_id: None,
            payload: json!({ "i": i }),
        })
        .collect();
    assert!(matches!(
        old.populate(&populated, &log).await.unwrap(),
        FromLog::InSync { .. }
    ));
    let native_chain = authoritative(&old, &native).await;
    let populated_chain = authoritative(&old, &populated).await;

    let backup = old.snapshot().await.unwrap();
    let last_commit = native_chain
        .iter()
        .chain(&populated_chain)
        .map(|e| e.commit_index)
        .max()
        .unwrap();
    assert!(
        backup.last_log_index >= last_commit,
        "the backup ({}) misses acknowledged writes (up to {last_commit})",
        backup.last_log_index
    );

    // Damaged or truncated files are refused before anything is written.
    for bad in [&b"not a backup"[..], &backup.data[..backup.data.len() - 3]] {
        let engine = Arc::new(MemEngine::new());
        let voters = BTreeMap::from([(1, "a:1".to_string())]);
        let refused = restore_backup(Arc::clone(&engine), 1, &voters, bad.to_vec()).await;
        assert!(
            matches!(refused, Err(BackupError::Invalid(_))),
            "{refused:?}"
        );
    }
    // A store that already holds a node's state is never overwritten.
    let used = Arc::new(MemEngine::new());
    let voters = BTreeMap::from([(1, "a:1".to_string())]);
    restore_backup(Arc::clone(&used), 1, &voters, backup.data.to_vec())
        .await
        .unwrap();
    let again = restore_backup(Arc::clone(&used), 1, &voters, backup.data.to_vec()).await;
    assert!(matches!(again, Err(BackupError::NotEmpty)), "{again:?}");
    drop(source);

    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), &backup.data).unwrap();
    let restored = InProcCluster::form(3, Vec::new(), Formation::Restore, Some(file.path())).await;
    let new = client(&restored);
    assert_eq!(authoritative(&new, &native).await, native_chain);
    assert_eq!(authoritative(&new, &populated).await, populated_chain);
    // The chain continues: the head check sees the restored head, the log index moves on.
    let next = new
        .append(&native, &append("e26", Some("e25"), false))
        .await
        .unwrap();
    assert_eq!(next.exec_seq, 26);
    assert!(next.commit_index > backup.last_log_index);
    let stale = new.append(&native, &append("x", Some("e3"), false)).await;
    assert!(stale.is_err(), "an append on an old head was accepted");
}
