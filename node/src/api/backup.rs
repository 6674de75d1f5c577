//! `GET /v1/snapshot` — a consistent backup of one group's state machine (the whole store's, in
//! a cluster of one shard), streamed.

use std::io::{self, Write};
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, HeaderValue, Uri};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use chainstore_model::api::{headers::LAST_LOG_INDEX, BackupQuery};
use raft_store::raft::{begin_backup, BackupError};
use tokio::sync::{mpsc, oneshot};

use super::error::ApiError;
use super::executions::{read_barrier, Relay};
use super::extract::parse_query;
use crate::node::Node;

/// Bytes handed to the response at a time; with [`PIECES_IN_FLIGHT`], the most a download holds
/// in memory.
const PIECE_BYTES: usize = 1 << 20;
const PIECES_IN_FLIGHT: usize = 4;

/// The backup of the group the request names (`shard=`, picked by `select_group`), taken after
/// the read barrier of the requested consistency (linearizable by
/// default: on the leader, including every entry committed before the request arrived). The body
/// is the backup file, written from one engine view on a blocking thread and streamed in pieces,
/// so a download costs a few MiB whatever the store's size; `x-chainstore-last-log-index` names
/// the last entry it includes. A failure midway cuts the body short, and a cut file is refused
/// by restore (it has no trailer).
pub async fn save(Extension(node): Extension<Arc<Node>>, uri: Uri, headers: HeaderMap) -> Response {
    let outcome = async {
        let query = parse_query::<BackupQuery>(&uri)?.read();
        let barrier = read_barrier(&node, &uri, &headers, query, Relay::Streamed);
        if let Err(response) = barrier.await {
            return Ok(response);
        }
        let engine = Arc::clone(node.store().engine());
        let (began, beginning) = oneshot::channel();
        let (pieces, body) = mpsc::channel::<io::Result<Bytes>>(PIECES_IN_FLIGHT);
        tokio::task::spawn_blocking(move || {
            let writer = match begin_backup(&*engine) {
                Ok(writer) => writer,
                Err(err) => {
                    let _ = began.send(Err(err));
                    return;
                }
            };
            let _ = began.send(Ok(writer.last_log_id()));
            let out = PieceWriter {
                pieces: pieces.clone(),
                buffer: Vec::with_capacity(PIECE_BYTES),
            };
            if let Err(err) = writer.write_to(out) {
                let _ = pieces.blocking_send(Err(io::Error::other(err.to_string())));
            }
        });
        let last_log_id = beginning
            .await
            .map_err(|_| ApiError::internal("the backup task ended before it began"))?
            .map_err(|err| match err {
                BackupError::Empty => ApiError::unavailable("the node has applied nothing yet"),
                BackupError::Storage(m) => ApiError::unavailable(format!(
                    "this node's storage failed ({m}); ask another node"
                )),
                other => ApiError::internal(other.to_string()),
            })?;
        let stream = futures_util::stream::unfold(body, |mut body| async move {
            body.recv().await.map(|piece| (piece, body))
        });
        let mut response = Body::from_stream(stream).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        );
        headers.insert(LAST_LOG_INDEX, HeaderValue::from(last_log_id.index));
        Ok::<_, ApiError>(response)
    };
    outcome.await.unwrap_or_else(IntoResponse::into_response)
}

/// Hands what is written to the response in pieces of [`PIECE_BYTES`], waiting while the
/// response has [`PIECES_IN_FLIGHT`] unsent; fails once the response is gone (the client left).
struct PieceWriter {
    pieces: mpsc::Sender<io::Result<Bytes>>,
    buffer: Vec<u8>,
}

impl PieceWriter {
    fn send(&mut self) -> io::Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let piece = Bytes::from(std::mem::replace(
            &mut self.buffer,
            Vec::with_capacity(PIECE_BYTES),
        ));
        self.pieces
            .blocking_send(Ok(piece))
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the download was abandoned"))
    }
}

impl Write for PieceWriter {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.buffer.extend_from_slice(bytes);
        if self.buffer.len() >= PIECE_BYTES {
            self.send()?;
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send()
    }
}
