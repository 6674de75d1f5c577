//! The Raft state machine: the chain store, applied one entry per atomic batch.

use std::io::Cursor;
use std::sync::{Arc, Mutex};

use openraft::storage::RaftStateMachine;
use openraft::{
    AnyError, Entry, EntryPayload, ErrorSubject, ErrorVerb, LogId, RaftSnapshotBuilder, Snapshot,
    SnapshotMeta, StorageError, StorageIOError, StoredMembership,
};

use super::backup::decode_checked;
use super::keys;
use super::snapshot;
use super::types::{Command, CommandResult, Rejection, TypeConfig};
use super::NodeId;
use crate::chain::{ApplyError, ChainStore, FORMAT_VERSION};
use crate::engine::{Engine, EngineView, WriteBatch};

type Membership = StoredMembership<NodeId, openraft::BasicNode>;

fn sm_error(verb: ErrorVerb, err: impl std::error::Error + 'static) -> StorageError<NodeId> {
    StorageIOError::new(ErrorSubject::StateMachine, verb, AnyError::new(&err)).into()
}

fn snapshot_error(verb: ErrorVerb, err: impl std::error::Error + 'static) -> StorageError<NodeId> {
    StorageIOError::new(ErrorSubject::Snapshot(None), verb, AnyError::new(&err)).into()
}

/// The last snapshot built or installed, kept in memory. openraft rebuilds one at start-up when
/// the log has been purged and none is held.
#[derive(Clone)]
struct HeldSnapshot {
    meta: SnapshotMeta<NodeId, openraft::BasicNode>,
    data: Vec<u8>,
}

/// The state machine over the chain store. Cheap to clone: the clone is the snapshot builder.
pub struct StateMachine<E: ?Sized> {
    store: Arc<ChainStore<Arc<E>>>,
    current: Arc<Mutex<Option<HeldSnapshot>>>,
}

impl<E: ?Sized> Clone for StateMachine<E> {
    fn clone(&self) -> Self {
        Self {
            store: Arc::clone(&self.store),
            current: Arc::clone(&self.current),
        }
    }
}

impl<E: Engine + ?Sized> StateMachine<E> {
    /// A state machine over `store`, whose engine the log store shares.
    pub fn new(store: Arc<ChainStore<Arc<E>>>) -> Self {
        Self {
            store,
            current: Arc::new(Mutex::new(None)),
        }
    }

    /// The chain store, for reads.
    pub fn store(&self) -> &Arc<ChainStore<Arc<E>>> {
        &self.store
    }

    fn engine(&self) -> &Arc<E> {
        self.store.engine()
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Option<HeldSnapshot>> {
        // A panic while holding the lock cannot leave a half-written Option.
        self.current
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Applies one entry: its effect (if any) and its log id in one batch.
    fn apply_entry(
        &self,
        entry: &Entry<TypeConfig>,
    ) -> Result<CommandResult, StorageError<NodeId>> {
        let mut batch = WriteBatch::new();
        let result = match &entry.payload {
            EntryPayload::Blank => CommandResult::Nothing,
            EntryPayload::Normal(Command::Effect(effect)) => {
                match self.store.stage_effect(effect, entry.log_id.index) {
                    Ok((effect_batch, applied)) => {
                        batch.extend(effect_batch);
                        CommandResult::Applied(applied)
                    }
                    Err(ApplyError::Storage(err)) => {
                        return Err(StorageIOError::apply(entry.log_id, AnyError::new(&err)).into())
                    }
                    Err(ApplyError::Forked(fork)) => {
                        CommandResult::Rejected(Rejection::Forked(fork))
                    }
                    Err(ApplyError::HeadMoved { expected, found }) => {
                        CommandResult::Rejected(Rejection::HeadMoved { expected, found })
                    }
                    Err(ApplyError::Malformed(message)) => {
                        CommandResult::Rejected(Rejection::Malformed(message))
                    }
                }
            }
            EntryPayload::Membership(membership) => {
                let stored = Membership::new(Some(entry.log_id), membership.clone());
                batch.put(keys::MEMBERSHIP, to_json(&stored)?);
                CommandResult::Nothing
            }
        };
        batch.put(keys::APPLIED, to_json(&Some(entry.log_id))?);
        self.engine()
            .write(batch)
            .map_err(|e| sm_error(ErrorVerb::Write, e))?;
        Ok(result)
    }

    /// The applied log id and membership, read from stored pairs.
    pub(crate) fn applied_from(
        pairs: &[(Vec<u8>, Vec<u8>)],
    ) -> Result<(Option<LogId<NodeId>>, Membership), StorageError<NodeId>> {
        let mut applied = None;
        let mut membership = Membership::default();
        for (key, value) in pairs {
            if key.as_slice() == keys::APPLIED {
                applied = serde_json::from_slice::<Option<LogId<NodeId>>>(value)
                    .map_err(|e| sm_error(ErrorVerb::Read, e))?;
            } else if key.as_slice() == keys::MEMBERSHIP {
                membership =
                    serde_json::from_slice(value).map_err(|e| sm_error(ErrorVerb::Read, e))?;
            }
        }
        Ok((applied, membership))
    }

    /// The applied log id and membership as `view` sees them.
    pub(crate) fn applied_in<V: EngineView + ?Sized>(
        view: &V,
    ) -> Result<(Option<LogId<NodeId>>, Membership), StorageError<NodeId>> {
        let mut pairs = Vec::with_capacity(2);
        for key in [keys::APPLIED, keys::MEMBERSHIP] {
            if let Some(value) = view.get(key).map_err(|e| sm_error(ErrorVerb::Read, e))? {
                pairs.push((key.to_vec(), value));
            }
        }
        Self::applied_from(&pairs)
    }
}

/// The ONE batch that replaces the whole state-machine range with a snapshot's pairs: a reader
/// sees the old state or the new one, never a mixture, and a crash keeps one or the other.
pub(crate) fn install_batch(
    meta: &SnapshotMeta<NodeId, openraft::BasicNode>,
    pairs: Vec<(Vec<u8>, Vec<u8>)>,
) -> Result<WriteBatch, StorageError<NodeId>> {
    let mut batch = WriteBatch::new();
    batch.delete_range(keys::SM_START, keys::SM_END);
    for (key, value) in pairs {
        if key.as_slice() >= keys::SM_START && key.as_slice() < keys::SM_END {
            batch.put(key, value);
        }
    }
    batch.put(keys::APPLIED, to_json(&meta.last_log_id)?);
    batch.put(keys::MEMBERSHIP, to_json(&meta.last_membership)?);
    Ok(batch)
}

fn to_json<T: serde::Serialize>(value: &T) -> Result<Vec<u8>, StorageError<NodeId>> {
    serde_json::to_vec(value).map_err(|e| sm_error(ErrorVerb::Write, e))
}

impl<E: Engine + ?Sized> RaftSnapshotBuilder<TypeConfig> for StateMachine<E> {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        // One view: the pairs, the applied id and the membership all come from one point in
        // time; the view is read in bounded steps straight into the file format.
        let view = self.engine().view();
        let (last_log_id, last_membership) = Self::applied_in(&*view)?;
        let (data, _) = snapshot::write_view(&*view, FORMAT_VERSION, Vec::new())
            .map_err(|e| snapshot_error(ErrorVerb::Read, e))?;
        drop(view);
        let snapshot_id = match &last_log_id {
            Some(id) => format!(
                "{}-{}-{}",
                id.leader_id.term, id.leader_id.node_id, id.index
            ),
            None => "empty".to_string(),
        };
        let meta = SnapshotMeta {
            last_log_id,
            last_membership,
            snapshot_id,
        };
        *self.held() = Some(HeldSnapshot {
            meta: meta.clone(),
            data: data.clone(),
        });
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl<E: Engine + ?Sized> RaftStateMachine<TypeConfig> for StateMachine<E> {
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, Membership), StorageError<NodeId>> {
        Self::applied_in(&*self.engine().view())
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<CommandResult>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + Send,
        I::IntoIter: Send,
    {
        entries
            .into_iter()
            .map(|entry| self.apply_entry(&entry))
            .collect()
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<Cursor<Vec<u8>>>, StorageError<NodeId>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, openraft::BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<NodeId>> {
        let data = snapshot.into_inner();
        // Verified whole (every checksum, the trailer, the store format) before anything is
        // written: a damaged snapshot or one of another format leaves the old state in place.
        let pairs = decode_checked(&data).map_err(|e| snapshot_error(ErrorVerb::Read, e))?;
        let batch = install_batch(meta, pairs)?;
        self.engine()
            .write_durable(batch)
            .map_err(|e| snapshot_error(ErrorVerb::Write, e))?;
        *self.held() = Some(HeldSnapshot {
            meta: meta.clone(),
            data,
        });
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        Ok(self.held().clone().map(|held| Snapshot {
            meta: held.meta,
            snapshot: Box::new(Cursor::new(held.data)),
        }))
    }
}
