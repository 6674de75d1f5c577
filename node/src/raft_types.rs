//! The types of a node's Raft instance: the Raft handle over its group's keyspace of the node's
//! watched engine, its metrics, the store it applies to, and the note of which leader it last
//! heard from.

use std::sync::Arc;

use openraft::{Raft, RaftMetrics};
use raft_store::engine::GroupEngine;
use raft_store::raft::{NodeId, StateMachine, TypeConfig};
use raft_store::ChainStore;

use crate::watched::WatchedEngine;

/// A Raft group's keyspace in the node's one engine (today the node runs group 0, whose keys are
/// those of a single-group store: see [`GroupEngine`]).
pub type GroupStorage = GroupEngine<WatchedEngine>;

/// The store type a node serves from.
pub type Store = ChainStore<Arc<GroupStorage>>;

/// The Raft instance of a node. Its state machine is over a concrete engine type: over
/// `dyn Engine` (whose trait is `'static`) the compiler cannot prove the futures of openraft's
/// methods `Send`.
pub type NodeRaft = Raft<TypeConfig, StateMachine<GroupStorage>>;

/// The latest Raft metrics of a node.
pub type NodeMetrics = RaftMetrics<TypeConfig>;

/// The leader that last sent this node an AppendEntries (a heartbeat at least), and when it was
/// answered: a follower stops naming a leader it has not heard from within its lease.
#[derive(Debug, Default)]
pub struct LastHeard(std::sync::Mutex<Option<(NodeId, tokio::time::Instant)>>);

impl LastHeard {
    /// Notes that `leader` was just answered.
    pub fn note(&self, leader: NodeId) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((leader, tokio::time::Instant::now()));
    }

    /// The leader last heard from, and when.
    pub fn last(&self) -> Option<(NodeId, tokio::time::Instant)> {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}
