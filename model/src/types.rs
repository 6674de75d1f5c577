//! The data model of SPEC §2–§4: events, per-execution records, and the outcomes of every
//! operation. Field names are the wire names: these types serialize to the JSON of the HTTP API.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::StorageError;
use crate::ids::{EventId, ExecutionId, SessionId};

/// One stored event of an execution's chain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ChainEvent {
    /// The execution (partition) the event belongs to.
    pub execution_id: ExecutionId,
    /// Position in the execution's chain, from 1.
    pub exec_seq: u64,
    /// The event's id, unique within the execution.
    pub event_id: EventId,
    /// The event before this one; `None` only at the root.
    #[serde(default)]
    pub prev_event_id: Option<EventId>,
    /// The execution that started this one, if any.
    #[serde(default)]
    pub parent_execution_id: Option<ExecutionId>,
    /// The event's content, any JSON value.
    pub payload: Value,
    /// Index of the write that stored the event (the Raft log index in a cluster).
    #[serde(default)]
    pub commit_index: u64,
}

impl ChainEvent {
    /// True when both describe the same event: every field but `commit_index` agrees.
    pub fn same_content(&self, other: &ChainEvent) -> bool {
        self.execution_id == other.execution_id
            && self.exec_seq == other.exec_seq
            && self.event_id == other.event_id
            && self.prev_event_id == other.prev_event_id
            && self.parent_execution_id == other.parent_execution_id
            && self.payload == other.payload
    }
}

/// An event as an external authoritative log hands it to `populate_from_log`. Its position is
/// decided by following `prev_event_id` links, never by sorting ids.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LogEvent {
    /// The event's id.
    pub event_id: EventId,
    /// The event before it in the log; `None` at the root.
    #[serde(default)]
    pub prev_event_id: Option<EventId>,
    /// The execution that started this one, if any.
    #[serde(default)]
    pub parent_execution_id: Option<ExecutionId>,
    /// The event's content.
    pub payload: Value,
}

/// A request to append one event at the head of an execution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AppendRequest {
    /// The new event's id.
    pub event_id: EventId,
    /// Must equal the current head's id (`None` for an empty execution).
    #[serde(default)]
    pub prev_event_id: Option<EventId>,
    /// The execution that started this one, if any.
    #[serde(default)]
    pub parent_execution_id: Option<ExecutionId>,
    /// The event's content.
    pub payload: Value,
    /// Declares this store the system of record for a brand-new execution (SPEC §4.1).
    #[serde(default)]
    pub genesis: bool,
}

/// The newest event of an execution: one read answers both the head check and the next seq.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Head {
    /// Sequence of the newest event.
    pub exec_seq: u64,
    /// Id of the newest event.
    pub event_id: EventId,
}

/// The span of sequences the store has been told about for an execution. Its presence is what
/// separates "populated, possibly empty" from "never heard of".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Watermark {
    /// Lowest sequence the store was told about (0 for a populated empty execution).
    pub first_seq: u64,
    /// Highest sequence the store was told about; must equal the head for a served read.
    pub through_seq: u64,
}

impl Watermark {
    /// The marker of a populated execution that has no events.
    pub const EMPTY: Watermark = Watermark {
        first_seq: 0,
        through_seq: 0,
    };

    /// True for the empty marker.
    pub fn is_empty_span(&self) -> bool {
        self.through_seq == 0
    }

    /// Widens `existing` to include `self`: the first sequence moves down, the last up. An empty
    /// span widens to whatever it is merged with.
    pub fn widen(self, existing: Option<Watermark>) -> Watermark {
        match existing {
            None => self,
            Some(old) if old.is_empty_span() => self,
            Some(old) if self.is_empty_span() => old,
            Some(old) => Watermark {
                first_seq: old.first_seq.min(self.first_seq),
                through_seq: old.through_seq.max(self.through_seq),
            },
        }
    }
}

/// Where a coverage record came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// Built by `populate_from_log` from the log's first event.
    Log,
    /// Written by a `genesis` append: this store is the execution's system of record.
    Genesis,
}

/// Proof that the partition was built from the execution's FIRST event, and how long the
/// authoritative chain is known to be.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Coverage {
    /// The execution's first event; `None` for an execution the log says is empty.
    pub root_event_id: Option<EventId>,
    /// Length of the authoritative chain.
    pub total: u64,
    /// Which write path established the coverage.
    pub origin: Origin,
}

impl Coverage {
    /// Merges `self` over `existing` without ever shrinking the total under the same root.
    pub fn raise(self, existing: Option<&Coverage>) -> Coverage {
        match existing {
            Some(old) if old.root_event_id == self.root_event_id && old.total > self.total => {
                Coverage {
                    total: old.total,
                    ..self
                }
            }
            _ => self,
        }
    }
}

/// Whether the store has been told about an execution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Authority {
    /// No watermark: the store cannot say anything about the execution.
    NotPopulated,
    /// A watermark exists over this span.
    Authoritative {
        /// The watermark's first sequence.
        first_seq: u64,
        /// The watermark's last sequence.
        through_seq: u64,
    },
}

/// Why a guarded read cannot answer. Never means "no events".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// No watermark: the store was never told about the execution.
    NotPopulated,
    /// The watermark's last sequence differs from the stored head.
    WatermarkAhead,
    /// No coverage record: the partition was not proven to start at the first event.
    NoCoverage,
    /// The chain's length or first event disagrees with the coverage record.
    CoverageMismatch,
    /// The events are not contiguous from seq 1, each linking to its predecessor.
    BrokenChain,
}

impl Reason {
    /// Every reason, in the order the guarded read checks them.
    pub const ALL: [Reason; 5] = [
        Reason::NotPopulated,
        Reason::WatermarkAhead,
        Reason::NoCoverage,
        Reason::CoverageMismatch,
        Reason::BrokenChain,
    ];

    /// The wire name.
    pub fn as_str(&self) -> &'static str {
        match self {
            Reason::NotPopulated => "not_populated",
            Reason::WatermarkAhead => "watermark_ahead",
            Reason::NoCoverage => "no_coverage",
            Reason::CoverageMismatch => "coverage_mismatch",
            Reason::BrokenChain => "broken_chain",
        }
    }
}

/// The answer of the guarded read.
#[derive(Debug, Clone, PartialEq)]
pub enum Guarded {
    /// The store's chain is the execution's whole chain (possibly empty).
    Authoritative(Vec<ChainEvent>),
    /// The store cannot answer; ask the authoritative source.
    CannotAnswer(Reason),
}

/// One page of the guarded read: some of the chain's events, served only after the whole
/// partition passed the guarded read's checks in the same point-in-time view.
#[derive(Debug, Clone, PartialEq)]
pub struct ChainPage {
    /// Events in sequence order, from the requested sequence on (empty past the end).
    pub events: Vec<ChainEvent>,
    /// The sequence of the chain's newest event in the view the page was checked in: the whole
    /// chain `1..=through_seq` was authoritative there.
    pub through_seq: u64,
    /// The sequence the following page starts at, or `None` when this page reaches
    /// `through_seq` (or the requested end).
    pub next_from_seq: Option<u64>,
}

/// The answer of a paged guarded read.
#[derive(Debug, Clone, PartialEq)]
pub enum GuardedPage {
    /// The whole chain is authoritative; here is one page of it.
    Authoritative(ChainPage),
    /// The store cannot answer; ask the authoritative source.
    CannotAnswer(Reason),
}

/// Result of walking an execution from its head to its root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Completeness {
    /// The walk from the head reached a root after exactly `span` events.
    Complete,
    /// The walk stopped short of the span.
    Incomplete {
        /// The predecessor the walk needed and did not find, if that is why it stopped (a walk can
        /// also stop early at a root, or on a cycle).
        gap_at: Option<EventId>,
        /// Events walked.
        walked: u64,
        /// Highest stored sequence.
        span: u64,
    },
}

impl Completeness {
    /// True for [`Completeness::Complete`].
    pub fn is_complete(&self) -> bool {
        matches!(self, Completeness::Complete)
    }

    /// The missing predecessor, if any.
    pub fn gap_at(&self) -> Option<&EventId> {
        match self {
            Completeness::Complete => None,
            Completeness::Incomplete { gap_at, .. } => gap_at.as_ref(),
        }
    }
}

/// Everything the store knows about one execution, read from one point-in-time view.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecutionState {
    /// Watermark-derived authority.
    pub authority: Authority,
    /// The coverage record.
    pub coverage: Option<Coverage>,
    /// The newest event.
    pub head: Option<Head>,
    /// Head-to-root walk result.
    pub completeness: Completeness,
}

/// A successful append.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Appended {
    /// The event's position in the chain.
    pub exec_seq: u64,
    /// The index of the write that stored it (for a duplicate: the original write).
    pub commit_index: u64,
    /// True when the event was already stored with identical content.
    pub duplicate: bool,
}

/// How a replicated delivery or an effect would fork a chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Fork {
    /// A different event already occupies the sequence.
    SeqTaken {
        /// The contested sequence.
        exec_seq: u64,
        /// The event stored there.
        stored: EventId,
        /// The event offered.
        offered: EventId,
    },
    /// The event id is already stored at another sequence.
    IdElsewhere {
        /// The event id.
        event_id: EventId,
        /// Where it is stored.
        stored_seq: u64,
        /// Where it was offered.
        offered_seq: u64,
    },
}

impl std::fmt::Display for Fork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fork::SeqTaken {
                exec_seq,
                stored,
                offered,
            } => write!(f, "seq {exec_seq} holds event {stored}, not {offered}"),
            Fork::IdElsewhere {
                event_id,
                stored_seq,
                offered_seq,
            } => write!(
                f,
                "event {event_id} is stored at seq {stored_seq}, not {offered_seq}"
            ),
        }
    }
}

/// A size limit of the store or the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    /// One event's payload, in bytes of JSON.
    PayloadBytes,
    /// Events in one populate (or one part of a populate session).
    PopulateEvents,
    /// Events in one replicated delivery.
    DeliveryEvents,
    /// Events in one append of several events.
    AppendEvents,
    /// Bytes of the events of one append of several events (they are one Raft entry).
    AppendBytes,
    /// One request body, in bytes.
    BodyBytes,
    /// One answer, in bytes (an unpaged read, an answer a node relays).
    AnswerBytes,
    /// Bytes of the stored events a rebuild moves into quarantine (they move in one batch).
    QuarantineBytes,
    /// Bytes of a rebuild's reason.
    ReasonBytes,
}

impl Limit {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Limit::PayloadBytes => "payload_bytes",
            Limit::PopulateEvents => "populate_events",
            Limit::DeliveryEvents => "delivery_events",
            Limit::AppendEvents => "append_events",
            Limit::AppendBytes => "append_bytes",
            Limit::BodyBytes => "body_bytes",
            Limit::AnswerBytes => "answer_bytes",
            Limit::QuarantineBytes => "quarantine_bytes",
            Limit::ReasonBytes => "reason_bytes",
        }
    }
}

/// A request over a size limit: which limit, the size found (when it is known: a body cut off
/// at the limit has no size) and the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Oversize {
    /// The limit passed.
    pub what: Limit,
    /// The size found.
    pub size: Option<u64>,
    /// The limit.
    pub limit: u64,
}

impl std::fmt::Display for Oversize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.size {
            Some(size) => write!(
                f,
                "{} is {size}, the limit is {}",
                self.what.as_str(),
                self.limit
            ),
            None => write!(
                f,
                "{} is over the limit of {}",
                self.what.as_str(),
                self.limit
            ),
        }
    }
}

/// Why an append was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AppendError {
    /// The request exceeds a size limit; nothing was written.
    #[error("too large: {0}")]
    TooLarge(Oversize),
    /// The request breaks a rule of the data model; nothing was written.
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// A `genesis` append names a predecessor: wrong whatever the store holds.
    #[error("invalid input: genesis: true requires prev_event_id: null")]
    GenesisWithPrev,
    /// `prev_event_id` is not the current head (I1).
    #[error("{}", not_head_message(expected.as_ref(), got.as_ref()))]
    NotHead {
        /// The current head's id (`None`: the execution is empty).
        expected: Option<EventId>,
        /// The `prev_event_id` of the request.
        got: Option<EventId>,
    },
    /// The event id is stored with different content.
    #[error("event {event_id} is already stored at seq {exec_seq} with different content")]
    EventConflict {
        /// The event id.
        event_id: EventId,
        /// Where the stored event sits.
        exec_seq: u64,
    },
    /// Applying the write would fork the chain (a second line of defence; a correct evaluation
    /// never gets here).
    #[error("the write would fork the chain: {0}")]
    Forked(Fork),
    /// The head moved between evaluation and apply.
    #[error("the head moved between evaluation and apply")]
    HeadMoved,
    /// The engine failed; the execution is left as the rules of SPEC §4.5 allow.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// Why `apply_replicated` was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReplicateError {
    /// The delivery exceeds a size limit; nothing was written.
    #[error("too large: {0}")]
    TooLarge(Oversize),
    /// The delivery breaks a rule of the data model; nothing was written.
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// The delivery conflicts with stored events; nothing was written.
    #[error("the delivery would fork the chain: {0}")]
    Forked(Fork),
    /// The engine failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// Why `populate_from_log` failed (a refused or diverged log is an outcome, not an error).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PopulateError {
    /// The log exceeds a size limit; nothing was written.
    #[error("too large: {0}")]
    TooLarge(Oversize),
    /// The log breaks a rule of the data model; nothing was written.
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// The execution changed between evaluation and apply; the caller may retry.
    #[error("the execution changed while the populate was applied")]
    HeadMoved,
    /// Applying would fork the chain (a second line of defence).
    #[error("the write would fork the chain: {0}")]
    Forked(Fork),
    /// A part names a session the store is not in, or leaves a gap after the parts it took.
    /// Nothing was written.
    #[error("{}", session_conflict_message(*next_position))]
    SessionConflict {
        /// Where the session named continues (the position after every part taken), or `None`
        /// when the store holds no such session for the execution.
        next_position: Option<u64>,
    },
    /// The engine failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// The refusal of an append whose `prev_event_id` is not the head, in words: what the head is
/// and what the request named.
pub fn not_head_message(expected: Option<&EventId>, got: Option<&EventId>) -> String {
    let head = match expected {
        Some(head) => format!("the execution's head is {head}"),
        None => "the execution is empty".to_string(),
    };
    let named = match got {
        Some(prev) => format!("the append named {prev} as its previous event"),
        None => "the append named no previous event".to_string(),
    };
    format!("not the head: {head}, but {named}")
}

/// The refusal of a populate part that does not continue its session, in words.
pub fn session_conflict_message(next_position: Option<u64>) -> String {
    match next_position {
        Some(next) => format!("the session continues at position {next}"),
        None => "no such populate session for this execution; start it at position 0".into(),
    }
}

/// Names one part of a log sent in several populates (a log longer than one request body).
///
/// Parts carry the log in link order: part one holds positions `0..n`, the next continues at
/// `n`, and so on to `total`. Part one starts the session (replacing any other of the same
/// execution); every later part must name it and start at or before the position after the
/// parts taken (re-sending a part is harmless). Coverage is raised with part one and the
/// watermark is written with the last, so the execution is unservable while a session is open and
/// stays so if it is abandoned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PopulateSession {
    /// The session's id, chosen by the caller.
    pub id: SessionId,
    /// The log position (from 0, in link order) of this part's first event.
    pub position: u64,
    /// How many events the whole log holds.
    pub total: u64,
}

/// What one part of a populate session did.
#[derive(Debug, Clone, PartialEq)]
pub enum PartOutcome {
    /// The part matched the stored chain where they overlap and its missing events were stored;
    /// the session continues at `next_position`.
    Accepted {
        /// The position the next part starts at.
        next_position: u64,
        /// The whole log's length, as the session declared it.
        total: u64,
        /// Events this part appended.
        appended: u64,
    },
    /// The session ended: with the last part (`in_sync`/`extended` or `stale_log`), or early
    /// (`diverged` or `refused`, which also end the session).
    Finished(FromLog),
}

/// A successful `apply_replicated`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Replicated {
    /// Events newly stored.
    pub applied: u64,
    /// Events already stored with identical content.
    pub duplicates: u64,
}

/// Why a log does not describe one chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Refusal {
    /// More than one event has no predecessor.
    MultipleRoots,
    /// A predecessor is not in the log.
    DanglingPrev,
    /// No event is without a predecessor.
    NoRoot,
    /// Two events name the same predecessor.
    Fork,
    /// Some events cannot be reached from the root (they form a cycle).
    Unreachable,
}

impl Refusal {
    /// Every reason, in the order the checks run.
    pub const ALL: [Refusal; 5] = [
        Refusal::MultipleRoots,
        Refusal::DanglingPrev,
        Refusal::NoRoot,
        Refusal::Fork,
        Refusal::Unreachable,
    ];

    /// The wire name.
    pub fn as_str(&self) -> &'static str {
        match self {
            Refusal::MultipleRoots => "multiple_roots",
            Refusal::DanglingPrev => "dangling_prev",
            Refusal::NoRoot => "no_root",
            Refusal::Fork => "fork",
            Refusal::Unreachable => "unreachable",
        }
    }
}

/// The outcome of `populate_from_log`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum FromLog {
    /// The stored chain is a prefix of the log and now equals it.
    InSync {
        /// The coverage total after the populate.
        total: u64,
        /// Events appended by this call.
        appended: u64,
    },
    /// The store holds more than the log and everything the log holds matched. Benign here; the
    /// caller decides between a stale log and a second writer by re-reading the log.
    StaleLog {
        /// The stored span (highest sequence).
        stored_len: u64,
        /// Events in the log.
        log_len: u64,
    },
    /// A position both hold is filled differently. Serve-trust was revoked (coverage dropped);
    /// events and watermark stay as evidence.
    Diverged {
        /// Position of the first disagreement, from 0 in link order.
        at_position: u64,
        /// The stored event there.
        stored: EventId,
        /// The log's event there.
        log: EventId,
    },
    /// The log is not one chain. Nothing was appended and serve-trust was revoked.
    Refused {
        /// What is wrong with the log.
        reason: Refusal,
    },
}

impl FromLog {
    /// True for the outcomes that leave the partition servable and need no alarm.
    pub fn is_healthy(&self) -> bool {
        matches!(self, FromLog::InSync { .. } | FromLog::StaleLog { .. })
    }

    /// The label used in metrics and on the wire (`extended` when an in-sync populate appended).
    pub fn label(&self) -> &'static str {
        match self {
            FromLog::InSync { appended: 0, .. } => "in_sync",
            FromLog::InSync { .. } => "extended",
            FromLog::StaleLog { .. } => "stale_log",
            FromLog::Diverged { .. } => "diverged",
            FromLog::Refused { .. } => "refused",
        }
    }
}

/// A stored partition a rebuild moved aside (`k<exec>/<number>`), with the events it held kept
/// beside it: the evidence of what the store served before the log replaced it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct QuarantineRecord {
    /// Numbers the execution's records from 1, in the order of their rebuilds.
    pub number: u64,
    /// When the leader evaluated the rebuild, in milliseconds since the Unix epoch.
    pub quarantined_at_ms: u64,
    /// The log index the rebuild was applied at.
    pub commit_index: u64,
    /// Why the operator (or the populator) asked for it.
    pub reason: String,
    /// What the store found when it compared the stored chain with the log.
    pub diagnosis: String,
    /// The moved partition's head.
    pub head: Option<Head>,
    /// Its watermark.
    pub watermark: Option<Watermark>,
    /// Its coverage record.
    pub coverage: Option<Coverage>,
    /// How many events it held (kept under the record, readable in pages).
    pub events: u64,
}

/// Why a rebuild was not done. Nothing was changed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RebuildError {
    /// The log, the reason or the stored partition exceeds a size limit.
    #[error("too large: {0}")]
    TooLarge(Oversize),
    /// The request breaks a rule of the API.
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// The log is not one chain: nothing can be rebuilt from it.
    #[error("the log is not one chain ({}): nothing was quarantined", .0.as_str())]
    LogRefused(Refusal),
    /// The stored chain is the log's beginning: a populate completes it and loses nothing.
    #[error(
        "the stored chain agrees with the log ({stored_len} of its {log_len} events): \
         populate it instead; nothing was quarantined"
    )]
    NotDiverged {
        /// Events stored.
        stored_len: u64,
        /// Events in the log.
        log_len: u64,
    },
    /// The execution changed between evaluation and apply; the caller may retry.
    #[error("the execution changed while the rebuild was applied")]
    HeadMoved,
    /// The engine failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// One entry of the commit-ordered change feed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Change {
    /// The index of the write that stored the event.
    pub commit_index: u64,
    /// The event's execution.
    pub execution_id: ExecutionId,
    /// The event's sequence.
    pub exec_seq: u64,
    /// The event's id.
    pub event_id: EventId,
}
