//! The accept loop: TCP, then TLS when the node has it, then HTTP/1.1 with a header-read
//! deadline, each connection in its own task. Every request gets the connection's
//! [`Connection`] (remote address, verified client certificate) for `api::auth`.
//!
//! At most `connections_max` connections are open at once: one more is closed as soon as it
//! is accepted (rather than left in the kernel's backlog, where a peer reconnecting after a
//! restart would wait behind a flood). A connection that sends no complete request head for
//! `header_read_timeout` (slowloris, or simply idle) is closed, so held slots come back.
//!
//! Shutdown stops accepting, lets open connections finish their requests (closing idle ones),
//! and gives up on the rest after a grace period.
//!
//! A connection may be upgraded (`POST /raft/stream`): it then leaves this loop, and its slot,
//! for the handler's own task, which bounds such streams itself.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use chainstore_transport::certificate_identity;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

use crate::api::auth::Connection;
use crate::tls::NodeTls;

/// Deadlines of the server loop.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// How long a client may take to send a request's headers.
    pub header_read_timeout: Duration,
    /// How long a TLS handshake may take.
    pub tls_handshake_timeout: Duration,
    /// How long open connections get to finish after shutdown begins.
    pub shutdown_grace: Duration,
    /// Most connections open at once.
    pub connections_max: usize,
}

/// Serves `router` on `listener` until `shutdown` completes, over TLS when `tls` is given.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    tls: Option<Arc<NodeTls>>,
    options: ServeOptions,
    shutdown: impl Future<Output = ()>,
) {
    let (closing_tx, closing) = tokio::sync::watch::channel(false);
    let slots = options
        .connections_max
        .clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize));
    let open = Arc::new(Semaphore::new(slots));
    let mut refused: u64 = 0;
    tokio::pin!(shutdown);
    loop {
        let (stream, remote) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    // Out of file descriptors, most likely: back off instead of spinning.
                    tracing::warn!(%err, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Ok(slot) = Arc::clone(&open).try_acquire_owned() else {
            refused += 1;
            if refused.is_power_of_two() {
                tracing::warn!(
                    %remote,
                    refused,
                    limit = options.connections_max,
                    "closed a connection beyond the connection limit"
                );
            }
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let watcher = closing.clone();
        let options = options.clone();
        let acceptor = tls.as_ref().map(|tls| tls.acceptor());
        tokio::spawn(async move {
            let _slot = slot;
            accept(stream, remote, acceptor, router, watcher, &options).await;
        });
    }
    drop(listener);
    let _ = closing_tx.send(true);
    // Every connection task holds a slot until its connection ends.
    let all_closed = open.acquire_many(slots as u32);
    if tokio::time::timeout(options.shutdown_grace, all_closed)
        .await
        .is_err()
    {
        tracing::warn!("connections still open after the shutdown grace period; closing them");
    }
}

/// Serves one accepted connection: plaintext, or TLS once its handshake completes within the
/// deadline (the client certificate's identity then rides with every request).
async fn accept(
    stream: TcpStream,
    remote: SocketAddr,
    acceptor: Option<TlsAcceptor>,
    router: Router,
    watcher: tokio::sync::watch::Receiver<bool>,
    options: &ServeOptions,
) {
    let Some(acceptor) = acceptor else {
        let connection = Connection {
            remote: Some(remote),
            certificate: None,
        };
        serve_connection(stream, connection, router, watcher, options).await;
        return;
    };
    let handshake = acceptor.accept(stream);
    match tokio::time::timeout(options.tls_handshake_timeout, handshake).await {
        Ok(Ok(stream)) => {
            let certificate = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|chain| chain.first())
                .map(|cert| Arc::new(certificate_identity(cert)));
            let connection = Connection {
                remote: Some(remote),
                certificate,
            };
            serve_connection(stream, connection, router, watcher, options).await;
        }
        Ok(Err(err)) => tracing::debug!(%remote, %err, "TLS handshake failed"),
        Err(_) => tracing::debug!(%remote, "TLS handshake timed out"),
    }
}

async fn serve_connection<S>(
    stream: S,
    connection: Connection,
    router: Router,
    mut closing: tokio::sync::watch::Receiver<bool>,
    options: &ServeOptions,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = router.map_request(move |mut request: hyper::Request<hyper::body::Incoming>| {
        request.extensions_mut().insert(connection.clone());
        request
    });
    let service = TowerToHyperService::new(service);
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(options.header_read_timeout);
    let connection = builder
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades();
    tokio::pin!(connection);
    let served = tokio::select! {
        served = connection.as_mut() => served,
        () = async {
            // The guard `wait_for` answers with is not `Send`: dropped here, before any await.
            let _ = closing.wait_for(|closing| *closing).await.map(drop);
        } => {
            // Finishes the request under way, if any, then closes.
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(err) = served {
        tracing::debug!(%err, "connection ended with an error");
    }
}
