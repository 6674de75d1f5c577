//! `/v1/cluster...`: status and membership.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Method, Uri};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use chainstore_model::api::{
    ClusterStatus, GroupStatus, InitAnswer, InitBody, LearnerBody, MembershipAnswer, RaftRole,
    VotersBody,
};
use chainstore_model::{Layout, ShardCount, ShardId};
use openraft::ServerState;

use super::error::ApiError;
use super::extract::{parse_json, read_body};
use super::forward::forward;
use crate::errors::MembershipError;
use crate::host::{Host, LayoutOffer};
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

/// `GET /v1/cluster` — this node's view of the cluster: its first group's at the top (the whole
/// cluster when it has one shard), then every group it runs.
pub async fn status(State(host): State<Arc<Host>>) -> Response {
    let Some(first) = host.first() else {
        return ApiError::unavailable("this node is stopping").into_response();
    };
    let layout = host.layout();
    let groups = host
        .groups()
        .iter()
        .map(|node| {
            let m = node.raft_metrics();
            GroupStatus {
                shard: node.group(),
                state: role(m.state),
                leader_id: node.leader_id_in(&m),
                preferred_leader: layout
                    .as_ref()
                    .and_then(|l| l.placement().shard(ShardId(node.group())))
                    .map(|replicas| replicas.leader),
                term: m.current_term,
                voters: m.membership_config.membership().voter_ids().collect(),
                last_log_index: m.last_log_index.unwrap_or(0),
                last_applied: m.last_applied.as_ref().map_or(0, |id| id.index),
            }
        })
        .collect();
    let m = first.raft_metrics();
    let membership = m.membership_config.membership();
    Json(ClusterStatus {
        node_id: host.id(),
        state: role(m.state),
        leader_id: first.leader_id_in(&m),
        term: m.current_term,
        voters: membership.voter_ids().collect(),
        learners: membership.learner_ids().collect(),
        nodes: match &layout {
            Some(layout) => layout.nodes().clone(),
            None => membership
                .nodes()
                .map(|(id, n)| (*id, n.addr.clone()))
                .collect(),
        },
        last_log_index: m.last_log_index.unwrap_or(0),
        last_applied: m.last_applied.as_ref().map_or(0, |id| id.index),
        snapshot_index: m.snapshot.as_ref().map_or(0, |id| id.index),
        purged_index: m.purged.as_ref().map_or(0, |id| id.index),
        shards: host.shards().get(),
        groups,
    })
    .into_response()
}

/// Replicas of each shard when `cluster init` names none: three, or every node of a smaller
/// cluster.
const REPLICAS_DEFAULT: usize = 3;

/// `POST /v1/cluster/init` — on one fresh node. With one shard (the default), initializes the
/// one group with every node as a voter. With several, computes the layout, takes it here and
/// hands it to every other node (each then runs its groups, and each group's preferred leader
/// initializes it); a node that cannot be reached leaves the init unfinished, and sending the
/// same init again finishes it.
pub async fn init(State(host): State<Arc<Host>>, headers: HeaderMap, body: Body) -> Response {
    let outcome = async {
        let bytes = read_body(&headers, body, host.config().limits.body_bytes_max).await?;
        let request: InitBody = parse_json(&bytes)?;
        if request.nodes.is_empty() || request.nodes.values().any(|addr| addr.is_empty()) {
            return Err(ApiError::invalid_input(
                "nodes must map at least one node id to an address",
            ));
        }
        let shards = ShardCount::new(request.shards.unwrap_or(1))
            .map_err(|e| ApiError::invalid_input(e.to_string()))?;
        if shards == ShardCount::ONE {
            if request.replicas.is_some() {
                return Err(ApiError::invalid_input(
                    "replicas applies to a cluster of several shards; one shard is replicated \
                     on every node",
                ));
            }
            let first = host
                .first()
                .ok_or_else(|| ApiError::unavailable("this node is stopping"))?;
            first.initialize(request.nodes).await?;
            return Ok(Json(InitAnswer { initialized: true }).into_response());
        }
        let replicas = match request.replicas {
            None => REPLICAS_DEFAULT.min(request.nodes.len()),
            Some(r @ (3 | 5)) => r as usize,
            Some(r) => {
                return Err(ApiError::invalid_input(format!(
                    "a shard has 3 or 5 replicas, not {r}"
                )))
            }
        };
        let layout = Layout::new(request.nodes, shards, replicas)
            .map_err(|e| ApiError::invalid_input(format!("no layout fits: {e}")))?;
        host.make_sharded(layout).await?;
        Ok(Json(InitAnswer { initialized: true }).into_response())
    };
    outcome.await.unwrap_or_else(IntoResponse::into_response)
}

/// `POST /raft/layout` — a member hands this node the cluster's layout ([`Host::adopt`]), or
/// asks it to initialize the groups it is meant to lead ([`Host::lead_preferred`]).
pub async fn take_layout(
    State(host): State<Arc<Host>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let outcome = async {
        let bytes = read_body(&headers, body, host.config().limits.raft_body_bytes_max).await?;
        let offer: LayoutOffer = serde_json::from_slice(&bytes)
            .map_err(|e| ApiError::invalid_input(format!("malformed layout: {e}")))?;
        host.adopt(offer.layout).await?;
        if offer.initialize {
            host.lead_preferred().await?;
        }
        Ok::<_, ApiError>(Json(InitAnswer { initialized: true }).into_response())
    };
    outcome.await.unwrap_or_else(IntoResponse::into_response)
}

/// Refuses a membership change on a cluster of several shards: moving replicas between the
/// nodes of a running sharded cluster is not built.
fn single_shard(host: &Host) -> Result<(), MembershipError> {
    match host.shards().get() {
        1 => Ok(()),
        shards => Err(MembershipError::Invalid(format!(
            "this cluster has {shards} shards, placed when it was made; adding or removing \
             members of a sharded cluster is not supported yet"
        ))),
    }
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
    State(host): State<Arc<Host>>,
    Extension(node): Extension<Arc<Node>>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    if let Err(err) = single_shard(&host) {
        return ApiError::from(err).into_response();
    }
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
    State(host): State<Arc<Host>>,
    Extension(node): Extension<Arc<Node>>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    if let Err(err) = single_shard(&host) {
        return ApiError::from(err).into_response();
    }
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
