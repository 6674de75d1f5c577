//! `/v1/executions/{id}/...` and `/v1/changes`: thin handlers that extract, call the node, and
//! map the result.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use raft_store::{AppendRequest, ChainEvent, ExecutionId, FromLog, Guarded, LogEvent};
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::ApiError;
use super::extract::{event_id, execution_id, parse_json, parse_query, read_body, PathParams};
use super::forward::{forward, set_leader_header};
use crate::node::{Consistency, Node, ReadError, WriteError};

/// The query of every read: `consistency=linearizable|local`, `min_index=N`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ReadQuery {
    pub(super) consistency: Option<String>,
    pub(super) min_index: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ChangesQuery {
    after: Option<u64>,
    limit: Option<usize>,
    consistency: Option<String>,
    min_index: Option<u64>,
}

fn consistency(raw: Option<&str>) -> Result<Consistency, ApiError> {
    match raw {
        None | Some("linearizable") => Ok(Consistency::Linearizable),
        Some("local") => Ok(Consistency::Local),
        Some(other) => Err(ApiError::InvalidInput(format!(
            "consistency must be linearizable or local, not {other:?}"
        ))),
    }
}

/// Runs a write: validates the path and body, asks the node, forwards to the leader when this
/// node is not it, and names the leader on the answer.
async fn write<T, F, Fut>(
    node: Arc<Node>,
    id: String,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
    run: F,
) -> Response
where
    T: serde::de::DeserializeOwned,
    F: FnOnce(Arc<Node>, ExecutionId, T) -> Fut,
    Fut: std::future::Future<Output = Result<Response, WriteError>>,
{
    let outcome = async {
        let exec = execution_id(&id)?;
        let bytes = read_body(&headers, body, node.config().limits.body_bytes_max).await?;
        let request: T = parse_json(&bytes)?;
        match run(Arc::clone(&node), exec, request).await {
            Ok(response) => Ok(response),
            Err(WriteError::NotLeader(leader)) => {
                Ok(forward(&node, leader, Method::POST, &uri, &headers, bytes).await)
            }
            Err(err) => Err(ApiError::from(err)),
        }
    };
    let mut response = outcome.await.unwrap_or_else(IntoResponse::into_response);
    if let Some(leader) = node.leader() {
        set_leader_header(&mut response, leader.id);
    }
    response
}

/// Passes the read barrier, or produces the answer to send instead (a forward, an error).
pub(super) async fn read_barrier(
    node: &Arc<Node>,
    uri: &Uri,
    headers: &HeaderMap,
    consistency_raw: Option<&str>,
    min_index: Option<u64>,
) -> Result<u64, Response> {
    let level = consistency(consistency_raw).map_err(IntoResponse::into_response)?;
    match node.read_barrier(level, min_index).await {
        Ok(applied) => Ok(applied),
        Err(ReadError::NotLeader(leader)) => {
            Err(forward(node, leader, Method::GET, uri, headers, Bytes::new()).await)
        }
        Err(err) => Err(ApiError::from(err).into_response()),
    }
}

/// `POST /v1/executions/{id}/events`
pub async fn append(
    State(node): State<Arc<Node>>,
    PathParams(id): PathParams<String>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    write(
        node,
        id,
        uri,
        headers,
        body,
        |node, exec, request: AppendRequest| async move {
            let appended = node.append(&exec, &request).await?;
            Ok(Json(json!({
                "execution_id": exec,
                "event_id": request.event_id,
                "exec_seq": appended.exec_seq,
                "commit_index": appended.commit_index,
                "duplicate": appended.duplicate,
            }))
            .into_response())
        },
    )
    .await
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PopulateBody {
    events: Vec<LogEvent>,
}

/// The wire form of a populate outcome (`extended` when an in-sync populate appended).
fn from_log_json(outcome: &FromLog) -> Value {
    let mut body = match outcome {
        FromLog::InSync { total, appended } => json!({ "total": total, "appended": appended }),
        FromLog::StaleLog {
            stored_len,
            log_len,
        } => json!({ "stored_len": stored_len, "log_len": log_len }),
        FromLog::Diverged {
            at_position,
            stored,
            log,
        } => {
            json!({ "at_position": at_position, "stored": stored, "log": log })
        }
        FromLog::Refused { reason } => json!({ "reason": reason.as_str() }),
    };
    body["outcome"] = json!(outcome.label());
    body
}

/// `POST /v1/executions/{id}/populate`
pub async fn populate(
    State(node): State<Arc<Node>>,
    PathParams(id): PathParams<String>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    write(
        node,
        id,
        uri,
        headers,
        body,
        |node, exec, request: PopulateBody| async move {
            let outcome = node.populate(&exec, &request.events).await?;
            Ok(Json(from_log_json(&outcome)).into_response())
        },
    )
    .await
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplicatedBody {
    events: Vec<ChainEvent>,
}

/// `POST /v1/executions/{id}/replicated`
pub async fn replicated(
    State(node): State<Arc<Node>>,
    PathParams(id): PathParams<String>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    write(
        node,
        id,
        uri,
        headers,
        body,
        |node, exec, request: ReplicatedBody| async move {
            let done = node.replicated(&exec, &request.events).await?;
            Ok(
                Json(json!({ "applied": done.applied, "duplicates": done.duplicates }))
                    .into_response(),
            )
        },
    )
    .await
}

/// The parameters every read takes.
trait ReadParams {
    fn consistency(&self) -> Option<&str>;
    fn min_index(&self) -> Option<u64>;
}

impl ReadParams for ReadQuery {
    fn consistency(&self) -> Option<&str> {
        self.consistency.as_deref()
    }
    fn min_index(&self) -> Option<u64> {
        self.min_index
    }
}

impl ReadParams for ChangesQuery {
    fn consistency(&self) -> Option<&str> {
        self.consistency.as_deref()
    }
    fn min_index(&self) -> Option<u64> {
        self.min_index
    }
}

/// Runs a read: decodes the query, passes the read barrier (or forwards to the leader), then
/// answers from the store with `answer(query, applied_index)`.
async fn read<Q, F>(node: &Arc<Node>, uri: &Uri, headers: &HeaderMap, answer: F) -> Response
where
    Q: serde::de::DeserializeOwned + ReadParams,
    F: FnOnce(Q, u64) -> Result<Value, ApiError>,
{
    let outcome = async {
        let query: Q = parse_query(uri)?;
        let barrier = read_barrier(node, uri, headers, query.consistency(), query.min_index());
        let applied_index = match barrier.await {
            Ok(applied) => applied,
            Err(response) => return Ok(response),
        };
        Ok::<_, ApiError>(Json(answer(query, applied_index)?).into_response())
    };
    outcome.await.unwrap_or_else(IntoResponse::into_response)
}

/// `GET /v1/executions/{id}/chain` — the guarded read.
pub async fn chain(
    State(node): State<Arc<Node>>,
    PathParams(id): PathParams<String>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let exec = match execution_id(&id) {
        Ok(exec) => exec,
        Err(err) => return err.into_response(),
    };
    read(&node, &uri, &headers, |_: ReadQuery, applied_index| {
        let answer = node.store().chain_if_authoritative(&exec)?;
        node.metrics().record_guarded(&answer);
        Ok(match answer {
            Guarded::Authoritative(events) => json!({
                "execution_id": exec,
                "answer": "authoritative",
                "events": events,
                "applied_index": applied_index,
            }),
            Guarded::CannotAnswer(reason) => json!({
                "execution_id": exec,
                "answer": "cannot_answer",
                "reason": reason.as_str(),
                "applied_index": applied_index,
            }),
        })
    })
    .await
}

/// `GET /v1/executions/{id}/chain/raw` — unguarded, for diagnosis.
pub async fn chain_raw(
    State(node): State<Arc<Node>>,
    PathParams(id): PathParams<String>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let exec = match execution_id(&id) {
        Ok(exec) => exec,
        Err(err) => return err.into_response(),
    };
    read(&node, &uri, &headers, |_: ReadQuery, applied_index| {
        let events = node.store().chain(&exec)?;
        Ok(json!({ "events": events, "applied_index": applied_index }))
    })
    .await
}

/// `GET /v1/executions/{id}/state`
pub async fn state(
    State(node): State<Arc<Node>>,
    PathParams(id): PathParams<String>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let exec = match execution_id(&id) {
        Ok(exec) => exec,
        Err(err) => return err.into_response(),
    };
    read(&node, &uri, &headers, |_: ReadQuery, applied_index| {
        let state = node.store().state(&exec)?;
        Ok(json!({
            "execution_id": exec,
            "authority": state.authority,
            "coverage": state.coverage,
            "head": state.head,
            "complete": state.completeness.is_complete(),
            "gap_at": state.completeness.gap_at(),
            "applied_index": applied_index,
        }))
    })
    .await
}

/// `GET /v1/executions/{id}/events/{event_id}`
pub async fn event(
    State(node): State<Arc<Node>>,
    PathParams((id, event)): PathParams<(String, String)>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let (exec, event) = match (execution_id(&id), event_id(&event)) {
        (Ok(exec), Ok(event)) => (exec, event),
        (Err(err), _) | (_, Err(err)) => return err.into_response(),
    };
    read(&node, &uri, &headers, |_: ReadQuery, _| {
        match node.store().event(&exec, &event)? {
            Some(found) => Ok(json!(found)),
            None => Err(ApiError::NotFound(format!(
                "execution {exec} has no event {event}"
            ))),
        }
    })
    .await
}

/// `GET /v1/changes?after=N&limit=M`
pub async fn changes(State(node): State<Arc<Node>>, uri: Uri, headers: HeaderMap) -> Response {
    let page_max = node.config().limits.changes_page_max;
    read(&node, &uri, &headers, |query: ChangesQuery, _| {
        let limit = query.limit.unwrap_or(1_000);
        if limit == 0 || limit > page_max {
            return Err(ApiError::InvalidInput(format!(
                "limit must be between 1 and {page_max}"
            )));
        }
        let page = node.store().changes(query.after.unwrap_or(0), limit)?;
        Ok(json!({ "changes": page.changes, "next": page.next }))
    })
    .await
}
