//! The HTTP API's contract: every request and answer body, the error body with its closed set
//! of codes, the read parameters and the header names. The node serializes these types and the
//! client deserializes the same ones, so a field renamed on one side is renamed on both.
//!
//! These are wire types only. The Raft log has its own encoding (in `raft-store`), so a change
//! here never changes what is on disk.

use std::collections::{BTreeMap, BTreeSet};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{
    Authority, ChainEvent, Change, Coverage, EventId, ExecutionId, Fork, FromLog, Head, Limit,
    LogEvent, Oversize, PartOutcome, PopulateSession, QuarantineRecord, Reason, Refusal,
};

/// The names of the headers the API defines.
pub mod headers {
    /// On answers: the id of the leader the answering node knows, so a client goes there next.
    pub const LEADER: &str = "x-chainstore-leader";
    /// On a request a node relays to its leader: the relaying node's id. A relayed request is
    /// never relayed again.
    pub const FORWARDED: &str = "x-chainstore-forwarded";
    /// On a backup (`GET /v1/snapshot`): the last log index the backup includes.
    pub const LAST_LOG_INDEX: &str = "x-chainstore-last-log-index";
    /// On a peer's request in a plaintext cluster: the cluster secret.
    pub const CLUSTER_SECRET: &str = "x-chainstore-secret";
    /// On a peer's Raft RPC: the Raft group (the shard) it is for. Absent means group 0, the
    /// one group of a single-shard cluster, so the peers of a release before shards interoperate.
    pub const GROUP: &str = "x-chainstore-group";
}

/// How fresh a read must be (`consistency=` on every read).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Consistency {
    /// Reflects every write acknowledged before the read (the default).
    #[default]
    Linearizable,
    /// The answering node's own state; the answer says which applied index it reflects.
    Local,
}

impl Consistency {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Consistency::Linearizable => "linearizable",
            Consistency::Local => "local",
        }
    }
}

/// The query of every read: how fresh, and the applied index the answering node must have
/// reached first.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadQuery {
    /// How fresh (default linearizable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consistency: Option<Consistency>,
    /// Wait until the answering node applied at least this index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_index: Option<u64>,
}

/// The query of `chain` and `chain/raw`: a read's parameters and, for a paged read, where the
/// page starts (`from_seq`, from 1), how many events it may hold (`limit`) and the last
/// sequence wanted (`to_seq`: a reader pins it to its first page's `through_seq`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ChainQuery {
    /// How fresh (default linearizable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consistency: Option<Consistency>,
    /// Wait until the answering node applied at least this index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_index: Option<u64>,
    /// First sequence wanted (from 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_seq: Option<u64>,
    /// Last sequence wanted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_seq: Option<u64>,
    /// Most events wanted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
}

impl ChainQuery {
    /// Whether the reader asked for a page (any of the paging parameters).
    pub fn paged(&self) -> bool {
        self.from_seq.is_some() || self.to_seq.is_some() || self.limit.is_some()
    }

    /// The read parameters alone.
    pub fn read(&self) -> ReadQuery {
        ReadQuery {
            consistency: self.consistency,
            min_index: self.min_index,
        }
    }
}

/// The query of `GET /v1/changes`: the page after `after`, at most `limit` changes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ChangesQuery {
    /// The shard whose feed to read: required when the cluster has several (each shard's
    /// feed has commit indexes of its own), 0 or absent when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<u32>,
    /// The commit index the page starts after (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<u64>,
    /// Most changes wanted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    /// How fresh (default linearizable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consistency: Option<Consistency>,
    /// Wait until the answering node applied at least this index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_index: Option<u64>,
}

impl ChangesQuery {
    /// The read parameters alone.
    pub fn read(&self) -> ReadQuery {
        ReadQuery {
            consistency: self.consistency,
            min_index: self.min_index,
        }
    }
}

/// The query of `GET /v1/snapshot`: a read's parameters and, on a cluster of several shards,
/// the shard whose backup to take (required there: each shard is backed up on its own, and a
/// backup set holds one file per shard).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BackupQuery {
    /// The shard whose backup to take: required when the cluster has several, 0 or absent when
    /// it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<u32>,
    /// How fresh (default linearizable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consistency: Option<Consistency>,
    /// Wait until the answering node applied at least this index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_index: Option<u64>,
}

impl BackupQuery {
    /// The read parameters alone.
    pub fn read(&self) -> ReadQuery {
        ReadQuery {
            consistency: self.consistency,
            min_index: self.min_index,
        }
    }
}

/// `POST /v1/executions/{id}/events` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AppendAnswer {
    /// The execution.
    pub execution_id: ExecutionId,
    /// The event appended (or found already stored).
    pub event_id: EventId,
    /// The event's position in the chain.
    pub exec_seq: u64,
    /// The index of the write that stored it (for a duplicate: the original write).
    pub commit_index: u64,
    /// True when the event was already stored with identical content.
    pub duplicate: bool,
}

/// `POST /v1/executions/{id}/events` also takes several events at once: linked in order (each
/// names the one before it as `prev_event_id`), the first continuing the head, only the first
/// `genesis`; stored all together as one Raft entry, or not at all.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AppendBatchBody {
    /// The events, in chain order.
    pub events: Vec<crate::AppendRequest>,
}

/// One event of an append of several: where it is, and whether it was already stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AppendedEvent {
    /// The event.
    pub event_id: EventId,
    /// Its position in the chain.
    pub exec_seq: u64,
    /// The index of the write that stored it (for a duplicate: the original write).
    pub commit_index: u64,
    /// True when it was already stored with identical content.
    pub duplicate: bool,
}

/// `POST /v1/executions/{id}/events` answers an append of several events: one entry per event,
/// in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AppendBatchAnswer {
    /// The execution.
    pub execution_id: ExecutionId,
    /// The events, in the order sent.
    pub events: Vec<AppendedEvent>,
}

/// `POST /v1/executions/{id}/populate` takes: a whole log, or one part of a session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PopulateBody {
    /// The log's events (a session part: the events at its positions, in link order).
    pub events: Vec<LogEvent>,
    /// Present when the body is one part of a longer log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<PopulateSession>,
}

/// `POST /v1/executions/{id}/populate` answers, tagged by `outcome`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum PopulateAnswer {
    /// In sync with the log, nothing appended.
    InSync {
        /// The coverage total.
        total: u64,
        /// Always 0.
        appended: u64,
    },
    /// In sync with the log after appending.
    Extended {
        /// The coverage total.
        total: u64,
        /// Events appended by this call.
        appended: u64,
    },
    /// The store holds more than the log and everything the log holds matched.
    StaleLog {
        /// The stored span.
        stored_len: u64,
        /// Events in the log.
        log_len: u64,
    },
    /// A position both hold is filled differently; serve-trust was revoked.
    Diverged {
        /// Position of the first disagreement, from 0 in link order.
        at_position: u64,
        /// The stored event there.
        stored: EventId,
        /// The log's event there.
        log: EventId,
    },
    /// The log is not one chain; serve-trust was revoked.
    Refused {
        /// What is wrong with the log.
        reason: Refusal,
    },
    /// A session part was taken; the session continues at `next_position`.
    PartAccepted {
        /// The position the next part starts at.
        next_position: u64,
        /// The whole log's length, as the session declared it.
        total: u64,
        /// Events this part appended.
        appended: u64,
    },
}

impl From<&FromLog> for PopulateAnswer {
    fn from(outcome: &FromLog) -> Self {
        match *outcome {
            FromLog::InSync { total, appended: 0 } => PopulateAnswer::InSync { total, appended: 0 },
            FromLog::InSync { total, appended } => PopulateAnswer::Extended { total, appended },
            FromLog::StaleLog {
                stored_len,
                log_len,
            } => PopulateAnswer::StaleLog {
                stored_len,
                log_len,
            },
            FromLog::Diverged {
                at_position,
                ref stored,
                ref log,
            } => PopulateAnswer::Diverged {
                at_position,
                stored: stored.clone(),
                log: log.clone(),
            },
            FromLog::Refused { reason } => PopulateAnswer::Refused { reason },
        }
    }
}

impl From<&PartOutcome> for PopulateAnswer {
    fn from(outcome: &PartOutcome) -> Self {
        match outcome {
            PartOutcome::Accepted {
                next_position,
                total,
                appended,
            } => PopulateAnswer::PartAccepted {
                next_position: *next_position,
                total: *total,
                appended: *appended,
            },
            PartOutcome::Finished(outcome) => outcome.into(),
        }
    }
}

impl From<PopulateAnswer> for PartOutcome {
    fn from(answer: PopulateAnswer) -> Self {
        let finished = match answer {
            PopulateAnswer::PartAccepted {
                next_position,
                total,
                appended,
            } => {
                return PartOutcome::Accepted {
                    next_position,
                    total,
                    appended,
                }
            }
            PopulateAnswer::InSync { total, appended }
            | PopulateAnswer::Extended { total, appended } => FromLog::InSync { total, appended },
            PopulateAnswer::StaleLog {
                stored_len,
                log_len,
            } => FromLog::StaleLog {
                stored_len,
                log_len,
            },
            PopulateAnswer::Diverged {
                at_position,
                stored,
                log,
            } => FromLog::Diverged {
                at_position,
                stored,
                log,
            },
            PopulateAnswer::Refused { reason } => FromLog::Refused { reason },
        };
        PartOutcome::Finished(finished)
    }
}

/// `POST /v1/executions/{id}/replicated` takes: events in any order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplicatedBody {
    /// The delivered events.
    pub events: Vec<ChainEvent>,
}

/// `POST /v1/executions/{id}/rebuild` takes: the whole log and why the stored partition is to be
/// moved aside.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RebuildBody {
    /// Why (kept in the quarantine record; at most 4 KiB).
    pub reason: String,
    /// The authoritative log's events for the execution, in any order.
    pub events: Vec<LogEvent>,
}

/// `POST /v1/executions/{id}/rebuild` answers: the record the old partition went into and the
/// chain now stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RebuildAnswer {
    /// The execution.
    pub execution_id: ExecutionId,
    /// The quarantine record holding what was stored before.
    pub quarantine: QuarantineRecord,
    /// The chain's length now (the log's).
    pub total: u64,
}

/// `GET /v1/executions/{id}/quarantine` answers: the execution's quarantine records, newest last.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct QuarantineList {
    /// The execution.
    pub execution_id: ExecutionId,
    /// The records, oldest first (the newest [`QUARANTINE_LIST_MAX`] when there are more).
    pub records: Vec<QuarantineRecord>,
    /// Whether older records were left out.
    pub truncated: bool,
    /// The applied index the answer reflects.
    pub applied_index: u64,
}

/// Most records one quarantine list holds.
pub const QUARANTINE_LIST_MAX: usize = 1_000;

/// `GET /v1/executions/{id}/quarantine/{number}` answers: one record and a page of its events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct QuarantinePage {
    /// The execution.
    pub execution_id: ExecutionId,
    /// The record.
    pub record: QuarantineRecord,
    /// Events the partition held, in sequence order, from `from_seq`.
    pub events: Vec<ChainEvent>,
    /// Where the next page starts; `None` when this page ends the read.
    pub next_from_seq: Option<u64>,
    /// The applied index the answer reflects.
    pub applied_index: u64,
}

/// `GET /v1/executions/{id}/chain` answers, tagged by `answer`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "answer", rename_all = "snake_case")]
pub enum ChainAnswer {
    /// The whole chain is authoritative; here it is, or one page of it.
    Authoritative {
        /// The execution.
        execution_id: ExecutionId,
        /// Events in sequence order.
        events: Vec<ChainEvent>,
        /// The answering node's applied index at the read.
        applied_index: u64,
        /// The chain's newest sequence in the view the read was checked in.
        through_seq: u64,
        /// Where the next page starts; `None` when this page ends the read.
        next_from_seq: Option<u64>,
    },
    /// The store cannot answer; ask the authoritative source. Never means "no events".
    CannotAnswer {
        /// The execution.
        execution_id: ExecutionId,
        /// Why.
        reason: Reason,
        /// The answering node's applied index at the read.
        applied_index: u64,
    },
}

/// `GET /v1/executions/{id}/chain/raw` answers: stored events, unguarded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RawChainAnswer {
    /// Stored events in sequence order.
    pub events: Vec<ChainEvent>,
    /// The answering node's applied index at the read.
    pub applied_index: u64,
    /// Where the next page starts; `None` when this page ends the read.
    pub next_from_seq: Option<u64>,
}

/// `GET /v1/executions/{id}/state` answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StateAnswer {
    /// The execution.
    pub execution_id: ExecutionId,
    /// Watermark-derived authority.
    pub authority: Authority,
    /// The coverage record.
    pub coverage: Option<Coverage>,
    /// The newest event.
    pub head: Option<Head>,
    /// Whether the walk from the head reaches the root over the whole span.
    pub complete: bool,
    /// The missing predecessor, when the walk stopped at one.
    pub gap_at: Option<EventId>,
    /// The applied index the answer reflects.
    pub applied_index: u64,
}

/// `GET /v1/changes` answers: a page of the change feed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ChangesAnswer {
    /// Changes in commit order.
    pub changes: Vec<Change>,
    /// Pass as `after` for the next page.
    pub next: u64,
}

/// A Raft role, as `GET /v1/cluster` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RaftRole {
    /// Leads the cluster.
    Leader,
    /// A voter following a leader.
    Follower,
    /// A voter asking for votes.
    Candidate,
    /// A member without a vote (or not a member yet).
    Learner,
    /// Stopped.
    Shutdown,
}

impl RaftRole {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            RaftRole::Leader => "leader",
            RaftRole::Follower => "follower",
            RaftRole::Candidate => "candidate",
            RaftRole::Learner => "learner",
            RaftRole::Shutdown => "shutdown",
        }
    }
}

impl std::fmt::Display for RaftRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `GET /v1/cluster` answers: one node's view of the cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ClusterStatus {
    /// The answering node.
    pub node_id: u64,
    /// Its role.
    pub state: RaftRole,
    /// The leader it knows.
    pub leader_id: Option<u64>,
    /// Its term.
    pub term: u64,
    /// Voting members, in ascending order.
    pub voters: Vec<u64>,
    /// Non-voting members, in ascending order.
    pub learners: Vec<u64>,
    /// Member addresses by id.
    pub nodes: BTreeMap<u64, String>,
    /// Its last log index.
    pub last_log_index: u64,
    /// Its last applied index.
    pub last_applied: u64,
    /// Its last snapshot's index.
    pub snapshot_index: u64,
    /// Its last purged log index.
    pub purged_index: u64,
    /// The cluster's shard count (1: one Raft group holds every execution). The fields above
    /// describe the lowest shard this node holds a replica of: shard 0 of a single-shard cluster.
    #[serde(default = "one")]
    pub shards: u32,
    /// Every shard this node holds a replica of, in shard order (empty from a node of a release
    /// before shards).
    #[serde(default)]
    pub groups: Vec<GroupStatus>,
}

fn one() -> u32 {
    1
}

/// One shard's Raft group as the answering node sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GroupStatus {
    /// The shard.
    pub shard: u32,
    /// This node's role in its group.
    pub state: RaftRole,
    /// The group's leader as this node knows it.
    pub leader_id: Option<u64>,
    /// The node meant to lead it, when the cluster has several shards.
    pub preferred_leader: Option<u64>,
    /// The group's term.
    pub term: u64,
    /// Its voting members, in ascending order.
    pub voters: Vec<u64>,
    /// This node's last log index in the group.
    pub last_log_index: u64,
    /// This node's last applied index in the group.
    pub last_applied: u64,
}

/// `POST /v1/cluster/init` takes: the first members, and how the executions are spread.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InitBody {
    /// Node id → address.
    pub nodes: BTreeMap<u64, String>,
    /// How many shards (Raft groups) hold the executions: 1 (the default) to 1,024, fixed for
    /// the cluster's life.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<u32>,
    /// Replicas of each shard when there are several: 3 (the default) or 5, at most the nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<u32>,
}

/// `POST /v1/cluster/init` answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct InitAnswer {
    /// Always true: a failure is an error answer.
    pub initialized: bool,
}

/// `POST /v1/cluster/learners` takes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LearnerBody {
    /// The new member's id.
    pub node_id: u64,
    /// Its address.
    pub addr: String,
}

/// `POST /v1/cluster/voters` takes: the complete new voter set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VotersBody {
    /// The voters.
    pub voters: BTreeSet<u64>,
}

/// The answer of a membership change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct MembershipAnswer {
    /// Always true: a failure is an error answer.
    pub ok: bool,
}

/// `GET /healthz` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct HealthAnswer {
    /// Always `ok`.
    pub status: String,
}

/// `GET /readyz` answers (200 ready, 503 not).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ReadyAnswer {
    /// The leader the node knows.
    pub leader_id: Option<u64>,
    /// Its last log index.
    pub last_log_index: u64,
    /// Its last applied index.
    pub last_applied: u64,
    /// Why its storage stopped, if it did.
    pub storage_failure: Option<String>,
    /// Why Raft stopped, if it did.
    pub raft_stopped: Option<String>,
}

/// An error answer: `{"error": code, "message": ..., ...fields}`, the fields fixed by the code.
/// The set of codes is closed; a client meeting another code is talking to another API.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "error", rename_all = "snake_case")]
pub enum ErrorBody {
    /// 400: the request breaks a rule of the data model or of the API.
    InvalidInput {
        /// What is wrong.
        message: String,
    },
    /// 401: a missing or unknown credential.
    Unauthorized {
        /// What is wrong.
        message: String,
    },
    /// 403: a known credential without the right to this route.
    Forbidden {
        /// What is wrong.
        message: String,
    },
    /// 404: no such route, event or resource.
    NotFound {
        /// What was not found.
        message: String,
    },
    /// 405: the route exists, not for this method.
    MethodNotAllowed {
        /// What is wrong.
        message: String,
    },
    /// 409: `prev_event_id` is not the head.
    NotHead {
        /// What happened.
        message: String,
        /// The current head (`None`: the execution is empty).
        expected: Option<EventId>,
        /// The `prev_event_id` sent.
        got: Option<EventId>,
    },
    /// 409: the event id is stored with different content.
    EventConflict {
        /// What happened.
        message: String,
        /// The event id.
        event_id: EventId,
        /// Where it is stored.
        exec_seq: u64,
    },
    /// 409: the write would fork a chain.
    Forked {
        /// What happened.
        message: String,
        /// How.
        fork: Fork,
    },
    /// 409: a populate part that does not continue the execution's open session.
    SessionConflict {
        /// What happened.
        message: String,
        /// Where the session continues; `None` when the store holds no such session.
        next_position: Option<u64>,
    },
    /// 409: a request that does not apply to the store's state: a peer's request, or a rebuild
    /// of an execution that agrees with the log or from a log that is not one chain.
    Refused {
        /// What happened.
        message: String,
    },
    /// 413: a body, a payload, a populate, a delivery or an answer over its limit.
    TooLarge {
        /// What happened and what to do instead.
        message: String,
        /// Which limit.
        what: Limit,
        /// The size found, when known.
        size: Option<u64>,
        /// The limit.
        limit: u64,
    },
    /// 503: no leader is known or reachable. Retryable.
    NoLeader {
        /// What happened.
        message: String,
    },
    /// 503: the cluster could not answer in time. Retryable.
    Unavailable {
        /// What happened.
        message: String,
        /// The node's applied index, when it matters (a lagging local read).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        applied_index: Option<u64>,
    },
    /// 503: the node serves all the requests it may and as many wait. Retryable.
    Overloaded {
        /// What happened.
        message: String,
    },
    /// 500: the node's own invariant broke.
    Internal {
        /// What happened.
        message: String,
    },
}

impl ErrorBody {
    /// The error's code, as the `error` field names it.
    pub fn code(&self) -> &'static str {
        match self {
            ErrorBody::InvalidInput { .. } => "invalid_input",
            ErrorBody::Unauthorized { .. } => "unauthorized",
            ErrorBody::Forbidden { .. } => "forbidden",
            ErrorBody::NotFound { .. } => "not_found",
            ErrorBody::MethodNotAllowed { .. } => "method_not_allowed",
            ErrorBody::NotHead { .. } => "not_head",
            ErrorBody::EventConflict { .. } => "event_conflict",
            ErrorBody::Forked { .. } => "forked",
            ErrorBody::SessionConflict { .. } => "session_conflict",
            ErrorBody::Refused { .. } => "refused",
            ErrorBody::TooLarge { .. } => "too_large",
            ErrorBody::NoLeader { .. } => "no_leader",
            ErrorBody::Unavailable { .. } => "unavailable",
            ErrorBody::Overloaded { .. } => "overloaded",
            ErrorBody::Internal { .. } => "internal",
        }
    }

    /// The HTTP status the code is answered with.
    pub fn status(&self) -> u16 {
        match self {
            ErrorBody::InvalidInput { .. } => 400,
            ErrorBody::Unauthorized { .. } => 401,
            ErrorBody::Forbidden { .. } => 403,
            ErrorBody::NotFound { .. } => 404,
            ErrorBody::MethodNotAllowed { .. } => 405,
            ErrorBody::NotHead { .. }
            | ErrorBody::EventConflict { .. }
            | ErrorBody::Forked { .. }
            | ErrorBody::SessionConflict { .. }
            | ErrorBody::Refused { .. } => 409,
            ErrorBody::TooLarge { .. } => 413,
            ErrorBody::NoLeader { .. }
            | ErrorBody::Unavailable { .. }
            | ErrorBody::Overloaded { .. } => 503,
            ErrorBody::Internal { .. } => 500,
        }
    }

    /// The human-readable message.
    pub fn message(&self) -> &str {
        match self {
            ErrorBody::InvalidInput { message }
            | ErrorBody::Unauthorized { message }
            | ErrorBody::Forbidden { message }
            | ErrorBody::NotFound { message }
            | ErrorBody::MethodNotAllowed { message }
            | ErrorBody::NotHead { message, .. }
            | ErrorBody::EventConflict { message, .. }
            | ErrorBody::Forked { message, .. }
            | ErrorBody::SessionConflict { message, .. }
            | ErrorBody::Refused { message }
            | ErrorBody::TooLarge { message, .. }
            | ErrorBody::NoLeader { message }
            | ErrorBody::Unavailable { message, .. }
            | ErrorBody::Overloaded { message }
            | ErrorBody::Internal { message } => message,
        }
    }

    /// A 413 answer for `oversize`.
    pub fn too_large(oversize: Oversize, message: String) -> Self {
        ErrorBody::TooLarge {
            message,
            what: oversize.what,
            size: oversize.size,
            limit: oversize.limit,
        }
    }

    /// The limit of a 413 answer.
    pub fn oversize(&self) -> Option<Oversize> {
        match *self {
            ErrorBody::TooLarge {
                what, size, limit, ..
            } => Some(Oversize { what, size, limit }),
            _ => None,
        }
    }

    /// Every code, in the order of the variants (what a counter by code creates series for).
    pub fn codes() -> Vec<&'static str> {
        Self::examples().iter().map(Self::code).collect()
    }

    /// One error of each code, with every field set: for tests that walk the whole set.
    // The example ids are fixed and valid.
    #[allow(clippy::expect_used)]
    pub fn examples() -> Vec<ErrorBody> {
        let id = |s: &str| EventId::new(s).expect("a valid example id");
        let message = |s: &str| s.to_string();
        vec![
            ErrorBody::InvalidInput {
                message: message("bad"),
            },
            ErrorBody::Unauthorized {
                message: message("who"),
            },
            ErrorBody::Forbidden {
                message: message("no"),
            },
            ErrorBody::NotFound {
                message: message("none"),
            },
            ErrorBody::MethodNotAllowed {
                message: message("verb"),
            },
            ErrorBody::NotHead {
                message: message("head"),
                expected: Some(id("e2")),
                got: Some(id("e1")),
            },
            ErrorBody::EventConflict {
                message: message("conflict"),
                event_id: id("e1"),
                exec_seq: 7,
            },
            ErrorBody::Forked {
                message: message("fork"),
                fork: Fork::SeqTaken {
                    exec_seq: 3,
                    stored: id("a"),
                    offered: id("b"),
                },
            },
            ErrorBody::SessionConflict {
                message: message("session"),
                next_position: Some(40),
            },
            ErrorBody::Refused {
                message: message("term"),
            },
            ErrorBody::TooLarge {
                message: message("big"),
                what: Limit::BodyBytes,
                size: Some(9),
                limit: 8,
            },
            ErrorBody::NoLeader {
                message: message("election"),
            },
            ErrorBody::Unavailable {
                message: message("slow"),
                applied_index: Some(12),
            },
            ErrorBody::Overloaded {
                message: message("busy"),
            },
            ErrorBody::Internal {
                message: message("bug"),
            },
        ]
    }
}

impl std::fmt::Display for ErrorBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.code(), self.status(), self.message())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn name_of<T: Serialize>(value: &T) -> String {
        match serde_json::to_value(value).unwrap() {
            Value::String(name) => name,
            other => panic!("{other} is not a name"),
        }
    }

    #[test]
    fn every_name_is_written_once_and_serde_agrees_with_it() {
        for reason in Reason::ALL {
            assert_eq!(name_of(&reason), reason.as_str());
        }
        for refusal in Refusal::ALL {
            assert_eq!(name_of(&refusal), refusal.as_str());
        }
        for consistency in [Consistency::Linearizable, Consistency::Local] {
            assert_eq!(name_of(&consistency), consistency.as_str());
        }
        for role in [
            RaftRole::Leader,
            RaftRole::Follower,
            RaftRole::Candidate,
            RaftRole::Learner,
            RaftRole::Shutdown,
        ] {
            assert_eq!(name_of(&role), role.as_str());
        }
    }

    #[test]
    fn every_error_code_round_trips_with_its_fields_and_its_status() {
        let mut codes = std::collections::BTreeSet::new();
        for body in ErrorBody::examples() {
            let json = serde_json::to_value(&body).unwrap();
            assert_eq!(json["error"], json!(body.code()), "{json}");
            assert_eq!(json["message"], json!(body.message()), "{json}");
            let back: ErrorBody = serde_json::from_value(json.clone()).unwrap();
            assert_eq!(back, body, "{json}");
            assert!((400..600).contains(&body.status()));
            assert!(codes.insert(body.code()), "{} twice", body.code());
        }
        assert_eq!(codes.len(), 15);
    }

    #[test]
    fn a_populate_answer_names_extended_when_an_in_sync_populate_appended() {
        let answer =
            |outcome: &FromLog| serde_json::to_value(PopulateAnswer::from(outcome)).unwrap();
        assert_eq!(
            answer(&FromLog::InSync {
                total: 3,
                appended: 0
            })["outcome"],
            "in_sync"
        );
        assert_eq!(
            answer(&FromLog::InSync {
                total: 3,
                appended: 2
            })["outcome"],
            "extended"
        );
        for outcome in [
            FromLog::InSync {
                total: 3,
                appended: 2,
            },
            FromLog::StaleLog {
                stored_len: 4,
                log_len: 3,
            },
            FromLog::Refused {
                reason: Refusal::Fork,
            },
        ] {
            let wire = PopulateAnswer::from(&outcome);
            assert_eq!(
                serde_json::to_value(&wire).unwrap()["outcome"],
                outcome.label()
            );
            assert_eq!(PartOutcome::from(wire), PartOutcome::Finished(outcome));
        }
    }
}
