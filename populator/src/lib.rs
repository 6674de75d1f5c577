//! `chainstore-populator`: keeps a chainstore cluster in step with an authoritative PostgreSQL
//! event table, and the pieces the command-line tools share.
//!
//! - `follower.rs`: [`Populator`] follows the table by its order column, populates every
//!   execution it touches through the client's reconciler, keeps a durable [`Checkpoint`] and
//!   counts every verdict ([`Metrics`], [`Problem`]).
//! - [`postgres`]: the table as a [`chainstore_client::LogSource`] ([`postgres::PgLog`]), its
//!   names checked against the catalog, and the connection over TLS (`postgres_tls.rs`).
//! - `connect.rs`: [`ConnectArgs`], the connection flags `chainctl` and the populator share.
//!
//! The binaries: `chainstore-populator` (`src/bin/chainstore-populator`) and `chainctl`
//! (`src/bin/chainctl`), which compares and repairs against the same table.

// A panic is never an answer: production code handles every failure (tests may unwrap).
#![deny(clippy::unwrap_used, clippy::expect_used)]

mod connect;
mod follower;
pub mod postgres;
mod postgres_tls;

pub use connect::{ConnectArgs, ConnectError};
pub use follower::{Checkpoint, Metrics, Options, Populator, Problem, Shared};
