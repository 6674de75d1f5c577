//! A real cluster for the integration tests: `chainstore-node` processes on loopback, each with
//! its own RocksDB directory. Processes can be SIGKILLed, paused and restarted on their data.
//! Every process is killed when the cluster is dropped, also when a test fails.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

pub const SECRET: &str = "test-cluster-secret";

/// Options every node of a test cluster starts with.
#[derive(Clone, Debug)]
pub struct Options {
    pub snapshot_after_entries: u64,
    pub log_entries_kept: u64,
    pub purge_batch_entries: u64,
    pub client_tokens: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            snapshot_after_entries: 20_000,
            log_entries_kept: 5_000,
            purge_batch_entries: 1_024,
            client_tokens: Vec::new(),
        }
    }
}

pub struct Proc {
    pub id: u64,
    pub addr: String,
    pub dir: PathBuf,
    child: Option<Child>,
}

pub struct Cluster {
    pub procs: BTreeMap<u64, Proc>,
    pub http: reqwest::Client,
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
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(token) = options.client_tokens.first() {
            let value = format!("Bearer {token}").parse().expect("header value");
            headers.insert(reqwest::header::AUTHORIZATION, value);
        }
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(15))
            .default_headers(headers)
            .build()
            .expect("client");
        let mut cluster = Cluster {
            procs: BTreeMap::new(),
            http,
            options,
            _root: root,
        };
        for id in 1..=n {
            cluster.add_proc(id).await;
        }
        cluster
    }

    /// Starts one more (uninitialized) node process.
    pub async fn add_proc(&mut self, id: u64) {
        let dir = self._root.path().join(format!("node-{id}"));
        let addr = format!("127.0.0.1:{}", free_port());
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
            .arg("--cluster-secret")
            .arg(SECRET)
            .arg("--heartbeat-ms")
            .arg("100")
            .arg("--election-min-ms")
            .arg("600")
            .arg("--election-max-ms")
            .arg("1200")
            .arg("--snapshot-after-entries")
            .arg(options.snapshot_after_entries.to_string())
            .arg("--log-entries-kept")
            .arg(options.log_entries_kept.to_string())
            .arg("--purge-batch-entries")
            .arg(options.purge_batch_entries.to_string())
            .env("RUST_LOG", "info,openraft=warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log);
        if !options.client_tokens.is_empty() {
            command
                .arg("--client-tokens")
                .arg(options.client_tokens.join(","));
        }
        proc.child = Some(command.spawn().expect("spawn chainstore-node"));
        let url = format!("http://{}/healthz", proc.addr);
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

    pub fn url(&self, id: u64, path: &str) -> String {
        format!("http://{}{}", self.procs[&id].addr, path)
    }

    pub async fn get(&self, id: u64, path: &str) -> (u16, Value) {
        let response = self.http.get(self.url(id, path)).send().await.expect("GET");
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
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
