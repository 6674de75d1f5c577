//! The storage engine: the narrow interface the chain store and the Raft storage are written
//! against.
//!
//! An engine is an ordered byte-key map: a point get, an ordered range scan (forward or reverse,
//! bounded by a limit), an atomic write batch, `sync` (makes every write issued before it
//! durable), `write_durable` (a batch and its sync), `view` (a point-in-time view for long
//! reads) and `replace_range` (a key range replaced by a stream of pairs as one durable change). Two implementations pass one conformance suite
//! (`tests/engine_conformance.rs`): [`RocksEngine`] for production and [`MemEngine`] for tests and
//! simulations, which can lose unsynced writes and fail chosen writes. [`CountingEngine`] wraps
//! either and counts operations, which is how the cost rules of SPEC §3 are tested.
//! [`GroupEngine`] is one Raft group's keyspace in an engine that all of a node's groups share.

mod counting;
mod group;
mod memory;
mod rocks;

pub use counting::{CountingEngine, OpCounts};
pub use group::GroupEngine;
pub use memory::MemEngine;
pub use rocks::{RocksEngine, RocksOptions};

use chainstore_model::StorageError;

/// Bytes of the checksum an engine stores after every value.
pub const CHECKSUM_BYTES: usize = 4;

/// The stored form of `value` under `key`: the value followed by CRC32C over the key and the
/// value. A flipped bit in the stored bytes, a truncated value, or a value found under another
/// key reads back as [`StorageError::Corrupted`] ([`unseal`]). Every engine stores values this
/// way, so nothing above an engine can be handed damaged bytes that happen to decode.
pub fn seal(key: &[u8], mut value: Vec<u8>) -> Vec<u8> {
    let crc = crc32c::crc32c_append(crc32c::crc32c(key), &value);
    value.extend_from_slice(&crc.to_le_bytes());
    value
}

/// The value sealed under `key` in `stored`, or `Corrupted` when its checksum does not match.
pub fn unseal(key: &[u8], mut stored: Vec<u8>) -> Result<Vec<u8>, StorageError> {
    let Some(split) = stored.len().checked_sub(CHECKSUM_BYTES) else {
        return Err(StorageError::Corrupted(format!(
            "the value under key {} is {} bytes, too short to hold its checksum",
            printable_key(key),
            stored.len()
        )));
    };
    let mut expected = [0u8; CHECKSUM_BYTES];
    expected.copy_from_slice(&stored[split..]);
    stored.truncate(split);
    if crc32c::crc32c_append(crc32c::crc32c(key), &stored) != u32::from_le_bytes(expected) {
        return Err(StorageError::Corrupted(format!(
            "checksum mismatch in the value under key {}",
            printable_key(key)
        )));
    }
    Ok(stored)
}

/// A key for an error message: printable ASCII as is, other bytes as `\xNN`, at most 64 bytes.
fn printable_key(key: &[u8]) -> String {
    let mut out: String = key
        .iter()
        .take(64)
        .flat_map(|b| std::ascii::escape_default(*b))
        .map(char::from)
        .collect();
    if key.len() > 64 {
        out.push_str("...");
    }
    out
}

/// One key/value pair as returned by a scan.
pub type KeyValue = (Vec<u8>, Vec<u8>);

/// The order in which a scan walks its range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanOrder {
    /// Ascending key order.
    Forward,
    /// Descending key order.
    Reverse,
}

/// One change inside a [`WriteBatch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOp {
    /// Sets `key` to `value`.
    Put {
        /// The key written.
        key: Vec<u8>,
        /// Its new value.
        value: Vec<u8>,
    },
    /// Removes `key` (a no-op when absent).
    Delete {
        /// The key removed.
        key: Vec<u8>,
    },
    /// Removes every key in `[start, end)`.
    DeleteRange {
        /// First key removed.
        start: Vec<u8>,
        /// First key kept after the range.
        end: Vec<u8>,
    },
}

/// A list of changes applied atomically, in order: after a crash either all of them are visible
/// or none is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteBatch {
    ops: Vec<WriteOp>,
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a put.
    pub fn put(&mut self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) {
        self.ops.push(WriteOp::Put {
            key: key.into(),
            value: value.into(),
        });
    }

    /// Adds a delete.
    pub fn delete(&mut self, key: impl Into<Vec<u8>>) {
        self.ops.push(WriteOp::Delete { key: key.into() });
    }

    /// Adds a range delete of `[start, end)`.
    pub fn delete_range(&mut self, start: impl Into<Vec<u8>>, end: impl Into<Vec<u8>>) {
        self.ops.push(WriteOp::DeleteRange {
            start: start.into(),
            end: end.into(),
        });
    }

    /// Appends every op of `other`, keeping their order.
    pub fn extend(&mut self, other: WriteBatch) {
        self.ops.extend(other.ops);
    }

    /// The ops in application order.
    pub fn ops(&self) -> &[WriteOp] {
        &self.ops
    }

    /// The ops in application order, by value.
    pub fn into_ops(self) -> Vec<WriteOp> {
        self.ops
    }

    /// True when the batch changes nothing.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Number of ops.
    pub fn len(&self) -> usize {
        self.ops.len()
    }
}

/// An ordered byte-key store with atomic batches.
///
/// Contract (checked by the conformance suite):
/// - a write is visible to reads as soon as `write` returns, durable only after a later `sync`
///   (or `write_durable`) returns;
/// - a batch is atomic, also across a crash;
/// - a scan returns pairs in the requested key order, at most `limit` of them, from one
///   point-in-time view of the store;
/// - a failed `write` changes nothing;
/// - a value is read back only when it matches the checksum written with it ([`seal`]); damaged
///   bytes read as `Corrupted`.
pub trait Engine: Send + Sync + 'static {
    /// Reads one key.
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError>;

    /// Reads the keys in `[start, end)` in `order`, at most `limit` of them.
    fn scan(
        &self,
        start: &[u8],
        end: &[u8],
        order: ScanOrder,
        limit: usize,
    ) -> Result<Vec<KeyValue>, StorageError>;

    /// Applies `batch` atomically.
    fn write(&self, batch: WriteBatch) -> Result<(), StorageError>;

    /// Makes every write that returned before this call durable.
    fn sync(&self) -> Result<(), StorageError>;

    /// Applies `batch` atomically and makes it durable before returning.
    fn write_durable(&self, batch: WriteBatch) -> Result<(), StorageError> {
        self.write(batch)?;
        self.sync()
    }

    /// A point-in-time view: every read through it sees the store as it was when the view was
    /// taken, whatever is written after. A long read (a whole partition checked page by page, a
    /// snapshot streamed in chunks) makes many bounded scans of one view instead of one
    /// unbounded scan.
    fn view(&self) -> Box<dyn EngineView + '_>;

    /// Removes every key in `[start, end)` and writes `pairs`, as ONE atomic and durable change:
    /// a reader and a crash see the store before or after, never between. `pairs` must come in
    /// strictly ascending key order (they may lie outside the range). When `pairs` yields an
    /// error or is out of order, nothing is changed and the error is returned.
    ///
    /// This is how a snapshot or a backup replaces the state machine. The default gathers one
    /// batch in memory; [`RocksEngine`] stages the pairs in a table file on disk and ingests it,
    /// so the memory it needs does not grow with the number of pairs.
    fn replace_range(
        &self,
        start: &[u8],
        end: &[u8],
        pairs: &mut dyn Iterator<Item = Result<KeyValue, StorageError>>,
    ) -> Result<(), StorageError> {
        let mut batch = WriteBatch::new();
        batch.delete_range(start, end);
        for pair in PairSource::new(pairs) {
            let (key, value) = pair?;
            batch.put(key, value);
        }
        self.write_durable(batch)
    }
}

/// The pairs handed to [`Engine::replace_range`], checked to come in strictly ascending key
/// order; remembers whether an error came from them (a damaged input) rather than from the
/// engine, which a caller watching the engine's health needs to tell apart.
pub struct PairSource<'a> {
    inner: &'a mut dyn Iterator<Item = Result<KeyValue, StorageError>>,
    last: Option<Vec<u8>>,
    failed: bool,
}

impl<'a> PairSource<'a> {
    /// Wraps `inner`.
    pub fn new(inner: &'a mut dyn Iterator<Item = Result<KeyValue, StorageError>>) -> Self {
        Self {
            inner,
            last: None,
            failed: false,
        }
    }

    /// True once the source yielded an error or a key out of order.
    pub fn failed(&self) -> bool {
        self.failed
    }
}

impl Iterator for PairSource<'_> {
    type Item = Result<KeyValue, StorageError>;

    fn next(&mut self) -> Option<Self::Item> {
        let item = match self.inner.next()? {
            Ok((key, value)) => match &self.last {
                Some(last) if key.as_slice() <= last.as_slice() => {
                    Err(StorageError::Corrupted(format!(
                        "key {} does not sort after the key before it ({})",
                        printable_key(&key),
                        printable_key(last)
                    )))
                }
                _ => {
                    self.last = Some(key.clone());
                    Ok((key, value))
                }
            },
            Err(err) => Err(err),
        };
        self.failed |= item.is_err();
        Some(item)
    }
}

/// The reads of a point-in-time view ([`Engine::view`]); the same contract as the engine's.
pub trait EngineView: Send {
    /// Reads one key as of the view.
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError>;

    /// Reads the keys in `[start, end)` in `order` as of the view, at most `limit` of them.
    fn scan(
        &self,
        start: &[u8],
        end: &[u8],
        order: ScanOrder,
        limit: usize,
    ) -> Result<Vec<KeyValue>, StorageError>;

    /// A forward scan that also stops after the pair that brings the bytes read (keys and
    /// values) to `bytes_max`; it always returns at least one pair when the range holds one.
    /// A step of a long read is so bounded in bytes as well as in pairs, whatever the values'
    /// sizes. The default cuts a plain scan (right for an engine that holds its values in
    /// memory anyway); [`RocksEngine`]'s view stops reading.
    fn scan_bounded(
        &self,
        start: &[u8],
        end: &[u8],
        limit: usize,
        bytes_max: usize,
    ) -> Result<Vec<KeyValue>, StorageError> {
        let mut pairs = self.scan(start, end, ScanOrder::Forward, limit)?;
        let mut bytes = 0usize;
        if let Some(cut) = pairs.iter().position(|(key, value)| {
            bytes = bytes.saturating_add(key.len() + value.len());
            bytes >= bytes_max
        }) {
            pairs.truncate(cut + 1);
        }
        Ok(pairs)
    }
}

/// Bytes (keys and values) one step of [`scan_in_steps`] reads at most, besides the one pair
/// that crosses it.
pub const STEP_BYTES_MAX: usize = 4 << 20;

/// Scans `[start, end)` of `view` forward in pieces of at most `step` pairs and about
/// [`STEP_BYTES_MAX`] bytes, handing each piece to `each`; stops early when `each` answers false.
/// Memory: one piece at a time.
pub fn scan_in_steps<V: EngineView + ?Sized>(
    view: &V,
    start: &[u8],
    end: &[u8],
    step: usize,
    mut each: impl FnMut(Vec<KeyValue>) -> Result<bool, StorageError>,
) -> Result<(), StorageError> {
    let step = step.max(1);
    let mut from = start.to_vec();
    loop {
        let piece = view.scan_bounded(&from, end, step, STEP_BYTES_MAX)?;
        let bytes: usize = piece.iter().map(|(k, v)| k.len() + v.len()).sum();
        let last = match piece.last() {
            Some((key, _)) if piece.len() == step || bytes >= STEP_BYTES_MAX => Some(key.clone()),
            _ => None,
        };
        if !each(piece)? {
            return Ok(());
        }
        match last {
            Some(mut key) => {
                // The smallest key after `key`.
                key.push(0);
                from = key;
            }
            None => return Ok(()),
        }
    }
}

impl<E: Engine + ?Sized> Engine for std::sync::Arc<E> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        (**self).get(key)
    }
    fn scan(
        &self,
        start: &[u8],
        end: &[u8],
        order: ScanOrder,
        limit: usize,
    ) -> Result<Vec<KeyValue>, StorageError> {
        (**self).scan(start, end, order, limit)
    }
    fn write(&self, batch: WriteBatch) -> Result<(), StorageError> {
        (**self).write(batch)
    }
    fn sync(&self) -> Result<(), StorageError> {
        (**self).sync()
    }
    fn write_durable(&self, batch: WriteBatch) -> Result<(), StorageError> {
        (**self).write_durable(batch)
    }
    fn view(&self) -> Box<dyn EngineView + '_> {
        (**self).view()
    }
    fn replace_range(
        &self,
        start: &[u8],
        end: &[u8],
        pairs: &mut dyn Iterator<Item = Result<KeyValue, StorageError>>,
    ) -> Result<(), StorageError> {
        (**self).replace_range(start, end, pairs)
    }
}

/// The smallest key strictly greater than every key that starts with `prefix`, or `None` when no
/// such key exists (the prefix is all `0xff`). Used to turn a prefix into a half-open range.
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}
