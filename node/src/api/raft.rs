//! `/raft/*`: the Raft RPC endpoints. Only cluster members reach them (`api::auth` refuses
//! everyone else before a byte of the body is read). What each carries, and how it is encoded,
//! is the peer wire's (`raft_store::wire`): these handlers read bytes, decode them there, hand
//! the request to Raft and send its answer back encoded there.

use std::sync::Arc;

use axum::body::Body;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use openraft::errors::RaftError;
use openraft::raft::{AppendEntriesRequest, TransferLeaderRequest, VoteRequest};
use raft_store::raft::TypeConfig;
use raft_store::wire::snapshot::decode_chunk;
use raft_store::wire::{Message, STREAM_PROTOCOL};

use crate::api::error::ApiError;
use crate::api::extract::read_body;
use crate::node::Node;
use crate::raft_stream;

async fn body_bytes(
    node: &Node,
    headers: &HeaderMap,
    body: Body,
) -> Result<axum::body::Bytes, ApiError> {
    read_body(headers, body, node.config().limits.raft_body_bytes_max).await
}

/// The request in `bytes`, or a 400 naming `what` is malformed.
fn decode<M: Message>(bytes: &[u8], what: &str) -> Result<M, ApiError> {
    M::decode(bytes).map_err(|e| ApiError::invalid_input(format!("malformed {what}: {e}")))
}

/// Raft's answer, encoded for the wire (JSON).
fn answer<M: Message>(answer: &M) -> Result<Response, ApiError> {
    let body = answer
        .encode()
        .map_err(|e| ApiError::internal(format!("the answer could not be encoded: {e}")))?;
    Ok((
        [(
            axum::http::header::CONTENT_TYPE,
            axum::http::HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response())
}

/// `POST /raft/append` — one AppendEntries in its binary framing.
pub async fn append(
    Extension(node): Extension<Arc<Node>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let outcome = async {
        let bytes = body_bytes(&node, &headers, body).await?;
        let request: AppendEntriesRequest<TypeConfig> = decode(&bytes, "append request")?;
        node.metrics().record_append_rpc("http");
        let from = request.vote.leader_id.node_id;
        let answered = node.raft().append_entries(request).await;
        node.heard_from(from);
        answer(&answered)
    };
    outcome.await.unwrap_or_else(IntoResponse::into_response)
}

/// `POST /raft/vote`
pub async fn vote(
    Extension(node): Extension<Arc<Node>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let outcome = async {
        let bytes = body_bytes(&node, &headers, body).await?;
        let request: VoteRequest<TypeConfig> = decode(&bytes, "vote request")?;
        answer(&node.raft().vote(request).await)
    };
    outcome.await.unwrap_or_else(IntoResponse::into_response)
}

/// `POST /raft/pre-vote` — would this node vote for the candidate? Answered from its state;
/// nothing is stored and its term does not change.
pub async fn pre_vote(
    Extension(node): Extension<Arc<Node>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let outcome = async {
        let bytes = body_bytes(&node, &headers, body).await?;
        let request: VoteRequest<TypeConfig> = decode(&bytes, "pre-vote request")?;
        answer(&node.raft().pre_vote(request).await)
    };
    outcome.await.unwrap_or_else(IntoResponse::into_response)
}

/// `POST /raft/transfer-leader` — the leader hands its leadership over: the node it names
/// campaigns once its log holds the leader's, the others stop waiting out the leader's lease.
pub async fn transfer_leader(
    Extension(node): Extension<Arc<Node>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let outcome = async {
        let bytes = body_bytes(&node, &headers, body).await?;
        let request: TransferLeaderRequest<TypeConfig> = decode(&bytes, "transfer request")?;
        let answered = node
            .raft()
            .handle_transfer_leader(request)
            .await
            .map_err(RaftError::<TypeConfig>::Fatal);
        answer(&answered)
    };
    outcome.await.unwrap_or_else(IntoResponse::into_response)
}

/// `POST /raft/snapshot` — one chunk of a snapshot (`raft_store::wire::snapshot`); the last one
/// installs it ([`Node::receive_snapshot`]).
pub async fn snapshot(
    Extension(node): Extension<Arc<Node>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let outcome = async {
        let bytes = body_bytes(&node, &headers, body).await?;
        let (header, data) = decode_chunk(&bytes)
            .map_err(|e| ApiError::invalid_input(format!("malformed snapshot chunk: {e}")))?;
        let answered = node
            .receive_snapshot(header, data)
            .await
            .map_err(ApiError::invalid_input)?;
        answer(&answered.map_err(RaftError::<TypeConfig>::Fatal))
    };
    outcome.await.unwrap_or_else(IntoResponse::into_response)
}

/// `POST /raft/stream` — switches the connection to the append stream ([`raft_stream`]); the
/// peer was admitted like any `/raft/*` request. 400 without the upgrade's headers, 503 when
/// [`raft_stream::STREAMS_MAX`] streams are open.
pub async fn stream(
    Extension(node): Extension<Arc<Node>>,
    mut request: axum::extract::Request,
) -> Response {
    let asked = request
        .headers()
        .get(axum::http::header::UPGRADE)
        .is_some_and(|v| {
            v.as_bytes()
                .eq_ignore_ascii_case(STREAM_PROTOCOL.as_bytes())
        });
    if !asked {
        return ApiError::invalid_input(format!(
            "this route upgrades the connection: send `connection: upgrade` and `upgrade: {}`",
            STREAM_PROTOCOL
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
        axum::http::HeaderValue::from_static(STREAM_PROTOCOL),
    );
    answer
}
