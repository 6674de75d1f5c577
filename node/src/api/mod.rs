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

use crate::host::{Host, LAYOUT_PATH};
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
    pub handler: MethodRouter<Arc<Host>>,
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
        route("GET", "/v1/snapshot", admin, doc("A consistent backup of one shard (of the whole store, when the cluster has one), taken on its leader.", Some(s::<BackupQuery>), Content::None, Other("application/octet-stream", "a snapshot file")), get(backup::save)),
        route("POST", "/v1/cluster/init", admin, doc("Initializes a new cluster.", None, Json(s::<InitBody>), Json(s::<InitAnswer>)), post(cluster::init)),
        route("POST", "/v1/cluster/learners", admin, doc("Adds a learner.", None, Json(s::<LearnerBody>), Json(s::<MembershipAnswer>)), post(cluster::add_learner)),
        route("POST", "/v1/cluster/voters", admin, doc("Sets the voter set.", None, Json(s::<VotersBody>), Json(s::<MembershipAnswer>)), post(cluster::change_voters)),
        route("POST", "/raft/append", Access::Peer, doc("Raft AppendEntries.", None, peer_rpc(), peer_rpc()), post(raft::append)),
        route("POST", "/raft/vote", Access::Peer, doc("Raft RequestVote.", None, peer_rpc(), peer_rpc()), post(raft::vote)),
        route("POST", "/raft/pre-vote", Access::Peer, doc("Raft pre-vote: would this member vote for the candidate (nothing stored, no term change).", None, peer_rpc(), peer_rpc()), post(raft::pre_vote)),
        route("POST", "/raft/snapshot", Access::Peer, doc("One chunk of a Raft snapshot; the last one installs it.", None, peer_rpc(), peer_rpc()), post(raft::snapshot)),
        route("POST", "/raft/transfer-leader", Access::Peer, doc("The leader hands its leadership over: the member it names campaigns.", None, peer_rpc(), peer_rpc()), post(raft::transfer_leader)),
        route("POST", LAYOUT_PATH, Access::Peer, doc("Takes the cluster's layout (`cluster init` with several shards): stored, then this member runs the groups it places here.", None, Json(s::<serde_json::Value>), Json(s::<InitAnswer>)), post(cluster::take_layout)),
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
pub fn app(host: Arc<Host>) -> Router {
    let guarded = |access: Access, routes: Router<Arc<Host>>| {
        routes
            .route_layer(middleware::from_fn_with_state(
                Arc::clone(&host),
                select_group,
            ))
            .route_layer(middleware::from_fn_with_state(
                (Arc::clone(&host), access),
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
    let limits = &host.config().limits;
    let metrics = Arc::clone(host.metrics());
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
        .layer(middleware::from_fn_with_state(Arc::clone(&host), deadline))
        .with_state(host)
}

/// Hands the handler the group its request is for (`Extension<Arc<Node>>`), after the guard
/// admitted the caller: a Raft RPC's group from its `x-chainstore-group` header (absent: group 0),
/// an execution's from the shard of its id, the change feed's from its `shard` parameter, and
/// anything else the node's first group.
async fn select_group(State(host): State<Arc<Host>>, request: Request, next: Next) -> Response {
    let (mut parts, body) = request.into_parts();
    match pick_group(&host, &mut parts).await {
        Ok(Picked::Here(node)) => {
            parts.extensions.insert(node);
            next.run(Request::from_parts(parts, body)).await
        }
        Ok(Picked::Elsewhere(shard)) => elsewhere(&host, shard, parts, body).await,
        Err(refusal) => refusal.into_response(),
    }
}

/// The group a request is for: this node's replica of it, or a shard this node holds none of.
enum Picked {
    Here(Arc<Node>),
    Elsewhere(u32),
}

/// A request about an execution of shard `shard`, which this node holds no replica of: sent on
/// to the shard's preferred leader ([`forward::forward_to_shard`]).
async fn elsewhere(
    host: &Arc<Host>,
    shard: u32,
    parts: axum::http::request::Parts,
    body: axum::body::Body,
) -> Response {
    let outcome = async {
        let (Some(node), Some(layout)) = (host.first(), host.layout()) else {
            return Err(ApiError::unavailable("this node is stopping"));
        };
        let replica = layout
            .placement()
            .shard(chainstore_model::ShardId(shard))
            .and_then(|replicas| {
                let id = replicas.leader;
                Some(crate::errors::Leader {
                    id,
                    addr: layout.nodes().get(&id)?.clone(),
                })
            })
            .ok_or_else(|| ApiError::internal(format!("the layout places no shard {shard}")))?;
        let bytes =
            extract::read_body(&parts.headers, body, host.config().limits.body_bytes_max).await?;
        Ok(forward::forward_to_shard(
            &node,
            replica,
            parts.method.clone(),
            &parts.uri,
            &parts.headers,
            bytes,
        )
        .await)
    };
    outcome.await.unwrap_or_else(IntoResponse::into_response)
}

async fn pick_group(
    host: &Arc<Host>,
    parts: &mut axum::http::request::Parts,
) -> Result<Picked, ApiError> {
    use axum::extract::{FromRequestParts, RawPathParams};
    use chainstore_model::api::{headers::GROUP, BackupQuery, ChangesQuery};
    let path = parts.uri.path();
    if path.starts_with("/raft/") && path != LAYOUT_PATH {
        let group = match parts.headers.get(GROUP) {
            None => 0,
            Some(value) => value
                .to_str()
                .ok()
                .and_then(|v| v.parse::<u32>().ok())
                .ok_or_else(|| {
                    ApiError::invalid_input(format!("{GROUP} must be a group number"))
                })?,
        };
        return host
            .group(group)
            .map(Picked::Here)
            .ok_or_else(|| ApiError::not_found(format!("group {group} is not on this node")));
    }
    let execution = path.starts_with("/v1/executions/");
    let shard = if execution {
        let params = RawPathParams::from_request_parts(parts, &()).await.ok();
        let id = params
            .as_ref()
            .and_then(|p| p.iter().find(|(name, _)| *name == "id"))
            .and_then(|(_, id)| chainstore_model::ExecutionId::new(id).ok());
        // A bad id is refused by the handler, in the first group.
        id.map(|id| host.shards().shard_of(&id).0)
    } else if path == "/v1/snapshot" {
        let shard = extract::parse_query::<BackupQuery>(&parts.uri)?.shard;
        named_shard(
            host,
            shard,
            "a backup of its own (a backup set holds one file per shard)",
        )?
    } else if path == "/v1/changes" {
        let shard = extract::parse_query::<ChangesQuery>(&parts.uri)?.shard;
        named_shard(host, shard, "a change feed of its own")?
    } else {
        None
    };
    match shard {
        Some(shard) => match host.group(shard) {
            Some(node) => Ok(Picked::Here(node)),
            None if execution => Ok(Picked::Elsewhere(shard)),
            None => Err(ApiError::no_leader(format!(
                "shard {shard} has no replica on this node; ask one of its replicas (GET \
                 /v1/cluster on any node names them)"
            ))),
        },
        None => host
            .first()
            .map(Picked::Here)
            .ok_or_else(|| ApiError::unavailable("this node is stopping")),
    }
}

/// The shard a request about one shard names with `shard=`: checked against the cluster's count,
/// and required when it has several (each has `what`).
fn named_shard(host: &Host, shard: Option<u32>, what: &str) -> Result<Option<u32>, ApiError> {
    let shards = host.shards().get();
    match shard {
        Some(shard) if shard >= shards => Err(ApiError::invalid_input(format!(
            "this cluster has {shards} shards, numbered from 0"
        ))),
        Some(shard) => Ok(Some(shard)),
        None if shards == 1 => Ok(None),
        None => Err(ApiError::invalid_input(format!(
            "this cluster has {shards} shards, each with {what}: name one with shard="
        ))),
    }
}

async fn not_found() -> Response {
    ApiError::not_found("no such route").into_response()
}

async fn method_not_allowed() -> Response {
    ApiError::method_not_allowed("this route does not take this method").into_response()
}

/// Bounds every request by the configured deadline.
async fn deadline(State(host): State<Arc<Host>>, request: Request, next: Next) -> Response {
    let limit = host.config().limits.request_timeout;
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_) => ApiError::unavailable(format!("no answer within {limit:?}")).into_response(),
    }
}
