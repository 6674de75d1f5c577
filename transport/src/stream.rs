//! Byte streams to a peer: one HTTP/1.1 upgrade request (hyper's client connection), then the
//! connection belongs to the caller and carries whatever protocol the upgrade named.
//!
//! The request goes through the same credentials as any other (the peer's certificate over
//! mutual TLS, or the cluster secret's header), so the server admits it exactly as it would a
//! single request to the same path; only its answer, `101 Switching Protocols`, differs.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Empty;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::TransportError;

/// A connection after its upgrade: read and written directly.
pub trait StreamIo: AsyncRead + AsyncWrite + Send + Sync + Unpin + 'static {}

impl<T: AsyncRead + AsyncWrite + Send + Sync + Unpin + 'static> StreamIo for T {}

/// An upgraded connection.
pub type UpgradedStream = Box<dyn StreamIo>;

/// The most of the upgrade's answer read before its head must end (hyper's smallest buffer is
/// 8 KiB).
const ANSWER_HEAD_BYTES_MAX: usize = 16 * 1024;

/// Sends `request` (no body; its headers name the upgrade) on `io` as HTTP/1.1, with hyper's
/// client connection: `io` itself once the server switched protocols, else an error naming the
/// status it answered instead.
pub async fn upgrade_on<S: StreamIo>(
    io: S,
    request: &http::Request<Bytes>,
) -> Result<S, TransportError> {
    let request = origin_form(request)?;
    let (mut sender, connection) = hyper::client::conn::http1::Builder::new()
        .max_buf_size(ANSWER_HEAD_BYTES_MAX)
        .handshake::<_, Empty<Bytes>>(TokioIo::new(io))
        .await
        .map_err(|e| upgrade_failed(&e))?;
    // The connection is driven here, not on a task of its own: it ends once it has handed the
    // socket over (or failed), and nothing of it outlives this call.
    let mut connection = std::pin::pin!(connection.with_upgrades());
    let mut answer = std::pin::pin!(sender.send_request(request));
    let mut handed_over = false;
    let response = tokio::select! {
        biased;
        answered = &mut answer => answered,
        ended = &mut connection => {
            ended.map_err(|e| upgrade_failed(&e))?;
            // The answer was read before the connection ended: it is waiting.
            handed_over = true;
            answer.await
        }
    }
    .map_err(|e| upgrade_failed(&e))?;
    let status = response.status();
    if status != http::StatusCode::SWITCHING_PROTOCOLS {
        return Err(TransportError::NotSwitched(status.as_u16()));
    }
    if !handed_over {
        connection.await.map_err(|e| upgrade_failed(&e))?;
    }
    let upgraded = hyper::upgrade::on(response)
        .await
        .map_err(|e| upgrade_failed(&e))?;
    let parts = upgraded.downcast::<TokioIo<S>>().map_err(|_| {
        TransportError::Failed("the upgraded connection is not the one sent on".into())
    })?;
    if !parts.read_buf.is_empty() {
        // The protocols run here all begin with the client: a server speaking first is not one.
        return Err(TransportError::Failed(
            "the peer sent bytes after switching protocols before being asked".into(),
        ));
    }
    Ok(parts.io.into_inner())
}

/// `request` as hyper's client connection sends it: the path alone on the request line, the
/// host in `host`, an empty body declared as one (`content-length: 0`).
fn origin_form(
    request: &http::Request<Bytes>,
) -> Result<http::Request<Empty<Bytes>>, TransportError> {
    let uri = request.uri();
    let authority = uri
        .authority()
        .ok_or_else(|| TransportError::Failed("the URL has no host".into()))?;
    let target = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let mut builder = http::Request::builder()
        .method(request.method().clone())
        .uri(target)
        .header(http::header::HOST, authority.as_str());
    for (name, value) in request.headers() {
        if name != http::header::HOST && name != http::header::CONTENT_LENGTH {
            builder = builder.header(name, value);
        }
    }
    builder
        .header(http::header::CONTENT_LENGTH, "0")
        .body(Empty::new())
        .map_err(|e| TransportError::Failed(format!("the upgrade request: {e}")))
}

/// Why an upgrade failed, in words.
fn upgrade_failed(err: &hyper::Error) -> TransportError {
    let why = if err.is_incomplete_message() || err.is_closed() || err.is_canceled() {
        "the peer closed the connection instead of answering the upgrade"
    } else if err.is_parse() {
        "the upgrade answer is not HTTP/1.x"
    } else {
        "the upgrade failed"
    };
    TransportError::Failed(format!("{why}: {}", crate::error_chain(err)))
}

/// Connects to `request`'s host over TCP (no Nagle delay), then TLS with `tls` when its
/// scheme is `https`, within `connect_timeout`; then upgrades within `timeout`.
pub(crate) async fn connect_and_upgrade(
    request: http::Request<Bytes>,
    tls: &std::sync::Arc<rustls::ClientConfig>,
    connect_timeout: Duration,
    timeout: Duration,
) -> Result<UpgradedStream, TransportError> {
    let uri = request.uri();
    let https = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        _ => {
            return Err(TransportError::Failed(
                "the URL is neither http nor https".into(),
            ))
        }
    };
    let host = uri
        .host()
        .ok_or_else(|| TransportError::Failed("the URL has no host".into()))?;
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    let connect = tokio::net::TcpStream::connect((host.as_str(), port));
    let tcp = match tokio::time::timeout(connect_timeout, connect).await {
        Ok(Ok(tcp)) => tcp,
        Ok(Err(e)) => return Err(TransportError::Unreachable(format!("{host}:{port}: {e}"))),
        Err(_) => {
            return Err(TransportError::Unreachable(format!(
                "{host}:{port}: connect timed out"
            )))
        }
    };
    let _ = tcp.set_nodelay(true);
    let io: UpgradedStream = if https {
        let name = rustls::pki_types::ServerName::try_from(host.clone())
            .map_err(|e| TransportError::Failed(format!("{host}: {e}")))?;
        let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::clone(tls));
        match tokio::time::timeout(connect_timeout, connector.connect(name, tcp)).await {
            Ok(Ok(tls)) => Box::new(tls),
            Ok(Err(e)) => {
                return Err(TransportError::Unreachable(format!(
                    "{host}:{port}: TLS handshake: {e}"
                )))
            }
            Err(_) => {
                return Err(TransportError::Unreachable(format!(
                    "{host}:{port}: TLS handshake timed out"
                )))
            }
        }
    } else {
        Box::new(tcp)
    };
    match tokio::time::timeout(timeout, upgrade_on(io, &request)).await {
        Ok(upgraded) => upgraded,
        Err(_) => Err(TransportError::Timeout(timeout)),
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    fn request() -> http::Request<Bytes> {
        http::Request::post("http://127.0.0.1:7001/raft/stream")
            .header(http::header::CONNECTION, "upgrade")
            .header(http::header::UPGRADE, "chainstore-raft")
            .body(Bytes::new())
            .expect("a request")
    }

    fn run<F: std::future::Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime")
            .block_on(future)
    }

    #[test]
    fn a_switch_hands_the_connection_over_and_anything_else_is_refused_by_status() {
        run(async {
            let (client, mut server) = tokio::io::duplex(4096);
            let serve = async move {
                let mut head = vec![0u8; 512];
                let n = server.read(&mut head).await.expect("read");
                let text = String::from_utf8_lossy(&head[..n]).to_string();
                server
                    .write_all(
                        b"HTTP/1.1 101 Switching Protocols\r\nupgrade: chainstore-raft\r\n\r\n",
                    )
                    .await
                    .expect("write");
                let mut ping = [0u8; 4];
                server.read_exact(&mut ping).await.expect("ping");
                (text, ping, server)
            };
            let upgrade = async move {
                let mut io = upgrade_on(client, &request()).await.expect("switched");
                io.write_all(b"ping").await.expect("ping");
                io
            };
            let ((text, ping, _server), _io) = tokio::join!(serve, upgrade);
            assert!(
                text.starts_with("POST /raft/stream HTTP/1.1\r\nhost: 127.0.0.1:7001\r\n"),
                "{text}"
            );
            assert!(text.contains("upgrade: chainstore-raft\r\n"), "{text}");
            assert!(text.contains("content-length: 0\r\n"), "{text}");
            assert!(text.ends_with("\r\n\r\n"), "{text}");
            assert_eq!(&ping, b"ping");
        });
        for (answer, expected) in [
            (
                &b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"[..],
                "HTTP 404",
            ),
            (
                b"HTTP/1.1 101 Switching Protocols\r\n\r\nhello",
                "before being asked",
            ),
            (b"SSH-2.0-OpenSSH\r\n\r\n", "not HTTP/1.x"),
            (b"HTTP/1.1 101", "closed the connection"),
        ] {
            let err = run(async move {
                let (client, mut server) = tokio::io::duplex(4096);
                let serve = async move {
                    let mut head = vec![0u8; 512];
                    let _ = server.read(&mut head).await;
                    server.write_all(answer).await.expect("write");
                    drop(server);
                };
                let request = request();
                let (_, upgraded) = tokio::join!(serve, upgrade_on(client, &request));
                upgraded.expect_err("refused")
            });
            assert!(err.to_string().contains(expected), "{err} lacks {expected}");
        }
    }
}
