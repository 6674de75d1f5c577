//! Prometheus metrics, kept and encoded by `prometheus-client` (OpenMetrics text). Every
//! labelled series exists from start-up with a zero value, so a missing series never reads like
//! an older build.

use std::sync::atomic::{AtomicI64, AtomicU64};
use std::time::Duration;

use chainstore_model::api::ErrorBody;
use chainstore_model::{Appended, FromLog, GuardedPage, PartOutcome};
use openraft::{RaftMetrics, ServerState};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use raft_store::raft::NodeId;

use crate::errors::WriteError;

/// The media type of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A counter per value of one label, every value's series created up front; the counters are
/// held here too so that counting is a position lookup and an atomic add.
struct Labelled {
    name: &'static str,
    values: Vec<&'static str>,
    counters: Vec<Counter>,
}

impl Labelled {
    /// Registers `name` (exported as `name_total`) with a series per value of `label`.
    fn register(
        registry: &mut Registry,
        name: &'static str,
        help: &'static str,
        label: &'static str,
        values: Vec<&'static str>,
    ) -> Self {
        let family = Family::<[(&'static str, &'static str); 1], Counter>::default();
        let counters = values
            .iter()
            .map(|value| family.get_or_create(&[(label, *value)]).clone())
            .collect();
        registry.register(name, help, family);
        Self {
            name,
            values,
            counters,
        }
    }

    fn inc(&self, value: &str) {
        if let Some(i) = self.values.iter().position(|v| *v == value) {
            self.counters[i].inc();
        } else {
            debug_assert!(false, "{} has no label value {value}", self.name);
        }
    }

    fn get(&self, value: &str) -> u64 {
        self.values
            .iter()
            .position(|v| *v == value)
            .map_or(0, |i| self.counters[i].get())
    }
}

const LATENCY_BOUNDS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

fn histogram(registry: &mut Registry, name: &'static str, help: &'static str) -> Histogram {
    let histogram = Histogram::new(LATENCY_BOUNDS);
    registry.register(name, help, histogram.clone());
    histogram
}

fn gauge(registry: &mut Registry, name: &'static str, help: &'static str) -> Gauge<i64, AtomicI64> {
    let gauge = Gauge::<i64, AtomicI64>::default();
    registry.register(name, help, gauge.clone());
    gauge
}

/// The Raft state, read from openraft's metrics when the text is rendered.
struct RaftGauges {
    node_id: Gauge<i64, AtomicI64>,
    term: Gauge<i64, AtomicI64>,
    leader_id: Gauge<i64, AtomicI64>,
    is_leader: Gauge<i64, AtomicI64>,
    last_log_index: Gauge<i64, AtomicI64>,
    applied_index: Gauge<i64, AtomicI64>,
}

/// A gauge per shard (label `shard`).
type ShardGauge = Family<[(&'static str, String); 1], Gauge<i64, AtomicI64>>;

/// The Raft state of every group this node runs, labelled by shard.
struct ShardGauges {
    term: ShardGauge,
    leader_id: ShardGauge,
    is_leader: ShardGauge,
    last_log_index: ShardGauge,
    applied_index: ShardGauge,
}

impl ShardGauges {
    fn register(r: &mut Registry) -> Self {
        let mut family = |name: &'static str, help: &'static str| {
            let family = ShardGauge::default();
            r.register(name, help, family.clone());
            family
        };
        Self {
            term: family(
                "chainstore_shard_term",
                "Each shard's current Raft term here.",
            ),
            leader_id: family(
                "chainstore_shard_leader_id",
                "Id of the leader of each shard this node knows (0 when none).",
            ),
            is_leader: family(
                "chainstore_shard_is_leader",
                "1 for each shard this node leads.",
            ),
            last_log_index: family(
                "chainstore_shard_last_log_index",
                "Index of the last entry in this node's log of each shard.",
            ),
            applied_index: family(
                "chainstore_shard_applied_index",
                "Index of the last entry this node applied of each shard.",
            ),
        }
    }
}

/// The outcomes of a write, and after them every code of the API's error body (each value
/// once): a failed write is counted by the code it is answered with.
fn with_error_codes(outcomes: &[&'static str]) -> Vec<&'static str> {
    let mut values = outcomes.to_vec();
    values.extend(
        ErrorBody::codes()
            .into_iter()
            .filter(|code| !outcomes.contains(code)),
    );
    values
}

const APPEND_OUTCOMES: &[&str] = &["ok", "duplicate"];
const POPULATE_OUTCOMES: &[&str] = &[
    "in_sync",
    "extended",
    "stale_log",
    "diverged",
    "refused",
    "part_accepted",
];
const REBUILD_OUTCOMES: &[&str] = &["rebuilt"];
const GUARDED_OUTCOMES: &[&str] = &[
    "authoritative",
    "not_populated",
    "watermark_ahead",
    "no_coverage",
    "coverage_mismatch",
    "broken_chain",
];

const TLS_RELOAD_OUTCOMES: &[&str] = &["ok", "error"];
const APPEND_RPC_PATHS: &[&str] = &["stream", "http"];
/// What became of an entry a leader sent a follower ahead of its own fsync.
const REQUEST_CLASSES: &[&str] = &["client", "peer"];
const READ_STAGES: &[&str] = &["read"];

/// The node's metrics.
pub struct Metrics {
    registry: Registry,
    raft: RaftGauges,
    appends: Labelled,
    populates: Labelled,
    rebuilds: Labelled,
    append_rpcs: Labelled,
    guarded_reads: Labelled,
    sync_seconds: Histogram,
    apply_seconds: Histogram,
    tls_reloads: Labelled,
    shed: Labelled,
    linearizable: Labelled,
    /// When the certificate in service expires (seconds since the epoch); 0 without TLS.
    tls_not_after_unix: Gauge<i64, AtomicI64>,
    /// Quantiles of the time between consecutive stages of this node's latest entries.
    entry_stages: Family<[(&'static str, &'static str); 2], Gauge<f64, AtomicU64>>,
    shards: ShardGauges,
}

impl Default for Metrics {
    // One registration per metric with its name and help text, in the order the exposition
    // lists them: a table, long because the node exports that many metrics.
    fn default() -> Self {
        let mut r = Registry::default();
        let raft = RaftGauges {
            node_id: gauge(&mut r, "chainstore_node_id", "This node's id."),
            term: gauge(&mut r, "chainstore_raft_term", "Current Raft term."),
            leader_id: gauge(
                &mut r,
                "chainstore_raft_leader_id",
                "Id of the leader this node knows (0 when none).",
            ),
            is_leader: gauge(
                &mut r,
                "chainstore_raft_is_leader",
                "1 when this node is the leader.",
            ),
            last_log_index: gauge(
                &mut r,
                "chainstore_raft_last_log_index",
                "Index of the last entry in this node's log.",
            ),
            applied_index: gauge(
                &mut r,
                "chainstore_raft_applied_index",
                "Index of the last entry applied to this node's state machine.",
            ),
        };
        let appends = Labelled::register(
            &mut r,
            "chainstore_appends",
            "Append requests evaluated here, by outcome.",
            "outcome",
            with_error_codes(APPEND_OUTCOMES),
        );
        let populates = Labelled::register(
            &mut r,
            "chainstore_populates",
            "Populate requests evaluated here, by outcome.",
            "outcome",
            with_error_codes(POPULATE_OUTCOMES),
        );
        let rebuilds = Labelled::register(
            &mut r,
            "chainstore_rebuilds",
            "Rebuild requests evaluated here (a partition moved into quarantine and rebuilt \
             from the log), by outcome.",
            "outcome",
            with_error_codes(REBUILD_OUTCOMES),
        );
        let append_rpcs = Labelled::register(
            &mut r,
            "chainstore_raft_append_rpcs_received",
            "AppendEntries RPCs (heartbeats included) this node answered, by how they came: \
             over an append stream or as HTTP requests.",
            "via",
            APPEND_RPC_PATHS.to_vec(),
        );
        let guarded_reads = Labelled::register(
            &mut r,
            "chainstore_guarded_reads",
            "Guarded chain reads served here, by answer.",
            "answer",
            GUARDED_OUTCOMES.to_vec(),
        );
        let sync_seconds = histogram(
            &mut r,
            "chainstore_fsync_seconds",
            "Time of one durable write or sync (Raft log appends, votes).",
        );
        let apply_seconds = histogram(
            &mut r,
            "chainstore_apply_write_seconds",
            "Time of one non-durable batch write (a state-machine apply, or Raft log entries \
             written before the group fsync that makes them durable).",
        );
        let tls_reloads = Labelled::register(
            &mut r,
            "chainstore_tls_reloads",
            "Reloads of changed TLS material, by outcome (error: the old material stays).",
            "outcome",
            TLS_RELOAD_OUTCOMES.to_vec(),
        );
        let shed = Labelled::register(
            &mut r,
            "chainstore_requests_shed",
            "Requests refused with 503 overloaded: every slot of their class taken, its queue \
             full.",
            "class",
            REQUEST_CLASSES.to_vec(),
        );
        let linearizable = Labelled::register(
            &mut r,
            "chainstore_linearizable_reads",
            "Linearizable read barriers asked for here (read). Reads waiting at once share \
             the heartbeats that confirm the leadership they rely on.",
            "stage",
            READ_STAGES.to_vec(),
        );
        let tls_not_after_unix = gauge(
            &mut r,
            "chainstore_tls_certificate_not_after_seconds",
            "When the node's certificate expires, in seconds since the epoch (0 without TLS).",
        );
        let entry_stages: Family<_, Gauge<f64, AtomicU64>> = Family::default();
        for (stage, ..) in STAGE_GAPS {
            for (quantile, _) in STAGE_QUANTILES {
                let _ = entry_stages.get_or_create(&[("stage", stage), ("quantile", quantile)]);
            }
        }
        r.register(
            "chainstore_raft_entry_stage_seconds",
            "Over this node's latest entries (up to 1,024, openraft's stage record): the time \
             from one stage of an entry's life to the next, by quantile. Stages: proposed \
             (client_write called), received (by openraft's core), submitted (to the log \
             store), persisted (fsynced here), committed (known committed here), applied. On a \
             follower the first three coincide: its entries arrive by AppendEntries.",
            entry_stages.clone(),
        );
        let shards = ShardGauges::register(&mut r);
        Self {
            registry: r,
            raft,
            appends,
            populates,
            rebuilds,
            append_rpcs,
            guarded_reads,
            sync_seconds,
            apply_seconds,
            tls_reloads,
            shed,
            linearizable,
            tls_not_after_unix,
            entry_stages,
            shards,
        }
    }
}

/// A failed write's outcome label: the code its answer carries.
fn write_error_label(err: &WriteError) -> &'static str {
    ErrorBody::from(err.clone()).code()
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

    /// Counts one AppendEntries RPC answered, `via` "stream" or "http".
    pub fn record_append_rpc(&self, via: &'static str) {
        self.append_rpcs.inc(via);
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

    /// Sets when the certificate in service expires.
    pub fn set_tls_not_after(&self, not_after_unix: Option<i64>) {
        self.tls_not_after_unix.set(not_after_unix.unwrap_or(0));
    }

    /// Requests of `class` refused because the class was full.
    pub fn shed(&self, class: &str) -> u64 {
        self.shed.get(class)
    }

    /// The count of appends with `outcome` (for tests).
    pub fn appends(&self, outcome: &str) -> u64 {
        self.appends.get(outcome)
    }

    /// Sets the entry-stage quantiles from openraft's record of this node's latest entries.
    /// `runs` are runs of entries that went through every stage together: how many entries,
    /// and when they reached each stage (in openraft's order: proposed, received, submitted,
    /// persisted, committed, applied).
    pub fn set_entry_stages<I: openraft::Instant>(&self, runs: &[(u64, [I; 6])]) {
        for (name, mut durations) in stage_durations(runs) {
            durations.sort_unstable();
            for (label, q) in STAGE_QUANTILES {
                let value = weighted_quantile(&durations, q).map_or(0.0, |d| d.as_secs_f64());
                self.entry_stages
                    .get_or_create(&[("stage", name), ("quantile", label)])
                    .set(value);
            }
        }
    }

    /// The exposition ([`CONTENT_TYPE`]), Raft state included.
    /// Sets the gauges of shard `shard` from its group's Raft metrics here.
    pub fn set_shard(&self, shard: u32, raft: &RaftMetrics<raft_store::raft::TypeConfig>) {
        let as_gauge = |value: u64| i64::try_from(value).unwrap_or(i64::MAX);
        let label = [("shard", shard.to_string())];
        let g = &self.shards;
        g.term
            .get_or_create(&label)
            .set(as_gauge(raft.current_term));
        g.leader_id
            .get_or_create(&label)
            .set(as_gauge(raft.current_leader.unwrap_or(0)));
        g.is_leader
            .get_or_create(&label)
            .set(i64::from(raft.state == ServerState::Leader));
        g.last_log_index
            .get_or_create(&label)
            .set(as_gauge(raft.last_log_index.unwrap_or(0)));
        g.applied_index.get_or_create(&label).set(as_gauge(
            raft.last_applied.as_ref().map_or(0, |id| id.index),
        ));
    }

    pub fn render(
        &self,
        node_id: NodeId,
        raft: &RaftMetrics<raft_store::raft::TypeConfig>,
    ) -> String {
        let as_gauge = |value: u64| i64::try_from(value).unwrap_or(i64::MAX);
        self.raft.node_id.set(as_gauge(node_id));
        self.raft.term.set(as_gauge(raft.current_term));
        self.raft
            .leader_id
            .set(as_gauge(raft.current_leader.unwrap_or(0)));
        self.raft
            .is_leader
            .set(i64::from(raft.state == ServerState::Leader));
        self.raft
            .last_log_index
            .set(as_gauge(raft.last_log_index.unwrap_or(0)));
        self.raft.applied_index.set(as_gauge(
            raft.last_applied.as_ref().map_or(0, |id| id.index),
        ));
        let mut out = String::with_capacity(8192);
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

/// The quantiles [`Metrics::set_entry_stages`] exports.
const STAGE_QUANTILES: [(&str, f64); 3] = [("0.5", 0.5), ("0.9", 0.9), ("0.99", 0.99)];

/// From one stage to the next (and the whole way), by the stages' positions in openraft's
/// order, with the names the exposition gives them.
const STAGE_GAPS: [(&str, usize, usize); 6] = [
    ("proposed_to_received", 0, 1),
    ("received_to_submitted", 1, 2),
    ("submitted_to_persisted", 2, 3),
    ("persisted_to_committed", 3, 4),
    ("committed_to_applied", 4, 5),
    ("proposed_to_applied", 0, 5),
];

/// Each gap's durations, one per run of entries, with how many entries the run held.
fn stage_durations<I: openraft::Instant>(
    runs: &[(u64, [I; 6])],
) -> Vec<(&'static str, Vec<(Duration, u64)>)> {
    STAGE_GAPS
        .iter()
        .map(|(name, from, to)| {
            let durations = runs
                .iter()
                .map(|(entries, at)| (at[*to].saturating_duration_since(at[*from]), *entries))
                .collect();
            (*name, durations)
        })
        .collect()
}

/// The `q` quantile of sorted durations, each standing for as many entries as its count.
fn weighted_quantile(sorted: &[(Duration, u64)], q: f64) -> Option<Duration> {
    let total: u64 = sorted.iter().map(|(_, n)| n).sum();
    if total == 0 {
        return None;
    }
    // The rank of the quantile's entry, 1-based: the smallest duration with that many at or
    // below it.
    let rank = ((total as f64 * q).ceil() as u64).clamp(1, total);
    let mut seen = 0;
    sorted.iter().find_map(|(d, n)| {
        seen += n;
        (seen >= rank).then_some(*d)
    })
}

/// Every guarded-read label value is a [`Reason`] name or `authoritative`.
#[cfg(test)]
mod tests {
    use super::*;
    use chainstore_model::Reason;

    #[test]
    fn write_outcomes_are_counted_by_every_code_the_api_answers_with() {
        let metrics = Metrics::default();
        let text = metrics.render(1, &RaftMetrics::new_initial(1));
        for code in ErrorBody::examples().iter().map(ErrorBody::code) {
            let series = format!("chainstore_appends_total{{outcome=\"{code}\"}} 0");
            assert!(text.lines().any(|l| l == series), "{series} missing");
        }
        metrics.record_append(&Err(WriteError::NotLeader(None)));
        metrics.record_append(&Err(WriteError::Storage(
            chainstore_model::StorageError::Corrupted("x".into()),
        )));
        assert_eq!(metrics.appends("no_leader"), 1);
        assert_eq!(
            metrics.appends("unavailable"),
            1,
            "a storage failure is answered 503"
        );
    }

    #[test]
    fn the_exposition_is_openmetrics_with_every_series_from_the_start() {
        let m = Metrics::default();
        m.record_shed("peer");
        m.observe_sync(0.003);
        m.set_tls_not_after(Some(1_900_000_000));
        let mut raft = RaftMetrics::new_initial(3);
        raft.current_term = 7;
        m.set_shard(0, &raft);
        let mut other = RaftMetrics::new_initial(3);
        other.current_term = 2;
        other.current_leader = Some(1);
        m.set_shard(5, &other);
        let text = m.render(3, &raft);
        for line in [
            "chainstore_node_id 3",
            "chainstore_raft_term 7",
            "chainstore_shard_term{shard=\"0\"} 7",
            "chainstore_shard_term{shard=\"5\"} 2",
            "chainstore_shard_leader_id{shard=\"5\"} 1",
            "chainstore_shard_is_leader{shard=\"5\"} 0",
            "chainstore_requests_shed_total{class=\"peer\"} 1",
            "chainstore_requests_shed_total{class=\"client\"} 0",
            "chainstore_rebuilds_total{outcome=\"refused\"} 0",
            "chainstore_guarded_reads_total{answer=\"broken_chain\"} 0",
            "chainstore_fsync_seconds_bucket{le=\"0.005\"} 1",
            "chainstore_fsync_seconds_count 1",
            "chainstore_tls_certificate_not_after_seconds 1900000000",
            "# EOF",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line} missing from\n{text}"
            );
        }
        assert_eq!(m.shed("peer"), 1);
    }

    #[test]
    fn every_reason_has_a_series() {
        for reason in Reason::ALL {
            assert!(GUARDED_OUTCOMES.contains(&reason.as_str()));
        }
    }

    /// Each stage's quantiles count entries, not runs: a run of many entries that shared one
    /// fsync weighs as many.
    #[test]
    fn entry_stage_quantiles_weigh_each_run_by_its_entries() {
        let m = Metrics::default();
        let at = |us: [u64; 6]| {
            let t0 = std::time::Instant::now();
            us.map(|u| t0 + Duration::from_micros(u))
        };
        // One entry whose fsync took 900 µs, then a run of 9 entries whose fsync took 200 µs.
        let runs = [
            (1, at([0, 10, 20, 920, 1_000, 1_050])),
            (9, at([0, 10, 20, 220, 300, 350])),
        ];
        m.set_entry_stages(&runs);
        let text = m.render(1, &RaftMetrics::new_initial(1));
        for line in [
            "chainstore_raft_entry_stage_seconds{stage=\"submitted_to_persisted\",quantile=\"0.5\"} 0.0002",
            "chainstore_raft_entry_stage_seconds{stage=\"submitted_to_persisted\",quantile=\"0.99\"} 0.0009",
            "chainstore_raft_entry_stage_seconds{stage=\"proposed_to_applied\",quantile=\"0.9\"} 0.00035",
            "chainstore_raft_entry_stage_seconds{stage=\"committed_to_applied\",quantile=\"0.5\"} 0.00005",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing from\n{text}");
        }
        assert_eq!(weighted_quantile(&[], 0.5), None);
    }
}
