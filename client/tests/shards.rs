//! The client against a cluster of several shards (made by the deployment bootstrap): it computes
//! each execution's shard, sends each call to that shard's leader, and follows a leader that
//! moves without surfacing an error.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chainstore_client::{Client, ReadOptions};
use chainstore_model::{AppendRequest, EventId, ExecutionId, Guarded, ShardCount};
use chainstore_transport::{Transport, TransportError};
use common::{Formation, InProcCluster};

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
    let cluster = InProcCluster::form(3, Vec::new(), Formation::Sharded(SHARDS), &[]).await;
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
