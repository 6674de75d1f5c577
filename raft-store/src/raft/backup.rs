//! Backups: a consistent copy of the state machine taken from a live node, and the seeding of a
//! fresh node's storage from such a copy.
//!
//! A backup is the snapshot format ([`super::snapshot`]): the whole state-machine range as of one
//! point in time, including the applied log id and the membership of the cluster it came from.
//! Restoring writes it into an empty store as an installed snapshot whose membership is replaced
//! by the new cluster's voters, and marks the log as purged up to the applied id, so the new
//! cluster starts at the backup's log index (new entries get higher commit indexes than every
//! restored event) without any `init`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufReader, Cursor, Read, Seek, SeekFrom};
use std::sync::Arc;

use openraft::storage::{RaftLogReader, RaftLogStorage, RaftStateMachine};
use openraft::BasicNode;

use super::keys;
use super::log_store::{stage_purge, stage_vote};
use super::snapshot;
use super::types::{LogId, Membership, SnapshotMeta, StoredMembership, Vote};
use super::{LogStore, NodeId, StateMachine};
use crate::chain::{
    check_copied_format, keys as chain_keys, ChainStore, OpenError, StoreConfig, FORMAT_VERSION,
};
use crate::engine::{Engine, EngineView, KeyValue, WriteBatch, WriteOp};
use chainstore_model::StorageError;

/// A consistent copy of one node's state machine.
#[derive(Debug, Clone)]
pub struct Backup {
    /// The last log entry the copy includes.
    pub last_log_id: LogId,
    /// The encoded copy, as written to a backup file.
    pub data: Vec<u8>,
}

/// Why a backup could not be taken or restored.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// The node has applied nothing yet: there is nothing to copy.
    #[error("the node has applied no log entry yet")]
    Empty,
    /// The backup file does not decode, or holds no applied log id.
    #[error("not a chainstore backup: {0}")]
    Invalid(String),
    /// The target store already holds Raft state; restoring would overwrite a live member.
    #[error("the data directory already holds a node's state; restore needs an empty one")]
    NotEmpty,
    /// The voters given do not include the node being restored, or are empty.
    #[error("{0}")]
    BadVoters(String),
    /// The store could not be opened.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// Storage failed.
    #[error("storage error: {0}")]
    Storage(String),
}

fn storage(err: impl std::fmt::Display) -> BackupError {
    BackupError::Storage(err.to_string())
}

/// A backup being taken: its point in time is fixed when it begins (one engine view), and it is
/// written out in bounded pieces, so taking one costs memory independent of the store's size.
pub struct BackupWriter<'a> {
    view: Box<dyn EngineView + 'a>,
    last_log_id: LogId,
}

impl std::fmt::Debug for BackupWriter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackupWriter")
            .field("last_log_id", &self.last_log_id)
            .finish_non_exhaustive()
    }
}

impl BackupWriter<'_> {
    /// The last log entry the backup includes.
    pub fn last_log_id(&self) -> LogId {
        self.last_log_id
    }

    /// Writes the backup file to `out`; returns `out`.
    pub fn write_to<W: std::io::Write>(self, out: W) -> Result<W, BackupError> {
        let (out, _) = snapshot::write_view(&*self.view, FORMAT_VERSION, out).map_err(storage)?;
        Ok(out)
    }
}

/// Begins a consistent copy of the state machine of `engine` as of now.
pub fn begin_backup<E: Engine + ?Sized>(engine: &E) -> Result<BackupWriter<'_>, BackupError> {
    let view = engine.view();
    let (applied, _) = StateMachine::<E>::applied_in(&*view).map_err(storage)?;
    let last_log_id = applied.ok_or(BackupError::Empty)?;
    Ok(BackupWriter { view, last_log_id })
}

/// Copies the state machine of `engine` as of now into memory (one point in time).
pub fn take_backup<E: Engine + ?Sized>(engine: &E) -> Result<Backup, BackupError> {
    let writer = begin_backup(engine)?;
    let last_log_id = writer.last_log_id();
    Ok(Backup {
        last_log_id,
        data: writer.write_to(Vec::new())?,
    })
}

/// Reads the applied log id a backup file holds, checking that the whole file decodes and that
/// its format is one this build reads.
pub fn inspect_backup(data: &[u8]) -> Result<LogId, BackupError> {
    verify_checked(data)?.ok_or_else(|| BackupError::Invalid("it holds no applied log id".into()))
}

/// Reads a whole snapshot or backup file from `input` and checks it, holding one chunk at a
/// time: every checksum and the trailer, a header naming this build's store format, keys in
/// strictly ascending order, and a format record among the pairs that agrees with the header.
/// Every install and restore runs this before it changes anything. Returns the applied log id
/// the file records.
pub(crate) fn verify_checked<R: Read>(input: R) -> Result<Option<LogId>, BackupError> {
    let invalid = |e: StorageError| BackupError::Invalid(e.to_string());
    let mut reader = snapshot::Reader::new(input).map_err(invalid)?;
    if reader.summary().store_format != FORMAT_VERSION {
        return Err(OpenError::UnknownFormat {
            found: reader.summary().store_format,
        }
        .into());
    }
    let mut last: Option<Vec<u8>> = None;
    let mut format_record = None;
    let mut applied_pairs = Vec::new();
    while let Some(chunk) = reader.next_chunk().map_err(invalid)? {
        for (key, value) in chunk {
            if last.as_ref().is_some_and(|last| key <= *last) {
                return Err(BackupError::Invalid(
                    "its keys are not in ascending order".into(),
                ));
            }
            if key.as_slice() == chain_keys::FORMAT {
                format_record = Some(value);
            } else if key.as_slice() == keys::APPLIED || key.as_slice() == keys::MEMBERSHIP {
                applied_pairs.push((key.clone(), value));
            }
            last = Some(key);
        }
    }
    check_copied_format(format_record.as_deref())?;
    let (applied, _) = StateMachine::<dyn Engine>::applied_from(&applied_pairs)
        .map_err(|e| BackupError::Invalid(e.to_string()))?;
    Ok(applied)
}

/// The pairs an install writes, read lazily from a file that [`verify_checked`] accepted: the
/// file's pairs inside the state machine's range, merged in key order with `overrides` (which
/// replace a pair of the same key). A read or checksum error ends the stream with that error,
/// which makes the install refuse before anything changed.
pub(crate) struct InstallPairs<R: Read> {
    reader: snapshot::Reader<R>,
    chunk: std::vec::IntoIter<KeyValue>,
    next_from_file: Option<KeyValue>,
    overrides: std::iter::Peekable<std::vec::IntoIter<KeyValue>>,
    /// Every override's key: the file's pair under such a key is dropped.
    replaced: Vec<Vec<u8>>,
    failed: bool,
}

impl<R: Read> InstallPairs<R> {
    /// Pairs of the file read from `input`, with `overrides` (sorted by key) merged in.
    pub(crate) fn new(input: R, mut overrides: Vec<KeyValue>) -> Result<Self, StorageError> {
        overrides.sort_by(|a, b| a.0.cmp(&b.0));
        let replaced = overrides.iter().map(|(key, _)| key.clone()).collect();
        Ok(Self {
            replaced,
            reader: snapshot::Reader::new(input)?,
            chunk: Vec::new().into_iter(),
            next_from_file: None,
            overrides: overrides.into_iter().peekable(),
            failed: false,
        })
    }

    /// The file's next pair in the state machine's range, not replaced by an override.
    fn file_pair(&mut self) -> Result<Option<KeyValue>, StorageError> {
        loop {
            match self.chunk.next() {
                Some((key, value)) => {
                    let in_range =
                        key.as_slice() >= keys::SM_START && key.as_slice() < keys::SM_END;
                    if in_range && !self.replaced.contains(&key) {
                        return Ok(Some((key, value)));
                    }
                }
                None => match self.reader.next_chunk()? {
                    Some(chunk) => self.chunk = chunk.into_iter(),
                    None => return Ok(None),
                },
            }
        }
    }
}

impl<R: Read> Iterator for InstallPairs<R> {
    type Item = Result<KeyValue, StorageError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        if self.next_from_file.is_none() {
            match self.file_pair() {
                Ok(pair) => self.next_from_file = pair,
                Err(err) => {
                    self.failed = true;
                    return Some(Err(err));
                }
            }
        }
        let take_override = match (self.overrides.peek(), &self.next_from_file) {
            (Some((over, _)), Some((key, _))) => over < key,
            (Some(_), None) => true,
            (None, _) => false,
        };
        if take_override {
            self.overrides.next().map(Ok)
        } else {
            self.next_from_file.take().map(Ok)
        }
    }
}

/// Replaces the state machine on `engine` with the file read from `source`, with `overrides`
/// (the applied id and membership an install records, plus, for a restore, the log's purge
/// marker and vote). Two passes over the file: the first checks all of it; only then does the
/// second stream its pairs into ONE [`Engine::replace_range`], so a reader or a crash sees the
/// old state or the new one, never a mixture, and memory holds a chunk at a time.
pub(crate) fn install_from<E, R>(
    engine: &E,
    source: &mut R,
    overrides: Vec<KeyValue>,
) -> Result<(), BackupError>
where
    E: Engine + ?Sized,
    R: Read + Seek,
{
    let rewind = |source: &mut R| {
        source
            .seek(SeekFrom::Start(0))
            .map(|_| ())
            .map_err(|e| BackupError::Storage(format!("reading the snapshot: {e}")))
    };
    rewind(source)?;
    verify_checked(BufReader::with_capacity(1 << 20, &mut *source))?;
    rewind(source)?;
    let mut pairs = InstallPairs::new(BufReader::with_capacity(1 << 20, &mut *source), overrides)
        .map_err(storage)?;
    engine
        .replace_range(keys::SM_START, keys::SM_END, &mut pairs)
        .map_err(storage)
}

/// The pairs a batch of puts writes (the vote and purge marker a restore records).
fn puts_of(batch: WriteBatch) -> Vec<KeyValue> {
    batch
        .into_ops()
        .into_iter()
        .filter_map(|op| match op {
            WriteOp::Put { key, value } => Some((key, value)),
            // The purge's range delete of the log: the store is empty, there is nothing to
            // delete.
            WriteOp::Delete { .. } | WriteOp::DeleteRange { .. } => None,
        })
        .collect()
}

/// The state-machine records an install writes from a snapshot's meta.
pub(crate) fn meta_pairs(meta: &SnapshotMeta) -> Result<Vec<KeyValue>, BackupError> {
    let json = |value: serde_json::Result<Vec<u8>>| value.map_err(storage);
    Ok(vec![
        (
            keys::APPLIED.to_vec(),
            json(serde_json::to_vec(&meta.last_log_id))?,
        ),
        (
            keys::MEMBERSHIP.to_vec(),
            json(serde_json::to_vec(&meta.last_membership))?,
        ),
    ])
}

/// Seeds the empty store on `engine` for node `node_id` from the backup file `data`, as a member
/// of a new cluster whose voters are `voters` (id → address). See [`restore_backup_from`].
pub async fn restore_backup<E: Engine + ?Sized>(
    engine: Arc<E>,
    node_id: NodeId,
    voters: &BTreeMap<NodeId, String>,
    data: Vec<u8>,
) -> Result<LogId, BackupError> {
    restore_backup_from(engine, node_id, voters, &mut Cursor::new(data)).await
}

/// Seeds the empty store on `engine` for node `node_id` from the backup file read from `source`,
/// as a member of a new cluster whose voters are `voters` (id → address). Every voter of the new
/// cluster is restored from the same file; they then elect a leader among themselves. Returns
/// the log id the cluster resumes after. The file is read twice, a chunk at a time: memory does
/// not grow with the backup's size.
pub async fn restore_backup_from<E: Engine + ?Sized, R: Read + Seek>(
    engine: Arc<E>,
    node_id: NodeId,
    voters: &BTreeMap<NodeId, String>,
    source: &mut R,
) -> Result<LogId, BackupError> {
    if !voters.contains_key(&node_id) {
        return Err(BackupError::BadVoters(format!(
            "the voters must include this node ({node_id})"
        )));
    }
    source
        .seek(SeekFrom::Start(0))
        .map_err(|e| BackupError::Storage(format!("reading the backup: {e}")))?;
    let last_log_id = verify_checked(BufReader::with_capacity(1 << 20, &mut *source))?
        .ok_or_else(|| BackupError::Invalid("it holds no applied log id".into()))?;

    let store = Arc::new(ChainStore::open(
        Arc::clone(&engine),
        StoreConfig::default(),
    )?);
    let mut log_store = LogStore::new(Arc::clone(&engine));
    let mut state_machine = StateMachine::new(store);
    let log_state = log_store.get_log_state().await.map_err(storage)?;
    let vote = log_store.read_vote().await.map_err(storage)?;
    let (applied, _) = state_machine.applied_state().await.map_err(storage)?;
    if log_state.last_log_id.is_some() || vote.is_some() || applied.is_some() {
        return Err(BackupError::NotEmpty);
    }

    let ids: BTreeSet<NodeId> = voters.keys().copied().collect();
    let nodes: BTreeMap<NodeId, BasicNode> = voters
        .iter()
        .map(|(id, addr)| (*id, BasicNode::new(addr)))
        .collect();
    let membership =
        Membership::new(vec![ids], nodes).map_err(|e| BackupError::BadVoters(e.to_string()))?;
    let meta = SnapshotMeta {
        last_log_id: Some(last_log_id),
        last_membership: StoredMembership::new(Some(last_log_id), membership),
    };
    // The installed state, the log purged up to the backup's last entry (the log resumes after
    // it) and the vote, in ONE durable replacement: a crash leaves the store empty (restore
    // again) or restored, never a state machine without its purge marker or vote. The vote
    // carries the backup's term, so the first election of the new cluster runs in a later term
    // than every restored entry.
    let mut log_records = WriteBatch::new();
    stage_purge(&mut log_records, &last_log_id).map_err(storage)?;
    stage_vote(
        &mut log_records,
        &Vote::new(last_log_id.leader_id.term, node_id),
    )
    .map_err(storage)?;
    let mut overrides = meta_pairs(&meta)?;
    overrides.extend(puts_of(log_records));
    install_from(&*engine, source, overrides)?;
    Ok(last_log_id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::codec;

    #[test]
    fn a_backup_without_a_readable_format_record_is_refused_before_anything_else() {
        let other = b"s/anything".to_vec();
        let without = snapshot::encode(FORMAT_VERSION, &[(other.clone(), b"x".to_vec())]).unwrap();
        assert!(matches!(
            inspect_backup(&without),
            Err(BackupError::Open(OpenError::NoFormatRecord))
        ));
        let future = snapshot::encode(
            FORMAT_VERSION,
            &[
                (chain_keys::FORMAT.to_vec(), codec::encode_format(99)),
                (other.clone(), b"x".to_vec()),
            ],
        )
        .unwrap();
        assert!(matches!(
            inspect_backup(&future),
            Err(BackupError::Open(OpenError::UnknownFormat { found: 99 }))
        ));
    }
}
