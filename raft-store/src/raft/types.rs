//! The Raft type configuration and the application data carried in the log.

use serde::{Deserialize, Serialize};

use crate::chain::{Applied, Effect, Rebuild};
use chainstore_model::{Fork, Head, QuarantineRecord};

openraft::declare_raft_types!(
    /// chainstore's Raft types: u64 node ids with an address, commands carrying resolved effects.
    /// Leader ids are openraft's default (`leader_id_adv`: a term and a node id), whose stored
    /// forms are the ones 0.9 wrote.
    pub TypeConfig:
        D = Command,
        R = CommandResult,
        NodeId = u64,
        Node = openraft::BasicNode,
        AsyncRuntime = super::runtime::ChainRuntime,
);

/// The leader id of a term (also the committed leader id of a log id).
pub type LeaderId = openraft::impls::leader_id_adv::LeaderId<u64, u64>;
/// A log id: the leader that proposed the entry and its index.
pub type LogId = openraft::LogId<LeaderId>;
/// A vote: for a leader id, committed once a quorum granted it.
pub type Vote = openraft::Vote<LeaderId>;
/// What an entry carries.
pub type EntryPayload = openraft::EntryPayload<Command, u64, openraft::BasicNode>;
/// A log entry.
pub type Entry = openraft::Entry<LeaderId, EntryPayload>;
/// A cluster configuration.
pub type Membership = openraft::Membership<u64, openraft::BasicNode>;
/// A configuration and the id of the entry that carried it.
pub type StoredMembership = openraft::StoredMembership<LeaderId, u64, openraft::BasicNode>;
/// What a snapshot covers.
pub type SnapshotMeta = openraft::SnapshotMeta<LeaderId, u64, openraft::BasicNode>;
/// A snapshot: its meta and its bytes.
pub type Snapshot = openraft::Snapshot<LeaderId, u64, openraft::BasicNode, super::SnapshotData>;

/// The log id of the entry at `index` proposed by `node_id`, leader of `term`.
pub fn log_id(term: u64, node_id: u64, index: u64) -> LogId {
    LogId::new(LeaderId { term, node_id }, index)
}

/// What one log entry asks every replica to apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Command {
    /// One resolved write, applied as one atomic batch with the entry's log id.
    Effect(Effect),
    /// The resolved writes of several requests, each on a different execution (the leader's
    /// per-execution latches make it so; apply refuses a second effect on the same execution
    /// as malformed), applied in order in ONE batch with the entry's log id; one result each.
    Effects(Vec<Effect>),
    /// One execution's partition moved into a quarantine record and the first batch of its
    /// chain from the log written in its place, in ONE batch (always alone in its entry).
    Rebuild(Rebuild),
}

impl std::fmt::Display for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Command::Effect(effect) => write!(f, "effect on {}", effect.execution_id),
            Command::Effects(effects) => write!(f, "{} effects", effects.len()),
            Command::Rebuild(rebuild) => write!(f, "rebuild of {}", rebuild.effect.execution_id),
        }
    }
}

/// Why an entry's effect was not applied. Deterministic: every replica reaches the same verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rejection {
    /// The effect would fork a chain.
    Forked(Fork),
    /// The head moved between evaluation and apply.
    HeadMoved {
        /// The head the evaluation saw.
        expected: Option<Head>,
        /// The head at apply time.
        found: Option<Head>,
    },
    /// The effect is malformed.
    Malformed(String),
}

/// The outcome of applying one entry.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommandResult {
    /// A blank or membership entry: nothing to report.
    #[default]
    Nothing,
    /// The effect was applied.
    Applied(Applied),
    /// The effect was refused; only the applied log id moved.
    Rejected(Rejection),
    /// The results of a [`Command::Effects`] entry, one per effect, in order.
    Each(Vec<CommandResult>),
    /// A [`Command::Rebuild`] was applied: the record the partition went into, and what the
    /// chain's first batch stored.
    Rebuilt(QuarantineRecord, Applied),
}
