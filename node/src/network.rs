//! The Raft network: openraft's RPCs as HTTP POSTs to `/raft/*` through a [`Transport`], each
//! carrying this node's peer credential ([`PeerCredentials`]) and bounded by openraft's deadline.
//!
//! An append RPC is bounded in bytes as well as entries: a range whose encoding exceeds the
//! byte bound is sent in part (a prefix that fits, one entry at least) and answered with
//! openraft's `PartialSuccess` up to the last entry sent, so replication continues from there.
//! The bound starts at `append_bytes_max`; a large append that the peer refuses with 413, that
//! breaks off midway or that does not finish within its deadline (one heartbeat interval)
//! halves it for the next ones, and appends that cross raise it again. A single entry cannot be
//! split: it must cross within the deadline (entries are bounded by the request body limit).
//!
//! Every message is encoded by the peer wire (`raft_store::wire`): an append in its binary
//! encoding (the entries in the log's own format), votes, pre-votes and leadership transfers as
//! JSON, a snapshot in chunks read from its file, and every answer as JSON.

use std::future::Future;
use std::io::Read;
use std::sync::Arc;

use bytes::Bytes;
use openraft::errors::{
    NetworkError, RPCError, RaftError, ReplicationClosed, StreamingError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetworkFactory, RaftNetworkV2};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use raft_store::raft::{NodeId, Snapshot, SnapshotData, TypeConfig, Vote};
use raft_store::wire::snapshot::{encode_chunk, SnapshotChunk};
use raft_store::wire::{Message, STREAM_PROTOCOL};

use chainstore_model::api::headers::{CLUSTER_SECRET, GROUP};
use chainstore_transport::{ExpectPeer, Transport, TransportError};

use crate::raft_stream::{self, ClientStream};
use crate::security::{PeerAuth, Secret};

/// How this node addresses a request to a peer: over TLS, the peer named by [`ExpectPeer`]
/// (the transport then accepts only that peer's certificate and presents this node's); on a
/// plaintext cluster, with the cluster secret.
#[derive(Debug, Clone)]
pub struct PeerCredentials {
    secret: Option<Secret>,
}

impl PeerCredentials {
    /// The credentials `auth` calls for.
    pub fn new(auth: &PeerAuth) -> Self {
        match auth {
            PeerAuth::Certificate => Self { secret: None },
            PeerAuth::Secret(secret) => Self {
                secret: Some(secret.clone()),
            },
        }
    }

    /// A request to `peer` at `addr` (`host:port`) for `path_and_query`.
    pub fn request(
        &self,
        method: http::Method,
        peer: NodeId,
        addr: &str,
        path_and_query: &str,
    ) -> http::request::Builder {
        let scheme = if self.secret.is_some() {
            "http"
        } else {
            "https"
        };
        let mut request = http::Request::builder()
            .method(method)
            .uri(format!("{scheme}://{addr}{path_and_query}"))
            .extension(ExpectPeer(peer));
        if let Some(secret) = &self.secret {
            request = request.header(CLUSTER_SECRET, secret.expose());
        }
        request
    }
}

/// Creates one [`PeerClient`] per peer.
#[derive(Clone)]
pub struct Network {
    transport: Arc<dyn Transport>,
    credentials: PeerCredentials,
    append_bytes_max: usize,
    group: u32,
}

impl Network {
    /// A network over `transport` that authenticates with `credentials` and sends append RPCs
    /// of at most `append_bytes_max` bytes (but always at least one entry), for Raft group
    /// `group`.
    pub fn new(
        transport: Arc<dyn Transport>,
        credentials: PeerCredentials,
        append_bytes_max: usize,
        group: u32,
    ) -> Self {
        Self {
            transport,
            credentials,
            append_bytes_max,
            group,
        }
    }
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> PeerClient {
        PeerClient {
            target,
            addr: node.addr.clone(),
            transport: Arc::clone(&self.transport),
            credentials: self.credentials.clone(),
            group: self.group,
            append_bytes_max: self.append_bytes_max,
            append_bytes: self.append_bytes_max,
            last_logged: None,
            stream: None,
            opening: None,
            next_open_at: None,
        }
    }
}

/// The RPC client for one peer.
pub struct PeerClient {
    target: NodeId,
    addr: String,
    transport: Arc<dyn Transport>,
    credentials: PeerCredentials,
    /// The Raft group every RPC of this client is for.
    group: u32,
    append_bytes_max: usize,
    /// The byte bound of the next append: `append_bytes_max`, or less after large appends
    /// failed (see the module's documentation).
    append_bytes: usize,
    /// When a failure to reach the peer was last logged (at most one line per
    /// [`UNREACHABLE_LOG_INTERVAL`], however often openraft retries).
    last_logged: Option<tokio::time::Instant>,
    /// This client's append stream to the peer ([`crate::raft_stream`]), kept between RPCs.
    /// openraft keeps one client per peer for replication and one for heartbeats (which also
    /// confirm linearizable reads), each for as long as it leads: each has a connection of its
    /// own, and neither waits behind the other.
    stream: Option<ClientStream>,
    /// The stream being opened in the background, if one is.
    opening: Option<tokio::sync::oneshot::Receiver<ClientStream>>,
    /// No stream is opened before then (the last attempt failed).
    next_open_at: Option<tokio::time::Instant>,
}

/// The longest answer read from an append stream (an answer is a few hundred bytes of JSON).
const STREAM_ANSWER_BYTES_MAX: usize = 1 << 20;

/// How often a peer that cannot be reached is logged.
pub const UNREACHABLE_LOG_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

/// Why an exchange failed before a Raft answer could be decoded.
#[derive(Debug, thiserror::Error)]
enum ExchangeError {
    #[error(transparent)]
    Transport(#[from] TransportError),
    #[error("peer answered HTTP {status}: {body}")]
    Status { status: u16, body: String },
    #[error("request could not be built: {0}")]
    Build(#[from] http::Error),
}

impl PeerClient {
    /// A POST of `path` to the peer, for this client's group: the group goes in a header,
    /// except group 0's (absent means group 0, so a peer of a release before shards
    /// understands it).
    fn request(&self, path: &str) -> http::request::Builder {
        let request = self
            .credentials
            .request(http::Method::POST, self.target, &self.addr, path);
        match self.group {
            0 => request,
            group => request.header(GROUP, group.to_string()),
        }
    }

    async fn exchange(
        &self,
        path: &str,
        body: Bytes,
        option: &RPCOption,
    ) -> Result<Bytes, ExchangeError> {
        let request = self
            .request(path)
            .header(http::header::CONTENT_TYPE, "application/octet-stream")
            .body(body)?;
        let response = self.transport.send(request, option.hard_ttl()).await?;
        if !response.status().is_success() {
            let body = String::from_utf8_lossy(response.body())
                .chars()
                .take(200)
                .collect();
            return Err(ExchangeError::Status {
                status: response.status().as_u16(),
                body,
            });
        }
        Ok(response.into_body())
    }

    /// Sends one RPC and decodes the peer's `Result`, classifying failures the way openraft's
    /// back-off expects: an unreachable peer, or a peer whose Raft has stopped, is
    /// `Unreachable` (retried after a back-off); everything else `Network` (retried at once).
    async fn call<Resp>(
        &mut self,
        path: &str,
        body: Bytes,
        option: &RPCOption,
    ) -> Result<Resp, RPCError<TypeConfig>>
    where
        Result<Resp, RaftError<TypeConfig>>: Message,
    {
        let exchanged = self.exchange(path, body, option).await;
        self.answer(exchanged)
    }

    /// Decodes the peer's `Result` from an exchange's outcome, classifying failures the way
    /// [`PeerClient::call`] says.
    fn answer<Resp>(
        &mut self,
        exchanged: Result<Bytes, ExchangeError>,
    ) -> Result<Resp, RPCError<TypeConfig>>
    where
        Result<Resp, RaftError<TypeConfig>>: Message,
    {
        if let Err(err) = &exchanged {
            self.log_failure(err);
        }
        let answer = match exchanged {
            Ok(answer) => answer,
            Err(ExchangeError::Transport(err @ TransportError::Unreachable(_))) => {
                return Err(RPCError::Unreachable(Unreachable::new(&err)))
            }
            // The peer does not run this group (yet: a node starts its groups when it takes
            // the cluster's layout): retried after a back-off, like a peer that is down.
            Err(err @ ExchangeError::Status { status: 404, .. }) => {
                return Err(RPCError::Unreachable(Unreachable::new(&err)))
            }
            Err(err) => return Err(RPCError::Network(NetworkError::new(&err))),
        };
        let decoded = Result::<Resp, RaftError<TypeConfig>>::decode(&answer)
            .map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        decoded.map_err(|e| RPCError::Unreachable(Unreachable::new(&e)))
    }

    /// Sends one append request (its binary framing) over this client's append stream.
    /// `None` when it has none: then this request goes as an HTTP request while a stream is
    /// opened in the background for the next ones (opening one takes a connection and an
    /// upgrade: more round trips than one RPC's deadline allows on a slow link). A stream that
    /// fails or misses the deadline is closed (its state is unknown) and the next RPC opens
    /// another.
    async fn stream_exchange(
        &mut self,
        body: &[u8],
        option: &RPCOption,
    ) -> Option<Result<Bytes, ExchangeError>> {
        if self.stream.is_none() {
            if let Some(opening) = &mut self.opening {
                match opening.try_recv() {
                    Ok(stream) => {
                        self.stream = Some(stream);
                        self.opening = None;
                    }
                    Err(tokio::sync::oneshot::error::TryRecvError::Empty) => return None,
                    Err(tokio::sync::oneshot::error::TryRecvError::Closed) => {
                        self.opening = None;
                        self.next_open_at =
                            Some(tokio::time::Instant::now() + raft_stream::OPEN_RETRY_AFTER);
                    }
                }
            }
        }
        let Some(stream) = &mut self.stream else {
            self.open_stream_in_background();
            return None;
        };
        let ttl = option.hard_ttl();
        let exchanged =
            tokio::time::timeout(ttl, stream.exchange(Bytes::copy_from_slice(body))).await;
        match exchanged {
            Ok(Ok(answer)) => Some(Ok(answer)),
            Ok(Err(err)) => {
                tracing::debug!(peer = self.target, %err, "an append stream failed");
                self.stream = None;
                // The peer may have restarted since the stream last served: this RPC goes as
                // HTTP (an AppendEntries may be repeated, which Raft allows), and a new stream
                // is opened now, for the next one.
                self.open_stream_in_background();
                None
            }
            Err(_) => {
                self.stream = None;
                self.open_stream_in_background();
                Some(Err(ExchangeError::Transport(TransportError::Timeout(ttl))))
            }
        }
    }

    /// Opens an append stream to the peer on a task of its own, unless one is being opened or
    /// the last attempt failed lately; the next RPC takes it when the peer switched protocols.
    fn open_stream_in_background(&mut self) {
        let now = tokio::time::Instant::now();
        if self.opening.is_some() || self.next_open_at.is_some_and(|at| now < at) {
            return;
        }
        self.next_open_at = None;
        let request = self
            .request(raft_stream::PATH)
            .header(http::header::CONNECTION, "upgrade")
            .header(http::header::UPGRADE, STREAM_PROTOCOL)
            .body(Bytes::new());
        let transport = Arc::clone(&self.transport);
        let target = self.target;
        let (opened, opening) = tokio::sync::oneshot::channel();
        self.opening = Some(opening);
        tokio::spawn(async move {
            let upgraded = match request {
                Ok(request) => transport.upgrade(request, raft_stream::OPEN_TIMEOUT).await,
                Err(err) => Err(TransportError::Failed(err.to_string())),
            };
            match upgraded {
                Ok(io) => {
                    let _ = opened.send(ClientStream::new(io, STREAM_ANSWER_BYTES_MAX));
                }
                Err(err) => tracing::debug!(peer = target, %err, "no append stream opened"),
            }
        });
    }

    /// One append request's exchange: over the append stream when the peer takes it, else
    /// as an HTTP request.
    async fn append_exchange(
        &mut self,
        body: Bytes,
        option: &RPCOption,
    ) -> Result<Bytes, ExchangeError> {
        match self.stream_exchange(&body, option).await {
            Some(exchanged) => exchanged,
            None => self.exchange("/raft/append", body, option).await,
        }
    }

    /// Logs a failed exchange, once per interval: an unreachable peer, a peer whose certificate
    /// names someone else, a peer that refuses this node's credential.
    fn log_failure(&mut self, err: &ExchangeError) {
        let now = tokio::time::Instant::now();
        if self
            .last_logged
            .is_some_and(|at| now.duration_since(at) < UNREACHABLE_LOG_INTERVAL)
        {
            return;
        }
        self.last_logged = Some(now);
        tracing::warn!(
            peer = self.target,
            addr = %self.addr,
            group = self.group,
            %err,
            "a raft RPC to a peer failed"
        );
    }
}

/// An append RPC at least this large that fails midway, times out or is refused with 413
/// halves the byte bound of the next ones.
const SPLIT_ON_FAILURE_BYTES: usize = 1 << 20;

/// The byte bound never falls below this (one entry always goes, whatever its size).
const APPEND_BYTES_MIN: usize = 64 << 10;

/// How many of `entries` to send instead, when `bytes` of them were too many for `max`: as
/// many as fit at their average size, at most half (so a refused range always shrinks), at
/// least one. `None` when a single entry cannot be split.
fn split_hint(entries: u64, bytes: usize, max: usize) -> Option<u64> {
    if entries <= 1 {
        return None;
    }
    let fitting = (entries as u128 * max as u128 / bytes.max(1) as u128) as u64;
    Some(fitting.min(entries / 2).max(1))
}

/// `message`'s bytes for the wire.
fn encoded<M: Message>(message: &M) -> Result<Bytes, RPCError<TypeConfig>> {
    message
        .encode()
        .map(Bytes::from)
        .map_err(|e| RPCError::Network(NetworkError::new(&e)))
}

/// Reads until `buf` is full or the input ends; how many bytes were read.
fn read_chunk(data: &mut SnapshotData, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match data.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(filled)
}

impl PeerClient {
    /// Sends `snapshot` chunk by chunk, each within `option`'s deadline; the answer to the
    /// last chunk (or an earlier one that refused the leader's vote).
    async fn send_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        option: &RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        let chunk_bytes = option
            .snapshot_chunk_size()
            .unwrap_or(1 << 20)
            .clamp(1 << 10, self.append_bytes_max);
        let Snapshot {
            meta,
            snapshot: mut data,
        } = snapshot;
        let mut buf = vec![0u8; chunk_bytes];
        let mut offset = 0u64;
        loop {
            let n = read_chunk(&mut data, &mut buf)
                .map_err(|e| StreamingError::Network(NetworkError::new(&e)))?;
            let done = n < chunk_bytes;
            let header = SnapshotChunk {
                vote,
                meta: meta.clone(),
                offset,
                done,
            };
            let body = encode_chunk(&header, &buf[..n])
                .map(Bytes::from)
                .map_err(|e| StreamingError::Network(NetworkError::new(&e)))?;
            let answer: Option<SnapshotResponse<TypeConfig>> =
                self.call("/raft/snapshot", body, option).await?;
            offset += n as u64;
            match answer {
                Some(response) => return Ok(response),
                None if done => {
                    return Err(StreamingError::Network(NetworkError::from_string(
                        "the peer did not answer the snapshot's last chunk",
                    )))
                }
                None => {}
            }
        }
    }
}

impl RaftNetworkV2<TypeConfig> for PeerClient {
    type SnapshotData = SnapshotData;

    async fn append_entries(
        &mut self,
        mut rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        let all = rpc.entries.len();
        let mut body = encoded(&rpc)?;
        // Over the bound: a prefix that fits goes, and openraft hears that only it arrived.
        while body.len() > self.append_bytes {
            let Some(keep) = split_hint(rpc.entries.len() as u64, body.len(), self.append_bytes)
            else {
                break;
            };
            rpc.entries.truncate(keep as usize);
            body = encoded(&rpc)?;
        }
        let sent_last = rpc.entries.last().map(|e| e.log_id);
        let large = body.len() >= SPLIT_ON_FAILURE_BYTES && rpc.entries.len() > 1;
        let sent_bytes = body.len();
        let exchanged = self.append_exchange(body, &option).await;
        if large {
            // A peer that refuses the size answers 413 when it reads the request head first,
            // but the sender may see only the connection close under the upload; a range too
            // large to arrive within the deadline times out. Either way, send less next time.
            let too_large = matches!(
                exchanged,
                Err(ExchangeError::Status { status: 413, .. }
                    | ExchangeError::Transport(
                        TransportError::Failed(_) | TransportError::Timeout(_)
                    ))
            );
            self.append_bytes = if too_large {
                (sent_bytes / 2).max(APPEND_BYTES_MIN)
            } else if exchanged.is_ok() {
                self.append_bytes
                    .saturating_mul(2)
                    .min(self.append_bytes_max)
            } else {
                self.append_bytes
            };
        }
        match self.answer(exchanged)? {
            AppendEntriesResponse::Success if rpc.entries.len() < all => {
                Ok(AppendEntriesResponse::PartialSuccess(sent_last))
            }
            answer => Ok(answer),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        let body = encoded(&rpc)?;
        self.call("/raft/vote", body, &option).await
    }

    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        let body = encoded(&rpc)?;
        self.call("/raft/pre-vote", body, &option).await
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        cancel: impl Future<Output = ReplicationClosed> + Send + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        let send = self.send_snapshot(vote, snapshot, &option);
        tokio::pin!(cancel);
        tokio::select! {
            closed = &mut cancel => Err(StreamingError::Closed(closed)),
            sent = send => sent,
        }
    }

    async fn transfer_leader(
        &mut self,
        request: TransferLeaderRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<TypeConfig>, RPCError<TypeConfig>> {
        let body = encoded(&request)?;
        self.call("/raft/transfer-leader", body, &option).await
    }
}

#[cfg(test)]
mod tests {
    use super::split_hint;

    #[test]
    fn a_range_too_large_always_shrinks_and_never_to_nothing() {
        assert_eq!(split_hint(1, 100, 10), None, "one entry cannot be split");
        assert_eq!(
            split_hint(64, 640, 100),
            Some(10),
            "as many as fit at their average size"
        );
        assert_eq!(split_hint(64, 101, 100), Some(32), "at most half");
        assert_eq!(split_hint(2, 1_000_000, 1), Some(1), "at least one");
    }
}
