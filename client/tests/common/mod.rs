//! An in-process cluster for the client's tests: real `Node`s (RocksDB in temp dirs, openraft,
//! the axum API) serving on loopback sockets in the test's runtime. A node can be stopped (its
//! server and Raft shut down) to force a leader change.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chainstore_node::{app, ClientAuth, Host, Node, NodeConfig, PeerAuth, Secret, Tokens};
use chainstore_transport::{ReqwestTransport, Role, TransportOptions};
use raft_store::{Engine, RocksEngine, RocksOptions};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub const SECRET: &str = "client-test-cluster-secret";

/// The plaintext peer credential of the in-process clusters.
pub fn peer_auth() -> PeerAuth {
    PeerAuth::Secret(Secret::new(SECRET).expect("a usable secret"))
}

/// A plain reqwest transport, as a node uses on a plaintext cluster.
pub fn transport() -> ReqwestTransport {
    transport_reading(64 << 20)
}

/// A plain reqwest transport that reads answers of at most `bytes`.
pub fn transport_reading(bytes: usize) -> ReqwestTransport {
    ReqwestTransport::new(&TransportOptions::new(Duration::from_secs(1), bytes)).expect("transport")
}

struct Running {
    host: Arc<Host>,
    /// The node's one group (these clusters have one shard).
    node: Arc<Node>,
    stop: oneshot::Sender<()>,
    server: JoinHandle<()>,
}

/// How a new cluster forms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Formation {
    /// Node 1 calls `initialize` with every node.
    Initialize,
    /// Every node runs the deployment bootstrap with the same voter list.
    Bootstrap,
    /// Every node's store is restored from a backup (a file, or a set's directory) first;
    /// nothing is initialized.
    Restore,
    /// Every node runs the deployment bootstrap with the same voter list and this many shards.
    Sharded(u32),
}

pub struct InProcCluster {
    pub addrs: BTreeMap<u64, SocketAddr>,
    running: BTreeMap<u64, Running>,
    _dir: tempfile::TempDir,
}

impl InProcCluster {
    pub async fn start(n: u64) -> Self {
        Self::start_with_tokens(n, Vec::new()).await
    }

    /// A cluster whose client API requires one of `tokens` (each with the write role); without
    /// tokens, the API is open.
    pub async fn start_with_tokens(n: u64, tokens: Vec<String>) -> Self {
        Self::form(n, tokens, Formation::Initialize, None).await
    }

    /// A cluster of `n` formed as `formation` says (`backup` is what `Restore` restores).
    pub async fn form(
        n: u64,
        tokens: Vec<String>,
        formation: Formation,
        backup: Option<&Path>,
    ) -> Self {
        Self::form_tuned(n, tokens, formation, backup, |_| {}).await
    }

    /// A cluster of `n` with defaults, each node's configuration then adjusted by `tune`.
    pub async fn start_tuned(n: u64, tune: fn(&mut NodeConfig)) -> Self {
        Self::form_tuned(n, Vec::new(), Formation::Initialize, None, tune).await
    }

    async fn form_tuned(
        n: u64,
        tokens: Vec<String>,
        formation: Formation,
        backup: Option<&Path>,
        tune: fn(&mut NodeConfig),
    ) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut listeners = BTreeMap::new();
        for id in 1..=n {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            listeners.insert(id, listener);
        }
        let addrs: BTreeMap<u64, SocketAddr> = listeners
            .iter()
            .map(|(id, l)| (*id, l.local_addr().expect("addr")))
            .collect();
        let mut running = BTreeMap::new();
        for (id, listener) in listeners {
            let mut config = NodeConfig::new(id, addrs[&id].to_string(), peer_auth());
            config.raft.election_min = Duration::from_millis(600);
            config.raft.election_max = Duration::from_millis(1200);
            config.client_auth = ClientAuth {
                tokens: Tokens::from_pairs(tokens.iter().map(|t| (Role::Write, t.as_str())))
                    .expect("usable tokens"),
                insecure_no_client_auth: tokens.is_empty(),
            };
            tune(&mut config);
            let engine =
                RocksEngine::open(&RocksOptions::new(dir.path().join(format!("node-{id}"))))
                    .expect("rocksdb");
            let engine: Arc<dyn Engine> = Arc::new(engine);
            if formation == Formation::Restore {
                let voters = addrs.iter().map(|(id, a)| (*id, a.to_string())).collect();
                let backup = backup.expect("a backup to restore");
                let restored =
                    chainstore_node::restore(Arc::clone(&engine), id, &voters, backup, None)
                        .await
                        .expect("restore");
                assert_ne!(restored, chainstore_node::Restored::AlreadyHolds);
            }
            let transport = Arc::new(transport_reading(
                config.limits.peer_response_bytes_max.min(64 << 20),
            ));
            let host = Host::start(config, engine, transport)
                .await
                .expect("start node");
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
            running.insert(
                id,
                Running {
                    host,
                    node,
                    stop,
                    server,
                },
            );
        }
        let members: BTreeMap<u64, String> =
            addrs.iter().map(|(id, a)| (*id, a.to_string())).collect();
        match formation {
            Formation::Initialize => running[&1].node.initialize(members).await.expect("init"),
            Formation::Bootstrap | Formation::Sharded(_) => {
                let shards = match formation {
                    Formation::Sharded(shards) => {
                        chainstore_model::ShardCount::new(shards).expect("a shard count")
                    }
                    _ => chainstore_model::ShardCount::ONE,
                };
                let mut outcomes = Vec::new();
                for r in running.values() {
                    outcomes.push(tokio::spawn(chainstore_node::bootstrap(
                        Arc::clone(&r.host),
                        members.clone(),
                        shards,
                        Duration::from_millis(100),
                    )));
                }
                for (id, outcome) in (1..=n).zip(outcomes) {
                    let expected = if id == 1 {
                        chainstore_node::Bootstrapped::Initialized
                    } else {
                        chainstore_node::Bootstrapped::NotBootstrapper
                    };
                    assert_eq!(outcome.await.expect("bootstrap"), expected, "node {id}");
                }
            }
            Formation::Restore => {}
        }
        let cluster = Self {
            addrs,
            running,
            _dir: dir,
        };
        cluster.leader().await;
        cluster
    }

    /// A running node as a cluster member (all of its groups).
    #[allow(dead_code)]
    pub fn host(&self, id: u64) -> Arc<Host> {
        Arc::clone(&self.running[&id].host)
    }

    /// A running node's one group.
    pub fn node(&self, id: u64) -> Arc<Node> {
        Arc::clone(&self.running[&id].node)
    }

    pub fn urls(&self) -> Vec<String> {
        self.addrs.values().map(|a| format!("http://{a}")).collect()
    }

    /// The leader, once one is elected and ready to serve writes.
    pub async fn leader(&self) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            for (id, r) in &self.running {
                let m = r.node.raft_metrics();
                let term_applied =
                    m.last_applied.as_ref().map(|l| l.leader_id.term) == Some(m.current_term);
                if m.current_leader == Some(*id) && term_applied {
                    return *id;
                }
            }
            assert!(Instant::now() < deadline, "no leader");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops a node: its server closes and its Raft shuts down.
    pub async fn stop(&mut self, id: u64) {
        if let Some(r) = self.running.remove(&id) {
            let _ = r.stop.send(());
            r.host.shutdown().await;
            let _ = r.server.await;
        }
    }
}

impl Drop for InProcCluster {
    fn drop(&mut self) {
        for (_, r) in std::mem::take(&mut self.running) {
            let _ = r.stop.send(());
            r.server.abort();
        }
    }
}
