//! `raft-store`: the execution-partitioned chain store and the storage engines under it.
//!
//! - [`engine`]: the [`Engine`] trait (point get, ordered scan, atomic batch, sync) and its
//!   implementations: [`RocksEngine`] (production), [`MemEngine`] (tests and simulations; loses
//!   unsynced writes on a simulated crash, fails chosen writes), [`CountingEngine`] (counts
//!   operations to test the cost rules).
//! - [`ChainStore`]: the rules of SPEC §4 over any engine: `append`, `apply_replicated`,
//!   `populate_from_log`, the guarded read `chain_if_authoritative` and the other reads. Writes are
//!   evaluated into [`Effect`]s and applied as one atomic batch each.
//! - [`raft`]: the openraft log store and state machine over the same engine: each committed
//!   entry's effect and its log id in one batch; snapshots from one point-in-time scan.
//! - the data model (ids, events, outcomes) and the HTTP contract ([`api`]) come from
//!   `chainstore-model` and are re-exported by name.
//!
//! - [`wire`]: the bytes of the Raft network: every peer message's encoding and the append
//!   stream's framing. Connections, routes and credentials are the node's: this crate knows
//!   nothing about HTTP.

// A panic is never an answer: production code handles every failure (tests may unwrap).
#![deny(clippy::unwrap_used, clippy::expect_used)]

mod chain;
pub mod engine;
// Test support (the fuzz tests and `scripts/fuzz.sh` drive it): a failed setup may panic.
#[doc(hidden)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
pub mod fuzz;
pub mod raft;
pub mod wire;

pub use chain::{
    AppendPlan, Applied, ApplyError, BatchPlan, ChainStore, ChangePage, CoverageChange, Effect,
    HeadCheck, OpenError, PageBounds, PartPlan, PopulatePlan, QuarantineNote, QuarantinedPage,
    Rebuild, RebuildPlan, SessionChange, SessionRecord, StoreConfig, CHANGES_PAGE_MAX,
    FORMAT_VERSION, QUARANTINE_BYTES_MAX, REASON_BYTES_MAX,
};
pub use engine::{CountingEngine, Engine, MemEngine, OpCounts, RocksEngine, RocksOptions};
