//! Prometheus metrics. Every labelled series exists from start-up with a zero value, so a
//! missing series never reads like an older build.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use openraft::{BasicNode, RaftMetrics, ServerState};
use raft_store::raft::{NodeId, Rejection};
use raft_store::{
    AppendError, Appended, FromLog, GuardedPage, PartOutcome, PopulateError, RebuildError,
};

use crate::node::WriteError;

/// A counter per label value, in a fixed label order.
struct Family {
    name: &'static str,
    help: &'static str,
    label: &'static str,
    values: &'static [&'static str],
    counts: Vec<AtomicU64>,
}

impl Family {
    fn new(
        name: &'static str,
        help: &'static str,
        label: &'static str,
        values: &'static [&'static str],
    ) -> Self {
        Self {
            name,
            help,
            label,
            values,
            counts: values.iter().map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn inc(&self, value: &str) {
        if let Some(i) = self.values.iter().position(|v| *v == value) {
            self.counts[i].fetch_add(1, Ordering::Relaxed);
        } else {
            debug_assert!(false, "{} has no label value {value}", self.name);
        }
    }

    fn get(&self, value: &str) -> u64 {
        self.values
            .iter()
            .position(|v| *v == value)
            .map_or(0, |i| self.counts[i].load(Ordering::Relaxed))
    }

    fn render(&self, out: &mut String) {
        let _ = writeln!(out, "# HELP {} {}", self.name, self.help);
        let _ = writeln!(out, "# TYPE {} counter", self.name);
        for (value, count) in self.values.iter().zip(&self.counts) {
            let _ = writeln!(
                out,
                "{}{{{}=\"{}\"}} {}",
                self.name,
                self.label,
                value,
                count.load(Ordering::Relaxed)
            );
        }
    }
}

/// A histogram with fixed bucket bounds in seconds.
struct Histogram {
    name: &'static str,
    help: &'static str,
    bounds: &'static [f64],
    buckets: Vec<AtomicU64>,
    count: AtomicU64,
    sum_micros: AtomicU64,
}

const LATENCY_BOUNDS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

impl Histogram {
    fn new(name: &'static str, help: &'static str) -> Self {
        Self {
            name,
            help,
            bounds: LATENCY_BOUNDS,
            buckets: LATENCY_BOUNDS.iter().map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum_micros: AtomicU64::new(0),
        }
    }

    fn observe(&self, seconds: f64) {
        for (bound, bucket) in self.bounds.iter().zip(&self.buckets) {
            if seconds <= *bound {
                bucket.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_micros
            .fetch_add((seconds * 1e6) as u64, Ordering::Relaxed);
    }

    fn render(&self, out: &mut String) {
        let _ = writeln!(out, "# HELP {} {}", self.name, self.help);
        let _ = writeln!(out, "# TYPE {} histogram", self.name);
        for (bound, bucket) in self.bounds.iter().zip(&self.buckets) {
            let _ = writeln!(
                out,
                "{}_bucket{{le=\"{}\"}} {}",
                self.name,
                bound,
                bucket.load(Ordering::Relaxed)
            );
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{}_bucket{{le=\"+Inf\"}} {}", self.name, count);
        let _ = writeln!(
            out,
            "{}_sum {}",
            self.name,
            self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6
        );
        let _ = writeln!(out, "{}_count {}", self.name, count);
    }
}

const APPEND_OUTCOMES: &[&str] = &[
    "ok",
    "duplicate",
    "not_head",
    "event_conflict",
    "forked",
    "invalid_input",
    "too_large",
    "not_leader",
    "unavailable",
    "error",
];
const POPULATE_OUTCOMES: &[&str] = &[
    "in_sync",
    "extended",
    "stale_log",
    "diverged",
    "refused",
    "part_accepted",
    "session_conflict",
    "invalid_input",
    "too_large",
    "not_leader",
    "unavailable",
    "error",
];
const REBUILD_OUTCOMES: &[&str] = &[
    "rebuilt",
    "not_diverged",
    "log_refused",
    "invalid_input",
    "too_large",
    "not_leader",
    "unavailable",
    "error",
];
const GUARDED_OUTCOMES: &[&str] = &[
    "authoritative",
    "not_populated",
    "watermark_ahead",
    "no_coverage",
    "coverage_mismatch",
    "broken_chain",
];

const TLS_RELOAD_OUTCOMES: &[&str] = &["ok", "error"];
const REQUEST_CLASSES: &[&str] = &["client", "peer"];
const READ_STAGES: &[&str] = &["read", "confirmation"];

/// The node's metrics.
pub struct Metrics {
    appends: Family,
    populates: Family,
    rebuilds: Family,
    guarded_reads: Family,
    sync_seconds: Histogram,
    apply_seconds: Histogram,
    tls_reloads: Family,
    shed: Family,
    linearizable: Family,
    /// When the certificate in service expires (seconds since the epoch); 0 without TLS.
    tls_not_after_unix: AtomicI64,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            appends: Family::new(
                "chainstore_appends_total",
                "Append requests evaluated here, by outcome.",
                "outcome",
                APPEND_OUTCOMES,
            ),
            populates: Family::new(
                "chainstore_populates_total",
                "Populate requests evaluated here, by outcome.",
                "outcome",
                POPULATE_OUTCOMES,
            ),
            rebuilds: Family::new(
                "chainstore_rebuilds_total",
                "Rebuild requests evaluated here (a partition moved into quarantine and rebuilt \
                 from the log), by outcome.",
                "outcome",
                REBUILD_OUTCOMES,
            ),
            guarded_reads: Family::new(
                "chainstore_guarded_reads_total",
                "Guarded chain reads served here, by answer.",
                "answer",
                GUARDED_OUTCOMES,
            ),
            sync_seconds: Histogram::new(
                "chainstore_fsync_seconds",
                "Time of one durable write or sync (Raft log appends, votes).",
            ),
            apply_seconds: Histogram::new(
                "chainstore_apply_write_seconds",
                "Time of one non-durable batch write (a state-machine apply, or Raft log \
                 entries written before the group fsync that makes them durable).",
            ),
            tls_reloads: Family::new(
                "chainstore_tls_reloads_total",
                "Reloads of changed TLS material, by outcome (error: the old material stays).",
                "outcome",
                TLS_RELOAD_OUTCOMES,
            ),
            shed: Family::new(
                "chainstore_requests_shed_total",
                "Requests refused with 503 overloaded: every slot of their class taken, its queue full.",
                "class",
                REQUEST_CLASSES,
            ),
            linearizable: Family::new(
                "chainstore_linearizable_reads_total",
                "Linearizable read barriers asked for here (read), and the leadership \
                 confirmations that served them (confirmation): reads arriving while one is in \
                 flight share the next.",
                "stage",
                READ_STAGES,
            ),
            tls_not_after_unix: AtomicI64::new(0),
        }
    }
}

fn write_error_label(err: &WriteError) -> &'static str {
    match err {
        WriteError::NotLeader(_) => "not_leader",
        WriteError::Unavailable(_) | WriteError::Rejected(Rejection::HeadMoved { .. }) => {
            "unavailable"
        }
        WriteError::Rejected(Rejection::Forked(_)) => "forked",
        WriteError::Append(AppendError::NotHead { .. }) => "not_head",
        WriteError::Append(AppendError::EventConflict { .. }) => "event_conflict",
        WriteError::Append(AppendError::Forked(_)) => "forked",
        WriteError::Append(AppendError::InvalidInput(_) | AppendError::GenesisWithPrev)
        | WriteError::Populate(PopulateError::InvalidInput(_)) => "invalid_input",
        WriteError::Append(AppendError::TooLarge(_))
        | WriteError::Populate(PopulateError::TooLarge(_)) => "too_large",
        WriteError::Append(AppendError::HeadMoved)
        | WriteError::Populate(PopulateError::HeadMoved) => "unavailable",
        WriteError::Populate(PopulateError::SessionConflict { .. }) => "session_conflict",
        WriteError::Rebuild(RebuildError::NotDiverged { .. }) => "not_diverged",
        WriteError::Rebuild(RebuildError::LogRefused(_)) => "log_refused",
        WriteError::Rebuild(RebuildError::InvalidInput(_)) => "invalid_input",
        WriteError::Rebuild(RebuildError::TooLarge(_)) => "too_large",
        WriteError::Rebuild(RebuildError::HeadMoved) => "unavailable",
        _ => "error",
    }
}

impl Metrics {
    /// Counts one append request's outcome (`duplicate` when every event of it was).
    pub fn record_append(&self, result: &Result<Vec<Appended>, WriteError>) {
        self.appends.inc(match result {
            Ok(answers) if answers.iter().all(|a| a.duplicate) => "duplicate",
            Ok(_) => "ok",
            Err(err) => write_error_label(err),
        });
    }

    /// Counts one populate outcome.
    pub fn record_populate(&self, result: &Result<FromLog, WriteError>) {
        self.populates.inc(match result {
            Ok(outcome) => outcome.label(),
            Err(err) => write_error_label(err),
        });
    }

    /// Counts one populate part's outcome (`part_accepted` until the session ends).
    pub fn record_populate_part(&self, result: &Result<PartOutcome, WriteError>) {
        self.populates.inc(match result {
            Ok(PartOutcome::Accepted { .. }) => "part_accepted",
            Ok(PartOutcome::Finished(outcome)) => outcome.label(),
            Err(err) => write_error_label(err),
        });
    }

    /// Counts one rebuild request's outcome.
    pub fn record_rebuild<T>(&self, result: &Result<T, WriteError>) {
        self.rebuilds.inc(match result {
            Ok(_) => "rebuilt",
            Err(err) => write_error_label(err),
        });
    }

    /// Counts one guarded read answer.
    pub fn record_guarded(&self, answer: &GuardedPage) {
        self.guarded_reads.inc(match answer {
            GuardedPage::Authoritative(_) => "authoritative",
            GuardedPage::CannotAnswer(reason) => reason.as_str(),
        });
    }

    /// Records the duration of one durable log append.
    pub fn observe_sync(&self, seconds: f64) {
        self.sync_seconds.observe(seconds);
    }

    /// Records the duration of one apply batch.
    pub fn observe_apply(&self, seconds: f64) {
        self.apply_seconds.observe(seconds);
    }

    /// Counts one reload of changed TLS material.
    pub fn record_tls_reload(&self, ok: bool) {
        self.tls_reloads.inc(if ok { "ok" } else { "error" });
    }

    /// Counts one request refused because its class (`client` or `peer`) was full.
    pub fn record_shed(&self, class: &str) {
        self.shed.inc(class);
    }

    /// Counts one linearizable read barrier asked for.
    pub fn record_linearizable_read(&self) {
        self.linearizable.inc("read");
    }

    /// Counts one leadership confirmation run for linearizable reads.
    pub fn record_leadership_confirmation(&self) {
        self.linearizable.inc("confirmation");
    }

    /// Sets when the certificate in service expires.
    pub fn set_tls_not_after(&self, not_after_unix: Option<i64>) {
        self.tls_not_after_unix
            .store(not_after_unix.unwrap_or(0), Ordering::Relaxed);
    }

    /// Requests of `class` refused because the class was full.
    pub fn shed(&self, class: &str) -> u64 {
        self.shed.get(class)
    }

    /// The count of appends with `outcome` (for tests).
    pub fn appends(&self, outcome: &str) -> u64 {
        self.appends.get(outcome)
    }

    /// The Prometheus text exposition, Raft state included.
    pub fn render(&self, node_id: NodeId, raft: &RaftMetrics<NodeId, BasicNode>) -> String {
        let mut out = String::with_capacity(4096);
        let gauge = |out: &mut String, name: &str, help: &str, value: u64| {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} gauge");
            let _ = writeln!(out, "{name} {value}");
        };
        gauge(&mut out, "chainstore_node_id", "This node's id.", node_id);
        gauge(
            &mut out,
            "chainstore_raft_term",
            "Current Raft term.",
            raft.current_term,
        );
        gauge(
            &mut out,
            "chainstore_raft_leader_id",
            "Id of the leader this node knows (0 when none).",
            raft.current_leader.unwrap_or(0),
        );
        gauge(
            &mut out,
            "chainstore_raft_is_leader",
            "1 when this node is the leader.",
            u64::from(raft.state == ServerState::Leader),
        );
        gauge(
            &mut out,
            "chainstore_raft_last_log_index",
            "Index of the last entry in this node's log.",
            raft.last_log_index.unwrap_or(0),
        );
        gauge(
            &mut out,
            "chainstore_raft_applied_index",
            "Index of the last entry applied to this node's state machine.",
            raft.last_applied.as_ref().map_or(0, |id| id.index),
        );
        self.appends.render(&mut out);
        self.populates.render(&mut out);
        self.rebuilds.render(&mut out);
        self.guarded_reads.render(&mut out);
        self.sync_seconds.render(&mut out);
        self.apply_seconds.render(&mut out);
        self.tls_reloads.render(&mut out);
        self.shed.render(&mut out);
        self.linearizable.render(&mut out);
        let _ = writeln!(
            out,
            "# HELP chainstore_tls_certificate_not_after_seconds When the node's certificate \
             expires, in seconds since the epoch (0 without TLS).\n\
             # TYPE chainstore_tls_certificate_not_after_seconds gauge\n\
             chainstore_tls_certificate_not_after_seconds {}",
            self.tls_not_after_unix.load(Ordering::Relaxed)
        );
        out
    }
}

/// Every guarded-read label value is a [`Reason`] name or `authoritative`.
#[cfg(test)]
mod tests {
    use super::*;
    use raft_store::Reason;

    #[test]
    fn every_reason_has_a_series() {
        for reason in Reason::ALL {
            assert!(GUARDED_OUTCOMES.contains(&reason.as_str()));
        }
    }
}
