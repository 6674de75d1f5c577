//! `chainstore-node`: one member of a chainstore cluster.
//!
//! The modules are private; what other crates use is re-exported below, by name.
//!
//! - `node`: [`Node`] — Raft, the chain store it applies to, and the leader-side write path
//!   (latches, readiness, evaluation, proposal) and read barriers.
//! - `api`: the HTTP API of SPEC §6 ([`app`] builds the router); `raft_api`: the `/raft/*`
//!   endpoints.
//! - `bootstrap`: the automatic, once-only initialization of a deployed cluster.
//! - `restore`: a new node's storage seeded from a backup file or a sharded cluster's backup
//!   set (`--restore-from`).
//! - `network`: openraft's RPCs over a [`Transport`] (reqwest in production), with this
//!   node's peer credential.
//! - `security`: secrets, client tokens and roles, how peers and clients authenticate;
//!   `api::auth` applies them per route.
//! - `server`: the accept loop (TCP, TLS, HTTP/1.1); `tls`: the node's certificates,
//!   reloaded without a restart.
//! - `config`, `metrics`, `watched`, `latch`: configuration, Prometheus metrics, the
//!   engine wrapper that times writes and turns the first storage error into a stopped node,
//!   per-execution latches.
//!
//! This crate knows nothing about key encodings: storage is `raft-store`'s.

// A panic is never an answer: production code handles every failure (tests may unwrap).
#![deny(clippy::unwrap_used, clippy::expect_used)]
// openraft's error types are large; they are returned as they come.
#![allow(clippy::result_large_err)]

mod api;
mod bootstrap;
mod config;
mod errors;
mod host;
mod latch;
mod metrics;
mod network;
mod node;
mod proposer;
mod raft_stream;
mod raft_types;
mod restore;
mod security;
mod server;
mod tls;
mod watched;

pub use api::auth::Access;
pub use api::{app, route_table};
pub use bootstrap::{bootstrap, parse_voters, Bootstrapped};
pub use config::{Limits, NodeConfig, RaftTimings};
pub use errors::{HandOff, Leader, StartError};
pub use host::Host;
pub use node::Node;
pub use raft_types::{NodeMetrics, NodeRaft};
pub use restore::{restore, Restored};
pub use security::{ClientAuth, PeerAuth, Secret, Tokens};
pub use server::{serve, ServeOptions};
pub use tls::{NodeTls, Reloaded, TlsFiles};
