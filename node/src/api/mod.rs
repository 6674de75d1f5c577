//! The HTTP API of SPEC §6: routes, who may call each, and limits at the edge.

pub mod auth;
pub mod backup;
pub mod capacity;
pub mod cluster;
pub mod error;
pub mod executions;
pub mod extract;
pub mod forward;
pub mod openapi;
pub mod ops;
pub mod raft;

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, MethodRouter};
use axum::Router;
use chainstore_transport::Role;

use crate::node::Node;
use auth::{guard, Access};
use capacity::{admit, Capacity};
use error::ApiError;
use openapi::{Content, Doc};

/// One route: what the router serves and what the OpenAPI document says of it, in one place.
pub(crate) struct Route {
    pub method: &'static str,
    pub path: &'static str,
    pub access: Access,
    pub doc: Doc,
    pub handler: MethodRouter<Arc<Node>>,
}

/// Every route of the API, with who may call it (the README's table of routes and roles is this
/// one) and what it takes and answers.
pub(crate) fn routes() -> Vec<Route> {
    use chainstore_model::api::*;
    use openapi::schema as s;
    use Content::{Json, Other};
    let read = Access::Client(Role::Read);
    let write = Access::Client(Role::Write);
    let admin = Access::Client(Role::Admin);
    let chain_query = Some(s::<ChainQuery> as fn(&mut _) -> _);
    let read_query = Some(s::<ReadQuery> as fn(&mut _) -> _);
    let route = |method, path, access, doc: Doc, handler| Route {
        method,
        path,
        access,
        doc,
        handler,
    };
    let doc = |summary, query, body, answer| Doc {
        summary,
        query,
        body,
        answer,
    };
    let peer_rpc = || Other("application/octet-stream", "openraft's RPC, members only");
    vec![
        route("GET", "/healthz", Access::Public, doc("Liveness.", None, Content::None, Json(s::<HealthAnswer>)), get(ops::healthz)),
        route("GET", "/readyz", Access::Public, doc("Readiness: 503 until this node can serve.", None, Content::None, Json(s::<ReadyAnswer>)), get(ops::readyz)),
        route("GET", "/metrics", read, doc("Prometheus metrics of this node.", None, Content::None, Other("text/plain", "Prometheus text exposition")), get(ops::metrics)),
        route("GET", "/v1/openapi.json", read, doc("This document.", None, Content::None, Other("application/json", "an OpenAPI 3.0 document")), get(openapi::serve)),
        route("GET", "/v1/cluster", read, doc("The cluster as this node sees it.", None, Content::None, Json(s::<ClusterStatus>)), get(cluster::status)),
        route("GET", "/v1/executions/{id}/chain", read, doc("The guarded read: the whole chain, or one page of it, only when the store can prove it; otherwise cannot_answer with the reason.", chain_query, Content::None, Json(s::<ChainAnswer>)), get(executions::chain)),
        route("GET", "/v1/executions/{id}/chain/raw", read, doc("The stored events, unguarded (diagnosis only).", chain_query, Content::None, Json(s::<RawChainAnswer>)), get(executions::chain_raw)),
        route("GET", "/v1/executions/{id}/state", read, doc("Authority, coverage, head and completeness.", read_query, Content::None, Json(s::<StateAnswer>)), get(executions::state)),
        route("GET", "/v1/executions/{id}/events/{event_id}", read, doc("One stored event.", read_query, Content::None, Json(s::<chainstore_model::ChainEvent>)), get(executions::event)),
        route("GET", "/v1/executions/{id}/quarantine", read, doc("The execution's quarantine records: what rebuilds moved aside.", read_query, Content::None, Json(s::<QuarantineList>)), get(executions::quarantine_list)),
        route("GET", "/v1/executions/{id}/quarantine/{number}", read, doc("One quarantine record and a page of the events it holds.", chain_query, Content::None, Json(s::<QuarantinePage>)), get(executions::quarantine_page)),
        route("GET", "/v1/changes", read, doc("The commit-ordered change feed.", Some(s::<ChangesQuery>), Content::None, Json(s::<ChangesAnswer>)), get(executions::changes)),
        route("POST", "/v1/executions/{id}/events", write, doc("Appends one event, or several linked in order (`events`), at the head.", None, Json(s::<AppendBody>), Json(s::<AppendAnswers>)), post(executions::append)),
        route("POST", "/v1/executions/{id}/populate", write, doc("Populates the execution from the authoritative log (whole, or one part of a session).", None, Json(s::<PopulateBody>), Json(s::<PopulateAnswer>)), post(executions::populate)),
        route("POST", "/v1/executions/{id}/replicated", admin, doc("Stores replicated events in any order.", None, Json(s::<ReplicatedBody>), Json(s::<chainstore_model::Replicated>)), post(executions::replicated)),
        route("POST", "/v1/executions/{id}/rebuild", admin, doc("Moves a diverged partition into a quarantine record and rebuilds the execution from the log, in one step.", None, Json(s::<RebuildBody>), Json(s::<RebuildAnswer>)), post(executions::rebuild)),
        route("GET", "/v1/snapshot", admin, doc("A consistent backup, taken on the leader.", None, Content::None, Other("application/octet-stream", "a snapshot file")), get(backup::save)),
        route("POST", "/v1/cluster/init", admin, doc("Initializes a new cluster.", None, Json(s::<InitBody>), Json(s::<InitAnswer>)), post(cluster::init)),
        route("POST", "/v1/cluster/learners", admin, doc("Adds a learner.", None, Json(s::<LearnerBody>), Json(s::<MembershipAnswer>)), post(cluster::add_learner)),
        route("POST", "/v1/cluster/voters", admin, doc("Sets the voter set.", None, Json(s::<VotersBody>), Json(s::<MembershipAnswer>)), post(cluster::change_voters)),
        route("POST", "/raft/append", Access::Peer, doc("Raft AppendEntries.", None, peer_rpc(), peer_rpc()), post(raft::append)),
        route("POST", "/raft/vote", Access::Peer, doc("Raft RequestVote.", None, peer_rpc(), peer_rpc()), post(raft::vote)),
        route("POST", "/raft/pre-vote", Access::Peer, doc("Raft pre-vote: would this member vote for the candidate (nothing stored, no term change).", None, peer_rpc(), peer_rpc()), post(raft::pre_vote)),
        route("POST", "/raft/snapshot", Access::Peer, doc("One chunk of a Raft snapshot; the last one installs it.", None, peer_rpc(), peer_rpc()), post(raft::snapshot)),
        route("POST", "/raft/transfer-leader", Access::Peer, doc("The leader hands its leadership over: the member it names campaigns.", None, peer_rpc(), peer_rpc()), post(raft::transfer_leader)),
        route("POST", "/raft/stream", Access::Peer, doc("Upgrades the connection to the append stream (`upgrade: chainstore-raft-append/1`): AppendEntries as frames, one connection per leader and follower.", None, Content::None, peer_rpc()), post(raft::stream)),
    ]
}

/// `POST .../events` takes one event or several (the OpenAPI document's view of it).
#[derive(schemars::JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)]
enum AppendBody {
    One(chainstore_model::AppendRequest),
    Many(chainstore_model::api::AppendBatchBody),
}

/// `POST .../events` answers one event or several, as it was sent.
#[derive(schemars::JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)]
enum AppendAnswers {
    One(chainstore_model::api::AppendAnswer),
    Many(chainstore_model::api::AppendBatchAnswer),
}

/// Every route as (method, path, who may call it): what the router serves.
pub fn route_table() -> Vec<(&'static str, &'static str, Access)> {
    routes()
        .into_iter()
        .map(|r| (r.method, r.path, r.access))
        .collect()
}

/// The whole HTTP surface of a node. Tests call it without a socket.
///
/// The routes come from [`routes`], grouped by who may call them; each group's guard runs before
/// any handler reads a body.
pub fn app(node: Arc<Node>) -> Router {
    let guarded = |access: Access, routes: Router<Arc<Node>>| {
        routes.route_layer(middleware::from_fn_with_state(
            (Arc::clone(&node), access),
            guard,
        ))
    };
    let (mut read, mut write, mut admin) = (Router::new(), Router::new(), Router::new());
    let (mut peer, mut public) = (Router::new(), Router::new());
    for route in routes() {
        let group = match route.access {
            Access::Public => &mut public,
            Access::Client(Role::Read) => &mut read,
            Access::Client(Role::Write) => &mut write,
            Access::Client(Role::Admin) => &mut admin,
            Access::Peer => &mut peer,
        };
        *group = std::mem::take(group).route(route.path, route.handler);
    }
    // Clients and peers are admitted apart: a client flood never queues a heartbeat.
    let limits = &node.config().limits;
    let metrics = Arc::clone(node.metrics());
    let clients = Capacity::new(
        "client",
        limits.concurrency_max,
        limits.queue_max,
        Arc::clone(&metrics),
    );
    let peers = Capacity::new(
        "peer",
        limits.peer_concurrency_max,
        limits.peer_queue_max,
        metrics,
    );
    let client_routes = Router::new()
        .merge(guarded(Access::Client(Role::Read), read))
        .merge(guarded(Access::Client(Role::Write), write))
        .merge(guarded(Access::Client(Role::Admin), admin))
        .route_layer(middleware::from_fn_with_state(clients, admit));
    let peer_routes =
        guarded(Access::Peer, peer).route_layer(middleware::from_fn_with_state(peers, admit));
    Router::new()
        .merge(client_routes)
        .merge(peer_routes)
        .merge(public)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(Arc::clone(&node), deadline))
        .with_state(node)
}

async fn not_found() -> Response {
    ApiError::not_found("no such route").into_response()
}

async fn method_not_allowed() -> Response {
    ApiError::method_not_allowed("this route does not take this method").into_response()
}

/// Bounds every request by the configured deadline.
async fn deadline(State(node): State<Arc<Node>>, request: Request, next: Next) -> Response {
    let limit = node.config().limits.request_timeout;
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_) => ApiError::unavailable(format!("no answer within {limit:?}")).into_response(),
    }
}
