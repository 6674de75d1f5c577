//! `chainstore-transport`: one HTTP exchange, behind a trait.
//!
//! The node's Raft RPCs and forwarded requests, and the client's requests, all go through
//! [`Transport`], so that the simulations can swap reqwest ([`ReqwestTransport`]) for a client
//! over simulated sockets without a second copy of the node or the client.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;

/// A boxed future, so that `Transport` can be used as a trait object.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Why a request got no HTTP response.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TransportError {
    /// The peer could not be reached at all (connection refused, no route): nothing was sent.
    #[error("peer unreachable: {0}")]
    Unreachable(String),
    /// No response within the deadline; the peer may or may not have acted on the request.
    #[error("no response within {0:?}")]
    Timeout(Duration),
    /// The exchange failed midway.
    #[error("transport failure: {0}")]
    Failed(String),
}

/// Sends one HTTP request and returns the whole response, within `timeout`.
pub trait Transport: Send + Sync + 'static {
    /// Sends `request` (an absolute URL) and waits at most `timeout` for the full response.
    fn send(
        &self,
        request: http::Request<Bytes>,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<http::Response<Bytes>, TransportError>>;
}

/// The production transport: reqwest over TCP.
#[derive(Clone)]
pub struct ReqwestTransport {
    client: reqwest::Client,
}

impl ReqwestTransport {
    /// A client with bounded connection set-up and idle pooling.
    pub fn new(connect_timeout: Duration) -> Result<Self, TransportError> {
        let client = reqwest::Client::builder()
            .connect_timeout(connect_timeout)
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(64)
            .tcp_nodelay(true)
            .build()
            .map_err(|e| TransportError::Failed(e.to_string()))?;
        Ok(Self { client })
    }
}

fn classify(err: reqwest::Error, timeout: Duration) -> TransportError {
    if err.is_timeout() {
        TransportError::Timeout(timeout)
    } else if err.is_connect() {
        TransportError::Unreachable(err.to_string())
    } else {
        TransportError::Failed(err.to_string())
    }
}

impl Transport for ReqwestTransport {
    fn send(
        &self,
        request: http::Request<Bytes>,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<http::Response<Bytes>, TransportError>> {
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let url = parts.uri.to_string();
            let response = self
                .client
                .request(parts.method, url)
                .headers(parts.headers)
                .body(body)
                .timeout(timeout)
                .send()
                .await
                .map_err(|e| classify(e, timeout))?;
            let mut builder = http::Response::builder().status(response.status());
            if let Some(headers) = builder.headers_mut() {
                *headers = response.headers().clone();
            }
            let body = response.bytes().await.map_err(|e| classify(e, timeout))?;
            builder
                .body(body)
                .map_err(|e| TransportError::Failed(e.to_string()))
        })
    }
}
