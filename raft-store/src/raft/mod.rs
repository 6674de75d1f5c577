//! openraft storage over the engine (openraft 0.10).
//!
//! - [`LogStore`]: the Raft log, vote and committed id under the `R/` namespace. An append is
//!   durable (synced) before openraft is told so. Entries are stored in the log's own versioned
//!   binary format ([`entry_codec`]), apart from the HTTP API's JSON; the append RPC carries
//!   them in that format too ([`crate::wire`]).
//! - [`StateMachine`]: applies each committed entry's [`Effect`](crate::Effect) through
//!   `ChainStore::stage_effect`, together with the applied log id, as ONE atomic batch; builds
//!   snapshots from one point-in-time scan of the state-machine range and installs them in one
//!   batch, so a half-installed snapshot is never visible.
//!
//! - [`take_backup`] / [`restore_backup`]: a consistent copy of a node's state machine, and the
//!   seeding of a new cluster's empty stores from it.
//!
//! - [`ChainRuntime`]: tokio for openraft, with a seedable generator for its election timeouts
//!   (see [`seed_thread_rng`]), so a simulation replays a seed exactly.
//!
//! The log store and the state machine share one engine. The state machine does not sync its
//! applies (the log is the durable record, and openraft re-applies committed entries after a
//! restart); `LogStore::purge` syncs the engine before deleting entries, so the applied state a
//! purge relies on is durable first.

mod backup;
pub mod entry_codec;
mod keys;
mod log_store;
mod runtime;
pub(crate) mod snapshot;
mod snapshot_data;
mod state_machine;
mod types;

pub use backup::{
    begin_backup, inspect_backup, restore_backup, restore_backup_from, take_backup, Backup,
    BackupError, BackupWriter,
};
pub use log_store::{LogFlush, LogFlusher, LogStore};
pub use runtime::{seed_thread_rng, ChainRuntime};
pub use snapshot_data::{SnapshotData, SnapshotDir, SnapshotFile};
pub use state_machine::StateMachine;
pub use types::{
    log_id, Command, CommandResult, Entry, EntryPayload, LeaderId, LogId, Membership, Rejection,
    Snapshot, SnapshotMeta, StoredMembership, TypeConfig, Vote,
};

/// The state machine's key range `[start, end)`: everything a snapshot or a backup holds, and
/// nothing of the Raft log (which differs between replicas).
pub const STATE_MACHINE_RANGE: (&[u8], &[u8]) = (keys::SM_START, keys::SM_END);

/// Node ids of the cluster.
pub type NodeId = u64;
