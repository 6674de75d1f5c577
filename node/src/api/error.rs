//! [`ApiError`]: an error answer of the HTTP API — the contract's [`ErrorBody`] (`{"error":
//! code, "message": ..., ...fields}`) sent with its status, and `Retry-After` on a 503.
//!
//! Every error of the node becomes an `ErrorBody` in one step: the data model's errors by their
//! own `From` impls (`chainstore_model`'s `answer.rs`), the node's `WriteError`, `ReadError` and
//! `MembershipError` by the impls below. The metrics count write outcomes by the same code.
//! Internals never leak beyond the message.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use chainstore_model::api::ErrorBody;
use chainstore_model::{Oversize, StorageError};
use raft_store::raft::Rejection;

use crate::errors::{MembershipError, ReadError, WriteError};

/// An error answer of the HTTP API.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError(pub ErrorBody);

impl ApiError {
    /// 400: the request breaks a rule of the data model or of the API.
    pub fn invalid_input(message: impl Into<String>) -> Self {
        ApiError(ErrorBody::invalid_input(message))
    }

    /// 401: a missing or unknown credential.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        ApiError(ErrorBody::Unauthorized {
            message: message.into(),
        })
    }

    /// 403: a known credential without the right to this route.
    pub fn forbidden(message: impl Into<String>) -> Self {
        ApiError(ErrorBody::Forbidden {
            message: message.into(),
        })
    }

    /// 404: no such route, event or resource.
    pub fn not_found(message: impl Into<String>) -> Self {
        ApiError(ErrorBody::NotFound {
            message: message.into(),
        })
    }

    /// 405: the route exists, not for this method.
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        ApiError(ErrorBody::MethodNotAllowed {
            message: message.into(),
        })
    }

    /// 413 `too_large` saying which limit was passed.
    pub fn too_large(oversize: Oversize) -> Self {
        ApiError(ErrorBody::over(oversize))
    }

    /// 413 `too_large` with what to do instead.
    pub fn too_large_because(oversize: Oversize, message: String) -> Self {
        ApiError(ErrorBody::too_large(oversize, message))
    }

    /// 503 `no_leader`: no leader is known or reachable. Retryable.
    pub fn no_leader(message: impl Into<String>) -> Self {
        ApiError(ErrorBody::NoLeader {
            message: message.into(),
        })
    }

    /// 503 `unavailable` without an applied index. Retryable.
    pub fn unavailable(message: impl Into<String>) -> Self {
        ApiError(ErrorBody::unavailable(message))
    }

    /// 503 `overloaded`: the node serves all it may and as many wait. Retryable.
    pub fn overloaded(message: impl Into<String>) -> Self {
        ApiError(ErrorBody::Overloaded {
            message: message.into(),
        })
    }

    /// 500: the node's own invariant broke.
    pub fn internal(message: impl Into<String>) -> Self {
        ApiError(ErrorBody::Internal {
            message: message.into(),
        })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.0.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (status, axum::Json(self.0)).into_response();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

impl From<ErrorBody> for ApiError {
    fn from(body: ErrorBody) -> Self {
        ApiError(body)
    }
}

impl From<StorageError> for ApiError {
    fn from(err: StorageError) -> Self {
        ApiError(err.into())
    }
}

impl From<WriteError> for ApiError {
    fn from(err: WriteError) -> Self {
        ApiError(err.into())
    }
}

impl From<ReadError> for ApiError {
    fn from(err: ReadError) -> Self {
        ApiError(err.into())
    }
}

impl From<MembershipError> for ApiError {
    fn from(err: MembershipError) -> Self {
        ApiError(err.into())
    }
}

/// An effect refused when applied: the same on every replica, so a deterministic answer.
fn rejection_body(rejection: Rejection) -> ErrorBody {
    match rejection {
        Rejection::Forked(fork) => ErrorBody::forked("write", fork),
        Rejection::HeadMoved { .. } => {
            ErrorBody::unavailable("the execution changed while the write was applied; retry it")
        }
        Rejection::Malformed(m) => ErrorBody::Internal {
            message: format!("the leader proposed a malformed effect: {m}"),
        },
    }
}

impl From<WriteError> for ErrorBody {
    fn from(err: WriteError) -> Self {
        match err {
            WriteError::NotLeader(_) => ErrorBody::no_leader(),
            WriteError::Append(err) => err.into(),
            WriteError::Populate(err) => err.into(),
            WriteError::Replicate(err) => err.into(),
            WriteError::Rebuild(err) => err.into(),
            WriteError::Rejected(rejection) => rejection_body(rejection),
            WriteError::Unavailable(m) => ErrorBody::unavailable(m),
            WriteError::Storage(err) => err.into(),
        }
    }
}

impl From<ReadError> for ErrorBody {
    fn from(err: ReadError) -> Self {
        match err {
            ReadError::NotLeader(_) => ErrorBody::no_leader(),
            ReadError::Unavailable {
                message,
                applied_index,
            } => ErrorBody::Unavailable {
                message,
                applied_index: Some(applied_index),
            },
        }
    }
}

impl From<MembershipError> for ErrorBody {
    fn from(err: MembershipError) -> Self {
        match err {
            MembershipError::NotLeader(_) => ErrorBody::no_leader(),
            MembershipError::Invalid(m) => ErrorBody::invalid_input(m),
            MembershipError::Unavailable(m) => ErrorBody::unavailable(m),
        }
    }
}
