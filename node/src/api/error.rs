//! [`ApiError`]: every error the HTTP API answers, mapped to a status, a code and a JSON body
//! [`ErrorBody`] (`{"error": code, "message": ..., ...fields}`). Internals never leak beyond the
//! message.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use raft_store::api::ErrorBody;
use raft_store::raft::Rejection;
use raft_store::{
    AppendError, EventId, Fork, Oversize, PopulateError, RebuildError, ReplicateError, StorageError,
};

use crate::node::{MembershipError, ReadError, WriteError};

/// An error answer of the HTTP API.
#[derive(Debug, Clone, PartialEq)]
pub enum ApiError {
    /// 400: the request breaks a rule of the data model or of the API.
    InvalidInput(String),
    /// 401: a missing or unknown credential.
    Unauthorized(String),
    /// 403: a known credential without the right to this route.
    Forbidden(String),
    /// 404: no such route, event or resource.
    NotFound(String),
    /// 405: the route exists, not for this method.
    MethodNotAllowed(String),
    /// 409: `prev_event_id` is not the head.
    NotHead {
        /// The current head.
        expected: Option<EventId>,
        /// The `prev_event_id` sent.
        got: Option<EventId>,
    },
    /// 409: the event id is stored with different content.
    EventConflict {
        /// The event id.
        event_id: EventId,
        /// Where it is stored.
        exec_seq: u64,
    },
    /// 409: the write would fork a chain.
    Forked {
        /// What would have forked it: `write`, `populate` or `delivery`.
        what: &'static str,
        /// How.
        fork: Fork,
    },
    /// 409: a populate part that does not continue the execution's open session.
    SessionConflict {
        /// Where the session continues; `None` when there is no such session.
        next_position: Option<u64>,
        /// What happened.
        message: String,
    },
    /// 409: a peer's request that does not apply to this node's state (a hand-off request from
    /// a node it does not follow, in another term).
    Refused(String),
    /// 413: the body, a payload, a populate, a delivery or an answer is over its limit.
    TooLarge {
        /// Which limit, the size found and the limit.
        oversize: Oversize,
        /// What happened and what to do instead.
        message: String,
    },
    /// 503: no leader is known or reachable. Retryable.
    NoLeader(String),
    /// 503: the cluster could not answer in time. Retryable.
    Unavailable {
        /// What happened.
        message: String,
        /// The node's applied index, when it matters (a lagging local read).
        applied_index: Option<u64>,
    },
    /// 503: the node is serving all the requests it may and as many wait. Retryable.
    Overloaded(String),
    /// 500: the node's own invariant broke (a malformed effect from the leader).
    Internal(String),
}

impl ApiError {
    /// A 413 `too_large` saying which limit was passed.
    pub fn too_large(oversize: Oversize) -> Self {
        ApiError::TooLarge {
            oversize,
            message: format!("too large: {oversize}"),
        }
    }

    /// A 503 `unavailable` without an applied index.
    pub fn unavailable(message: impl Into<String>) -> Self {
        ApiError::Unavailable {
            message: message.into(),
            applied_index: None,
        }
    }

    /// The error's body, as the API's contract types it.
    pub fn body(&self) -> ErrorBody {
        match self {
            ApiError::InvalidInput(m) => ErrorBody::InvalidInput { message: m.clone() },
            ApiError::Unauthorized(m) => ErrorBody::Unauthorized { message: m.clone() },
            ApiError::Forbidden(m) => ErrorBody::Forbidden { message: m.clone() },
            ApiError::NotFound(m) => ErrorBody::NotFound { message: m.clone() },
            ApiError::MethodNotAllowed(m) => ErrorBody::MethodNotAllowed { message: m.clone() },
            ApiError::NotHead { expected, got } => ErrorBody::NotHead {
                message: "prev_event_id is not the head of the execution".into(),
                expected: expected.clone(),
                got: got.clone(),
            },
            ApiError::EventConflict { event_id, exec_seq } => ErrorBody::EventConflict {
                message: format!(
                    "event {event_id} is already stored at seq {exec_seq} with different content"
                ),
                event_id: event_id.clone(),
                exec_seq: *exec_seq,
            },
            ApiError::Forked { what, fork } => ErrorBody::Forked {
                message: format!("the {what} would fork the chain: {fork}"),
                fork: fork.clone(),
            },
            ApiError::SessionConflict {
                next_position,
                message: m,
            } => ErrorBody::SessionConflict {
                message: m.clone(),
                next_position: *next_position,
            },
            ApiError::Refused(m) => ErrorBody::Refused { message: m.clone() },
            ApiError::TooLarge {
                oversize,
                message: m,
            } => ErrorBody::too_large(*oversize, m.clone()),
            ApiError::NoLeader(m) => ErrorBody::NoLeader { message: m.clone() },
            ApiError::Unavailable {
                message: m,
                applied_index,
            } => ErrorBody::Unavailable {
                message: m.clone(),
                applied_index: *applied_index,
            },
            ApiError::Overloaded(m) => ErrorBody::Overloaded { message: m.clone() },
            ApiError::Internal(m) => ErrorBody::Internal { message: m.clone() },
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = self.body();
        let status =
            StatusCode::from_u16(body.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (status, axum::Json(body)).into_response();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

/// A storage error is this node's failure, not the cluster's: the node stops Raft and serves
/// nothing more (`watched`), so the answer is 503 and the caller retries another node.
impl From<StorageError> for ApiError {
    fn from(err: StorageError) -> Self {
        match err {
            StorageError::Io(m) => ApiError::unavailable(format!(
                "this node's storage failed (I/O error: {m}); ask another node"
            )),
            StorageError::Corrupted(m) => ApiError::unavailable(format!(
                "this node's stored data is corrupted ({m}); ask another node"
            )),
        }
    }
}

impl From<Rejection> for ApiError {
    fn from(rejection: Rejection) -> Self {
        match rejection {
            Rejection::Forked(fork) => ApiError::Forked {
                what: "write",
                fork,
            },
            Rejection::HeadMoved { .. } => {
                ApiError::unavailable("the execution changed while the write was applied; retry it")
            }
            Rejection::Malformed(m) => {
                ApiError::Internal(format!("the leader proposed a malformed effect: {m}"))
            }
        }
    }
}

impl From<WriteError> for ApiError {
    fn from(err: WriteError) -> Self {
        match err {
            WriteError::NotLeader(_) => {
                ApiError::NoLeader("no leader is known; retry shortly".into())
            }
            WriteError::Append(err) => match err {
                AppendError::InvalidInput(m) => ApiError::InvalidInput(m),
                err @ AppendError::GenesisWithPrev => ApiError::InvalidInput(err.to_string()),
                AppendError::TooLarge(oversize) => ApiError::too_large(oversize),
                AppendError::NotHead { expected, got } => ApiError::NotHead { expected, got },
                AppendError::EventConflict { event_id, exec_seq } => {
                    ApiError::EventConflict { event_id, exec_seq }
                }
                AppendError::Forked(fork) => ApiError::Forked {
                    what: "write",
                    fork,
                },
                AppendError::HeadMoved => {
                    ApiError::unavailable("the execution changed under the write; retry it")
                }
                AppendError::Storage(err) => err.into(),
            },
            WriteError::Populate(err) => match err {
                PopulateError::InvalidInput(m) => ApiError::InvalidInput(m),
                PopulateError::TooLarge(oversize) => ApiError::too_large(oversize),
                PopulateError::HeadMoved => {
                    ApiError::unavailable("the execution changed under the populate; retry it")
                }
                PopulateError::Forked(fork) => ApiError::Forked {
                    what: "populate",
                    fork,
                },
                err @ PopulateError::SessionConflict { next_position } => {
                    ApiError::SessionConflict {
                        next_position,
                        message: err.to_string(),
                    }
                }
                PopulateError::Storage(err) => err.into(),
            },
            WriteError::Replicate(err) => match err {
                ReplicateError::InvalidInput(m) => ApiError::InvalidInput(m),
                ReplicateError::TooLarge(oversize) => ApiError::too_large(oversize),
                ReplicateError::Forked(fork) => ApiError::Forked {
                    what: "delivery",
                    fork,
                },
                ReplicateError::Storage(err) => err.into(),
            },
            WriteError::Rebuild(err) => match err {
                RebuildError::TooLarge(oversize) => ApiError::too_large(oversize),
                RebuildError::InvalidInput(m) => ApiError::InvalidInput(m),
                err @ (RebuildError::LogRefused(_) | RebuildError::NotDiverged { .. }) => {
                    ApiError::Refused(err.to_string())
                }
                RebuildError::HeadMoved => {
                    ApiError::unavailable("the execution changed under the rebuild; retry it")
                }
                RebuildError::Storage(err) => err.into(),
            },
            WriteError::Rejected(rejection) => rejection.into(),
            WriteError::Unavailable(m) => ApiError::unavailable(m),
            WriteError::Storage(err) => err.into(),
        }
    }
}

impl From<ReadError> for ApiError {
    fn from(err: ReadError) -> Self {
        match err {
            ReadError::NotLeader(_) => {
                ApiError::NoLeader("no leader is known; retry shortly".into())
            }
            ReadError::Unavailable {
                message,
                applied_index,
            } => ApiError::Unavailable {
                message,
                applied_index: Some(applied_index),
            },
        }
    }
}

impl From<MembershipError> for ApiError {
    fn from(err: MembershipError) -> Self {
        match err {
            MembershipError::NotLeader(_) => {
                ApiError::NoLeader("no leader is known; retry shortly".into())
            }
            MembershipError::Invalid(m) => ApiError::InvalidInput(m),
            MembershipError::Unavailable(m) => ApiError::unavailable(m),
        }
    }
}
