//! One Raft group's keyspace inside an engine that all of a node's groups share.
//!
//! A node that holds several shards keeps every one of them in ONE engine (one RocksDB: one
//! write-ahead log, one set of memtables, one block cache), so the fsync that makes one group's
//! log entries durable makes every other group's durable too, and the memory an engine costs is
//! paid once per node rather than once per group. Each group sees only its own keys through a
//! [`GroupEngine`], which prefixes them:
//!
//! | keys of the shared engine | whose |
//! |---|---|
//! | below `y` | group 0, unprefixed: the layout of a single-group store, which so opens as group 0 unchanged |
//! | `y…` | the node's own records (reserved; no group writes there) |
//! | `z` ‖ group (u32, big-endian) ‖ key | group ≥ 1 |
//!
//! A prefix rather than a RocksDB column family per group: the [`Engine`] contract stays one
//! ordered map, which both engines and the in-memory engine's crash model implement alike;
//! column families would each hold memtables of their own (memory that grows with the number
//! of groups) and need the engine interface to name them. A group's keys are contiguous either
//! way, so its ranges stay single scans and its purges single range deletes.
//!
//! Values are sealed by the shared engine under the full (prefixed) key, so a value copied from
//! one group into another reads back as damaged.

use std::sync::Arc;

use super::{Engine, EngineView, KeyValue, ScanOrder, StorageError, WriteBatch, WriteOp};

/// The first key past group 0's keyspace (the start of the node's own records).
const GROUP_0_END: &[u8] = b"y";
/// The byte that starts every key of a group other than 0.
const GROUP_TAG: u8 = b'z';

/// The part of a shared engine that holds one group's keys (see the module's documentation).
pub struct GroupEngine<E: ?Sized> {
    inner: Arc<E>,
    /// Put before every key of this group in the shared engine (empty for group 0).
    prefix: Vec<u8>,
}

impl<E: ?Sized> Clone for GroupEngine<E> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
            prefix: self.prefix.clone(),
        }
    }
}

impl<E: Engine + ?Sized> GroupEngine<E> {
    /// Group `group`'s keys in `inner`.
    pub fn new(inner: Arc<E>, group: u32) -> Self {
        let prefix = match group {
            0 => Vec::new(),
            _ => {
                let mut prefix = Vec::with_capacity(5);
                prefix.push(GROUP_TAG);
                prefix.extend_from_slice(&group.to_be_bytes());
                prefix
            }
        };
        Self { inner, prefix }
    }

    /// `key` in the shared engine, or an error when group 0 names a key outside its keyspace
    /// (a key of the node's records or of another group).
    fn key(&self, key: &[u8]) -> Result<Vec<u8>, StorageError> {
        if self.prefix.is_empty() {
            if key >= GROUP_0_END {
                return Err(StorageError::Corrupted(format!(
                    "key {} lies outside group 0's keyspace",
                    super::printable_key(key)
                )));
            }
            return Ok(key.to_vec());
        }
        Ok(self.prefixed(key))
    }

    fn prefixed(&self, key: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.prefix.len() + key.len());
        out.extend_from_slice(&self.prefix);
        out.extend_from_slice(key);
        out
    }

    /// The range `[start, end)` of this group in the shared engine; `None` when it is empty
    /// once group 0's range is cut at its end.
    fn range(&self, start: &[u8], end: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
        let range = if self.prefix.is_empty() {
            (
                start.min(GROUP_0_END).to_vec(),
                end.min(GROUP_0_END).to_vec(),
            )
        } else {
            (self.prefixed(start), self.prefixed(end))
        };
        (range.0 < range.1).then_some(range)
    }

    /// The pairs `read` returns from this group's part of `[start, end)` in the shared engine,
    /// with the group's prefix taken off their keys.
    fn read_range(
        &self,
        start: &[u8],
        end: &[u8],
        read: impl FnOnce(&[u8], &[u8]) -> Result<Vec<KeyValue>, StorageError>,
    ) -> Result<Vec<KeyValue>, StorageError> {
        let Some((start, end)) = self.range(start, end) else {
            return Ok(Vec::new());
        };
        Ok(unprefixed(&self.prefix, read(&start, &end)?))
    }

    fn batch(&self, batch: WriteBatch) -> Result<WriteBatch, StorageError> {
        let mut out = WriteBatch::new();
        for op in batch.into_ops() {
            match op {
                WriteOp::Put { key, value } => out.put(self.key(&key)?, value),
                WriteOp::Delete { key } => out.delete(self.key(&key)?),
                WriteOp::DeleteRange { start, end } => {
                    if let Some((start, end)) = self.range(&start, &end) {
                        out.delete_range(start, end);
                    }
                }
            }
        }
        Ok(out)
    }
}

/// `pairs` read from the shared engine, with the group's prefix taken off their keys.
fn unprefixed(prefix: &[u8], mut pairs: Vec<KeyValue>) -> Vec<KeyValue> {
    if !prefix.is_empty() {
        for (key, _) in &mut pairs {
            key.drain(..prefix.len());
        }
    }
    pairs
}

impl<E: Engine + ?Sized> Engine for GroupEngine<E> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        self.inner.get(&self.key(key)?)
    }

    fn scan(
        &self,
        start: &[u8],
        end: &[u8],
        order: ScanOrder,
        limit: usize,
    ) -> Result<Vec<KeyValue>, StorageError> {
        self.read_range(start, end, |start, end| {
            self.inner.scan(start, end, order, limit)
        })
    }

    fn write(&self, batch: WriteBatch) -> Result<(), StorageError> {
        self.inner.write(self.batch(batch)?)
    }

    /// Syncs the shared engine: every group's writes become durable.
    fn sync(&self) -> Result<(), StorageError> {
        self.inner.sync()
    }

    fn write_durable(&self, batch: WriteBatch) -> Result<(), StorageError> {
        self.inner.write_durable(self.batch(batch)?)
    }

    fn view(&self) -> Box<dyn EngineView + '_> {
        Box::new(GroupView {
            inner: self.inner.view(),
            group: self,
        })
    }

    fn replace_range(
        &self,
        start: &[u8],
        end: &[u8],
        pairs: &mut dyn Iterator<Item = Result<KeyValue, StorageError>>,
    ) -> Result<(), StorageError> {
        // An empty range still writes its pairs: it deletes nothing, at the group's start.
        let (start, end) = self
            .range(start, end)
            .unwrap_or_else(|| (self.prefix.clone(), self.prefix.clone()));
        let mut prefixed = pairs.map(|pair| {
            let (key, value) = pair?;
            Ok((self.key(&key)?, value))
        });
        self.inner.replace_range(&start, &end, &mut prefixed)
    }
}

/// A point-in-time view of one group's keys.
struct GroupView<'a, E: ?Sized> {
    inner: Box<dyn EngineView + 'a>,
    group: &'a GroupEngine<E>,
}

impl<E: Engine + ?Sized> EngineView for GroupView<'_, E> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        self.inner.get(&self.group.key(key)?)
    }

    fn scan(
        &self,
        start: &[u8],
        end: &[u8],
        order: ScanOrder,
        limit: usize,
    ) -> Result<Vec<KeyValue>, StorageError> {
        self.group.read_range(start, end, |start, end| {
            self.inner.scan(start, end, order, limit)
        })
    }

    fn scan_bounded(
        &self,
        start: &[u8],
        end: &[u8],
        limit: usize,
        bytes_max: usize,
    ) -> Result<Vec<KeyValue>, StorageError> {
        let Some((mut from, end)) = self.group.range(start, end) else {
            return Ok(Vec::new());
        };
        // The budget counts the group's keys, unprefixed. The shared engine counts the prefix
        // too and so may stop early: ask again for the rest (each time the budget left shrinks
        // by more than the prefixes' share, so a few asks cover it).
        let mut out = Vec::new();
        let mut bytes = 0usize;
        while out.len() < limit {
            let (asked, budget) = (limit - out.len(), bytes_max.saturating_sub(bytes).max(1));
            let piece = self.inner.scan_bounded(&from, &end, asked, budget)?;
            let Some((last, _)) = piece.last() else {
                break;
            };
            from = last.clone();
            from.push(0);
            let read: usize = piece.iter().map(|(k, v)| k.len() + v.len()).sum();
            // Fewer pairs than asked, within the shared engine's budget: the range is read out.
            let exhausted = piece.len() < asked && read < budget;
            for pair in unprefixed(&self.group.prefix, piece) {
                bytes = bytes.saturating_add(pair.0.len() + pair.1.len());
                out.push(pair);
                if bytes >= bytes_max {
                    return Ok(out);
                }
            }
            if exhausted {
                break;
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::MemEngine;

    fn put(engine: &dyn Engine, key: &[u8], value: &[u8]) {
        let mut batch = WriteBatch::new();
        batch.put(key, value);
        engine.write(batch).expect("write");
    }

    fn keys(pairs: Vec<KeyValue>) -> Vec<Vec<u8>> {
        pairs.into_iter().map(|(key, _)| key).collect()
    }

    #[test]
    fn groups_share_one_engine_and_never_see_each_others_keys() {
        let shared = Arc::new(MemEngine::new());
        let groups: Vec<GroupEngine<MemEngine>> = (0..3)
            .map(|g| GroupEngine::new(Arc::clone(&shared), g))
            .collect();
        for (g, group) in groups.iter().enumerate() {
            for key in [&b"R/log/1"[..], b"a/applied", b"c/x"] {
                put(group, key, format!("{g}").as_bytes());
            }
        }
        for (g, group) in groups.iter().enumerate() {
            assert_eq!(
                group.get(b"c/x").expect("get"),
                Some(format!("{g}").into_bytes())
            );
            // The widest scan a group can ask for holds its own three keys, unprefixed.
            let all = group
                .scan(b"", &[0xff; 8], ScanOrder::Forward, usize::MAX)
                .expect("scan");
            assert_eq!(
                keys(all),
                [&b"R/log/1"[..], b"a/applied", b"c/x"].map(<[u8]>::to_vec)
            );
            let view = group.view();
            let reverse = view
                .scan(b"", &[0xff; 8], ScanOrder::Reverse, 1)
                .expect("scan");
            assert_eq!(keys(reverse), [b"c/x".to_vec()]);
        }
        // Group 0 is the unprefixed layout; the others lie under `z`.
        assert_eq!(shared.get(b"c/x").expect("get"), Some(b"0".to_vec()));
        assert_eq!(
            shared.get(b"z\0\0\0\x02c/x").expect("get"),
            Some(b"2".to_vec())
        );

        // A range delete and a range replacement in one group leave the others whole.
        let mut batch = WriteBatch::new();
        batch.delete_range(b"".to_vec(), vec![0xff; 8]);
        groups[1].write_durable(batch).expect("delete");
        assert!(groups[1]
            .scan(b"", &[0xff; 8], ScanOrder::Forward, usize::MAX)
            .expect("scan")
            .is_empty());
        let mut pairs = vec![Ok((b"b/new".to_vec(), b"new".to_vec()))].into_iter();
        groups[0]
            .replace_range(b"a", b"y", &mut pairs)
            .expect("replace");
        assert_eq!(
            keys(
                groups[0]
                    .scan(b"", b"z", ScanOrder::Forward, usize::MAX)
                    .expect("scan")
            ),
            [&b"R/log/1"[..], b"b/new"].map(<[u8]>::to_vec)
        );
        assert_eq!(groups[2].get(b"c/x").expect("get"), Some(b"2".to_vec()));
        assert_eq!(
            groups[2].get(b"a/applied").expect("get"),
            Some(b"2".to_vec())
        );
    }

    #[test]
    fn group_0_refuses_keys_outside_its_keyspace_and_changes_nothing() {
        let shared = Arc::new(MemEngine::new());
        let group = GroupEngine::new(Arc::clone(&shared), 0);
        let mut batch = WriteBatch::new();
        batch.put(b"a/ok".to_vec(), b"1".to_vec());
        batch.put(b"y/node".to_vec(), b"1".to_vec());
        assert!(matches!(
            group.write(batch),
            Err(StorageError::Corrupted(_))
        ));
        assert!(shared
            .scan(b"", &[0xff; 8], ScanOrder::Forward, usize::MAX)
            .expect("scan")
            .is_empty());
        assert!(group.get(b"z\0\0\0\x01c/x").is_err());
    }
}
