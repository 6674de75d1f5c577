//! [`ClientError`]: every way a call can fail, typed after the API's error codes.

use chainstore_model::api::ErrorBody;
use chainstore_model::{not_head_message, session_conflict_message, EventId, Fork, Oversize};

/// Why a call failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ClientError {
    /// 409 `not_head`: `prev_event_id` is not the head.
    #[error("{}", not_head_message(expected.as_ref(), got.as_ref()))]
    NotHead {
        /// The current head (`None`: the execution is empty).
        expected: Option<EventId>,
        /// The `prev_event_id` sent.
        got: Option<EventId>,
    },
    /// 409 `event_conflict`: the event id is stored with different content.
    #[error("event conflict: event {event_id} is stored at seq {exec_seq} with other content")]
    EventConflict {
        /// The event id.
        event_id: EventId,
        /// Where it is stored.
        exec_seq: u64,
    },
    /// 409 `forked`: the write would fork a chain, and how.
    #[error("forked: {0}")]
    Forked(Fork),
    /// 409 `session_conflict`: a populate part that does not continue the execution's open
    /// session (another session replaced it, it ended, or the part skips ahead).
    #[error("populate session conflict: {}", session_conflict_message(*next_position))]
    SessionConflict {
        /// Where the session continues; `None` when the store holds no such session.
        next_position: Option<u64>,
    },
    /// 409 `refused`: the request does not apply to the store's state (a rebuild of an
    /// execution that agrees with the log, or from a log that is not one chain). Nothing changed.
    #[error("refused: {0}")]
    Refused(String),
    /// 400 `invalid_input`.
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// 413 `too_large`: which limit the request passed, its size (when known) and the limit.
    #[error("too large: {0}")]
    TooLarge(Oversize),
    /// 401 `unauthorized`: no credential, or one the cluster does not know.
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    /// 403 `forbidden`: the credential lacks the role the call needs.
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// 404 `not_found`.
    #[error("not found: {0}")]
    NotFound(String),
    /// The cluster could not answer (503, unreachable, timeouts) after every retry.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// 500 `internal`: the node's own invariant broke (a bug to report).
    #[error("internal error of the node: {0}")]
    Internal(String),
    /// The answer arrived but could not be written where the caller asked (a backup file).
    #[error("cannot write the answer: {0}")]
    Write(String),
    /// The answer did not make sense (an unexpected status or body).
    #[error("unexpected answer: {0}")]
    Protocol(String),
}

impl ClientError {
    /// True for the errors a retry may cure.
    pub fn is_retryable(&self) -> bool {
        matches!(self, ClientError::Unavailable(_))
    }

    /// The error as the API's error body, for a tool that prints errors as JSON: the code and
    /// every field the answer carried, the message in words. `None` for the failures that are
    /// the client's own (an answer it could not write, or could not make sense of).
    pub fn body(&self) -> Option<ErrorBody> {
        let message = self.to_string();
        Some(match self {
            ClientError::NotHead { expected, got } => ErrorBody::NotHead {
                message,
                expected: expected.clone(),
                got: got.clone(),
            },
            ClientError::EventConflict { event_id, exec_seq } => ErrorBody::EventConflict {
                message,
                event_id: event_id.clone(),
                exec_seq: *exec_seq,
            },
            ClientError::Forked(fork) => ErrorBody::Forked {
                message,
                fork: fork.clone(),
            },
            ClientError::SessionConflict { next_position } => ErrorBody::SessionConflict {
                message,
                next_position: *next_position,
            },
            ClientError::Refused(_) => ErrorBody::Refused { message },
            ClientError::InvalidInput(_) => ErrorBody::InvalidInput { message },
            ClientError::TooLarge(oversize) => ErrorBody::TooLarge {
                message,
                what: oversize.what,
                size: oversize.size,
                limit: oversize.limit,
            },
            ClientError::Unauthorized(_) => ErrorBody::Unauthorized { message },
            ClientError::Forbidden(_) => ErrorBody::Forbidden { message },
            ClientError::NotFound(_) => ErrorBody::NotFound { message },
            ClientError::Unavailable(_) => ErrorBody::Unavailable {
                message,
                applied_index: None,
            },
            ClientError::Internal(_) => ErrorBody::Internal { message },
            ClientError::Write(_) | ClientError::Protocol(_) => return None,
        })
    }
}

/// Every error answer becomes the variant of its code, with every field the answer carries (the
/// message of a code with fields is rebuilt from them by `Display`). Codes a client call never
/// causes (`method_not_allowed`, and `refused`, which answers peers) are protocol errors.
impl From<ErrorBody> for ClientError {
    fn from(body: ErrorBody) -> Self {
        match body {
            ErrorBody::InvalidInput { message } => ClientError::InvalidInput(message),
            ErrorBody::Unauthorized { message } => ClientError::Unauthorized(message),
            ErrorBody::Forbidden { message } => ClientError::Forbidden(message),
            ErrorBody::NotFound { message } => ClientError::NotFound(message),
            ErrorBody::NotHead { expected, got, .. } => ClientError::NotHead { expected, got },
            ErrorBody::EventConflict {
                event_id, exec_seq, ..
            } => ClientError::EventConflict { event_id, exec_seq },
            ErrorBody::Forked { fork, .. } => ClientError::Forked(fork),
            ErrorBody::SessionConflict { next_position, .. } => {
                ClientError::SessionConflict { next_position }
            }
            ErrorBody::TooLarge {
                what, size, limit, ..
            } => ClientError::TooLarge(Oversize { what, size, limit }),
            ErrorBody::NoLeader { message }
            | ErrorBody::Unavailable { message, .. }
            | ErrorBody::Overloaded { message } => ClientError::Unavailable(message),
            ErrorBody::Internal { message } => ClientError::Internal(message),
            ErrorBody::Refused { message } => ClientError::Refused(message),
            body @ ErrorBody::MethodNotAllowed { .. } => ClientError::Protocol(body.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every code the API defines becomes a client error holding every field of its answer.
    #[test]
    fn every_error_code_keeps_its_fields_in_the_client_error() {
        for body in ErrorBody::examples() {
            let err = ClientError::from(body.clone());
            let kept = match (&body, &err) {
                (ErrorBody::InvalidInput { message }, ClientError::InvalidInput(m))
                | (ErrorBody::Unauthorized { message }, ClientError::Unauthorized(m))
                | (ErrorBody::Forbidden { message }, ClientError::Forbidden(m))
                | (ErrorBody::NotFound { message }, ClientError::NotFound(m))
                | (ErrorBody::NoLeader { message }, ClientError::Unavailable(m))
                | (ErrorBody::Unavailable { message, .. }, ClientError::Unavailable(m))
                | (ErrorBody::Overloaded { message }, ClientError::Unavailable(m))
                | (ErrorBody::Refused { message }, ClientError::Refused(m))
                | (ErrorBody::Internal { message }, ClientError::Internal(m)) => message == m,
                (
                    ErrorBody::NotHead { expected, got, .. },
                    ClientError::NotHead {
                        expected: e,
                        got: g,
                    },
                ) => expected == e && got == g,
                (
                    ErrorBody::EventConflict {
                        event_id, exec_seq, ..
                    },
                    ClientError::EventConflict {
                        event_id: e,
                        exec_seq: s,
                    },
                ) => event_id == e && exec_seq == s,
                (ErrorBody::Forked { fork, .. }, ClientError::Forked(f)) => fork == f,
                (
                    ErrorBody::SessionConflict { next_position, .. },
                    ClientError::SessionConflict { next_position: n },
                ) => next_position == n,
                (ErrorBody::TooLarge { .. }, ClientError::TooLarge(oversize)) => {
                    body.oversize() == Some(*oversize)
                }
                (ErrorBody::MethodNotAllowed { message }, ClientError::Protocol(m)) => {
                    m.contains(body.code()) && m.contains(message.as_str())
                }
                _ => false,
            };
            assert!(kept, "{body:?} became {err:?}");
        }
    }
}
