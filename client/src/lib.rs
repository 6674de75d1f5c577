//! `chainstore-client`: the typed client of a chainstore cluster, and the consumer-side helpers.
//!
//! - [`Client`] (`client.rs`): one handle over the node URLs; discovers and follows the leader,
//!   retries retryable failures with bounded exponential back-off and jitter, and returns typed
//!   results ([`chainstore_model::Appended`], [`GuardedRead`], [`chainstore_model::FromLog`],
//!   ...) and typed errors ([`ClientError`]).
//! - `backup.rs`: [`Client::save_backup`], a cluster's backup saved whole or not at all: one
//!   file, or a sharded cluster's backup set with its manifest.
//! - `types.rs`: read options and the client's views of the API's answers (the answers
//!   themselves are `chainstore_model::api`'s types, shared with the node).
//! - `consumer.rs`: [`LogSource`], [`Reconciler`] (turns `stale_log` into staleness or a
//!   second-writer divergence by re-reading the log), [`Comparator`] (agreement and coverage).
//!
//! The data model (ids, events, outcomes) is `chainstore-model`'s and the TLS options are
//! `chainstore-transport`'s: a program depends on those crates for them, so each type has one
//! path. The PostgreSQL populator and `chainctl` are built on this crate in
//! `chainstore-populator`; nothing of theirs (clap, PostgreSQL, Prometheus, axum) is compiled
//! into a program that only wants a [`Client`].

// A panic is never an answer: production code handles every failure (tests may unwrap).
#![deny(clippy::unwrap_used, clippy::expect_used)]

mod backup;
mod client;
mod consumer;
mod error;
mod types;

pub use backup::SavedBackup;
pub use client::{
    Client, ClientBuilder, RetryPolicy, PART_BYTES_MAX, PART_EVENTS_MAX, RESPONSE_BYTES_MAX,
};
pub use consumer::{
    BoxFuture, Comparator, Comparison, LogError, LogSource, ReconcileError, Reconciler, Verdict,
};
pub use error::ClientError;
pub use types::{
    authoritative_events, Backup, GuardedPageRead, GuardedRead, PageRequest, ReadOptions,
};
