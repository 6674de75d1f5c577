//! `/healthz`, `/readyz` (open to probes, no credentials) and `/metrics` (the `read` role).

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use chainstore_model::api::{HealthAnswer, ReadyAnswer};

use super::error::ApiError;

use crate::host::Host;

/// How far a node's applied index may trail its log and still be ready.
pub const READY_APPLY_LAG_MAX: u64 = 1_000;

/// Liveness: the process serves HTTP.
pub async fn healthz() -> Response {
    Json(HealthAnswer {
        status: "ok".into(),
    })
    .into_response()
}

/// Readiness: storage is sound, and in every group this node runs, Raft runs, a leader is known
/// and this node has applied (nearly) all of its log. The answer's figures are those of the
/// node's first group (the whole cluster when it has one shard).
pub async fn readyz(State(host): State<Arc<Host>>) -> Response {
    let storage_failure = host.storage_failure();
    let groups = host.groups();
    let mut ready = storage_failure.is_none() && !groups.is_empty();
    let mut body = None;
    for node in &groups {
        let m = node.raft_metrics();
        let applied = m.last_applied.as_ref().map_or(0, |id| id.index);
        let last_log = m.last_log_index.unwrap_or(0);
        let lag = last_log.saturating_sub(applied);
        let raft_stopped = m.running_state.as_ref().err().map(|e| e.to_string());
        let leader_id = node.leader_id_in(&m);
        ready &= raft_stopped.is_none() && leader_id.is_some() && lag <= READY_APPLY_LAG_MAX;
        body.get_or_insert(ReadyAnswer {
            leader_id,
            last_log_index: last_log,
            last_applied: applied,
            storage_failure: storage_failure.clone(),
            raft_stopped,
        });
    }
    let body = body.unwrap_or(ReadyAnswer {
        leader_id: None,
        last_log_index: 0,
        last_applied: 0,
        storage_failure,
        raft_stopped: Some("this node runs no group".into()),
    });
    if ready {
        (StatusCode::OK, Json(body)).into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
    }
}

/// Prometheus text exposition: the `chainstore_raft_*` figures are the node's first group's (the
/// whole cluster's when it has one shard), the `chainstore_shard_*` ones every group's, labelled
/// by shard.
pub async fn metrics(State(host): State<Arc<Host>>) -> Response {
    let Some(node) = host.first() else {
        return ApiError::unavailable("this node is stopping").into_response();
    };
    for group in host.groups() {
        host.metrics()
            .set_shard(group.group(), &group.raft_metrics());
    }
    node.metrics().set_entry_stages(&node.entry_stages().await);
    let text = node.metrics().render(node.id(), &node.raft_metrics());
    ([(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], text).into_response()
}
