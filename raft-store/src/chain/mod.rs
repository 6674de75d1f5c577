//! The execution-partitioned chain store (SPEC §2–§4).
//!
//! - `keys`, `codec`: the physical layout; the only files that know bytes.
//! - `effect`: resolved writes, the unit a cluster replicates.
//! - `write`: evaluation of append / replicated / populate, and staging of effects.
//! - `read`: raw and guarded reads, the walk, the change feed.
//! - `quarantine`: rebuilding a diverged execution from the log, keeping what it held.
//! - `store`: `ChainStore`, its configuration, and the library entry points.

pub(crate) mod codec;
pub(crate) mod effect;
pub(crate) mod keys;
mod quarantine;
mod read;
mod store;
mod write;

pub use effect::{
    Applied, ApplyError, CoverageChange, Effect, HeadCheck, SessionChange, SessionRecord,
};
pub use quarantine::{
    QuarantineNote, QuarantinedPage, Rebuild, RebuildPlan, QUARANTINE_BYTES_MAX, REASON_BYTES_MAX,
};
pub use read::{ChangePage, PageBounds, CHANGES_PAGE_MAX};
pub(crate) use store::check_copied_format;
pub use store::{ChainStore, OpenError, StoreConfig, FORMAT_VERSION};
pub use write::{AppendPlan, BatchPlan, PartPlan, PopulatePlan};
