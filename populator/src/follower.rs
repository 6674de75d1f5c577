//! The populator: keeps a cluster in step with an authoritative PostgreSQL event log.
//!
//! It follows the table by its order column (see [`crate::postgres`]): each poll reads the rows
//! past its cursor, and every execution they touch is read whole from the log, in log order,
//! and populated through the [`Reconciler`] (so `stale_log` becomes staleness or a recorded
//! second writer, never a blind retry), a bounded number at once. The durable checkpoint — a
//! file, written whole or not at all — moves only past positions that no running transaction
//! can still fill in; after a restart the rows after it are read again (populating is
//! idempotent). Every verdict is counted; the unhealthy ones (divergence, refusal, a row that is
//! not an event, a request the cluster rejects) are also logged and kept, with the execution and
//! the reason, for `GET /problems`. A comparator samples executions and reports agreement and
//! coverage together: a store that refuses everything agrees perfectly and covers nothing.

use std::collections::{BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chainstore_model::ExecutionId;
use futures_util::StreamExt;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use chainstore_client::Client;
use chainstore_model::LogEvent;

use crate::postgres::{PgLog, RowRef};
use chainstore_client::{
    BoxFuture, Comparator, LogError, LogSource, ReconcileError, Reconciler, Verdict,
};

/// How the populator paces itself.
#[derive(Debug, Clone)]
pub struct Options {
    /// Executions populated at once.
    pub parallelism: usize,
    /// Rows read per poll.
    pub batch_rows: i64,
    /// Pause between polls once caught up (a notification ends it early).
    pub poll_interval: Duration,
    /// How long a position must have been read before the checkpoint may pass it (with every
    /// transaction running then ended): covers an insert that drew its order value but had no
    /// transaction id yet when the position was read.
    pub settle: Duration,
    /// Rows read but not yet behind the checkpoint past which the checkpoint is moved anyway
    /// (a transaction left open for hours must not grow the populator's memory); counted in
    /// `chainstore_populator_horizon_forced_total`.
    pub window_rows_max: usize,
    /// Re-reads of the log before a store that runs ahead is judged a second writer.
    pub rereads: u32,
    /// Pause between those re-reads.
    pub reread_pause: Duration,
    /// Pause between comparator runs (`None`: no comparator).
    pub compare_every: Option<Duration>,
    /// Executions sampled per comparator run.
    pub compare_sample: usize,
    /// Unhealthy verdicts kept for `GET /problems` (the oldest go first).
    pub problems_max: usize,
    /// Rebuild executions found diverged (a second writer, a content divergence) from the log,
    /// keeping what they held in quarantine. Off by default: the populator then only proposes
    /// the repair (the `repair` field of the problem).
    pub repair: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            parallelism: 16,
            batch_rows: 5_000,
            poll_interval: Duration::from_secs(1),
            settle: Duration::from_secs(1),
            window_rows_max: 1_000_000,
            rereads: 3,
            reread_pause: Duration::from_millis(200),
            compare_every: Some(Duration::from_secs(30)),
            compare_sample: 50,
            problems_max: 1_000,
            repair: false,
        }
    }
}

/// The durable position: every row at or below it has been populated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct CheckpointFile {
    /// The table it belongs to (a checkpoint of another table is refused).
    table: String,
    position: i64,
}

/// The checkpoint file.
pub struct Checkpoint {
    path: PathBuf,
    table: String,
}

impl Checkpoint {
    /// The checkpoint at `path` for `table`.
    pub fn new(path: impl Into<PathBuf>, table: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            table: table.into(),
        }
    }

    /// The stored position (`None`: nothing populated yet).
    pub fn load(&self) -> Result<Option<i64>, String> {
        let bytes = match std::fs::read(&self.path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("{}: {e}", self.path.display())),
        };
        let file: CheckpointFile = serde_json::from_slice(&bytes)
            .map_err(|e| format!("{}: not a checkpoint: {e}", self.path.display()))?;
        if file.table != self.table {
            return Err(format!(
                "{} is the checkpoint of table {:?}, not {:?}",
                self.path.display(),
                file.table,
                self.table
            ));
        }
        Ok(Some(file.position))
    }

    /// Stores `position`: a new file synced, renamed over the old one, the directory synced.
    pub fn store(&self, position: i64) -> Result<(), String> {
        let file = CheckpointFile {
            table: self.table.clone(),
            position,
        };
        let err = |e: std::io::Error| format!("{}: {e}", self.path.display());
        let tmp = self.path.with_extension("tmp");
        let bytes = serde_json::to_vec(&file).map_err(|e| e.to_string())?;
        {
            use std::io::Write;
            let mut f = std::fs::File::create(&tmp).map_err(err)?;
            f.write_all(&bytes).map_err(err)?;
            f.sync_all().map_err(err)?;
        }
        std::fs::rename(&tmp, &self.path).map_err(err)?;
        let dir = self
            .path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(err)
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabel {
    kind: String,
}

/// The populator's metrics (Prometheus text format at `GET /metrics`).
pub struct Metrics {
    registry: Registry,
    populated: Counter,
    outcomes: Family<OutcomeLabel, Counter>,
    errors: Family<ErrorLabel, Counter>,
    log_position: Gauge,
    populated_position: Gauge,
    checkpoint_position: Gauge,
    lag_rows: Gauge,
    late_rows: Counter,
    horizon_forced: Counter,
    compared: Counter,
    answered: Counter,
    agreed: Counter,
    behind: Counter,
    agreement: Gauge<f64, AtomicU64>,
    coverage: Gauge<f64, AtomicU64>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("chainstore_populator");
        let m = Self {
            populated: Counter::default(),
            outcomes: Family::default(),
            errors: Family::default(),
            log_position: Gauge::default(),
            populated_position: Gauge::default(),
            checkpoint_position: Gauge::default(),
            lag_rows: Gauge::default(),
            late_rows: Counter::default(),
            horizon_forced: Counter::default(),
            compared: Counter::default(),
            answered: Counter::default(),
            agreed: Counter::default(),
            behind: Counter::default(),
            agreement: Gauge::default(),
            coverage: Gauge::default(),
            registry: Registry::default(),
        };
        registry.register(
            "executions_populated",
            "Executions read from the log and populated (each time one is)",
            m.populated.clone(),
        );
        registry.register(
            "outcomes",
            "Verdicts of populating an execution: in_sync, extended, staleness, second_writer, \
             diverged, refused, invalid_log (a row that is not an event), rejected (the cluster \
             refused the request), repaired and repair_refused (with --repair)",
            m.outcomes.clone(),
        );
        registry.register(
            "errors",
            "Polls or populates that failed and will be tried again: log_unavailable, \
             cluster_unavailable",
            m.errors.clone(),
        );
        registry.register(
            "log_position",
            "The largest order value in the log's table",
            m.log_position.clone(),
        );
        registry.register(
            "populated_position",
            "The order value the populator has read and populated through",
            m.populated_position.clone(),
        );
        registry.register(
            "checkpoint_position",
            "The durable checkpoint (a restart resumes after it)",
            m.checkpoint_position.clone(),
        );
        registry.register(
            "lag_rows",
            "log_position minus populated_position",
            m.lag_rows.clone(),
        );
        registry.register(
            "late_rows",
            "Rows that committed after the populator had read past their order value",
            m.late_rows.clone(),
        );
        registry.register(
            "horizon_forced",
            "Times the checkpoint passed a position while a transaction older than it was still \
             open (window_rows_max reached)",
            m.horizon_forced.clone(),
        );
        registry.register(
            "compared",
            "Executions the comparator sampled",
            m.compared.clone(),
        );
        registry.register(
            "answered",
            "Sampled executions the store answered authoritatively",
            m.answered.clone(),
        );
        registry.register(
            "agreed",
            "Authoritative answers equal to the log's chain or to its beginning",
            m.agreed.clone(),
        );
        registry.register(
            "behind",
            "Agreed answers shorter than the log's chain read after them (not caught up yet)",
            m.behind.clone(),
        );
        registry.register(
            "agreement_ratio",
            "Agreement of the last comparator run (agreed / answered)",
            m.agreement.clone(),
        );
        registry.register(
            "coverage_ratio",
            "Coverage of the last comparator run (answered / compared): read with agreement",
            m.coverage.clone(),
        );
        // Every series exists from the start, at zero, so a rate or an alert has a baseline.
        for outcome in OUTCOMES {
            let _ = m.outcomes.get_or_create(&OutcomeLabel {
                outcome: outcome.to_string(),
            });
        }
        for kind in ERROR_KINDS {
            let _ = m.errors.get_or_create(&ErrorLabel {
                kind: kind.to_string(),
            });
        }
        Self { registry, ..m }
    }
}

/// The verdicts counted in `outcomes_total`.
const OUTCOMES: [&str; 10] = [
    "in_sync",
    "extended",
    "staleness",
    "second_writer",
    "diverged",
    "refused",
    "invalid_log",
    "rejected",
    "repaired",
    "repair_refused",
];

/// The retried failures counted in `errors_total`.
const ERROR_KINDS: [&str; 2] = ["log_unavailable", "cluster_unavailable"];

impl Metrics {
    /// The metrics in Prometheus' text format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    fn outcome(&self, outcome: &str) {
        self.outcomes
            .get_or_create(&OutcomeLabel {
                outcome: outcome.to_string(),
            })
            .inc();
    }

    fn error(&self, kind: &str) {
        self.errors
            .get_or_create(&ErrorLabel {
                kind: kind.to_string(),
            })
            .inc();
    }
}

/// An unhealthy verdict, kept for `GET /problems`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Problem {
    /// The execution.
    pub execution: String,
    /// The verdict: second_writer, diverged, refused, invalid_log or rejected.
    pub outcome: String,
    /// Why, in words (the store's reason, the positions that differ, the bad row).
    pub detail: String,
    /// For a confirmed divergence the populator did not repair itself: the command that
    /// rebuilds the execution from the log, keeping what the store held in quarantine.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repair: Option<String>,
}

/// What the populator shares with its HTTP endpoints.
pub struct Shared {
    /// The metrics.
    pub metrics: Metrics,
    problems: Mutex<VecDeque<Problem>>,
    problems_max: usize,
    /// When a poll last succeeded.
    last_poll: Mutex<Option<Instant>>,
}

impl Shared {
    fn new(problems_max: usize) -> Self {
        Self {
            metrics: Metrics::default(),
            problems: Mutex::new(VecDeque::new()),
            problems_max,
            last_poll: Mutex::new(None),
        }
    }

    /// The unhealthy verdicts kept, oldest first.
    pub fn problems(&self) -> Vec<Problem> {
        self.problems
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect()
    }

    /// Time since the last successful poll (`None`: none yet).
    pub fn since_last_poll(&self) -> Option<Duration> {
        self.last_poll
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .map(|t| t.elapsed())
    }

    fn problem(&self, execution: &str, outcome: &str, detail: String) {
        self.problem_with_repair(execution, outcome, detail, None);
    }

    fn problem_with_repair(
        &self,
        execution: &str,
        outcome: &str,
        detail: String,
        repair: Option<String>,
    ) {
        tracing::warn!(execution, outcome, detail = %detail, repair, "execution needs attention");
        let mut problems = self.problems.lock().unwrap_or_else(|p| p.into_inner());
        if problems.len() >= self.problems_max.max(1) {
            problems.pop_front();
        }
        problems.push_back(Problem {
            execution: execution.to_string(),
            outcome: outcome.to_string(),
            detail,
            repair,
        });
    }
}

/// Order values of each execution's rows that a populate with a verdict included, so that a
/// row read later (an execution's rows are spread over many polls) does not populate it again.
/// Only rows the populate's own read of the log returned count: a row that committed after
/// that read, whatever its order value, is populated. Bounded: forgotten all at once when full
/// (forgetting only costs populates that find nothing new).
#[derive(Default)]
struct PopulatedRows {
    by_execution: std::collections::HashMap<String, Vec<i64>>,
    orders: usize,
}

/// Order values [`PopulatedRows`] keeps, all executions together.
const POPULATED_ROWS_MAX: usize = 2_000_000;

impl PopulatedRows {
    fn contains(&self, exec: &str, order: i64) -> bool {
        self.by_execution
            .get(exec)
            .is_some_and(|orders| orders.binary_search(&order).is_ok())
    }

    fn record(&mut self, exec: &str, mut orders: Vec<i64>) {
        if let Some(old) = self.by_execution.remove(exec) {
            self.orders -= old.len();
        }
        if self.orders + orders.len() > POPULATED_ROWS_MAX {
            self.by_execution.clear();
            self.orders = 0;
        }
        if orders.len() <= POPULATED_ROWS_MAX / 10 {
            orders.sort_unstable();
            self.orders += orders.len();
            self.by_execution.insert(exec.to_string(), orders);
        }
    }
}

/// The log as the reconciler reads it, remembering the order values of the last read.
struct Recording<'a> {
    log: &'a PgLog,
    last: Mutex<Vec<i64>>,
}

impl LogSource for Recording<'_> {
    fn read_log<'a>(
        &'a self,
        exec: &'a ExecutionId,
    ) -> BoxFuture<'a, Result<Vec<LogEvent>, LogError>> {
        Box::pin(async move {
            let (events, orders) = self.log.events_with_order(exec.as_str()).await?;
            *self.last.lock().unwrap_or_else(|p| p.into_inner()) = orders;
            Ok(events)
        })
    }
}

/// A failure worth trying again later: the log or the cluster could not be reached.
#[derive(Debug)]
struct Transient(String);

/// The populator: one table followed into one cluster.
pub struct Populator {
    client: Client,
    log: Arc<PgLog>,
    checkpoint: Checkpoint,
    options: Options,
    shared: Arc<Shared>,
    wake: Arc<Notify>,
    populated_rows: Mutex<PopulatedRows>,
}

/// Where the populator is in the table.
struct Cursor {
    /// The durable checkpoint: every row at or below it is populated.
    safe: i64,
    /// Rows are read past this.
    read: i64,
    /// Order values in `(safe, read]` already populated.
    seen: BTreeSet<i64>,
    /// Positions read, waiting for the transactions running then to end: (xmax then, position,
    /// when read).
    pending: VecDeque<(u64, i64, Instant)>,
}

impl Populator {
    /// A populator of `log` into `client`, resuming from `checkpoint`.
    pub fn new(client: Client, log: PgLog, checkpoint: Checkpoint, options: Options) -> Self {
        let shared = Arc::new(Shared::new(options.problems_max));
        Self {
            client,
            log: Arc::new(log),
            checkpoint,
            options,
            shared,
            wake: Arc::new(Notify::new()),
            populated_rows: Mutex::default(),
        }
    }

    /// What the HTTP endpoints read.
    pub fn shared(&self) -> Arc<Shared> {
        Arc::clone(&self.shared)
    }

    /// Wakes the poll loop early (a `NOTIFY` arrived).
    pub fn waker(&self) -> Arc<Notify> {
        Arc::clone(&self.wake)
    }

    /// Follows the table until `stop` resolves. Fails only when the checkpoint cannot be read
    /// or written (anything else is retried).
    pub async fn run(&self, stop: impl std::future::Future<Output = ()>) -> Result<(), String> {
        tokio::pin!(stop);
        let start = self.checkpoint.load()?.unwrap_or(i64::MIN);
        let mut cursor = Cursor {
            safe: start,
            read: start,
            seen: BTreeSet::new(),
            pending: VecDeque::new(),
        };
        self.shared.metrics.checkpoint_position.set(start.max(0));
        let mut backoff = Duration::from_millis(100);
        let mut progress = Instant::now();
        let started = Instant::now();
        let populated_at_start = self.shared.metrics.populated.get();
        loop {
            let caught_up = match self.step(&mut cursor).await {
                Ok(caught_up) => {
                    backoff = Duration::from_millis(100);
                    *self
                        .shared
                        .last_poll
                        .lock()
                        .unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
                    caught_up
                }
                Err(StepError::Checkpoint(e)) => return Err(e),
                Err(StepError::Transient(Transient(e))) => {
                    tracing::warn!(error = %e, retry_in_ms = backoff.as_millis() as u64, "poll failed");
                    tokio::select! {
                        _ = &mut stop => return Ok(()),
                        _ = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                    continue;
                }
            };
            let m = &self.shared.metrics;
            if progress.elapsed() >= Duration::from_secs(5) && m.lag_rows.get() > 0 {
                progress = Instant::now();
                let done = m.populated.get() - populated_at_start;
                tracing::info!(
                    position = cursor.read,
                    log_position = m.log_position.get(),
                    executions_populated = done,
                    per_second = (done as f64 / started.elapsed().as_secs_f64()) as u64,
                    "catching up"
                );
            }
            if caught_up {
                tokio::select! {
                    _ = &mut stop => return Ok(()),
                    _ = self.wake.notified() => {}
                    _ = tokio::time::sleep(self.options.poll_interval) => {}
                }
            } else if futures_util::poll!(&mut stop).is_ready() {
                return Ok(());
            }
        }
    }

    /// One poll: populates what it found, moves the cursor and the checkpoint. True when the
    /// poll found fewer rows than it asked for (nothing more to read now).
    async fn step(&self, c: &mut Cursor) -> Result<bool, StepError> {
        let m = &self.shared.metrics;
        let poll = self
            .log
            .poll(c.safe, c.read, self.options.batch_rows)
            .await
            .map_err(|e| {
                m.error("log_unavailable");
                Transient(e.to_string())
            })?;
        let mut rows: Vec<RowRef> = Vec::new();
        if poll.window_rows != c.seen.len() as u64 {
            // Rows behind the cursor that were not there when it passed: transactions that
            // drew their order value earlier and committed later.
            let window = self.log.window(c.safe, c.read).await.map_err(|e| {
                m.error("log_unavailable");
                Transient(e.to_string())
            })?;
            let late: Vec<RowRef> = window
                .into_iter()
                .filter(|r| !c.seen.contains(&r.order))
                .collect();
            m.late_rows.inc_by(late.len() as u64);
            rows.extend(late);
        }
        let caught_up = (poll.rows.len() as i64) < self.options.batch_rows;
        rows.extend(poll.rows.iter().cloned());
        let mut executions: Vec<String> = Vec::new();
        {
            let populated = self
                .populated_rows
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let mut listed = std::collections::HashSet::new();
            for r in &rows {
                if !populated.contains(&r.execution, r.order) && listed.insert(r.execution.as_str())
                {
                    executions.push(r.execution.clone());
                }
            }
        }
        let outcomes: Vec<Result<(), Transient>> = futures_util::stream::iter(executions)
            .map(|exec| self.populate_one(exec))
            .buffer_unordered(self.options.parallelism.max(1))
            .collect()
            .await;
        if let Some(Err(e)) = outcomes.into_iter().find(Result::is_err) {
            return Err(e.into());
        }
        c.seen.extend(rows.iter().map(|r| r.order));
        if let Some(last) = poll.rows.last() {
            c.read = last.order;
        }
        // A poll that moved nothing adds no position: the older entry for it retires first,
        // and an open transaction must not grow this queue by one entry per poll.
        if c.pending.back().map(|&(_, position, _)| position) != Some(c.read) {
            c.pending.push_back((poll.xmax, c.read, Instant::now()));
        }
        let before = c.safe;
        while let Some(&(xmax, position, read_at)) = c.pending.front() {
            if poll.xmin >= xmax && read_at.elapsed() >= self.options.settle {
                c.safe = c.safe.max(position);
                c.pending.pop_front();
            } else {
                break;
            }
        }
        if c.seen.len() > self.options.window_rows_max {
            tracing::warn!(
                position = c.read,
                "a transaction older than the rows read is still open; the checkpoint passes it"
            );
            m.horizon_forced.inc();
            c.safe = c.read;
            c.pending.clear();
        }
        c.seen = c.seen.split_off(&c.safe.saturating_add(1));
        if c.safe != before {
            self.checkpoint
                .store(c.safe)
                .map_err(StepError::Checkpoint)?;
        }
        if let Some(p) = poll.log_position {
            m.log_position.set(p);
            m.lag_rows.set(p.saturating_sub(c.read.max(0)).max(0));
        }
        m.populated_position.set(c.read.max(0));
        m.checkpoint_position.set(c.safe.max(0));
        Ok(caught_up)
    }

    /// Reads one execution from the log and populates it; a verdict is recorded, an
    /// unreachable log or cluster is returned for a retry.
    async fn populate_one(&self, exec: String) -> Result<(), Transient> {
        let m = &self.shared.metrics;
        let id = match ExecutionId::new(&exec) {
            Ok(id) => id,
            Err(e) => {
                m.outcome("invalid_log");
                self.shared
                    .problem(&exec, "invalid_log", format!("execution id: {e}"));
                return Ok(());
            }
        };
        let source = Recording {
            log: &self.log,
            last: Mutex::default(),
        };
        let mut reconciler = Reconciler::new(&self.client, &source);
        reconciler.rereads_max = self.options.rereads;
        reconciler.reread_pause = self.options.reread_pause;
        match reconciler.reconcile(&id).await {
            Ok(verdict) => {
                let orders =
                    std::mem::take(&mut *source.last.lock().unwrap_or_else(|p| p.into_inner()));
                self.populated_rows
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .record(&exec, orders);
                m.populated.inc();
                let label = verdict_label(&verdict);
                m.outcome(label);
                let repairable = matches!(
                    verdict,
                    Verdict::SecondWriter { .. } | Verdict::Diverged { .. }
                );
                if repairable && self.options.repair {
                    self.shared.problem(&exec, label, verdict_detail(&verdict));
                    return self.repair(&id, label, &verdict).await;
                }
                if verdict.is_divergence() {
                    let repair = repairable.then(|| {
                        format!(
                            "chainctl repair {exec} --from-postgres \"$DSN\" --reason '{label} \
                             found by the populator'"
                        )
                    });
                    self.shared
                        .problem_with_repair(&exec, label, verdict_detail(&verdict), repair);
                }
                Ok(())
            }
            Err(ReconcileError::Log(LogError::Invalid(e))) => {
                m.outcome("invalid_log");
                self.shared.problem(&exec, "invalid_log", e);
                Ok(())
            }
            Err(ReconcileError::Log(e @ LogError::Unavailable(_))) => {
                m.error("log_unavailable");
                Err(Transient(e.to_string()))
            }
            Err(ReconcileError::Client(e)) if e.is_retryable() => {
                m.error("cluster_unavailable");
                Err(Transient(e.to_string()))
            }
            Err(ReconcileError::Client(e)) => {
                m.outcome("rejected");
                self.shared.problem(&exec, "rejected", e.to_string());
                Ok(())
            }
        }
    }

    /// Rebuilds a diverged execution from the log as it reads now (configured with
    /// [`Options::repair`]): the store keeps what it held in a quarantine record.
    async fn repair(
        &self,
        id: &ExecutionId,
        label: &str,
        verdict: &Verdict,
    ) -> Result<(), Transient> {
        let m = &self.shared.metrics;
        let exec = id.as_str();
        let events = match self.log.read_log(id).await {
            Ok(events) => events,
            Err(LogError::Invalid(e)) => {
                m.outcome("invalid_log");
                self.shared.problem(exec, "invalid_log", e);
                return Ok(());
            }
            Err(e @ LogError::Unavailable(_)) => {
                m.error("log_unavailable");
                return Err(Transient(e.to_string()));
            }
        };
        let reason = format!(
            "{label} found by the populator: {}",
            verdict_detail(verdict)
        );
        let reason: String = reason.chars().take(1_000).collect();
        match self.client.rebuild(id, &events, &reason).await {
            Ok(answer) => {
                m.outcome("repaired");
                self.shared.problem(
                    exec,
                    "repaired",
                    format!(
                        "rebuilt from the log ({} events); what the store held is quarantine \
                         record {} ({})",
                        answer.total, answer.quarantine.number, answer.quarantine.diagnosis
                    ),
                );
                Ok(())
            }
            Err(e) if e.is_retryable() => {
                m.error("cluster_unavailable");
                Err(Transient(e.to_string()))
            }
            Err(e) => {
                m.outcome("repair_refused");
                self.shared.problem(exec, "repair_refused", e.to_string());
                Ok(())
            }
        }
    }

    /// Compares a sample of executions with the log every `compare_every`, until `stop`.
    pub async fn compare(&self, stop: impl std::future::Future<Output = ()>) {
        let Some(every) = self.options.compare_every else {
            return stop.await;
        };
        tokio::pin!(stop);
        let mut comparator = Comparator::new();
        let m = &self.shared.metrics;
        loop {
            tokio::select! {
                _ = &mut stop => return,
                _ = tokio::time::sleep(every) => {}
            }
            let sample = match self.log.sample(self.options.compare_sample).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "comparator: cannot sample the log");
                    continue;
                }
            };
            let ids: Vec<ExecutionId> = sample
                .iter()
                .filter_map(|e| ExecutionId::new(e).ok())
                .collect();
            match comparator.run(&self.client, &*self.log, &ids).await {
                Ok(run) => {
                    m.compared.inc_by(run.compared);
                    m.answered.inc_by(run.answered);
                    m.agreed.inc_by(run.agreed);
                    m.behind.inc_by(run.behind);
                    m.agreement.set(run.agreement());
                    m.coverage.set(run.coverage());
                    tracing::info!(
                        compared = run.compared,
                        answered = run.answered,
                        agreed = run.agreed,
                        behind = run.behind,
                        agreement = run.agreement(),
                        coverage = run.coverage(),
                        "comparator run"
                    );
                }
                Err(e) => tracing::warn!(error = %e, "comparator run failed"),
            }
        }
    }
}

enum StepError {
    Transient(Transient),
    Checkpoint(String),
}

impl From<Transient> for StepError {
    fn from(t: Transient) -> Self {
        StepError::Transient(t)
    }
}

fn verdict_label(v: &Verdict) -> &'static str {
    match v {
        Verdict::InSync { outcome } => outcome.label(),
        Verdict::Staleness { .. } => "staleness",
        Verdict::SecondWriter { .. } => "second_writer",
        Verdict::Diverged { .. } => "diverged",
        Verdict::Refused { .. } => "refused",
    }
}

fn verdict_detail(v: &Verdict) -> String {
    match v {
        Verdict::SecondWriter {
            stored_len,
            log_len,
        } => format!(
            "the store holds {stored_len} events, the log {log_len} after every re-read: events \
             not in the log were written to the store"
        ),
        Verdict::Diverged { outcome } | Verdict::Refused { outcome } => {
            serde_json::to_string(outcome).unwrap_or_else(|_| format!("{outcome:?}"))
        }
        other => format!("{other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn populated_rows_are_remembered_per_execution_and_forgotten_when_full() {
        let mut rows = PopulatedRows::default();
        rows.record("a", vec![9, 3, 5]);
        assert!(rows.contains("a", 3) && rows.contains("a", 9));
        assert!(!rows.contains("a", 4) && !rows.contains("b", 3));
        // A later read replaces the earlier one.
        rows.record("a", vec![3, 5, 9, 12]);
        assert_eq!(rows.orders, 4);
        assert!(rows.contains("a", 12));
        // Full: everything is forgotten, then the new read is kept.
        rows.record("big", (0..POPULATED_ROWS_MAX as i64 / 10).collect());
        rows.record("big2", (0..POPULATED_ROWS_MAX as i64 / 10).collect());
        assert_eq!(rows.orders, 2 * POPULATED_ROWS_MAX / 10 + 4);
        for i in 0..8 {
            rows.record(
                &format!("more-{i}"),
                (0..POPULATED_ROWS_MAX as i64 / 10).collect(),
            );
        }
        assert!(rows.orders <= POPULATED_ROWS_MAX);
        assert!(!rows.contains("a", 3));
        assert!(rows.contains("more-7", 0));
    }
}
