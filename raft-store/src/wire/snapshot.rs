//! A snapshot's chunk: `header_len u32 BE ++ JSON header ++ raw data`. The header (vote, meta,
//! offset, done) is a few hundred bytes; the data is the snapshot file's bytes as they are, not
//! inflated into a JSON array. The receiver writes each chunk's data into a file of its own and
//! installs the snapshot when the chunk marked `done` arrives.

use serde::{Deserialize, Serialize};

use super::WireError;
use crate::raft::{SnapshotMeta, Vote};

/// The header of one snapshot chunk: which leader sends which snapshot, where the chunk's
/// bytes go in the file, and whether it is the last.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotChunk {
    /// The sending leader's vote.
    pub vote: Vote,
    /// What the snapshot covers.
    pub meta: SnapshotMeta,
    /// Where the chunk's bytes start in the snapshot.
    pub offset: u64,
    /// Whether this is the last chunk.
    pub done: bool,
}

/// A chunk's bytes: its header, then `data`.
pub fn encode_chunk(header: &SnapshotChunk, data: &[u8]) -> Result<Vec<u8>, WireError> {
    let header = serde_json::to_vec(header)?;
    let len = u32::try_from(header.len())
        .map_err(|_| WireError::new("a snapshot chunk's header of over 4 GiB"))?;
    let mut out = Vec::with_capacity(4 + header.len() + data.len());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&header);
    out.extend_from_slice(data);
    Ok(out)
}

/// The header and the data of a chunk encoded by [`encode_chunk`].
pub fn decode_chunk(frame: &[u8]) -> Result<(SnapshotChunk, &[u8]), WireError> {
    let malformed = || WireError::new("a snapshot chunk shorter than its header");
    let len = frame
        .get(..4)
        .and_then(|len| <[u8; 4]>::try_from(len).ok())
        .map(|len| u32::from_be_bytes(len) as usize)
        .ok_or_else(malformed)?;
    let end = 4usize.checked_add(len).ok_or_else(malformed)?;
    let header = frame.get(4..end).ok_or_else(malformed)?;
    let header: SnapshotChunk = serde_json::from_slice(header)?;
    Ok((header, &frame[end..]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raft::log_id;

    fn chunk() -> SnapshotChunk {
        SnapshotChunk {
            vote: Vote::new_committed(3, 1),
            meta: SnapshotMeta {
                last_log_id: Some(log_id(3, 1, 9)),
                last_membership: Default::default(),
            },
            offset: 1 << 20,
            done: false,
        }
    }

    #[test]
    fn a_chunk_round_trips_and_every_cut_into_its_header_is_refused() {
        let bytes = encode_chunk(&chunk(), b"raw \x00\xff bytes").unwrap();
        let (header, data) = decode_chunk(&bytes).unwrap();
        assert_eq!((header, data), (chunk(), &b"raw \x00\xff bytes"[..]));
        let header_end = bytes.len() - b"raw \x00\xff bytes".len();
        for cut in 0..header_end {
            assert!(decode_chunk(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut huge = bytes.clone();
        huge[..4].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(decode_chunk(&huge).is_err());
    }
}
