//! `/v1/executions/{id}/...` and `/v1/changes`: thin handlers that extract, call the node, and
//! map the result.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use raft_store::{
    AppendRequest, ChainEvent, ExecutionId, FromLog, GuardedPage, Limit, LogEvent, Oversize,
    PageBounds, PartOutcome, PopulateSession,
};
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::ApiError;
use super::extract::{event_id, execution_id, parse_json, parse_query, read_body, PathParams};
use super::forward::{forward, forward_streamed, set_leader_header};
use crate::node::{Consistency, Node, ReadError, WriteError};

/// The query of every read: `consistency=linearizable|local`, `min_index=N`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ReadQuery {
    pub(super) consistency: Option<String>,
    pub(super) min_index: Option<u64>,
}

/// The query of `chain` and `chain/raw`: a read's parameters and, for a paged read, where the
/// page starts (`from_seq`, from 1), how many events it may hold (`limit`) and the last sequence
/// wanted (`to_seq`: a reader pins it to its first page's `through_seq`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ChainQuery {
    consistency: Option<String>,
    min_index: Option<u64>,
    from_seq: Option<u64>,
    to_seq: Option<u64>,
    limit: Option<usize>,
}

/// Events in a page when the reader names no `limit`.
const PAGE_EVENTS_DEFAULT: usize = 1_000;

impl ChainQuery {
    /// Whether the reader asked for a page (any of the paging parameters).
    fn paged(&self) -> bool {
        self.from_seq.is_some() || self.to_seq.is_some() || self.limit.is_some()
    }

    /// The page's bounds, or 400 for out-of-range parameters.
    fn bounds(&self, limits: &crate::config::Limits) -> Result<PageBounds, ApiError> {
        if self.from_seq == Some(0) || self.to_seq == Some(0) {
            return Err(ApiError::InvalidInput(
                "from_seq and to_seq count from 1".into(),
            ));
        }
        let events_max = match self.limit {
            Some(limit) if limit == 0 || limit > limits.read_page_events_max => {
                return Err(ApiError::InvalidInput(format!(
                    "limit must be between 1 and {}",
                    limits.read_page_events_max
                )))
            }
            Some(limit) => limit,
            None if self.paged() => PAGE_EVENTS_DEFAULT.min(limits.read_page_events_max),
            None => usize::MAX,
        };
        Ok(PageBounds {
            from_seq: self.from_seq.unwrap_or(1),
            to_seq: self.to_seq,
            events_max,
            bytes_max: limits.read_bytes_max,
        })
    }
}

/// 413 for an unpaged read whose answer would pass the byte cap.
fn too_large_unpaged(exec: &ExecutionId, limits: &crate::config::Limits) -> ApiError {
    ApiError::TooLarge {
        oversize: Oversize {
            what: Limit::AnswerBytes,
            size: None,
            limit: limits.read_bytes_max as u64,
        },
        message: format!(
            "the chain of {exec} holds more than {} bytes, the most one answer carries; \
             read it in pages with from_seq and limit",
            limits.read_bytes_max
        ),
    }
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

/// How a read that must run on the leader reaches it from a follower.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Relay {
    /// The leader's answer is read whole, then relayed (bounded answers).
    Whole,
    /// The leader's answer is relayed piece by piece as it arrives (a backup).
    Streamed,
}

/// Passes the read barrier, or produces the answer to send instead (a forward, an error).
pub(super) async fn read_barrier(
    node: &Arc<Node>,
    uri: &Uri,
    headers: &HeaderMap,
    (consistency_raw, min_index): (Option<&str>, Option<u64>),
    relay: Relay,
) -> Result<u64, Response> {
    let level = consistency(consistency_raw).map_err(IntoResponse::into_response)?;
    match node.read_barrier(level, min_index).await {
        Ok(applied) => Ok(applied),
        Err(ReadError::NotLeader(leader)) => Err(match relay {
            Relay::Whole => forward(node, leader, Method::GET, uri, headers, Bytes::new()).await,
            Relay::Streamed => forward_streamed(node, leader, uri, headers).await,
        }),
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
    /// Present when the body is one part of a longer log.
    #[serde(default)]
    session: Option<PopulateSession>,
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
            let body = match &request.session {
                None => from_log_json(&node.populate(&exec, &request.events).await?),
                Some(session) => match node.populate_part(&exec, session, &request.events).await? {
                    PartOutcome::Accepted {
                        next_position,
                        total,
                        appended,
                    } => json!({
                        "outcome": "part_accepted",
                        "next_position": next_position,
                        "total": total,
                        "appended": appended,
                    }),
                    PartOutcome::Finished(outcome) => from_log_json(&outcome),
                },
            };
            Ok(Json(body).into_response())
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

impl ReadParams for ChainQuery {
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
        let barrier = read_barrier(
            node,
            uri,
            headers,
            (query.consistency(), query.min_index()),
            Relay::Whole,
        );
        let applied_index = match barrier.await {
            Ok(applied) => applied,
            Err(response) => return Ok(response),
        };
        Ok::<_, ApiError>(Json(answer(query, applied_index)?).into_response())
    };
    outcome.await.unwrap_or_else(IntoResponse::into_response)
}

/// `GET /v1/executions/{id}/chain` — the guarded read, whole or by pages. Either way the whole
/// partition is checked in one view before anything is served; a page also names the chain's
/// extent in that view (`through_seq`) and where the next page starts (`next_from_seq`).
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
    read(&node, &uri, &headers, |query: ChainQuery, applied_index| {
        let limits = &node.config().limits;
        let bounds = query.bounds(limits)?;
        let answer = node.store().chain_page_if_authoritative(&exec, bounds)?;
        node.metrics().record_guarded(&answer);
        Ok(match answer {
            GuardedPage::Authoritative(page) => {
                if !query.paged() && page.next_from_seq.is_some() {
                    return Err(too_large_unpaged(&exec, limits));
                }
                json!({
                    "execution_id": exec,
                    "answer": "authoritative",
                    "events": page.events,
                    "applied_index": applied_index,
                    "through_seq": page.through_seq,
                    "next_from_seq": page.next_from_seq,
                })
            }
            GuardedPage::CannotAnswer(reason) => json!({
                "execution_id": exec,
                "answer": "cannot_answer",
                "reason": reason.as_str(),
                "applied_index": applied_index,
            }),
        })
    })
    .await
}

/// `GET /v1/executions/{id}/chain/raw` — unguarded, for diagnosis; whole or by pages.
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
    read(&node, &uri, &headers, |query: ChainQuery, applied_index| {
        let limits = &node.config().limits;
        let bounds = query.bounds(limits)?;
        let (events, next_from_seq) = node.store().chain_raw_page(&exec, bounds)?;
        if !query.paged() && next_from_seq.is_some() {
            return Err(too_large_unpaged(&exec, limits));
        }
        Ok(json!({
            "events": events,
            "applied_index": applied_index,
            "next_from_seq": next_from_seq,
        }))
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
