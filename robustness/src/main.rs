//! `chainstore-robustness`: a fault run of the real `chainstore-node` binary.
//!
//! Three node processes on loopback; racing clients send appends and linearizable reads to
//! random nodes (followers forward), each call and its answer recorded; a prober writes as one
//! steady writer to time outages; a nemesis, driven by the seed, SIGKILLs and restarts the leader
//! or a follower, SIGTERMs the leader (which hands its leadership over before it exits) and
//! restarts it, SIGSTOPs a node for seconds, and cuts a node off from its peers while clients
//! still reach it. Then every fault is healed and the run checks:
//! - the history is linearizable against the model of SPEC §4.1 and §6 (`chainstore-check`);
//! - every acknowledged append is in its execution's chain, read linearizably after healing;
//! - the three nodes converge to the same chains.
//!
//! It writes `report.txt` (the faults, the write outage after each, the verdicts) and
//! `history.jsonl` in the run directory, and exits non-zero on any violation, keeping the
//! directory (data directories and node logs included) for inspection.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use chainstore_check::{Answer, Entry, Op, Verdict};
use chainstore_client::ReadOptions;
use chainstore_model::{api::Consistency, Guarded, ShardCount};
use clap::Parser;

use chainstore_robustness::cluster::{self, leader_of, wait_ready, Cluster};
use chainstore_robustness::workload::{self, exec, lock, single_node_client, Shared};
use chaos::rng::SimRng as Rng;

#[derive(Parser, Debug)]
#[command(about = "A fault run of three chainstore-node processes, every answer checked")]
struct Args {
    /// The chainstore-node binary.
    #[arg(long)]
    node_bin: PathBuf,
    /// The run directory (created; must not hold an earlier run).
    #[arg(long)]
    dir: PathBuf,
    /// Seeds the nemesis and the clients.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Seconds of faults.
    #[arg(long, default_value_t = 60)]
    duration: u64,
    /// The first node's port (the nodes use three in a row).
    #[arg(long, default_value_t = 7301)]
    base_port: u16,
    /// Racing client processes.
    #[arg(long, default_value_t = 6)]
    clients: u64,
    /// Executions they race on.
    #[arg(long, default_value_t = 3)]
    executions: u64,
    /// Three Unix users, one per node, comma-separated; needed to cut a node off (iptables
    /// matches the user). Without them the nemesis kills and pauses only.
    #[arg(long, value_delimiter = ',')]
    users: Vec<String>,
    /// Extra flags for every node (for example Raft timings).
    #[arg(long, allow_hyphen_values = true, num_args = 1..)]
    node_args: Vec<String>,
    /// Keep the data directories even when the run passes.
    #[arg(long)]
    keep: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum FaultKind {
    KillLeader,
    KillFollower,
    Pause,
    Cut,
    /// SIGTERM to the leader: it hands its leadership over, then exits.
    TermLeader,
}

impl FaultKind {
    fn name(self) -> &'static str {
        match self {
            FaultKind::KillLeader => "SIGKILL leader",
            FaultKind::KillFollower => "SIGKILL follower",
            FaultKind::Pause => "SIGSTOP",
            FaultKind::Cut => "cut from peers",
            FaultKind::TermLeader => "SIGTERM leader",
        }
    }

    /// Whether the fault always strikes the leader (and its name says so).
    fn leader_only(self) -> bool {
        matches!(self, FaultKind::KillLeader | FaultKind::TermLeader)
    }

    /// The longest write outage a fault of this kind on the leader may cause: a SIGTERMed
    /// leader hands over within a round trip, every other fault waits out a lease.
    fn outage_goal(self) -> f64 {
        match self {
            FaultKind::TermLeader => 0.3,
            _ => 1.5,
        }
    }
}

struct FaultRecord {
    kind: FaultKind,
    node: u64,
    /// Whether the node was the leader when the fault struck.
    on_leader: bool,
    at_ns: u64,
    healed_ns: u64,
}

fn main() {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        // Fails only when the process cannot create threads: nothing to run then.
        .expect("a tokio runtime");
    let code = runtime.block_on(run(args));
    std::process::exit(code);
}

async fn run(args: Args) -> i32 {
    if args.dir.exists() && std::fs::read_dir(&args.dir).is_ok_and(|mut d| d.next().is_some()) {
        eprintln!("{} is not empty", args.dir.display());
        return 2;
    }
    if let Err(e) = std::fs::create_dir_all(&args.dir) {
        eprintln!("creating {}: {e}", args.dir.display());
        return 2;
    }
    let users = match args
        .users
        .iter()
        .map(|u| cluster::user_ids(u))
        .collect::<Result<Vec<_>, _>>()
    {
        Ok(users) if users.is_empty() || users.len() == 3 => users,
        Ok(_) => {
            eprintln!("--users needs three users");
            return 2;
        }
        Err(e) => {
            eprintln!("{e}");
            return 2;
        }
    };
    let cuts = !users.is_empty();
    if let Err(e) = cluster::remove_tagged_rules() {
        eprintln!("{e}");
        return 2;
    }
    let mut cluster = match Cluster::new(
        args.node_bin.clone(),
        &args.dir,
        args.base_port,
        &users,
        args.node_args.clone(),
    ) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("laying out {}: {e}", args.dir.display());
            return 2;
        }
    };
    if cuts {
        // Fail early, before any load, when iptables cannot be used here.
        if let Err(e) = cluster.cut(1).and_then(|()| cluster.heal(1)) {
            eprintln!("cutting a node off needs iptables with the owner match: {e}");
            return 2;
        }
    }
    for id in 1..=3 {
        if let Err(e) = cluster.start(id) {
            eprintln!("starting n{id}: {e}");
            return 2;
        }
    }
    let urls = cluster.urls();
    if !wait_ready(&urls, Duration::from_secs(30)).await {
        eprintln!(
            "the cluster did not become ready; logs in {}",
            args.dir.display()
        );
        return 1;
    }

    let shared = Shared::new();
    let execs: Vec<String> = (0..args.executions)
        .map(|i| format!("race-{}-{i}", args.seed))
        .collect();
    let probe = format!("probe-{}", args.seed);
    let mut tasks = Vec::new();
    for racer in 0..args.clients {
        tasks.push(tokio::spawn(workload::racer(
            Arc::clone(&shared),
            urls.clone(),
            execs.clone(),
            racer,
            Rng::new(args.seed.wrapping_mul(1_000_003).wrapping_add(racer)),
        )));
    }
    tasks.push(tokio::spawn(workload::prober(
        Arc::clone(&shared),
        urls.clone(),
        probe.clone(),
    )));

    let faults = nemesis(&mut cluster, &shared, &args, cuts).await;

    if let Err(e) = cluster.heal_all() {
        eprintln!("healing: {e}");
        return 1;
    }
    // A few seconds of load on the healed cluster, then the clients stop.
    tokio::time::sleep(Duration::from_secs(3)).await;
    shared.stop.store(true, Ordering::Relaxed);
    for task in tasks {
        let _ = task.await;
    }

    let mut report = String::new();
    let mut failed = Vec::new();
    let _ = writeln!(
        report,
        "chainstore robustness run: seed {}, {} s of faults, {} racing clients on {} executions, cuts {}",
        args.seed,
        args.duration,
        args.clients,
        args.executions,
        if cuts { "on" } else { "off" }
    );

    if !wait_ready(&urls, Duration::from_secs(30)).await {
        failed.push("the cluster did not serve again within 30 s of healing".to_string());
    }
    let mut all_execs = execs.clone();
    all_execs.push(probe.clone());
    let finals = final_reads(&shared, &urls, &all_execs).await;
    let acknowledged = lock(&shared.acknowledged).clone();
    for name in &all_execs {
        match finals.get(name) {
            None => failed.push(format!("{name}: no authoritative read after healing")),
            Some(chain) => {
                let missing: Vec<&String> = acknowledged
                    .get(name)
                    .into_iter()
                    .flatten()
                    .filter(|e| !chain.contains(e))
                    .collect();
                if !missing.is_empty() {
                    failed.push(format!(
                        "{name}: {} acknowledged appends missing after healing: {missing:?}",
                        missing.len()
                    ));
                }
            }
        }
    }
    failed.extend(convergence(&urls, &all_execs).await);

    let history = std::mem::take(&mut *lock(&shared.history));
    let _ = std::fs::write(args.dir.join("history.jsonl"), history.to_json_lines());
    let ops = history.entries.len();
    let unknown = history
        .entries
        .iter()
        .filter(|e| e.answer == Answer::Unknown)
        .count();
    let verdict = chainstore_check::check(&history);
    match &verdict {
        Verdict::Linearizable { .. } => {}
        Verdict::Illegal(illegal) => failed.push(format!("not linearizable: {illegal}")),
        Verdict::Undecided {
            execution,
            operations,
        } => failed.push(format!(
            "the linearizability check of {execution} ({operations} operations) ran out of steps"
        )),
    }

    let _ = writeln!(
        report,
        "\nfaults (time since start; write outage: until a probe write sent after the fault is acknowledged)"
    );
    let acks = lock(&shared.probe_acks).clone();
    let mut counts: BTreeMap<FaultKind, usize> = BTreeMap::new();
    let mut worst_leader_outage: BTreeMap<FaultKind, f64> = BTreeMap::new();
    for fault in &faults {
        *counts.entry(fault.kind).or_default() += 1;
        // Until a write sent after the fault is acknowledged: an answer already on its way
        // when the fault struck says nothing about the cluster after it.
        let outage = acks
            .iter()
            .find(|(sent, _)| *sent > fault.at_ns)
            .map(|(_, acked)| (acked - fault.at_ns) as f64 / 1e9);
        if fault.on_leader {
            let worst = worst_leader_outage.entry(fault.kind).or_default();
            *worst = worst.max(outage.unwrap_or(f64::INFINITY));
        }
        let _ = writeln!(
            report,
            "  {:7.2} s  {:17} n{}{}  healed at {:7.2} s  outage {}",
            fault.at_ns as f64 / 1e9,
            fault.kind.name(),
            fault.node,
            if fault.on_leader && !fault.kind.leader_only() {
                " (the leader)"
            } else {
                ""
            },
            fault.healed_ns as f64 / 1e9,
            outage.map_or("none acknowledged after it".into(), |o| format!("{o:.3} s"))
        );
    }
    let _ = writeln!(report, "\nfault counts:");
    for (kind, n) in &counts {
        let _ = writeln!(report, "  {:17} {n}", kind.name());
    }
    if !worst_leader_outage.is_empty() {
        let worst: Vec<String> = worst_leader_outage
            .iter()
            .map(|(kind, worst)| {
                let name = match kind {
                    FaultKind::KillLeader | FaultKind::KillFollower => "SIGKILL",
                    other => other.name(),
                };
                format!("{name} {worst:.3} s (goal {:.1} s)", kind.outage_goal())
            })
            .collect();
        let _ = writeln!(
            report,
            "longest write outage after a fault on the leader: {}",
            worst.join(", ")
        );
    }
    let acked: usize = acknowledged.values().map(Vec::len).sum();
    let _ = writeln!(
        report,
        "\n{ops} racing operations recorded ({unknown} with a lost answer), {acked} appends acknowledged (prober included)"
    );
    let _ = writeln!(
        report,
        "linearizability: {}",
        match &verdict {
            Verdict::Linearizable { operations, .. } =>
                format!("every execution's history is linearizable ({operations} operations)"),
            _ => "FAILED".into(),
        }
    );
    if failed.is_empty() {
        let _ = writeln!(report, "\nPASS");
    } else {
        let _ = writeln!(report, "\nFAIL");
        for f in &failed {
            let _ = writeln!(report, "  {f}");
        }
    }
    let _ = std::fs::write(args.dir.join("report.txt"), &report);
    print!("{report}");
    cluster.kill_all();
    if failed.is_empty() {
        if !args.keep {
            for id in 1..=3 {
                let _ = std::fs::remove_dir_all(args.dir.join(format!("node-{id}")));
            }
        }
        0
    } else {
        println!(
            "the run directory is kept: {} (report.txt, history.jsonl, node logs and data)",
            args.dir.display()
        );
        1
    }
}

/// The faults, one at a time: each kind in turn (the order shuffled by the seed), held for a
/// few seconds, then healed, with a quiet gap before the next.
async fn nemesis(
    cluster: &mut Cluster,
    shared: &Arc<Shared>,
    args: &Args,
    cuts: bool,
) -> Vec<FaultRecord> {
    let mut rng = Rng::new(args.seed ^ 0x006e_656d_6573_6973);
    let urls = cluster.urls();
    let mut kinds = vec![
        FaultKind::KillLeader,
        FaultKind::KillFollower,
        FaultKind::Pause,
        FaultKind::TermLeader,
    ];
    if cuts {
        kinds.push(FaultKind::Cut);
    }
    let mut records = Vec::new();
    let end = Duration::from_secs(args.duration);
    let mut round: Vec<FaultKind> = Vec::new();
    tokio::time::sleep(Duration::from_secs(2)).await;
    while shared.start.elapsed() < end {
        if round.is_empty() {
            round = kinds.clone();
            for i in (1..round.len()).rev() {
                round.swap(i, rng.range(0, i as u64 + 1) as usize);
            }
        }
        // The round was refilled just above when it was empty.
        let kind = round.pop().expect("a fault");
        let leader = leader_of(&urls).await;
        let node = match kind {
            FaultKind::KillLeader | FaultKind::TermLeader => match leader {
                Some(l) => l,
                None => {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    round.push(kind);
                    continue;
                }
            },
            FaultKind::KillFollower => {
                let followers: Vec<u64> = (1..=3).filter(|id| Some(*id) != leader).collect();
                *rng.pick(&followers)
            }
            // Half of them on the leader (when there is one), the others on any node.
            FaultKind::Pause | FaultKind::Cut => match leader {
                Some(l) if rng.range(0, 2) == 0 => l,
                _ => rng.range(1, 4),
            },
        };
        let on_leader = leader == Some(node);
        let at_ns = shared.now_ns();
        let hold = Duration::from_millis(rng.range(1_500, 4_000));
        match kind {
            FaultKind::KillLeader | FaultKind::KillFollower => {
                cluster.kill(node);
                tokio::time::sleep(hold).await;
                if let Err(e) = cluster.start(node) {
                    eprintln!("restarting n{node}: {e}");
                }
            }
            FaultKind::TermLeader => {
                let started = tokio::time::Instant::now();
                if !cluster.terminate(node, hold).await {
                    eprintln!("n{node} did not exit within {hold:?} of SIGTERM; killed");
                }
                tokio::time::sleep(hold.saturating_sub(started.elapsed())).await;
                if let Err(e) = cluster.start(node) {
                    eprintln!("restarting n{node}: {e}");
                }
            }
            FaultKind::Pause => {
                cluster.pause(node);
                tokio::time::sleep(hold).await;
                cluster.resume(node);
            }
            FaultKind::Cut => {
                if let Err(e) = cluster.cut(node) {
                    eprintln!("cutting n{node}: {e}");
                }
                tokio::time::sleep(hold).await;
                if let Err(e) = cluster.heal(node) {
                    eprintln!("healing n{node}: {e}");
                }
            }
        }
        records.push(FaultRecord {
            kind,
            node,
            on_leader,
            at_ns,
            healed_ns: shared.now_ns(),
        });
        eprintln!(
            "{:7.2} s  {} n{node} for {:?}",
            at_ns as f64 / 1e9,
            kind.name(),
            hold
        );
        // Let the cluster settle (a restarted node catches up) before the next fault.
        tokio::time::sleep(Duration::from_millis(rng.range(1_500, 3_000))).await;
    }
    records
}

/// After healing: one linearizable read of each execution that the store can answer, retried
/// until it answers; each enters the history (it bounds every earlier operation).
async fn final_reads(
    shared: &Arc<Shared>,
    urls: &[String],
    execs: &[String],
) -> BTreeMap<String, Vec<String>> {
    let mut chains = BTreeMap::new();
    let process = u64::MAX;
    for name in execs {
        for attempt in 0..50 {
            let client = single_node_client(&urls[attempt % urls.len()], Duration::from_secs(2));
            let call = shared.now_ns();
            if let Ok(read) = client.chain(&exec(name), ReadOptions::default()).await {
                if let Guarded::Authoritative(events) = read.answer {
                    let ids: Vec<String> = events.iter().map(|e| e.event_id.to_string()).collect();
                    if !name.starts_with("probe") {
                        lock(&shared.history).push(Entry {
                            process,
                            execution: name.clone(),
                            call,
                            ret: shared.now_ns(),
                            op: Op::Read,
                            answer: Answer::Chain {
                                events: ids.clone(),
                            },
                        });
                    }
                    chains.insert(name.clone(), ids);
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    chains
}

/// Every node, once it has applied what its shard's most advanced replica had, holds the same
/// chain of every execution. Each shard's group has a log of its own, so the index to wait for
/// is the execution's shard's.
async fn convergence(urls: &[String], execs: &[String]) -> Vec<String> {
    let mut failures = Vec::new();
    if leader_of(urls).await.is_none() {
        return vec!["no leader after healing".into()];
    }
    let mut shards = ShardCount::ONE;
    let mut applied_by_shard: BTreeMap<u32, u64> = BTreeMap::new();
    for url in urls {
        let Ok(status) = single_node_client(url, Duration::from_secs(2))
            .cluster()
            .await
        else {
            continue;
        };
        shards = ShardCount::new(status.shards).unwrap_or(ShardCount::ONE);
        let groups: Vec<(u32, u64)> = if status.groups.is_empty() {
            vec![(0, status.last_applied)]
        } else {
            status
                .groups
                .iter()
                .map(|g| (g.shard, g.last_applied))
                .collect()
        };
        for (shard, applied) in groups {
            let most = applied_by_shard.entry(shard).or_default();
            *most = (*most).max(applied);
        }
    }
    if applied_by_shard.is_empty() {
        return vec!["no node answered its status after healing".into()];
    }
    for name in execs {
        let shard = shards.shard_of(&exec(name)).0;
        let applied = applied_by_shard.get(&shard).copied().unwrap_or(0);
        let mut seen: Vec<(usize, Result<Vec<String>, String>)> = Vec::new();
        for (i, url) in urls.iter().enumerate() {
            let client = single_node_client(url, Duration::from_secs(6));
            let options = ReadOptions {
                consistency: Consistency::Local,
                min_index: Some(applied),
            };
            let got = match client.chain(&exec(name), options).await {
                Ok(read) => match read.answer {
                    Guarded::Authoritative(events) => {
                        Ok(events.iter().map(|e| e.event_id.to_string()).collect())
                    }
                    Guarded::CannotAnswer(reason) => Err(format!("cannot answer: {reason:?}")),
                },
                Err(e) => Err(e.to_string()),
            };
            seen.push((i + 1, got));
        }
        if seen.windows(2).any(|w| w[0].1 != w[1].1) {
            failures.push(format!("{name}: the nodes disagree: {seen:?}"));
        }
    }
    failures
}
