//! `/v1/cluster...`: status and membership.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Method, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use chainstore_model::api::{
    ClusterStatus, InitAnswer, InitBody, LearnerBody, MembershipAnswer, RaftRole, VotersBody,
};
use openraft::ServerState;

use super::error::ApiError;
use super::extract::{parse_json, read_body};
use super::forward::forward;
use crate::errors::MembershipError;
use crate::node::Node;

fn role(state: ServerState) -> RaftRole {
    match state {
        ServerState::Leader => RaftRole::Leader,
        ServerState::Follower => RaftRole::Follower,
        ServerState::Candidate => RaftRole::Candidate,
        ServerState::Learner => RaftRole::Learner,
        ServerState::Shutdown => RaftRole::Shutdown,
    }
}

/// `GET /v1/cluster` — this node's view of the cluster.
pub async fn status(State(node): State<Arc<Node>>) -> Response {
    let m = node.raft_metrics();
    let membership = m.membership_config.membership();
    Json(ClusterStatus {
        node_id: node.id(),
        state: role(m.state),
        leader_id: node.leader_id_in(&m),
        term: m.current_term,
        voters: membership.voter_ids().collect(),
        learners: membership.learner_ids().collect(),
        nodes: membership
            .nodes()
            .map(|(id, n)| (*id, n.addr.clone()))
            .collect(),
        last_log_index: m.last_log_index.unwrap_or(0),
        last_applied: m.last_applied.as_ref().map_or(0, |id| id.index),
        snapshot_index: m.snapshot.as_ref().map_or(0, |id| id.index),
        purged_index: m.purged.as_ref().map_or(0, |id| id.index),
    })
    .into_response()
}

/// `POST /v1/cluster/init` — on one fresh node.
pub async fn init(State(node): State<Arc<Node>>, headers: HeaderMap, body: Body) -> Response {
    let outcome = async {
        let bytes = read_body(&headers, body, node.config().limits.body_bytes_max).await?;
        let request: InitBody = parse_json(&bytes)?;
        if request.nodes.is_empty() || request.nodes.values().any(|addr| addr.is_empty()) {
            return Err(ApiError::invalid_input(
                "nodes must map at least one node id to an address",
            ));
        }
        node.initialize(request.nodes).await?;
        Ok(Json(InitAnswer { initialized: true }).into_response())
    };
    outcome.await.unwrap_or_else(IntoResponse::into_response)
}

/// Runs a membership change on the leader, forwarding when this node is not it.
async fn membership<T, F, Fut>(
    node: Arc<Node>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
    run: F,
) -> Response
where
    T: serde::de::DeserializeOwned,
    F: FnOnce(Arc<Node>, T) -> Fut,
    Fut: std::future::Future<Output = Result<(), MembershipError>>,
{
    let outcome = async {
        let bytes = read_body(&headers, body, node.config().limits.body_bytes_max).await?;
        let request: T = parse_json(&bytes)?;
        match run(Arc::clone(&node), request).await {
            Ok(()) => Ok(Json(MembershipAnswer { ok: true }).into_response()),
            Err(MembershipError::NotLeader(leader)) => {
                Ok(forward(&node, leader, Method::POST, &uri, &headers, bytes).await)
            }
            Err(err) => Err(ApiError::from(err)),
        }
    };
    outcome.await.unwrap_or_else(IntoResponse::into_response)
}

/// `POST /v1/cluster/learners` — `{node_id, addr}`; returns once the learner caught up.
pub async fn add_learner(
    State(node): State<Arc<Node>>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    membership(
        node,
        uri,
        headers,
        body,
        |node, request: LearnerBody| async move {
            if request.addr.is_empty() {
                return Err(MembershipError::Invalid("addr must not be empty".into()));
            }
            node.add_learner(request.node_id, request.addr).await
        },
    )
    .await
}

/// `POST /v1/cluster/voters` — `{voters: [ids]}`: the complete new voter set.
pub async fn change_voters(
    State(node): State<Arc<Node>>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    membership(
        node,
        uri,
        headers,
        body,
        |node, request: VotersBody| async move {
            if request.voters.is_empty() {
                return Err(MembershipError::Invalid("voters must not be empty".into()));
            }
            node.change_voters(request.voters).await
        },
    )
    .await
}
