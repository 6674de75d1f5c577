//! How each operation's error is answered: every error of the data model becomes the API's
//! [`ErrorBody`] in one step, here, so the node answers it and counts it by the same code.

use crate::api::ErrorBody;
use crate::{
    AppendError, Fork, Oversize, PopulateError, RebuildError, ReplicateError, StorageError,
};

impl ErrorBody {
    /// 400 `invalid_input`.
    pub fn invalid_input(message: impl Into<String>) -> Self {
        ErrorBody::InvalidInput {
            message: message.into(),
        }
    }

    /// 503 `unavailable`, without an applied index.
    pub fn unavailable(message: impl Into<String>) -> Self {
        ErrorBody::Unavailable {
            message: message.into(),
            applied_index: None,
        }
    }

    /// 503 `no_leader`: this node knows no leader to serve or forward the request.
    pub fn no_leader() -> Self {
        ErrorBody::NoLeader {
            message: "no leader is known; retry shortly".into(),
        }
    }

    /// 409 `forked`: `what` (`write`, `populate` or `delivery`) would have forked the chain.
    pub fn forked(what: &str, fork: Fork) -> Self {
        ErrorBody::Forked {
            message: format!("the {what} would fork the chain: {fork}"),
            fork,
        }
    }

    /// 413 `too_large`, saying which limit was passed.
    pub fn over(oversize: Oversize) -> Self {
        ErrorBody::too_large(oversize, format!("too large: {oversize}"))
    }
}

/// A storage error is the answering node's failure, not the cluster's: the node stops serving
/// and the caller retries another node.
impl From<StorageError> for ErrorBody {
    fn from(err: StorageError) -> Self {
        match err {
            StorageError::Io { message, .. } => ErrorBody::unavailable(format!(
                "this node's storage failed (I/O error: {message}); ask another node"
            )),
            StorageError::Corrupted(message) => ErrorBody::unavailable(format!(
                "this node's stored data is corrupted ({message}); ask another node"
            )),
        }
    }
}

impl From<AppendError> for ErrorBody {
    fn from(err: AppendError) -> Self {
        match err {
            AppendError::InvalidInput(message) => ErrorBody::InvalidInput { message },
            err @ AppendError::GenesisWithPrev => ErrorBody::invalid_input(err.to_string()),
            AppendError::TooLarge(oversize) => ErrorBody::over(oversize),
            AppendError::NotHead { expected, got } => ErrorBody::NotHead {
                message: "prev_event_id is not the head of the execution".into(),
                expected,
                got,
            },
            AppendError::EventConflict { event_id, exec_seq } => ErrorBody::EventConflict {
                message: format!(
                    "event {event_id} is already stored at seq {exec_seq} with different content"
                ),
                event_id,
                exec_seq,
            },
            AppendError::Forked(fork) => ErrorBody::forked("write", fork),
            AppendError::HeadMoved => {
                ErrorBody::unavailable("the execution changed under the write; retry it")
            }
            AppendError::Storage(err) => err.into(),
        }
    }
}

impl From<PopulateError> for ErrorBody {
    fn from(err: PopulateError) -> Self {
        match err {
            PopulateError::InvalidInput(message) => ErrorBody::InvalidInput { message },
            PopulateError::TooLarge(oversize) => ErrorBody::over(oversize),
            PopulateError::HeadMoved => {
                ErrorBody::unavailable("the execution changed under the populate; retry it")
            }
            PopulateError::Forked(fork) => ErrorBody::forked("populate", fork),
            err @ PopulateError::SessionConflict { next_position } => ErrorBody::SessionConflict {
                message: err.to_string(),
                next_position,
            },
            PopulateError::Storage(err) => err.into(),
        }
    }
}

impl From<ReplicateError> for ErrorBody {
    fn from(err: ReplicateError) -> Self {
        match err {
            ReplicateError::InvalidInput(message) => ErrorBody::InvalidInput { message },
            ReplicateError::TooLarge(oversize) => ErrorBody::over(oversize),
            ReplicateError::Forked(fork) => ErrorBody::forked("delivery", fork),
            ReplicateError::Storage(err) => err.into(),
        }
    }
}

impl From<RebuildError> for ErrorBody {
    fn from(err: RebuildError) -> Self {
        match err {
            RebuildError::TooLarge(oversize) => ErrorBody::over(oversize),
            RebuildError::InvalidInput(message) => ErrorBody::InvalidInput { message },
            err @ (RebuildError::LogRefused(_) | RebuildError::NotDiverged { .. }) => {
                ErrorBody::Refused {
                    message: err.to_string(),
                }
            }
            RebuildError::HeadMoved => {
                ErrorBody::unavailable("the execution changed under the rebuild; retry it")
            }
            RebuildError::Storage(err) => err.into(),
        }
    }
}
