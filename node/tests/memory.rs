//! A node's memory does not grow with its state: a node holding more chain data than its memory
//! cap restarts, serves a backup download and sends a snapshot to a new learner, which installs
//! it and restarts, each with its peak resident set (`VmHWM`) under the cap.
//!
//! The data size and the cap come from the environment: CI runs 320 MiB against a 256 MiB cap
//! (so a snapshot or backup held whole in memory fails it); `scripts/memory.sh` runs 1 GiB and
//! more by hand. The nodes run with a 32 MiB block cache and 16 MiB memtables, named in the
//! printed line: the cap bounds what the node itself holds on top of RocksDB's own budget.
//! `CHAINSTORE_MEMORY_TEST_LOGS=1` prints both nodes' logs at the end.

mod common;

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::{Cluster, Options};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `len` hex digits from a seeded xorshift: a payload LZ4 cannot shrink.
fn noise(len: usize, mut seed: u64) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        for shift in (0..64).step_by(4) {
            out.push(HEX[((seed >> shift) & 0xf) as usize]);
        }
    }
    out.truncate(len);
    String::from_utf8(out).expect("hex is ASCII")
}

const EVENTS_PER_EXECUTION: usize = 15;
const PAYLOAD_CHARS: usize = 1_000_000;

/// The populate body of execution `exec`: a linked log of large events.
fn big_log(exec: usize, block: &str) -> Value {
    let events: Vec<Value> = (0..EVENTS_PER_EXECUTION)
        .map(|i| {
            // A distinct start per event; the rest shared (LZ4 looks back 64 KiB, not 1 MB).
            let mut payload = format!("{exec}-{i}-");
            payload.push_str(&block[payload.len()..]);
            json!({
                "event_id": format!("e{i}"),
                "prev_event_id": if i == 0 { None } else { Some(format!("e{}", i - 1)) },
                "payload": payload,
            })
        })
        .collect();
    json!({ "events": events })
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1 << 20)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_holding_more_than_its_memory_cap_restarts_serves_and_installs_within_it() {
    let data_mib = env_u64("CHAINSTORE_MEMORY_TEST_MIB", 320);
    let cap = env_u64("CHAINSTORE_MEMORY_TEST_RSS_MIB", 256) << 20;
    let options = Options {
        // Snapshots often and no log kept behind them: a new member can only catch up from a
        // snapshot.
        snapshot_after_entries: 8,
        log_entries_kept: 0,
        purge_batch_entries: 1,
        extra_args: ["--block-cache-mib", "32", "--write-buffer-mib", "16"]
            .map(String::from)
            .to_vec(),
        ..Options::default()
    };
    let mut c = Cluster::start_with(1, options).await;

    // Fill the store: executions of 15 events of ~1 MB each, two populates at a time.
    let block = noise(PAYLOAD_CHARS, 0x9e37_79b9_7f4a_7c15);
    let per_execution = (EVENTS_PER_EXECUTION * PAYLOAD_CHARS) as u64;
    let executions = ((data_mib << 20).div_ceil(per_execution)) as usize;
    let started = Instant::now();
    let populate = |exec: usize| {
        let body = big_log(exec, &block);
        let c = &c;
        async move {
            let path = format!("/v1/executions/m{exec}/populate");
            let (status, answer) = c.post(1, &path, &body).await;
            assert_eq!(status, 200, "populate m{exec}: {answer}");
        }
    };
    for exec in (0..executions).step_by(2) {
        if exec + 1 < executions {
            tokio::join!(populate(exec), populate(exec + 1));
        } else {
            populate(exec).await;
        }
    }
    let stored = per_execution * executions as u64;
    let fill = started.elapsed();
    let (_, cluster) = c.get(1, "/v1/cluster").await;
    let applied = cluster["last_applied"].as_u64().expect("last_applied");

    // 1. Restart on the full store (SIGKILL: the write-ahead log and the Raft log replay).
    c.kill(1);
    c.restart(1).await;
    c.wait_for_leader(Duration::from_secs(60)).await;
    c.wait_applied(1, applied, Duration::from_secs(120)).await;
    let restart_peak = c.peak_rss(1);
    let resets = c.reset_peak_rss(1);

    // 2. A backup download, read and thrown away as it arrives.
    let mut response = c
        .http
        .get(c.url(1, "/v1/snapshot"))
        .send()
        .await
        .expect("GET /v1/snapshot");
    assert_eq!(response.status(), 200);
    let mut backup_bytes = 0u64;
    while let Some(piece) = response.chunk().await.expect("backup body") {
        backup_bytes += piece.len() as u64;
    }
    assert!(
        backup_bytes > stored,
        "the backup holds the data: {backup_bytes} bytes"
    );
    let backup_peak = c.peak_rss(1);
    c.reset_peak_rss(1);

    // 3. A new learner: the log is purged, so the leader sends a snapshot, which the learner
    // receives into a file and installs.
    c.add_proc(2).await;
    let addr = c.procs[&2].addr.clone();
    let (status, body) = c
        .post(
            1,
            "/v1/cluster/learners",
            &json!({ "node_id": 2, "addr": addr }),
        )
        .await;
    // Adding waits a while for the learner to catch up, then answers that it has not yet.
    assert!(
        status == 200 || (status == 503 && body["message"].to_string().contains("not caught up")),
        "{status} {body}"
    );
    c.wait_applied(2, applied, Duration::from_secs(600)).await;
    let received = std::fs::read_dir(c.procs[&2].dir.join("snapshots"))
        .expect("the learner's snapshot directory")
        .filter_map(Result::ok)
        .any(|f| f.file_name().to_string_lossy().starts_with("received-"));
    assert!(received, "the learner caught up from a snapshot");
    let send_peak = c.peak_rss(1);
    let install_peak = c.peak_rss(2);

    // 4. The learner restarts on what it installed and still answers from it.
    c.kill(2);
    c.restart(2).await;
    let last = executions - 1;
    let path = format!("/v1/executions/m{last}/chain/raw?consistency=local&limit=1");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (status, page) = c.get(2, &path).await;
        if status == 200 && page["events"].as_array().is_some_and(|e| e.len() == 1) {
            assert_eq!(page["events"][0]["event_id"], "e0");
            break;
        }
        assert!(Instant::now() < deadline, "learner after restart: {page}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let learner_restart_peak = c.peak_rss(2);

    println!(
        "memory: {:.0} MiB of chain data in {executions} executions (filled in {:.1} s; \
         block cache 32 MiB, memtables 16 MiB); peak RSS: restart {:.1} MiB, backup download \
         of {:.0} MiB {:.1} MiB{}, snapshot sent {:.1} MiB, installed on a new learner {:.1} MiB, \
         learner restart {:.1} MiB; cap {:.0} MiB",
        mib(stored),
        fill.as_secs_f64(),
        mib(restart_peak),
        mib(backup_bytes),
        mib(backup_peak),
        if resets { "" } else { " (peaks since start)" },
        mib(send_peak),
        mib(install_peak),
        mib(learner_restart_peak),
        mib(cap),
    );
    if std::env::var("CHAINSTORE_MEMORY_TEST_LOGS").is_ok() {
        println!("--- node 1\n{}\n--- node 2\n{}", c.log_of(1), c.log_of(2));
    }
    for (what, peak) in [
        ("restart", restart_peak),
        ("backup download", backup_peak),
        ("snapshot send", send_peak),
        ("snapshot install", install_peak),
        ("learner restart", learner_restart_peak),
    ] {
        assert!(
            peak < cap,
            "{what}: peak RSS {:.1} MiB, over the cap of {:.0} MiB",
            mib(peak),
            mib(cap)
        );
    }
}
