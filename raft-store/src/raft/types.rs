//! The Raft type configuration and the application data carried in the log.

use serde::{Deserialize, Serialize};

use crate::chain::{Applied, Effect, Rebuild};
use chainstore_model::{Fork, Head, QuarantineRecord};

openraft::declare_raft_types!(
    /// chainstore's Raft types: u64 node ids with an address, commands carrying resolved effects,
    /// snapshots in memory or in files.
    pub TypeConfig:
        D = Command,
        R = CommandResult,
        NodeId = u64,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = super::snapshot_data::SnapshotData,
        AsyncRuntime = super::runtime::ChainRuntime,
);

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
