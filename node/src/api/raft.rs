//! `/raft/*`: the Raft RPC endpoints. Only cluster members reach them (`api::auth` refuses
//! everyone else before a byte of the body is read).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use openraft::errors::RaftError;
use openraft::raft::{TransferLeaderRequest, VoteRequest};
use raft_store::raft::rpc_codec::decode_append_request;
use raft_store::raft::TypeConfig;

use crate::api::error::ApiError;
use crate::api::extract::{parse_json, read_body};
use crate::network::decode_snapshot_chunk;
use crate::node::Node;
use crate::raft_stream;

async fn body_bytes(
    node: &Node,
    headers: &HeaderMap,
    body: Body,
) -> Result<axum::body::Bytes, ApiError> {
    read_body(headers, body, node.config().limits.raft_body_bytes_max).await
}

/// `POST /raft/append` — one AppendEntries in its binary framing.
pub async fn append(State(node): State<Arc<Node>>, headers: HeaderMap, body: Body) -> Response {
    let outcome = async {
        let bytes = body_bytes(&node, &headers, body).await?;
        let request = decode_append_request(&bytes)
            .map_err(|e| ApiError::invalid_input(format!("malformed append request: {e}")))?;
        node.metrics().record_append_rpc("http");
        let from = request.vote.leader_id.node_id;
        let answer = node.raft().append_entries(request).await;
        node.heard_from(from);
        Ok::<_, ApiError>(Json(answer).into_response())
    };
    outcome.await.unwrap_or_else(IntoResponse::into_response)
}

/// `POST /raft/vote`
pub async fn vote(State(node): State<Arc<Node>>, headers: HeaderMap, body: Body) -> Response {
    let outcome = async {
        let bytes = body_bytes(&node, &headers, body).await?;
        let request: VoteRequest<TypeConfig> = parse_json(&bytes)?;
        Ok::<_, ApiError>(Json(node.raft().vote(request).await).into_response())
    };
    outcome.await.unwrap_or_else(IntoResponse::into_response)
}

/// `POST /raft/pre-vote` — would this node vote for the candidate? Answered from its state;
/// nothing is stored and its term does not change.
pub async fn pre_vote(State(node): State<Arc<Node>>, headers: HeaderMap, body: Body) -> Response {
    let outcome = async {
        let bytes = body_bytes(&node, &headers, body).await?;
        let request: VoteRequest<TypeConfig> = parse_json(&bytes)?;
        Ok::<_, ApiError>(Json(node.raft().pre_vote(request).await).into_response())
    };
    outcome.await.unwrap_or_else(IntoResponse::into_response)
}

/// `POST /raft/transfer-leader` — the leader hands its leadership over: the node it names
/// campaigns once its log holds the leader's, the others stop waiting out the leader's lease.
pub async fn transfer_leader(
    State(node): State<Arc<Node>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let outcome = async {
        let bytes = body_bytes(&node, &headers, body).await?;
        let request: TransferLeaderRequest<TypeConfig> = parse_json(&bytes)?;
        let answer = node
            .raft()
            .handle_transfer_leader(request)
            .await
            .map_err(RaftError::<TypeConfig>::Fatal);
        Ok::<_, ApiError>(Json(answer).into_response())
    };
    outcome.await.unwrap_or_else(IntoResponse::into_response)
}

/// `POST /raft/snapshot` — one chunk of a snapshot, framed by
/// `network::encode_snapshot_chunk`; the last one installs it ([`Node::receive_snapshot`]).
pub async fn snapshot(State(node): State<Arc<Node>>, headers: HeaderMap, body: Body) -> Response {
    let outcome = async {
        let bytes = body_bytes(&node, &headers, body).await?;
        let (header, data) = decode_snapshot_chunk(&bytes)
            .ok_or_else(|| ApiError::invalid_input("malformed snapshot chunk"))?;
        let answer = node
            .receive_snapshot(header, data)
            .await
            .map_err(ApiError::invalid_input)?;
        Ok::<_, ApiError>(Json(answer.map_err(RaftError::<TypeConfig>::Fatal)).into_response())
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
        return ApiError::invalid_input(format!(
            "this route upgrades the connection: send `connection: upgrade` and `upgrade: {}`",
            raft_stream::PROTOCOL
        ))
        .into_response();
    }
    let Some(on_upgrade) = request
        .extensions_mut()
        .remove::<hyper::upgrade::OnUpgrade>()
    else {
        return ApiError::invalid_input("this connection cannot be upgraded").into_response();
    };
    let Ok(permit) = Arc::clone(node.raft_streams()).try_acquire_owned() else {
        return ApiError::overloaded(format!(
            "{} append streams are open",
            raft_stream::STREAMS_MAX
        ))
        .into_response();
    };
    let idle = node.config().limits.header_read_timeout;
    // The stream holds the Raft and its limits, not the whole node.
    let service = node.stream_service();
    tokio::spawn(async move {
        match on_upgrade.await {
            Ok(upgraded) => {
                raft_stream::serve(
                    service,
                    hyper_util::rt::TokioIo::new(upgraded),
                    idle,
                    permit,
                )
                .await
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
