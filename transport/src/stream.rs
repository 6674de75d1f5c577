//! Byte streams to a peer: one HTTP/1.1 upgrade request, then the connection belongs to the
//! caller and carries whatever protocol the upgrade named.
//!
//! The request goes through the same credentials as any other (the peer's certificate over
//! mutual TLS, or the cluster secret's header), so the server admits it exactly as it would a
//! single request to the same path; only its answer, `101 Switching Protocols`, differs.

use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::TransportError;

/// A connection after its upgrade: read and written directly.
pub trait StreamIo: AsyncRead + AsyncWrite + Send + Sync + Unpin + 'static {}

impl<T: AsyncRead + AsyncWrite + Send + Sync + Unpin + 'static> StreamIo for T {}

/// An upgraded connection.
pub type UpgradedStream = Box<dyn StreamIo>;

/// The longest answer head an upgrade reads.
const ANSWER_HEAD_BYTES_MAX: usize = 16 * 1024;

/// Sends `request` (no body; its headers name the upgrade) on `io` as HTTP/1.1 and reads the
/// answer's head: `io` itself when the server switched protocols, else an error naming the
/// status it answered instead.
pub async fn upgrade_on<S: StreamIo>(
    mut io: S,
    request: &http::Request<Bytes>,
) -> Result<S, TransportError> {
    let head = request_head(request)?;
    io.write_all(&head)
        .await
        .map_err(|e| TransportError::Failed(format!("sending the upgrade request: {e}")))?;
    io.flush()
        .await
        .map_err(|e| TransportError::Failed(format!("sending the upgrade request: {e}")))?;
    let mut answer = Vec::with_capacity(256);
    let mut buf = [0u8; 1024];
    let end = loop {
        if let Some(at) = find_head_end(&answer) {
            break at;
        }
        if answer.len() > ANSWER_HEAD_BYTES_MAX {
            return Err(TransportError::Failed(format!(
                "the upgrade answer's head exceeds {ANSWER_HEAD_BYTES_MAX} bytes"
            )));
        }
        let read = io
            .read(&mut buf)
            .await
            .map_err(|e| TransportError::Failed(format!("reading the upgrade answer: {e}")))?;
        if read == 0 {
            return Err(TransportError::Failed(
                "the peer closed the connection instead of answering the upgrade".into(),
            ));
        }
        answer.extend_from_slice(&buf[..read]);
    };
    let status = status_of(&answer[..end])?;
    if status != 101 {
        return Err(TransportError::NotSwitched(status));
    }
    if answer.len() > end {
        // The protocols run here all begin with the client: a server speaking first is not one.
        return Err(TransportError::Failed(
            "the peer sent bytes after switching protocols before being asked".into(),
        ));
    }
    Ok(io)
}

/// The request's head as HTTP/1.1 bytes (`content-length: 0`: an upgrade request has no body).
fn request_head(request: &http::Request<Bytes>) -> Result<Vec<u8>, TransportError> {
    let uri = request.uri();
    let authority = uri
        .authority()
        .ok_or_else(|| TransportError::Failed("the URL has no host".into()))?;
    let target = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let mut head = Vec::with_capacity(256);
    head.extend_from_slice(request.method().as_str().as_bytes());
    head.push(b' ');
    head.extend_from_slice(target.as_bytes());
    head.extend_from_slice(b" HTTP/1.1\r\nhost: ");
    head.extend_from_slice(authority.as_str().as_bytes());
    head.extend_from_slice(b"\r\n");
    for (name, value) in request.headers() {
        if name == http::header::HOST || name == http::header::CONTENT_LENGTH {
            continue;
        }
        head.extend_from_slice(name.as_str().as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"content-length: 0\r\n\r\n");
    Ok(head)
}

fn find_head_end(bytes: &[u8]) -> Option<usize> {
    bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|at| at + 4)
}

/// The status code of an HTTP/1.x answer head.
fn status_of(head: &[u8]) -> Result<u16, TransportError> {
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let mut parts = line.split(|&b| b == b' ');
    let version = parts.next().unwrap_or_default();
    let code = parts.next().unwrap_or_default();
    if !version.starts_with(b"HTTP/1.") || code.len() != 3 {
        return Err(TransportError::Failed(
            "the upgrade answer is not HTTP/1.x".into(),
        ));
    }
    std::str::from_utf8(code)
        .ok()
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| TransportError::Failed("the upgrade answer has no status".into()))
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
            assert!(text.ends_with("content-length: 0\r\n\r\n"), "{text}");
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
