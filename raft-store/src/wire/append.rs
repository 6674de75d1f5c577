//! The append RPC's binary encoding: what a leader sends a follower most often, and what carries
//! the log's entries, in the log's own format rather than JSON of JSON.
//!
//! ```text
//! append v1 = 0xA1 ++ vote ++ prev log id ++ leader commit ++ count u32 BE ++ bytes(entry)*count
//! vote      = term u64 BE ++ node id u64 BE ++ committed u8 (0 | 1)
//! log id    = 0 | 1 ++ term u64 BE ++ node id u64 BE ++ index u64 BE
//! entry     = entry_codec's encoding, length-prefixed (u32 BE)
//! ```
//! The first byte names the format, so a later one can be told apart. Decoding damaged,
//! truncated or random bytes is an error naming what is wrong, never a panic; a count the rest
//! cannot hold is refused before anything is allocated for it.

use openraft::raft::AppendEntriesRequest;

use crate::chain::codec::{push_bytes, Reader};
use crate::raft::entry_codec::{decode_entry, encode_entry};
use crate::raft::{log_id, LogId, TypeConfig, Vote};
use chainstore_model::StorageError;

/// The first byte of an append request in this encoding.
pub const APPEND_FORMAT: u8 = 0xA1;
/// The fewest bytes one framed entry takes (its length prefix and a blank entry).
const ENTRY_BYTES_MIN: usize = 4 + 26;

/// Encodes an append request.
pub fn encode_request(rpc: &AppendEntriesRequest<TypeConfig>) -> Result<Vec<u8>, StorageError> {
    let mut out = Vec::with_capacity(64);
    out.push(APPEND_FORMAT);
    out.extend_from_slice(&rpc.vote.leader_id.term.to_be_bytes());
    out.extend_from_slice(&rpc.vote.leader_id.node_id.to_be_bytes());
    out.push(u8::from(rpc.vote.committed));
    push_log_id(&mut out, rpc.prev_log_id.as_ref());
    push_log_id(&mut out, rpc.leader_commit.as_ref());
    let count = u32::try_from(rpc.entries.len()).map_err(|_| {
        StorageError::io(
            std::io::ErrorKind::InvalidInput,
            "an append of over 2^32 entries",
        )
    })?;
    out.extend_from_slice(&count.to_be_bytes());
    for entry in &rpc.entries {
        push_bytes(&mut out, &encode_entry(entry)?);
    }
    Ok(out)
}

/// Reads an append request framed by [`encode_request`].
pub fn decode_request(bytes: &[u8]) -> Result<AppendEntriesRequest<TypeConfig>, StorageError> {
    let mut r = Reader::new(bytes, "append request");
    if r.u8()? != APPEND_FORMAT {
        return Err(StorageError::Corrupted(
            "an append request in an unknown format".into(),
        ));
    }
    let term = r.u64()?;
    let node_id = r.u64()?;
    let vote = match r.u8()? {
        0 => Vote::new(term, node_id),
        1 => Vote::new_committed(term, node_id),
        other => {
            return Err(StorageError::Corrupted(format!(
                "append request has vote flag {other}"
            )))
        }
    };
    let prev_log_id = read_log_id(&mut r)?;
    let leader_commit = read_log_id(&mut r)?;
    let count = r.count(ENTRY_BYTES_MIN, "entries")?;
    let mut entries = Vec::with_capacity(count);
    for _ in 0..count {
        entries.push(decode_entry(r.bytes()?)?);
    }
    r.finish()?;
    Ok(AppendEntriesRequest {
        vote,
        prev_log_id,
        leader_commit,
        entries,
    })
}

fn push_log_id(out: &mut Vec<u8>, id: Option<&LogId>) {
    match id {
        None => out.push(0),
        Some(id) => {
            out.push(1);
            out.extend_from_slice(&id.leader_id.term.to_be_bytes());
            out.extend_from_slice(&id.leader_id.node_id.to_be_bytes());
            out.extend_from_slice(&id.index.to_be_bytes());
        }
    }
}

fn read_log_id(r: &mut Reader<'_>) -> Result<Option<LogId>, StorageError> {
    match r.u8()? {
        0 => Ok(None),
        1 => {
            let term = r.u64()?;
            let node_id = r.u64()?;
            let index = r.u64()?;
            Ok(Some(log_id(term, node_id, index)))
        }
        other => Err(StorageError::Corrupted(format!(
            "append request has log id flag {other}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use openraft::EntryPayload;

    use super::*;

    fn request(entries: u64) -> AppendEntriesRequest<TypeConfig> {
        let log_id = |index| log_id(5, 2, index);
        AppendEntriesRequest {
            vote: Vote::new_committed(5, 2),
            prev_log_id: Some(log_id(9)),
            leader_commit: Some(log_id(8)),
            entries: (10..10 + entries)
                .map(|index| openraft::Entry {
                    log_id: log_id(index),
                    payload: EntryPayload::Blank,
                })
                .collect(),
        }
    }

    #[test]
    fn requests_round_trip_with_and_without_entries_and_log_ids() {
        let mut bare = request(0);
        bare.prev_log_id = None;
        bare.leader_commit = None;
        bare.vote = Vote::new(1, 3);
        for rpc in [request(0), request(3), bare] {
            let bytes = encode_request(&rpc).unwrap();
            assert_eq!(bytes[0], APPEND_FORMAT);
            let back = decode_request(&bytes).unwrap();
            assert_eq!(
                (
                    back.vote,
                    back.prev_log_id,
                    back.leader_commit,
                    back.entries
                ),
                (rpc.vote, rpc.prev_log_id, rpc.leader_commit, rpc.entries)
            );
        }
    }

    #[test]
    fn every_truncation_and_a_trailing_byte_are_refused() {
        let bytes = encode_request(&request(2)).unwrap();
        for cut in 0..bytes.len() {
            assert!(decode_request(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode_request(&longer).is_err());
    }

    #[test]
    fn a_count_larger_than_the_bytes_is_refused_before_allocating() {
        let mut bytes = encode_request(&request(0)).unwrap();
        let at = bytes.len() - 4;
        bytes[at..].copy_from_slice(&u32::MAX.to_be_bytes());
        let err = decode_request(&bytes).unwrap_err().to_string();
        assert!(err.contains("more entries than it holds"), "{err}");
    }
}
