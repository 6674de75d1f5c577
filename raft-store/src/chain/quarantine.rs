//! Rebuild and quarantine: a diverged partition moved aside, kept as evidence, and the
//! execution rebuilt from the authoritative log.
//!
//! A populate never overwrites a stored event, so a partition that disagrees with the log (a
//! second writer's events, a divergence) stays unservable forever. A rebuild ends that, without
//! destroying what was stored: in ONE batch it copies the partition's records and events under a
//! numbered quarantine record (`k<exec>/<n>`, events under `q<exec>/<n>`), removes the partition,
//! its id index and its populate session, and writes the log's chain in its place (its first
//! batch: a longer log continues in ordinary populate batches, coverage first and watermark last,
//! so the execution stays unservable until the last one lands, as a populate would leave it).
//!
//! A rebuild is refused, changing nothing, when it is not needed (the stored chain is the log's
//! beginning: a populate loses nothing), when the log is not one chain, and when the partition
//! to move is larger than one batch should carry ([`QUARANTINE_BYTES_MAX`]).

use serde::{Deserialize, Serialize};

use crate::chain::effect::{Applied, ApplyError, CoverageChange, Effect, HeadCheck, SessionChange};
use crate::chain::keys::{self, PartitionKey};
use crate::chain::store::ChainStore;
use crate::chain::{codec, write};
use crate::engine::{scan_in_steps, Engine, ScanOrder, WriteBatch};
use chainstore_model::StorageError;
use chainstore_model::{
    order_by_links, ChainEvent, Coverage, ExecutionId, Head, Limit, LogEvent, Origin, Oversize,
    PopulateError, QuarantineRecord, RebuildError, Watermark,
};

/// Most bytes of stored events one rebuild moves into quarantine (one batch holds them).
pub const QUARANTINE_BYTES_MAX: usize = 64 << 20;
/// Most bytes of a rebuild's reason.
pub const REASON_BYTES_MAX: usize = 4 << 10;

/// What a rebuild's quarantine record says about itself, decided by the evaluation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuarantineNote {
    /// Why the caller asked for it.
    pub reason: String,
    /// What the evaluation found.
    pub diagnosis: String,
    /// When the leader evaluated it (milliseconds since the Unix epoch): carried in the entry so
    /// that every replica keeps the same record.
    pub at_ms: u64,
}

/// One rebuild as the Raft log carries it: the head the partition must still have, the note,
/// and the first batch of the log's chain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rebuild {
    /// The partition's head at evaluation; a different head at apply refuses the rebuild.
    pub expect: Option<Head>,
    /// The quarantine record's own fields.
    pub note: QuarantineNote,
    /// The log's chain from sequence 1 (expecting an empty partition), coverage with it, and
    /// the watermark when the chain fits this batch.
    pub effect: Effect,
}

/// What the evaluation of a rebuild decided.
#[derive(Debug, Clone, PartialEq)]
pub struct RebuildPlan {
    /// The entry that moves the partition aside and writes the chain's first batch.
    pub rebuild: Rebuild,
    /// Ordinary effects that write the rest of the chain, in order.
    pub rest: Vec<Effect>,
    /// The chain's length once every effect is applied.
    pub total: u64,
}

/// One quarantine record and a page of the events it holds.
#[derive(Debug, Clone, PartialEq)]
pub struct QuarantinedPage {
    /// The record.
    pub record: QuarantineRecord,
    /// Its events from the page's first sequence, in sequence order.
    pub events: Vec<ChainEvent>,
    /// Where the next page starts; `None` when this page ends the record.
    pub next_from_seq: Option<u64>,
}

fn from_populate(err: PopulateError) -> RebuildError {
    match err {
        PopulateError::TooLarge(oversize) => RebuildError::TooLarge(oversize),
        PopulateError::Storage(err) => RebuildError::Storage(err),
        other => RebuildError::InvalidInput(other.to_string()),
    }
}

impl<E: Engine> ChainStore<E> {
    /// Evaluates a rebuild of `exec` from `log`: checks the request, compares the stored chain
    /// with the log, and resolves the entry (and the batches after it) that replace the
    /// partition. Refuses when the stored chain is the log's beginning.
    pub fn evaluate_rebuild(
        &self,
        exec: &ExecutionId,
        log: &[LogEvent],
        reason: &str,
        at_ms: u64,
    ) -> Result<RebuildPlan, RebuildError> {
        check_reason(reason)?;
        self.check_log_events(log).map_err(from_populate)?;
        let ordered = if log.is_empty() {
            Vec::new()
        } else {
            order_by_links(log).map_err(RebuildError::LogRefused)?
        };
        let log_len = ordered.len() as u64;

        self.check_quarantine_size(exec)?;
        let part = self.read_partition(exec)?;
        let stored_len = part.head.as_ref().map_or(0, |h| h.exec_seq);

        let diagnosis = diagnose(&part.events, &ordered, stored_len);
        let Some(diagnosis) = diagnosis else {
            return Err(RebuildError::NotDiverged {
                stored_len,
                log_len,
            });
        };

        let events: Vec<ChainEvent> = ordered
            .iter()
            .zip(1u64..)
            .map(|(logged, exec_seq)| write::stored_as(exec, exec_seq, logged))
            .collect();
        let coverage = Coverage {
            root_event_id: ordered.first().map(|e| e.event_id.clone()),
            total: log_len,
            origin: Origin::Log,
        };
        let watermark = if log_len == 0 {
            Watermark::EMPTY
        } else {
            Watermark {
                first_seq: 1,
                through_seq: log_len,
            }
        };
        let mut effects = self.fill_effects(
            exec,
            None,
            &events,
            (Some(coverage), Some(watermark)),
            SessionChange::Keep,
            false,
        );
        if effects.is_empty() {
            return Err(RebuildError::InvalidInput(
                "the rebuild resolved to no write".into(),
            ));
        }
        let first = effects.remove(0);
        Ok(RebuildPlan {
            rebuild: Rebuild {
                expect: part.head,
                note: QuarantineNote {
                    reason: reason.to_owned(),
                    diagnosis,
                    at_ms,
                },
                effect: first,
            },
            rest: effects,
            total: log_len,
        })
    }

    /// Turns a rebuild into one write batch: the partition moved under a new quarantine record,
    /// its id index and session removed, the first batch of the new chain written. Refuses (and
    /// stages nothing) when the head is no longer the one evaluated or the batch is malformed.
    pub fn stage_rebuild(
        &self,
        rebuild: &Rebuild,
        commit_index: u64,
    ) -> Result<(WriteBatch, QuarantineRecord, Applied), ApplyError> {
        let effect = &rebuild.effect;
        let exec = &effect.execution_id;
        let head = self.read_head(exec)?;
        if head != rebuild.expect {
            return Err(ApplyError::HeadMoved {
                expected: rebuild.expect.clone(),
                found: head,
            });
        }
        if effect.head_check != HeadCheck::Expect(None) {
            return Err(ApplyError::Malformed(
                "a rebuild's chain must start on an empty partition".into(),
            ));
        }
        let number = self.next_quarantine_number(exec)?;
        let mut batch = WriteBatch::new();
        let record =
            self.quarantine_partition(exec, number, &rebuild.note, commit_index, &mut batch)?;

        stage_new_chain(effect, commit_index, &mut batch)?;
        let applied = Applied {
            applied: effect.events.len() as u64,
            duplicates: 0,
        };
        Ok((batch, record, applied))
    }

    /// Refuses a rebuild of a partition whose events are over what one quarantine record
    /// holds; the events are bounded before they are read whole.
    fn check_quarantine_size(&self, exec: &ExecutionId) -> Result<(), RebuildError> {
        let (start, end) = keys::event_range(exec);
        let mut stored_bytes = 0usize;
        scan_in_steps(&*self.engine.view(), &start, &end, 1024, |piece| {
            stored_bytes += piece.iter().map(|(_, v)| v.len()).sum::<usize>();
            Ok(stored_bytes <= QUARANTINE_BYTES_MAX)
        })?;
        if stored_bytes > QUARANTINE_BYTES_MAX {
            return Err(RebuildError::TooLarge(Oversize {
                what: Limit::QuarantineBytes,
                size: None,
                limit: QUARANTINE_BYTES_MAX as u64,
            }));
        }
        Ok(())
    }

    /// The number of the execution's next quarantine record (1 for its first).
    fn next_quarantine_number(&self, exec: &ExecutionId) -> Result<u64, StorageError> {
        let (records_start, records_end) = keys::quarantine_records(exec);
        let last = self
            .engine
            .scan(&records_start, &records_end, ScanOrder::Reverse, 1)?
            .first()
            .map(|(key, _)| {
                keys::parse_quarantine_record(exec, key)
                    .ok_or_else(|| StorageError::Corrupted("malformed quarantine key".into()))
            })
            .transpose()?;
        Ok(last.unwrap_or(0).saturating_add(1))
    }

    /// Stages the move of the partition under quarantine record `number`: its events copied
    /// under the record, the record (head, watermark, coverage, count, the note) written, the
    /// partition, its id index and its session removed.
    fn quarantine_partition(
        &self,
        exec: &ExecutionId,
        number: u64,
        note: &QuarantineNote,
        commit_index: u64,
        batch: &mut WriteBatch,
    ) -> Result<QuarantineRecord, ApplyError> {
        let mut record = QuarantineRecord {
            number,
            quarantined_at_ms: note.at_ms,
            commit_index,
            reason: note.reason.clone(),
            diagnosis: note.diagnosis.clone(),
            head: None,
            watermark: None,
            coverage: None,
            events: 0,
        };
        let (start, end) = keys::partition_range(exec);
        for (key, value) in self
            .engine
            .scan(&start, &end, ScanOrder::Forward, usize::MAX)?
        {
            match keys::parse_partition_key(start.len(), &key) {
                Some(PartitionKey::Head) => record.head = Some(codec::decode_head(&value)?),
                Some(PartitionKey::Watermark) => {
                    record.watermark = Some(codec::decode_watermark(&value)?)
                }
                Some(PartitionKey::Coverage) => {
                    record.coverage = Some(codec::decode_coverage(&value)?)
                }
                Some(PartitionKey::Event(seq)) => {
                    batch.put(keys::quarantined_event(exec, number, seq), value);
                    record.events += 1;
                }
                None => {
                    return Err(StorageError::Corrupted(format!(
                        "unknown key {:?} inside the partition of {exec}",
                        String::from_utf8_lossy(&key)
                    ))
                    .into())
                }
            }
        }
        batch.put(
            keys::quarantine_record(exec, number),
            codec::encode_quarantine(&record)?,
        );
        batch.delete_range(start, end);
        let (start, end) = keys::id_index_range(exec);
        batch.delete_range(start, end);
        batch.delete(keys::session(exec));
        Ok(record)
    }
}

/// A rebuild's reason: kept in the quarantine record, so it must say something and fit.
fn check_reason(reason: &str) -> Result<(), RebuildError> {
    if reason.len() > REASON_BYTES_MAX {
        return Err(RebuildError::TooLarge(Oversize {
            what: Limit::ReasonBytes,
            size: Some(reason.len() as u64),
            limit: REASON_BYTES_MAX as u64,
        }));
    }
    if reason.trim().is_empty() {
        return Err(RebuildError::InvalidInput(
            "a rebuild needs a reason: it is kept in the quarantine record".into(),
        ));
    }
    Ok(())
}

/// Why the stored chain needs a rebuild: the first position where it and the log (`ordered`)
/// disagree, or the first stored event past the log's end; `None` when the stored chain is the
/// log's beginning (a populate completes it).
fn diagnose(stored: &[ChainEvent], ordered: &[&LogEvent], stored_len: u64) -> Option<String> {
    let log_len = ordered.len();
    stored.iter().find_map(|stored| {
        let position = stored.exec_seq - 1;
        match usize::try_from(position).ok().and_then(|p| ordered.get(p)) {
            Some(logged) if write::same_as_logged(stored, logged) => None,
            Some(logged) => Some(format!(
                "diverged at position {position}: the store holds {}, the log {}",
                stored.event_id, logged.event_id
            )),
            None => Some(format!(
                "the store holds {stored_len} events, the log {log_len}: {} at position \
                 {position} and after it are not in the log",
                stored.event_id
            )),
        }
    })
}

/// Stages a rebuild's new chain on the emptied partition: its events at sequences from 1, in
/// order, each id once, then its head, watermark and coverage. A rebuild sets no session.
fn stage_new_chain(
    effect: &Effect,
    commit_index: u64,
    batch: &mut WriteBatch,
) -> Result<(), ApplyError> {
    let exec = &effect.execution_id;
    // The new chain on the emptied partition: sequences from 1, in order, each id once.
    let mut ids = std::collections::BTreeSet::new();
    for (event, expected_seq) in effect.events.iter().zip(1u64..) {
        if event.execution_id != *exec
            || event.exec_seq != expected_seq
            || !ids.insert(&event.event_id)
        {
            return Err(ApplyError::Malformed(format!(
                "a rebuild's chain must hold this execution's events at sequences 1.. in \
                 order, each id once; event {} at seq {} is not",
                event.event_id, event.exec_seq
            )));
        }
        let stored = ChainEvent {
            commit_index,
            ..event.clone()
        };
        let payload = codec::payload_bytes(&stored.payload);
        batch.put(
            keys::event(exec, event.exec_seq),
            codec::encode_event(&stored, &payload),
        );
        batch.put(
            keys::id_index(exec, &event.event_id),
            codec::encode_seq(event.exec_seq),
        );
        batch.put(
            keys::feed(commit_index, exec, event.exec_seq),
            event.event_id.as_bytes(),
        );
    }
    if let Some(last) = effect.events.last() {
        let head = Head {
            exec_seq: last.exec_seq,
            event_id: last.event_id.clone(),
        };
        batch.put(keys::head(exec), codec::encode_head(&head));
    }
    if let Some(watermark) = &effect.watermark {
        batch.put(keys::watermark(exec), codec::encode_watermark(watermark));
    }
    match &effect.coverage {
        CoverageChange::Raise(coverage) => {
            batch.put(keys::coverage(exec), codec::encode_coverage(coverage))
        }
        CoverageChange::Keep | CoverageChange::Drop => {}
    }
    if effect.session != SessionChange::Keep {
        return Err(ApplyError::Malformed(
            "a rebuild removes the session; it cannot set one".into(),
        ));
    }
    Ok(())
}

impl<E: Engine> ChainStore<E> {
    /// Rebuilds `exec` from `log` (the library's entry point: evaluation and application under
    /// one lock). Returns the quarantine record and the chain's length.
    pub fn rebuild(
        &self,
        exec: &ExecutionId,
        log: &[LogEvent],
        reason: &str,
        at_ms: u64,
        commit_index: u64,
    ) -> Result<(QuarantineRecord, u64), RebuildError> {
        let _guard = self.lock_writer();
        let plan = self.evaluate_rebuild(exec, log, reason, at_ms)?;
        let (batch, record, _) = self
            .stage_rebuild(&plan.rebuild, commit_index)
            .map_err(rebuild_apply_error)?;
        self.write_batch(batch)?;
        for effect in &plan.rest {
            let (batch, _) = self
                .stage_effect(effect, commit_index)
                .map_err(rebuild_apply_error)?;
            self.write_batch(batch)?;
        }
        Ok((record, plan.total))
    }

    /// The execution's quarantine records, oldest first: the newest `max` of them, and whether
    /// older ones were left out.
    pub fn quarantine_records(
        &self,
        exec: &ExecutionId,
        max: usize,
    ) -> Result<(Vec<QuarantineRecord>, bool), StorageError> {
        let (start, end) = keys::quarantine_records(exec);
        let mut pairs =
            self.engine
                .scan(&start, &end, ScanOrder::Reverse, max.saturating_add(1))?;
        let truncated = pairs.len() > max;
        pairs.truncate(max);
        pairs.reverse();
        pairs
            .iter()
            .map(|(_, value)| codec::decode_quarantine(value))
            .collect::<Result<Vec<_>, _>>()
            .map(|records| (records, truncated))
    }

    /// One quarantine record and a page of its events from `from_seq` (at most `events_max`
    /// events and about `bytes_max` bytes, one event at least); `None` when there is no such
    /// record.
    pub fn quarantined_page(
        &self,
        exec: &ExecutionId,
        number: u64,
        from_seq: u64,
        events_max: usize,
        bytes_max: usize,
    ) -> Result<Option<QuarantinedPage>, StorageError> {
        let view = self.engine.view();
        let Some(value) = view.get(&keys::quarantine_record(exec, number))? else {
            return Ok(None);
        };
        let record = codec::decode_quarantine(&value)?;
        let (start, end) = keys::quarantined_events(exec, number, from_seq);
        let mut events = Vec::new();
        let mut bytes = 0usize;
        let mut next = None;
        scan_in_steps(&*view, &start, &end, events_max.clamp(1, 1024), |piece| {
            for (key, value) in piece {
                let seq = keys::parse_quarantined_event(&key)
                    .ok_or_else(|| StorageError::Corrupted("malformed quarantine key".into()))?;
                if events.len() >= events_max.max(1)
                    || (!events.is_empty() && bytes + value.len() > bytes_max)
                {
                    next = Some(seq);
                    return Ok(false);
                }
                bytes += value.len();
                events.push(codec::decode_event(exec, seq, &value)?);
            }
            Ok(true)
        })?;
        Ok(Some(QuarantinedPage {
            record,
            events,
            next_from_seq: next,
        }))
    }
}

fn rebuild_apply_error(err: ApplyError) -> RebuildError {
    match err {
        ApplyError::HeadMoved { .. } => RebuildError::HeadMoved,
        ApplyError::Storage(err) => RebuildError::Storage(err),
        other => RebuildError::InvalidInput(other.to_string()),
    }
}
