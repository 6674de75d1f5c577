//! [`Node`]: one cluster member — the Raft instance, the chain store it applies to, and the
//! leader-side write path of SPEC §5.
//!
//! A write is evaluated only by the leader, under the execution's latch, and only once the state
//! machine has applied an entry of the leader's current term (so it holds every entry committed
//! before that term). The evaluation's effect is proposed as one entry; rejections never enter
//! the log. Answers that come from local state without a proposal (a duplicate, a `not_head`) are
//! given only after the leader confirms its leadership with a read-index round.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use openraft::errors::{
    ClientWriteError, Fatal, InitializeError, LinearizableReadError, RaftError,
};
use openraft::raft::SnapshotResponse;
use openraft::{BasicNode, Instant, Raft, RaftMetrics, ReadPolicy, ServerState};
use raft_store::raft::{
    CommandResult, LogStore, NodeId, Rejection, Snapshot, SnapshotData, SnapshotDir, StateMachine,
    TypeConfig,
};
use raft_store::{
    AppendError, AppendRequest, Appended, Applied, BatchPlan, ChainEvent, ChainStore, Effect,
    Engine, ExecutionId, FromLog, LogEvent, OpenError, PartOutcome, PopulateError, PopulateSession,
    QuarantineRecord, RebuildError, ReplicateError, Replicated, StorageError, StoreConfig,
};

use crate::config::NodeConfig;
use crate::latch::Latches;
use crate::metrics::Metrics;
use crate::network::{Network, PeerCredentials, SnapshotChunk};
use crate::proposer::{EntryLimits, ProposeError, Proposer};
use crate::watched::{StorageHealth, WatchedEngine};
use chainstore_transport::Transport;

/// The store type a node serves from.
pub type Store = ChainStore<Arc<WatchedEngine>>;

/// The Raft instance of a node. Its state machine is over a concrete engine type: over
/// `dyn Engine` (whose trait is `'static`) the compiler cannot prove the futures of openraft's
/// methods `Send`.
pub type NodeRaft = Raft<TypeConfig, StateMachine<WatchedEngine>>;

/// The latest Raft metrics of a node.
pub type NodeMetrics = RaftMetrics<TypeConfig>;

/// A snapshot being received from the leader, chunk by chunk.
struct Receiving {
    vote: raft_store::raft::Vote,
    meta: raft_store::raft::SnapshotMeta,
    data: SnapshotData,
    /// Where the next chunk starts.
    next: u64,
}

impl Receiving {
    /// Removes the file of a transfer that will not be installed.
    fn discard(self) {
        if let SnapshotData::File(file) = &self.data {
            let _ = std::fs::remove_file(file.path());
        }
    }
}

/// The leader as this node knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    /// The leader's node id.
    pub id: NodeId,
    /// Its advertised `host:port`.
    pub addr: String,
}

/// Why a node could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The store could not be opened.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// The Raft configuration is invalid.
    #[error("invalid raft configuration: {0}")]
    Config(#[from] openraft::ConfigError),
    /// openraft failed to start.
    #[error("raft failed to start: {0}")]
    Raft(String),
}

/// Why a write was not done.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// This node is not the leader; the write belongs there.
    #[error("not the leader")]
    NotLeader(Option<Leader>),
    /// The append was refused by the rules of SPEC §4.1.
    #[error(transparent)]
    Append(AppendError),
    /// The populate failed (its outcomes, even `diverged`, are answers, not errors).
    #[error(transparent)]
    Populate(PopulateError),
    /// The delivery was refused.
    #[error(transparent)]
    Replicate(ReplicateError),
    /// The rebuild was refused; nothing changed.
    #[error(transparent)]
    Rebuild(RebuildError),
    /// The entry was committed but its effect was refused at apply time.
    #[error("the write was refused at apply time: {0:?}")]
    Rejected(Rejection),
    /// No answer in time, or Raft is shutting down; the outcome may be unknown. Retryable.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// The store failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// Why a read barrier could not be passed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ReadError {
    /// A linearizable read must be served by the leader.
    #[error("not the leader")]
    NotLeader(Option<Leader>),
    /// The node did not apply far enough in time, or lost leadership mid-read.
    #[error("unavailable: {message}")]
    Unavailable {
        /// What happened.
        message: String,
        /// The node's applied index when it gave up.
        applied_index: u64,
    },
}

/// How fresh a read must be: linearizable (a read index via the leader) or this node's own
/// applied state. The API's type.
pub use raft_store::api::Consistency;

/// Why a membership change failed.
#[derive(Debug, thiserror::Error)]
pub enum MembershipError {
    /// Only the leader changes membership.
    #[error("not the leader")]
    NotLeader(Option<Leader>),
    /// The request is not acceptable (already initialized, unknown node, ...).
    #[error("{0}")]
    Invalid(String),
    /// Raft did not answer in time or is shutting down.
    #[error("unavailable: {0}")]
    Unavailable(String),
}

/// One running cluster member.
pub struct Node {
    config: NodeConfig,
    raft: NodeRaft,
    /// The state machine Raft applies to (a handle: snapshots are received through it).
    state_machine: StateMachine<WatchedEngine>,
    /// The snapshot being received, if any: one at a time.
    receiving: tokio::sync::Mutex<Option<Receiving>>,
    /// The node that last sent this one an AppendEntries, and when it was answered.
    heard: std::sync::Mutex<Option<(NodeId, tokio::time::Instant)>>,
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
    /// Slots of the append streams this node serves ([`crate::raft_stream::STREAMS_MAX`]).
    raft_streams: Arc<tokio::sync::Semaphore>,
}

/// Most effects (each one request's write) in one Raft entry.
const ENTRY_EFFECTS_MAX: usize = 512;
/// Entries of the proposer under way at once: while one is made durable and replicated, the next
/// one gathers the writes arriving meanwhile (more in flight made smaller entries and fewer
/// appends per second in `scripts/bench.sh`).
const ENTRIES_IN_FLIGHT: usize = 1;

/// What a leadership hand-off came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandOff {
    /// This node was not the leader: nothing to hand over.
    NotLeader,
    /// Another node leads now.
    HandedTo(NodeId),
    /// No successor took over in time; the others elect one once this node stops.
    NoSuccessor(String),
}

impl Node {
    /// Opens the store on `engine` and starts Raft. The node is not part of a cluster until
    /// [`Node::initialize`] runs on one node, or a leader adds it.
    pub async fn start(
        config: NodeConfig,
        engine: Arc<dyn Engine>,
        transport: Arc<dyn Transport>,
    ) -> Result<Arc<Node>, StartError> {
        let store_config = StoreConfig {
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
        };
        let metrics = Arc::new(Metrics::default());
        let health = Arc::new(StorageHealth::default());
        let engine = Arc::new(WatchedEngine::new(
            engine,
            Arc::clone(&metrics),
            Arc::clone(&health),
        ));
        let entry_bytes_max = store_config.populate_batch_bytes_max;
        let store = Arc::new(ChainStore::open(Arc::clone(&engine), store_config)?);
        let log_store = LogStore::with_flush(Arc::clone(&engine), config.log_flush);
        let state_machine = match &config.snapshot_dir {
            Some(dir) => StateMachine::with_snapshot_dir(
                Arc::clone(&store),
                SnapshotDir::open(dir).map_err(|e| {
                    StartError::Raft(format!("cannot open the snapshot directory {dir:?}: {e}"))
                })?,
            ),
            None => StateMachine::new(Arc::clone(&store)),
        };
        let peer_credentials = PeerCredentials::new(&config.peer_auth);
        let network = Network::new(
            Arc::clone(&transport),
            peer_credentials.clone(),
            config
                .limits
                .append_rpc_bytes_max
                .min(config.limits.raft_body_bytes_max),
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
        // A storage failure stops Raft: this node no longer votes, appends or acknowledges.
        let stopping = raft.clone();
        let watching = Arc::clone(&health);
        let id = config.id;
        tokio::spawn(async move {
            let failure = watching.failed().await;
            tracing::error!(
                node = id,
                %failure,
                "storage failed: Raft stops on this node (no votes, no appends, no answers) until \
                 it is restarted on a sound disk"
            );
            if let Err(err) = stopping.shutdown().await {
                tracing::warn!(%err, "raft shutdown after a storage failure reported an error");
            }
        });
        Ok(Arc::new(Node {
            config,
            raft,
            state_machine,
            receiving: tokio::sync::Mutex::new(None),
            heard: std::sync::Mutex::new(None),
            store,
            latches: Latches::default(),
            transport,
            peer_credentials,
            metrics,
            health,
            handing_off: AtomicBool::new(false),
            proposing: AtomicUsize::new(0),
            proposer,
            raft_streams: Arc::new(tokio::sync::Semaphore::new(crate::raft_stream::STREAMS_MAX)),
        }))
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.config.id
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
        let mut heard = self.heard.lock().unwrap_or_else(|p| p.into_inner());
        *heard = Some((leader, tokio::time::Instant::now()));
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
            let heard = *self.heard.lock().unwrap_or_else(|p| p.into_inner());
            return match heard {
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

    /// Hands leadership to the most caught-up voter before this node stops, so that writes
    /// resume within a round trip instead of after an election timeout. New writes are refused
    /// (retryable) from now on; once a voter has matched the whole log, openraft's leadership
    /// transfer asks it to campaign (and the other voters to grant it their votes at once).
    /// Takes at most `within`; if no successor takes over by then, the others elect one after
    /// this node stops.
    pub async fn hand_off_leadership(&self, within: Duration) -> HandOff {
        if self.raft.metrics().borrow_watched().current_leader != Some(self.config.id) {
            return HandOff::NotLeader;
        }
        self.handing_off.store(true, Ordering::SeqCst);
        let deadline = tokio::time::Instant::now() + within;
        // Proposals already under way finish first: the successor must match a log that no
        // longer grows.
        while self.proposing.load(Ordering::SeqCst) > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let mut asked: Option<(NodeId, tokio::time::Instant)> = None;
        loop {
            let m = self.raft.metrics().borrow_watched().clone();
            match m.current_leader {
                Some(leader) if leader != self.config.id => return HandOff::HandedTo(leader),
                _ => {}
            }
            let ask_again = asked.is_none_or(|(_, at)| at.elapsed() > TRANSFER_RETRY);
            if m.state == ServerState::Leader && ask_again {
                if let Some(successor) = caught_up_voter(&m, self.config.id) {
                    asked = Some((successor, tokio::time::Instant::now()));
                    if let Err(err) = self.raft.trigger().transfer_leader(successor).await {
                        return HandOff::NoSuccessor(format!("raft stopped: {err}"));
                    }
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return HandOff::NoSuccessor(format!(
                    "no voter took over within {within:?} (asked: {:?})",
                    asked.map(|(id, _)| id)
                ));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Takes one chunk of a snapshot the leader sends: the first one (offset 0) begins a new
    /// file, every other one must continue the snapshot being received where it stopped, and
    /// the last one installs it. `Ok(None)` for a chunk stored; `Err` for a chunk out of place
    /// (the leader starts over).
    pub async fn receive_snapshot(
        &self,
        chunk: SnapshotChunk,
        data: &[u8],
    ) -> Result<Result<Option<SnapshotResponse<TypeConfig>>, Fatal<TypeConfig>>, String> {
        use std::io::{Seek, SeekFrom, Write};
        let mut receiving = self.receiving.lock().await;
        if chunk.offset == 0 {
            if let Some(previous) = receiving.take() {
                previous.discard();
            }
            let data = self
                .state_machine
                .begin_receiving_snapshot()
                .map_err(|e| format!("cannot receive a snapshot: {e}"))?;
            *receiving = Some(Receiving {
                vote: chunk.vote,
                meta: chunk.meta.clone(),
                data,
                next: 0,
            });
        }
        let Some(current) = receiving.as_mut() else {
            return Err(format!(
                "a snapshot chunk at offset {} with no snapshot being received",
                chunk.offset
            ));
        };
        if current.vote != chunk.vote || current.meta != chunk.meta || current.next != chunk.offset
        {
            return Err(format!(
                "a snapshot chunk at offset {} does not continue the snapshot being received \
                 (next offset {})",
                chunk.offset, current.next
            ));
        }
        let written = current
            .data
            .write_all(data)
            .and_then(|()| current.data.flush());
        if let Err(err) = written {
            if let Some(failed) = receiving.take() {
                failed.discard();
            }
            return Err(format!("cannot store a snapshot chunk: {err}"));
        }
        current.next += data.len() as u64;
        if !chunk.done {
            return Ok(Ok(None));
        }
        let Some(mut whole) = receiving.take() else {
            return Err("the snapshot went away".into());
        };
        if let Err(err) = whole.data.seek(SeekFrom::Start(0)) {
            whole.discard();
            return Err(format!("cannot read the received snapshot: {err}"));
        }
        let snapshot = Snapshot {
            meta: whole.meta,
            snapshot: whole.data,
        };
        Ok(self
            .raft
            .install_full_snapshot(whole.vote, snapshot)
            .await
            .map(Some))
    }

    // ---- the write path ----

    /// Waits until this node is the leader and has applied an entry of its current term.
    async fn ready_leader(&self) -> Result<(), WriteError> {
        if let Some(failure) = self.storage_failure() {
            return Err(WriteError::Unavailable(format!(
                "this node's storage failed: {failure}"
            )));
        }
        let mut metrics = self.raft.metrics();
        let wait = async {
            loop {
                {
                    let m = metrics.borrow_and_update();
                    if self.leader_id_in(&m) != Some(self.config.id) {
                        return Err(WriteError::NotLeader(self.leader_in(&m)));
                    }
                    let applied_term = m.last_applied.as_ref().map(|id| id.leader_id.term);
                    if m.state == ServerState::Leader && applied_term == Some(m.current_term) {
                        return Ok(());
                    }
                }
                if metrics.changed().await.is_err() {
                    return Err(WriteError::Unavailable("raft is shutting down".into()));
                }
            }
        };
        tokio::time::timeout(self.config.limits.write_timeout, wait)
            .await
            .unwrap_or_else(|_| {
                Err(WriteError::Unavailable(
                    "the leader did not become ready in time".into(),
                ))
            })
    }

    /// Confirms leadership with a read-index round before answering from local state.
    async fn confirm_leader(&self) -> Result<(), WriteError> {
        match self.read_index().await {
            Ok(_) => Ok(()),
            Err(ReadError::NotLeader(leader)) => Err(WriteError::NotLeader(leader)),
            Err(ReadError::Unavailable { message, .. }) => Err(WriteError::Unavailable(message)),
        }
    }

    /// Proposes one effect and waits until it is applied here. Returns its log index and result.
    async fn propose(&self, effect: Effect) -> Result<(u64, CommandResult), WriteError> {
        self.submit(|proposer| proposer.propose(effect)).await
    }

    /// Hands one write to the proposer (unless leadership is being handed over) and waits, at
    /// most the write timeout, until it is applied here.
    async fn submit<'a, F, Fut>(&'a self, write: F) -> Result<(u64, CommandResult), WriteError>
    where
        F: FnOnce(&'a Proposer) -> Fut,
        Fut: std::future::Future<Output = Result<(u64, CommandResult), ProposeError>>,
    {
        self.proposing.fetch_add(1, Ordering::SeqCst);
        let _done = Decrement(&self.proposing);
        if self.handing_off.load(Ordering::SeqCst) {
            return Err(WriteError::Unavailable(
                "this node is stopping and hands its leadership over; retry".into(),
            ));
        }
        match tokio::time::timeout(self.config.limits.write_timeout, write(&self.proposer)).await {
            Err(_) => Err(WriteError::Unavailable(
                "the write was not applied in time; its outcome is unknown: retry it unchanged"
                    .into(),
            )),
            Ok(Ok(applied)) => Ok(applied),
            Ok(Err(ProposeError::NotLeader(leader))) => Err(WriteError::NotLeader(leader)),
            Ok(Err(ProposeError::Unavailable(message))) => Err(WriteError::Unavailable(message)),
        }
    }

    /// Appends one event at the head of `exec` (SPEC §4.1, §5).
    pub async fn append(
        &self,
        exec: &ExecutionId,
        request: &AppendRequest,
    ) -> Result<Appended, WriteError> {
        self.append_batch(exec, std::slice::from_ref(request))
            .await?
            .pop()
            .ok_or_else(|| WriteError::Unavailable("the append answered for no event".into()))
    }

    /// Appends several events linked in order at the head of `exec`, all or none, as ONE Raft
    /// entry (see `ChainStore::evaluate_append_batch`); one answer per event, in order.
    pub async fn append_batch(
        &self,
        exec: &ExecutionId,
        requests: &[AppendRequest],
    ) -> Result<Vec<Appended>, WriteError> {
        let result = self.append_inner(exec, requests).await;
        self.metrics.record_append(&result);
        result
    }

    async fn append_inner(
        &self,
        exec: &ExecutionId,
        requests: &[AppendRequest],
    ) -> Result<Vec<Appended>, WriteError> {
        let _latch = self.latches.acquire(exec).await;
        self.ready_leader().await?;
        match self.store.evaluate_append_batch(exec, requests) {
            Ok(BatchPlan {
                duplicates,
                write: None,
            }) => {
                self.confirm_leader().await?;
                Ok(duplicates)
            }
            Ok(BatchPlan {
                mut duplicates,
                write: Some(effect),
            }) => {
                let seqs: Vec<u64> = effect.events.iter().map(|e| e.exec_seq).collect();
                match self.propose(effect).await? {
                    (commit_index, CommandResult::Applied(_)) => {
                        duplicates.extend(seqs.into_iter().map(|exec_seq| Appended {
                            exec_seq,
                            commit_index,
                            duplicate: false,
                        }));
                        Ok(duplicates)
                    }
                    (_, CommandResult::Rejected(rejection)) => Err(WriteError::Rejected(rejection)),
                    (
                        _,
                        CommandResult::Nothing
                        | CommandResult::Each(_)
                        | CommandResult::Rebuilt(..),
                    ) => Err(WriteError::Unavailable(
                        "the entry applied without a result".into(),
                    )),
                }
            }
            Err(AppendError::Storage(err)) => Err(WriteError::Storage(err)),
            // Errors of the request alone need no leadership confirmation.
            Err(err @ (AppendError::GenesisWithPrev | AppendError::TooLarge(_))) => {
                Err(WriteError::Append(err))
            }
            Err(err) => {
                self.confirm_leader().await?;
                Err(WriteError::Append(err))
            }
        }
    }

    /// Builds or extends `exec` from the authoritative log (SPEC §4.3). A log longer than one
    /// batch is proposed as several entries, coverage first and watermark last.
    pub async fn populate(
        &self,
        exec: &ExecutionId,
        events: &[LogEvent],
    ) -> Result<FromLog, WriteError> {
        let result = self.populate_inner(exec, events).await;
        self.metrics.record_populate(&result);
        result
    }

    async fn populate_inner(
        &self,
        exec: &ExecutionId,
        events: &[LogEvent],
    ) -> Result<FromLog, WriteError> {
        let _latch = self.latches.acquire(exec).await;
        self.ready_leader().await?;
        let plan = self
            .store
            .evaluate_populate(exec, events)
            .map_err(populate_error)?;
        self.propose_effects(plan.effects).await?;
        Ok(plan.outcome)
    }

    /// Takes one part of a populate session: a log longer than one request, sent in parts.
    pub async fn populate_part(
        &self,
        exec: &ExecutionId,
        session: &PopulateSession,
        events: &[LogEvent],
    ) -> Result<PartOutcome, WriteError> {
        let result = async {
            let _latch = self.latches.acquire(exec).await;
            self.ready_leader().await?;
            let plan = self
                .store
                .evaluate_populate_part(exec, session, events)
                .map_err(populate_error)?;
            self.propose_effects(plan.effects).await?;
            Ok(plan.outcome)
        }
        .await;
        self.metrics.record_populate_part(&result);
        result
    }

    /// Proposes the effects of one request in order, each one entry, and adds up what they
    /// applied; with none, confirms leadership so that the answer reflects the committed state.
    async fn propose_effects(&self, effects: Vec<Effect>) -> Result<Applied, WriteError> {
        if effects.is_empty() {
            self.confirm_leader().await?;
        }
        let mut total = Applied::default();
        for effect in effects {
            match self.propose(effect).await? {
                (_, CommandResult::Applied(applied)) => {
                    total.applied += applied.applied;
                    total.duplicates += applied.duplicates;
                }
                (_, CommandResult::Rejected(rejection)) => {
                    return Err(WriteError::Rejected(rejection))
                }
                (
                    _,
                    CommandResult::Nothing | CommandResult::Each(_) | CommandResult::Rebuilt(..),
                ) => {
                    return Err(WriteError::Unavailable(
                        "the entry applied without a result".into(),
                    ))
                }
            }
        }
        Ok(total)
    }

    /// Rebuilds `exec` from the log: its partition moved into a quarantine record and the log's
    /// chain written in its place, in one entry (a longer log continues in populate batches,
    /// leaving the execution unservable until the last lands). Returns the record and the
    /// chain's length.
    pub async fn rebuild(
        &self,
        exec: &ExecutionId,
        events: &[LogEvent],
        reason: &str,
    ) -> Result<(QuarantineRecord, u64), WriteError> {
        let result = self.rebuild_inner(exec, events, reason).await;
        self.metrics.record_rebuild(&result);
        result
    }

    async fn rebuild_inner(
        &self,
        exec: &ExecutionId,
        events: &[LogEvent],
        reason: &str,
    ) -> Result<(QuarantineRecord, u64), WriteError> {
        let _latch = self.latches.acquire(exec).await;
        self.ready_leader().await?;
        // The leader's wall clock, carried in the entry so every replica keeps the same record.
        // Only a rebuild reads it, and the simulations' workload never sends one.
        let at_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let plan = self
            .store
            .evaluate_rebuild(exec, events, reason, at_ms)
            .map_err(|err| match err {
                RebuildError::Storage(err) => WriteError::Storage(err),
                other => WriteError::Rebuild(other),
            })?;
        // A retry of a rebuild whose outcome was unknown is safe: applied once, it is refused
        // the second time as not needed.
        let record = match self
            .submit(|proposer| proposer.propose_rebuild(plan.rebuild))
            .await?
        {
            (_, CommandResult::Rebuilt(record, _)) => record,
            (_, CommandResult::Rejected(rejection)) => return Err(WriteError::Rejected(rejection)),
            (_, other) => {
                return Err(WriteError::Unavailable(format!(
                    "the rebuild applied as {other:?}"
                )))
            }
        };
        self.propose_effects(plan.rest).await?;
        Ok((record, plan.total))
    }

    /// Stores replicated events in any order (SPEC §4.2).
    pub async fn replicated(
        &self,
        exec: &ExecutionId,
        events: &[ChainEvent],
    ) -> Result<Replicated, WriteError> {
        let _latch = self.latches.acquire(exec).await;
        self.ready_leader().await?;
        let effects = match self.store.evaluate_replicated(exec, events) {
            Ok(effects) => effects,
            Err(ReplicateError::Storage(err)) => return Err(WriteError::Storage(err)),
            Err(err @ ReplicateError::Forked(_)) => {
                self.confirm_leader().await?;
                return Err(WriteError::Replicate(err));
            }
            Err(err) => return Err(WriteError::Replicate(err)),
        };
        let applied = self.propose_effects(effects).await?;
        Ok(Replicated {
            applied: applied.applied,
            duplicates: applied.duplicates,
        })
    }

    // ---- reads ----

    /// The read index of a linearizable read: leadership confirmed by a quorum's answers to
    /// messages sent after this call, and everything committed when it was made applied here
    /// (openraft's `ReadIndex` policy; concurrent reads share the heartbeats that confirm
    /// them). Returns the applied index.
    async fn read_index(&self) -> Result<u64, ReadError> {
        self.metrics.record_linearizable_read();
        match confirm_leadership(&self.raft, self.config.limits.write_timeout).await {
            // The leader as this node sees it (none, when it has not heard from it lately).
            Err(ReadError::NotLeader(_)) => Err(ReadError::NotLeader(self.leader())),
            confirmed => confirmed,
        }
    }

    /// Passes the barrier a read of `consistency` needs; returns the applied index the read
    /// reflects at least.
    pub async fn read_barrier(
        &self,
        consistency: Consistency,
        min_index: Option<u64>,
    ) -> Result<u64, ReadError> {
        if let Some(failure) = self.storage_failure() {
            return Err(ReadError::Unavailable {
                message: format!("this node's storage failed: {failure}"),
                applied_index: self.applied_index(),
            });
        }
        let applied = match consistency {
            Consistency::Linearizable => self.read_index().await?,
            Consistency::Local => self.applied_index(),
        };
        match min_index {
            Some(min) if applied < min => {
                self.wait_applied(min, self.config.limits.min_index_wait)
                    .await
            }
            _ => Ok(applied),
        }
    }

    /// Waits until `reached` finds what it looks for in the Raft metrics; `None` when Raft shuts
    /// down first. The caller bounds the wait.
    async fn metrics_until<T>(
        &self,
        mut reached: impl FnMut(&NodeMetrics) -> Option<T>,
    ) -> Option<T> {
        let mut metrics = self.raft.metrics();
        loop {
            if let Some(found) = reached(&metrics.borrow_and_update()) {
                return Some(found);
            }
            metrics.changed().await.ok()?;
        }
    }

    /// Waits until the applied index reaches `min`.
    pub async fn wait_applied(&self, min: u64, wait: Duration) -> Result<u64, ReadError> {
        let reached = self.metrics_until(|m| {
            let applied = m.last_applied.as_ref().map_or(0, |id| id.index);
            (applied >= min).then_some(applied)
        });
        match tokio::time::timeout(wait, reached).await {
            Ok(Some(applied)) => Ok(applied),
            _ => Err(ReadError::Unavailable {
                message: format!("this node has not applied index {min} yet"),
                applied_index: self.applied_index(),
            }),
        }
    }

    // ---- membership ----

    /// Initializes a fresh cluster with `nodes` as its voters. Runs on one node, once.
    pub async fn initialize(&self, nodes: BTreeMap<NodeId, String>) -> Result<(), MembershipError> {
        if !nodes.contains_key(&self.config.id) {
            return Err(MembershipError::Invalid(format!(
                "the initial members must include this node ({})",
                self.config.id
            )));
        }
        let members: BTreeMap<NodeId, BasicNode> = nodes
            .into_iter()
            .map(|(id, addr)| (id, BasicNode::new(addr)))
            .collect();
        match self.raft.initialize(members).await {
            Ok(()) => Ok(()),
            Err(RaftError::APIError(InitializeError::NotAllowed(e))) => Err(
                MembershipError::Invalid(format!("the cluster is already initialized: {e}")),
            ),
            Err(RaftError::APIError(InitializeError::NotInMembers(e))) => {
                Err(MembershipError::Invalid(e.to_string()))
            }
            Err(err) => Err(MembershipError::Unavailable(err.to_string())),
        }
    }

    /// Adds a learner and waits until it has replicated the log up to the entry that added it.
    /// A learner that cannot be reached (or whose certificate does not name it) stays a learner
    /// and the call answers unavailable.
    pub async fn add_learner(&self, id: NodeId, addr: String) -> Result<(), MembershipError> {
        let deadline = tokio::time::Instant::now() + self.config.limits.membership_timeout;
        // openraft's own blocking wait gives up silently after a short while; this one says so.
        let change = self.raft.add_learner(id, BasicNode::new(addr), false);
        let added = tokio::time::timeout_at(deadline, change).await;
        let log_id = match added {
            Ok(Ok(response)) => response.log_id,
            other => return membership_result(other),
        };
        let caught_up = self.metrics_until(|m| {
            let matched = m.replication.as_ref()?.get(&id)?.as_ref()?;
            (*matched >= log_id).then_some(())
        });
        match tokio::time::timeout_at(deadline, caught_up).await {
            Ok(Some(())) => Ok(()),
            _ => Err(MembershipError::Unavailable(format!(
                "node {id} was added as a learner but has not caught up: check that it runs, is \
                 reachable at its address, and presents a certificate naming node {id}"
            ))),
        }
    }

    /// Makes exactly `voters` the voting members (each must already be a member).
    pub async fn change_voters(&self, voters: BTreeSet<NodeId>) -> Result<(), MembershipError> {
        let change = self.raft.change_membership(voters, false);
        membership_result(tokio::time::timeout(self.config.limits.membership_timeout, change).await)
    }
}

type MembershipOutcome<T> = Result<
    Result<T, RaftError<TypeConfig, ClientWriteError<TypeConfig>>>,
    tokio::time::error::Elapsed,
>;

fn membership_result<T>(outcome: MembershipOutcome<T>) -> Result<(), MembershipError> {
    match outcome {
        Err(_) => Err(MembershipError::Unavailable(
            "the membership change did not finish in time".into(),
        )),
        Ok(Ok(_)) => Ok(()),
        Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(forward)))) => Err(
            MembershipError::NotLeader(forward.leader_id.zip(forward.leader_node).map(
                |(id, node)| Leader {
                    id,
                    addr: node.addr,
                },
            )),
        ),
        Ok(Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(e)))) => {
            Err(MembershipError::Invalid(e.to_string()))
        }
        Ok(Err(err)) => Err(MembershipError::Unavailable(err.to_string())),
    }
}

/// How long a successor asked to take over has to win before it is asked again.
const TRANSFER_RETRY: Duration = Duration::from_millis(300);

/// Decrements a counter when dropped.
struct Decrement<'a>(&'a AtomicUsize);

impl Drop for Decrement<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The voter other than `me` whose replication has matched the leader's whole log, if any.
fn caught_up_voter(metrics: &NodeMetrics, me: NodeId) -> Option<NodeId> {
    let last = metrics.last_log_index?;
    let replication = metrics.replication.as_ref()?;
    let membership = metrics.membership_config.membership();
    membership.voter_ids().filter(|id| *id != me).find(|id| {
        replication
            .get(id)
            .and_then(|matched| matched.as_ref())
            .is_some_and(|matched| matched.index >= last)
    })
}

/// One leadership confirmation: `ensure_linearizable` within `timeout`, then the applied index.
async fn confirm_leadership(raft: &NodeRaft, timeout: Duration) -> Result<u64, ReadError> {
    let applied_index = || {
        raft.metrics()
            .borrow_watched()
            .last_applied
            .as_ref()
            .map_or(0, |id| id.index)
    };
    match tokio::time::timeout(timeout, raft.ensure_linearizable(ReadPolicy::ReadIndex)).await {
        Err(_) => Err(ReadError::Unavailable {
            message: "leadership could not be confirmed in time".into(),
            applied_index: applied_index(),
        }),
        Ok(Ok(_)) => Ok(applied_index()),
        Ok(Err(RaftError::APIError(LinearizableReadError::ForwardToLeader(forward)))) => {
            Err(ReadError::NotLeader(
                forward
                    .leader_id
                    .zip(forward.leader_node)
                    .map(|(id, node)| Leader {
                        id,
                        addr: node.addr,
                    }),
            ))
        }
        Ok(Err(err)) => Err(ReadError::Unavailable {
            message: err.to_string(),
            applied_index: applied_index(),
        }),
    }
}

fn populate_error(err: PopulateError) -> WriteError {
    match err {
        PopulateError::Storage(err) => WriteError::Storage(err),
        other => WriteError::Populate(other),
    }
}
