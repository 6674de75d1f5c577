//! The append stream: a leader's AppendEntries RPCs to one follower over one long-lived
//! connection, instead of an HTTP request each.
//!
//! At one append per entry, an HTTP exchange per follower cost the leader more CPU than the
//! rest of the write together (request building, URL parsing, the pooled client's connection
//! task, the server's routing and admission on the follower). The stream keeps what the
//! request gave — the peer's credential is checked once, when the connection is upgraded
//! (`POST /raft/stream`, admitted like every `/raft/*` route) — and drops the rest: after the
//! `101`, each RPC is one frame each way, written and read by the leader's replication task
//! itself.
//!
//! The frames and what they hold are the peer wire's (`raft_store::wire`): from the leader, an
//! append request in its binary encoding; from the follower, its answer (the same body
//! `/raft/append` answers with). The follower answers frames in order, one at a time.
//! A frame longer than the Raft RPC body limit, one that does not decode, or silence longer
//! than the idle limit ends the stream (the follower closes it). Each of the leader's peer
//! clients keeps its stream between RPCs; on any failure or missed deadline it closes the
//! stream (the state of a stream that failed midway is unknown) and opens another in the
//! background; meanwhile its RPCs go as HTTP requests (`/raft/append`).

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use openraft::raft::AppendEntriesRequest;
use raft_store::raft::TypeConfig;
use raft_store::wire::frame::{framed, read_frame, write_frame, FrameError, Frames};
use raft_store::wire::Message;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::OwnedSemaphorePermit;

use crate::metrics::Metrics;
use crate::raft_types::{LastHeard, NodeRaft};

/// The path of the upgrade.
pub const PATH: &str = "/raft/stream";

/// Streams a node serves at once: two per leader that replicates to it (replication, and
/// heartbeats with the leadership confirmations of linearizable reads), with room for the
/// streams of deposed leaders that have not yet been closed for idleness.
pub const STREAMS_MAX: usize = 64;

/// How long a leader waits before trying again to open a stream that could not be opened.
pub const OPEN_RETRY_AFTER: Duration = Duration::from_secs(1);

/// How long opening a stream (connection, TLS, upgrade) may take.
pub const OPEN_TIMEOUT: Duration = Duration::from_secs(5);

/// What a served stream works with.
pub struct Service {
    /// The Raft that takes the AppendEntries.
    pub raft: NodeRaft,
    /// The largest frame taken.
    pub frame_bytes_max: usize,
    /// Counts each AppendEntries.
    pub metrics: Arc<Metrics>,
    /// Notes the leader each AppendEntries came from.
    pub heard: Arc<LastHeard>,
}

/// Serves one upgraded stream until the leader closes it, it stays silent for `idle`, or a
/// frame is refused. Holds `permit` (one of [`STREAMS_MAX`]) while it lasts.
pub async fn serve<S>(service: Service, io: S, idle: Duration, permit: OwnedSemaphorePermit)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let _permit = permit;
    let mut io = framed(io, service.frame_bytes_max);
    loop {
        let payload = match tokio::time::timeout(idle, read_frame(&mut io)).await {
            Err(_) | Ok(Err(FrameError::Closed)) => return,
            Ok(Err(err)) => {
                tracing::warn!(%err, "closed a Raft append stream");
                return;
            }
            Ok(Ok(payload)) => payload,
        };
        let request = match AppendEntriesRequest::<TypeConfig>::decode(&payload) {
            Ok(request) => request,
            Err(err) => {
                tracing::warn!(%err, "closed a Raft append stream: a malformed request");
                return;
            }
        };
        service.metrics.record_append_rpc("stream");
        let from = request.vote.leader_id.node_id;
        let answer = service.raft.append_entries(request).await;
        service.heard.note(from);
        // A node whose Raft has stopped (a storage failure, a shutdown) answers this once and
        // closes the stream: the leader's next RPC opens a new one, which reaches whatever
        // serves the address now (the node restarted).
        let stopped = matches!(answer, Err(openraft::errors::RaftError::Fatal(_)));
        let body = match answer.encode() {
            Ok(body) => Bytes::from(body),
            Err(err) => {
                tracing::warn!(%err, "closed a Raft append stream: its answer");
                return;
            }
        };
        match tokio::time::timeout(idle, write_frame(&mut io, body)).await {
            Ok(Ok(())) if !stopped => {}
            _ => return,
        }
    }
}

/// The leader's end of one stream.
pub struct ClientStream {
    io: Frames<chainstore_transport::UpgradedStream>,
}

impl ClientStream {
    /// A stream whose answers are at most `max` bytes.
    pub fn new(io: chainstore_transport::UpgradedStream, max: usize) -> Self {
        Self {
            io: framed(io, max),
        }
    }

    /// Sends one request and reads its answer.
    pub async fn exchange(&mut self, request: Bytes) -> Result<Bytes, FrameError> {
        write_frame(&mut self.io, request).await?;
        read_frame(&mut self.io).await.map(BytesMut::freeze)
    }
}
