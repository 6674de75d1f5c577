//! `/healthz`, `/readyz` (open to probes, no credentials) and `/metrics` (the `read` role).

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use chainstore_model::api::{HealthAnswer, ReadyAnswer};

use crate::node::Node;

/// How far a node's applied index may trail its log and still be ready.
pub const READY_APPLY_LAG_MAX: u64 = 1_000;

/// Liveness: the process serves HTTP.
pub async fn healthz() -> Response {
    Json(HealthAnswer {
        status: "ok".into(),
    })
    .into_response()
}

/// Readiness: storage is sound, Raft runs, a leader is known and this node has applied (nearly)
/// all of its log.
pub async fn readyz(State(node): State<Arc<Node>>) -> Response {
    let m = node.raft_metrics();
    let applied = m.last_applied.as_ref().map_or(0, |id| id.index);
    let last_log = m.last_log_index.unwrap_or(0);
    let lag = last_log.saturating_sub(applied);
    let storage_failure = node.storage_failure();
    let raft_stopped = m.running_state.as_ref().err().map(|e| e.to_string());
    let ready = storage_failure.is_none()
        && raft_stopped.is_none()
        && node.leader_id_in(&m).is_some()
        && lag <= READY_APPLY_LAG_MAX;
    let body = ReadyAnswer {
        leader_id: node.leader_id_in(&m),
        last_log_index: last_log,
        last_applied: applied,
        storage_failure,
        raft_stopped,
    };
    if ready {
        (StatusCode::OK, Json(body)).into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
    }
}

/// Prometheus text exposition.
pub async fn metrics(State(node): State<Arc<Node>>) -> Response {
    node.metrics().set_entry_stages(&node.entry_stages().await);
    let text = node.metrics().render(node.id(), &node.raft_metrics());
    ([(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], text).into_response()
}
