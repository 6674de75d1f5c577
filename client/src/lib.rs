//! `chainstore-client`: the typed client of a chainstore cluster, and the consumer-side helpers.
//!
//! - [`Client`] (`client.rs`): one handle over the node URLs; discovers and follows the leader,
//!   retries retryable failures with bounded exponential back-off and jitter, and returns typed
//!   results ([`Appended`], [`GuardedRead`], [`FromLog`], ...) and typed errors ([`ClientError`]).
//! - `types.rs`: read options and the client's views of the API's answers (the answers
//!   themselves are [`api`]'s types, shared with the node).
//! - `consumer.rs`: [`LogSource`], [`Reconciler`] (turns `stale_log` into staleness or a
//!   second-writer divergence by re-reading the log), [`Comparator`] (agreement and coverage).
//!
//! - `connect.rs`: [`ConnectArgs`], the connection flags the command-line tools share.
//! - [`postgres`]: the authoritative log in a PostgreSQL table ([`postgres::PgLog`], a
//!   [`LogSource`]); [`populator`]: follows that table into a cluster, with metrics.
//!
//! The `chainctl` binary (`src/bin/chainctl`) and `chainstore-populator`
//! (`src/bin/chainstore-populator`) are built on this crate.

mod client;
mod connect;
mod consumer;
mod error;
mod types;

pub mod populator;
pub mod postgres;
mod postgres_tls;

pub use chainstore_model::api::{
    self, ChangesAnswer, ClusterStatus, Consistency, QuarantineList, QuarantinePage, RaftRole,
    RebuildAnswer, StateAnswer,
};
pub use chainstore_model::{
    order_by_links, order_segment, AppendError, AppendRequest, Appended, Authority, ChainEvent,
    ChainPage, Change, Completeness, Coverage, EventId, ExecutionId, Fork, FromLog, Guarded,
    GuardedPage, Head, InvalidId, Limit, LogEvent, Origin, Oversize, PartOutcome, PopulateSession,
    QuarantineRecord, Reason, Refusal, Replicated, SessionId, Watermark,
};
pub use chainstore_transport::{KeyPair, TlsClientOptions};
pub use client::{
    Client, ClientBuilder, RetryPolicy, PART_BYTES_MAX, PART_EVENTS_MAX, RESPONSE_BYTES_MAX,
};
pub use connect::{ConnectArgs, ConnectError};
pub use consumer::{
    BoxFuture, Comparator, Comparison, LogError, LogSource, ReconcileError, Reconciler, Verdict,
};
pub use error::ClientError;
pub use types::{
    authoritative_events, Backup, GuardedPageRead, GuardedRead, PageRequest, ReadOptions,
};
