//! The peer wire: every byte one node sends another, encoded and framed here and nowhere else.
//! The node's network client and its `/raft/*` handlers only move these bytes; connections,
//! credentials and deadlines are theirs.
//!
//! ```text
//! route                        request                          answer (JSON)
//! POST /raft/append            AppendEntries, binary (append)   Result<AppendEntriesResponse, RaftError>
//! POST /raft/vote, /pre-vote   VoteRequest, JSON                Result<VoteResponse, RaftError>
//! POST /raft/transfer-leader   TransferLeaderRequest, JSON      Result<TransferLeaderResponse, RaftError<Fatal>>
//! POST /raft/snapshot          one chunk (snapshot)             Result<Option<SnapshotResponse>, RaftError<Fatal>>
//! POST /raft/stream            an HTTP/1.1 upgrade to STREAM_PROTOCOL: then frames (frame), each
//!                              AppendEntries binary one way and its JSON answer the other
//! ```
//! [`Message`] is each request's and answer's encoding; [`snapshot`] frames a snapshot's chunk
//! (a JSON header, then the file's raw bytes); [`frame`] delimits the append stream's messages.
//! Decoding damaged, truncated or hostile bytes is a [`WireError`], never a panic, and never
//! allocates for a length the bytes do not hold.

pub mod append;
pub mod frame;
pub mod snapshot;

use openraft::errors::RaftError;
use openraft::raft::{AppendEntriesRequest, TransferLeaderRequest, VoteRequest};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::raft::TypeConfig;
use chainstore_model::StorageError;

/// The protocol an append stream's upgrade names (`upgrade: chainstore-raft-append/1`).
pub const STREAM_PROTOCOL: &str = "chainstore-raft-append/1";

/// Bytes that are not the message they were read as.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct WireError(String);

impl WireError {
    fn new(what: impl Into<String>) -> Self {
        Self(what.into())
    }
}

impl From<StorageError> for WireError {
    fn from(err: StorageError) -> Self {
        Self(err.to_string())
    }
}

impl From<serde_json::Error> for WireError {
    fn from(err: serde_json::Error) -> Self {
        Self(err.to_string())
    }
}

/// A request or an answer of the peer wire, and how it is written.
pub trait Message: Sized {
    /// The message's bytes.
    fn encode(&self) -> Result<Vec<u8>, WireError>;
    /// The message in `bytes`, all of them.
    fn decode(bytes: &[u8]) -> Result<Self, WireError>;
}

/// The entries in the log's own format (see [`append`]), not JSON of JSON.
impl Message for AppendEntriesRequest<TypeConfig> {
    fn encode(&self) -> Result<Vec<u8>, WireError> {
        Ok(append::encode_request(self)?)
    }

    fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        Ok(append::decode_request(bytes)?)
    }
}

/// A vote or a pre-vote, as JSON.
impl Message for VoteRequest<TypeConfig> {
    fn encode(&self) -> Result<Vec<u8>, WireError> {
        encode_json(self)
    }

    fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        decode_json(bytes)
    }
}

/// A leadership transfer, as JSON.
impl Message for TransferLeaderRequest<TypeConfig> {
    fn encode(&self) -> Result<Vec<u8>, WireError> {
        encode_json(self)
    }

    fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        decode_json(bytes)
    }
}

/// Every answer: the peer Raft's `Result`, as JSON.
impl<T, E> Message for Result<T, RaftError<TypeConfig, E>>
where
    T: Serialize + DeserializeOwned,
    E: std::error::Error + Serialize + DeserializeOwned,
{
    fn encode(&self) -> Result<Vec<u8>, WireError> {
        encode_json(self)
    }

    fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        decode_json(bytes)
    }
}

fn encode_json<T: Serialize>(value: &T) -> Result<Vec<u8>, WireError> {
    Ok(serde_json::to_vec(value)?)
}

fn decode_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, WireError> {
    if bytes.is_empty() {
        return Err(WireError::new("an empty message"));
    }
    Ok(serde_json::from_slice(bytes)?)
}

#[cfg(test)]
mod tests {
    use openraft::raft::{AppendEntriesResponse, VoteResponse};

    use super::*;
    use crate::raft::{log_id, Vote};

    fn round_trip<M: Message + std::fmt::Debug>(message: M) -> (String, String) {
        let bytes = message.encode().unwrap();
        let back = M::decode(&bytes).unwrap();
        (format!("{message:?}"), format!("{back:?}"))
    }

    #[test]
    fn every_message_round_trips() {
        let vote = Vote::new_committed(4, 2);
        let last = Some(log_id(4, 2, 17));
        for (sent, read) in [
            round_trip(VoteRequest::<TypeConfig>::new(vote, last)),
            round_trip(TransferLeaderRequest::<TypeConfig>::new(vote, 3, last)),
            round_trip(AppendEntriesRequest::<TypeConfig> {
                vote,
                prev_log_id: last,
                leader_commit: last,
                entries: Vec::new(),
            }),
            round_trip(Ok::<_, RaftError<TypeConfig>>(
                AppendEntriesResponse::<TypeConfig>::Success,
            )),
            round_trip(Ok::<_, RaftError<TypeConfig>>(
                VoteResponse::<TypeConfig>::new(vote, last, true),
            )),
        ] {
            assert_eq!(sent, read);
        }
    }

    #[test]
    fn empty_or_foreign_bytes_are_refused_with_a_reason() {
        for bytes in [&b""[..], b"{", b"[1,2]", b"\xA1"] {
            let err = VoteRequest::<TypeConfig>::decode(bytes).unwrap_err();
            assert!(!err.to_string().is_empty());
        }
        assert!(AppendEntriesRequest::<TypeConfig>::decode(b"{}").is_err());
    }
}
