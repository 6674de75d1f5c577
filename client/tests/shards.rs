//! The client against a cluster of several shards (made by the deployment bootstrap): it computes
//! each execution's shard, sends each call to that shard's leader, and follows a leader that
//! moves without surfacing an error; a backup set of such a cluster restores into a new one, and
//! a set that does not match is refused.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chainstore_client::{Client, ClientError, ReadOptions, SavedBackup};
use chainstore_model::{
    AppendRequest, BackupManifest, EventId, ExecutionId, Guarded, ShardCount, MANIFEST_FILE,
};
use chainstore_node::{restore, Restored};
use chainstore_transport::{Transport, TransportError};
use common::{Formation, InProcCluster};
use raft_store::engine::ScanOrder;
use raft_store::{Engine, MemEngine};

/// A transport that notes the authority and path of every request it sends.
struct Noting {
    inner: Arc<dyn Transport>,
    sent: Arc<Mutex<Vec<(String, String)>>>,
}

impl Transport for Noting {
    fn send(
        &self,
        request: http::Request<bytes::Bytes>,
        timeout: Duration,
    ) -> chainstore_transport::BoxFuture<'_, Result<http::Response<bytes::Bytes>, TransportError>>
    {
        let authority = request.uri().authority().map(|a| a.to_string());
        self.sent.lock().unwrap().push((
            authority.unwrap_or_default(),
            request.uri().path().to_string(),
        ));
        self.inner.send(request, timeout)
    }
}

fn event(id: &str, prev: Option<&str>) -> AppendRequest {
    AppendRequest {
        event_id: EventId::new(id).unwrap(),
        prev_event_id: prev.map(|p| EventId::new(p).unwrap()),
        parent_execution_id: None,
        payload: serde_json::json!({ "n": id }),
        genesis: prev.is_none(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_call_goes_to_its_shards_leader_and_follows_it_when_it_moves() {
    const SHARDS: u32 = 4;
    // Made by the deployment bootstrap (`--bootstrap-shards`): node 1 makes it, the others wait.
    let cluster = InProcCluster::form(3, Vec::new(), Formation::Sharded(SHARDS), None).await;
    let layout = cluster.host(1).layout().expect("a layout");
    assert_eq!(layout.shards().get(), SHARDS);
    for id in 2..=3 {
        assert_eq!(
            cluster.host(id).layout(),
            Some(Arc::clone(&layout)),
            "n{id}"
        );
    }
    // Every shard led, by its preferred node (the balancer's work).
    let preferred = |shard: u32| {
        let layout = cluster.host(1).layout().unwrap();
        layout
            .placement()
            .shard(chainstore_model::ShardId(shard))
            .unwrap()
            .leader
    };
    let led_by = |shard: u32| {
        (1..=3).find(|id| {
            cluster
                .host(*id)
                .group(shard)
                .is_some_and(|g| g.raft_metrics().current_leader == Some(*id))
        })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while (0..SHARDS).any(|s| led_by(s) != Some(preferred(s))) {
        assert!(
            std::time::Instant::now() < deadline,
            "the shards never settled"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let sent = Arc::new(Mutex::new(Vec::new()));
    let client = Client::builder(cluster.urls())
        .transport(Arc::new(Noting {
            inner: Arc::new(common::transport()),
            sent: Arc::clone(&sent),
        }))
        .build()
        .unwrap();
    let count = ShardCount::new(SHARDS).unwrap();
    let addr_of: BTreeMap<u64, String> = cluster
        .addrs
        .iter()
        .map(|(id, a)| (*id, a.to_string()))
        .collect();
    let execs: Vec<ExecutionId> = (0..16)
        .map(|i| ExecutionId::new(format!("order-{i}")).unwrap())
        .collect();
    for exec in &execs {
        client.append(exec, &event("a", None)).await.unwrap();
    }
    // Every append after discovery went straight to its shard's leader.
    let appends: Vec<(String, String)> = sent
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, path)| path.ends_with("/events"))
        .cloned()
        .collect();
    assert_eq!(
        appends.len(),
        execs.len(),
        "one request per append: {appends:?}"
    );
    for (exec, (authority, _)) in execs.iter().zip(&appends) {
        let shard = count.shard_of(exec).0;
        assert_eq!(
            authority,
            &addr_of[&preferred(shard)],
            "{exec} (shard {shard}) went elsewhere than its leader"
        );
    }

    // One shard's leadership moves; the client follows it without an error, and every chain
    // reads back whole.
    let moved = count.shard_of(&execs[0]).0;
    let home = preferred(moved);
    let away = if home == 1 { 2 } else { 1 };
    let group = cluster.host(home).group(moved).unwrap();
    group.raft().trigger().transfer_leader(away).await.unwrap();
    for exec in &execs {
        client.append(exec, &event("b", Some("a"))).await.unwrap();
    }
    for exec in &execs {
        let read = client.chain(exec, ReadOptions::default()).await.unwrap();
        match read.answer {
            Guarded::Authoritative(events) => assert_eq!(events.len(), 2, "{exec}"),
            other => panic!("{exec}: {other:?}"),
        }
    }
}

/// The chain of `exec` as the cluster answers it (authoritative, or the test fails).
async fn chain_of(client: &Client, exec: &ExecutionId) -> Vec<chainstore_model::ChainEvent> {
    match client
        .chain(exec, ReadOptions::default())
        .await
        .unwrap()
        .answer
    {
        Guarded::Authoritative(events) => events,
        other => panic!("{exec}: {other:?}"),
    }
}

/// A copy of the backup set in `from`, changed by `change`, in a directory of its own.
fn changed_copy(from: &Path, change: impl FnOnce(&Path)) -> tempfile::TempDir {
    let copy = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), copy.path().join(entry.file_name())).unwrap();
    }
    change(copy.path());
    copy
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_set_restores_every_shard_and_a_set_that_does_not_match_is_refused() {
    const SHARDS: u32 = 4;
    let source = InProcCluster::form(3, Vec::new(), Formation::Sharded(SHARDS), None).await;
    let client = Client::builder(source.urls()).build().unwrap();
    let count = ShardCount::new(SHARDS).unwrap();
    let execs: Vec<ExecutionId> = (0..12)
        .map(|i| ExecutionId::new(format!("wf-{i}")).unwrap())
        .collect();
    let shards: std::collections::BTreeSet<u32> =
        execs.iter().map(|e| count.shard_of(e).0).collect();
    assert_eq!(
        shards.len(),
        SHARDS as usize,
        "every shard holds an execution"
    );
    let mut chains = BTreeMap::new();
    let mut last_commit = BTreeMap::<u32, u64>::new();
    for exec in &execs {
        client.append(exec, &event("a", None)).await.unwrap();
        let b = client.append(exec, &event("b", Some("a"))).await.unwrap();
        let shard = count.shard_of(exec).0;
        let last = last_commit.entry(shard).or_default();
        *last = (*last).max(b.commit_index);
        chains.insert(exec.clone(), chain_of(&client, exec).await);
    }

    let dir = tempfile::tempdir().unwrap();
    let set = dir.path().join("backup");
    let manifest = match client.save_backup(&set).await.unwrap() {
        SavedBackup::Set(manifest) => manifest,
        other => panic!("a sharded cluster saved {other:?}"),
    };
    assert_eq!(manifest.shards, count);
    for file in &manifest.files {
        assert!(
            file.last_log_index >= last_commit[&file.shard],
            "shard {}'s backup ({}) misses acknowledged appends (up to {})",
            file.shard,
            file.last_log_index,
            last_commit[&file.shard]
        );
    }
    // Saving again into a directory that holds a set is refused: a set has a directory of its own.
    let again = client.save_backup(&set).await;
    assert!(matches!(again, Err(ClientError::Write(_))), "{again:?}");

    // Sets that do not match are refused before anything is written.
    let voters: BTreeMap<u64, String> = (1..=3).map(|id| (id, format!("n{id}:1"))).collect();
    let first = |dir: &Path| dir.join(BackupManifest::file_name(0));
    let second = |dir: &Path| dir.join(BackupManifest::file_name(1));
    let no_manifest = changed_copy(&set, |d| {
        std::fs::remove_file(d.join(MANIFEST_FILE)).unwrap()
    });
    let changed_byte = changed_copy(&set, |d| {
        let mut bytes = std::fs::read(first(d)).unwrap();
        let middle = bytes.len() / 2;
        bytes[middle] ^= 1;
        std::fs::write(first(d), bytes).unwrap();
    });
    let swapped = changed_copy(&set, |d| {
        let spare = d.join("spare");
        std::fs::rename(first(d), &spare).unwrap();
        std::fs::rename(second(d), first(d)).unwrap();
        std::fs::rename(&spare, second(d)).unwrap();
    });
    let file_missing = changed_copy(&set, |d| std::fs::remove_file(second(d)).unwrap());
    let shard_dropped = changed_copy(&set, |d| {
        let mut manifest = manifest.clone();
        manifest.files.pop();
        std::fs::write(
            d.join(MANIFEST_FILE),
            serde_json::to_vec(&manifest).unwrap(),
        )
        .unwrap();
    });
    let lone_file = first(&set);
    let cases: Vec<(&str, &Path, Option<ShardCount>)> = vec![
        ("no manifest", no_manifest.path(), None),
        ("a changed byte", changed_byte.path(), None),
        ("two shards' files swapped", swapped.path(), None),
        ("a shard's file missing", file_missing.path(), None),
        (
            "a shard dropped from the manifest",
            shard_dropped.path(),
            None,
        ),
        (
            "another shard count asked",
            &set,
            Some(ShardCount::new(2).unwrap()),
        ),
        ("one shard's file as a whole backup", &lone_file, None),
        ("one shard's file as a set", &lone_file, Some(count)),
    ];
    for (what, path, asked) in cases {
        let engine: Arc<dyn Engine> = Arc::new(MemEngine::new());
        let refused = restore(Arc::clone(&engine), 1, &voters, path, asked).await;
        assert!(refused.is_err(), "{what}: {refused:?}");
        let written = engine.scan(b"", &[0xff], ScanOrder::Forward, 1).unwrap();
        assert!(written.is_empty(), "{what}: the store was changed");
    }
    // A node restored once takes the same set again as done, and never restores over its data.
    let engine: Arc<dyn Engine> = Arc::new(MemEngine::new());
    let restored = restore(Arc::clone(&engine), 1, &voters, &set, Some(count)).await;
    assert!(
        matches!(restored, Ok(Restored::Set { shards: SHARDS, .. })),
        "{restored:?}"
    );
    let again = restore(Arc::clone(&engine), 1, &voters, &set, None).await;
    assert_eq!(again, Ok(Restored::AlreadyHolds));
    drop(source);

    // A new cluster restored from the set (every node restores it, naming the manifest or the
    // directory alike) serves every chain, and each shard's log moves on from its backup.
    let manifest_path = set.join(MANIFEST_FILE);
    let restored =
        InProcCluster::form(3, Vec::new(), Formation::Restore, Some(&manifest_path)).await;
    assert_eq!(restored.host(2).shards(), count);
    let new = Client::builder(restored.urls()).build().unwrap();
    for (exec, chain) in &chains {
        assert_eq!(&chain_of(&new, exec).await, chain, "{exec}");
    }
    for exec in &execs {
        let next = new.append(exec, &event("c", Some("b"))).await.unwrap();
        assert_eq!(next.exec_seq, 3, "{exec}");
        let file = &manifest.files[count.shard_of(exec).0 as usize];
        assert!(next.commit_index > file.last_log_index, "{exec}");
        let stale = new.append(exec, &event("x", Some("a"))).await;
        assert!(
            stale.is_err(),
            "{exec}: an append on an old head was accepted"
        );
    }
}
