//! The HTTP API of SPEC §6: routes, who may call each, and limits at the edge.

pub mod auth;
pub mod backup;
pub mod capacity;
pub mod cluster;
pub mod error;
pub mod executions;
pub mod extract;
pub mod forward;
pub mod ops;

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use chainstore_transport::Role;

use crate::node::Node;
use crate::raft_api;
use auth::{guard, Access};
use capacity::{admit, Capacity};
use error::ApiError;

/// The whole HTTP surface of a node. Tests call it without a socket.
///
/// The routes are grouped by who may call them (the README's table of routes and roles is this
/// one); each group's guard runs before any handler reads a body.
pub fn app(node: Arc<Node>) -> Router {
    let guarded = |access: Access, routes: Router<Arc<Node>>| {
        routes.route_layer(middleware::from_fn_with_state(
            (Arc::clone(&node), access),
            guard,
        ))
    };
    let read = Router::new()
        .route("/v1/executions/{id}/chain", get(executions::chain))
        .route("/v1/executions/{id}/chain/raw", get(executions::chain_raw))
        .route("/v1/executions/{id}/state", get(executions::state))
        .route(
            "/v1/executions/{id}/events/{event_id}",
            get(executions::event),
        )
        .route(
            "/v1/executions/{id}/quarantine",
            get(executions::quarantine_list),
        )
        .route(
            "/v1/executions/{id}/quarantine/{number}",
            get(executions::quarantine_page),
        )
        .route("/v1/changes", get(executions::changes))
        .route("/v1/cluster", get(cluster::status))
        .route("/metrics", get(ops::metrics));
    let write = Router::new()
        .route("/v1/executions/{id}/events", post(executions::append))
        .route("/v1/executions/{id}/populate", post(executions::populate));
    let admin = Router::new()
        .route(
            "/v1/executions/{id}/replicated",
            post(executions::replicated),
        )
        .route("/v1/executions/{id}/rebuild", post(executions::rebuild))
        .route("/v1/snapshot", get(backup::save))
        .route("/v1/cluster/init", post(cluster::init))
        .route("/v1/cluster/learners", post(cluster::add_learner))
        .route("/v1/cluster/voters", post(cluster::change_voters));
    let peer = Router::new()
        .route("/raft/append", post(raft_api::append))
        .route("/raft/vote", post(raft_api::vote))
        .route("/raft/snapshot", post(raft_api::snapshot))
        .route("/raft/elect", post(raft_api::elect));
    let public = Router::new()
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz));
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
    ApiError::NotFound("no such route".into()).into_response()
}

async fn method_not_allowed() -> Response {
    ApiError::MethodNotAllowed("this route does not take this method".into()).into_response()
}

/// Bounds every request by the configured deadline.
async fn deadline(State(node): State<Arc<Node>>, request: Request, next: Next) -> Response {
    let limit = node.config().limits.request_timeout;
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_) => ApiError::unavailable(format!("no answer within {limit:?}")).into_response(),
    }
}
