//! `/v1/executions/{id}/...` and `/v1/changes`: thin handlers that extract, call the node, and
//! map the result.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, Uri};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use axum::Json;
use chainstore_model::api::{
    AppendAnswer, AppendBatchAnswer, AppendBatchBody, AppendedEvent, ChainAnswer, ChainQuery,
    ChangesAnswer, ChangesQuery, PopulateAnswer, PopulateBody, QuarantineList, QuarantinePage,
    RawChainAnswer, ReadQuery, RebuildAnswer, RebuildBody, ReplicatedBody, StateAnswer,
    QUARANTINE_LIST_MAX,
};
use chainstore_model::{AppendRequest, ExecutionId, GuardedPage, Limit, Oversize};
use raft_store::PageBounds;
use serde::Serialize;

use super::error::ApiError;
use super::extract::{event_id, execution_id, parse_json, parse_query, read_body, PathParams};
use super::forward::{forward, forward_streamed, set_leader_header};
use crate::errors::{ReadError, WriteError};
use crate::node::Node;

/// Events in a page when the reader names no `limit`.
const PAGE_EVENTS_DEFAULT: usize = 1_000;

/// A chain read's page bounds, or 400 for out-of-range parameters.
fn bounds(query: &ChainQuery, limits: &crate::config::Limits) -> Result<PageBounds, ApiError> {
    if query.from_seq == Some(0) || query.to_seq == Some(0) {
        return Err(ApiError::invalid_input("from_seq and to_seq count from 1"));
    }
    let events_max = match query.limit {
        Some(limit) if limit == 0 || limit > limits.read_page_events_max => {
            return Err(ApiError::invalid_input(format!(
                "limit must be between 1 and {}",
                limits.read_page_events_max
            )))
        }
        Some(limit) => limit,
        None if query.paged() => PAGE_EVENTS_DEFAULT.min(limits.read_page_events_max),
        None => usize::MAX,
    };
    Ok(PageBounds {
        from_seq: query.from_seq.unwrap_or(1),
        to_seq: query.to_seq,
        events_max,
        bytes_max: limits.read_bytes_max,
    })
}

/// 413 for an unpaged read whose answer would pass the byte cap.
fn too_large_unpaged(exec: &ExecutionId, limits: &crate::config::Limits) -> ApiError {
    ApiError::too_large_because(
        Oversize {
            what: Limit::AnswerBytes,
            size: None,
            limit: limits.read_bytes_max as u64,
        },
        format!(
            "the chain of {exec} holds more than {} bytes, the most one answer carries; \
             read it in pages with from_seq and limit",
            limits.read_bytes_max
        ),
    )
}

/// A write's body, decoded with a precise 400 for what is wrong.
trait WriteBody: Sized {
    fn parse(bytes: &[u8]) -> Result<Self, ApiError>;
}

impl WriteBody for PopulateBody {
    fn parse(bytes: &[u8]) -> Result<Self, ApiError> {
        parse_json(bytes)
    }
}

impl WriteBody for RebuildBody {
    fn parse(bytes: &[u8]) -> Result<Self, ApiError> {
        parse_json(bytes)
    }
}

impl WriteBody for ReplicatedBody {
    fn parse(bytes: &[u8]) -> Result<Self, ApiError> {
        parse_json(bytes)
    }
}

/// `POST .../events` takes one event, or several under `events`.
enum AppendBody {
    One(AppendRequest),
    Many(AppendBatchBody),
}

impl WriteBody for AppendBody {
    /// A body with an `events` field is an append of several; any other is one event. Either
    /// is then decoded as its own type, so a bad field is named precisely.
    fn parse(bytes: &[u8]) -> Result<Self, ApiError> {
        #[derive(serde::Deserialize)]
        struct Shape {
            events: Option<serde::de::IgnoredAny>,
        }
        match serde_json::from_slice::<Shape>(bytes) {
            Ok(Shape { events: Some(_) }) => parse_json(bytes).map(AppendBody::Many),
            _ => parse_json(bytes).map(AppendBody::One),
        }
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
    T: WriteBody,
    F: FnOnce(Arc<Node>, ExecutionId, T) -> Fut,
    Fut: std::future::Future<Output = Result<Response, WriteError>>,
{
    let outcome = async {
        let exec = execution_id(&id)?;
        let bytes = read_body(&headers, body, node.config().limits.body_bytes_max).await?;
        let request = T::parse(&bytes)?;
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
    query: ReadQuery,
    relay: Relay,
) -> Result<u64, Response> {
    let level = query.consistency.unwrap_or_default();
    match node.read_barrier(level, query.min_index).await {
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
    Extension(node): Extension<Arc<Node>>,
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
        |node, exec, body: AppendBody| async move {
            Ok(match body {
                AppendBody::One(request) => {
                    let appended = node.append(&exec, &request).await?;
                    Json(AppendAnswer {
                        execution_id: exec,
                        event_id: request.event_id,
                        exec_seq: appended.exec_seq,
                        commit_index: appended.commit_index,
                        duplicate: appended.duplicate,
                    })
                    .into_response()
                }
                AppendBody::Many(batch) => {
                    let answers = node.append_batch(&exec, &batch.events).await?;
                    let events = batch
                        .events
                        .into_iter()
                        .zip(answers)
                        .map(|(request, appended)| AppendedEvent {
                            event_id: request.event_id,
                            exec_seq: appended.exec_seq,
                            commit_index: appended.commit_index,
                            duplicate: appended.duplicate,
                        })
                        .collect();
                    Json(AppendBatchAnswer {
                        execution_id: exec,
                        events,
                    })
                    .into_response()
                }
            })
        },
    )
    .await
}

/// `POST /v1/executions/{id}/populate`
pub async fn populate(
    Extension(node): Extension<Arc<Node>>,
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
            let answer = match &request.session {
                None => PopulateAnswer::from(&node.populate(&exec, &request.events).await?),
                Some(session) => PopulateAnswer::from(
                    &node.populate_part(&exec, session, &request.events).await?,
                ),
            };
            Ok(Json(answer).into_response())
        },
    )
    .await
}

/// `POST /v1/executions/{id}/rebuild` (admin): the partition moved into a quarantine record and
/// the execution rebuilt from the log sent.
pub async fn rebuild(
    Extension(node): Extension<Arc<Node>>,
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
        |node, exec, request: RebuildBody| async move {
            let (quarantine, total) = node
                .rebuild(&exec, &request.events, &request.reason)
                .await?;
            Ok(Json(RebuildAnswer {
                execution_id: exec,
                quarantine,
                total,
            })
            .into_response())
        },
    )
    .await
}

/// `POST /v1/executions/{id}/replicated`
pub async fn replicated(
    Extension(node): Extension<Arc<Node>>,
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
            Ok(Json(done).into_response())
        },
    )
    .await
}

/// The queries that carry a read's parameters.
trait ReadParams {
    fn read(&self) -> ReadQuery;
}

impl ReadParams for ReadQuery {
    fn read(&self) -> ReadQuery {
        *self
    }
}

impl ReadParams for ChainQuery {
    fn read(&self) -> ReadQuery {
        ChainQuery::read(self)
    }
}

impl ReadParams for ChangesQuery {
    fn read(&self) -> ReadQuery {
        ChangesQuery::read(self)
    }
}

/// Runs a read: decodes the query, passes the read barrier (or forwards to the leader), then
/// answers from the store with `answer(query, applied_index)`.
async fn read<Q, A, F>(node: &Arc<Node>, uri: &Uri, headers: &HeaderMap, answer: F) -> Response
where
    Q: serde::de::DeserializeOwned + ReadParams,
    A: Serialize,
    F: FnOnce(Q, u64) -> Result<A, ApiError>,
{
    let outcome = async {
        let query: Q = parse_query(uri)?;
        let barrier = read_barrier(node, uri, headers, query.read(), Relay::Whole);
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
    Extension(node): Extension<Arc<Node>>,
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
        let answer = node
            .store()
            .chain_page_if_authoritative(&exec, bounds(&query, limits)?)?;
        node.metrics().record_guarded(&answer);
        Ok(match answer {
            GuardedPage::Authoritative(page) => {
                if !query.paged() && page.next_from_seq.is_some() {
                    return Err(too_large_unpaged(&exec, limits));
                }
                ChainAnswer::Authoritative {
                    execution_id: exec.clone(),
                    events: page.events,
                    applied_index,
                    through_seq: page.through_seq,
                    next_from_seq: page.next_from_seq,
                }
            }
            GuardedPage::CannotAnswer(reason) => ChainAnswer::CannotAnswer {
                execution_id: exec.clone(),
                reason,
                applied_index,
            },
        })
    })
    .await
}

/// `GET /v1/executions/{id}/chain/raw` — unguarded, for diagnosis; whole or by pages.
pub async fn chain_raw(
    Extension(node): Extension<Arc<Node>>,
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
        let (events, next_from_seq) = node
            .store()
            .chain_raw_page(&exec, bounds(&query, limits)?)?;
        if !query.paged() && next_from_seq.is_some() {
            return Err(too_large_unpaged(&exec, limits));
        }
        Ok(RawChainAnswer {
            events,
            applied_index,
            next_from_seq,
        })
    })
    .await
}

/// `GET /v1/executions/{id}/state`
pub async fn state(
    Extension(node): Extension<Arc<Node>>,
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
        Ok(StateAnswer {
            execution_id: exec.clone(),
            authority: state.authority,
            complete: state.completeness.is_complete(),
            gap_at: state.completeness.gap_at().cloned(),
            coverage: state.coverage,
            head: state.head,
            applied_index,
        })
    })
    .await
}

/// `GET /v1/executions/{id}/quarantine` — the execution's quarantine records, oldest first.
pub async fn quarantine_list(
    Extension(node): Extension<Arc<Node>>,
    PathParams(id): PathParams<String>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let exec = match execution_id(&id) {
        Ok(exec) => exec,
        Err(err) => return err.into_response(),
    };
    read(&node, &uri, &headers, |_: ReadQuery, applied_index| {
        let (records, truncated) = node
            .store()
            .quarantine_records(&exec, QUARANTINE_LIST_MAX)?;
        Ok(QuarantineList {
            execution_id: exec.clone(),
            records,
            truncated,
            applied_index,
        })
    })
    .await
}

/// `GET /v1/executions/{id}/quarantine/{number}` — one record and a page of the events it
/// holds (`from_seq`, `limit` as for a chain read).
pub async fn quarantine_page(
    Extension(node): Extension<Arc<Node>>,
    PathParams((id, number)): PathParams<(String, String)>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let exec = match execution_id(&id) {
        Ok(exec) => exec,
        Err(err) => return err.into_response(),
    };
    let Ok(number) = number.parse::<u64>() else {
        return ApiError::invalid_input(format!(
            "a quarantine record is named by its number, not {number:?}"
        ))
        .into_response();
    };
    read(&node, &uri, &headers, |query: ChainQuery, applied_index| {
        let limits = &node.config().limits;
        let bounds = bounds(&query, limits)?;
        let events_max = bounds
            .events_max
            .min(PAGE_EVENTS_DEFAULT.min(limits.read_page_events_max));
        match node.store().quarantined_page(
            &exec,
            number,
            bounds.from_seq,
            events_max,
            bounds.bytes_max,
        )? {
            Some(page) => Ok(QuarantinePage {
                execution_id: exec.clone(),
                record: page.record,
                events: page.events,
                next_from_seq: page.next_from_seq,
                applied_index,
            }),
            None => Err(ApiError::not_found(format!(
                "execution {exec} has no quarantine record {number}"
            ))),
        }
    })
    .await
}

/// `GET /v1/executions/{id}/events/{event_id}`
pub async fn event(
    Extension(node): Extension<Arc<Node>>,
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
            Some(found) => Ok(found),
            None => Err(ApiError::not_found(format!(
                "execution {exec} has no event {event}"
            ))),
        }
    })
    .await
}

/// `GET /v1/changes?after=N&limit=M`
pub async fn changes(
    Extension(node): Extension<Arc<Node>>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let page_max = node.config().limits.changes_page_max;
    read(&node, &uri, &headers, |query: ChangesQuery, _| {
        let limit = query.limit.unwrap_or(1_000);
        if limit == 0 || limit > page_max {
            return Err(ApiError::invalid_input(format!(
                "limit must be between 1 and {page_max}"
            )));
        }
        let page = node.store().changes(query.after.unwrap_or(0), limit)?;
        Ok(ChangesAnswer {
            changes: page.changes,
            next: page.next,
        })
    })
    .await
}
