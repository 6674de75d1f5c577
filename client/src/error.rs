//! [`ClientError`]: every way a call can fail, typed after the API's error codes.

use chainstore_model::{EventId, Fork, Oversize};

/// Why a call failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ClientError {
    /// 409 `not_head`: `prev_event_id` is not the head.
    #[error("not the head: expected {expected:?}, got {got:?}")]
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
    #[error("populate session conflict: continues at {next_position:?}")]
    SessionConflict {
        /// Where the session continues; `None` when the store holds no such session.
        next_position: Option<u64>,
    },
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
}
