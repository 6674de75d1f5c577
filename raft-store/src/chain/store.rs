//! [`ChainStore`]: opening a store, its configuration, and the library entry points that
//! evaluate and apply a write under one lock.

use std::sync::{Mutex, MutexGuard};

use serde_json::Value;

use crate::chain::codec;
use crate::chain::effect::{Applied, ApplyError, Effect};
use crate::chain::keys;
use crate::engine::{Engine, ScanOrder, WriteBatch};
use chainstore_model::ExecutionId;
use chainstore_model::StorageError;
use chainstore_model::{
    AppendError, AppendRequest, Appended, ChainEvent, FromLog, Limit, LogEvent, Oversize,
    PartOutcome, PopulateError, PopulateSession, ReplicateError, Replicated,
};

/// The on-disk format this build reads and writes.
pub const FORMAT_VERSION: u32 = 1;

/// Limits and behaviour of a [`ChainStore`]. Every limit has a name and a unit.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Largest payload accepted, as encoded JSON.
    pub payload_bytes_max: usize,
    /// Most events one `populate_from_log` call may carry.
    pub populate_events_max: usize,
    /// Most events one `apply_replicated` call may carry.
    pub replicated_events_max: usize,
    /// Most events one populate batch writes; a longer populate spans several batches, ordered
    /// so that a crash between them leaves the execution unservable, never served short.
    pub populate_batch_events_max: usize,
    /// About the most bytes one populate batch writes (one event at least): a Raft entry stays
    /// small enough to be replicated within one append's deadline.
    pub populate_batch_bytes_max: usize,
    /// Most events one append may carry (an append of several events is one effect, one Raft
    /// entry; its bytes are bounded by `populate_batch_bytes_max`).
    pub append_events_max: usize,
    /// Whether each library write is made durable before it returns. A cluster turns this off
    /// for its state machine: there the Raft log is the durable record.
    pub sync_writes: bool,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            payload_bytes_max: 1 << 20,
            populate_events_max: 100_000,
            replicated_events_max: 10_000,
            populate_batch_events_max: 1_000,
            populate_batch_bytes_max: 2 << 20,
            append_events_max: 1_000,
            sync_writes: true,
        }
    }
}

/// Why a store could not be opened.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OpenError {
    /// The store was written by a format this build does not know.
    #[error(
        "the store has format version {found}, this build reads only version {FORMAT_VERSION}"
    )]
    UnknownFormat {
        /// The version found on disk.
        found: u32,
    },
    /// The store holds data but no format record: it was not written by chainstore.
    #[error("the store holds data but no format record; refusing to guess its layout")]
    NoFormatRecord,
    /// The engine failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// Refuses a copy of a store's pairs (a backup) whose format record is missing or unknown.
pub(crate) fn check_copied_format(record: Option<&[u8]>) -> Result<(), OpenError> {
    match record {
        Some(record) => check_format(record),
        None => Err(OpenError::NoFormatRecord),
    }
}

/// Refuses a format record this build cannot read.
fn check_format(record: &[u8]) -> Result<(), OpenError> {
    let found = codec::decode_format(record)?;
    if found != FORMAT_VERSION {
        return Err(OpenError::UnknownFormat { found });
    }
    Ok(())
}

/// The execution-partitioned chain store over an [`Engine`].
pub struct ChainStore<E> {
    pub(crate) engine: E,
    pub(crate) config: StoreConfig,
    /// Serialises the library's read-evaluate-write sequences. Reads take no lock: each reads one
    /// point-in-time view.
    writer: Mutex<()>,
}

impl<E: Engine> ChainStore<E> {
    /// Opens a store, writing the format record into an empty engine and refusing an engine
    /// whose format is unknown.
    pub fn open(engine: E, config: StoreConfig) -> Result<Self, OpenError> {
        match engine.get(keys::FORMAT)? {
            Some(bytes) => check_format(&bytes)?,
            None => {
                let any = engine.scan(&[], &[u8::MAX], ScanOrder::Forward, 1)?;
                if !any.is_empty() {
                    return Err(OpenError::NoFormatRecord);
                }
                let mut batch = WriteBatch::new();
                batch.put(keys::FORMAT, codec::encode_format(FORMAT_VERSION));
                engine.write_durable(batch)?;
            }
        }
        Ok(Self {
            engine,
            config,
            writer: Mutex::new(()),
        })
    }

    /// The engine underneath.
    pub fn engine(&self) -> &E {
        &self.engine
    }

    pub(crate) fn lock_writer(&self) -> MutexGuard<'_, ()> {
        // The guarded data is `()`: a poisoned lock protects nothing that could be inconsistent.
        self.writer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Appends one event at the head of `exec` (SPEC §4.1), recording `commit_index` on it.
    pub fn append(
        &self,
        exec: &ExecutionId,
        request: &AppendRequest,
        commit_index: u64,
    ) -> Result<Appended, AppendError> {
        self.append_batch(exec, std::slice::from_ref(request), commit_index)?
            .pop()
            .ok_or_else(|| AppendError::InvalidInput("an append needs at least one event".into()))
    }

    /// Appends several events linked in order at the head of `exec`, all or none (see
    /// [`ChainStore::evaluate_append_batch`]), recording `commit_index` on the new ones. One
    /// answer per event, in order.
    pub fn append_batch(
        &self,
        exec: &ExecutionId,
        requests: &[AppendRequest],
        commit_index: u64,
    ) -> Result<Vec<Appended>, AppendError> {
        let _guard = self.lock_writer();
        let plan = self.evaluate_append_batch(exec, requests)?;
        let mut answers = plan.duplicates;
        if let Some(effect) = plan.write {
            self.write_effect(&effect, commit_index)
                .map_err(|err| match err {
                    ApplyError::Forked(fork) => AppendError::Forked(fork),
                    ApplyError::HeadMoved { .. } => AppendError::HeadMoved,
                    ApplyError::Malformed(message) => AppendError::InvalidInput(message),
                    ApplyError::Storage(err) => AppendError::Storage(err),
                })?;
            answers.extend(effect.events.iter().map(|event| Appended {
                exec_seq: event.exec_seq,
                commit_index,
                duplicate: false,
            }));
        }
        Ok(answers)
    }

    /// Stores replicated events in any order (SPEC §4.2).
    pub fn apply_replicated(
        &self,
        exec: &ExecutionId,
        events: &[ChainEvent],
        commit_index: u64,
    ) -> Result<Replicated, ReplicateError> {
        let _guard = self.lock_writer();
        let mut done = Replicated {
            applied: 0,
            duplicates: 0,
        };
        for effect in self.evaluate_replicated(exec, events)? {
            let applied = self
                .write_effect(&effect, commit_index)
                .map_err(|err| match err {
                    ApplyError::Forked(fork) => ReplicateError::Forked(fork),
                    ApplyError::HeadMoved { .. } | ApplyError::Malformed(_) => {
                        ReplicateError::InvalidInput(err.to_string())
                    }
                    ApplyError::Storage(err) => ReplicateError::Storage(err),
                })?;
            done.applied += applied.applied;
            done.duplicates += applied.duplicates;
        }
        Ok(done)
    }

    /// Builds or extends the partition from the authoritative log (SPEC §4.3). A long log is
    /// written in several batches, coverage first and watermark last.
    pub fn populate_from_log(
        &self,
        exec: &ExecutionId,
        events: &[LogEvent],
        commit_index: u64,
    ) -> Result<FromLog, PopulateError> {
        let _guard = self.lock_writer();
        let plan = self.evaluate_populate(exec, events)?;
        self.write_populate(&plan.effects, commit_index)?;
        Ok(plan.outcome)
    }

    /// Takes one part of a populate session (see [`PopulateSession`]): a log of any length
    /// becomes authoritative when its last part is taken.
    pub fn populate_part(
        &self,
        exec: &ExecutionId,
        session: &PopulateSession,
        events: &[LogEvent],
        commit_index: u64,
    ) -> Result<PartOutcome, PopulateError> {
        let _guard = self.lock_writer();
        let plan = self.evaluate_populate_part(exec, session, events)?;
        self.write_populate(&plan.effects, commit_index)?;
        Ok(plan.outcome)
    }

    fn write_populate(&self, effects: &[Effect], commit_index: u64) -> Result<(), PopulateError> {
        for effect in effects {
            self.write_effect(effect, commit_index)
                .map_err(|err| match err {
                    ApplyError::Forked(fork) => PopulateError::Forked(fork),
                    ApplyError::HeadMoved { .. } => PopulateError::HeadMoved,
                    ApplyError::Malformed(message) => PopulateError::InvalidInput(message),
                    ApplyError::Storage(err) => PopulateError::Storage(err),
                })?;
        }
        Ok(())
    }

    /// Applies one effect as one atomic batch (durable when `sync_writes` is set).
    pub fn apply_effect(&self, effect: &Effect, commit_index: u64) -> Result<Applied, ApplyError> {
        let _guard = self.lock_writer();
        self.write_effect(effect, commit_index)
    }

    fn write_effect(&self, effect: &Effect, commit_index: u64) -> Result<Applied, ApplyError> {
        let (batch, applied) = self.stage_effect(effect, commit_index)?;
        self.write_batch(batch)?;
        Ok(applied)
    }

    /// Writes `batch`, durably when `sync_writes` is set; an empty batch writes nothing.
    pub(crate) fn write_batch(&self, batch: WriteBatch) -> Result<(), StorageError> {
        if batch.is_empty() {
            Ok(())
        } else if self.config.sync_writes {
            self.engine.write_durable(batch)
        } else {
            self.engine.write(batch)
        }
    }

    /// Checks a payload against the size limit and returns its encoding.
    pub(crate) fn checked_payload(&self, payload: &Value) -> Result<Vec<u8>, Oversize> {
        let bytes = codec::payload_bytes(payload);
        if bytes.len() > self.config.payload_bytes_max {
            return Err(Oversize {
                what: Limit::PayloadBytes,
                size: Some(bytes.len() as u64),
                limit: self.config.payload_bytes_max as u64,
            });
        }
        Ok(bytes)
    }
}
