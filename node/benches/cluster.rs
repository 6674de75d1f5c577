//! Cluster benchmark: appends per second and latency percentiles against a local three-node
//! cluster (release `chainstore-node` processes on loopback, RocksDB with fsync on), at 1, 16 and
//! 64 concurrent writers, each appending with the head check to its own executions, ~200-byte
//! JSON payloads. The writers and the three nodes share the machine's cores, as in SPEC §9.
//!
//! Run: `cargo bench -p chainstore-node --bench cluster` (`CLUSTER_BENCH_SECONDS` sets the
//! measured seconds per concurrency level, default 10).

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const SECRET: &str = "bench-cluster-secret";
const WRITERS: [usize; 3] = [1, 16, 64];

struct Nodes {
    children: Vec<Child>,
    addrs: Vec<String>,
    _dir: tempfile::TempDir,
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

async fn start_cluster(http: &reqwest::Client) -> Nodes {
    let dir = tempfile::tempdir().expect("temp dir");
    let addrs: Vec<String> = (0..3)
        .map(|_| format!("127.0.0.1:{}", free_port()))
        .collect();
    let mut children = Vec::new();
    for (i, addr) in addrs.iter().enumerate() {
        let child = Command::new(env!("CARGO_BIN_EXE_chainstore-node"))
            .args([
                "--id",
                &(i + 1).to_string(),
                "--listen",
                addr,
                "--cluster-secret",
                SECRET,
            ])
            .arg("--data-dir")
            .arg(dir.path().join(format!("node-{}", i + 1)))
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn chainstore-node");
        children.push(child);
    }
    let nodes = Nodes {
        children,
        addrs,
        _dir: dir,
    };
    for addr in &nodes.addrs {
        while http
            .get(format!("http://{addr}/healthz"))
            .send()
            .await
            .is_err()
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let members: serde_json::Map<String, Value> = nodes
        .addrs
        .iter()
        .enumerate()
        .map(|(i, a)| ((i + 1).to_string(), json!(a)))
        .collect();
    let init = http
        .post(format!("http://{}/v1/cluster/init", nodes.addrs[0]))
        .json(&json!({ "nodes": members }));
    assert!(init.send().await.expect("init").status().is_success());
    nodes
}

async fn leader_addr(http: &reqwest::Client, nodes: &Nodes) -> String {
    loop {
        let view: Value = http
            .get(format!("http://{}/v1/cluster", nodes.addrs[0]))
            .send()
            .await
            .expect("cluster")
            .json()
            .await
            .expect("json");
        if let Some(leader) = view["leader_id"].as_u64() {
            let addr = view["nodes"][leader.to_string()]
                .as_str()
                .unwrap_or_default()
                .to_string();
            if http
                .get(format!("http://{addr}/readyz"))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
            {
                return addr;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn payload(n: u64) -> Value {
    json!({
        "type": "step.completed",
        "step": format!("step-{n}"),
        "attempt": 1,
        "worker": "worker-7f3a",
        "result": { "status": "ok", "rows": n * 3, "note": "x".repeat(80) }
    })
}

/// One writer: appends e1, e2, ... to its own execution until `stop`; returns latencies.
async fn writer(http: reqwest::Client, url: String, stop: Instant) -> Vec<Duration> {
    let mut latencies = Vec::new();
    let mut n = 1u64;
    while Instant::now() < stop {
        let body = json!({
            "event_id": format!("e{n}"),
            "prev_event_id": (n > 1).then(|| format!("e{}", n - 1)),
            "payload": payload(n),
        });
        let started = Instant::now();
        let response = http.post(&url).json(&body).send().await.expect("append");
        assert!(
            response.status().is_success(),
            "append failed: {}",
            response.status()
        );
        let _ = response.bytes().await;
        latencies.push(started.elapsed());
        n += 1;
    }
    latencies
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

#[tokio::main]
async fn main() {
    let seconds: u64 = std::env::var("CLUSTER_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(128)
        .build()
        .expect("client");
    let nodes = start_cluster(&http).await;
    let leader = leader_addr(&http, &nodes).await;
    println!();
    println!("three-node cluster on loopback, fsync on, {seconds} s per level, writers on their own executions");
    println!(
        "{:>8} {:>12} {:>10} {:>10} {:>10}",
        "writers", "appends/s", "p50 ms", "p99 ms", "appends"
    );
    for (round, writers) in WRITERS.iter().enumerate() {
        // Warm connections and the leader for a second, then measure.
        let warm = Instant::now() + Duration::from_secs(1);
        let tasks: Vec<_> = (0..*writers)
            .map(|w| {
                tokio::spawn(writer(
                    http.clone(),
                    format!("http://{leader}/v1/executions/warm-{round}-{w}/events"),
                    warm,
                ))
            })
            .collect();
        for t in tasks {
            let _ = t.await;
        }
        let started = Instant::now();
        let stop = started + Duration::from_secs(seconds);
        let tasks: Vec<_> = (0..*writers)
            .map(|w| {
                tokio::spawn(writer(
                    http.clone(),
                    format!("http://{leader}/v1/executions/bench-{round}-{w}/events"),
                    stop,
                ))
            })
            .collect();
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.expect("writer"));
        }
        let elapsed = started.elapsed().as_secs_f64();
        all.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        println!(
            "{:>8} {:>12.0} {:>10.2} {:>10.2} {:>10}",
            writers,
            all.len() as f64 / elapsed,
            ms(percentile(&all, 0.50)),
            ms(percentile(&all, 0.99)),
            all.len()
        );
    }
    drop(nodes);
}
