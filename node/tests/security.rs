//! Who may call what, against real three-node clusters serving TLS with mutual TLS between
//! peers: every route against every kind of credential answers exactly as the README's table
//! of routes and roles says, and a refused call changes nothing; peers are known by their
//! certificates, so a node of another CA or a CA-signed node that is not a member can neither
//! vote, append entries nor install a snapshot, and is logged with the identity it claimed; a
//! leader sends nothing to a learner address whose certificate names another node; and a node
//! refuses to start insecure unless asked by name.

mod common;

use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chainstore_transport::Role;
use common::certs::{Ca, Pem};
use common::{event, http_client, Cluster, Options, ADMIN_TOKEN};
use openraft::raft::{AppendEntriesRequest, VoteRequest};
use raft_store::raft::{log_id, SnapshotMeta, TypeConfig, Vote};
use raft_store::wire::snapshot::{encode_chunk, SnapshotChunk};
use raft_store::wire::Message;
use serde_json::{json, Value};

const READ_TOKEN: &str = "read-token-for-the-matrix-test";
const WRITE_TOKEN: &str = "write-token-for-the-matrix-test";

fn tls_options() -> Options {
    Options {
        tls: true,
        tokens: vec![("read", READ_TOKEN.into()), ("write", WRITE_TOKEN.into())],
        ..Options::default()
    }
}

/// What a route requires, as the README's table lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Needs {
    Public,
    Read,
    Write,
    Admin,
    Peer,
}

/// A kind of caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Credential {
    None,
    WrongToken,
    ReadToken,
    WriteToken,
    AdminToken,
    ReadCert,
    AdminCert,
    MemberCert,
    NonMemberCert,
    NoIdentityCert,
}

const CREDENTIALS: [Credential; 10] = [
    Credential::None,
    Credential::WrongToken,
    Credential::ReadToken,
    Credential::WriteToken,
    Credential::AdminToken,
    Credential::ReadCert,
    Credential::AdminCert,
    Credential::MemberCert,
    Credential::NonMemberCert,
    Credential::NoIdentityCert,
];

/// The expected status class: `None` for "admitted" (the route's own answer), else 401 or 403.
fn expected(needs: Needs, credential: Credential) -> Option<u16> {
    use Credential::*;
    let role = match credential {
        None | WrongToken => return (needs != Needs::Public).then_some(401),
        NonMemberCert | NoIdentityCert => return (needs != Needs::Public).then_some(403),
        MemberCert => return Option::None,
        ReadToken | ReadCert => Needs::Read,
        WriteToken => Needs::Write,
        AdminToken | AdminCert => Needs::Admin,
    };
    let rank = |n: Needs| match n {
        Needs::Public => 0,
        Needs::Read => 1,
        Needs::Write => 2,
        Needs::Admin => 3,
        Needs::Peer => 4,
    };
    (rank(needs) > rank(role)).then_some(403)
}

fn client_for(c: &Cluster, credential: Credential) -> reqwest::Client {
    let ca = Some(c.ca.cert.as_str());
    let cert = |pem: Pem| http_client(ca, Some(&pem), Option::None);
    match credential {
        Credential::None => http_client(ca, None, None),
        Credential::WrongToken => http_client(ca, None, Some("not-a-token-of-this-cluster")),
        Credential::ReadToken => http_client(ca, None, Some(READ_TOKEN)),
        Credential::WriteToken => http_client(ca, None, Some(WRITE_TOKEN)),
        Credential::AdminToken => http_client(ca, None, Some(ADMIN_TOKEN)),
        Credential::ReadCert => cert(c.ca.role("read")),
        Credential::AdminCert => cert(c.ca.role("admin")),
        Credential::MemberCert => cert(c.ca.node(2)),
        Credential::NonMemberCert => cert(c.ca.node(9)),
        Credential::NoIdentityCert => cert(c.ca.anonymous()),
    }
}

/// Everything a refused call could have changed, as `node` and the leader see it, once `node`
/// holds the leader's whole log (an admitted write just before may still be on its way to a
/// follower; the fingerprint must not change because replication finished in between).
async fn fingerprint(c: &Cluster, node: u64, leader: u64) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let (at_node, at_leader) = loop {
        let (_, at_node) = c.get(node, "/v1/cluster").await;
        let (_, at_leader) = c.get(leader, "/v1/cluster?consistency=local").await;
        if at_node["last_log_index"] == at_leader["last_log_index"]
            || std::time::Instant::now() > deadline
        {
            break (at_node, at_leader);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let (_, chain) = c
        .get(leader, "/v1/executions/matrix/chain/raw?consistency=local")
        .await;
    let (_, feed) = c
        .get(leader, "/v1/changes?limit=10000&consistency=local")
        .await;
    json!({
        "node": [at_node["term"], at_node["voters"], at_node["learners"], at_node["last_log_index"]],
        "leader": [at_leader["term"], at_leader["voters"], at_leader["learners"], at_leader["last_log_index"]],
        "chain": chain["events"],
        "feed": feed["changes"],
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_answers_every_credential_as_the_table_says_and_refusals_change_nothing() {
    let c = Cluster::start_with(3, tls_options()).await;
    let leader = c.leader().await;
    let follower = c.follower().await;
    let genesis =
        json!({ "event_id": "m0", "prev_event_id": null, "payload": {}, "genesis": true });
    let (status, body) = c
        .post(leader, "/v1/executions/matrix/events", &genesis)
        .await;
    assert_eq!(status, 200, "{body}");

    let routes: Vec<(Needs, &str, &str, Value)> = vec![
        (Needs::Public, "GET", "/healthz", Value::Null),
        (Needs::Public, "GET", "/readyz", Value::Null),
        (Needs::Read, "GET", "/metrics", Value::Null),
        (Needs::Read, "GET", "/v1/cluster", Value::Null),
        (Needs::Read, "GET", "/v1/openapi.json", Value::Null),
        (
            Needs::Read,
            "GET",
            "/v1/executions/matrix/chain",
            Value::Null,
        ),
        (
            Needs::Read,
            "GET",
            "/v1/executions/matrix/chain/raw",
            Value::Null,
        ),
        (
            Needs::Read,
            "GET",
            "/v1/executions/matrix/state",
            Value::Null,
        ),
        (
            Needs::Read,
            "GET",
            "/v1/executions/matrix/events/m0",
            Value::Null,
        ),
        (
            Needs::Read,
            "GET",
            "/v1/executions/matrix/quarantine",
            Value::Null,
        ),
        (
            Needs::Read,
            "GET",
            "/v1/executions/matrix/quarantine/1",
            Value::Null,
        ),
        (Needs::Read, "GET", "/v1/changes", Value::Null),
        (
            Needs::Write,
            "POST",
            "/v1/executions/{fresh}/events",
            event("w", None),
        ),
        (
            Needs::Write,
            "POST",
            "/v1/executions/{fresh}/populate",
            json!({ "events": [] }),
        ),
        (
            Needs::Admin,
            "POST",
            "/v1/executions/{fresh}/replicated",
            json!({ "events": [] }),
        ),
        (
            Needs::Admin,
            "POST",
            "/v1/executions/{fresh}/rebuild",
            json!({ "reason": "test", "events": [] }),
        ),
        (Needs::Admin, "GET", "/v1/snapshot", Value::Null),
        (
            Needs::Admin,
            "POST",
            "/v1/cluster/init",
            json!({ "nodes": {} }),
        ),
        (
            Needs::Admin,
            "POST",
            "/v1/cluster/learners",
            json!({ "node_id": 0, "addr": "" }),
        ),
        (
            Needs::Admin,
            "POST",
            "/v1/cluster/voters",
            json!({ "voters": [] }),
        ),
        (Needs::Peer, "POST", "/raft/append", json!({})),
        (Needs::Peer, "POST", "/raft/vote", json!({})),
        (Needs::Peer, "POST", "/raft/pre-vote", json!({})),
        (Needs::Peer, "POST", "/raft/snapshot", json!({})),
        (Needs::Peer, "POST", "/raft/transfer-leader", json!({})),
        // Admitted, then 400: not a layout.
        (Needs::Peer, "POST", "/raft/layout", json!({})),
        // Admitted, then 400: a request without the upgrade's headers.
        (Needs::Peer, "POST", "/raft/stream", json!({})),
    ];
    // The table above covers every route the node serves, each with the access it declares.
    let pattern = |path: &str| -> String {
        path.split('/')
            .map(|segment| {
                if segment.starts_with('{') {
                    "*"
                } else {
                    segment
                }
            })
            .collect::<Vec<_>>()
            .join("/")
    };
    let concrete = |path: &str| -> String {
        path.split('/')
            .map(|segment| match segment {
                "matrix" | "m0" | "1" => "*",
                s if s.starts_with('{') => "*",
                s => s,
            })
            .collect::<Vec<_>>()
            .join("/")
    };
    for (method, path, access) in chainstore_node::route_table() {
        let declared = match access {
            chainstore_node::Access::Public => Needs::Public,
            chainstore_node::Access::Client(Role::Read) => Needs::Read,
            chainstore_node::Access::Client(Role::Write) => Needs::Write,
            chainstore_node::Access::Client(Role::Admin) => Needs::Admin,
            chainstore_node::Access::Peer => Needs::Peer,
        };
        let tested = routes
            .iter()
            .find(|(_, m, p, _)| *m == method && concrete(p) == pattern(path));
        assert_eq!(
            tested.map(|(needs, ..)| *needs),
            Some(declared),
            "{method} {path} is not in the test's table with its access"
        );
    }

    let mut fresh = 0;
    for target in [follower, leader] {
        for credential in CREDENTIALS {
            let client = client_for(&c, credential);
            for (needs, method, path, body) in &routes {
                fresh += 1;
                let path = path.replace("{fresh}", &format!("fresh-{fresh}"));
                let want = expected(*needs, credential);
                let before = match want {
                    Some(_) => Some(fingerprint(&c, target, leader).await),
                    None => None,
                };
                let url = c.url(target, &path);
                let request = match *method {
                    "POST" => client.post(url).json(body),
                    _ => client.get(url),
                };
                let response = request.send().await.unwrap_or_else(|e| {
                    panic!("{credential:?} {method} {path} on node {target}: {e}")
                });
                let status = response.status().as_u16();
                let text = response.text().await.unwrap_or_default();
                let what =
                    format!("{credential:?} {method} {path} on node {target}: {status} {text}");
                match want {
                    None => {
                        assert!(
                            status != 401 && status != 403,
                            "admitted by the table, refused: {what}"
                        );
                        assert!(status < 500, "admitted, then failed: {what}");
                    }
                    Some(refused) => {
                        assert_eq!(status, refused, "{what}");
                        let answer: Value = serde_json::from_str(&text).expect("a JSON error");
                        let code = if refused == 401 {
                            "unauthorized"
                        } else {
                            "forbidden"
                        };
                        assert_eq!(answer["error"], code, "{what}");
                        assert!(answer["message"].as_str().is_some_and(|m| !m.is_empty()));
                        let after = fingerprint(&c, target, leader).await;
                        assert_eq!(before, Some(after), "a refused call changed state: {what}");
                    }
                }
            }
        }
    }
    // The would-be peer with a CA-signed certificate of a non-member is in the logs by name.
    let logs: String = c.running().into_iter().map(|id| c.log_of(id)).collect();
    assert!(
        logs.contains("refused a request from a would-be peer") && logs.contains("node 9"),
        "the refusals of node 9 are logged with its identity"
    );
}

/// A vote request in a far later term, as candidate `from`, with a log far ahead of everyone's.
fn vote_from(from: u64, term: u64) -> Value {
    let last = log_id(term, from, 1 << 40);
    let request = VoteRequest::<TypeConfig>::new(Vote::new(term, from), Some(last));
    serde_json::to_value(request).expect("serializable")
}

/// An AppendEntries (a heartbeat) from `from` as leader of `term`, in its binary encoding.
fn append_from(from: u64, term: u64) -> Vec<u8> {
    let request = AppendEntriesRequest::<TypeConfig> {
        vote: Vote::new_committed(term, from),
        prev_log_id: None,
        entries: Vec::new(),
        leader_commit: None,
    };
    request.encode().expect("encodes")
}

fn snapshot_from(from: u64, term: u64) -> Vec<u8> {
    let header = SnapshotChunk {
        vote: Vote::new_committed(term, from),
        meta: SnapshotMeta {
            last_log_id: Some(log_id(term, from, 1_000_000)),
            last_membership: Default::default(),
        },
        offset: 0,
        done: true,
    };
    encode_chunk(&header, b"").expect("framed")
}

async fn term_of(c: &Cluster, id: u64) -> u64 {
    c.get(id, "/v1/cluster").await.1["term"]
        .as_u64()
        .expect("a term")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_members_with_the_clusters_certificates_can_vote_append_or_install_snapshots() {
    let c = Cluster::start_with(3, tls_options()).await;
    let leader = c.leader().await;
    let target = c.follower().await;
    let term = term_of(&c, target).await;
    let far = term + 100;

    // A certificate from the cluster's CA for node 9, which is not a member.
    let stranger = http_client(Some(&c.ca.cert), Some(&c.ca.node(9)), None);
    for (path, body) in [
        (
            "/raft/vote",
            serde_json::to_vec(&vote_from(9, far)).unwrap(),
        ),
        ("/raft/append", append_from(9, far)),
        (
            "/raft/pre-vote",
            serde_json::to_vec(&vote_from(9, far)).unwrap(),
        ),
        ("/raft/snapshot", snapshot_from(9, far)),
        (
            "/raft/transfer-leader",
            serde_json::to_vec(&openraft::raft::TransferLeaderRequest::<TypeConfig>::new(
                Vote::new_committed(far, 9),
                target,
                None,
            ))
            .unwrap(),
        ),
        ("/raft/stream", Vec::new()),
        ("/raft/layout", b"{}".to_vec()),
    ] {
        let response = stranger
            .post(c.url(target, path))
            .body(body)
            .send()
            .await
            .expect("the TLS handshake succeeds: the certificate is the CA's");
        assert_eq!(response.status().as_u16(), 403, "{path}");
    }
    assert_eq!(
        term_of(&c, target).await,
        term,
        "no forged RPC moved the term"
    );
    let (_, status) = c.get(target, "/v1/cluster").await;
    assert_eq!(status["voters"], json!([1, 2, 3]));
    // Over mutual TLS as well, the leader's AppendEntries (heartbeats at least) reach the
    // follower over an append stream, opened with the leader's certificate (the first ones may
    // go as HTTP requests while it opens).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let series = "chainstore_raft_append_rpcs_received_total{via=\"stream\"}";
    while c.counter(&c.http, target, series).await == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no AppendEntries came to node {target} over a stream"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let log = c.log_of(target);
    assert!(
        log.contains("refused a request from a would-be peer") && log.contains("node 9"),
        "the node logs the refused peer by the identity its certificate names"
    );

    // A certificate for a member's id, from another CA: refused in the handshake, and logged.
    let other_ca = Ca::new("another CA");
    let impostor = http_client(Some(&c.ca.cert), Some(&other_ca.node(2)), None);
    let refused = impostor
        .post(c.url(target, "/raft/vote"))
        .body(serde_json::to_vec(&vote_from(2, far)).unwrap())
        .send()
        .await;
    assert!(
        refused.is_err(),
        "a certificate of another CA was accepted: {refused:?}"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    let log = c.log_of(target);
    assert!(
        log.contains("refused a client certificate") && log.contains("node 2"),
        "the refused certificate is logged with the identity it claims"
    );
    assert_eq!(term_of(&c, target).await, term);

    // The control: the same append, from a member's certificate, is heard (the term moves), so
    // what stopped the stranger was its identity, not the request. (A vote would not show it:
    // a follower with a live leader ignores votes.)
    let member = http_client(Some(&c.ca.cert), Some(&c.ca.node(leader)), None);
    let response = member
        .post(c.url(target, "/raft/append"))
        .body(append_from(leader, far))
        .send()
        .await
        .expect("a member's RPC");
    assert_eq!(response.status().as_u16(), 200);
    let answer = response.text().await.unwrap_or_default();
    // The term is read from the node's metrics, which follow the append a moment later.
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while term_of(&c, target).await < far {
        assert!(
            std::time::Instant::now() < deadline,
            "a member's append moves the term (it answered {answer})"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A TLS server in the test with a certificate of the cluster's CA for `node`: counts the
/// handshakes that complete and the requests that reach it.
async fn rogue_server(ca: &Ca, node: u64) -> (String, Arc<AtomicUsize>) {
    let pem = ca.node(node);
    let chain =
        chainstore_transport::tls::certificates_from_pem("cert", pem.cert.as_bytes()).unwrap();
    let key = chainstore_transport::tls::private_key_from_pem("key", pem.key.as_bytes()).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(chainstore_transport::tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let reached = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&reached);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            let counter = Arc::clone(&counter);
            tokio::spawn(async move {
                use tokio::io::AsyncReadExt;
                if let Ok(mut tls) = acceptor.accept(stream).await {
                    let mut buf = [0u8; 64];
                    if matches!(tls.read(&mut buf).await, Ok(n) if n > 0) {
                        counter.fetch_add(1, Ordering::SeqCst);
                    }
                }
            });
        }
    });
    (addr, reached)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_sends_nothing_to_a_learner_address_that_cannot_prove_the_learners_id() {
    let c = Cluster::start_with(3, tls_options()).await;
    let leader = c.leader().await;
    // A host with a genuine certificate of the cluster's CA, but for node 5: it cannot answer
    // for node 4.
    let (addr, reached) = rogue_server(&c.ca, 5).await;
    let admin = http_client(Some(&c.ca.cert), None, Some(ADMIN_TOKEN));
    let response = admin
        .post(c.url(leader, "/v1/cluster/learners"))
        .json(&json!({ "node_id": 4, "addr": addr }))
        .send()
        .await
        .expect("an answer");
    let status = response.status().as_u16();
    let text = response.text().await.unwrap_or_default();
    assert_eq!(
        status,
        503,
        "the learner never catches up: {text}\n{}",
        c.log_of(leader)
    );
    assert_eq!(
        reached.load(Ordering::SeqCst),
        0,
        "a request reached a host that cannot prove it is node 4"
    );
    assert!(
        text.contains("has not caught up"),
        "the answer says the learner is not in step: {text}"
    );
    assert!(
        c.log_of(leader).contains("WrongNode { expected: 4"),
        "the leader logs why it cannot reach the learner"
    );
}

/// Runs the node binary with `args` (and only the environment given), expecting it to refuse
/// to start with exit code 2 and a message containing `says`.
fn refuses(args: &[&str], env: &[(&str, &str)], says: &str) {
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_chainstore-node"));
    command
        .env_clear()
        .args(["--id", "1", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("data"))
        .args(args)
        .envs(env.iter().copied());
    let output = command.output().expect("run chainstore-node");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(
        stderr.contains(says),
        "{args:?} should say {says:?}: {stderr}"
    );
}

#[test]
fn a_node_refuses_to_start_insecure_unless_asked_by_name() {
    let secret = [("CHAINSTORE_CLUSTER_SECRET", "a-secret-nobody-published")];
    refuses(&[], &secret, "TLS is required");
    refuses(
        &["--insecure-no-tls"],
        &secret,
        "no client could authenticate",
    );
    refuses(
        &["--insecure-no-tls", "--insecure-no-client-auth"],
        &[],
        "peers authenticate by the cluster secret",
    );
    refuses(
        &["--insecure-no-tls", "--insecure-no-client-auth"],
        &[(
            "CHAINSTORE_CLUSTER_SECRET",
            "change-me-to-a-long-random-string",
        )],
        "published example",
    );
    refuses(
        &["--insecure-no-tls", "--insecure-no-client-auth"],
        &[("CHAINSTORE_CLUSTER_SECRET", "short")],
        "shorter than 16",
    );
    refuses(
        &[
            "--insecure-no-tls",
            "--insecure-no-client-auth",
            "--cluster-secret",
            "x",
        ],
        &[],
        "unexpected argument",
    );

    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("start-up CA");
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_string_lossy().into_owned()
    };
    let other = ca.node(2);
    let cert = write("cert.pem", &other.cert);
    let key = write("key.pem", &other.key);
    let ca_file = write("ca.pem", &ca.cert);
    let tls = [
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
        "--tls-client-ca",
        &ca_file,
    ];
    refuses(
        &tls,
        &secret,
        "the cluster secret is for plaintext setups only",
    );
    refuses(&tls[..4], &[], "TLS needs all three");
    refuses(
        &[&tls[..], &["--insecure-no-tls"]].concat(),
        &[],
        "cannot be combined",
    );
    let tokens = write("tokens", "admin:root\n");
    refuses(
        &["--insecure-no-tls", "--client-tokens-file", &tokens],
        &secret,
        "shorter than 16",
    );

    // A certificate for node 2 handed to node 1: it starts and stops at once, saying why.
    let data = dir.path().join("data-1");
    let output = Command::new(env!("CARGO_BIN_EXE_chainstore-node"))
        .env_clear()
        .args(["--id", "1", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&data)
        .args(tls)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("must name this node"), "{stderr}");
}
