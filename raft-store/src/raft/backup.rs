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
use std::sync::Arc;

use openraft::storage::{RaftLogStorage, RaftStateMachine};
use openraft::{BasicNode, LogId, Membership, SnapshotMeta, StoredMembership, Vote};

use super::log_store::{stage_purge, stage_vote};
use super::snapshot;
use super::state_machine::install_batch;
use super::{LogStore, NodeId, StateMachine};
use crate::chain::{check_copied_format, ChainStore, OpenError, StoreConfig, FORMAT_VERSION};
use crate::engine::{Engine, EngineView, KeyValue};

/// A consistent copy of one node's state machine.
#[derive(Debug, Clone)]
pub struct Backup {
    /// The last log entry the copy includes.
    pub last_log_id: LogId<NodeId>,
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
    last_log_id: LogId<NodeId>,
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
    pub fn last_log_id(&self) -> LogId<NodeId> {
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
pub fn inspect_backup(data: &[u8]) -> Result<LogId<NodeId>, BackupError> {
    let pairs = decode_checked(data)?;
    let (applied, _) = StateMachine::<dyn Engine>::applied_from(&pairs)
        .map_err(|e| BackupError::Invalid(e.to_string()))?;
    applied.ok_or_else(|| BackupError::Invalid("it holds no applied log id".into()))
}

/// Every pair of a snapshot or backup file, once the whole file has passed its checks: every
/// checksum and the trailer, a header naming this build's store format, and a format record
/// among the pairs that agrees with it.
pub(crate) fn decode_checked(data: &[u8]) -> Result<Vec<KeyValue>, BackupError> {
    let (summary, pairs) =
        snapshot::decode(data).map_err(|e| BackupError::Invalid(e.to_string()))?;
    if summary.store_format != FORMAT_VERSION {
        return Err(OpenError::UnknownFormat {
            found: summary.store_format,
        }
        .into());
    }
    check_copied_format(&pairs)?;
    Ok(pairs)
}

/// Seeds the empty store on `engine` for node `node_id` from `data`, as a member of a new cluster
/// whose voters are `voters` (id → address). Every voter of the new cluster is restored from the
/// same file; they then elect a leader among themselves. Returns the log id the cluster resumes
/// after.
pub async fn restore_backup<E: Engine + ?Sized>(
    engine: Arc<E>,
    node_id: NodeId,
    voters: &BTreeMap<NodeId, String>,
    data: Vec<u8>,
) -> Result<LogId<NodeId>, BackupError> {
    if !voters.contains_key(&node_id) {
        return Err(BackupError::BadVoters(format!(
            "the voters must include this node ({node_id})"
        )));
    }
    let pairs = decode_checked(&data)?;
    drop(data);
    let (applied, _) = StateMachine::<dyn Engine>::applied_from(&pairs)
        .map_err(|e| BackupError::Invalid(e.to_string()))?;
    let last_log_id =
        applied.ok_or_else(|| BackupError::Invalid("it holds no applied log id".into()))?;

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
    let membership = Membership::new(vec![ids], nodes);
    let meta = SnapshotMeta {
        last_log_id: Some(last_log_id),
        last_membership: StoredMembership::new(Some(last_log_id), membership),
        snapshot_id: format!("restored-{}", last_log_id.index),
    };
    // The installed state, the log purged up to the backup's last entry (the log resumes after
    // it) and the vote, in ONE durable batch: a crash leaves the store empty (restore again) or
    // restored, never a state machine without its purge marker or vote. The vote carries the
    // backup's term, so the first election of the new cluster runs in a later term than every
    // restored entry.
    let mut batch = install_batch(&meta, pairs).map_err(storage)?;
    stage_purge(&mut batch, &last_log_id).map_err(storage)?;
    stage_vote(&mut batch, &Vote::new(last_log_id.leader_id.term, node_id)).map_err(storage)?;
    engine.write_durable(batch).map_err(storage)?;
    Ok(last_log_id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::{codec, keys as chain_keys};

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
