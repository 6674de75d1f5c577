//! `chainstore-model`: the data model of SPEC §2–§4, shared by the store, the node and the
//! client. No storage, no I/O: types that serialize to the JSON of the HTTP API.
//!
//! - `ids`: [`ExecutionId`], [`EventId`] — validated on construction and on deserialization.
//! - `types`: events ([`ChainEvent`], [`LogEvent`], [`AppendRequest`]), per-execution records
//!   ([`Head`], [`Watermark`], [`Coverage`]), answers ([`Guarded`], [`Reason`], [`FromLog`],
//!   [`Completeness`]) and the error of every operation.
//! - `order`: [`order_by_links`], a log's order decided by its links, or why it has none.
//! - `error`: [`StorageError`], the one storage failure every operation can surface.
//! - `shard`: [`ShardCount`] and [`ShardId`]: which of a cluster's Raft groups holds an
//!   execution, by a hash fixed for the cluster's life.
//! - `placement`: [`Placement`]: which nodes hold each shard's replicas and which one is meant
//!   to lead it, computed once when a cluster is made.
//! - `backup`: [`BackupManifest`]: what a sharded cluster's backup set holds, one file per
//!   shard, checked before anything is restored.
//! - [`api`]: the HTTP contract: every request and answer body, the error body and its codes,
//!   read parameters, header names. The node writes these types; the client reads them.

// A panic is never an answer: production code handles every failure (tests may unwrap).
#![deny(clippy::unwrap_used, clippy::expect_used)]

mod answer;
pub mod api;
mod backup;
mod error;
mod ids;
mod order;
mod placement;
mod shard;
mod types;

pub use backup::{BackupManifest, InvalidManifest, ShardBackup, MANIFEST_FILE};
pub use error::StorageError;
pub use ids::{validate_id, EventId, ExecutionId, InvalidId, SessionId, ID_BYTES_MAX};
pub use order::{order_by_links, order_segment};
pub use placement::{Layout, Placement, PlacementError, ShardReplicas};
pub use shard::{InvalidShardCount, ShardCount, ShardId, SHARDS_MAX, SHARD_HASH};
pub use types::{
    not_head_message, session_conflict_message, AppendError, AppendRequest, Appended, Authority,
    ChainEvent, ChainPage, Change, Completeness, Coverage, ExecutionState, Fork, FromLog, Guarded,
    GuardedPage, Head, Limit, LogEvent, Origin, Oversize, PartOutcome, PopulateError,
    PopulateSession, QuarantineRecord, Reason, RebuildError, Refusal, ReplicateError, Replicated,
    Watermark,
};
