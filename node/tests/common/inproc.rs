//! A cluster of in-process nodes over `MemEngine` (real openraft, the real router, reqwest on
//! loopback): for tests that fault a node's disk, or tune limits that have no flag.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chainstore_node::{app, ClientAuth, Host, Node, NodeConfig, PeerAuth, Secret, Tokens};
use chainstore_transport::{ReqwestTransport, TransportOptions};
use raft_store::MemEngine;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

const SECRET: &str = "storage-fault-test-cluster-secret";

pub struct Member {
    host: Arc<Host>,
    /// The node's one group (these clusters have one shard).
    node: Arc<Node>,
    stop: oneshot::Sender<()>,
    server: JoinHandle<()>,
}

pub struct Cluster {
    pub addrs: BTreeMap<u64, SocketAddr>,
    pub engines: BTreeMap<u64, MemEngine>,
    pub running: BTreeMap<u64, Member>,
    pub http: reqwest::Client,
    tune: fn(&mut NodeConfig),
}

impl Cluster {
    /// Three nodes with the default configuration, initialized as one cluster.
    pub async fn start() -> Self {
        Self::start_with(|_| {}).await
    }

    /// `n` nodes whose configuration `tune` adjusts, not yet a cluster.
    async fn unformed(n: u64, tune: fn(&mut NodeConfig)) -> Self {
        let mut listeners = BTreeMap::new();
        for id in 1..=n {
            listeners.insert(id, TcpListener::bind("127.0.0.1:0").await.unwrap());
        }
        let addrs: BTreeMap<u64, SocketAddr> = listeners
            .iter()
            .map(|(id, l)| (*id, l.local_addr().unwrap()))
            .collect();
        let mut cluster = Self {
            addrs,
            engines: (1..=n).map(|id| (id, MemEngine::new())).collect(),
            running: BTreeMap::new(),
            http: super::http_client(None, None, None),
            tune,
        };
        for (id, listener) in listeners {
            cluster.serve(id, listener).await;
        }
        cluster
    }

    /// Three nodes whose configuration `tune` adjusts, initialized as one cluster.
    pub async fn start_with(tune: fn(&mut NodeConfig)) -> Self {
        let cluster = Self::unformed(3, tune).await;
        cluster.running[&1]
            .node
            .initialize(cluster.members())
            .await
            .expect("initialize");
        cluster
    }

    /// Three nodes made one cluster of `shards` shards by `POST /v1/cluster/init` on node 1.
    #[allow(dead_code)]
    pub async fn start_sharded(shards: u32) -> Self {
        Self::start_sharded_on(3, shards).await
    }

    /// `n` nodes made one cluster of `shards` shards (three replicas each) by
    /// `POST /v1/cluster/init` on node 1.
    #[allow(dead_code)]
    pub async fn start_sharded_on(n: u64, shards: u32) -> Self {
        let cluster = Self::unformed(n, |_| {}).await;
        let (status, body) = cluster
            .call(
                1,
                "POST",
                "/v1/cluster/init",
                Some(json!({ "nodes": cluster.members(), "shards": shards })),
            )
            .await;
        assert_eq!(status, 200, "init: {body}");
        cluster
    }

    /// Every node's id and address.
    pub fn members(&self) -> BTreeMap<u64, String> {
        self.addrs
            .iter()
            .map(|(id, a)| (*id, a.to_string()))
            .collect()
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
        (self.tune)(&mut config);
        let transport = Arc::new(
            ReqwestTransport::new(&TransportOptions::new(Duration::from_secs(1), 64 << 20))
                .unwrap(),
        );
        let engine = Arc::new(self.engines[&id].clone());
        let host = Host::start(config, engine, transport).await.expect("start");
        let node = host.first().expect("a group");
        let (stop, stopped) = oneshot::channel::<()>();
        let router = app(Arc::clone(&host));
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, router)
                .with_graceful_shutdown(async move {
                    let _ = stopped.await;
                })
                .await;
        });
        self.running.insert(
            id,
            Member {
                host,
                node,
                stop,
                server,
            },
        );
    }

    /// Stops node `id` (server and Raft) as a crash would: its unsynced writes are lost.
    pub async fn crash(&mut self, id: u64) {
        let member = self.running.remove(&id).expect("running");
        let _ = member.stop.send(());
        member.host.shutdown().await;
        let _ = member.server.await;
        self.engines[&id].clear_faults();
        self.engines[&id].crash();
    }

    /// Starts node `id` again on its engine, at its address.
    pub async fn restart(&mut self, id: u64) {
        let listener = TcpListener::bind(self.addrs[&id]).await.expect("rebind");
        self.serve(id, listener).await;
    }

    /// Node `id`'s first group (its only one in a single-shard cluster).
    pub fn node(&self, id: u64) -> &Arc<Node> {
        &self.running[&id].node
    }

    /// Node `id` with all of its groups.
    #[allow(dead_code)]
    pub fn host(&self, id: u64) -> &Arc<Host> {
        &self.running[&id].host
    }

    /// The ready leader among `among`, waiting up to `within`.
    pub async fn leader_among(&self, among: &[u64], within: Duration) -> Option<u64> {
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

    pub async fn call(
        &self,
        id: u64,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
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

    pub async fn append(
        &self,
        id: u64,
        exec: &str,
        event: &str,
        prev: Option<&str>,
    ) -> (u16, Value) {
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
    pub async fn chain(&self, id: u64, exec: &str) -> (u16, Value) {
        self.call(id, "GET", &format!("/v1/executions/{exec}/chain"), None)
            .await
    }

    /// Waits until node `id` reports a storage failure in `/readyz`; returns the body.
    pub async fn failed_readyz(&self, id: u64) -> Value {
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
    pub async fn raft_stopped(&self, id: u64) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.node(id).raft_metrics().running_state.is_ok() {
            assert!(Instant::now() < deadline, "Raft still runs on n{id}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

pub fn event_ids(body: &Value) -> Vec<String> {
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
