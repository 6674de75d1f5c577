//! `chainstore-bench`: chainstore and etcd side by side, in one run, on the same machine.
//!
//! It starts three `chainstore-node` processes and a three-member etcd on loopback, both with
//! their default durability (every acknowledged write fsynced on a majority), and runs the
//! same workloads against each, alternating between the two so that both see the same machine:
//! - **append**: W writers, each on its own execution, each appending a ~200-byte JSON event
//!   after the head it wrote last (chainstore: the head-checked append; etcd: one transaction
//!   that compares the execution's head key and puts the event and the new head);
//! - **read**: W readers, each reading a ten-event execution whole (chainstore: the guarded
//!   read, linearizable; etcd: a linearizable range read of the execution's keys).
//!
//! Afterwards every acknowledged append is read back at its sequence from both systems; the
//! table is printed only when that check passes. CPU seconds are those of the three server
//! processes of each system during each phase.
//!
//! With `--shards S` (S > 1) a second three-node chainstore, made with S shards, runs the same
//! appends in the same run, between the other two; a table then sets its appends per second and
//! CPU per append beside the single-shard cluster's, and says how many shards each node leads.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chainstore_client::{Client, ReadOptions, RetryPolicy};
use chainstore_model::{AppendRequest, EventId, ExecutionId, Guarded};
use chainstore_robustness::cluster::{http_get, leader_of, wait_ready, Cluster};
use clap::Parser;
use etcd_client::{Compare, CompareOp, GetOptions, Txn, TxnOp};
use serde_json::json;

#[derive(Parser, Debug)]
#[command(about = "chainstore and etcd side by side: head-checked appends and linearizable reads")]
struct Args {
    /// The chainstore-node binary (a release build).
    #[arg(long)]
    node_bin: PathBuf,
    /// The etcd binary.
    #[arg(long, default_value = "etcd")]
    etcd_bin: PathBuf,
    /// A fresh directory for both systems' data and logs.
    #[arg(long)]
    dir: PathBuf,
    /// Writer (and reader) counts, one phase each.
    #[arg(long, value_delimiter = ',', default_value = "1,16,64")]
    concurrency: Vec<usize>,
    /// Seconds per phase.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// The first chainstore port (three in a row).
    #[arg(long, default_value_t = 7401)]
    chainstore_port: u16,
    /// The first etcd port (three client ports in a row, then three peer ports).
    #[arg(long, default_value_t = 7411)]
    etcd_port: u16,
    /// Also measure a chainstore of this many shards beside the single-shard one (1: not).
    #[arg(long, default_value_t = 1)]
    shards: u32,
    /// The first port of the sharded chainstore (three in a row).
    #[arg(long, default_value_t = 7421)]
    sharded_port: u16,
}

/// What one phase of one system measured.
#[derive(Default)]
struct Phase {
    ops: u64,
    errors: u64,
    first_error: Option<String>,
    latencies_us: Vec<u32>,
    seconds: f64,
    cpu_seconds: f64,
}

impl Phase {
    fn rate(&self) -> f64 {
        self.ops as f64 / self.seconds
    }

    fn percentile_ms(&self, p: f64) -> f64 {
        if self.latencies_us.is_empty() {
            return f64::NAN;
        }
        let mut sorted = self.latencies_us.clone();
        sorted.sort_unstable();
        let at = ((sorted.len() - 1) as f64 * p).round() as usize;
        sorted[at] as f64 / 1000.0
    }

    fn cpu_us_per_op(&self) -> f64 {
        self.cpu_seconds * 1e6 / self.ops.max(1) as f64
    }

    fn merge(&mut self, other: Phase) {
        self.ops += other.ops;
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
        self.latencies_us.extend(other.latencies_us);
    }
}

/// One writer's acknowledged appends: (sequence, event id), in order.
type Acked = Vec<(u64, String)>;

fn main() {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    std::process::exit(runtime.block_on(run(args)));
}

async fn run(args: Args) -> i32 {
    if let Err(e) = std::fs::create_dir_all(&args.dir) {
        eprintln!("creating {}: {e}", args.dir.display());
        return 2;
    }
    let dir = args.dir.canonicalize().unwrap_or(args.dir.clone());

    let chainstore_dir = dir.join("chainstore");
    let mut cluster = match Cluster::new(
        args.node_bin.clone(),
        &chainstore_dir,
        args.chainstore_port,
        &[],
        Vec::new(),
    ) {
        Ok(cluster) => cluster,
        Err(e) => {
            eprintln!("laying out the chainstore cluster: {e}");
            return 2;
        }
    };
    for id in 1..=3 {
        if let Err(e) = cluster.start(id) {
            eprintln!("starting chainstore n{id}: {e}");
            return 2;
        }
    }
    let sharded_dir = dir.join("chainstore-sharded");
    let mut sharded_cluster = None;
    if args.shards > 1 {
        let extra = vec!["--bootstrap-shards".to_string(), args.shards.to_string()];
        let started = Cluster::new(
            args.node_bin.clone(),
            &sharded_dir,
            args.sharded_port,
            &[],
            extra,
        )
        .and_then(|mut c| {
            (1..=3).try_for_each(|id| c.start(id))?;
            Ok(c)
        });
        match started {
            Ok(c) => sharded_cluster = Some(c),
            Err(e) => {
                eprintln!("starting the sharded chainstore: {e}");
                return 2;
            }
        }
    }
    let mut etcd = match Etcd::start(&args.etcd_bin, &dir.join("etcd"), args.etcd_port) {
        Ok(etcd) => etcd,
        Err(e) => {
            eprintln!("starting etcd ({}): {e}", args.etcd_bin.display());
            return 2;
        }
    };
    let urls = cluster.urls();
    if !wait_ready(&urls, Duration::from_secs(30)).await {
        eprintln!(
            "chainstore did not become ready; logs in {}",
            chainstore_dir.display()
        );
        return 1;
    }
    let Some(leader) = leader_of(&urls).await else {
        eprintln!("chainstore has no leader");
        return 1;
    };
    let chainstore = Chainstore {
        client: Arc::new(leader_client(&cluster.url(leader))),
        pids: (1..=3).filter_map(|id| cluster.pid(id)).collect(),
        leader_url: cluster.url(leader),
        follower_urls: (1..=3)
            .filter(|id| *id != leader)
            .map(|id| cluster.url(id))
            .collect(),
    };
    let sharded = match &sharded_cluster {
        None => None,
        Some(c) => {
            let urls = c.urls();
            if !wait_ready(&urls, Duration::from_secs(60)).await {
                eprintln!(
                    "the sharded chainstore did not become ready; logs in {}",
                    sharded_dir.display()
                );
                return 1;
            }
            Some(Chainstore {
                client: Arc::new(cluster_client(&urls)),
                pids: (1..=3).filter_map(|id| c.pid(id)).collect(),
                leader_url: c.url(1),
                follower_urls: Vec::new(),
            })
        }
    };
    let etcd_client = match etcd.leader_client().await {
        Ok(client) => client,
        Err(e) => {
            eprintln!(
                "etcd did not elect a leader: {e}; logs in {}",
                etcd.dir.display()
            );
            return 1;
        }
    };
    let etcd_target = EtcdTarget {
        client: etcd_client,
        pids: etcd.pids(),
    };
    let phase = Duration::from_secs(args.seconds);

    println!(
        "chainstore: 3 nodes from {} (leader n{leader}); etcd: 3 members ({}); {} s per phase",
        args.node_bin.display(),
        etcd_version(&args.etcd_bin),
        args.seconds
    );
    let mut rows = Vec::new();
    let mut acked_chainstore: BTreeMap<String, Acked> = BTreeMap::new();
    let mut acked_etcd: BTreeMap<String, Acked> = BTreeMap::new();
    let mut profile = Vec::new();
    let mut stages = Vec::new();
    let mut acked_sharded: BTreeMap<String, Acked> = BTreeMap::new();
    let mut shard_rows = Vec::new();
    for &w in &args.concurrency {
        let before = chainstore.counters().await;
        let (c, acked) = chainstore.appends(w, phase).await;
        profile.push((w, c.ops, chainstore.counters().await.since(before)));
        stages.push((w, c.percentile_ms(0.5), chainstore.entry_stages().await));
        acked_chainstore.extend(acked);
        if let Some(sharded) = &sharded {
            let (s, acked) = sharded.appends(w, phase).await;
            eprintln!(
                "append W={w}: chainstore of {} shards {:.0}/s",
                args.shards,
                s.rate()
            );
            acked_sharded.extend(acked);
            shard_rows.push((w, c.rate(), c.cpu_us_per_op(), s));
        }
        let (e, acked) = etcd_target.appends(w, phase).await;
        acked_etcd.extend(acked);
        eprintln!(
            "append W={w}: chainstore {:.0}/s, etcd {:.0}/s",
            c.rate(),
            e.rate()
        );
        rows.push(("append", w, c, e));
    }

    // Ten-event executions for the readers, written the same way on both.
    let readable = args.concurrency.iter().copied().max().unwrap_or(1);
    for r in 0..readable {
        let name = format!("read-{r}");
        let (c, acked) = chainstore.writer(&name, 10, None).await;
        let (e, acked_e) = etcd_target.writer(&name, 10, None).await;
        if c.errors + e.errors > 0 || acked.len() != 10 || acked_e.len() != 10 {
            eprintln!(
                "preparing {name}: chainstore {:?}, etcd {:?}",
                c.first_error, e.first_error
            );
            return 1;
        }
        acked_chainstore.insert(name.clone(), acked);
        acked_etcd.insert(name, acked_e);
    }
    for &w in &args.concurrency {
        let c = chainstore.reads(w, readable, phase).await;
        let e = etcd_target.reads(w, readable, phase).await;
        eprintln!(
            "read W={w}: chainstore {:.0}/s, etcd {:.0}/s",
            c.rate(),
            e.rate()
        );
        rows.push(("read", w, c, e));
    }

    let checked_chainstore = chainstore.read_back(&acked_chainstore).await;
    let checked_etcd = etcd_target.read_back(&acked_etcd).await;
    let mut checked_sharded = Ok(0);
    let mut leads = BTreeMap::new();
    if let (Some(sharded), Some(c)) = (&sharded, &sharded_cluster) {
        checked_sharded = sharded.read_back(&acked_sharded).await;
        leads = shards_led(&c.urls()).await;
    }
    drop(cluster);
    drop(sharded_cluster);
    let checked_sharded = match checked_sharded {
        Ok(n) => n,
        Err(why) => {
            eprintln!("READ-BACK FAILED on the sharded chainstore: {why}");
            eprintln!("no figures: an acknowledged write was not read back");
            return 1;
        }
    };
    etcd.stop();
    let (checked_chainstore, checked_etcd) = match (checked_chainstore, checked_etcd) {
        (Ok(c), Ok(e)) => (c, e),
        (c, e) => {
            if let Err(why) = c {
                eprintln!("READ-BACK FAILED on chainstore: {why}");
            }
            if let Err(why) = e {
                eprintln!("READ-BACK FAILED on etcd: {why}");
            }
            eprintln!("no figures: an acknowledged write was not read back");
            return 1;
        }
    };
    let failed = rows
        .iter()
        .any(|(_, _, c, e)| c.errors > 0 || e.errors > 0 || c.ops == 0 || e.ops == 0);
    print_table(&rows);
    let sharded_failed = shard_rows
        .iter()
        .any(|(_, _, _, s)| s.errors > 0 || s.ops == 0);
    if args.shards > 1 {
        print_shards(args.shards, &shard_rows, &leads, checked_sharded);
    }
    print_profile(&profile);
    print_stages(&stages);
    println!(
        "read back: chainstore {checked_chainstore} acknowledged appends, etcd {checked_etcd}, \
         each at its sequence"
    );
    for (w, _, _, s) in &shard_rows {
        if let Some(error) = &s.first_error {
            eprintln!(
                "append W={w} sharded chainstore: {} errors, first: {error}",
                s.errors
            );
        }
    }
    if failed || sharded_failed {
        for (kind, w, c, e) in &rows {
            for (system, phase) in [("chainstore", c), ("etcd", e)] {
                if let Some(error) = &phase.first_error {
                    eprintln!(
                        "{kind} W={w} {system}: {} errors, first: {error}",
                        phase.errors
                    );
                }
            }
        }
        return 1;
    }
    0
}

fn print_table(rows: &[(&str, usize, Phase, Phase)]) {
    println!();
    println!(
        "| workload | W  | chainstore ops/s | p50 ms | p99 ms | CPU µs/op | etcd ops/s | p50 ms | p99 ms | CPU µs/op | chainstore/etcd |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (kind, w, c, e) in rows {
        println!(
            "| {kind} | {w} | {:.0} | {:.2} | {:.2} | {:.0} | {:.0} | {:.2} | {:.2} | {:.0} | {:.2}× |",
            c.rate(),
            c.percentile_ms(0.5),
            c.percentile_ms(0.99),
            c.cpu_us_per_op(),
            e.rate(),
            e.percentile_ms(0.5),
            e.percentile_ms(0.99),
            e.cpu_us_per_op(),
            c.rate() / e.rate()
        );
    }
    println!();
    let (c, e) = rows.iter().fold((0.0, 0.0), |(c, e), (_, _, cs, es)| {
        (c + cs.cpu_seconds, e + es.cpu_seconds)
    });
    println!(
        "CPU seconds of the three server processes over all phases: chainstore {c:.1}, etcd {e:.1}"
    );
}

/// The single-shard and the sharded chainstore's appends side by side, and the shards each node
/// of the sharded one leads.
fn print_shards(
    shards: u32,
    rows: &[(usize, f64, f64, Phase)],
    leads: &BTreeMap<u64, usize>,
    checked: usize,
) {
    println!();
    println!("chainstore of 1 shard and of {shards} shards, the same appends in the same run:");
    println!("| W | S=1 appends/s | S={shards} appends/s | S={shards}/S=1 | S=1 CPU µs/append | S={shards} CPU µs/append | S={shards} p50 ms | S={shards} p99 ms |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (w, one_rate, one_cpu, s) in rows {
        println!(
            "| {w} | {one_rate:.0} | {:.0} | {:.2}× | {one_cpu:.0} | {:.0} | {:.2} | {:.2} |",
            s.rate(),
            s.rate() / one_rate,
            s.cpu_us_per_op(),
            s.percentile_ms(0.5),
            s.percentile_ms(0.99),
        );
    }
    let led: Vec<String> = leads
        .iter()
        .map(|(node, n)| format!("n{node} {n}"))
        .collect();
    println!(
        "shards led at the end: {}; read back: {checked} acknowledged appends of the sharded \
         chainstore, each at its sequence",
        led.join(", ")
    );
}

/// How many shards each node leads, as the nodes' `/v1/cluster` say.
async fn shards_led(urls: &[String]) -> BTreeMap<u64, usize> {
    let mut leaders = BTreeMap::new();
    for url in urls {
        let Some((200, body)) = http_get(&format!("{url}/v1/cluster")).await else {
            continue;
        };
        let Ok(view) = serde_json::from_str::<chainstore_model::api::ClusterStatus>(&body) else {
            continue;
        };
        for group in view.groups {
            if let Some(leader) = group.leader_id {
                leaders.entry(group.shard).or_insert(leader);
            }
        }
    }
    let mut led = BTreeMap::new();
    for leader in leaders.values() {
        *led.entry(*leader).or_insert(0) += 1;
    }
    led
}

fn print_profile(profile: &[(usize, u64, Counters)]) {
    println!();
    println!("chainstore leader, per append phase:");
    println!("| W | appends | Raft entries | appends per entry | fsyncs | fsync mean µs | apply writes | apply mean µs |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (w, appends, c) in profile {
        println!(
            "| {w} | {appends} | {:.0} | {:.1} | {:.0} | {:.0} | {:.0} | {:.0} |",
            c.last_log_index,
            *appends as f64 / c.last_log_index.max(1.0),
            c.fsyncs,
            c.fsync_seconds * 1e6 / c.fsyncs.max(1.0),
            c.applies,
            c.apply_seconds * 1e6 / c.applies.max(1.0),
        );
    }
}

/// Where an append's time went, per phase: the client's median beside the medians of each stage
/// of the latest Raft entries (openraft's stage record) on the leader and on each follower. On
/// a follower an entry is received, submitted and (after its fsync) persisted, then learns it
/// is committed from the leader's next message.
fn print_stages(stages: &[(usize, f64, EntryStages)]) {
    println!();
    println!("chainstore, the latest entries of each append phase, medians in µs (client: the append's round trip):");
    println!("| W | node | client | proposed→received | received→submitted | submitted→persisted | persisted→committed | committed→applied | proposed→applied |");
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|");
    for (w, client_ms, s) in stages {
        let row = |name: &str, client: String, medians: &[f64]| {
            let cells: Vec<String> = medians.iter().map(|m| format!("{m:.0}")).collect();
            println!("| {w} | {name} | {client} | {} |", cells.join(" | "));
        };
        row("leader", format!("{:.0}", client_ms * 1e3), &s.leader);
        for (i, f) in s.followers.iter().enumerate() {
            row(&format!("follower {}", i + 1), String::new(), f);
        }
    }
}

/// A ~200-byte JSON payload, as a workflow event would carry.
fn payload(writer: &str, seq: u64) -> serde_json::Value {
    json!({
        "kind": "activity_task_completed",
        "writer": writer,
        "seq": seq,
        "attempt": 1,
        "result": "x".repeat(120),
    })
}

fn leader_client(url: &str) -> Client {
    Client::builder([url.to_string()])
        .retry_policy(RetryPolicy {
            attempts_max: 1,
            backoff_base: Duration::from_millis(10),
            backoff_max: Duration::from_millis(10),
            request_timeout: Duration::from_secs(5),
        })
        .build()
        .expect("a client of a loopback URL")
}

/// A client of every node of a cluster: each shard's calls go to that shard's leader.
fn cluster_client(urls: &[String]) -> Client {
    Client::builder(urls.to_vec())
        .retry_policy(RetryPolicy {
            attempts_max: 3,
            backoff_base: Duration::from_millis(10),
            backoff_max: Duration::from_millis(50),
            request_timeout: Duration::from_secs(5),
        })
        .build()
        .expect("a client of loopback URLs")
}

/// User plus system CPU seconds of `pids` so far.
fn cpu_seconds(pids: &[u32]) -> f64 {
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    pids.iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
        .filter_map(|stat| {
            // Fields after the command name, which is in parentheses and may hold spaces.
            let rest = &stat[stat.rfind(')')? + 2..];
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let utime: f64 = fields.get(11)?.parse().ok()?;
            let stime: f64 = fields.get(12)?.parse().ok()?;
            Some((utime + stime) / ticks)
        })
        .sum()
}

/// Runs `tasks` concurrently and measures them as one phase.
async fn measured<F>(pids: &[u32], tasks: Vec<F>) -> (Phase, Vec<(String, Acked)>)
where
    F: std::future::Future<Output = (Phase, Option<(String, Acked)>)> + Send + 'static,
{
    let cpu_before = cpu_seconds(pids);
    let started = Instant::now();
    let handles: Vec<_> = tasks.into_iter().map(tokio::spawn).collect();
    let mut total = Phase::default();
    let mut acked = Vec::new();
    for handle in handles {
        let (phase, writes) = handle.await.expect("a bench task");
        total.merge(phase);
        acked.extend(writes);
    }
    total.seconds = started.elapsed().as_secs_f64();
    total.cpu_seconds = cpu_seconds(pids) - cpu_before;
    (total, acked)
}

/// `writers` writers, each on its own execution, appending until `length` has passed.
async fn append_phase<W, F>(
    pids: &[u32],
    writers: usize,
    length: Duration,
    writer: W,
) -> (Phase, Vec<(String, Acked)>)
where
    W: Fn(&str, Instant) -> F,
    F: std::future::Future<Output = (Phase, Acked)> + Send + 'static,
{
    let until = Instant::now() + length;
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let name = format!("w{writers}-{w}");
            let writing = writer(&name, until);
            async move {
                let (phase, acked) = writing.await;
                (phase, Some((name, acked)))
            }
        })
        .collect();
    measured(pids, tasks).await
}

struct Chainstore {
    client: Arc<Client>,
    pids: Vec<u32>,
    leader_url: String,
    follower_urls: Vec<String>,
}

/// The stage gaps of `chainstore_raft_entry_stage_seconds`, in the order of an entry's life.
const STAGE_GAPS: [&str; 6] = [
    "proposed_to_received",
    "received_to_submitted",
    "submitted_to_persisted",
    "persisted_to_committed",
    "committed_to_applied",
    "proposed_to_applied",
];

/// The median of each stage gap (µs), on the leader and on each follower, over the latest
/// entries of a phase.
#[derive(Debug, Default, Clone)]
struct EntryStages {
    leader: Vec<f64>,
    followers: Vec<Vec<f64>>,
}

/// The value of one series (its name and labels as exposed) in a node's metrics text.
fn series_value(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// The medians of the stage gaps a node's metrics give, in µs.
fn stage_medians(metrics: &str) -> Vec<f64> {
    STAGE_GAPS
        .iter()
        .map(|gap| {
            let series =
                format!("chainstore_raft_entry_stage_seconds{{stage=\"{gap}\",quantile=\"0.5\"}}");
            series_value(metrics, &series).map_or(f64::NAN, |seconds| seconds * 1e6)
        })
        .collect()
}

/// The leader's own counters: where the time of its appends went.
#[derive(Debug, Default, Clone, Copy)]
struct Counters {
    fsync_seconds: f64,
    fsyncs: f64,
    apply_seconds: f64,
    applies: f64,
    last_log_index: f64,
}

impl Counters {
    fn parse(metrics: &str) -> Self {
        let value = |name: &str| series_value(metrics, name).unwrap_or(0.0);
        Self {
            fsync_seconds: value("chainstore_fsync_seconds_sum"),
            fsyncs: value("chainstore_fsync_seconds_count"),
            apply_seconds: value("chainstore_apply_write_seconds_sum"),
            applies: value("chainstore_apply_write_seconds_count"),
            last_log_index: value("chainstore_raft_last_log_index"),
        }
    }

    fn since(self, before: Self) -> Self {
        Self {
            fsync_seconds: self.fsync_seconds - before.fsync_seconds,
            fsyncs: self.fsyncs - before.fsyncs,
            apply_seconds: self.apply_seconds - before.apply_seconds,
            applies: self.applies - before.applies,
            last_log_index: self.last_log_index - before.last_log_index,
        }
    }
}

impl Chainstore {
    /// The stage medians of the latest entries, from every node's metrics.
    async fn entry_stages(&self) -> EntryStages {
        let medians = |url: String| async move {
            let metrics = http_get(&format!("{url}/metrics")).await;
            stage_medians(&metrics.map(|(_, body)| body).unwrap_or_default())
        };
        let mut followers = Vec::new();
        for url in &self.follower_urls {
            followers.push(medians(url.clone()).await);
        }
        EntryStages {
            leader: medians(self.leader_url.clone()).await,
            followers,
        }
    }

    async fn counters(&self) -> Counters {
        let metrics = http_get(&format!("{}/metrics", self.leader_url)).await;
        Counters::parse(&metrics.map(|(_, body)| body).unwrap_or_default())
    }

    /// Appends to execution `name` until `count` events or `until`, whichever is first.
    fn writer(
        &self,
        name: &str,
        count: u64,
        until: Option<Instant>,
    ) -> impl std::future::Future<Output = (Phase, Acked)> + Send + 'static {
        let client = Arc::clone(&self.client);
        let name = name.to_string();
        async move {
            let exec = ExecutionId::new(name.clone()).expect("a valid execution id");
            let mut phase = Phase::default();
            let mut acked = Vec::new();
            let mut prev: Option<EventId> = None;
            for seq in 1..=count {
                if until.is_some_and(|t| Instant::now() >= t) {
                    break;
                }
                let event_id = EventId::new(format!("e{seq}")).expect("a valid event id");
                let request = AppendRequest {
                    event_id: event_id.clone(),
                    prev_event_id: prev.clone(),
                    parent_execution_id: None,
                    payload: payload(&name, seq),
                    genesis: seq == 1,
                };
                let sent = Instant::now();
                match client.append(&exec, &request).await {
                    Ok(appended) if appended.exec_seq == seq && !appended.duplicate => {
                        phase.latencies_us.push(sent.elapsed().as_micros() as u32);
                        phase.ops += 1;
                        acked.push((seq, event_id.as_str().to_string()));
                        prev = Some(event_id);
                    }
                    other => {
                        phase.errors += 1;
                        phase.first_error = Some(format!("{name} seq {seq}: {other:?}"));
                        break;
                    }
                }
            }
            (phase, acked)
        }
    }

    async fn appends(&self, writers: usize, length: Duration) -> (Phase, Vec<(String, Acked)>) {
        append_phase(&self.pids, writers, length, |name, until| {
            self.writer(name, u64::MAX, Some(until))
        })
        .await
    }

    async fn reads(&self, readers: usize, executions: usize, length: Duration) -> Phase {
        let until = Instant::now() + length;
        let tasks: Vec<_> = (0..readers)
            .map(|r| {
                let client = Arc::clone(&self.client);
                let exec = ExecutionId::new(format!("read-{}", r % executions)).expect("valid");
                async move {
                    let mut phase = Phase::default();
                    while Instant::now() < until {
                        let sent = Instant::now();
                        match client.chain(&exec, ReadOptions::default()).await {
                            Ok(read) if matches!(&read.answer, Guarded::Authoritative(e) if e.len() == 10) => {
                                phase.latencies_us.push(sent.elapsed().as_micros() as u32);
                                phase.ops += 1;
                            }
                            other => {
                                phase.errors += 1;
                                phase.first_error = Some(format!("{exec}: {other:?}"));
                                break;
                            }
                        }
                    }
                    (phase, None)
                }
            })
            .collect();
        measured(&self.pids, tasks).await.0
    }

    /// Every acknowledged append at its sequence, read linearizably.
    async fn read_back(&self, acked: &BTreeMap<String, Acked>) -> Result<usize, String> {
        let mut checked = 0;
        for (name, writes) in acked {
            let exec = ExecutionId::new(name.clone()).map_err(|e| e.to_string())?;
            let read = self
                .client
                .chain(&exec, ReadOptions::default())
                .await
                .map_err(|e| format!("{name}: {e}"))?;
            let Guarded::Authoritative(events) = read.answer else {
                return Err(format!("{name}: {:?}", read.answer));
            };
            for (seq, id) in writes {
                let stored = events.get(*seq as usize - 1);
                if stored.is_none_or(|e| e.exec_seq != *seq || e.event_id.as_str() != id) {
                    return Err(format!(
                        "{name}: {id} acknowledged at seq {seq}, read {stored:?}"
                    ));
                }
                checked += 1;
            }
        }
        Ok(checked)
    }
}

struct EtcdTarget {
    client: etcd_client::Client,
    pids: Vec<u32>,
}

fn head_key(name: &str) -> String {
    format!("/chains/{name}/head")
}

fn event_key(name: &str, seq: u64) -> String {
    format!("/chains/{name}/events/{seq:012}")
}

impl EtcdTarget {
    fn writer(
        &self,
        name: &str,
        count: u64,
        until: Option<Instant>,
    ) -> impl std::future::Future<Output = (Phase, Acked)> + Send + 'static {
        let mut client = self.client.clone();
        let name = name.to_string();
        async move {
            let mut phase = Phase::default();
            let mut acked = Vec::new();
            let mut prev: Option<String> = None;
            for seq in 1..=count {
                if until.is_some_and(|t| Instant::now() >= t) {
                    break;
                }
                let event_id = format!("e{seq}");
                let event = json!({
                    "event_id": event_id,
                    "prev_event_id": prev,
                    "payload": payload(&name, seq),
                });
                // The head check: the head key still names the event this writer wrote last
                // (absent before the first).
                let check = match &prev {
                    None => Compare::version(head_key(&name), CompareOp::Equal, 0),
                    Some(prev) => Compare::value(head_key(&name), CompareOp::Equal, prev.as_str()),
                };
                let txn = Txn::new().when(vec![check]).and_then(vec![
                    TxnOp::put(event_key(&name, seq), event.to_string(), None),
                    TxnOp::put(head_key(&name), event_id.as_str(), None),
                ]);
                let sent = Instant::now();
                match client.txn(txn).await {
                    Ok(answer) if answer.succeeded() => {
                        phase.latencies_us.push(sent.elapsed().as_micros() as u32);
                        phase.ops += 1;
                        acked.push((seq, event_id.clone()));
                        prev = Some(event_id);
                    }
                    Ok(_) => {
                        phase.errors += 1;
                        phase.first_error = Some(format!("{name} seq {seq}: head check failed"));
                        break;
                    }
                    Err(e) => {
                        phase.errors += 1;
                        phase.first_error = Some(format!("{name} seq {seq}: {e}"));
                        break;
                    }
                }
            }
            (phase, acked)
        }
    }

    async fn appends(&self, writers: usize, length: Duration) -> (Phase, Vec<(String, Acked)>) {
        append_phase(&self.pids, writers, length, |name, until| {
            self.writer(name, u64::MAX, Some(until))
        })
        .await
    }

    async fn reads(&self, readers: usize, executions: usize, length: Duration) -> Phase {
        let until = Instant::now() + length;
        let tasks: Vec<_> = (0..readers)
            .map(|r| {
                let mut client = self.client.clone();
                let prefix = format!("/chains/read-{}/events/", r % executions);
                async move {
                    let mut phase = Phase::default();
                    while Instant::now() < until {
                        let sent = Instant::now();
                        // Linearizable is etcd's default for a range read.
                        match client
                            .get(prefix.as_str(), Some(GetOptions::new().with_prefix()))
                            .await
                        {
                            Ok(answer) if answer.kvs().len() == 10 => {
                                phase.latencies_us.push(sent.elapsed().as_micros() as u32);
                                phase.ops += 1;
                            }
                            Ok(answer) => {
                                phase.errors += 1;
                                phase.first_error =
                                    Some(format!("{prefix}: {} keys", answer.kvs().len()));
                                break;
                            }
                            Err(e) => {
                                phase.errors += 1;
                                phase.first_error = Some(format!("{prefix}: {e}"));
                                break;
                            }
                        }
                    }
                    (phase, None)
                }
            })
            .collect();
        measured(&self.pids, tasks).await.0
    }

    async fn read_back(&self, acked: &BTreeMap<String, Acked>) -> Result<usize, String> {
        let mut client = self.client.clone();
        let mut checked = 0;
        for (name, writes) in acked {
            // In pages: one range of a long execution would exceed gRPC's message limit.
            let prefix = format!("/chains/{name}/events/");
            let end = format!("/chains/{name}/events0");
            let mut stored: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
            let mut from = prefix.clone().into_bytes();
            loop {
                let answer = client
                    .get(
                        from.clone(),
                        Some(
                            GetOptions::new()
                                .with_range(end.as_str())
                                .with_limit(READ_BACK_PAGE),
                        ),
                    )
                    .await
                    .map_err(|e| format!("{name}: {e}"))?;
                for kv in answer.kvs() {
                    stored.insert(kv.key().to_vec(), kv.value().to_vec());
                }
                match answer.kvs().last() {
                    Some(last) if answer.more() => {
                        from = last.key().to_vec();
                        from.push(0);
                    }
                    _ => break,
                }
            }
            for (seq, id) in writes {
                let key = event_key(name, *seq);
                let event: Option<serde_json::Value> = stored
                    .get(key.as_bytes())
                    .and_then(|v| serde_json::from_slice(v).ok());
                if event.as_ref().and_then(|e| e["event_id"].as_str()) != Some(id.as_str()) {
                    return Err(format!(
                        "{name}: {id} acknowledged at seq {seq}, read {event:?}"
                    ));
                }
                checked += 1;
            }
        }
        Ok(checked)
    }
}

/// Keys per range read of the etcd read-back.
const READ_BACK_PAGE: i64 = 1_000;

/// Three etcd members on loopback, with etcd's defaults otherwise.
struct Etcd {
    dir: PathBuf,
    clients: Vec<String>,
    children: Vec<Child>,
}

impl Etcd {
    fn start(bin: &Path, dir: &Path, base_port: u16) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let client_url = |i: u16| format!("http://127.0.0.1:{}", base_port + i);
        let peer_url = |i: u16| format!("http://127.0.0.1:{}", base_port + 3 + i);
        let initial: Vec<String> = (0..3).map(|i| format!("e{i}={}", peer_url(i))).collect();
        let mut children = Vec::new();
        for i in 0..3u16 {
            let log = std::fs::File::create(dir.join(format!("e{i}.log")))?;
            let child = Command::new(bin)
                .arg(format!("--name=e{i}"))
                .arg(format!(
                    "--data-dir={}",
                    dir.join(format!("e{i}")).display()
                ))
                .arg(format!("--listen-client-urls={}", client_url(i)))
                .arg(format!("--advertise-client-urls={}", client_url(i)))
                .arg(format!("--listen-peer-urls={}", peer_url(i)))
                .arg(format!("--initial-advertise-peer-urls={}", peer_url(i)))
                .arg(format!("--initial-cluster={}", initial.join(",")))
                .arg("--initial-cluster-state=new")
                .arg("--initial-cluster-token=chainstore-bench")
                .arg("--logger=zap")
                .arg("--log-level=warn")
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log)
                .spawn()?;
            children.push(child);
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            clients: (0..3).map(client_url).collect(),
            children,
        })
    }

    fn pids(&self) -> Vec<u32> {
        self.children.iter().map(Child::id).collect()
    }

    /// A client of the leader only (as chainstore's client talks to its leader only).
    async fn leader_client(&self) -> Result<etcd_client::Client, String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut last = String::from("no answer");
        while Instant::now() < deadline {
            for url in &self.clients {
                let attempt = async {
                    let mut client = etcd_client::Client::connect([url.as_str()], None).await?;
                    let status = client.status().await?;
                    let me = status.header().map(|h| h.member_id());
                    Ok::<_, etcd_client::Error>((
                        client,
                        status.leader() != 0 && me == Some(status.leader()),
                    ))
                };
                match tokio::time::timeout(Duration::from_secs(2), attempt).await {
                    Ok(Ok((client, true))) => return Ok(client),
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => last = e.to_string(),
                    Err(_) => last = "timed out".into(),
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Err(last)
    }

    fn stop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.children.clear();
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.stop();
    }
}

fn etcd_version(bin: &Path) -> String {
    Command::new(bin)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.lines().next().map(str::to_string))
        .unwrap_or_else(|| "version unknown".into())
}
