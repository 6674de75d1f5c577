//! The snapshot format: the state machine's key range, copied pair by pair.
//!
//! ```text
//! magic "CSSNAP01" ++ { key_len u32 BE ++ key ++ value_len u32 BE ++ value }*
//! ```
//! A snapshot is decoded completely before anything is installed, so a truncated or damaged one
//! is refused whole.

use crate::engine::{KeyValue, StorageError};

const MAGIC: &[u8] = b"CSSNAP01";

pub(crate) fn encode(pairs: &[KeyValue]) -> Vec<u8> {
    let size: usize = pairs.iter().map(|(k, v)| 8 + k.len() + v.len()).sum();
    let mut out = Vec::with_capacity(MAGIC.len() + size);
    out.extend_from_slice(MAGIC);
    for (key, value) in pairs {
        // Keys are short and values are bounded by the payload limit, far below 4 GiB.
        out.extend_from_slice(&(key.len() as u32).to_be_bytes());
        out.extend_from_slice(key);
        out.extend_from_slice(&(value.len() as u32).to_be_bytes());
        out.extend_from_slice(value);
    }
    out
}

pub(crate) fn decode(bytes: &[u8]) -> Result<Vec<KeyValue>, StorageError> {
    let mut rest = bytes
        .strip_prefix(MAGIC)
        .ok_or_else(|| StorageError::Corrupted("snapshot does not start with its magic".into()))?;
    let mut pairs = Vec::new();
    while !rest.is_empty() {
        let (key, after_key) = take_chunk(rest)?;
        let (value, after_value) = take_chunk(after_key)?;
        pairs.push((key.to_vec(), value.to_vec()));
        rest = after_value;
    }
    Ok(pairs)
}

fn take_chunk(bytes: &[u8]) -> Result<(&[u8], &[u8]), StorageError> {
    let truncated = || StorageError::Corrupted("snapshot is truncated".into());
    let len_bytes: [u8; 4] = bytes
        .get(..4)
        .ok_or_else(truncated)?
        .try_into()
        .map_err(|_| truncated())?;
    let len = u32::from_be_bytes(len_bytes) as usize;
    let chunk = bytes.get(4..4 + len).ok_or_else(truncated)?;
    Ok((chunk, &bytes[4 + len..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_round_trip_and_every_truncation_is_refused() {
        let pairs = vec![
            (b"a/applied".to_vec(), b"{}".to_vec()),
            (b"cx/h".to_vec(), vec![0; 9]),
        ];
        let bytes = encode(&pairs);
        assert_eq!(decode(&bytes).unwrap(), pairs);
        for cut in 0..bytes.len() {
            let result = decode(&bytes[..cut]);
            // A cut exactly between pairs is a valid shorter snapshot; nothing else decodes.
            if cut != MAGIC.len() && cut != MAGIC.len() + 4 + 9 + 4 + 2 {
                assert!(result.is_err(), "cut at {cut}");
            }
        }
    }
}
