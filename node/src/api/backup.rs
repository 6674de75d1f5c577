//! `GET /v1/snapshot` — a consistent backup of the state machine.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, Uri};
use axum::response::{IntoResponse, Response};
use raft_store::raft::{take_backup, BackupError};

use super::error::ApiError;
use super::executions::{read_barrier, ReadQuery};
use super::extract::parse_query;
use crate::node::Node;

/// Header naming the last log index a backup includes.
pub const LAST_LOG_INDEX_HEADER: &str = "x-chainstore-last-log-index";

/// The backup, taken after the read barrier of the requested consistency (linearizable by
/// default: on the leader, including every entry committed before the request arrived). The body
/// is the backup file; `x-chainstore-last-log-index` names the last entry it includes.
pub async fn save(State(node): State<Arc<Node>>, uri: Uri, headers: HeaderMap) -> Response {
    let outcome = async {
        let query: ReadQuery = parse_query(&uri)?;
        let barrier = read_barrier(
            &node,
            &uri,
            &headers,
            query.consistency.as_deref(),
            query.min_index,
        );
        if let Err(response) = barrier.await {
            return Ok(response);
        }
        let backup = take_backup(node.store().engine()).map_err(|err| match err {
            BackupError::Empty => ApiError::unavailable("the node has applied nothing yet"),
            BackupError::Storage(m) => ApiError::unavailable(format!(
                "this node's storage failed ({m}); ask another node"
            )),
            other => ApiError::Internal(other.to_string()),
        })?;
        let mut response = backup.data.into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        );
        headers.insert(
            LAST_LOG_INDEX_HEADER,
            HeaderValue::from(backup.last_log_id.index),
        );
        Ok::<_, ApiError>(response)
    };
    outcome.await.unwrap_or_else(IntoResponse::into_response)
}
