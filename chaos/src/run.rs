//! One simulation run: a cluster of production nodes (axum, leader evaluation, openraft) on the
//! in-memory engine inside turmoil, client hosts running the workloads, and faults chosen by the
//! seed. Everything random derives from the seed; a run is replayed exactly by its seed.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use chainstore_node::{app, ClientAuth, Host, Node, NodeConfig, PeerAuth, Secret};
use raft_store::raft::LogFlush;
use raft_store::MemEngine;

use chainstore_check::Verdict;

use crate::actors;
use crate::net::{serve, SimTransport};
use crate::rng::SimRng;
use crate::world::{Phase, World};

/// What one run does.
#[derive(Debug, Clone)]
pub struct SimOptions {
    /// The seed everything derives from.
    pub seed: u64,
    /// Voters at bootstrap (3 or 5).
    pub voters: u64,
    /// Whether a spare node joins as a learner and becomes a voter during the load.
    pub spare: bool,
    /// Simulated seconds of load with faults.
    pub load_secs: u64,
    /// Shards the cluster is made with (1: one group; more only without a spare, as a sharded
    /// cluster takes no membership change).
    pub shards: u32,
}

impl SimOptions {
    /// The shape a seed picks: mostly three voters, sometimes five, sometimes a joining spare.
    pub fn for_seed(seed: u64, load_secs: u64) -> Self {
        let mut rng = SimRng::new(seed ^ 0x5eed);
        let voters = if rng.chance(0.25) { 5 } else { 3 };
        let spare = rng.chance(0.3);
        // Four shards of three replicas: on three nodes every node holds every shard, on five
        // each holds two or three and passes the others' requests on.
        let shards = if !spare && rng.chance(0.4) { 4 } else { 1 };
        Self {
            seed,
            voters,
            spare,
            load_secs,
            shards,
        }
    }

    fn node_ids(&self) -> Vec<u64> {
        (1..=self.voters + u64::from(self.spare)).collect()
    }
}

/// What a run found.
#[derive(Debug, Clone)]
pub struct Report {
    pub options: SimOptions,
    /// Hash of the whole trace: equal for two runs of one seed.
    pub trace_hash: u64,
    pub trace_lines: u64,
    pub violations: Vec<String>,
    pub faults: Vec<String>,
    pub stats: BTreeMap<&'static str, u64>,
    pub tail: Vec<String>,
    pub simulated: Duration,
}

impl Report {
    /// True when no invariant was violated.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }

    /// A failure report that names the seed and how to replay it alone.
    pub fn failure_text(&self) -> String {
        let mut text = format!(
            "CHAOS_SEED={seed}\nreplay: CHAOS_SEED={seed} CHAOS_LOAD_SECS={secs} cargo test --workspace --test sim -- --exact replay --nocapture\n{:?}\nviolations:\n",
            self.options,
            seed = self.options.seed,
            secs = self.options.load_secs
        );
        for v in &self.violations {
            text.push_str(&format!("  {v}\n"));
        }
        text.push_str("faults:\n");
        for f in &self.faults {
            text.push_str(&format!("  {f}\n"));
        }
        text.push_str("last trace lines:\n");
        for line in &self.tail {
            text.push_str(&format!("  {line}\n"));
        }
        text
    }
}

/// Processes racing on the checked executions.
const RACERS: u64 = 3;

/// Whether this run adds the racing clients and checks their history: always, unless
/// `CHAOS_LINEARIZABILITY=0` (to compare traces with runs of an older build that had none).
fn linearizability_checked() -> bool {
    std::env::var("CHAOS_LINEARIZABILITY").map_or(true, |v| v != "0")
}

/// The simulated cluster is plaintext: peers authenticate by the secret, clients need nothing.
const SECRET: &str = "simulated-cluster-secret";

pub(crate) fn node_config(id: u64) -> NodeConfig {
    let secret = Secret::new(SECRET).expect("the simulation's secret passes the checks");
    let mut config = NodeConfig::new(
        id,
        format!("n{id}:{}", crate::net::NODE_PORT),
        PeerAuth::Secret(secret),
    );
    config.client_auth = ClientAuth {
        insecure_no_client_auth: true,
        ..ClientAuth::default()
    };
    config.raft.heartbeat = Duration::from_millis(100);
    config.raft.election_min = Duration::from_millis(500);
    config.raft.election_max = Duration::from_millis(1000);
    // Small enough that lagging or restarted nodes catch up through snapshots.
    config.raft.snapshot_after_entries = 200;
    config.raft.log_entries_kept = 20;
    config.raft.purge_batch_entries = 20;
    // Populates of more than a few events span several entries, so crashes land between them.
    config.limits.populate_batch_events_max = 4;
    config.limits.write_timeout = Duration::from_secs(3);
    config.limits.min_index_wait = Duration::from_secs(2);
    config.limits.forward_timeout = Duration::from_secs(4);
    config.limits.request_timeout = Duration::from_secs(8);
    // No thread on the simulated path: the log's fsyncs run on a task of the simulation.
    config.log_flush = LogFlush::Task;
    config
}

/// Where a host puts its running node's (one) group, so the simulation can look at it (empty
/// while down).
pub(crate) type Slot = Rc<RefCell<Option<Arc<Node>>>>;

/// Adds a host per id, each running the real node and router on its own `MemEngine`, which
/// lives outside the host so that it survives crashes and restarts.
pub(crate) fn add_nodes(
    sim: &mut turmoil::Sim<'_>,
    ids: &[u64],
) -> (BTreeMap<u64, MemEngine>, BTreeMap<u64, Slot>) {
    let engines: BTreeMap<u64, MemEngine> = ids.iter().map(|id| (*id, MemEngine::new())).collect();
    let slots: BTreeMap<u64, Slot> = ids
        .iter()
        .map(|id| (*id, Rc::new(RefCell::new(None))))
        .collect();
    for id in ids {
        let (id, engine, slot) = (*id, engines[id].clone(), Rc::clone(&slots[id]));
        sim.host(name(id), move || {
            let (engine, slot) = (engine.clone(), Rc::clone(&slot));
            async move {
                let host = Host::start(node_config(id), Arc::new(engine), Arc::new(SimTransport))
                    .await
                    .map_err(|e| e.to_string())?;
                *slot.borrow_mut() = host.first();
                serve(app(host)).await?;
                Ok(())
            }
        });
    }
    (engines, slots)
}

/// The simulation of one seed, with the settings every run uses.
pub(crate) fn simulation<'a>(seed: u64, duration: Duration) -> turmoil::Sim<'a> {
    turmoil::Builder::new()
        .simulation_duration(duration)
        .tick_duration(Duration::from_millis(1))
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(BASE_LATENCY_MAX)
        .epoch(UNIX_EPOCH + Duration::from_secs(1_800_000_000))
        .rng_seed(seed)
        .build()
}

/// The highest-term node that names itself leader, among the running ones.
pub(crate) fn leader_of_slots(slots: &BTreeMap<u64, Slot>) -> Option<u64> {
    slots
        .iter()
        .filter_map(|(id, slot)| slot.borrow().as_ref().map(|n| (*id, n.raft_metrics())))
        .filter(|(id, m)| m.current_leader == Some(*id))
        .max_by_key(|(_, m)| m.current_term)
        .map(|(id, _)| id)
}

/// A fault that undoes itself later.
#[derive(Debug, Clone)]
enum Undo {
    Repair(String, String),
    RepairOneway(String, String),
    LinkFailRate(String, String),
    Latency,
    Bounce(u64),
    /// A power cut and restart: unsynced writes are lost.
    CrashRestart(u64),
}

struct Cluster {
    ids: Vec<u64>,
    engines: BTreeMap<u64, MemEngine>,
    slots: BTreeMap<u64, Slot>,
}

pub(crate) fn name(id: u64) -> String {
    format!("n{id}")
}

impl Cluster {
    fn leader(&self) -> Option<u64> {
        leader_of_slots(&self.slots)
    }
}

const BASE_LATENCY_MAX: Duration = Duration::from_millis(5);

thread_local! {
    /// The first panic of the run on this thread, with its location: a host's panic reaches
    /// `Sim::step` only as "a spawned task panicked".
    static FIRST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

fn record_panics() {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            FIRST_PANIC.with(|first| {
                if let Ok(mut first) = first.try_borrow_mut() {
                    first.get_or_insert_with(|| info.to_string());
                }
            });
            previous(info);
        }));
    });
    FIRST_PANIC.with(|first| *first.borrow_mut() = None);
}

/// Tokio numbers tasks from one counter per process, and a crashed host's runtime drops its
/// tasks shard by shard, the shard being the task's number modulo 4. The order of those drops
/// is visible (each closes its sockets, and turmoil draws the latency of each close from the
/// seeded generator), so a run would depend on how many tasks the process spawned before it: a
/// seed replayed alone could differ from the same seed run after others. Advancing the counter
/// to a multiple of 4 before every run makes each run a function of its seed alone.
fn align_task_numbers() {
    const SHARDS: u64 = 4;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime to align task numbers with");
    loop {
        let number: u64 = runtime
            .spawn(async {})
            .id()
            .to_string()
            .parse()
            .unwrap_or(0);
        if (number + 1).is_multiple_of(SHARDS) {
            return;
        }
    }
}

/// Runs in one process take turns: tokio's task counter is the process's, so two runs on two
/// threads (`cargo test` runs tests in parallel) would number each other's tasks.
static ONE_RUN_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Takes this process's turn to simulate, and makes what follows a function of `seed` alone:
/// tokio's task numbers aligned, openraft's generator seeded, panics recorded. The turn lasts
/// as long as the guard.
pub(crate) fn begin(seed: u64) -> std::sync::MutexGuard<'static, ()> {
    // A run that panicked outside the simulation leaves the lock poisoned, not the next run wrong.
    let turn = ONE_RUN_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    align_task_numbers();
    record_panics();
    raft_store::raft::seed_thread_rng(seed);
    turn
}

/// Runs one seed to the end and reports what it found.
pub fn run(options: SimOptions) -> Report {
    let _turn = begin(options.seed);
    let mut rng = SimRng::new(options.seed);
    let mut sim = simulation(options.seed, Duration::from_secs(options.load_secs + 600));
    let ids = options.node_ids();
    let (engines, slots) = add_nodes(&mut sim, &ids);
    let cluster = Cluster {
        ids: ids.clone(),
        engines,
        slots,
    };

    let world = World::new();
    let voters: Vec<u64> = (1..=options.voters).collect();
    let spare = options.spare.then(|| {
        (
            options.voters + 1,
            rng.range(5_000, options.load_secs * 1000 / 2),
        )
    });
    sim.client(
        "ctl",
        actors::controller(Rc::clone(&world), voters.clone(), spare, options.shards),
    );
    sim.client(
        "writer",
        actors::genesis_writer(
            Rc::clone(&world),
            ids.clone(),
            (0..6).map(|i| format!("g{i}")).collect(),
            rng.fork(1),
        ),
    );
    sim.client(
        "populator",
        actors::populator(
            Rc::clone(&world),
            ids.clone(),
            (0..4).map(|i| format!("log{i}")).collect(),
            (0..2).map(|i| format!("bad{i}")).collect(),
            rng.fork(2),
        ),
    );
    sim.client(
        "replicator",
        actors::replicator(
            Rc::clone(&world),
            ids.clone(),
            (0..3).map(|i| format!("rep{i}")).collect(),
            rng.fork(3),
        ),
    );
    sim.client(
        "reader",
        actors::reader(Rc::clone(&world), ids.clone(), rng.fork(4)),
    );
    // Racing clients whose every call and answer is recorded and checked for linearizability
    // when the run ends.
    let racers = if linearizability_checked() { RACERS } else { 0 };
    for racer in 0..racers {
        sim.client(
            format!("racer{racer}"),
            actors::race(
                Rc::clone(&world),
                ids.clone(),
                (0..2).map(|i| format!("race{i}")).collect(),
                racer,
                rng.fork(10 + racer),
            ),
        );
    }
    let engines: Vec<(u64, MemEngine)> = cluster
        .engines
        .iter()
        .map(|(id, e)| (*id, e.clone()))
        .collect();
    sim.client(
        "checker",
        actors::checker(Rc::clone(&world), ids.clone(), engines, rng.next_u64()),
    );

    let load_end = Duration::from_secs(options.load_secs);
    let check_at = load_end + Duration::from_secs(5);
    let give_up = check_at + Duration::from_secs(180);
    let mut next_fault = Duration::from_secs(rng.range(3, 6));
    let mut undo: Vec<(Duration, Undo)> = Vec::new();
    let mut faults: Vec<String> = Vec::new();
    let mut healed = false;
    let mut failure: Option<String> = None;
    // When each node's storage failure was first seen (cleared when the node restarts).
    let mut storage_failed: BTreeMap<u64, Duration> = BTreeMap::new();

    loop {
        // A panic anywhere in a host (a node, openraft's own assertions, an actor) is a failure
        // of the run, reported with its seed like any other.
        match std::panic::catch_unwind(AssertUnwindSafe(|| sim.step())) {
            Ok(Ok(true)) => break,
            Ok(Ok(false)) => {}
            Ok(Err(err)) => {
                failure = Some(format!("the simulation failed: {err}"));
                break;
            }
            Err(panic) => {
                let message = FIRST_PANIC
                    .with(|first| first.borrow_mut().take())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "a panic without a message".into());
                failure = Some(format!("a host panicked at {:?}: {message}", sim.elapsed()));
                break;
            }
        }
        let now = sim.elapsed();
        if let Some(stuck) = storage_failure_check(&cluster, &mut storage_failed, now) {
            failure = Some(stuck);
            break;
        }
        let mut due: Vec<Undo> = Vec::new();
        undo.retain(|(at, u)| {
            if *at <= now {
                due.push(u.clone());
                false
            } else {
                true
            }
        });
        for u in due {
            apply_undo(&mut sim, &cluster, u);
        }
        if !healed && now >= next_fault && now < load_end && world.borrow().phase == Phase::Load {
            if let Some((what, undos)) = inject(&mut sim, &cluster, &mut rng, now) {
                world
                    .borrow_mut()
                    .log_at(now.as_millis() as u64, "faults", &what);
                faults.push(format!("{:>6} ms {what}", now.as_millis()));
                undo.extend(undos);
            }
            next_fault = now + Duration::from_millis(rng.range(1_500, 5_000));
        }
        if !healed && now >= load_end {
            healed = true;
            for (_, u) in std::mem::take(&mut undo) {
                apply_undo(&mut sim, &cluster, u);
            }
            heal(&mut sim, &cluster);
            world
                .borrow_mut()
                .log_at(now.as_millis() as u64, "faults", "healed");
        }
        if now >= check_at && world.borrow().phase == Phase::Load {
            world.borrow_mut().phase = Phase::Check;
        }
        if now >= give_up {
            failure = Some(format!(
                "the run did not finish within {give_up:?} of simulated time"
            ));
            break;
        }
    }
    let simulated = sim.elapsed();
    let mut w = world.borrow_mut();
    if let Some(failure) = failure {
        w.violation("sim", failure);
    }
    if w.phase != Phase::Done && w.violations.is_empty() {
        w.violation("sim", "the checker never finished");
    }
    if linearizability_checked() {
        match chainstore_check::check(&w.history) {
            Verdict::Linearizable { operations, .. } => {
                *w.stats
                    .entry("racing operations checked linearizable")
                    .or_default() += operations as u64;
            }
            Verdict::Illegal(illegal) => w.violation("linearizability", illegal),
            Verdict::Undecided {
                execution,
                operations,
            } => w.violation(
                "linearizability",
                format!("the check of {execution} ({operations} operations) ran out of steps"),
            ),
        }
    }
    Report {
        options,
        trace_hash: w.trace.hash(),
        trace_lines: w.trace.len(),
        violations: w.violations.clone(),
        faults,
        stats: w.stats.clone(),
        tail: w.trace.tail().cloned().collect(),
        simulated,
    }
}

/// A node whose storage failed must stop Raft (no more votes, appends or acknowledgements)
/// within a second of simulated time; returns the failure when one did not.
fn storage_failure_check(
    cluster: &Cluster,
    first_seen: &mut BTreeMap<u64, Duration>,
    now: Duration,
) -> Option<String> {
    for (id, slot) in &cluster.slots {
        let slot = slot.borrow();
        let Some(failure) = slot.as_ref().and_then(|node| node.storage_failure()) else {
            first_seen.remove(id);
            continue;
        };
        let since = *first_seen.entry(*id).or_insert(now);
        let raft_runs = slot
            .as_ref()
            .is_some_and(|node| node.raft_metrics().running_state.is_ok());
        if now > since + Duration::from_secs(1) && raft_runs {
            return Some(format!(
                "n{id}: storage failed at {since:?} ({failure}) and Raft still runs at {now:?}"
            ));
        }
    }
    None
}

fn running(sim: &mut turmoil::Sim<'_>, cluster: &Cluster) -> Vec<u64> {
    cluster
        .ids
        .iter()
        .copied()
        .filter(|id| sim.is_host_running(name(*id)))
        .collect()
}

/// Picks and applies one fault; returns its description and how to undo it.
fn inject(
    sim: &mut turmoil::Sim<'_>,
    cluster: &Cluster,
    rng: &mut SimRng,
    now: Duration,
) -> Option<(String, Vec<(Duration, Undo)>)> {
    let later =
        |rng: &mut SimRng, low: u64, high: u64| now + Duration::from_millis(rng.range(low, high));
    let up = running(sim, cluster);
    if up.is_empty() {
        return None;
    }
    let ids = &cluster.ids;
    match rng.range(0, 9) {
        0 => {
            let leader = cluster.leader()?;
            let at = later(rng, 2_000, 6_000);
            let mut undos = Vec::new();
            for other in ids.iter().filter(|o| **o != leader) {
                sim.partition(name(leader), name(*other));
                undos.push((at, Undo::Repair(name(leader), name(*other))));
            }
            Some((format!("isolate leader n{leader}"), undos))
        }
        1 => {
            let size = (ids.len() - 1) / 2;
            let mut minority: Vec<u64> = Vec::new();
            while minority.len() < size {
                let pick = *rng.pick(ids);
                if !minority.contains(&pick) {
                    minority.push(pick);
                }
            }
            let at = later(rng, 2_000, 6_000);
            let mut undos = Vec::new();
            for m in &minority {
                for other in ids.iter().filter(|o| !minority.contains(o)) {
                    sim.partition(name(*m), name(*other));
                    undos.push((at, Undo::Repair(name(*m), name(*other))));
                }
            }
            Some((format!("partition minority {minority:?}"), undos))
        }
        2 => {
            let a = *rng.pick(ids);
            let b = *rng.pick(ids);
            if a == b {
                return None;
            }
            sim.partition_oneway(name(a), name(b));
            Some((
                format!("one-way partition n{a} -> n{b}"),
                vec![(
                    later(rng, 2_000, 6_000),
                    Undo::RepairOneway(name(a), name(b)),
                )],
            ))
        }
        3 => {
            let a = *rng.pick(ids);
            let b = *rng.pick(ids);
            if a == b {
                return None;
            }
            sim.set_link_fail_rate(name(a), name(b), 0.3);
            Some((
                format!("lossy link n{a} - n{b}"),
                vec![(
                    later(rng, 2_000, 6_000),
                    Undo::LinkFailRate(name(a), name(b)),
                )],
            ))
        }
        4 => {
            let spike = Duration::from_millis(rng.range(50, 400));
            sim.set_max_message_latency(spike);
            Some((
                format!("latency spike up to {spike:?}"),
                vec![(later(rng, 1_000, 4_000), Undo::Latency)],
            ))
        }
        5 | 6 => {
            let victim = *rng.pick(&up);
            let engine = &cluster.engines[&victim];
            let pending = engine.pending_batches();
            let keep = rng.range(0, pending as u64 + 1) as usize;
            sim.crash(name(victim));
            *cluster.slots[&victim].borrow_mut() = None;
            engine.crash_keeping(keep);
            Some((
                format!("crash n{victim} keeping {keep} of {pending} unsynced batches"),
                vec![(later(rng, 500, 5_000), Undo::Bounce(victim))],
            ))
        }
        7 => {
            let victim = *rng.pick(&up);
            sim.bounce(name(victim));
            *cluster.slots[&victim].borrow_mut() = None;
            Some((format!("restart n{victim}"), Vec::new()))
        }
        _ => {
            // Storage faults: the node must stop Raft at once and come back only restarted.
            let victim = *rng.pick(&up);
            let nth = rng.range(1, 40);
            let engine = &cluster.engines[&victim];
            let restart = later(rng, 2_000, 5_000);
            let (what, undo) = match rng.range(0, 5) {
                0 => {
                    engine.fail_write_after(nth);
                    (format!("write #{nth} fails"), Undo::Bounce(victim))
                }
                1 => {
                    engine.fail_sync_after(nth);
                    (format!("sync #{nth} fails"), Undo::Bounce(victim))
                }
                2 => {
                    // What the failed sync forgot is still visible until the machine restarts:
                    // the undo is a crash, which drops it.
                    let keep = rng.range(0, 3) as usize;
                    engine.fail_sync_after_losing(nth, keep);
                    (
                        format!("sync #{nth} fails keeping {keep} batches, forgetting the rest"),
                        Undo::CrashRestart(victim),
                    )
                }
                3 => {
                    engine.fail_read_after(nth * 10);
                    (format!("read #{} fails", nth * 10), Undo::Bounce(victim))
                }
                _ => {
                    engine.corrupt_read_after(nth * 10);
                    (
                        format!("read #{} returns a damaged value", nth * 10),
                        Undo::Bounce(victim),
                    )
                }
            };
            Some((
                format!("storage fault on n{victim}: {what}"),
                vec![(restart, undo)],
            ))
        }
    }
}

fn apply_undo(sim: &mut turmoil::Sim<'_>, cluster: &Cluster, undo: Undo) {
    match undo {
        Undo::Repair(a, b) => sim.repair(a, b),
        Undo::RepairOneway(a, b) => sim.repair_oneway(a, b),
        Undo::LinkFailRate(a, b) => sim.set_link_fail_rate(a, b, 0.0),
        Undo::Latency => sim.set_max_message_latency(BASE_LATENCY_MAX),
        Undo::Bounce(id) => {
            cluster.engines[&id].clear_faults();
            sim.bounce(name(id));
            *cluster.slots[&id].borrow_mut() = None;
        }
        Undo::CrashRestart(id) => {
            sim.crash(name(id));
            *cluster.slots[&id].borrow_mut() = None;
            cluster.engines[&id].clear_faults();
            cluster.engines[&id].crash();
            sim.bounce(name(id));
        }
    }
}

/// Ends every fault: links repaired, latency back to normal, every node running on a sound disk.
fn heal(sim: &mut turmoil::Sim<'_>, cluster: &Cluster) {
    sim.set_max_message_latency(BASE_LATENCY_MAX);
    for a in &cluster.ids {
        for b in &cluster.ids {
            if a != b {
                sim.repair(name(*a), name(*b));
                sim.set_link_fail_rate(name(*a), name(*b), 0.0);
            }
        }
    }
    for id in &cluster.ids {
        let engine = &cluster.engines[id];
        engine.clear_faults();
        if !sim.is_host_running(name(*id)) {
            sim.bounce(name(*id));
            *cluster.slots[id].borrow_mut() = None;
        }
    }
}
