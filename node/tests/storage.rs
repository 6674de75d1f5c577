//! Storage faults on a cluster of in-process nodes over `MemEngine` (real openraft, the real
//! router, reqwest on loopback): a node whose disk fails a sync, or hands back a damaged value,
//! stops Raft, says so in `/readyz`, refuses reads and no longer votes; the rest of the cluster
//! serves on, and the node rejoins with everything once restarted on a sound disk.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chainstore_node::{
    app, ClientAuth, Node, NodeConfig, PeerAuth, ReqwestTransport, Secret, Tokens, TransportOptions,
};
use raft_store::MemEngine;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

const SECRET: &str = "storage-fault-test-cluster-secret";

struct Member {
    node: Arc<Node>,
    stop: oneshot::Sender<()>,
    server: JoinHandle<()>,
}

struct Cluster {
    addrs: BTreeMap<u64, SocketAddr>,
    engines: BTreeMap<u64, MemEngine>,
    running: BTreeMap<u64, Member>,
    http: reqwest::Client,
}

impl Cluster {
    async fn start() -> Self {
        let mut listeners = BTreeMap::new();
        for id in 1..=3u64 {
            listeners.insert(id, TcpListener::bind("127.0.0.1:0").await.unwrap());
        }
        let addrs: BTreeMap<u64, SocketAddr> = listeners
            .iter()
            .map(|(id, l)| (*id, l.local_addr().unwrap()))
            .collect();
        let mut cluster = Self {
            addrs,
            engines: (1..=3).map(|id| (id, MemEngine::new())).collect(),
            running: BTreeMap::new(),
            http: common::http_client(None, None, None),
        };
        for (id, listener) in listeners {
            cluster.serve(id, listener).await;
        }
        let members = cluster
            .addrs
            .iter()
            .map(|(id, a)| (*id, a.to_string()))
            .collect();
        cluster.running[&1]
            .node
            .initialize(members)
            .await
            .expect("initialize");
        cluster
    }

    async fn serve(&mut self, id: u64, listener: TcpListener) {
        let mut config = NodeConfig::new(
            id,
            self.addrs[&id].to_string(),
            PeerAuth::Secret(Secret::new(SECRET).unwrap()),
        );
        config.raft.election_min = Duration::from_millis(600);
        config.raft.election_max = Duration::from_millis(1200);
        config.client_auth = ClientAuth {
            tokens: Tokens::default(),
            insecure_no_client_auth: true,
        };
        let transport = Arc::new(
            ReqwestTransport::new(&TransportOptions::new(Duration::from_secs(1), 64 << 20))
                .unwrap(),
        );
        let engine = Arc::new(self.engines[&id].clone());
        let node = Node::start(config, engine, transport).await.expect("start");
        let (stop, stopped) = oneshot::channel::<()>();
        let router = app(Arc::clone(&node));
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, router)
                .with_graceful_shutdown(async move {
                    let _ = stopped.await;
                })
                .await;
        });
        self.running.insert(id, Member { node, stop, server });
    }

    /// Stops node `id` (server and Raft) as a crash would: its unsynced writes are lost.
    async fn crash(&mut self, id: u64) {
        let member = self.running.remove(&id).expect("running");
        let _ = member.stop.send(());
        member.node.shutdown().await;
        let _ = member.server.await;
        self.engines[&id].clear_faults();
        self.engines[&id].crash();
    }

    /// Starts node `id` again on its engine, at its address.
    async fn restart(&mut self, id: u64) {
        let listener = TcpListener::bind(self.addrs[&id]).await.expect("rebind");
        self.serve(id, listener).await;
    }

    fn node(&self, id: u64) -> &Arc<Node> {
        &self.running[&id].node
    }

    /// The ready leader among `among`, waiting up to `within`.
    async fn leader_among(&self, among: &[u64], within: Duration) -> Option<u64> {
        let deadline = Instant::now() + within;
        loop {
            for id in among {
                let m = self.node(*id).raft_metrics();
                let term_applied =
                    m.last_applied.as_ref().map(|l| l.leader_id.term) == Some(m.current_term);
                if m.current_leader == Some(*id) && term_applied && m.running_state.is_ok() {
                    return Some(*id);
                }
            }
            if Instant::now() > deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn call(&self, id: u64, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let url = format!("http://{}{path}", self.addrs[&id]);
        let request = match method {
            "GET" => self.http.get(url),
            _ => self.http.post(url),
        };
        let request = match body {
            Some(body) => request.json(&body),
            None => request,
        };
        match request.send().await {
            Ok(response) => {
                let status = response.status().as_u16();
                (status, response.json().await.unwrap_or(Value::Null))
            }
            Err(e) => (0, json!({ "transport_error": e.to_string() })),
        }
    }

    async fn append(&self, id: u64, exec: &str, event: &str, prev: Option<&str>) -> (u16, Value) {
        let body = json!({
            "event_id": event,
            "prev_event_id": prev,
            "genesis": prev.is_none(),
            "payload": { "n": event },
        });
        self.call(
            id,
            "POST",
            &format!("/v1/executions/{exec}/events"),
            Some(body),
        )
        .await
    }

    /// The chain of `exec` read linearizably through `id`.
    async fn chain(&self, id: u64, exec: &str) -> (u16, Value) {
        self.call(id, "GET", &format!("/v1/executions/{exec}/chain"), None)
            .await
    }

    /// Waits until node `id` reports a storage failure in `/readyz`; returns the body.
    async fn failed_readyz(&self, id: u64) -> Value {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let (status, body) = self.call(id, "GET", "/readyz", None).await;
            if status == 503 && body["storage_failure"].is_string() {
                return body;
            }
            assert!(
                Instant::now() < deadline,
                "n{id} never reported its storage failure: {status} {body}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until Raft on node `id` has stopped.
    async fn raft_stopped(&self, id: u64) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.node(id).raft_metrics().running_state.is_ok() {
            assert!(Instant::now() < deadline, "Raft still runs on n{id}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn event_ids(body: &Value) -> Vec<String> {
    body["events"]
        .as_array()
        .map(|events| {
            events
                .iter()
                .filter_map(|e| e["event_id"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

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
    // Linux may drop dirty pages after a failed fsync).
    c.engines[&leader].fail_sync_after_losing(1, 0);
    let (status, body) = c.append(leader, "y", "b", Some("a")).await;
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
