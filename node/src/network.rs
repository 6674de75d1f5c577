//! The Raft network: openraft's RPCs as HTTP POSTs to `/raft/*` through a [`Transport`], each
//! carrying this node's peer credential ([`PeerCredentials`]) and bounded by openraft's deadline.
//!
//! Append and vote travel as JSON. A snapshot chunk travels as
//! `header_len u32 BE ++ JSON header (the request without its data) ++ raw data`, so the
//! chunk's bytes are not inflated into a JSON array.

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use raft_store::raft::{NodeId, TypeConfig};
use serde::de::DeserializeOwned;
use serde::Serialize;

use chainstore_transport::{ExpectPeer, Transport, TransportError};

use crate::security::{PeerAuth, Secret};

/// Header that carries the cluster secret on every peer request of a plaintext cluster.
pub const SECRET_HEADER: &str = "x-chainstore-secret";

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
            request = request.header(SECRET_HEADER, secret.expose());
        }
        request
    }
}

/// Creates one [`PeerClient`] per peer.
#[derive(Clone)]
pub struct Network {
    transport: Arc<dyn Transport>,
    credentials: PeerCredentials,
}

impl Network {
    /// A network over `transport` that authenticates with `credentials`.
    pub fn new(transport: Arc<dyn Transport>, credentials: PeerCredentials) -> Self {
        Self {
            transport,
            credentials,
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
            last_logged: None,
        }
    }
}

/// The RPC client for one peer.
pub struct PeerClient {
    target: NodeId,
    addr: String,
    transport: Arc<dyn Transport>,
    credentials: PeerCredentials,
    /// When a failure to reach the peer was last logged (at most one line per
    /// [`UNREACHABLE_LOG_INTERVAL`], however often openraft retries).
    last_logged: Option<tokio::time::Instant>,
}

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
    /// back-off expects: an unreachable peer is `Unreachable`, everything else `Network`.
    async fn call<Resp, Err>(
        &mut self,
        path: &str,
        body: Bytes,
        option: &RPCOption,
    ) -> Result<Resp, RPCError<NodeId, BasicNode, Err>>
    where
        Resp: DeserializeOwned,
        Err: std::error::Error + DeserializeOwned,
    {
        let exchanged = self.exchange(path, body, option).await;
        if let Err(err) = &exchanged {
            self.log_failure(err);
        }
        let answer = match exchanged {
            Ok(answer) => answer,
            Err(ExchangeError::Transport(err @ TransportError::Unreachable(_))) => {
                return Err(RPCError::Unreachable(Unreachable::new(&err)))
            }
            Err(err) => return Err(RPCError::Network(NetworkError::new(&err))),
        };
        let decoded: Result<Resp, Err> = serde_json::from_slice(&answer)
            .map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        decoded.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
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
        let body = json(&rpc)?;
        self.call("/raft/append", body, &option).await
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
        self.call("/raft/snapshot", body, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        let body = json(&rpc)?;
        self.call("/raft/vote", body, &option).await
    }
}
