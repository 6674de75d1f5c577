//! The node's errors and leadership types: why a start, a write, a read or a membership change
//! failed, the leader as a node knows it, and what a leadership hand-off came to. A leaf: it
//! imports nothing of this crate, so every module can name these types without a circle.

use chainstore_model::{AppendError, PopulateError, RebuildError, ReplicateError, StorageError};
use raft_store::raft::{NodeId, Rejection};
use raft_store::OpenError;

/// The leader as this node knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    /// The leader's node id.
    pub id: NodeId,
    /// Its advertised `host:port`.
    pub addr: String,
}

/// Why a node could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The store could not be opened.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// The Raft configuration is invalid.
    #[error("invalid raft configuration: {0}")]
    Config(#[from] openraft::ConfigError),
    /// openraft failed to start.
    #[error("raft failed to start: {0}")]
    Raft(String),
}

/// Why a write was not done.
#[derive(Debug, Clone, thiserror::Error)]
pub enum WriteError {
    /// This node is not the leader; the write belongs there.
    #[error("not the leader")]
    NotLeader(Option<Leader>),
    /// The append was refused by the rules of SPEC §4.1.
    #[error(transparent)]
    Append(AppendError),
    /// The populate failed (its outcomes, even `diverged`, are answers, not errors).
    #[error(transparent)]
    Populate(PopulateError),
    /// The delivery was refused.
    #[error(transparent)]
    Replicate(ReplicateError),
    /// The rebuild was refused; nothing changed.
    #[error(transparent)]
    Rebuild(RebuildError),
    /// The entry was committed but its effect was refused at apply time.
    #[error("the write was refused at apply time: {0:?}")]
    Rejected(Rejection),
    /// No answer in time, or Raft is shutting down; the outcome may be unknown. Retryable.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// The store failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// Why a read barrier could not be passed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ReadError {
    /// A linearizable read must be served by the leader.
    #[error("not the leader")]
    NotLeader(Option<Leader>),
    /// The node did not apply far enough in time, or lost leadership mid-read.
    #[error("unavailable: {message}")]
    Unavailable {
        /// What happened.
        message: String,
        /// The node's applied index when it gave up.
        applied_index: u64,
    },
}

/// Why a membership change failed.
#[derive(Debug, thiserror::Error)]
pub enum MembershipError {
    /// Only the leader changes membership.
    #[error("not the leader")]
    NotLeader(Option<Leader>),
    /// The request is not acceptable (already initialized, unknown node, ...).
    #[error("{0}")]
    Invalid(String),
    /// Raft did not answer in time or is shutting down.
    #[error("unavailable: {0}")]
    Unavailable(String),
}

/// What a leadership hand-off came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandOff {
    /// This node was not the leader: nothing to hand over.
    NotLeader,
    /// Another node leads now.
    HandedTo(NodeId),
    /// No successor took over in time; the others elect one once this node stops.
    NoSuccessor(String),
}
