//! The node's configuration: identity, credentials, limits and Raft timings. `main.rs` fills it
//! from flags, environment and an optional TOML file; tests build it directly.

use std::time::Duration;

use raft_store::raft::{LogFlush, NodeId};

use crate::security::{ClientAuth, PeerAuth};

/// Limits at the edge. Every one has a name and a unit.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest request body accepted.
    pub body_bytes_max: usize,
    /// Largest Raft RPC body accepted (a batch of entries or a snapshot chunk).
    pub raft_body_bytes_max: usize,
    /// Largest append RPC a leader sends: a longer range is split (one entry always goes).
    /// Below `raft_body_bytes_max`, which the peers enforce.
    pub append_rpc_bytes_max: usize,
    /// Largest event payload accepted, as encoded JSON.
    pub payload_bytes_max: usize,
    /// Most events one populate entry carries; a longer populate is proposed as several
    /// entries, coverage first and watermark last.
    pub populate_batch_events_max: usize,
    /// Most events one populate request may carry (the whole log of one execution).
    pub populate_events_max: usize,
    /// Client requests served at once (every route but `/raft/*`, `/healthz`, `/readyz`).
    pub concurrency_max: usize,
    /// Client requests that may wait for a slot; beyond them a request is refused at once
    /// with 503 `overloaded`.
    pub queue_max: usize,
    /// Raft RPCs from peers served at once, apart from clients: a client flood never delays
    /// a heartbeat.
    pub peer_concurrency_max: usize,
    /// Raft RPCs that may wait for a slot.
    pub peer_queue_max: usize,
    /// Open connections; a connection beyond them is closed as soon as it is accepted.
    pub connections_max: usize,
    /// Deadline of one client request, end to end.
    pub request_timeout: Duration,
    /// How long a write waits for this node to become a ready leader, and for its entry to apply.
    pub write_timeout: Duration,
    /// How long a read with `min_index` waits for the node to apply that far.
    pub min_index_wait: Duration,
    /// Deadline of one forwarded request to the leader.
    pub forward_timeout: Duration,
    /// How long a membership change (and a new learner's catch-up) may take. Shorter than
    /// `request_timeout`, so that the caller hears which step did not finish rather than a bare
    /// deadline.
    pub membership_timeout: Duration,
    /// Deadline of one Raft RPC (openraft's hard TTL governs; this bounds connection set-up).
    pub rpc_connect_timeout: Duration,
    /// Most changes one `/v1/changes` page returns.
    pub changes_page_max: usize,
    /// Most stored bytes of events one chain answer carries: a page is cut there (it always
    /// holds one event), and an unpaged read of a longer chain is refused with 413 `too_large`.
    pub read_bytes_max: usize,
    /// Most events one page of `chain` or `chain/raw` may ask for (`limit`).
    pub read_page_events_max: usize,
    /// Longest answer read from a peer (a Raft RPC answer, a forwarded request's answer).
    pub peer_response_bytes_max: usize,
    /// How long a connection may take to send a request's headers, counted from the end of
    /// the previous answer: it is also how long an idle keep-alive connection stays open.
    pub header_read_timeout: Duration,
    /// How long a TLS handshake may take.
    pub tls_handshake_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            body_bytes_max: 16 << 20,
            raft_body_bytes_max: 256 << 20,
            append_rpc_bytes_max: 32 << 20,
            payload_bytes_max: 1 << 20,
            populate_batch_events_max: 1_000,
            populate_events_max: 100_000,
            concurrency_max: 512,
            queue_max: 1024,
            peer_concurrency_max: 64,
            peer_queue_max: 256,
            connections_max: 4096,
            request_timeout: Duration::from_secs(10),
            write_timeout: Duration::from_secs(5),
            min_index_wait: Duration::from_secs(5),
            forward_timeout: Duration::from_secs(8),
            membership_timeout: Duration::from_secs(8),
            rpc_connect_timeout: Duration::from_secs(1),
            changes_page_max: 10_000,
            read_bytes_max: 16 << 20,
            read_page_events_max: 10_000,
            peer_response_bytes_max: 256 << 20,
            header_read_timeout: Duration::from_secs(10),
            tls_handshake_timeout: Duration::from_secs(10),
        }
    }
}

/// Raft timings and log retention.
#[derive(Debug, Clone)]
pub struct RaftTimings {
    /// Interval between leader heartbeats.
    pub heartbeat: Duration,
    /// Shortest election timeout.
    pub election_min: Duration,
    /// Longest election timeout.
    pub election_max: Duration,
    /// A snapshot is built after this many entries since the last one.
    pub snapshot_after_entries: u64,
    /// Entries kept in the log behind a snapshot, so a briefly lagging follower catches up from
    /// the log rather than a snapshot.
    pub log_entries_kept: u64,
    /// The log is purged only when at least this many entries can go at once.
    pub purge_batch_entries: u64,
}

impl Default for RaftTimings {
    fn default() -> Self {
        Self {
            // A follower that has heard from a leader waits out the leader's lease (openraft
            // sets it to `election_max`) and then its own election timeout before it stands:
            // 0.9 to 1.2 s without a heartbeat with these values, nine heartbeats at least.
            heartbeat: Duration::from_millis(100),
            election_min: Duration::from_millis(300),
            election_max: Duration::from_millis(600),
            snapshot_after_entries: 20_000,
            log_entries_kept: 5_000,
            purge_batch_entries: 1_024,
        }
    }
}

/// Everything a node needs to run. `Debug` shows no secret.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// This node's id in the cluster.
    pub id: NodeId,
    /// The `host:port` peers and forwarding nodes use to reach this node.
    pub advertise_addr: String,
    /// How peers authenticate to this node and it to them.
    pub peer_auth: PeerAuth,
    /// How clients authenticate.
    pub client_auth: ClientAuth,
    /// Limits at the edge.
    pub limits: Limits,
    /// Raft timings.
    pub raft: RaftTimings,
    /// Where Raft snapshots are kept while they are built, sent, received and installed; `None`
    /// keeps them in memory (tests and simulations). A node keeps them in files so that its
    /// memory does not grow with its state.
    pub snapshot_dir: Option<std::path::PathBuf>,
    /// Where the Raft log's fsyncs run: on a thread of their own by default (group commit, off
    /// the async workers); the simulation runs them on a task.
    pub log_flush: LogFlush,
}

impl NodeConfig {
    /// A configuration with default limits and timings and no client credential (so no client
    /// is admitted until `client_auth` says how).
    pub fn new(id: NodeId, advertise_addr: impl Into<String>, peer_auth: PeerAuth) -> Self {
        Self {
            id,
            advertise_addr: advertise_addr.into(),
            peer_auth,
            client_auth: ClientAuth::default(),
            limits: Limits::default(),
            raft: RaftTimings::default(),
            snapshot_dir: None,
            log_flush: LogFlush::default(),
        }
    }

    /// The openraft configuration: every option this product depends on is set here; the others
    /// keep openraft's defaults.
    pub fn openraft_config(&self) -> Result<openraft::Config, openraft::ConfigError> {
        let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let config = openraft::Config {
            cluster_name: "chainstore".to_string(),
            heartbeat_interval: millis(self.raft.heartbeat),
            election_timeout_min: millis(self.raft.election_min),
            election_timeout_max: millis(self.raft.election_max),
            install_snapshot_timeout: 10_000,
            max_payload_entries: 64,
            replication_lag_threshold: 5_000,
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(
                self.raft.snapshot_after_entries,
            ),
            snapshot_max_chunk_size: 4 << 20,
            max_in_snapshot_log_to_keep: self.raft.log_entries_kept,
            purge_batch_size: self.raft.purge_batch_entries,
            enable_tick: true,
            enable_heartbeat: true,
            enable_elect: true,
            // A follower whose timer fires first asks whether the others would vote before it
            // raises its term: one with a shorter log, or one cut off and back, cannot disrupt
            // a leader or hold up an election.
            enable_pre_vote: Some(true),
            // A restarted leader campaigns like any node. Resuming its leadership without a vote
            // is unsafe here: applies and the committed id are not synced (the log is the
            // durable record), so it could lead with a state machine missing entries it had
            // committed, and evaluate writes against it.
            enable_leader_restore: Some(false),
            ..Default::default()
        };
        config.validate()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::{Role, Secret, Tokens};

    #[test]
    fn debug_output_never_shows_a_secret() {
        let secret = "the-cluster-secret-itself";
        let token = "the-admin-token-itself";
        let mut config =
            NodeConfig::new(1, "n1:7001", PeerAuth::Secret(Secret::new(secret).unwrap()));
        config.client_auth.tokens = Tokens::from_pairs([(Role::Admin, token)]).unwrap();
        let debug = format!("{config:?} {config:#?}");
        assert!(!debug.contains(secret), "{debug}");
        assert!(!debug.contains(token), "{debug}");
        assert!(debug.contains("<redacted>"));
    }
}
