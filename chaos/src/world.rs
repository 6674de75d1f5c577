//! The shared state of one simulation run: the models the workloads keep of what the truth is,
//! the invariant checks against them, the trace, and the violations found.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;

use chainstore_check::History;
use chainstore_model::{ChainEvent, Coverage, EventId, LogEvent};
use serde_json::Value;

/// Where the run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The cluster is being initialized.
    Starting,
    /// Workloads run while faults are injected.
    Load,
    /// Workloads stop; the checker verifies the final state.
    Check,
    /// Everything is done.
    Done,
}

/// The trace of a run: every operation and fault, in order, hashed as it goes. Two runs of the
/// same seed must produce the same hash.
#[derive(Debug, Default)]
pub struct Trace {
    hash: u64,
    lines: u64,
    tail: VecDeque<String>,
}

/// Lines of the trace kept for a failure report.
const TRACE_TAIL_LINES: usize = 60;

impl Trace {
    /// Appends one line.
    pub fn record(&mut self, line: String) {
        if self.lines == 0 {
            self.hash = 0xcbf2_9ce4_8422_2325;
        }
        for byte in line.as_bytes().iter().chain(b"\n") {
            self.hash ^= u64::from(*byte);
            self.hash = self.hash.wrapping_mul(0x0100_0000_01b3);
        }
        self.lines += 1;
        if self.tail.len() == TRACE_TAIL_LINES {
            self.tail.pop_front();
        }
        self.tail.push_back(line);
    }

    /// The hash of every line so far.
    pub fn hash(&self) -> u64 {
        self.hash
    }

    /// Lines recorded.
    pub fn len(&self) -> u64 {
        self.lines
    }

    /// True before anything was recorded.
    pub fn is_empty(&self) -> bool {
        self.lines == 0
    }

    /// The last lines.
    pub fn tail(&self) -> impl Iterator<Item = &String> {
        self.tail.iter()
    }
}

/// An execution written by native appends under `genesis`: one writer, sequential events.
#[derive(Debug, Default)]
pub struct GenesisModel {
    /// Events sent, in chain order: the acknowledged ones, then at most one whose answer is
    /// still unknown (it is retried unchanged until acknowledged).
    pub events: Vec<(EventId, Value)>,
    /// How many of `events` are acknowledged.
    pub acked: usize,
}

/// An execution built by populate from a model authoritative log.
#[derive(Debug, Default)]
pub struct LogModel {
    /// The authoritative log: it only grows.
    pub truth: Vec<LogEvent>,
    /// The longest log acknowledged as in sync: a linearizable authoritative answer holds at
    /// least this many events.
    pub synced_len: usize,
    /// Whether damaged logs (forks, extra roots, cycles) are sent to this execution.
    pub damaged: bool,
    /// The coverage linearizable reads returned (clean executions only), with when each
    /// returned (simulated milliseconds); the latest 64.
    pub observed_coverage: Vec<(u64, Coverage)>,
    /// Lengths of the clean logs ever sent. A populate makes its log servable whole or not at
    /// all, so an authoritative answer always has one of these lengths; any other is a populate
    /// served half-done.
    pub submitted: std::collections::BTreeSet<usize>,
}

/// An execution fed by out-of-order replicated deliveries only: never servable.
#[derive(Debug, Default)]
pub struct ReplicatedModel {
    /// The true events, seq 1..n.
    pub truth: Vec<ChainEvent>,
    /// Seqs acknowledged as stored.
    pub stored: std::collections::BTreeSet<u64>,
}

/// Everything the actors of a run share.
#[derive(Debug)]
pub struct World {
    pub phase: Phase,
    pub trace: Trace,
    pub violations: Vec<String>,
    pub genesis: BTreeMap<String, GenesisModel>,
    pub logs: BTreeMap<String, LogModel>,
    pub replicated: BTreeMap<String, ReplicatedModel>,
    pub stats: BTreeMap<&'static str, u64>,
    /// Every call the racing processes made and what they were told, checked for
    /// linearizability when the run ends.
    pub history: History,
}

/// The handle the actors hold.
pub type Shared = Rc<RefCell<World>>;

// Each actor registers the models of its executions before its first operation and none is ever
// removed, and an actor only picks names from the list it registered: a lookup cannot miss.
impl World {
    /// The model of the genesis execution `name`, registered by its writer.
    pub fn genesis_model(&mut self, name: &str) -> &mut GenesisModel {
        self.genesis
            .get_mut(name)
            .unwrap_or_else(|| panic!("{name} has no genesis model"))
    }

    /// The model of the populated execution `name`, registered by the populator.
    pub fn log_model(&mut self, name: &str) -> &mut LogModel {
        self.logs
            .get_mut(name)
            .unwrap_or_else(|| panic!("{name} has no log model"))
    }

    /// The model of the replicated execution `name`, registered by the replicator.
    pub fn replicated_model(&mut self, name: &str) -> &mut ReplicatedModel {
        self.replicated
            .get_mut(name)
            .unwrap_or_else(|| panic!("{name} has no replicated model"))
    }

    /// Records the coverage a linearizable read of the clean log execution `name` returned, and
    /// checks it did not shrink under the same root: a read that started at `started_ms` sees
    /// no less than any read that returned before it started (a read overlapping a populate, or
    /// another read, may see the coverage from before it).
    pub fn observe_coverage(
        &mut self,
        actor: &str,
        name: &str,
        started_ms: u64,
        coverage: Option<Coverage>,
    ) {
        let Some(now) = coverage else { return };
        let returned_ms = now_ms();
        let shrunk = self.logs.get(name).and_then(|m| {
            m.observed_coverage
                .iter()
                .filter(|(returned, before)| {
                    *returned < started_ms
                        && before.root_event_id == now.root_event_id
                        && now.total < before.total
                })
                .map(|(_, before)| before.total)
                .max()
        });
        if let Some(before) = shrunk {
            self.violation(
                actor,
                format!(
                    "{name}: coverage shrank from {before} to {} under one root",
                    now.total
                ),
            );
        }
        if let Some(model) = self.logs.get_mut(name) {
            model.observed_coverage.push((returned_ms, now));
            // Older observations are covered by the newer ones of the same root.
            if model.observed_coverage.len() > 64 {
                model.observed_coverage.remove(0);
            }
        }
    }
}

/// Milliseconds of simulated time.
pub fn now_ms() -> u64 {
    turmoil::sim_elapsed().map_or(0, |d| d.as_millis() as u64)
}

impl World {
    /// An empty world in the starting phase.
    pub fn new() -> Shared {
        Rc::new(RefCell::new(World {
            phase: Phase::Starting,
            trace: Trace::default(),
            violations: Vec::new(),
            genesis: BTreeMap::new(),
            logs: BTreeMap::new(),
            replicated: BTreeMap::new(),
            stats: BTreeMap::new(),
            history: History::default(),
        }))
    }

    /// Records a trace line stamped with the simulated time (inside a host).
    pub fn log(&mut self, actor: &str, line: impl std::fmt::Display) {
        self.log_at(now_ms(), actor, line);
    }

    /// Records a trace line stamped with `at_ms` (the simulation driver has no host clock).
    pub fn log_at(&mut self, at_ms: u64, actor: &str, line: impl std::fmt::Display) {
        self.trace.record(format!("{at_ms:>7} {actor}: {line}"));
    }

    /// Records a violated invariant.
    pub fn violation(&mut self, actor: &str, what: impl std::fmt::Display) {
        let message = format!("at {} ms, {actor}: {what}", now_ms());
        self.trace.record(format!("VIOLATION {message}"));
        self.violations.push(message);
    }

    /// Counts one occurrence of `what`.
    pub fn count(&mut self, what: &'static str) {
        *self.stats.entry(what).or_default() += 1;
    }
}

/// What a guarded read's answer is checked against.
#[derive(Debug, Clone)]
pub enum Floor {
    /// A linearizable read: at least this many events.
    AtLeast(usize),
    /// A local read: any state the execution was ever in.
    Any,
}

/// Checks an authoritative answer for a genesis execution: a prefix of what the writer sent,
/// never empty, and for a linearizable read no shorter than what was acknowledged before it.
pub fn check_genesis(
    model: &GenesisModel,
    events: &[ChainEvent],
    floor: &Floor,
) -> Result<(), String> {
    if events.is_empty() {
        return Err("authoritative [] for an execution with events".into());
    }
    if events.len() > model.events.len() {
        return Err(format!(
            "{} events served, only {} ever sent",
            events.len(),
            model.events.len()
        ));
    }
    for (i, event) in events.iter().enumerate() {
        let (id, payload) = &model.events[i];
        let prev = (i > 0).then(|| model.events[i - 1].0.clone());
        if event.exec_seq != i as u64 + 1
            || &event.event_id != id
            || &event.payload != payload
            || event.prev_event_id != prev
        {
            return Err(format!(
                "position {i} served {} (seq {}), the writer sent {id}",
                event.event_id, event.exec_seq
            ));
        }
    }
    if let Floor::AtLeast(n) = floor {
        if events.len() < *n {
            return Err(format!(
                "a linearizable read served {} events, {n} were acknowledged before it",
                events.len()
            ));
        }
    }
    Ok(())
}

/// Checks an authoritative answer for a populated execution: a prefix of the authoritative log
/// of a length some populate sent, and for a linearizable read no shorter than the longest log
/// acknowledged in sync before it.
pub fn check_log(model: &LogModel, events: &[ChainEvent], floor: &Floor) -> Result<(), String> {
    if events.len() > model.truth.len() {
        return Err(format!(
            "{} events served, the log only ever had {}",
            events.len(),
            model.truth.len()
        ));
    }
    for (i, event) in events.iter().enumerate() {
        let logged = &model.truth[i];
        if event.exec_seq != i as u64 + 1
            || event.event_id != logged.event_id
            || event.prev_event_id != logged.prev_event_id
            || event.payload != logged.payload
        {
            return Err(format!(
                "position {i} served {}, the log holds {}",
                event.event_id, logged.event_id
            ));
        }
    }
    if let Floor::AtLeast(n) = floor {
        if events.len() < *n {
            return Err(format!(
                "a linearizable read served {} events, a log of {n} was acknowledged before it",
                events.len()
            ));
        }
    }
    if !model.submitted.contains(&events.len()) {
        return Err(format!(
            "{} events served, but no log of that length was ever populated: a partial populate",
            events.len()
        ));
    }
    Ok(())
}
