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
//! A frame is `length u32 BE ++ bytes` (tokio-util's `LengthDelimitedCodec`): from the leader, an append request in its binary
//! framing (`raft_store::raft::rpc_codec`); from the follower, the JSON of its answer (the
//! same body `/raft/append` answers with). The follower answers frames in order, one at a time.
//! A frame longer than the Raft RPC body limit, one that does not decode, or silence longer
//! than the idle limit ends the stream (the follower closes it). Each of the leader's peer
//! clients keeps its stream between RPCs; on any failure or missed deadline it closes the
//! stream (the state of a stream that failed midway is unknown) and opens another in the
//! background; meanwhile its RPCs go as HTTP requests (`/raft/append`).

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::{SinkExt, StreamExt};
use openraft::raft::AppendEntriesRequest;
use raft_store::raft::rpc_codec::decode_append_request;
use raft_store::raft::TypeConfig;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::codec::{Framed, LengthDelimitedCodec, LengthDelimitedCodecError};

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

/// Why a frame could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("the connection closed")]
    Closed,
    #[error("a frame exceeds the limit of {max} bytes")]
    TooLong { max: usize },
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl FrameError {
    /// The codec's error, with a length over the limit told apart.
    fn of(err: std::io::Error, max: usize) -> Self {
        if err
            .get_ref()
            .is_some_and(|inner| inner.is::<LengthDelimitedCodecError>())
        {
            FrameError::TooLong { max }
        } else {
            FrameError::Io(err)
        }
    }
}

/// `io` framed as the stream frames: a `u32` big-endian length, then that many bytes, at most
/// `max` of them. A length beyond `max` is refused before any of the frame's bytes are read or
/// allocated.
pub fn framed<S: AsyncRead + AsyncWrite>(io: S, max: usize) -> Framed<S, LengthDelimitedCodec> {
    let codec = LengthDelimitedCodec::builder()
        .length_field_type::<u32>()
        .big_endian()
        .max_frame_length(max)
        .new_codec();
    Framed::new(io, codec)
}

/// Reads one frame; `Closed` when the peer closed the stream between frames.
pub async fn read_frame<S: AsyncRead + AsyncWrite + Unpin>(
    io: &mut Framed<S, LengthDelimitedCodec>,
) -> Result<BytesMut, FrameError> {
    let max = io.codec().max_frame_length();
    match io.next().await {
        None => Err(FrameError::Closed),
        Some(Ok(payload)) => Ok(payload),
        Some(Err(err)) => Err(FrameError::of(err, max)),
    }
}

/// Writes one frame holding `payload` and flushes it (one write of the length and the bytes).
pub async fn write_frame<S: AsyncRead + AsyncWrite + Unpin>(
    io: &mut Framed<S, LengthDelimitedCodec>,
    payload: Bytes,
) -> Result<(), FrameError> {
    // The codec refuses to write a frame over the limit; the limit is for reading.
    let max = io.codec().max_frame_length();
    io.codec_mut().set_max_frame_length(usize::MAX);
    let sent = io.send(payload).await;
    io.codec_mut().set_max_frame_length(max);
    sent.map_err(|err| FrameError::of(err, max))
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
        let body = match serde_json::to_vec(&answer) {
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
    io: Framed<chainstore_transport::UpgradedStream, LengthDelimitedCodec>,
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
            let (a, b) = tokio::io::duplex(1 << 16);
            let (mut a, mut b) = (framed(a, 5), framed(b, 5));
            write_frame(&mut a, Bytes::from_static(b"hello"))
                .await
                .expect("sent");
            write_frame(&mut a, Bytes::new()).await.expect("sent");
            assert_eq!(&read_frame(&mut b).await.expect("read")[..], b"hello");
            assert_eq!(&read_frame(&mut b).await.expect("read")[..], b"");
            write_frame(&mut a, Bytes::from(vec![7u8; 6]))
                .await
                .expect("a sender is not held to the reader's limit");
            let err = read_frame(&mut b).await.expect_err("too long");
            assert!(matches!(err, FrameError::TooLong { max: 5 }), "{err}");

            // The same bytes on the wire as before: the length, big-endian, then the payload.
            let (a, mut raw) = tokio::io::duplex(1 << 16);
            let mut a = framed(a, 16);
            write_frame(&mut a, Bytes::from_static(b"abc"))
                .await
                .expect("sent");
            let mut wire = [0u8; 7];
            tokio::io::AsyncReadExt::read_exact(&mut raw, &mut wire)
                .await
                .expect("read");
            assert_eq!(wire, [0, 0, 0, 3, b'a', b'b', b'c']);

            // A length of 4 GiB is refused before anything is allocated for it.
            let (endless, _keep) = tokio::io::duplex(64);
            let mut endless = framed(tokio::io::join(tokio::io::repeat(0xff), endless), 1 << 20);
            assert!(matches!(
                read_frame(&mut endless).await,
                Err(FrameError::TooLong { .. })
            ));

            // A frame cut short is an error; a close between frames is `Closed`.
            let (mut a, b) = tokio::io::duplex(1 << 16);
            tokio::io::AsyncWriteExt::write_all(&mut a, &[0, 0, 0, 9, 1, 2])
                .await
                .expect("sent");
            drop(a);
            assert!(matches!(
                read_frame(&mut framed(b, 16)).await,
                Err(FrameError::Io(_))
            ));
            let (a, b) = tokio::io::duplex(1 << 16);
            drop(a);
            assert!(matches!(
                read_frame(&mut framed(b, 16)).await,
                Err(FrameError::Closed)
            ));
        });
    }
}
