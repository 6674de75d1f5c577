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
//! A frame is `length u32 BE ++ bytes`: from the leader, an append request in its binary
//! framing (`raft_store::raft::rpc_codec`); from the follower, the JSON of its answer (the
//! same body `/raft/append` answers with). The follower answers frames in order, one at a time.
//! A frame longer than the Raft RPC body limit, one that does not decode, or silence longer
//! than the idle limit ends the stream (the follower closes it). Each of the leader's peer
//! clients keeps its stream between RPCs; on any failure or missed deadline it closes the
//! stream (the state of a stream that failed midway is unknown) and opens another in the
//! background; meanwhile its RPCs go as HTTP requests (`/raft/append`).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use openraft::raft::AppendEntriesRequest;
use raft_store::raft::rpc_codec::decode_append_request;
use raft_store::raft::TypeConfig;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::OwnedSemaphorePermit;

use crate::metrics::Metrics;
use crate::raft_types::{LastHeard, NodeRaft};

/// The protocol the upgrade names.
pub const PROTOCOL: &str = "chainstore-raft-append/1";

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

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("the connection closed")]
    Closed,
    #[error("a frame of {len} bytes exceeds the limit of {max}")]
    TooLong { len: usize, max: usize },
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// `payload` framed: its length, then itself, in one buffer (one write, one segment).
pub fn frame(payload: &[u8]) -> Result<Vec<u8>, FrameError> {
    let len = u32::try_from(payload.len()).map_err(|_| FrameError::TooLong {
        len: payload.len(),
        max: u32::MAX as usize,
    })?;
    let mut framed = Vec::with_capacity(4 + payload.len());
    framed.extend_from_slice(&len.to_be_bytes());
    framed.extend_from_slice(payload);
    Ok(framed)
}

/// Reads one frame of at most `max` bytes. A length beyond `max` is refused before any of the
/// frame's bytes are read or allocated.
pub async fn read_frame<R: AsyncRead + Unpin>(
    io: &mut R,
    max: usize,
) -> Result<Vec<u8>, FrameError> {
    let mut len = [0u8; 4];
    match io.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Err(FrameError::Closed),
        Err(e) => return Err(e.into()),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > max {
        return Err(FrameError::TooLong { len, max });
    }
    let mut payload = vec![0u8; len];
    io.read_exact(&mut payload).await?;
    Ok(payload)
}

/// Writes `framed` (see [`frame`]) and flushes it.
pub async fn write_frame<W: AsyncWrite + Unpin>(io: &mut W, framed: &[u8]) -> std::io::Result<()> {
    io.write_all(framed).await?;
    io.flush().await
}

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
pub async fn serve<S>(service: Service, mut io: S, idle: Duration, permit: OwnedSemaphorePermit)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let _permit = permit;
    let max = service.frame_bytes_max;
    loop {
        let payload = match tokio::time::timeout(idle, read_frame(&mut io, max)).await {
            Err(_) | Ok(Err(FrameError::Closed)) => return,
            Ok(Err(err)) => {
                tracing::warn!(%err, "closed a Raft append stream");
                return;
            }
            Ok(Ok(payload)) => payload,
        };
        let request: AppendEntriesRequest<TypeConfig> = match decode_append_request(&payload) {
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
        let framed = match serde_json::to_vec(&answer)
            .map_err(FrameError::from_json)
            .and_then(|body| frame(&body))
        {
            Ok(framed) => framed,
            Err(err) => {
                tracing::warn!(%err, "closed a Raft append stream: its answer");
                return;
            }
        };
        match tokio::time::timeout(idle, write_frame(&mut io, &framed)).await {
            Ok(Ok(())) if !stopped => {}
            _ => return,
        }
    }
}

impl FrameError {
    fn from_json(err: serde_json::Error) -> Self {
        FrameError::Io(std::io::Error::other(err))
    }
}

/// The leader's end of one stream.
pub struct ClientStream {
    io: chainstore_transport::UpgradedStream,
}

impl ClientStream {
    pub fn new(io: chainstore_transport::UpgradedStream) -> Self {
        Self { io }
    }

    /// Sends one framed request and reads its answer (at most `max` bytes).
    pub async fn exchange(&mut self, framed: &[u8], max: usize) -> Result<Bytes, FrameError> {
        write_frame(&mut self.io, framed).await?;
        read_frame(&mut self.io, max).await.map(Bytes::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run<F: std::future::Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime")
            .block_on(future)
    }

    #[test]
    fn frames_cross_whole_and_a_length_beyond_the_limit_is_refused_unread() {
        run(async {
            let (mut a, mut b) = tokio::io::duplex(1 << 16);
            write_frame(&mut a, &frame(b"hello").expect("framed"))
                .await
                .expect("sent");
            write_frame(&mut a, &frame(b"").expect("framed"))
                .await
                .expect("sent");
            assert_eq!(read_frame(&mut b, 5).await.expect("read"), b"hello");
            assert_eq!(read_frame(&mut b, 5).await.expect("read"), b"");
            write_frame(&mut a, &frame(&[7u8; 6]).expect("framed"))
                .await
                .expect("sent");
            let err = read_frame(&mut b, 5).await.expect_err("too long");
            assert!(
                matches!(err, FrameError::TooLong { len: 6, max: 5 }),
                "{err}"
            );

            // A length of 4 GiB is refused before anything is allocated for it.
            let mut endless = tokio::io::repeat(0xff);
            assert!(matches!(
                read_frame(&mut endless, 1 << 20).await,
                Err(FrameError::TooLong { .. })
            ));

            // A frame cut short is an error; a close between frames is `Closed`.
            let (mut a, mut b) = tokio::io::duplex(1 << 16);
            write_frame(&mut a, &[0, 0, 0, 9, 1, 2])
                .await
                .expect("sent");
            drop(a);
            assert!(matches!(
                read_frame(&mut b, 16).await,
                Err(FrameError::Io(_))
            ));
            let (a, mut b) = tokio::io::duplex(1 << 16);
            drop(a);
            assert!(matches!(
                read_frame(&mut b, 16).await,
                Err(FrameError::Closed)
            ));
        });
    }
}
