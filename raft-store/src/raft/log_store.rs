//! The Raft log store over an engine.

use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use openraft::storage::{IOFlushed, RaftLogStorage};
use openraft::{LogState, RaftLogReader};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::mpsc;

use super::entry_codec;
use super::keys;
use super::types::{Entry, LogId, TypeConfig, Vote};
use crate::engine::{Engine, ScanOrder, WriteBatch};

/// Most entries one replication read returns; replication asks again for the rest.
const READ_ENTRIES_MAX: usize = 4_096;
/// About the most bytes of entries one replication read returns (at least one entry): with
/// entries of several MiB, a count alone would load hundreds of MiB for one append RPC.
const READ_BYTES_MAX: usize = 16 << 20;

/// Where the fsync of an append runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFlush {
    /// In `append` itself, which returns once the entries are durable.
    Inline,
    /// On a thread of its own, from tokio's blocking pool (group commit): `append` returns once
    /// the entries are written
    /// and readable; the thread syncs everything written since its last sync in ONE fsync and
    /// then tells openraft, for every append it covers, that its entries are durable. The
    /// async workers never wait for the disk, and appends that queue up during one fsync share
    /// the next.
    #[default]
    Thread,
    /// As [`LogFlush::Thread`], on a task of the current tokio runtime: for the deterministic
    /// simulation, where no thread may be started (its in-memory engine's sync never blocks).
    Task,
}

/// Appends waiting for the fsync that makes them durable.
type FlushQueue = mpsc::UnboundedSender<IOFlushed<TypeConfig>>;

/// A flush path: where log stores hand the appends they wrote, to be told once an fsync made
/// them durable. ONE per engine: the log stores of every Raft group in a shared engine
/// ([`crate::engine::GroupEngine`]) take clones of it, so appends of several groups that wait at
/// once share one fsync (group commit across groups). Cheap to clone; the flusher ends with its
/// last clone.
#[derive(Clone)]
pub struct LogFlusher {
    /// `None`: each append syncs inline.
    queue: Option<FlushQueue>,
}

impl LogFlusher {
    /// A flush path over `engine` as `flush` says: a blocking thread or a task is started on the
    /// current runtime for [`LogFlush::Thread`] and [`LogFlush::Task`].
    pub fn start<E: Engine + ?Sized>(engine: Arc<E>, flush: LogFlush) -> Self {
        let queue = match flush {
            LogFlush::Inline => None,
            LogFlush::Thread => {
                let (queue, mut waiting) = mpsc::unbounded_channel();
                // A thread of the runtime's blocking pool rather than one of its own: the
                // runtime's shutdown drops every task holding a clone (so the loop ends) and
                // waits for it, so no fsync is still running while the process exits.
                tokio::task::spawn_blocking(move || {
                    while let Some(first) = waiting.blocking_recv() {
                        flush_queued(&*engine, first, &mut waiting);
                    }
                });
                Some(queue)
            }
            LogFlush::Task => {
                let (queue, mut waiting) = mpsc::unbounded_channel();
                tokio::spawn(async move {
                    while let Some(first) = waiting.recv().await {
                        flush_queued(&*engine, first, &mut waiting);
                    }
                });
                Some(queue)
            }
        };
        Self { queue }
    }
}

/// The Raft log, vote and committed id, stored in the engine under `R/`. Cheap to clone: the
/// clone is the log reader.
pub struct LogStore<E: ?Sized> {
    engine: Arc<E>,
    /// Where appends wait for their fsync; `None`: the fsync is inline.
    flushing: Option<FlushQueue>,
}

impl<E: ?Sized> Clone for LogStore<E> {
    fn clone(&self) -> Self {
        Self {
            engine: Arc::clone(&self.engine),
            flushing: self.flushing.clone(),
        }
    }
}

impl<E: Engine + ?Sized> LogStore<E> {
    /// A log store over `engine`, shared with the state machine, whose appends are durable
    /// when `append` returns.
    pub fn new(engine: Arc<E>) -> Self {
        Self {
            engine,
            flushing: None,
        }
    }

    /// A log store whose appends are made durable by `flusher`, which syncs the engine that
    /// `engine` writes to (for a group's keyspace, the engine all groups share).
    pub fn with_flusher(engine: Arc<E>, flusher: &LogFlusher) -> Self {
        Self {
            engine,
            flushing: flusher.queue.clone(),
        }
    }

    fn read_value<T: DeserializeOwned>(&self, key: &[u8]) -> io::Result<Option<T>> {
        let bytes = self.engine.get(key).map_err(io::Error::other)?;
        bytes
            .map(|b| serde_json::from_slice(&b).map_err(io::Error::other))
            .transpose()
    }

    /// Writes `entries` to the log in one durable batch: the write behind
    /// [`RaftLogStorage::append`] when its fsync is inline.
    pub fn write_entries(&self, entries: impl IntoIterator<Item = Entry>) -> io::Result<()> {
        self.engine
            .write_durable(entries_batch(entries)?)
            .map_err(io::Error::other)
    }

    fn last_entry_id(&self) -> io::Result<Option<LogId>> {
        let last = self
            .engine
            .scan(&keys::log_entry(0), &keys::log_end(), ScanOrder::Reverse, 1)
            .map_err(io::Error::other)?;
        match last.first() {
            None => Ok(None),
            Some((_, value)) => Ok(Some(decode_entry(value)?.log_id)),
        }
    }
}

/// Adds the vote to `batch`.
pub(crate) fn stage_vote(batch: &mut WriteBatch, vote: &Vote) -> io::Result<()> {
    batch.put(keys::VOTE, encode(vote)?);
    Ok(())
}

/// Adds to `batch` the purge of every entry up to `log_id` and the purged marker.
pub(crate) fn stage_purge(batch: &mut WriteBatch, log_id: &LogId) -> io::Result<()> {
    batch.put(keys::PURGED, encode(log_id)?);
    let end = match log_id.index.checked_add(1) {
        Some(end) => keys::log_entry(end),
        None => keys::log_end(),
    };
    batch.delete_range(keys::log_entry(0), end);
    Ok(())
}

/// The log entries `entries` as one batch.
fn entries_batch<T: std::borrow::Borrow<Entry>>(
    entries: impl IntoIterator<Item = T>,
) -> io::Result<WriteBatch> {
    let mut batch = WriteBatch::new();
    for entry in entries {
        let entry = entry.borrow();
        batch.put(
            keys::log_entry(entry.log_id.index),
            entry_codec::encode_entry(entry).map_err(io::Error::other)?,
        );
    }
    Ok(batch)
}

/// One fsync for `first` and every append queued behind it, then each is told the outcome.
/// Every append's entries were written before it was queued, so the sync covers them all.
fn flush_queued<E: Engine + ?Sized>(
    engine: &E,
    first: IOFlushed<TypeConfig>,
    waiting: &mut mpsc::UnboundedReceiver<IOFlushed<TypeConfig>>,
) {
    let mut flushed = vec![first];
    while let Ok(next) = waiting.try_recv() {
        flushed.push(next);
    }
    let synced = engine.sync();
    for callback in flushed {
        callback.io_completed(io_outcome(&synced));
    }
}

/// An outcome as openraft's flush callback takes it.
fn io_outcome<T: std::fmt::Display>(outcome: &Result<(), T>) -> io::Result<()> {
    outcome
        .as_ref()
        .map(|_| ())
        .map_err(|err| io::Error::other(err.to_string()))
}

fn encode<T: Serialize>(value: &T) -> io::Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(io::Error::other)
}

fn decode_entry(bytes: &[u8]) -> io::Result<Entry> {
    entry_codec::decode_entry(bytes).map_err(io::Error::other)
}

fn start_index(range: &impl RangeBounds<u64>) -> u64 {
    match range.start_bound() {
        Bound::Included(i) => *i,
        Bound::Excluded(i) => i.saturating_add(1),
        Bound::Unbounded => 0,
    }
}

fn end_key(range: &impl RangeBounds<u64>) -> Vec<u8> {
    match range.end_bound() {
        Bound::Included(i) => match i.checked_add(1) {
            Some(end) => keys::log_entry(end),
            None => keys::log_end(),
        },
        Bound::Excluded(i) => keys::log_entry(*i),
        Bound::Unbounded => keys::log_end(),
    }
}

impl<E: Engine + ?Sized> RaftLogReader<TypeConfig> for LogStore<E> {
    /// Every entry in `range`: openraft applies what this returns and refuses a range with a
    /// hole, so it is never cut short.
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> io::Result<Vec<Entry>> {
        let start = keys::log_entry(start_index(&range));
        let pairs = self
            .engine
            .scan(&start, &end_key(&range), ScanOrder::Forward, usize::MAX)
            .map_err(io::Error::other)?;
        pairs.iter().map(|(_, value)| decode_entry(value)).collect()
    }

    /// The first entries of `[start, end)` for replication: at most [`READ_ENTRIES_MAX`] and
    /// about [`READ_BYTES_MAX`] bytes, one at least.
    async fn limited_get_log_entries(&mut self, start: u64, end: u64) -> io::Result<Vec<Entry>> {
        let pairs = self
            .engine
            .view()
            .scan_bounded(
                &keys::log_entry(start),
                &keys::log_entry(end),
                READ_ENTRIES_MAX,
                READ_BYTES_MAX,
            )
            .map_err(io::Error::other)?;
        pairs.iter().map(|(_, value)| decode_entry(value)).collect()
    }

    async fn read_vote(&mut self) -> io::Result<Option<Vote>> {
        self.read_value(keys::VOTE)
    }
}

impl<E: Engine + ?Sized> RaftLogStorage<TypeConfig> for LogStore<E> {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> io::Result<LogState<TypeConfig>> {
        let last_purged_log_id: Option<LogId> = self.read_value(keys::PURGED)?;
        let last_log_id = self.last_entry_id()?.or(last_purged_log_id);
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> io::Result<()> {
        let mut batch = WriteBatch::new();
        stage_vote(&mut batch, vote)?;
        self.engine.write_durable(batch).map_err(io::Error::other)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> io::Result<()> {
        // Not synced: a committed id lost in a crash only means re-applying less at start-up;
        // the entries themselves are durable.
        let mut batch = WriteBatch::new();
        batch.put(keys::COMMITTED, encode(&committed)?);
        self.engine.write(batch).map_err(io::Error::other)
    }

    async fn read_committed(&mut self) -> io::Result<Option<LogId>> {
        Ok(self.read_value::<Option<LogId>>(keys::COMMITTED)?.flatten())
    }

    async fn append<I>(&mut self, entries: I, callback: IOFlushed<TypeConfig>) -> io::Result<()>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        // Durable before the callback: openraft counts this node's copy of the entries (its
        // vote for them) only once they survive a crash. A leader's AppendEntries to its
        // followers leave as soon as this returns, before the callback: the followers' fsyncs
        // run while the leader's own does.
        let Some(flushing) = &self.flushing else {
            let written = self.write_entries(entries);
            callback.io_completed(io_outcome(&written));
            return written;
        };
        // Written (readable, as openraft needs once this returns) but not yet synced: the
        // flusher's next fsync makes them durable and only then calls back.
        let written = entries_batch(&entries)
            .and_then(|batch| self.engine.write(batch).map_err(io::Error::other));
        match written {
            Ok(()) => {
                if let Err(unsent) = flushing.send(callback) {
                    // The flusher is gone (shutting down): sync here.
                    let synced = self.engine.sync().map_err(io::Error::other);
                    unsent.0.io_completed(io_outcome(&synced));
                    return synced;
                }
                Ok(())
            }
            Err(err) => {
                callback.io_completed(Err(io::Error::other(err.to_string())));
                Err(err)
            }
        }
    }

    async fn truncate_after(&mut self, last: Option<LogId>) -> io::Result<()> {
        let from = match last {
            None => keys::log_entry(0),
            Some(id) => match id.index.checked_add(1) {
                Some(next) => keys::log_entry(next),
                None => return Ok(()),
            },
        };
        let mut batch = WriteBatch::new();
        batch.delete_range(from, keys::log_end());
        self.engine.write_durable(batch).map_err(io::Error::other)
    }

    async fn purge(&mut self, log_id: LogId) -> io::Result<()> {
        // The purged entries are covered by applied state, which the state machine does not
        // sync itself: make it durable before the entries go.
        self.engine.sync().map_err(io::Error::other)?;
        let mut batch = WriteBatch::new();
        stage_purge(&mut batch, &log_id)?;
        self.engine.write_durable(batch).map_err(io::Error::other)
    }
}

#[cfg(test)]
mod tests {
    use super::super::types::{log_id, EntryPayload};
    use super::*;
    use crate::engine::MemEngine;

    fn entry(index: u64) -> Entry {
        Entry {
            log_id: log_id(2, 1, index),
            payload: EntryPayload::Blank,
        }
    }

    fn block_on<F: std::future::Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime")
            .block_on(future)
    }

    /// An older build wrote entries 1..=3 as JSON (format 1); this one appends 4..=5 in format 2.
    /// The log reads back whole and in order, and its last id is the newest entry's.
    #[test]
    fn a_log_begun_in_the_previous_format_is_read_with_the_entries_after_it() {
        let engine = Arc::new(MemEngine::new());
        let mut batch = WriteBatch::new();
        for index in 1..=3 {
            batch.put(
                keys::log_entry(index),
                serde_json::to_vec(&entry(index)).expect("json"),
            );
        }
        engine.write_durable(batch).expect("written");
        let mut store = LogStore::new(Arc::clone(&engine));
        store.write_entries([entry(4), entry(5)]).expect("appended");
        let read = block_on(store.try_get_log_entries(1..=5)).expect("read");
        assert_eq!(read, (1..=5).map(entry).collect::<Vec<_>>());
        let state = block_on(store.get_log_state()).expect("state");
        assert_eq!(state.last_log_id, Some(entry(5).log_id));
    }

    /// An entry in a format this build does not know stops the read with the reason, instead of
    /// being skipped or guessed at.
    #[test]
    fn an_entry_in_an_unknown_format_is_refused_with_its_format_named() {
        let engine = Arc::new(MemEngine::new());
        let mut store = LogStore::new(Arc::clone(&engine));
        store.write_entries([entry(1)]).expect("appended");
        let mut future = entry_codec::encode_entry(&entry(2)).expect("encoded");
        future[0] = 9;
        let mut batch = WriteBatch::new();
        batch.put(keys::log_entry(2), future);
        engine.write_durable(batch).expect("written");
        let err = block_on(store.try_get_log_entries(1..=2)).expect_err("refused");
        assert!(
            err.to_string().contains("log entry format 9 is unknown"),
            "{err}"
        );
    }

    /// The log stores of groups 1 to `n` in `shared`, on one flush path (a task).
    fn group_stores(
        shared: &Arc<MemEngine>,
        n: u32,
    ) -> Vec<LogStore<crate::engine::GroupEngine<MemEngine>>> {
        let flusher = LogFlusher::start(Arc::clone(shared), LogFlush::Task);
        (1..=n)
            .map(|group| {
                let engine = Arc::new(crate::engine::GroupEngine::new(Arc::clone(shared), group));
                LogStore::with_flusher(engine, &flusher)
            })
            .collect()
    }

    /// Appends the entry at `indexes[i]` to `stores[i]`, none yielding; the receivers that say
    /// when each is durable.
    async fn append_each(
        stores: &mut [LogStore<crate::engine::GroupEngine<MemEngine>>],
        indexes: &[u64],
    ) -> Vec<openraft::alias::OneshotReceiverOf<TypeConfig, Result<(), std::io::Error>>> {
        use openraft::type_config::TypeConfigExt;
        let mut durable = Vec::new();
        for (store, index) in stores.iter_mut().zip(indexes) {
            let (tx, rx) = TypeConfig::oneshot();
            store
                .append([entry(*index)], IOFlushed::signal(tx))
                .await
                .expect("written");
            durable.push(rx);
        }
        durable
    }

    /// The log stores of two groups in one shared engine, on one flush path: appends of both
    /// that wait at once are made durable by ONE sync of the shared engine, each told so, and
    /// each group reads back only its own entries.
    #[test]
    fn appends_of_several_groups_waiting_at_once_share_one_fsync() {
        use crate::engine::GroupEngine;
        let shared = Arc::new(MemEngine::new());
        block_on(async {
            let mut stores = group_stores(&shared, 2);
            let syncs = shared.syncs_total();
            // Neither append yields: the flusher first runs once both wait.
            let durable = append_each(&mut stores, &[7, 9]).await;
            for rx in durable {
                rx.await.expect("told").expect("durable");
            }
            assert_eq!(shared.syncs_total() - syncs, 1, "one fsync for both groups");
            for (store, index) in stores.iter_mut().zip([7, 9]) {
                let state = store.get_log_state().await.expect("state");
                assert_eq!(state.last_log_id, Some(entry(index).log_id));
                let read = store.try_get_log_entries(0..=10).await.expect("read");
                assert_eq!(read, [entry(index)]);
            }
        });
        // Both entries survive a crash of the shared engine.
        shared.crash();
        let mut stores: Vec<_> = (1..=2)
            .map(|group| LogStore::new(Arc::new(GroupEngine::new(Arc::clone(&shared), group))))
            .collect();
        for (store, index) in stores.iter_mut().zip([7, 9]) {
            let read = block_on(store.try_get_log_entries(0..=10)).expect("read");
            assert_eq!(read, [entry(index)]);
        }
    }

    #[test]
    fn a_failed_fsync_shared_by_several_groups_acknowledges_none_of_them() {
        let shared = Arc::new(MemEngine::new());
        block_on(async {
            let mut stores = group_stores(&shared, 3);
            // The next sync fails, having made only the first of the pending batches durable
            // (a failed fsync's dropped pages).
            shared.fail_sync_after_losing(0, 1);
            let durable = append_each(&mut stores, &[7, 9, 11]).await;
            for (group, rx) in (1..=3).zip(durable) {
                let told = rx.await.expect("told");
                assert!(told.is_err(), "group {group}'s append was acknowledged");
            }
        });
    }
}
