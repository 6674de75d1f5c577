//! Chain store benchmark on RocksDB: append throughput and guarded chain-read latency with 1k
//! and with 1M events stored, measured side by side in one run (rounds alternate between the two
//! stores, and the report gives medians over rounds and the large/small ratio, so machine noise
//! hits both sides alike).
//!
//! Run: `cargo bench -p raft-store --bench chain` (set `CHAIN_BENCH_LARGE=100000` for a quicker
//! run).

use std::time::{Duration, Instant};

use chainstore_model::{AppendRequest, EventId, ExecutionId, Guarded, LogEvent};
use raft_store::{ChainStore, Engine, RocksEngine, RocksOptions, StoreConfig};
use serde_json::json;

const CHAIN_LEN: u64 = 100;
const ROUNDS: usize = 5;
const APPENDS_PER_ROUND: u64 = 2_000;
const SYNCED_APPENDS_PER_ROUND: u64 = 300;
const READS_PER_ROUND: usize = 1_000;

struct Side {
    name: &'static str,
    store: ChainStore<RocksEngine>,
    synced: ChainStore<RocksEngine>,
    executions: u64,
    /// Next sequence to append per execution of `store` (all start at CHAIN_LEN + 1).
    next: Vec<u64>,
    /// The same for `synced`.
    next_synced: Vec<u64>,
    cursor: u64,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

fn exec_id(i: u64) -> ExecutionId {
    ExecutionId::new(format!("exec-{i:08}")).expect("valid id")
}

fn event_id(seq: u64) -> EventId {
    EventId::new(format!("evt-{seq:010}")).expect("valid id")
}

fn payload(seq: u64) -> serde_json::Value {
    // About 200 bytes of JSON, like a workflow step event.
    json!({
        "type": "step.completed",
        "step": format!("step-{seq}"),
        "attempt": 1,
        "worker": "worker-7f3a",
        "result": { "status": "ok", "rows": seq * 3, "note": "x".repeat(80) }
    })
}

fn log(len: u64) -> Vec<LogEvent> {
    (1..=len)
        .map(|seq| LogEvent {
            event_id: event_id(seq),
            prev_event_id: (seq > 1).then(|| event_id(seq - 1)),
            parent_execution_id: None,
            payload: payload(seq),
        })
        .collect()
}

fn open(dir: &std::path::Path, sync_writes: bool) -> ChainStore<RocksEngine> {
    let engine = RocksEngine::open(&RocksOptions::new(dir)).expect("open rocksdb");
    ChainStore::open(
        engine,
        StoreConfig {
            sync_writes,
            ..StoreConfig::default()
        },
    )
    .expect("open")
}

impl Side {
    fn build(name: &'static str, total_events: u64) -> Self {
        let executions = (total_events / CHAIN_LEN).max(2);
        let dir = tempfile::tempdir().expect("temp dir");
        let synced_dir = tempfile::tempdir().expect("temp dir");
        let store = open(dir.path(), false);
        let template = log(CHAIN_LEN);
        let started = Instant::now();
        for i in 0..executions {
            store
                .populate_from_log(&exec_id(i), &template, i + 1)
                .expect("populate");
        }
        store.engine().sync().expect("sync");
        eprintln!(
            "{name}: stored {} events in {:.1?}",
            executions * CHAIN_LEN,
            started.elapsed()
        );
        // The synced store shares the shape at small scale only: fsync cost does not depend on
        // the stored volume, and it is measured on both sides alike.
        let synced = open(synced_dir.path(), true);
        for i in 0..executions.min(100) {
            synced
                .populate_from_log(&exec_id(i), &template, i + 1)
                .expect("populate");
        }
        Self {
            name,
            store,
            synced,
            executions,
            next: vec![CHAIN_LEN + 1; executions as usize],
            next_synced: vec![CHAIN_LEN + 1; executions.min(100) as usize],
            cursor: 0,
            _dirs: (dir, synced_dir),
        }
    }

    /// Appends `count` events spread over the executions; returns appends per second.
    fn append_rate(&mut self, count: u64, synced: bool) -> f64 {
        let started = Instant::now();
        // Appends go to odd executions, reads to even ones, so read chains stay CHAIN_LEN long.
        let pool = if synced {
            self.executions.min(100)
        } else {
            self.executions
        };
        for _ in 0..count {
            self.cursor = (self.cursor + 7919) % pool;
            self.cursor |= 1;
            if self.cursor >= pool {
                self.cursor = 1;
            }
            let i = self.cursor as usize;
            let next = if synced {
                &mut self.next_synced
            } else {
                &mut self.next
            };
            let seq = next[i];
            let request = AppendRequest {
                event_id: event_id(seq),
                prev_event_id: Some(event_id(seq - 1)),
                parent_execution_id: None,
                payload: payload(seq),
                genesis: false,
            };
            next[i] += 1;
            let store = if synced { &self.synced } else { &self.store };
            store
                .append(&exec_id(self.cursor), &request, seq)
                .expect("append");
        }
        count as f64 / started.elapsed().as_secs_f64()
    }

    /// Guarded reads of random executions' chains; returns (p50, p99).
    fn read_latency(&self, reads: usize, seed: &mut u64) -> (Duration, Duration) {
        let mut samples = Vec::with_capacity(reads);
        for _ in 0..reads {
            *seed ^= *seed << 13;
            *seed ^= *seed >> 7;
            *seed ^= *seed << 17;
            let x = exec_id((*seed % self.executions) & !1);
            let started = Instant::now();
            let answer = self.store.chain_if_authoritative(&x).expect("read");
            samples.push(started.elapsed());
            assert!(
                matches!(answer, Guarded::Authoritative(ref events) if events.len() == CHAIN_LEN as usize)
            );
        }
        samples.sort();
        (samples[reads / 2], samples[reads * 99 / 100])
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; there are no options to parse.
    let large: u64 = std::env::var("CHAIN_BENCH_LARGE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let mut small = Side::build("1k", 1_000);
    let mut big = Side::build("large", large);
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;

    let mut rows: Vec<(&str, Vec<f64>, Vec<f64>)> = vec![
        ("append, no fsync (appends/s)", vec![], vec![]),
        ("append, fsync each (appends/s)", vec![], vec![]),
        ("guarded chain read of 100 events, p50 (us)", vec![], vec![]),
        ("guarded chain read of 100 events, p99 (us)", vec![], vec![]),
    ];
    for _ in 0..ROUNDS {
        for side in [&mut small, &mut big] {
            let column = if side.name == "1k" { 1 } else { 2 };
            let rate = side.append_rate(APPENDS_PER_ROUND, false);
            let synced = side.append_rate(SYNCED_APPENDS_PER_ROUND, true);
            let (p50, p99) = side.read_latency(READS_PER_ROUND, &mut seed);
            let values = [
                rate,
                synced,
                p50.as_secs_f64() * 1e6,
                p99.as_secs_f64() * 1e6,
            ];
            for (row, value) in rows.iter_mut().zip(values) {
                if column == 1 {
                    row.1.push(value)
                } else {
                    row.2.push(value)
                }
            }
        }
    }
    println!();
    println!("chain store on RocksDB, medians of {ROUNDS} interleaved rounds");
    println!(
        "{:<46} {:>12} {:>12} {:>8}",
        "",
        "1k events",
        format!("{} events", big.executions * CHAIN_LEN),
        "ratio"
    );
    for (name, small_values, big_values) in rows {
        let (s, b) = (median(small_values), median(big_values));
        println!("{name:<46} {s:>12.1} {b:>12.1} {:>8.2}", b / s);
    }
}
