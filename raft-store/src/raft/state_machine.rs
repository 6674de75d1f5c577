//! The Raft state machine: the chain store, applied one entry per atomic batch.

use std::collections::BTreeSet;
use std::io::{self, BufWriter, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use futures_util::{Stream, TryStreamExt};
use openraft::storage::{EntryResponder, RaftStateMachine};
use openraft::RaftSnapshotBuilder;

use super::backup::{install_from, meta_pairs};
use super::keys;
use super::snapshot;
use super::snapshot_data::{SnapshotData, SnapshotDir};
use super::types::{
    Command, CommandResult, Entry, EntryPayload, LogId, Rejection, Snapshot, SnapshotMeta,
    StoredMembership, TypeConfig,
};
use crate::chain::{ApplyError, ChainStore, Effect, FORMAT_VERSION};
use crate::engine::{Engine, EngineView, WriteBatch};

/// A storage error as openraft takes it (it adds what was being done).
fn io_error(err: impl std::fmt::Display) -> io::Error {
    io::Error::other(err.to_string())
}

/// The last snapshot built or installed: its bytes in memory, or the file holding them.
#[derive(Clone)]
struct HeldSnapshot {
    meta: SnapshotMeta,
    data: Held,
}

#[derive(Clone)]
enum Held {
    Memory(Vec<u8>),
    File(PathBuf),
}

/// The state machine over the chain store. Cheap to clone: the clone is the snapshot builder.
pub struct StateMachine<E: ?Sized> {
    store: Arc<ChainStore<Arc<E>>>,
    current: Arc<Mutex<Option<HeldSnapshot>>>,
    /// Where snapshots are kept: `None` keeps them in memory.
    files: Option<Arc<SnapshotDir>>,
}

impl<E: ?Sized> Clone for StateMachine<E> {
    fn clone(&self) -> Self {
        Self {
            store: Arc::clone(&self.store),
            current: Arc::clone(&self.current),
            files: self.files.clone(),
        }
    }
}

impl<E: Engine + ?Sized> StateMachine<E> {
    /// A state machine over `store`, whose engine the log store shares, keeping its snapshots
    /// in memory (the simulations and tests).
    pub fn new(store: Arc<ChainStore<Arc<E>>>) -> Self {
        Self {
            store,
            current: Arc::new(Mutex::new(None)),
            files: None,
        }
    }

    /// A state machine that keeps its snapshots in files of `dir` and builds and installs them
    /// on blocking threads: a node's memory then does not grow with its state.
    pub fn with_snapshot_dir(store: Arc<ChainStore<Arc<E>>>, dir: SnapshotDir) -> Self {
        Self {
            files: Some(Arc::new(dir)),
            ..Self::new(store)
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

    /// Makes `data` the current snapshot; the file of the one it replaces goes (a reader that
    /// opened it keeps reading it).
    fn hold(&self, meta: SnapshotMeta, data: SnapshotData) {
        let data = match data {
            SnapshotData::Memory(cursor) => Held::Memory(cursor.into_inner()),
            SnapshotData::File(file) => Held::File(file.path().to_path_buf()),
        };
        let previous = self.held().replace(HeldSnapshot { meta, data });
        if let Some(HeldSnapshot {
            data: Held::File(path),
            ..
        }) = previous
        {
            let _ = std::fs::remove_file(path);
        }
    }

    /// Applies `entries` in order, each as [`RaftStateMachine::apply`] does; their results.
    pub fn apply_entries(
        &self,
        entries: impl IntoIterator<Item = Entry>,
    ) -> io::Result<Vec<CommandResult>> {
        entries
            .into_iter()
            .map(|entry| self.apply_entry(&entry))
            .collect()
    }

    /// Applies one entry: its effect (if any) and its log id in one batch.
    fn apply_entry(&self, entry: &Entry) -> io::Result<CommandResult> {
        let mut batch = WriteBatch::new();
        let result = match &entry.payload {
            EntryPayload::Blank => CommandResult::Nothing,
            EntryPayload::Normal(Command::Effect(effect)) => {
                self.stage(effect, entry.log_id, &mut batch)?
            }
            EntryPayload::Normal(Command::Effects(effects)) => {
                let mut results = Vec::with_capacity(effects.len());
                let mut seen = BTreeSet::new();
                for effect in effects {
                    // Effects of one entry are staged against the store as it was before the
                    // entry: two on one execution would not see each other.
                    results.push(if seen.insert(&effect.execution_id) {
                        self.stage(effect, entry.log_id, &mut batch)?
                    } else {
                        CommandResult::Rejected(Rejection::Malformed(format!(
                            "a second effect on execution {} in one entry",
                            effect.execution_id
                        )))
                    });
                }
                CommandResult::Each(results)
            }
            EntryPayload::Normal(Command::Rebuild(rebuild)) => {
                match self.store.stage_rebuild(rebuild, entry.log_id.index) {
                    Ok((rebuild_batch, record, applied)) => {
                        batch.extend(rebuild_batch);
                        CommandResult::Rebuilt(record, applied)
                    }
                    Err(err) => rejected(err, entry.log_id)?,
                }
            }
            EntryPayload::Membership(membership) => {
                let stored = StoredMembership::new(Some(entry.log_id), membership.clone());
                batch.put(keys::MEMBERSHIP, to_json(&stored)?);
                CommandResult::Nothing
            }
        };
        batch.put(keys::APPLIED, to_json(&Some(entry.log_id))?);
        self.engine().write(batch).map_err(io_error)?;
        Ok(result)
    }

    /// Stages one effect into `batch` at `log_id`'s index: its result, or the storage error
    /// that stops the apply.
    fn stage(
        &self,
        effect: &Effect,
        log_id: LogId,
        batch: &mut WriteBatch,
    ) -> io::Result<CommandResult> {
        Ok(match self.store.stage_effect(effect, log_id.index) {
            Ok((effect_batch, applied)) => {
                batch.extend(effect_batch);
                CommandResult::Applied(applied)
            }
            Err(err) => rejected(err, log_id)?,
        })
    }

    /// The applied log id and membership, read from stored pairs.
    pub(crate) fn applied_from(
        pairs: &[(Vec<u8>, Vec<u8>)],
    ) -> io::Result<(Option<LogId>, StoredMembership)> {
        let mut applied = None;
        let mut membership = StoredMembership::default();
        for (key, value) in pairs {
            if key.as_slice() == keys::APPLIED {
                applied = serde_json::from_slice::<Option<LogId>>(value).map_err(io_error)?;
            } else if key.as_slice() == keys::MEMBERSHIP {
                membership = serde_json::from_slice(value).map_err(io_error)?;
            }
        }
        Ok((applied, membership))
    }

    /// The applied log id and membership as `view` sees them.
    pub(crate) fn applied_in<V: EngineView + ?Sized>(
        view: &V,
    ) -> io::Result<(Option<LogId>, StoredMembership)> {
        let mut pairs = Vec::with_capacity(2);
        for key in [keys::APPLIED, keys::MEMBERSHIP] {
            if let Some(value) = view.get(key).map_err(io_error)? {
                pairs.push((key.to_vec(), value));
            }
        }
        Self::applied_from(&pairs)
    }
}

/// The result of an effect or a rebuild that was refused, or the storage error that stops the
/// apply.
fn rejected(err: ApplyError, log_id: LogId) -> io::Result<CommandResult> {
    Ok(CommandResult::Rejected(match err {
        ApplyError::Storage(err) => {
            return Err(io::Error::other(format!(
                "applying the entry at {}: {err}",
                log_id.index
            )))
        }
        ApplyError::Forked(fork) => Rejection::Forked(fork),
        ApplyError::HeadMoved { expected, found } => Rejection::HeadMoved { expected, found },
        ApplyError::Malformed(message) => Rejection::Malformed(message),
    }))
}

fn to_json<T: serde::Serialize>(value: &T) -> io::Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(io_error)
}

/// Writes the state machine as one view sees it into `out`: the pairs, the applied id and the
/// membership all come from one point in time, read in bounded steps straight into the file
/// format.
fn build_into<E: Engine + ?Sized>(
    engine: &E,
    mut out: SnapshotData,
) -> io::Result<(SnapshotMeta, SnapshotData)> {
    let view = engine.view();
    let (last_log_id, last_membership) = StateMachine::<E>::applied_in(&*view)?;
    let buffered = BufWriter::with_capacity(1 << 20, &mut out);
    let (mut buffered, _) =
        snapshot::write_view(&*view, FORMAT_VERSION, buffered).map_err(io_error)?;
    buffered.flush()?;
    drop(buffered);
    drop(view);
    out.seek(SeekFrom::Start(0))?;
    let meta = SnapshotMeta {
        last_log_id,
        last_membership,
    };
    Ok((meta, out))
}

/// Runs `work` on a blocking thread when snapshots are files (a node), inline when they are in
/// memory (the simulations, which must not start threads).
async fn off_the_workers<T: Send + 'static>(
    files: bool,
    work: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    if !files {
        return work();
    }
    tokio::task::spawn_blocking(work).await.map_err(io_error)?
}

impl<E: Engine + ?Sized> RaftSnapshotBuilder<TypeConfig> for StateMachine<E> {
    type SnapshotData = SnapshotData;

    async fn build_snapshot(&mut self) -> io::Result<Snapshot> {
        let engine = Arc::clone(self.engine());
        let files = self.files.clone();
        let (meta, data) = off_the_workers(files.is_some(), move || {
            let out = match &files {
                Some(dir) => SnapshotData::File(dir.create("built")?),
                None => SnapshotData::memory(Vec::new()),
            };
            build_into(&*engine, out)
        })
        .await?;
        let snapshot = self.reopen(&data)?;
        self.hold(meta.clone(), data);
        Ok(Snapshot { meta, snapshot })
    }
}

impl<E: Engine + ?Sized> StateMachine<E> {
    /// A second handle on a snapshot's bytes, read from the start.
    fn reopen(&self, data: &SnapshotData) -> io::Result<SnapshotData> {
        match data {
            SnapshotData::Memory(cursor) => Ok(SnapshotData::memory(cursor.get_ref().clone())),
            SnapshotData::File(file) => SnapshotDir::reopen(file.path()).map(SnapshotData::File),
        }
    }

    /// Where a snapshot sent by the leader is received: a new file of the snapshot directory,
    /// or memory.
    pub fn begin_receiving_snapshot(&self) -> io::Result<SnapshotData> {
        match &self.files {
            Some(dir) => dir.create("received").map(SnapshotData::File),
            None => Ok(SnapshotData::memory(Vec::new())),
        }
    }
}

impl<E: Engine + ?Sized> RaftStateMachine<TypeConfig> for StateMachine<E> {
    type SnapshotData = SnapshotData;
    type SnapshotBuilder = Self;

    async fn applied_state(&mut self) -> io::Result<(Option<LogId>, StoredMembership)> {
        Self::applied_in(&*self.engine().view())
    }

    /// Applies each entry as it comes and answers its waiting client at once.
    async fn apply<S>(&mut self, mut entries: S) -> io::Result<()>
    where
        S: Stream<Item = io::Result<EntryResponder<TypeConfig>>> + Unpin + Send,
    {
        while let Some((entry, responder)) = entries.try_next().await? {
            let result = self.apply_entry(&entry)?;
            if let Some(responder) = responder {
                responder.send(result);
            }
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: SnapshotData,
    ) -> io::Result<()> {
        // Verified whole (every checksum, the trailer, the store format) before anything is
        // written, then written as ONE replacement of the state machine's range: a damaged
        // snapshot or one of another format leaves the old state in place, and a reader or a
        // crash sees the old state or the new one.
        let engine = Arc::clone(self.engine());
        let install_meta = meta.clone();
        let mut data = snapshot;
        let data = off_the_workers(self.files.is_some(), move || {
            let overrides = meta_pairs(&install_meta).map_err(io_error)?;
            match install_from(&*engine, &mut data, overrides) {
                Ok(()) => Ok(data),
                Err(err) => {
                    // A refused file is not kept: a peer sending damaged snapshots must not
                    // fill the disk.
                    if let SnapshotData::File(file) = &data {
                        let _ = std::fs::remove_file(file.path());
                    }
                    Err(io_error(err))
                }
            }
        })
        .await?;
        self.hold(meta.clone(), data);
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> io::Result<Option<Snapshot>> {
        // Opened under the lock: the file cannot be replaced (and removed) in between.
        let held = self.held();
        let Some(current) = held.as_ref() else {
            return Ok(None);
        };
        let data = match &current.data {
            Held::Memory(bytes) => SnapshotData::memory(bytes.clone()),
            Held::File(path) => SnapshotDir::reopen(path).map(SnapshotData::File)?,
        };
        Ok(Some(Snapshot {
            meta: current.meta.clone(),
            snapshot: data,
        }))
    }
}
