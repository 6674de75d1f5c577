//! `/raft/*`: the Raft RPC endpoints. Only cluster members reach them (`api::auth` refuses
//! everyone else before a byte of the body is read).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use openraft::raft::{AppendEntriesRequest, VoteRequest};
use raft_store::raft::rpc_codec::{decode_append_request, APPEND_FORMAT};
use raft_store::raft::{NodeId, TypeConfig};

use crate::api::error::ApiError;
use crate::api::extract::{parse_json, read_body};
use crate::network::decode_snapshot_chunk;
use crate::node::{ElectRequest, Node};
use crate::raft_stream;

async fn body_bytes(
    node: &Node,
    headers: &HeaderMap,
    body: Body,
) -> Result<axum::body::Bytes, ApiError> {
    read_body(headers, body, node.config().limits.raft_body_bytes_max).await
}

/// `POST /raft/append`
pub async fn append(State(node): State<Arc<Node>>, headers: HeaderMap, body: Body) -> Response {
    let outcome = async {
        let bytes = body_bytes(&node, &headers, body).await?;
        // The binary framing; JSON (first byte `{`) from a peer of an earlier build.
        let request: AppendEntriesRequest<TypeConfig> = if bytes.first() == Some(&APPEND_FORMAT) {
            decode_append_request(&bytes)
                .map_err(|e| ApiError::InvalidInput(format!("malformed append request: {e}")))?
        } else {
            parse_json(&bytes)?
        };
        node.metrics().record_append_rpc("http");
        Ok::<_, ApiError>(Json(node.raft().append_entries(request).await).into_response())
    };
    outcome.await.unwrap_or_else(IntoResponse::into_response)
}

/// `POST /raft/vote`
pub async fn vote(State(node): State<Arc<Node>>, headers: HeaderMap, body: Body) -> Response {
    let outcome = async {
        let bytes = body_bytes(&node, &headers, body).await?;
        let request: VoteRequest<NodeId> = parse_json(&bytes)?;
        Ok::<_, ApiError>(Json(node.raft().vote(request).await).into_response())
    };
    outcome.await.unwrap_or_else(IntoResponse::into_response)
}

/// `POST /raft/snapshot` — one chunk, framed by `network::encode_snapshot_chunk`.
pub async fn snapshot(State(node): State<Arc<Node>>, headers: HeaderMap, body: Body) -> Response {
    let outcome = async {
        let bytes = body_bytes(&node, &headers, body).await?;
        let request = decode_snapshot_chunk(&bytes)
            .ok_or_else(|| ApiError::InvalidInput("malformed snapshot chunk".into()))?;
        Ok::<_, ApiError>(Json(node.raft().install_snapshot(request).await).into_response())
    };
    outcome.await.unwrap_or_else(IntoResponse::into_response)
}

/// `POST /raft/elect` — the leader, stopping, asks this node to stand for election now
/// ([`Node::stand_for_election`] says when it does).
pub async fn elect(State(node): State<Arc<Node>>, headers: HeaderMap, body: Body) -> Response {
    let outcome = async {
        let bytes = body_bytes(&node, &headers, body).await?;
        let request: ElectRequest = parse_json(&bytes)?;
        node.stand_for_election(&request)
            .await
            .map_err(ApiError::Refused)?;
        Ok::<_, ApiError>(Json(serde_json::json!({ "standing": true })).into_response())
    };
    outcome.await.unwrap_or_else(IntoResponse::into_response)
}

/// `POST /raft/stream` — switches the connection to the append stream ([`raft_stream`]); the
/// peer was admitted like any `/raft/*` request. 400 without the upgrade's headers, 503 when
/// [`raft_stream::STREAMS_MAX`] streams are open.
pub async fn stream(
    State(node): State<Arc<Node>>,
    mut request: axum::extract::Request,
) -> Response {
    let asked = request
        .headers()
        .get(axum::http::header::UPGRADE)
        .is_some_and(|v| {
            v.as_bytes()
                .eq_ignore_ascii_case(raft_stream::PROTOCOL.as_bytes())
        });
    if !asked {
        return ApiError::InvalidInput(format!(
            "this route upgrades the connection: send `connection: upgrade` and `upgrade: {}`",
            raft_stream::PROTOCOL
        ))
        .into_response();
    }
    let Some(on_upgrade) = request
        .extensions_mut()
        .remove::<hyper::upgrade::OnUpgrade>()
    else {
        return ApiError::InvalidInput("this connection cannot be upgraded".into()).into_response();
    };
    let Ok(permit) = Arc::clone(node.raft_streams()).try_acquire_owned() else {
        return ApiError::Overloaded(format!(
            "{} append streams are open",
            raft_stream::STREAMS_MAX
        ))
        .into_response();
    };
    let idle = node.config().limits.header_read_timeout;
    tokio::spawn(async move {
        match on_upgrade.await {
            Ok(upgraded) => {
                raft_stream::serve(node, hyper_util::rt::TokioIo::new(upgraded), idle, permit).await
            }
            Err(err) => tracing::debug!(%err, "an append stream's upgrade failed"),
        }
    });
    let mut answer = Response::new(Body::empty());
    *answer.status_mut() = axum::http::StatusCode::SWITCHING_PROTOCOLS;
    let headers = answer.headers_mut();
    headers.insert(
        axum::http::header::CONNECTION,
        axum::http::HeaderValue::from_static("upgrade"),
    );
    headers.insert(
        axum::http::header::UPGRADE,
        axum::http::HeaderValue::from_static(raft_stream::PROTOCOL),
    );
    answer
}
