//! The client library and `chainctl` against a cluster that serves TLS with mutual TLS between
//! its nodes (in-process nodes with the production server loop and certificate handling): a CA
//! file and a token, or a client certificate naming a role, get in with exactly that role's
//! rights; no credential, a weaker role, or a server the client cannot verify are refused with
//! the typed error (and chainctl's exit code) that says so.

// The node tests' certificate maker, shared rather than copied.
#[path = "../../node/tests/common/certs.rs"]
#[allow(dead_code)]
mod certs;

use std::collections::BTreeMap;
use std::process::Output;
use std::sync::Arc;
use std::time::Duration;

use certs::{Ca, Pem};
use chainstore_client::{Client, ClientError, ReadOptions, RetryPolicy};
use chainstore_model::{AppendRequest, EventId, ExecutionId, Guarded};
use chainstore_node::{app, ClientAuth, Host, NodeConfig, PeerAuth, Tokens};
use chainstore_node::{serve, ServeOptions};
use chainstore_node::{NodeTls, TlsFiles};
use chainstore_transport::Role;
use chainstore_transport::{KeyPair, TlsClientOptions};
use raft_store::{Engine, RocksEngine, RocksOptions};

const WRITE_TOKEN: &str = "write-token-of-the-tls-tests";

struct TlsCluster {
    urls: Vec<String>,
    ca: Ca,
    dir: tempfile::TempDir,
    _nodes: Vec<Arc<Host>>,
}

impl TlsCluster {
    async fn start(n: u64) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::new("client tests CA");
        std::fs::write(dir.path().join("ca.pem"), &ca.cert).unwrap();
        let mut listeners = BTreeMap::new();
        for id in 1..=n {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            listeners.insert(id, listener);
        }
        let members: BTreeMap<u64, String> = listeners
            .iter()
            .map(|(id, l)| (*id, l.local_addr().unwrap().to_string()))
            .collect();
        let mut nodes = Vec::new();
        for (id, listener) in listeners {
            let pem = ca.node(id);
            let write = |name: &str, text: &str| {
                let path = dir.path().join(format!("node-{id}.{name}"));
                std::fs::write(&path, text).unwrap();
                path
            };
            let files = TlsFiles {
                cert: write("crt", &pem.cert),
                key: write("key", &pem.key),
                client_ca: dir.path().join("ca.pem"),
            };
            let tls = NodeTls::load(id, files, Duration::from_secs(1), 64 << 20).unwrap();
            let mut config = NodeConfig::new(id, members[&id].clone(), PeerAuth::Certificate);
            config.raft.election_min = Duration::from_millis(600);
            config.raft.election_max = Duration::from_millis(1200);
            config.client_auth = ClientAuth {
                tokens: Tokens::from_pairs([(Role::Write, WRITE_TOKEN)]).unwrap(),
                insecure_no_client_auth: false,
            };
            let engine: Arc<dyn Engine> = Arc::new(
                RocksEngine::open(&RocksOptions::new(dir.path().join(format!("data-{id}"))))
                    .unwrap(),
            );
            let node = Host::start(config, engine, tls.peer_transport())
                .await
                .unwrap();
            let options = ServeOptions {
                header_read_timeout: Duration::from_secs(10),
                tls_handshake_timeout: Duration::from_secs(10),
                shutdown_grace: Duration::from_secs(1),
                connections_max: 1024,
            };
            tokio::spawn(serve(
                listener,
                app(Arc::clone(&node)),
                Some(tls),
                options,
                std::future::pending(),
            ));
            nodes.push(node);
        }
        nodes[0]
            .first()
            .unwrap()
            .initialize(members.clone())
            .await
            .unwrap();
        let urls = members.values().map(|a| format!("https://{a}")).collect();
        let cluster = Self {
            urls,
            ca,
            dir,
            _nodes: nodes,
        };
        // Ready when a write goes through.
        let client = cluster.client(cluster.tls(None), Some(WRITE_TOKEN));
        client
            .append(&exec("warm-up"), &append("w0", None))
            .await
            .expect("the cluster serves");
        cluster
    }

    fn tls(&self, identity: Option<&Pem>) -> TlsClientOptions {
        TlsClientOptions {
            roots_pem: Some(self.ca.cert.as_bytes().to_vec()),
            identity: identity
                .map(|p| KeyPair::from_pem(p.cert.as_bytes(), p.key.as_bytes()).unwrap()),
        }
    }

    fn client(&self, tls: TlsClientOptions, token: Option<&str>) -> Client {
        let policy = RetryPolicy {
            attempts_max: 3,
            backoff_base: Duration::from_millis(10),
            ..RetryPolicy::default()
        };
        let mut builder = Client::builder(self.urls.clone())
            .tls(tls)
            .retry_policy(policy)
            .jitter_seed(7);
        if let Some(token) = token {
            builder = builder.token(token);
        }
        builder.build().unwrap()
    }

    fn file(&self, name: &str, text: &str) -> String {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_string_lossy().into_owned()
    }
}

fn exec(id: &str) -> ExecutionId {
    ExecutionId::new(id).unwrap()
}

fn append(id: &str, prev: Option<&str>) -> AppendRequest {
    AppendRequest {
        event_id: EventId::new(id).unwrap(),
        prev_event_id: prev.map(|p| EventId::new(p).unwrap()),
        parent_execution_id: None,
        payload: serde_json::json!({ "id": id }),
        genesis: prev.is_none(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_gets_exactly_its_credentials_rights_over_tls() {
    let c = TlsCluster::start(3).await;
    let x = exec("tls-1");

    let writer = c.client(c.tls(None), Some(WRITE_TOKEN));
    assert_eq!(
        writer
            .append(&x, &append("a", None))
            .await
            .unwrap()
            .exec_seq,
        1
    );
    let read = writer.chain(&x, ReadOptions::default()).await.unwrap();
    assert!(matches!(read.answer, Guarded::Authoritative(_)), "{read:?}");
    let err = writer.snapshot().await.unwrap_err();
    assert!(
        matches!(err, ClientError::Forbidden(_)),
        "write is not admin: {err:?}"
    );

    let reader = c.client(c.tls(Some(&c.ca.role("read"))), None);
    assert!(reader.chain(&x, ReadOptions::default()).await.is_ok());
    let err = reader
        .append(&x, &append("b", Some("a")))
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::Forbidden(_)), "{err:?}");

    let admin = c.client(c.tls(Some(&c.ca.role("admin"))), None);
    assert!(admin.snapshot().await.unwrap().last_log_index > 0);
    assert_eq!(
        admin
            .append(&x, &append("b", Some("a")))
            .await
            .unwrap()
            .exec_seq,
        2
    );

    let anonymous = c.client(c.tls(None), None);
    let err = anonymous
        .chain(&x, ReadOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::Unauthorized(_)), "{err:?}");

    // Without the cluster's CA the client cannot verify the nodes and sends nothing.
    let untrusting = c.client(TlsClientOptions::default(), Some(WRITE_TOKEN));
    let err = untrusting
        .append(&x, &append("c", Some("b")))
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::Unavailable(_)), "{err:?}");
    assert!(err.to_string().contains("certificate"), "{err}");
    let events = admin.chain_raw(&x, ReadOptions::default()).await.unwrap();
    assert_eq!(events.len(), 2, "no refused append was stored");
}

/// Runs chainctl with `args` and the environment `env` (off the async runtime's threads).
async fn chainctl(args: Vec<String>, env: Vec<(&'static str, String)>) -> Output {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_chainctl"));
    command.env_remove("CHAINCTL_TOKEN").args(args).envs(env);
    tokio::task::spawn_blocking(move || command.output().expect("run chainctl"))
        .await
        .expect("join")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chainctl_takes_a_ca_file_a_token_from_the_environment_or_a_file_and_client_certificates() {
    let c = TlsCluster::start(3).await;
    let ca = c.file("ca.crt", &c.ca.cert);
    let read = c.ca.role("read");
    let read_cert = c.file("read.crt", &read.cert);
    let read_key = c.file("read.key", &read.key);
    let token_file = c.file("token", &format!("{WRITE_TOKEN}\n"));
    let base = |extra: &[&str]| -> Vec<String> {
        let mut args = vec![
            "--nodes".to_string(),
            c.urls.join(","),
            "--attempts".into(),
            "2".into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    };
    let code = |out: &Output| out.status.code().unwrap_or(-1);
    let stderr = |out: &Output| String::from_utf8_lossy(&out.stderr).into_owned();

    let out = chainctl(
        base(&["--ca-file", &ca, "append", "ctl-1", "a", "--genesis"]),
        vec![("CHAINCTL_TOKEN", WRITE_TOKEN.to_string())],
    )
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = chainctl(
        base(&[
            "--ca-file",
            &ca,
            "--token-file",
            &token_file,
            "append",
            "ctl-1",
            "b",
            "--prev",
            "a",
        ]),
        vec![],
    )
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = chainctl(
        base(&[
            "--ca-file",
            &ca,
            "--cert",
            &read_cert,
            "--key",
            &read_key,
            "chain",
            "ctl-1",
        ]),
        vec![],
    )
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = chainctl(
        base(&[
            "--ca-file",
            &ca,
            "--cert",
            &read_cert,
            "--key",
            &read_key,
            "append",
            "ctl-1",
            "c",
            "--prev",
            "b",
        ]),
        vec![],
    )
    .await;
    assert_eq!(code(&out), 1, "a refusal: {}", stderr(&out));
    assert!(stderr(&out).contains("forbidden"), "{}", stderr(&out));
    let out = chainctl(base(&["--ca-file", &ca, "chain", "ctl-1"]), vec![]).await;
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(stderr(&out).contains("unauthorized"), "{}", stderr(&out));
    let out = chainctl(
        base(&["chain", "ctl-1"]),
        vec![("CHAINCTL_TOKEN", WRITE_TOKEN.to_string())],
    )
    .await;
    assert_eq!(
        code(&out),
        3,
        "an unverifiable cluster is unavailable: {}",
        stderr(&out)
    );
    let out = chainctl(
        base(&[
            "--ca-file",
            &ca,
            "--token-file",
            &token_file,
            "chain",
            "ctl-1",
        ]),
        vec![("CHAINCTL_TOKEN", WRITE_TOKEN.to_string())],
    )
    .await;
    assert_eq!(code(&out), 2, "two sources of a token: {}", stderr(&out));
    let out = chainctl(base(&["--cert", &read_cert, "chain", "ctl-1"]), vec![]).await;
    assert_eq!(code(&out), 2, "--cert without --key: {}", stderr(&out));
}
