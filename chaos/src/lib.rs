//! `chaos`: deterministic simulations of whole chainstore clusters under faults (turmoil).
//!
//! What is real: the node (axum router, leader evaluation, latches, openraft with chainstore's
//! log store and state machine, the chain store) and the client library. What is swapped: the
//! transport (`net`: hyper over turmoil sockets instead of reqwest over TCP) and the engine
//! (`MemEngine`, which loses unsynced writes on a crash and fails chosen writes).
//!
//! - `run`: one run of a seed — hosts, client actors, the fault schedule, healing, the report.
//! - `scenario`: scripted runs whose faults a test places at exact moments.
//! - `actors`: the client hosts (controller, writer, populator, replicator, reader, checker).
//! - `world`: the models of the truth, the invariant checks, the trace and its hash.
//! - `net`, `rng`: the simulated network and the seeded generator everything random uses.
//!
//! Builds with `--cfg tokio_unstable` (see `.cargo/config.toml`) so that each host's tokio runtime
//! is seeded; openraft's election timeouts come from `raft_store::raft::seed_thread_rng`.

pub mod actors;
pub mod net;
pub mod rng;
pub mod run;
pub mod scenario;
pub mod world;

pub use run::{run, Report, SimOptions};
