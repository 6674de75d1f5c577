//! The network of a simulated node: the production axum router served by hyper over turmoil
//! sockets (connections may be upgraded to the append stream, as in production), and a
//! [`Transport`] that sends requests, and opens append streams, over turmoil sockets. With these two swaps the
//! node and the client run unchanged.

use std::time::Duration;

use bytes::Bytes;
use chainstore_transport::{BoxFuture, Transport, TransportError, UpgradedStream};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;

/// The port every simulated node listens on.
pub const NODE_PORT: u16 = 7000;

/// How long a connection may stay silent before the server closes it: the production default
/// (`Limits::header_read_timeout`). Without it, a connection whose closing was lost in a
/// partition stays open for ever, and turmoil refuses the peer's reuse of its port later.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `router` on [`NODE_PORT`] of the current simulated host, forever.
pub async fn serve(router: axum::Router) -> std::io::Result<()> {
    let listener = turmoil::net::TcpListener::bind(("0.0.0.0", NODE_PORT)).await?;
    loop {
        let (stream, _) = listener.accept().await?;
        let service = TowerToHyperService::new(router.clone());
        tokio::spawn(async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades()
                .await;
        });
    }
}

/// HTTP over turmoil TCP: one connection per request.
#[derive(Debug, Default, Clone, Copy)]
pub struct SimTransport;

/// A new turmoil connection to `request`'s host.
async fn connect(
    request: &http::Request<Bytes>,
) -> Result<turmoil::net::TcpStream, TransportError> {
    let authority = request
        .uri()
        .authority()
        .map(|a| a.to_string())
        .ok_or_else(|| TransportError::Failed("the URL has no host".into()))?;
    turmoil::net::TcpStream::connect(authority.as_str())
        .await
        .map_err(|e| TransportError::Unreachable(format!("{authority}: {e}")))
}

async fn exchange(request: http::Request<Bytes>) -> Result<http::Response<Bytes>, TransportError> {
    let stream = connect(&request).await?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| TransportError::Failed(e.to_string()))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let response = sender
        .send_request(request.map(Full::new))
        .await
        .map_err(|e| TransportError::Failed(e.to_string()))?;
    let (parts, body) = response.into_parts();
    let body = body
        .collect()
        .await
        .map_err(|e| TransportError::Failed(e.to_string()))?
        .to_bytes();
    Ok(http::Response::from_parts(parts, body))
}

impl Transport for SimTransport {
    fn send(
        &self,
        request: http::Request<Bytes>,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<http::Response<Bytes>, TransportError>> {
        Box::pin(async move {
            match tokio::time::timeout(timeout, exchange(request)).await {
                Ok(result) => result,
                Err(_) => Err(TransportError::Timeout(timeout)),
            }
        })
    }

    /// The append stream over a turmoil connection of its own, upgraded as in production.
    fn upgrade(
        &self,
        request: http::Request<Bytes>,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<UpgradedStream, TransportError>> {
        Box::pin(async move {
            let upgrade = async {
                let stream = connect(&request).await?;
                let stream = chainstore_transport::stream::upgrade_on(stream, &request).await?;
                Ok(Box::new(stream) as UpgradedStream)
            };
            match tokio::time::timeout(timeout, upgrade).await {
                Ok(result) => result,
                Err(_) => Err(TransportError::Timeout(timeout)),
            }
        })
    }
}
