//! The snapshot file format, shared by Raft snapshots and backups: the state machine's key range,
//! pair by pair, in checksummed chunks.
//!
//! ```text
//! file    = header chunk* trailer                          (nothing may follow the trailer)
//! header  = "CSSNAP02" ++ store_format u32 ++ crc u32      crc: CRC32C of the 12 bytes before it
//! chunk   = 'C' ++ body_len u32 ++ pairs u32 ++ body ++ crc u32
//! body    = { key_len u32 ++ key ++ value_len u32 ++ value }{pairs}   exactly body_len bytes
//! trailer = 'T' ++ pairs u64 ++ chunks u64 ++ chunk_crcs u32 ++ crc u32
//! ```
//! Integers are big-endian. A chunk's crc covers its tag, lengths and body; the trailer's crc
//! covers the trailer before it, and `chunk_crcs` is the CRC32C of every chunk's crc in order, so
//! a chunk dropped, repeated or moved is refused as surely as a flipped byte. The trailer carries
//! the counts because a writer streams: it learns them only at the end.
//!
//! A reader refuses a file that does not end with a trailer matching everything before it, so a
//! cut at any byte (even between chunks) and a changed byte anywhere are refused. Callers verify
//! a whole file before they change anything ([`decode`] does both in one call).

use std::io::{self, Read, Write};

use super::keys;
use crate::engine::{scan_in_steps, EngineView, KeyValue};
use chainstore_model::StorageError;

const MAGIC: &[u8; 8] = b"CSSNAP02";
/// The previous format: no checksums, no trailer. Named so that its files get a clear refusal.
const MAGIC_V1: &[u8; 8] = b"CSSNAP01";
const CHUNK_TAG: u8 = b'C';
const TRAILER_TAG: u8 = b'T';
/// A writer closes a chunk once its body reaches this many bytes.
pub(crate) const CHUNK_BYTES_TARGET: usize = 1 << 20;
/// Largest chunk body a reader accepts (and a writer writes): one pair with the largest payload
/// fits, and a damaged length cannot make a reader allocate more than this.
pub(crate) const CHUNK_BYTES_MAX: usize = 64 << 20;

/// What a whole file held, known once its trailer has been verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Summary {
    /// The chain store's format version named in the header.
    pub store_format: u32,
    /// Pairs in the file.
    pub pairs: u64,
    /// Chunks in the file.
    pub chunks: u64,
}

fn corrupted(what: impl Into<String>) -> StorageError {
    StorageError::Corrupted(format!("snapshot refused: {}", what.into()))
}

fn read_error(err: io::Error) -> StorageError {
    if err.kind() == io::ErrorKind::UnexpectedEof {
        corrupted("it is truncated (it ends before its trailer)")
    } else {
        StorageError::from_io(&err, "reading a snapshot")
    }
}

/// Writes a snapshot file to `out` pair by pair, holding at most one chunk in memory.
pub(crate) struct Writer<W: Write> {
    out: W,
    store_format: u32,
    body: Vec<u8>,
    body_pairs: u32,
    pairs: u64,
    chunks: u64,
    chunk_crcs: u32,
}

impl<W: Write> Writer<W> {
    /// Starts a file whose pairs belong to a store of format `store_format`.
    pub(crate) fn new(mut out: W, store_format: u32) -> io::Result<Self> {
        let mut header = Vec::with_capacity(16);
        header.extend_from_slice(MAGIC);
        header.extend_from_slice(&store_format.to_be_bytes());
        let crc = crc32c::crc32c(&header);
        header.extend_from_slice(&crc.to_be_bytes());
        out.write_all(&header)?;
        Ok(Self {
            out,
            store_format,
            body: Vec::new(),
            body_pairs: 0,
            pairs: 0,
            chunks: 0,
            chunk_crcs: 0,
        })
    }

    /// Adds one pair.
    pub(crate) fn push(&mut self, key: &[u8], value: &[u8]) -> io::Result<()> {
        let size = 8 + key.len() + value.len();
        if size > CHUNK_BYTES_MAX {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a pair of {size} bytes is larger than a snapshot chunk may be"),
            ));
        }
        if !self.body.is_empty() && self.body.len() + size > CHUNK_BYTES_MAX {
            self.flush_chunk()?;
        }
        // Lengths fit in u32: both are below CHUNK_BYTES_MAX, checked above.
        self.body
            .extend_from_slice(&(key.len() as u32).to_be_bytes());
        self.body.extend_from_slice(key);
        self.body
            .extend_from_slice(&(value.len() as u32).to_be_bytes());
        self.body.extend_from_slice(value);
        self.body_pairs += 1;
        self.pairs += 1;
        if self.body.len() >= CHUNK_BYTES_TARGET {
            self.flush_chunk()?;
        }
        Ok(())
    }

    fn flush_chunk(&mut self) -> io::Result<()> {
        let mut head = [0u8; 9];
        head[0] = CHUNK_TAG;
        head[1..5].copy_from_slice(&(self.body.len() as u32).to_be_bytes());
        head[5..9].copy_from_slice(&self.body_pairs.to_be_bytes());
        let crc = crc32c::crc32c_append(crc32c::crc32c(&head), &self.body);
        self.out.write_all(&head)?;
        self.out.write_all(&self.body)?;
        self.out.write_all(&crc.to_be_bytes())?;
        self.chunk_crcs = crc32c::crc32c_append(self.chunk_crcs, &crc.to_be_bytes());
        self.chunks += 1;
        self.body.clear();
        self.body_pairs = 0;
        Ok(())
    }

    /// Writes the last chunk and the trailer; returns the output and what the file holds.
    pub(crate) fn finish(mut self) -> io::Result<(W, Summary)> {
        if !self.body.is_empty() {
            self.flush_chunk()?;
        }
        let mut trailer = Vec::with_capacity(25);
        trailer.push(TRAILER_TAG);
        trailer.extend_from_slice(&self.pairs.to_be_bytes());
        trailer.extend_from_slice(&self.chunks.to_be_bytes());
        trailer.extend_from_slice(&self.chunk_crcs.to_be_bytes());
        let crc = crc32c::crc32c(&trailer);
        trailer.extend_from_slice(&crc.to_be_bytes());
        self.out.write_all(&trailer)?;
        self.out.flush()?;
        let summary = Summary {
            store_format: self.store_format,
            pairs: self.pairs,
            chunks: self.chunks,
        };
        Ok((self.out, summary))
    }
}

/// Reads a snapshot file chunk by chunk, checking every checksum; the last call checks the
/// trailer and that nothing follows it.
pub(crate) struct Reader<R: Read> {
    input: R,
    store_format: u32,
    pairs: u64,
    chunks: u64,
    chunk_crcs: u32,
    done: bool,
}

impl<R: Read> Reader<R> {
    /// Reads and checks the header.
    pub(crate) fn new(mut input: R) -> Result<Self, StorageError> {
        let mut header = [0u8; 16];
        input.read_exact(&mut header).map_err(read_error)?;
        if &header[..8] == MAGIC_V1 {
            return Err(corrupted(
                "it is in format CSSNAP01, which has no checksums and cannot be verified; \
                 take a new one with this version",
            ));
        }
        if &header[..8] != MAGIC {
            return Err(corrupted("it does not start with the CSSNAP02 header"));
        }
        let crc = be_u32(&header, 12);
        if crc32c::crc32c(&header[..12]) != crc {
            return Err(corrupted("its header fails its checksum"));
        }
        Ok(Self {
            input,
            store_format: be_u32(&header, 8),
            pairs: 0,
            chunks: 0,
            chunk_crcs: 0,
            done: false,
        })
    }

    /// The next chunk's pairs, or `None` once the trailer has been read and verified.
    pub(crate) fn next_chunk(&mut self) -> Result<Option<Vec<KeyValue>>, StorageError> {
        if self.done {
            return Ok(None);
        }
        let mut tag = [0u8; 1];
        self.input.read_exact(&mut tag).map_err(read_error)?;
        match tag[0] {
            CHUNK_TAG => self.read_chunk().map(Some),
            TRAILER_TAG => {
                self.read_trailer()?;
                self.done = true;
                Ok(None)
            }
            other => Err(corrupted(format!(
                "byte {other:#04x} where a chunk or the trailer should start"
            ))),
        }
    }

    /// The counts read so far (the whole file's once `next_chunk` has returned `None`).
    pub(crate) fn summary(&self) -> Summary {
        Summary {
            store_format: self.store_format,
            pairs: self.pairs,
            chunks: self.chunks,
        }
    }

    fn read_chunk(&mut self) -> Result<Vec<KeyValue>, StorageError> {
        let mut head = [0u8; 9];
        head[0] = CHUNK_TAG;
        self.input.read_exact(&mut head[1..]).map_err(read_error)?;
        let len = be_u32(&head, 1) as usize;
        let count = be_u32(&head, 5);
        if len > CHUNK_BYTES_MAX {
            return Err(corrupted(format!(
                "chunk {} claims {len} bytes, more than a chunk may hold",
                self.chunks
            )));
        }
        // The body is read in pieces so that a damaged length costs what the input holds, not
        // what it claims.
        let mut body = Vec::with_capacity(len.min(CHUNK_BYTES_TARGET));
        (&mut self.input)
            .take(len as u64)
            .read_to_end(&mut body)
            .map_err(read_error)?;
        if body.len() != len {
            return Err(read_error(io::ErrorKind::UnexpectedEof.into()));
        }
        let mut crc_bytes = [0u8; 4];
        self.input.read_exact(&mut crc_bytes).map_err(read_error)?;
        let crc = crc32c::crc32c_append(crc32c::crc32c(&head), &body);
        if crc != u32::from_be_bytes(crc_bytes) {
            return Err(corrupted(format!(
                "chunk {} fails its checksum",
                self.chunks
            )));
        }
        let pairs = parse_body(&body, count)
            .ok_or_else(|| corrupted(format!("chunk {} does not hold its pairs", self.chunks)))?;
        self.chunk_crcs = crc32c::crc32c_append(self.chunk_crcs, &crc_bytes);
        self.chunks += 1;
        self.pairs += u64::from(count);
        Ok(pairs)
    }

    fn read_trailer(&mut self) -> Result<(), StorageError> {
        let mut trailer = [0u8; 25];
        trailer[0] = TRAILER_TAG;
        self.input
            .read_exact(&mut trailer[1..])
            .map_err(read_error)?;
        let crc = be_u32(&trailer, 21);
        if crc32c::crc32c(&trailer[..21]) != crc {
            return Err(corrupted("its trailer fails its checksum"));
        }
        let pairs = be_u64(&trailer, 1);
        let chunks = be_u64(&trailer, 9);
        let chunk_crcs = be_u32(&trailer, 17);
        if (pairs, chunks, chunk_crcs) != (self.pairs, self.chunks, self.chunk_crcs) {
            return Err(corrupted(format!(
                "its trailer names {pairs} pairs in {chunks} chunks, the file holds {} in {} \
                 (or its chunks are not the ones written)",
                self.pairs, self.chunks
            )));
        }
        let mut extra = [0u8; 1];
        loop {
            match self.input.read(&mut extra) {
                Ok(0) => return Ok(()),
                Ok(_) => return Err(corrupted("bytes follow its trailer")),
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                Err(err) => return Err(read_error(err)),
            }
        }
    }
}

/// The big-endian u32 at `at` of a fixed-size frame (callers index within the array's length).
fn be_u32<const N: usize>(bytes: &[u8; N], at: usize) -> u32 {
    let mut out = [0u8; 4];
    out.copy_from_slice(&bytes[at..at + 4]);
    u32::from_be_bytes(out)
}

/// The big-endian u64 at `at` of a fixed-size frame.
fn be_u64<const N: usize>(bytes: &[u8; N], at: usize) -> u64 {
    let mut out = [0u8; 8];
    out.copy_from_slice(&bytes[at..at + 8]);
    u64::from_be_bytes(out)
}

/// The `count` pairs a chunk body holds, or `None` when it does not hold exactly that.
fn parse_body(mut body: &[u8], count: u32) -> Option<Vec<KeyValue>> {
    fn take(bytes: &mut &[u8]) -> Option<Vec<u8>> {
        let len = u32::from_be_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
        let item = bytes.get(4..4usize.checked_add(len)?)?.to_vec();
        *bytes = &bytes[4 + len..];
        Some(item)
    }
    // Every pair takes at least 8 bytes: a count the body cannot hold is refused before any
    // allocation it would size.
    if (count as usize).checked_mul(8)? > body.len() {
        return None;
    }
    let mut pairs = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let key = take(&mut body)?;
        let value = take(&mut body)?;
        pairs.push((key, value));
    }
    body.is_empty().then_some(pairs)
}

/// Pairs read per scan while a view is written out.
const WRITE_STEP: usize = 1024;

/// Writes the state machine's whole range as `view` sees it to `out`, in bounded scans: memory
/// is one scan step plus one chunk, whatever the store's size.
pub(crate) fn write_view<V: EngineView + ?Sized, W: Write>(
    view: &V,
    store_format: u32,
    out: W,
) -> Result<(W, Summary), StorageError> {
    let io = |e: io::Error| StorageError::from_io(&e, "writing a snapshot");
    let mut writer = Writer::new(out, store_format).map_err(io)?;
    scan_in_steps(view, keys::SM_START, keys::SM_END, WRITE_STEP, |pairs| {
        for (key, value) in &pairs {
            writer.push(key, value).map_err(io)?;
        }
        Ok(true)
    })?;
    writer.finish().map_err(io)
}

/// A whole file in memory.
pub(crate) fn encode(store_format: u32, pairs: &[KeyValue]) -> Result<Vec<u8>, StorageError> {
    let size: usize = pairs.iter().map(|(k, v)| 8 + k.len() + v.len()).sum();
    let mut writer = Writer::new(Vec::with_capacity(64 + size * 101 / 100), store_format)
        .map_err(|e| StorageError::from_io(&e, "encoding a snapshot"))?;
    for (key, value) in pairs {
        writer
            .push(key, value)
            .map_err(|e| StorageError::from_io(&e, "encoding a snapshot"))?;
    }
    let (bytes, _) = writer
        .finish()
        .map_err(|e| StorageError::from_io(&e, "encoding a snapshot"))?;
    Ok(bytes)
}

/// Every pair of a whole file, after every check (the trailer's included) has passed.
#[cfg(test)]
pub(crate) fn decode(bytes: &[u8]) -> Result<(Summary, Vec<KeyValue>), StorageError> {
    let mut reader = Reader::new(bytes)?;
    let mut pairs = Vec::new();
    while let Some(chunk) = reader.next_chunk()? {
        pairs.extend(chunk);
    }
    Ok((reader.summary(), pairs))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(pairs: usize, value_bytes: usize) -> Vec<KeyValue> {
        (0..pairs)
            .map(|i| {
                (
                    format!("cx/{i:06}").into_bytes(),
                    vec![(i % 251) as u8; value_bytes + i % 7],
                )
            })
            .collect()
    }

    #[test]
    fn pairs_round_trip_with_their_counts() {
        for pairs in [sample(0, 0), sample(1, 3), sample(50, 100)] {
            let bytes = encode(7, &pairs).unwrap();
            let (summary, decoded) = decode(&bytes).unwrap();
            assert_eq!(decoded, pairs);
            assert_eq!(summary.store_format, 7);
            assert_eq!(summary.pairs, pairs.len() as u64);
        }
    }

    #[test]
    fn large_stores_span_chunks_and_a_large_pair_gets_a_chunk_of_its_own() {
        let mut pairs = sample(40, 100_000);
        pairs.push((b"z/big".to_vec(), vec![1; 3 * CHUNK_BYTES_TARGET]));
        let bytes = encode(1, &pairs).unwrap();
        let (summary, decoded) = decode(&bytes).unwrap();
        assert_eq!(decoded, pairs);
        assert!(summary.chunks >= 4, "{summary:?}");
    }

    /// Every cut and every changed byte of a file with several chunks is refused.
    #[test]
    fn every_truncation_and_every_damaged_byte_is_refused() {
        let pairs = sample(6, 3);
        let mut writer = Writer::new(Vec::new(), 1).unwrap();
        for (i, (key, value)) in pairs.iter().enumerate() {
            writer.push(key, value).unwrap();
            if i % 2 == 1 {
                // Small chunks, so the file has several boundaries between chunks.
                writer.flush_chunk().unwrap();
            }
        }
        let (bytes, summary) = writer.finish().unwrap();
        assert_eq!(summary.chunks, 3);
        assert_eq!(decode(&bytes).unwrap().1, pairs);
        for cut in 0..bytes.len() {
            assert!(
                decode(&bytes[..cut]).is_err(),
                "a cut at byte {cut} decoded"
            );
        }
        for at in 0..bytes.len() {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut damaged = bytes.clone();
                damaged[at] ^= flip;
                assert!(
                    decode(&damaged).is_err(),
                    "byte {at} xor {flip:#04x} decoded"
                );
            }
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode(&longer).is_err(), "a byte after the trailer decoded");
    }

    #[test]
    fn chunks_dropped_repeated_or_swapped_are_refused() {
        let pairs = sample(4, 3);
        let mut writer = Writer::new(Vec::new(), 1).unwrap();
        let mut bounds = vec![16];
        for (key, value) in &pairs {
            writer.push(key, value).unwrap();
            writer.flush_chunk().unwrap();
            bounds.push(writer.out.len());
        }
        let (bytes, _) = writer.finish().unwrap();
        let chunk = |i: usize| &bytes[bounds[i]..bounds[i + 1]];
        let header = &bytes[..16];
        let trailer = &bytes[bounds[4]..];
        let rebuilt = |order: &[usize]| {
            let mut out = header.to_vec();
            for &i in order {
                out.extend_from_slice(chunk(i));
            }
            out.extend_from_slice(trailer);
            out
        };
        assert_eq!(decode(&rebuilt(&[0, 1, 2, 3])).unwrap().1, pairs);
        for order in [
            &[0, 1, 2][..],
            &[0, 1, 2, 3, 3],
            &[1, 0, 2, 3],
            &[0, 1, 3, 3],
        ] {
            assert!(decode(&rebuilt(order)).is_err(), "chunks {order:?} decoded");
        }
    }

    #[test]
    fn the_old_format_and_foreign_bytes_get_a_clear_refusal() {
        let err = decode(b"CSSNAP01\0\0\0\x01a\0\0\0\x01b").unwrap_err();
        assert!(err.to_string().contains("CSSNAP01"), "{err}");
        let err = decode(b"{\"not\": \"a snapshot\"}").unwrap_err();
        assert!(err.to_string().contains("header"), "{err}");
    }

    #[test]
    fn a_damaged_length_allocates_no_more_than_the_input_holds() {
        let bytes = encode(1, &sample(1, 3)).unwrap();
        let mut damaged = bytes.clone();
        // The chunk's body length, raised to just under the cap.
        damaged[17..21].copy_from_slice(&((CHUNK_BYTES_MAX - 1) as u32).to_be_bytes());
        assert!(decode(&damaged).is_err());
        let mut count = bytes;
        count[21..25].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(decode(&count).is_err());
    }
}
