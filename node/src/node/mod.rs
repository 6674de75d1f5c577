//! [`Node`]: this node's replica of one Raft group (one shard) — the Raft instance, the chain
//! store it applies to, and the leader-side write path of SPEC §5. A node runs one per shard it
//! holds ([`crate::host::Host`]); a single-shard cluster's is group 0.
//!
//! A write is evaluated only by the leader, under the execution's latch, and only once the state
//! machine has applied an entry of the leader's current term (so it holds every entry committed
//! before that term). The evaluation's effect is proposed as one entry; rejections never enter
//! the log. Answers that come from local state without a proposal (a duplicate, a `not_head`) are
//! given only after the leader confirms its leadership with a read-index round.

//!
//! The methods are split by concern: `start.rs` (opening the store and starting Raft),
//! `write.rs` (the leader's write path), `read.rs` (read barriers), `membership.rs`,
//! `hand_off.rs` (leadership handed over before stopping) and `snapshot.rs` (snapshots received
//! chunk by chunk); this file holds the node's state and its accessors.

mod hand_off;
mod membership;
mod read;
mod snapshot;
mod start;
mod write;

pub(crate) use start::Shared;

use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::Arc;

use openraft::async_runtime::WatchReceiver;
use openraft::Instant;
use raft_store::raft::{NodeId, StateMachine, TypeConfig};

use crate::config::NodeConfig;
use crate::errors::Leader;
use crate::latch::Latches;
use crate::metrics::Metrics;
use crate::network::PeerCredentials;
use crate::proposer::Proposer;
use crate::raft_stream;
use crate::raft_types::{GroupStorage, LastHeard, NodeMetrics, NodeRaft, Store};
use crate::watched::StorageHealth;
use chainstore_transport::Transport;

use snapshot::Receiving;

/// One running replica of a Raft group.
pub struct Node {
    config: NodeConfig,
    /// The Raft group (the shard) this is the replica of.
    group: u32,
    raft: NodeRaft,
    /// The state machine Raft applies to (a handle: snapshots are received through it).
    state_machine: StateMachine<GroupStorage>,
    /// The snapshot being received, if any: one at a time.
    receiving: tokio::sync::Mutex<Option<Receiving>>,
    /// The leader that last sent this one an AppendEntries, and when it was answered.
    heard: Arc<LastHeard>,
    store: Arc<Store>,
    latches: Latches,
    transport: Arc<dyn Transport>,
    peer_credentials: PeerCredentials,
    metrics: Arc<Metrics>,
    health: Arc<StorageHealth>,
    /// Set while this node hands its leadership over before stopping: new writes are refused
    /// (503, retryable) so that a successor can catch up with a log that no longer grows.
    handing_off: AtomicBool,
    /// Proposals under way (counted before the hand-off flag is checked, so a hand-off that
    /// sees none knows no proposal will follow).
    proposing: AtomicUsize,
    /// Puts the evaluated writes of concurrent requests into shared entries.
    proposer: Proposer,
    /// Slots of the append streams this node serves ([`raft_stream::STREAMS_MAX`]).
    raft_streams: Arc<tokio::sync::Semaphore>,
}

/// Most effects (each one request's write) in one Raft entry.
const ENTRY_EFFECTS_MAX: usize = 512;
/// Entries of the proposer under way at once: while one is made durable and replicated, the next
/// one gathers the writes arriving meanwhile (more in flight made smaller entries and fewer
/// appends per second in `scripts/bench.sh`).
const ENTRIES_IN_FLIGHT: usize = 1;

impl Node {
    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.config.id
    }

    /// The Raft group (the shard) this is this node's replica of.
    pub fn group(&self) -> u32 {
        self.group
    }

    /// The configuration the node runs with.
    pub fn config(&self) -> &NodeConfig {
        &self.config
    }

    /// The Raft handle.
    pub fn raft(&self) -> &NodeRaft {
        &self.raft
    }

    /// Slots of the append streams this node serves.
    pub(crate) fn raft_streams(&self) -> &Arc<tokio::sync::Semaphore> {
        &self.raft_streams
    }

    /// What an append stream this node serves works with: its Raft, its frame limit, its
    /// counters and its note of the leader last heard from.
    pub(crate) fn stream_service(&self) -> raft_stream::Service {
        raft_stream::Service {
            raft: self.raft.clone(),
            frame_bytes_max: self.config.limits.raft_body_bytes_max,
            metrics: Arc::clone(&self.metrics),
            heard: Arc::clone(&self.heard),
        }
    }

    /// The chain store (reads only: writes go through Raft).
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The transport used for Raft RPCs and forwarding.
    pub fn transport(&self) -> &Arc<dyn Transport> {
        &self.transport
    }

    /// This node's credential for requests to its peers (send them with [`Node::transport`]).
    pub fn peer_credentials(&self) -> &PeerCredentials {
        &self.peer_credentials
    }

    /// Whether node `id` may act as a peer of this one: it is in the membership this node knows
    /// (voters and learners of the latest configuration in its log), or this node holds no
    /// membership yet (a fresh node learns its cluster from whoever initializes or adds it).
    pub fn accepts_peer(&self, id: NodeId) -> bool {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow_watched();
        let membership = metrics.membership_config.membership();
        membership.nodes().next().is_none() || membership.get_node(&id).is_some()
    }

    /// Whether this replica's group has voters: it was initialized, or a leader added it.
    pub fn is_member(&self) -> bool {
        self.raft
            .metrics()
            .borrow_watched()
            .membership_config
            .membership()
            .voter_ids()
            .next()
            .is_some()
    }

    /// Outcome counters.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The first storage error this process saw: once set, Raft is stopped and reads refused.
    pub fn storage_failure(&self) -> Option<String> {
        self.health.failure()
    }

    /// The latest Raft metrics.
    pub fn raft_metrics(&self) -> NodeMetrics {
        self.raft.metrics().borrow_watched().clone()
    }

    /// openraft's record of this node's latest entries (up to 1,024): runs of entries that went
    /// through every stage together, how many entries each run held and when it reached each
    /// stage (proposed, received, submitted, persisted, committed, applied). Empty once Raft
    /// has stopped.
    pub async fn entry_stages(&self) -> Vec<(u64, [openraft::alias::InstantOf<TypeConfig>; 6])> {
        match self.raft.runtime_stats().await {
            Ok(stats) => stats
                .log_stage
                .segments()
                .map(|run| (run.range.end.saturating_sub(run.range.start), run.values))
                .collect(),
            Err(_) => Vec::new(),
        }
    }

    /// The applied index now (0 before anything is applied).
    pub fn applied_index(&self) -> u64 {
        self.raft
            .metrics()
            .borrow_watched()
            .last_applied
            .as_ref()
            .map_or(0, |id| id.index)
    }

    /// The leader as the latest metrics know it.
    pub fn leader(&self) -> Option<Leader> {
        self.leader_in(&self.raft.metrics().borrow_watched())
    }

    /// Notes that node `leader` sent this node an AppendEntries (a heartbeat at least), just
    /// answered.
    pub(crate) fn heard_from(&self, leader: NodeId) {
        self.heard.note(leader);
    }

    /// The id of the leader `m` names, unless nothing says it still leads within its lease
    /// (`election_max`): a leader cut off from its peers still believes it leads (openraft only
    /// stops taking writes) while the others elect a successor, and its followers name it until
    /// they have. This node names no leader then: not itself when no quorum has answered it
    /// within the lease, not another that has sent it nothing for as long. Clients
    /// (`/v1/cluster`, `x-chainstore-leader`, `/readyz`), forwarded requests and its own write
    /// path then stop sending to a leader that cannot commit what they send.
    pub fn leader_id_in(&self, m: &NodeMetrics) -> Option<NodeId> {
        let id = m.current_leader?;
        let lease = self.config.raft.election_max;
        if id != self.config.id {
            return match self.heard.last() {
                Some((from, at)) if from == id && at.elapsed() > lease => None,
                _ => Some(id),
            };
        }
        let alone = m
            .membership_config
            .membership()
            .voter_ids()
            .all(|voter| voter == id);
        // No acknowledgement yet: a leader just elected, by a quorum's votes.
        let lapsed = m
            .last_quorum_acked
            .as_ref()
            .is_some_and(|at| at.elapsed() > lease);
        (alone || !lapsed).then_some(id)
    }

    /// The leader `m` names, with its address, as [`Node::leader_id_in`] says.
    pub fn leader_in(&self, m: &NodeMetrics) -> Option<Leader> {
        let id = self.leader_id_in(m)?;
        let addr = m.membership_config.membership().get_node(&id)?.addr.clone();
        Some(Leader { id, addr })
    }

    /// Stops Raft.
    pub async fn shutdown(&self) {
        if let Err(err) = self.raft.shutdown().await {
            tracing::warn!(%err, "raft shutdown reported an error");
        }
    }
}
