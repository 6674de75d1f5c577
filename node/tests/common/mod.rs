//! A real cluster for the integration tests: `chainstore-node` processes on loopback, each with
//! its own RocksDB directory. Processes can be SIGKILLed, paused and restarted on their data.
//! Every process is killed when the cluster is dropped, also when a test fails.
//!
//! By default a cluster is plaintext and open to clients (`--insecure-no-tls`,
//! `--insecure-no-client-auth`): most tests are about the API's behaviour, not about who may
//! call it. `Options::tls` makes it serve TLS with certificates from the cluster's own CA;
//! `Options::tokens` gives it a tokens file.
#![allow(dead_code)]

pub mod certs;
pub mod inproc;

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use certs::{Ca, Pem};

/// The cluster secret of plaintext test clusters.
pub const SECRET: &str = "plaintext-test-cluster-secret";
/// The admin token every cluster with tokens or TLS has; the cluster's own HTTP client uses it.
pub const ADMIN_TOKEN: &str = "admin-token-for-the-test-harness";

/// Options every node of a test cluster starts with.
#[derive(Clone, Debug)]
pub struct Options {
    pub snapshot_after_entries: u64,
    pub log_entries_kept: u64,
    pub purge_batch_entries: u64,
    /// `(role, token)` pairs of the tokens file, besides [`ADMIN_TOKEN`].
    pub tokens: Vec<(&'static str, String)>,
    /// Serve TLS, peers authenticating by certificate.
    pub tls: bool,
    /// How often nodes look for new TLS files.
    pub tls_reload_poll_ms: u64,
    /// Election timeouts (min, max) in milliseconds.
    pub election_ms: (u64, u64),
    /// More flags for every node.
    pub extra_args: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            snapshot_after_entries: 20_000,
            log_entries_kept: 5_000,
            purge_batch_entries: 1_024,
            tokens: Vec::new(),
            tls: false,
            tls_reload_poll_ms: 10_000,
            election_ms: (600, 1200),
            extra_args: Vec::new(),
        }
    }
}

impl Options {
    /// Whether the nodes get a tokens file (with [`ADMIN_TOKEN`] in it).
    fn has_tokens(&self) -> bool {
        self.tls || !self.tokens.is_empty()
    }
}

/// A reqwest client for test requests: trusting `ca` (PEM) for `https://`, presenting
/// `identity` if given, sending `token` as a bearer token if given. No redirects, no proxies.
pub fn http_client(
    ca: Option<&str>,
    identity: Option<&Pem>,
    token: Option<&str>,
) -> reqwest::Client {
    let options = chainstore_transport::TlsClientOptions {
        roots_pem: ca.map(|pem| pem.as_bytes().to_vec()),
        identity: identity.map(|pem| {
            chainstore_transport::KeyPair::from_pem(pem.cert.as_bytes(), pem.key.as_bytes())
                .expect("a key pair")
        }),
    };
    let tls = chainstore_transport::tls::client_config(
        &options,
        chainstore_transport::ServerCheck::Hostname,
    )
    .expect("a TLS configuration");
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(token) = token {
        let value = format!("Bearer {token}").parse().expect("header value");
        headers.insert(reqwest::header::AUTHORIZATION, value);
    }
    reqwest::Client::builder()
        .timeout(Duration::from_secs(15))
        .default_headers(headers)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .tls_backend_preconfigured(tls)
        .build()
        .expect("client")
}

pub struct Proc {
    pub id: u64,
    pub addr: String,
    pub dir: PathBuf,
    child: Option<Child>,
}

pub struct Cluster {
    pub procs: BTreeMap<u64, Proc>,
    /// A client with the admin credential (when the cluster has credentials at all).
    pub http: reqwest::Client,
    /// The CA of a TLS cluster.
    pub ca: Ca,
    options: Options,
    _root: tempfile::TempDir,
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("local addr").port()
}

impl Cluster {
    /// Starts `n` nodes and initializes them as one cluster; returns once a leader serves.
    pub async fn start(n: u64) -> Self {
        Self::start_with(n, Options::default()).await
    }

    pub async fn start_with(n: u64, options: Options) -> Self {
        let cluster = Self::spawn(n, options).await;
        let nodes: BTreeMap<String, String> = cluster
            .procs
            .values()
            .map(|p| (p.id.to_string(), p.addr.clone()))
            .collect();
        let response = cluster
            .post(1, "/v1/cluster/init", &json!({ "nodes": nodes }))
            .await;
        assert_eq!(response.0, 200, "init: {response:?}");
        cluster.wait_for_leader(Duration::from_secs(20)).await;
        cluster
    }

    /// Starts `n` nodes that are not initialized.
    pub async fn spawn(n: u64, options: Options) -> Self {
        let root = tempfile::tempdir().expect("temp dir");
        let ca = Ca::new("chainstore test CA");
        let http = http_client(
            options.tls.then_some(ca.cert.as_str()),
            None,
            options.has_tokens().then_some(ADMIN_TOKEN),
        );
        if options.has_tokens() {
            let mut text = format!("admin:{ADMIN_TOKEN}\n");
            for (role, token) in &options.tokens {
                text.push_str(&format!("{role}:{token}\n"));
            }
            std::fs::write(root.path().join("tokens"), text).expect("tokens file");
        }
        std::fs::write(root.path().join("secret"), SECRET).expect("secret file");
        let mut cluster = Cluster {
            procs: BTreeMap::new(),
            http,
            ca,
            options,
            _root: root,
        };
        for id in 1..=n {
            cluster.add_proc(id).await;
        }
        cluster
    }

    /// Starts one node process per `(id, addr, dir)` on data directories made elsewhere (the
    /// upgrade fixture), at the addresses their membership names. Nothing is initialized.
    pub async fn adopt(nodes: Vec<(u64, String, PathBuf)>, options: Options) -> Self {
        let mut cluster = Self::spawn(0, options).await;
        for (id, addr, dir) in nodes {
            cluster.start_proc(id, addr, dir).await;
        }
        cluster
    }

    /// The directory of node `id`'s TLS files: `cert.pem`, `key.pem`, `ca.pem`.
    pub fn tls_dir(&self, id: u64) -> PathBuf {
        self._root.path().join(format!("tls-{id}"))
    }

    /// Writes node `id`'s TLS files (a rotation writes them again while the node runs).
    pub fn write_tls(&self, id: u64, pem: &Pem, ca: &str) {
        let dir = self.tls_dir(id);
        std::fs::create_dir_all(&dir).expect("tls dir");
        // Each file replaced whole, as a rotation tool would.
        for (name, contents) in [
            ("cert.pem", &pem.cert),
            ("key.pem", &pem.key),
            ("ca.pem", &ca.to_string()),
        ] {
            let tmp = dir.join(format!(".{name}.tmp"));
            std::fs::write(&tmp, contents).expect("write");
            std::fs::rename(&tmp, dir.join(name)).expect("rename");
        }
    }

    /// The URL scheme clients use.
    pub fn scheme(&self) -> &'static str {
        if self.options.tls {
            "https"
        } else {
            "http"
        }
    }

    /// Node `id`'s log so far.
    pub fn log_of(&self, id: u64) -> String {
        std::fs::read_to_string(self.procs[&id].dir.with_extension("log")).unwrap_or_default()
    }

    /// Starts one more (uninitialized) node process.
    pub async fn add_proc(&mut self, id: u64) {
        let dir = self._root.path().join(format!("node-{id}"));
        let addr = format!("127.0.0.1:{}", free_port());
        if self.options.tls && !self.tls_dir(id).exists() {
            let pem = self.ca.node(id);
            let ca = self.ca.cert.clone();
            self.write_tls(id, &pem, &ca);
        }
        self.start_proc(id, addr, dir).await;
    }

    /// Starts node `id` at `addr` on the data directory `dir`.
    async fn start_proc(&mut self, id: u64, addr: String, dir: PathBuf) {
        self.procs.insert(
            id,
            Proc {
                id,
                addr,
                dir,
                child: None,
            },
        );
        self.launch(id).await;
    }

    async fn launch(&mut self, id: u64) {
        let options = self.options.clone();
        let root = self._root.path().to_path_buf();
        let tls_dir = self.tls_dir(id);
        let proc = self.procs.get_mut(&id).expect("known node");
        let log = std::fs::File::create(proc.dir.with_extension("log")).expect("log file");
        let mut command = Command::new(env!("CARGO_BIN_EXE_chainstore-node"));
        command
            .arg("--id")
            .arg(id.to_string())
            .arg("--listen")
            .arg(&proc.addr)
            .arg("--data-dir")
            .arg(&proc.dir)
            .arg("--heartbeat-ms")
            .arg("100")
            .arg("--election-min-ms")
            .arg(options.election_ms.0.to_string())
            .arg("--election-max-ms")
            .arg(options.election_ms.1.to_string())
            .arg("--snapshot-after-entries")
            .arg(options.snapshot_after_entries.to_string())
            .arg("--log-entries-kept")
            .arg(options.log_entries_kept.to_string())
            .arg("--purge-batch-entries")
            .arg(options.purge_batch_entries.to_string())
            .args(&options.extra_args)
            .env("RUST_LOG", "info,openraft=warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log);
        if options.tls {
            command
                .arg("--tls-cert")
                .arg(tls_dir.join("cert.pem"))
                .arg("--tls-key")
                .arg(tls_dir.join("key.pem"))
                .arg("--tls-client-ca")
                .arg(tls_dir.join("ca.pem"))
                .arg("--tls-reload-poll-ms")
                .arg(options.tls_reload_poll_ms.to_string());
        } else {
            command
                .arg("--insecure-no-tls")
                .arg("--cluster-secret-file")
                .arg(root.join("secret"));
        }
        if options.has_tokens() {
            command.arg("--client-tokens-file").arg(root.join("tokens"));
        } else {
            command.arg("--insecure-no-client-auth");
        }
        proc.child = Some(command.spawn().expect("spawn chainstore-node"));
        let scheme = if options.tls { "https" } else { "http" };
        let url = format!("{scheme}://{}/healthz", proc.addr);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(r) = self.http.get(&url).send().await {
                if r.status().is_success() {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "node {id} did not come up; see {}",
            proc.dir.with_extension("log").display()
        );
    }

    /// SIGKILLs a node: no shutdown, no flush.
    pub fn kill(&mut self, id: u64) {
        if let Some(mut child) = self.procs.get_mut(&id).and_then(|p| p.child.take()) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Waits up to `within` for node `id`'s process to exit on its own; its exit status, or
    /// `None` if it is still running (then it is killed).
    pub async fn wait_exit(
        &mut self,
        id: u64,
        within: Duration,
    ) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + within;
        let proc = self.procs.get_mut(&id)?;
        loop {
            let child = proc.child.as_mut()?;
            if let Ok(Some(status)) = child.try_wait() {
                proc.child = None;
                return Some(status);
            }
            if Instant::now() > deadline {
                self.kill(id);
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Restarts a killed node on its data directory.
    pub async fn restart(&mut self, id: u64) {
        self.kill(id);
        self.launch(id).await;
    }

    /// Pauses (SIGSTOP) or resumes (SIGCONT) a node's process.
    pub fn signal(&self, id: u64, signal: &str) {
        let pid = self.procs[&id].child.as_ref().expect("running").id();
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .expect("kill");
        assert!(status.success());
    }

    /// Node `id`'s process id.
    pub fn pid(&self, id: u64) -> u32 {
        self.procs[&id].child.as_ref().expect("running").id()
    }

    /// Node `id`'s peak resident set since it started or since [`Cluster::reset_peak_rss`]
    /// (`VmHWM`), in bytes.
    pub fn peak_rss(&self, id: u64) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid(id)))
            .expect("/proc/<pid>/status");
        let kib: u64 = status
            .lines()
            .find_map(|line| line.strip_prefix("VmHWM:"))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM in /proc/<pid>/status");
        kib << 10
    }

    /// Starts node `id`'s peak resident set afresh from its current one; false when the kernel
    /// does not allow it (then the peak counts from the process's start).
    pub fn reset_peak_rss(&self, id: u64) -> bool {
        std::fs::write(format!("/proc/{}/clear_refs", self.pid(id)), "5").is_ok()
    }

    pub fn url(&self, id: u64, path: &str) -> String {
        format!("{}://{}{}", self.scheme(), self.procs[&id].addr, path)
    }

    pub async fn get(&self, id: u64, path: &str) -> (u16, Value) {
        let response = self.http.get(self.url(id, path)).send().await.expect("GET");
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// The value of the counter `series` (name and labels, as exposed) in node `id`'s metrics,
    /// read with `client`.
    pub async fn counter(&self, client: &reqwest::Client, id: u64, series: &str) -> u64 {
        let text = client
            .get(self.url(id, "/metrics"))
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .expect("metrics text");
        let prefix = format!("{series} ");
        text.lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .and_then(|value| value.trim().parse().ok())
            .unwrap_or_else(|| panic!("node {id} has no {series:?}:\n{text}"))
    }

    pub async fn post(&self, id: u64, path: &str, body: &Value) -> (u16, Value) {
        let response = self
            .http
            .post(self.url(id, path))
            .json(body)
            .send()
            .await
            .expect("POST");
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// Raw POST: returns status, headers and body text.
    pub async fn post_raw(
        &self,
        id: u64,
        path: &str,
        body: Vec<u8>,
        headers: &[(&str, &str)],
    ) -> (u16, reqwest::header::HeaderMap, String) {
        let mut request = self.http.post(self.url(id, path)).body(body);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send().await.expect("POST");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        (status, headers, response.text().await.unwrap_or_default())
    }

    pub fn running(&self) -> Vec<u64> {
        self.procs
            .values()
            .filter(|p| p.child.is_some())
            .map(|p| p.id)
            .collect()
    }

    /// The leader every running node agrees on, once there is one.
    pub async fn wait_for_leader(&self, within: Duration) -> u64 {
        let deadline = Instant::now() + within;
        loop {
            let mut leaders = Vec::new();
            for id in self.running() {
                if let Ok(r) = self
                    .http
                    .get(self.url(id, "/v1/cluster"))
                    .timeout(Duration::from_secs(1))
                    .send()
                    .await
                {
                    if let Ok(v) = r.json::<Value>().await {
                        leaders.push(v["leader_id"].as_u64());
                    }
                }
            }
            if let Some(Some(leader)) = leaders.first().copied() {
                let agreed = leaders.iter().all(|l| *l == Some(leader));
                if agreed && self.running().contains(&leader) {
                    // The leader serves writes once it applied an entry of its term.
                    let (status, _) = self.get(leader, "/readyz").await;
                    if status == 200 {
                        return leader;
                    }
                }
            }
            assert!(
                Instant::now() < deadline,
                "no agreed leader within {within:?}: {leaders:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub async fn leader(&self) -> u64 {
        self.wait_for_leader(Duration::from_secs(20)).await
    }

    pub async fn follower(&self) -> u64 {
        let leader = self.leader().await;
        self.running()
            .into_iter()
            .find(|id| *id != leader)
            .expect("a follower")
    }

    /// Waits until node `id` applied at least `index`.
    pub async fn wait_applied(&self, id: u64, index: u64, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let (_, status) = self.get(id, "/v1/cluster").await;
            if status["last_applied"].as_u64().unwrap_or(0) >= index {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "node {id} did not apply {index}: {status}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for proc in self.procs.values_mut() {
            if let Some(mut child) = proc.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// The body of an append of `id` after `prev`.
pub fn event(id: &str, prev: Option<&str>) -> Value {
    json!({ "event_id": id, "prev_event_id": prev, "payload": { "step": id } })
}

/// The wire form of a linked log.
pub fn log(ids: &[&str]) -> Value {
    let events: Vec<Value> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| json!({ "event_id": id, "prev_event_id": if i == 0 { None } else { Some(ids[i - 1]) }, "payload": { "step": id } }))
        .collect();
    json!({ "events": events })
}
