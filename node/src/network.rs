//! The Raft network: openraft's RPCs as HTTP POSTs to `/raft/*` through a [`Transport`], each
//! carrying this node's peer credential ([`PeerCredentials`]) and bounded by openraft's deadline.
//!
//! An append RPC is bounded in bytes as well as entries: one whose encoding exceeds
//! `append_bytes_max`, or a large one that the peer refuses with 413, that breaks off midway or
//! that cannot finish within openraft's deadline (one heartbeat interval), is answered with
//! openraft's `PayloadTooLarge` and a smaller entry count, so that replication splits the range
//! instead of resending it forever. A single entry cannot be split: it must cross within the
//! deadline (entries are bounded by the request body limit).
//!
//! An append travels in its binary framing (`raft_store::raft::rpc_codec`: the entries in the
//! log's own format); the receiver still reads JSON from a peer of an earlier build. A vote
//! travels as JSON. A snapshot chunk travels as
//! `header_len u32 BE ++ JSON header (the request without its data) ++ raw data`, so the
//! chunk's bytes are not inflated into a JSON array.

use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use openraft::error::{
    InstallSnapshotError, NetworkError, PayloadTooLarge, RPCError, RaftError, RemoteError,
    Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use raft_store::raft::rpc_codec::encode_append_request;
use raft_store::raft::{NodeId, TypeConfig};
use serde::de::DeserializeOwned;
use serde::Serialize;

use chainstore_transport::{ExpectPeer, Transport, TransportError};
use raft_store::api::headers::CLUSTER_SECRET;

use crate::raft_stream::{self, ClientStream, StreamPool};
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
    streams: Arc<StreamPool>,
}

impl Network {
    /// A network over `transport` that authenticates with `credentials` and sends append RPCs
    /// of at most `append_bytes_max` bytes (but always at least one entry).
    pub fn new(
        transport: Arc<dyn Transport>,
        credentials: PeerCredentials,
        append_bytes_max: usize,
    ) -> Self {
        Self {
            transport,
            credentials,
            append_bytes_max,
            streams: Arc::default(),
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
            append_bytes_max: self.append_bytes_max,
            last_logged: None,
            streams: Arc::clone(&self.streams),
        }
    }
}

/// The RPC client for one peer.
pub struct PeerClient {
    target: NodeId,
    addr: String,
    transport: Arc<dyn Transport>,
    credentials: PeerCredentials,
    append_bytes_max: usize,
    /// When a failure to reach the peer was last logged (at most one line per
    /// [`UNREACHABLE_LOG_INTERVAL`], however often openraft retries).
    last_logged: Option<tokio::time::Instant>,
    /// The node's append streams ([`crate::raft_stream`]).
    streams: Arc<StreamPool>,
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
    #[error("undecodable answer: {0}")]
    Decode(#[from] serde_json::Error),
    #[error("request could not be built: {0}")]
    Build(#[from] http::Error),
}

impl PeerClient {
    async fn exchange(
        &self,
        path: &str,
        body: Bytes,
        option: &RPCOption,
    ) -> Result<Bytes, ExchangeError> {
        let request = self
            .credentials
            .request(http::Method::POST, self.target, &self.addr, path)
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
    /// back-off expects: an unreachable peer is `Unreachable`; a 413 is `PayloadTooLarge` with
    /// `smaller` entries when the RPC can be split; everything else `Network`.
    async fn call<Resp, Err>(
        &mut self,
        path: &str,
        body: Bytes,
        option: &RPCOption,
        smaller: Option<u64>,
    ) -> Result<Resp, RPCError<NodeId, BasicNode, Err>>
    where
        Resp: DeserializeOwned,
        Err: std::error::Error + DeserializeOwned,
    {
        let exchanged = self.exchange(path, body, option).await;
        self.answer(exchanged, smaller)
    }

    /// Decodes the peer's `Result` from an exchange's outcome, classifying failures the way
    /// [`PeerClient::call`] says.
    fn answer<Resp, Err>(
        &mut self,
        exchanged: Result<Bytes, ExchangeError>,
        smaller: Option<u64>,
    ) -> Result<Resp, RPCError<NodeId, BasicNode, Err>>
    where
        Resp: DeserializeOwned,
        Err: std::error::Error + DeserializeOwned,
    {
        if let Err(err) = &exchanged {
            self.log_failure(err);
        }
        let answer = match exchanged {
            Ok(answer) => answer,
            Err(ExchangeError::Transport(err @ TransportError::Unreachable(_))) => {
                return Err(RPCError::Unreachable(Unreachable::new(&err)))
            }
            Err(err) => {
                // A peer that refuses the size answers 413 when it reads the request head first,
                // but the sender may see only the connection close under the upload; a range
                // too large to arrive within the deadline times out. Either way, send less.
                let too_large = matches!(
                    err,
                    ExchangeError::Status { status: 413, .. }
                        | ExchangeError::Transport(
                            TransportError::Failed(_) | TransportError::Timeout(_)
                        )
                );
                if let (true, Some(entries)) = (too_large, smaller) {
                    return Err(RPCError::PayloadTooLarge(
                        PayloadTooLarge::new_entries_hint(entries),
                    ));
                }
                return Err(RPCError::Network(NetworkError::new(&err)));
            }
        };
        let decoded: Result<Resp, Err> = serde_json::from_slice(&answer)
            .map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        decoded.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }

    /// Sends one append request (its binary framing) over an idle append stream of the pool.
    /// `None` when there is none: then this request goes as an HTTP request while a stream is
    /// opened in the background for the next ones (opening one takes a connection and an
    /// upgrade: more round trips than one RPC's deadline allows on a slow link). A stream that
    /// fails is closed and the request sent on the next one (the peer may have restarted since
    /// the stream last served: an AppendEntries may be repeated).
    async fn stream_exchange(
        &mut self,
        body: &[u8],
        option: &RPCOption,
    ) -> Option<Result<Bytes, ExchangeError>> {
        let framed = match raft_stream::frame(body) {
            Ok(framed) => framed,
            Err(err) => {
                return Some(Err(ExchangeError::Transport(TransportError::Failed(
                    err.to_string(),
                ))))
            }
        };
        let ttl = option.hard_ttl();
        let deadline = tokio::time::Instant::now() + ttl;
        loop {
            let Some(mut stream) = self.streams.take(self.target) else {
                self.open_stream_in_background();
                return None;
            };
            let exchanged = tokio::time::timeout_at(
                deadline,
                stream.exchange(&framed, STREAM_ANSWER_BYTES_MAX),
            )
            .await;
            match exchanged {
                Ok(Ok(answer)) => {
                    self.streams.put(self.target, stream);
                    return Some(Ok(answer));
                }
                Ok(Err(err)) => {
                    tracing::debug!(peer = self.target, %err, "an append stream failed");
                }
                Err(_) => return Some(Err(ExchangeError::Transport(TransportError::Timeout(ttl)))),
            }
        }
    }

    /// Opens an append stream to the peer on a task of its own, unless one is being opened or
    /// the last attempt failed lately; it joins the pool when the peer switches protocols.
    fn open_stream_in_background(&self) {
        if !self.streams.begin_open(self.target) {
            return;
        }
        let request = self
            .credentials
            .request(
                http::Method::POST,
                self.target,
                &self.addr,
                raft_stream::PATH,
            )
            .header(http::header::CONNECTION, "upgrade")
            .header(http::header::UPGRADE, raft_stream::PROTOCOL)
            .body(Bytes::new());
        let transport = Arc::clone(&self.transport);
        let streams = Arc::clone(&self.streams);
        let target = self.target;
        tokio::spawn(async move {
            let upgraded = match request {
                Ok(request) => transport.upgrade(request, raft_stream::OPEN_TIMEOUT).await,
                Err(err) => Err(TransportError::Failed(err.to_string())),
            };
            match upgraded {
                Ok(io) => streams.opened(target, Some(ClientStream::new(io)), Duration::ZERO),
                // A peer of an earlier build knows no such route: HTTP for a while.
                Err(err @ TransportError::NotSwitched(404 | 405)) => {
                    tracing::info!(peer = target, %err, "the peer takes no append stream; sending it HTTP requests");
                    streams.opened(target, None, raft_stream::RETRY_AFTER);
                }
                Err(err) => {
                    tracing::debug!(peer = target, %err, "no append stream opened");
                    streams.opened(target, None, raft_stream::OPEN_RETRY_AFTER);
                }
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

    /// Sends `body`, an append request's binary framing, over an idle append stream of the
    /// pool and nothing else (none idle: one is opened in the background and nothing is sent),
    /// within `ttl`; what the follower answered, as one of [`crate::metrics::EAGER_OUTCOMES`].
    /// Nothing is told to openraft: the answer only says whether the follower stored the
    /// entries early.
    pub(crate) async fn eager_append(&mut self, body: &[u8], ttl: Duration) -> &'static str {
        let Some(exchanged) = self.stream_exchange(body, &RPCOption::new(ttl)).await else {
            return "no_stream";
        };
        let Ok(answer) = exchanged else {
            return "failed";
        };
        match serde_json::from_slice::<Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>>(
            &answer,
        ) {
            Ok(Ok(AppendEntriesResponse::Success | AppendEntriesResponse::PartialSuccess(_))) => {
                "stored"
            }
            Ok(_) => "refused",
            Err(_) => "failed",
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
        tracing::warn!(peer = self.target, addr = %self.addr, %err, "a raft RPC to a peer failed");
    }
}

/// An append RPC at least this large that fails midway, times out or is refused with 413 is
/// split before it is sent again.
const SPLIT_ON_FAILURE_BYTES: usize = 1 << 20;

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

fn json<T: Serialize, E: std::error::Error>(
    value: &T,
) -> Result<Bytes, RPCError<NodeId, BasicNode, E>> {
    serde_json::to_vec(value)
        .map(Bytes::from)
        .map_err(|e| RPCError::Network(NetworkError::new(&e)))
}

/// Frames a snapshot chunk: a JSON header without the data, then the raw data.
pub fn encode_snapshot_chunk(
    request: &InstallSnapshotRequest<TypeConfig>,
) -> Result<Bytes, serde_json::Error> {
    let header: InstallSnapshotRequest<TypeConfig> = InstallSnapshotRequest {
        vote: request.vote,
        meta: request.meta.clone(),
        offset: request.offset,
        data: Vec::new(),
        done: request.done,
    };
    let header = serde_json::to_vec(&header)?;
    let mut out = BytesMut::with_capacity(4 + header.len() + request.data.len());
    // A header is a few hundred bytes.
    out.put_u32(header.len() as u32);
    out.put_slice(&header);
    out.put_slice(&request.data);
    Ok(out.freeze())
}

/// Reverses [`encode_snapshot_chunk`]; `None` for a malformed frame.
pub fn decode_snapshot_chunk(frame: &[u8]) -> Option<InstallSnapshotRequest<TypeConfig>> {
    let len = u32::from_be_bytes(frame.get(..4)?.try_into().ok()?) as usize;
    let header = frame.get(4..4usize.checked_add(len)?)?;
    let mut request: InstallSnapshotRequest<TypeConfig> = serde_json::from_slice(header).ok()?;
    request.data = frame[4 + len..].to_vec();
    Some(request)
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        // openraft's deadline runs from this call: encoding counts against it.
        let deadline = tokio::time::Instant::now() + option.soft_ttl();
        let entries = rpc.entries.len() as u64;
        let body = encode_append_request(&rpc)
            .map(Bytes::from)
            .map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let smaller = split_hint(entries, body.len(), self.append_bytes_max);
        if body.len() > self.append_bytes_max {
            if let Some(entries) = smaller {
                return Err(RPCError::PayloadTooLarge(
                    PayloadTooLarge::new_entries_hint(entries),
                ));
            }
        }
        // Small ranges are never split on failure: a heartbeat that fails is just a failure.
        let Some(fewer) = smaller.filter(|_| body.len() >= SPLIT_ON_FAILURE_BYTES) else {
            let exchanged = self.append_exchange(body, &option).await;
            return self.answer(exchanged, None);
        };
        // openraft drops an append that outlasts its deadline (a heartbeat interval) and sends
        // the same range again: give up on a large one a little earlier and ask for fewer.
        let exchange = self.append_exchange(body, &option);
        match tokio::time::timeout_at(deadline, exchange).await {
            Ok(exchanged) => self.answer(exchanged, Some(fewer)),
            // A stream cut off mid-exchange is dropped with the exchange, not kept.
            Err(_) => Err(RPCError::PayloadTooLarge(
                PayloadTooLarge::new_entries_hint(fewer),
            )),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        let body =
            encode_snapshot_chunk(&rpc).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        self.call("/raft/snapshot", body, &option, None).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        let body = json(&rpc)?;
        self.call("/raft/vote", body, &option, None).await
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
