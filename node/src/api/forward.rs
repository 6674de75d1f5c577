//! Forwarding: a node that is not the leader passes writes (and linearizable reads) to the
//! leader and relays its answer unchanged, adding `x-chainstore-leader`. A forwarded request is
//! never forwarded again: a second hop means the cluster's view of its leader is in flux, and the
//! client gets a retryable `no_leader`.
//!
//! The forwarded request carries this node's peer credential, not the client's: this node has
//! already authorized the client for the route, and the leader accepts a member's request on
//! every route. The client's token never leaves the node it was sent to.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, Uri};
use axum::response::{IntoResponse, Response};
use chainstore_model::api::headers::{FORWARDED, LAST_LOG_INDEX, LEADER};
use chainstore_model::{Limit, Oversize};
use chainstore_transport::TransportError;

use super::error::ApiError;
use crate::errors::Leader;
use crate::node::Node;

/// Headers copied from the client's request to the forwarded one, and back from the leader's
/// answer.
const REQUEST_HEADERS: [HeaderName; 1] = [header::CONTENT_TYPE];
const RESPONSE_HEADERS: [HeaderName; 4] = [
    header::CONTENT_TYPE,
    header::RETRY_AFTER,
    HeaderName::from_static(LEADER),
    HeaderName::from_static(LAST_LOG_INDEX),
];

/// Sends the request to `leader` and relays its answer.
pub async fn forward(
    node: &Arc<Node>,
    leader: Option<Leader>,
    method: Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: Bytes,
) -> Response {
    relay_to(node, leader, method, uri, headers, body, true).await
}

/// Sends a request about a shard that `node`'s group is not (this node holds no replica of it)
/// to `replica`, one of that shard's, and relays its answer. `replica` serves it when it leads
/// the shard, and refuses it with a retryable `no_leader` otherwise (a forwarded request is not
/// forwarded again); a client that knows the shard's leader goes there instead.
pub async fn forward_to_shard(
    node: &Arc<Node>,
    replica: Leader,
    method: Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: Bytes,
) -> Response {
    relay_to(node, Some(replica), method, uri, headers, body, false).await
}

/// Sends the request to `leader` and relays its answer; with `watch`, gives it up once `node`
/// stops naming `leader` as its group's leader.
async fn relay_to(
    node: &Arc<Node>,
    leader: Option<Leader>,
    method: Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: Bytes,
    watch: bool,
) -> Response {
    let (leader, request) = match forwarded_request(node, leader, method, uri, headers, body) {
        Ok(forwarded) => forwarded,
        Err(refusal) => return refusal,
    };
    let sending = node
        .transport()
        .send(request, node.config().limits.forward_timeout);
    let watching = async {
        if watch {
            no_longer_named(node, leader.id).await
        } else {
            std::future::pending().await
        }
    };
    let answer = match tokio::select! {
        answer = sending => answer,
        () = watching => return leader_replaced(&leader),
    } {
        Ok(answer) => answer,
        Err(TransportError::TooLarge { limit }) => {
            return ApiError::too_large_because(
                Oversize {
                    what: Limit::AnswerBytes,
                    size: None,
                    limit: limit as u64,
                },
                format!(
                    "the leader's answer exceeds the {limit} bytes a node relays; \
                     send the request to the leader (node {})",
                    leader.id
                ),
            )
            .into_response()
        }
        Err(err) => return leader_silent(&leader, &err),
    };
    relay(&leader, answer.map(Body::from))
}

/// Sends a read whose answer may be of any size (a backup) to `leader` and relays the answer's
/// body piece by piece as it arrives: this node holds a piece at a time, whatever the size.
pub async fn forward_streamed(
    node: &Arc<Node>,
    leader: Option<Leader>,
    uri: &Uri,
    headers: &HeaderMap,
) -> Response {
    let (leader, request) =
        match forwarded_request(node, leader, Method::GET, uri, headers, Bytes::new()) {
            Ok(forwarded) => forwarded,
            Err(refusal) => return refusal,
        };
    match node
        .transport()
        .send_streamed(request, node.config().limits.forward_timeout)
        .await
    {
        Ok(answer) => relay(&leader, answer.map(Body::from_stream)),
        Err(err) => leader_silent(&leader, &err),
    }
}

/// The request to pass to the leader, or the answer that refuses to pass it (a second hop, no
/// leader known, this node itself named leader).
fn forwarded_request(
    node: &Arc<Node>,
    leader: Option<Leader>,
    method: Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<(Leader, http::Request<Bytes>), Response> {
    if headers.contains_key(FORWARDED) {
        return Err(ApiError::no_leader(
            "the node this request was forwarded to is not the leader",
        )
        .into_response());
    }
    let Some(leader) = leader.filter(|l| l.id != node.id()) else {
        return Err(ApiError::no_leader("no leader is known; retry shortly").into_response());
    };
    let path = uri.path_and_query().map_or(uri.path(), |pq| pq.as_str());
    let mut request = node
        .peer_credentials()
        .request(method, leader.id, &leader.addr, path);
    for name in &REQUEST_HEADERS {
        if let Some(value) = headers.get(name) {
            request = request.header(name, value);
        }
    }
    request = request.header(FORWARDED, node.id().to_string());
    match request.body(body) {
        Ok(request) => Ok((leader, request)),
        Err(err) => Err(
            ApiError::invalid_input(format!("cannot forward the request: {err}")).into_response(),
        ),
    }
}

/// How often a node forwarding a request checks that it still names the leader it forwards to.
const LEADER_CHECK_INTERVAL: Duration = Duration::from_millis(50);

/// Resolves once this node no longer names `leader` as the leader: a stopped or cut-off leader
/// no longer answers, and its followers stop naming it once it has been silent for its lease
/// (or a successor is elected). A request forwarded to it is then given up at once instead of
/// after the forward's deadline, so that its client turns to the new leader.
async fn no_longer_named(node: &Node, leader: u64) {
    loop {
        tokio::time::sleep(LEADER_CHECK_INTERVAL).await;
        if node.leader().map(|l| l.id) != Some(leader) {
            return;
        }
    }
}

/// A forwarded request given up because the leader it went to is no longer named: retryable,
/// its outcome unknown (the old leader may have taken it).
fn leader_replaced(leader: &Leader) -> Response {
    ApiError::unavailable(format!(
        "node {} stopped being the leader while the request was forwarded to it; \
         whether it took the request is unknown",
        leader.id
    ))
    .into_response()
}

fn leader_silent(leader: &Leader, err: &TransportError) -> Response {
    ApiError::unavailable(format!(
        "the leader (node {}) did not answer: {err}",
        leader.id
    ))
    .into_response()
}

/// The leader's answer as this node's: its status, body and the headers a client needs.
fn relay(leader: &Leader, answer: http::Response<Body>) -> Response {
    let (parts, body) = answer.into_parts();
    let mut response = (parts.status, body).into_response();
    for name in &RESPONSE_HEADERS {
        if let Some(value) = parts.headers.get(name) {
            response.headers_mut().insert(name.clone(), value.clone());
        }
    }
    set_leader_header(&mut response, leader.id);
    response
}

/// Adds `x-chainstore-leader` unless the answer already carries it.
pub fn set_leader_header(response: &mut Response, leader_id: u64) {
    let name = HeaderName::from_static(LEADER);
    if !response.headers().contains_key(&name) {
        if let Ok(value) = HeaderValue::from_str(&leader_id.to_string()) {
            response.headers_mut().insert(name, value);
        }
    }
}
