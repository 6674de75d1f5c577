//! Resolved effects: what an evaluation decided, in a form every replica applies identically.
//!
//! Writes happen in two steps. *Evaluation* runs the rules of SPEC §4 against the current state
//! (head check, idempotency, link ordering) and resolves a request into [`Effect`]s: events with
//! their sequences, a watermark to widen, a coverage change. *Application* (`stage_effect`) turns
//! one effect into one atomic write batch. Application never overwrites a stored event: a
//! different event at an occupied sequence, or a known id at another sequence, rejects the whole
//! effect, so even a wrong evaluation cannot fork a chain. In a cluster the leader evaluates and
//! every replica applies; the library's `append` and friends simply do both under one lock.

use serde::{Deserialize, Serialize};

use chainstore_model::StorageError;
use chainstore_model::{ChainEvent, Coverage, Fork, Head, Watermark};
use chainstore_model::{EventId, ExecutionId, SessionId};

/// A precondition on the head, checked when the effect is applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HeadCheck {
    /// No precondition (replicated deliveries arrive in any order).
    Any,
    /// The head must still be what the evaluation saw; otherwise the effect is stale.
    Expect(Option<Head>),
}

/// What an effect does to the coverage record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CoverageChange {
    /// Leave it as it is.
    Keep,
    /// Remove it: serve-trust is revoked.
    Drop,
    /// Write it, never shrinking the total under the same root.
    Raise(Coverage),
}

/// How far a populate session has checked the log against the stored chain (the `p<exec>`
/// record). Positions before `next_position` were compared with the stored chain, or stored, by
/// this session's parts; a stored event never changes, so they stay checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRecord {
    /// The session's id.
    pub id: SessionId,
    /// The whole log's length, as part one declared it.
    pub total: u64,
    /// The position after every part taken (at least 1, at most `total`).
    pub next_position: u64,
    /// The log's first event.
    pub root: EventId,
    /// The log's event at `next_position - 1`: the next part's anchor.
    pub tail: EventId,
}

/// What an effect does to the execution's populate session record.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionChange {
    /// Leave it as it is.
    #[default]
    Keep,
    /// Write it (a part was taken).
    Set(SessionRecord),
    /// Remove it (the session was refused or diverged).
    Clear,
}

/// One resolved write to one execution, applied as one atomic batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Effect {
    /// The execution written.
    pub execution_id: ExecutionId,
    /// Precondition on the head.
    pub head_check: HeadCheck,
    /// Events to store, with their sequences. Their `commit_index` is replaced by the index the
    /// effect is applied at.
    pub events: Vec<ChainEvent>,
    /// Widens the watermark when present.
    pub watermark: Option<Watermark>,
    /// The coverage change.
    pub coverage: CoverageChange,
    /// The populate-session change (absent in entries written before sessions existed).
    #[serde(default)]
    pub session: SessionChange,
}

/// What applying an effect did.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Applied {
    /// Events newly stored.
    pub applied: u64,
    /// Events already stored with identical content (skipped).
    pub duplicates: u64,
}

/// Why an effect was not applied. Nothing was written.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ApplyError {
    /// The effect would fork the chain.
    #[error("the effect would fork the chain: {0:?}")]
    Forked(Fork),
    /// The head is no longer what the evaluation saw.
    #[error("the head moved: expected {expected:?}, found {found:?}")]
    HeadMoved {
        /// The head the evaluation saw.
        expected: Option<Head>,
        /// The head now.
        found: Option<Head>,
    },
    /// The effect itself is malformed (an event of another execution, a sequence of 0).
    #[error("malformed effect: {0}")]
    Malformed(String),
    /// The engine failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
}
