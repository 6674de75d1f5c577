//! `chainstore-transport`: one HTTP exchange, behind a trait, and the TLS every exchange of the
//! product runs over.
//!
//! - [`Transport`]: send one request, get the whole answer within a deadline. The node's Raft
//!   RPCs and forwarded requests, and the client's requests, all go through it, so that the
//!   simulations can swap reqwest for a client over simulated sockets without a second copy of
//!   the node or the client.
//! - [`ReqwestTransport`]: the production one. It never follows a redirect, never uses a proxy
//!   from the environment, and never reads more of an answer than its limit.
//! - [`PeerTransport`]: what a node with TLS uses to reach its peers: mutual TLS with the node's
//!   own certificate, each request to a peer accepted only from a certificate naming that peer
//!   ([`ExpectPeer`]), and new material swapped in without a restart.
//! - [`stream`]: a connection to a peer upgraded to a protocol of its own ([`Transport::upgrade`]),
//!   for exchanges too frequent to pay for HTTP each time (the Raft append stream).
//! - [`identity`]: the identity a certificate names (a node id, or a client role).
//! - [`tls`]: PEM material and rustls client configurations.

// A panic is never an answer: production code handles every failure (tests may unwrap).
#![deny(clippy::unwrap_used, clippy::expect_used)]

pub mod identity;
pub mod stream;
pub mod tls;

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::Stream;

pub use identity::{certificate_identity, CertificateIdentity, Identity, Role};
pub use stream::{StreamIo, UpgradedStream};
pub use tls::{KeyPair, ServerCheck, TlsClientOptions, TlsError};

/// A boxed future, so that `Transport` can be used as a trait object.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// An answer's body read piece by piece.
pub type BodyStream = Pin<Box<dyn Stream<Item = Result<Bytes, TransportError>> + Send>>;

/// Why a request got no HTTP response.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TransportError {
    /// The peer could not be reached at all (connection refused, no route, a TLS handshake it
    /// failed): nothing was sent.
    #[error("peer unreachable: {0}")]
    Unreachable(String),
    /// No response within the deadline; the peer may or may not have acted on the request.
    #[error("no response within {0:?}")]
    Timeout(Duration),
    /// The answer is longer than the transport reads.
    #[error("the answer exceeds {limit} bytes")]
    TooLarge {
        /// The most the transport reads.
        limit: usize,
    },
    /// The exchange failed midway.
    #[error("transport failure: {0}")]
    Failed(String),
    /// An upgrade ([`Transport::upgrade`]) was answered with this status instead of `101`.
    #[error("the peer answered HTTP {0} instead of switching protocols")]
    NotSwitched(u16),
}

/// Sends one HTTP request and returns the whole response, within `timeout`.
pub trait Transport: Send + Sync + 'static {
    /// Sends `request` (an absolute URL) and waits at most `timeout` for the full response.
    fn send(
        &self,
        request: http::Request<Bytes>,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<http::Response<Bytes>, TransportError>>;

    /// Sends `request` and returns once the answer's head has arrived (within `timeout`); the
    /// body follows piece by piece, each piece within `timeout` of the one before, and its
    /// length is not limited: for answers of any size (a backup), read as they arrive. The
    /// default reads the whole answer with [`Transport::send`] and hands it over in one piece.
    fn send_streamed(
        &self,
        request: http::Request<Bytes>,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<http::Response<BodyStream>, TransportError>> {
        Box::pin(async move {
            let answer = self.send(request, timeout).await?;
            Ok(answer.map(|body| {
                Box::pin(futures_util::stream::once(async move { Ok(body) })) as BodyStream
            }))
        })
    }

    /// Sends `request`, an HTTP/1.1 upgrade request without a body, on a connection of its
    /// own, and returns that connection once the server has switched protocols (`101`). The
    /// connection set-up is bounded as for [`Transport::send`], the upgrade by `timeout`. The
    /// default opens no streams.
    fn upgrade(
        &self,
        request: http::Request<Bytes>,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<UpgradedStream, TransportError>> {
        let _ = (request, timeout);
        Box::pin(async {
            Err(TransportError::Failed(
                "this transport opens no streams".into(),
            ))
        })
    }
}

/// A request extension: the request is for cluster member `0`, and must reach nobody else.
/// [`PeerTransport`] connects only to a server whose certificate names that node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpectPeer(pub u64);

/// How a [`ReqwestTransport`] connects.
#[derive(Debug, Clone)]
pub struct TransportOptions {
    /// Deadline of connection set-up (TCP and TLS).
    pub connect_timeout: Duration,
    /// The longest answer read; a longer one is [`TransportError::TooLarge`].
    pub response_bytes_max: usize,
    /// What `https://` URLs trust and present.
    pub tls: TlsClientOptions,
    /// How the server's certificate is checked.
    pub server_check: ServerCheck,
}

impl TransportOptions {
    /// Plain options: the system's trust store, no client certificate, host names checked.
    pub fn new(connect_timeout: Duration, response_bytes_max: usize) -> Self {
        Self {
            connect_timeout,
            response_bytes_max,
            tls: TlsClientOptions::default(),
            server_check: ServerCheck::Hostname,
        }
    }
}

/// How long an idle pooled connection is kept.
pub const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(5);

/// The production transport: reqwest over TCP, with rustls for `https://`.
#[derive(Clone)]
pub struct ReqwestTransport {
    client: reqwest::Client,
    response_bytes_max: usize,
    /// What [`Transport::upgrade`]'s own connections use.
    tls: Arc<rustls::ClientConfig>,
    connect_timeout: Duration,
}

impl ReqwestTransport {
    /// A client with bounded connection set-up and idle pooling, no redirects and no proxies.
    pub fn new(options: &TransportOptions) -> Result<Self, TransportError> {
        let tls = tls::client_config(&options.tls, options.server_check)
            .map_err(|e| TransportError::Failed(e.to_string()))?;
        let client = reqwest::Client::builder()
            .connect_timeout(options.connect_timeout)
            // Shorter than the servers' idle limit (a node closes a connection that sends no
            // request headers for 10 s), so a pooled connection is dropped here before the
            // server can close it under a request.
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .pool_max_idle_per_host(64)
            .tcp_nodelay(true)
            // A redirect would carry the request's credentials to a host nobody vetted, and a
            // proxy from the environment would see every request: neither is ever wanted here.
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .http1_only()
            .tls_backend_preconfigured(tls.clone())
            .build()
            .map_err(|e| TransportError::Failed(e.to_string()))?;
        Ok(Self {
            client,
            response_bytes_max: options.response_bytes_max,
            tls: Arc::new(tls),
            connect_timeout: options.connect_timeout,
        })
    }
}

fn classify(err: reqwest::Error, timeout: Duration) -> TransportError {
    if err.is_timeout() {
        TransportError::Timeout(timeout)
    } else if err.is_connect() {
        TransportError::Unreachable(error_chain(&err))
    } else {
        TransportError::Failed(error_chain(&err))
    }
}

/// An error with its causes, so that "error sending request" says why (a refused certificate,
/// a reset connection).
pub fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

impl Transport for ReqwestTransport {
    fn send(
        &self,
        request: http::Request<Bytes>,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<http::Response<Bytes>, TransportError>> {
        Box::pin(async move {
            let limit = self.response_bytes_max;
            let mut response = self
                .request(request)
                .timeout(timeout)
                .send()
                .await
                .map_err(|e| classify(e, timeout))?;
            if response
                .content_length()
                .is_some_and(|len| len > limit as u64)
            {
                return Err(TransportError::TooLarge { limit });
            }
            let builder = Self::head_of(&response);
            let mut body = BytesMut::new();
            while let Some(chunk) = response.chunk().await.map_err(|e| classify(e, timeout))? {
                if body.len() + chunk.len() > limit {
                    return Err(TransportError::TooLarge { limit });
                }
                body.extend_from_slice(&chunk);
            }
            builder
                .body(body.freeze())
                .map_err(|e| TransportError::Failed(e.to_string()))
        })
    }

    fn send_streamed(
        &self,
        request: http::Request<Bytes>,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<http::Response<BodyStream>, TransportError>> {
        Box::pin(async move {
            let sent = tokio::time::timeout(timeout, self.request(request).send()).await;
            let response = sent
                .map_err(|_| TransportError::Timeout(timeout))?
                .map_err(|e| classify(e, timeout))?;
            let builder = Self::head_of(&response);
            let pieces = futures_util::stream::unfold(Some(response), move |state| async move {
                let mut response = state?;
                match tokio::time::timeout(timeout, response.chunk()).await {
                    Err(_) => Some((Err(TransportError::Timeout(timeout)), None)),
                    Ok(Err(err)) => Some((Err(classify(err, timeout)), None)),
                    Ok(Ok(Some(piece))) => Some((Ok(piece), Some(response))),
                    Ok(Ok(None)) => None,
                }
            });
            builder
                .body(Box::pin(pieces) as BodyStream)
                .map_err(|e| TransportError::Failed(e.to_string()))
        })
    }

    fn upgrade(
        &self,
        request: http::Request<Bytes>,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<UpgradedStream, TransportError>> {
        Box::pin(stream::connect_and_upgrade(
            request,
            &self.tls,
            self.connect_timeout,
            timeout,
        ))
    }
}

impl ReqwestTransport {
    fn request(&self, request: http::Request<Bytes>) -> reqwest::RequestBuilder {
        let (parts, body) = request.into_parts();
        self.client
            .request(parts.method, parts.uri.to_string())
            .headers(parts.headers)
            .body(body)
    }

    fn head_of(response: &reqwest::Response) -> http::response::Builder {
        let mut builder = http::Response::builder().status(response.status());
        if let Some(headers) = builder.headers_mut() {
            *headers = response.headers().clone();
        }
        builder
    }
}

/// Distinct peers a [`PeerTransport`] keeps a client for; more are dropped and rebuilt.
pub const PEER_CLIENTS_MAX: usize = 64;

/// A node's transport to its peers over mutual TLS.
///
/// Every request must carry [`ExpectPeer`]: it is sent through a client that presents this
/// node's certificate and accepts only a server certificate, from the cluster's CA, naming that
/// peer. [`PeerTransport::reload`] replaces the material: requests after it use new clients
/// (new connections, the new certificate); requests under way finish on the old ones.
pub struct PeerTransport {
    connect_timeout: Duration,
    response_bytes_max: usize,
    state: RwLock<PeerState>,
}

struct PeerState {
    tls: TlsClientOptions,
    clients: BTreeMap<u64, ReqwestTransport>,
}

impl PeerTransport {
    /// A transport that trusts `tls.roots_pem` (the cluster's CA) and presents `tls.identity`.
    pub fn new(
        tls: TlsClientOptions,
        connect_timeout: Duration,
        response_bytes_max: usize,
    ) -> Result<Self, TransportError> {
        // Building one client now refuses bad material at start-up, not at the first RPC.
        let transport = Self {
            connect_timeout,
            response_bytes_max,
            state: RwLock::new(PeerState {
                tls,
                clients: BTreeMap::new(),
            }),
        };
        transport.client_for(0)?;
        transport.write_state().clients.clear();
        Ok(transport)
    }

    /// Swaps in new material (after checking it builds a client).
    pub fn reload(&self, tls: TlsClientOptions) -> Result<(), TransportError> {
        let options = TransportOptions {
            connect_timeout: self.connect_timeout,
            response_bytes_max: self.response_bytes_max,
            tls: tls.clone(),
            server_check: ServerCheck::Node(0),
        };
        ReqwestTransport::new(&options)?;
        let mut state = self.write_state();
        state.tls = tls;
        state.clients.clear();
        Ok(())
    }

    fn write_state(&self) -> std::sync::RwLockWriteGuard<'_, PeerState> {
        // Every update is a whole assignment; a poisoned lock still holds a valid state.
        self.state.write().unwrap_or_else(|p| p.into_inner())
    }

    fn client_for(&self, peer: u64) -> Result<ReqwestTransport, TransportError> {
        if let Some(client) = self
            .state
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clients
            .get(&peer)
        {
            return Ok(client.clone());
        }
        let mut state = self.write_state();
        if let Some(client) = state.clients.get(&peer) {
            return Ok(client.clone());
        }
        let options = TransportOptions {
            connect_timeout: self.connect_timeout,
            response_bytes_max: self.response_bytes_max,
            tls: state.tls.clone(),
            server_check: ServerCheck::Node(peer),
        };
        let client = ReqwestTransport::new(&options)?;
        if state.clients.len() >= PEER_CLIENTS_MAX {
            state.clients.clear();
        }
        state.clients.insert(peer, client.clone());
        Ok(client)
    }
}

impl PeerTransport {
    /// The client for the peer `request` names in its [`ExpectPeer`].
    fn client_of(
        &self,
        request: &http::Request<Bytes>,
    ) -> Result<ReqwestTransport, TransportError> {
        match request.extensions().get::<ExpectPeer>() {
            Some(ExpectPeer(peer)) => self.client_for(*peer),
            None => Err(TransportError::Failed(
                "a request to a peer must name the node it is for".into(),
            )),
        }
    }
}

impl Transport for PeerTransport {
    fn send(
        &self,
        request: http::Request<Bytes>,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<http::Response<Bytes>, TransportError>> {
        let client = self.client_of(&request);
        Box::pin(async move { client?.send(request, timeout).await })
    }

    fn send_streamed(
        &self,
        request: http::Request<Bytes>,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<http::Response<BodyStream>, TransportError>> {
        let client = self.client_of(&request);
        Box::pin(async move { client?.send_streamed(request, timeout).await })
    }

    fn upgrade(
        &self,
        request: http::Request<Bytes>,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<UpgradedStream, TransportError>> {
        let client = self.client_of(&request);
        Box::pin(async move { client?.upgrade(request, timeout).await })
    }
}
