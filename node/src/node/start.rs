//! Starting one Raft group of a node: what the node's groups share ([`Shared`]), the group's
//! store opened on its keyspace of the shared engine, Raft started over it, the proposer and the
//! watch that stops Raft when the storage fails.

use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::Arc;

use openraft::Raft;
use raft_store::engine::GroupEngine;
use raft_store::raft::{LogFlusher, LogStore, NodeId, SnapshotDir, StateMachine};
use raft_store::{ChainStore, Engine, StoreConfig};

use super::{Node, ENTRIES_IN_FLIGHT, ENTRY_EFFECTS_MAX};
use crate::config::NodeConfig;
use crate::errors::StartError;
use crate::latch::Latches;
use crate::metrics::Metrics;
use crate::network::{Network, PeerCredentials};
use crate::proposer::{EntryLimits, Proposer};
use crate::raft_stream;
use crate::raft_types::NodeRaft;
use crate::watched::{StorageHealth, WatchedEngine};
use chainstore_transport::Transport;

/// What every Raft group of a node shares: the engine and its one log flush path, the
/// transport and the peer credential, the counters, the storage health and the slots of the
/// append streams the node serves.
#[derive(Clone)]
pub(crate) struct Shared {
    pub(crate) engine: Arc<WatchedEngine>,
    flusher: LogFlusher,
    pub(crate) transport: Arc<dyn Transport>,
    pub(crate) peer_credentials: PeerCredentials,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) health: Arc<StorageHealth>,
    raft_streams: Arc<tokio::sync::Semaphore>,
}

impl Shared {
    /// The shared parts of a node over `engine` and `transport`.
    pub(crate) fn new(
        config: &NodeConfig,
        engine: Arc<dyn Engine>,
        transport: Arc<dyn Transport>,
    ) -> Self {
        let metrics = Arc::new(Metrics::default());
        let health = Arc::new(StorageHealth::default());
        let engine = Arc::new(WatchedEngine::new(
            engine,
            Arc::clone(&metrics),
            Arc::clone(&health),
        ));
        // The node's one flush path: every group's log store syncs through it.
        let flusher = LogFlusher::start(Arc::clone(&engine), config.log_flush);
        Self {
            engine,
            flusher,
            transport,
            peer_credentials: PeerCredentials::new(&config.peer_auth),
            metrics,
            health,
            raft_streams: Arc::new(tokio::sync::Semaphore::new(raft_stream::STREAMS_MAX)),
        }
    }
}

impl Node {
    /// Opens group `group`'s store in the shared engine and starts its Raft. The group is not
    /// part of a cluster until [`Node::initialize`] runs on one of its members, or a leader
    /// adds this one.
    pub(crate) async fn start(
        config: NodeConfig,
        shared: &Shared,
        group: u32,
    ) -> Result<Arc<Node>, StartError> {
        let store_config = store_config(&config);
        // Group 0 is the unprefixed keyspace of a single-group store.
        let engine = Arc::new(GroupEngine::new(Arc::clone(&shared.engine), group));
        let entry_bytes_max = store_config.populate_batch_bytes_max;
        let store = Arc::new(ChainStore::open(Arc::clone(&engine), store_config)?);
        let log_store = LogStore::with_flusher(Arc::clone(&engine), &shared.flusher);
        let state_machine = match &config.snapshot_dir {
            Some(dir) => {
                // Group 0 keeps the directory a single-group node used.
                let dir = match group {
                    0 => dir.clone(),
                    g => dir.join(format!("group-{g}")),
                };
                StateMachine::with_snapshot_dir(
                    Arc::clone(&store),
                    SnapshotDir::open(&dir).map_err(|e| {
                        StartError::Raft(format!("cannot open the snapshot directory {dir:?}: {e}"))
                    })?,
                )
            }
            None => StateMachine::new(Arc::clone(&store)),
        };
        let network = Network::new(
            Arc::clone(&shared.transport),
            shared.peer_credentials.clone(),
            config
                .limits
                .append_rpc_bytes_max
                .min(config.limits.raft_body_bytes_max),
            group,
        );
        let raft_config = Arc::new(config.openraft_config()?);
        let raft = Raft::new(
            config.id,
            raft_config,
            network,
            log_store,
            state_machine.clone(),
        )
        .await
        .map_err(|e| StartError::Raft(e.to_string()))?;
        let proposer = Proposer::start(
            raft.clone(),
            EntryLimits {
                effects_max: ENTRY_EFFECTS_MAX,
                bytes_max: entry_bytes_max,
                in_flight_max: ENTRIES_IN_FLIGHT,
                write_timeout: config.limits.write_timeout,
            },
        );
        tokio::spawn(stop_on_storage_failure(
            raft.clone(),
            Arc::clone(&shared.health),
            config.id,
            group,
        ));
        Ok(Arc::new(Node {
            config,
            group,
            raft,
            state_machine,
            receiving: tokio::sync::Mutex::new(None),
            heard: Arc::default(),
            store,
            latches: Latches::default(),
            transport: Arc::clone(&shared.transport),
            peer_credentials: shared.peer_credentials.clone(),
            metrics: Arc::clone(&shared.metrics),
            health: Arc::clone(&shared.health),
            handing_off: AtomicBool::new(false),
            proposing: AtomicUsize::new(0),
            proposer,
            raft_streams: Arc::clone(&shared.raft_streams),
        }))
    }
}

/// The chain store's configuration on a node: the node's limits, an entry that fits in the
/// append RPC a peer accepts, and applies left unsynced (the Raft log is the durable record).
fn store_config(config: &NodeConfig) -> StoreConfig {
    StoreConfig {
        payload_bytes_max: config.limits.payload_bytes_max,
        populate_batch_events_max: config.limits.populate_batch_events_max,
        populate_events_max: config.limits.populate_events_max,
        // An entry must fit in the append RPC a peer accepts, with room for the envelope.
        populate_batch_bytes_max: StoreConfig::default()
            .populate_batch_bytes_max
            .min(config.limits.raft_body_bytes_max / 4),
        // The Raft log is the durable record; applies are synced before a purge.
        sync_writes: false,
        ..StoreConfig::default()
    }
}

/// A storage failure stops Raft: this node no longer votes, appends or acknowledges.
async fn stop_on_storage_failure(
    stopping: NodeRaft,
    watching: Arc<StorageHealth>,
    id: NodeId,
    group: u32,
) {
    let failure = watching.failed().await;
    tracing::error!(
        node = id,
        group,
        %failure,
        "storage failed: Raft stops on this node (no votes, no appends, no answers) until \
         it is restarted on a sound disk"
    );
    if let Err(err) = stopping.shutdown().await {
        tracing::warn!(%err, "raft shutdown after a storage failure reported an error");
    }
}
