//! Evaluation (SPEC §4.1–§4.3 resolved into effects) and application (one effect → one batch).

use std::collections::{BTreeMap, BTreeSet};

use crate::chain::codec;
use crate::chain::effect::{
    Applied, ApplyError, CoverageChange, Effect, HeadCheck, SessionChange, SessionRecord,
};
use crate::chain::keys::{self, PartitionKey};
use crate::chain::store::ChainStore;
use crate::engine::{Engine, WriteBatch};
use chainstore_model::StorageError;
use chainstore_model::{
    order_by_links, order_segment, AppendError, AppendRequest, Appended, ChainEvent, Coverage,
    Fork, FromLog, Head, Limit, LogEvent, Origin, Oversize, PartOutcome, PopulateError,
    PopulateSession, ReplicateError, Watermark,
};
use chainstore_model::{EventId, ExecutionId};

/// What the evaluation of an append decided.
// An `AppendPlan` lives from an evaluation to its proposal, one per append, and most of them
// are `Write`s: boxing the effect would add an allocation to every append to save stack space
// on the rarer duplicate.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum AppendPlan {
    /// The event is already stored with identical content: answer without writing.
    Duplicate(Appended),
    /// Apply this effect; the new event is its only event.
    Write(Effect),
}

/// What the evaluation of an append of several events decided.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchPlan {
    /// The leading events already stored with identical content, answered without writing.
    pub duplicates: Vec<Appended>,
    /// The effect that stores the others, in order from the head, if there are any.
    pub write: Option<Effect>,
}

/// What the evaluation of a populate decided: the outcome to report and the effects that make
/// it true, to be applied in order (several when the log exceeds one batch).
#[derive(Debug, Clone, PartialEq)]
pub struct PopulatePlan {
    /// The outcome, already decided.
    pub outcome: FromLog,
    /// Effects to apply in order; empty when nothing changes.
    pub effects: Vec<Effect>,
}

/// What the evaluation of one part of a populate session decided.
#[derive(Debug, Clone, PartialEq)]
pub struct PartPlan {
    /// The outcome, already decided.
    pub outcome: PartOutcome,
    /// Effects to apply in order; empty when nothing changes.
    pub effects: Vec<Effect>,
}

impl<E: Engine> ChainStore<E> {
    /// Evaluates an append against the current state: validation, then event-id idempotency,
    /// then the head check, in that order (SPEC §6). An append of one event is an append of
    /// several ([`ChainStore::evaluate_append_batch`]) that holds one.
    pub fn evaluate_append(
        &self,
        exec: &ExecutionId,
        request: &AppendRequest,
    ) -> Result<AppendPlan, AppendError> {
        let plan = self.evaluate_append_batch(exec, std::slice::from_ref(request))?;
        match (plan.write, plan.duplicates.into_iter().next()) {
            (Some(effect), _) => Ok(AppendPlan::Write(effect)),
            (None, Some(appended)) => Ok(AppendPlan::Duplicate(appended)),
            (None, None) => Err(AppendError::InvalidInput(
                "an append needs at least one event".into(),
            )),
        }
    }

    /// Evaluates an append of several events at once. The events must be linked in order (each
    /// names the one before it as `prev_event_id`) and only the first may be `genesis`. As a
    /// single append of each would, an event already stored with identical content is a
    /// duplicate and one stored with other content an `event_conflict`; duplicates may only
    /// lead (a stored event after a new one cannot be placed). The new events must continue the
    /// head (one head check for all) and become ONE effect, so they are stored together or not
    /// at all, and each batch is one Raft entry.
    pub fn evaluate_append_batch(
        &self,
        exec: &ExecutionId,
        requests: &[AppendRequest],
    ) -> Result<BatchPlan, AppendError> {
        let Some(first) = requests.first() else {
            return Err(AppendError::InvalidInput(
                "an append needs at least one event".into(),
            ));
        };
        if requests.len() > self.config.append_events_max {
            return Err(AppendError::TooLarge(Oversize {
                what: Limit::AppendEvents,
                size: Some(requests.len() as u64),
                limit: self.config.append_events_max as u64,
            }));
        }
        if first.genesis && first.prev_event_id.is_some() {
            return Err(AppendError::GenesisWithPrev);
        }
        let mut ids = BTreeSet::new();
        for (i, request) in requests.iter().enumerate() {
            if i > 0 && request.genesis {
                return Err(AppendError::InvalidInput(format!(
                    "only the first event of an append may be genesis, not event {i} ({})",
                    request.event_id
                )));
            }
            if i > 0 && request.prev_event_id.as_ref() != Some(&requests[i - 1].event_id) {
                return Err(AppendError::InvalidInput(format!(
                    "event {i} ({}) must name the event before it ({}) as prev_event_id",
                    request.event_id,
                    requests[i - 1].event_id
                )));
            }
            if !ids.insert(&request.event_id) {
                return Err(AppendError::InvalidInput(format!(
                    "event {} appears twice in the append",
                    request.event_id
                )));
            }
            self.checked_payload(&request.payload)
                .map_err(AppendError::TooLarge)?;
        }

        let mut duplicates = Vec::new();
        for (i, request) in requests.iter().enumerate() {
            let Some(exec_seq) = self.read_id_index(exec, &request.event_id)? else {
                continue;
            };
            let stored = self.read_event_at(exec, exec_seq)?.ok_or_else(|| {
                StorageError::Corrupted(format!(
                    "id index of {} points at seq {exec_seq}, which holds no event",
                    request.event_id
                ))
            })?;
            let identical = stored.event_id == request.event_id
                && stored.prev_event_id == request.prev_event_id
                && stored.parent_execution_id == request.parent_execution_id
                && stored.payload == request.payload;
            if !identical || i != duplicates.len() {
                return Err(AppendError::EventConflict {
                    event_id: request.event_id.clone(),
                    exec_seq,
                });
            }
            duplicates.push(Appended {
                exec_seq,
                commit_index: stored.commit_index,
                duplicate: true,
            });
        }
        let new = &requests[duplicates.len()..];
        let Some(first_new) = new.first() else {
            return Ok(BatchPlan {
                duplicates,
                write: None,
            });
        };

        let head = self.read_head(exec)?;
        let head_id = head.as_ref().map(|h| &h.event_id);
        if head_id != first_new.prev_event_id.as_ref() {
            return Err(AppendError::NotHead {
                expected: head_id.cloned(),
                got: first_new.prev_event_id.clone(),
            });
        }
        let coverage = self.read_coverage(exec)?;
        // Never-seen means no watermark and no coverage; only a genesis append needs to know.
        if first_new.genesis && (coverage.is_some() || self.read_watermark(exec)?.is_some()) {
            return Err(AppendError::InvalidInput(
                "genesis is allowed only on an execution the store has never seen".into(),
            ));
        }
        let exhausted =
            || AppendError::InvalidInput("the execution has reached the largest sequence".into());
        let first_seq = match &head {
            None => 1,
            Some(h) => h.exec_seq.checked_add(1).ok_or_else(exhausted)?,
        };
        let count = new.len() as u64;
        let last_seq = first_seq.checked_add(count - 1).ok_or_else(exhausted)?;
        let coverage = if first_new.genesis {
            CoverageChange::Raise(Coverage {
                root_event_id: Some(first_new.event_id.clone()),
                total: count,
                origin: Origin::Genesis,
            })
        } else {
            per_event_coverage(coverage, count)
        };
        let events: Vec<ChainEvent> = new
            .iter()
            .zip(first_seq..)
            .map(|(request, exec_seq)| ChainEvent {
                execution_id: exec.clone(),
                exec_seq,
                event_id: request.event_id.clone(),
                prev_event_id: request.prev_event_id.clone(),
                parent_execution_id: request.parent_execution_id.clone(),
                payload: request.payload.clone(),
                commit_index: 0,
            })
            .collect();
        let bytes_max = self.config.populate_batch_bytes_max;
        let bytes: usize = events.iter().map(encoded_size).sum();
        if events.len() > 1 && bytes > bytes_max {
            return Err(AppendError::TooLarge(Oversize {
                what: Limit::AppendBytes,
                size: Some(bytes as u64),
                limit: bytes_max as u64,
            }));
        }
        Ok(BatchPlan {
            duplicates,
            write: Some(Effect {
                execution_id: exec.clone(),
                head_check: HeadCheck::Expect(head),
                events,
                watermark: Some(Watermark {
                    first_seq,
                    through_seq: last_seq,
                }),
                coverage,
                session: SessionChange::Keep,
            }),
        })
    }

    /// Evaluates a replicated delivery into the effects that store it, in order (none for an
    /// empty delivery). A delivery that would fork the chain is refused here, whole, before it
    /// is proposed anywhere. A delivery larger than one batch (by count or by bytes) becomes
    /// several effects, each one Raft entry small enough to replicate within one append's
    /// deadline, the coverage change riding with the first. An interruption between them leaves
    /// part of the delivery stored, which a re-delivery completes (identical events are
    /// duplicates); a delivery stores no coverage, so part of one cannot make the partition
    /// servable either.
    pub fn evaluate_replicated(
        &self,
        exec: &ExecutionId,
        events: &[ChainEvent],
    ) -> Result<Vec<Effect>, ReplicateError> {
        let Some(mut effect) = self.replicated_effect(exec, events)? else {
            return Ok(Vec::new());
        };
        let applied = match self.stage_effect(&effect, 0) {
            Ok((_, applied)) => applied,
            Err(ApplyError::Forked(fork)) => return Err(ReplicateError::Forked(fork)),
            Err(ApplyError::Storage(err)) => return Err(ReplicateError::Storage(err)),
            Err(err) => return Err(ReplicateError::InvalidInput(err.to_string())),
        };
        // A delivery vouches for nothing about the execution's beginning: any coverage is
        // revoked once it stores a new event (see `per_event_coverage` for why).
        if applied.applied > 0 && self.read_coverage(exec)?.is_some() {
            effect.coverage = CoverageChange::Drop;
        }
        let runs = batches(
            &effect.events,
            self.config.populate_batch_events_max,
            self.config.populate_batch_bytes_max,
        );
        if runs.len() <= 1 {
            return Ok(vec![effect]);
        }
        Ok(runs
            .into_iter()
            .enumerate()
            .map(|(i, run)| {
                let seqs = run.iter().map(|e| e.exec_seq);
                let first_seq = seqs.clone().min().unwrap_or(1);
                let through_seq = seqs.max().unwrap_or(first_seq);
                Effect {
                    execution_id: exec.clone(),
                    head_check: HeadCheck::Any,
                    events: run.to_vec(),
                    watermark: Some(Watermark {
                        first_seq,
                        through_seq,
                    }),
                    coverage: match i {
                        0 => effect.coverage.clone(),
                        _ => CoverageChange::Keep,
                    },
                    session: SessionChange::Keep,
                }
            })
            .collect())
    }

    /// Validates a replicated delivery and resolves it into an effect, without reading state.
    fn replicated_effect(
        &self,
        exec: &ExecutionId,
        events: &[ChainEvent],
    ) -> Result<Option<Effect>, ReplicateError> {
        if events.len() > self.config.replicated_events_max {
            return Err(ReplicateError::TooLarge(Oversize {
                what: Limit::DeliveryEvents,
                size: Some(events.len() as u64),
                limit: self.config.replicated_events_max as u64,
            }));
        }
        for event in events {
            if event.execution_id != *exec {
                return Err(ReplicateError::InvalidInput(format!(
                    "event {} belongs to execution {}, not {exec}",
                    event.event_id, event.execution_id
                )));
            }
            if event.exec_seq == 0 {
                return Err(ReplicateError::InvalidInput(format!(
                    "event {} has exec_seq 0; sequences start at 1",
                    event.event_id
                )));
            }
            self.checked_payload(&event.payload)
                .map_err(ReplicateError::TooLarge)?;
        }
        let (Some(first_seq), Some(through_seq)) = (
            events.iter().map(|e| e.exec_seq).min(),
            events.iter().map(|e| e.exec_seq).max(),
        ) else {
            return Ok(None);
        };
        Ok(Some(Effect {
            execution_id: exec.clone(),
            head_check: HeadCheck::Any,
            events: events
                .iter()
                .map(|e| ChainEvent {
                    commit_index: 0,
                    ..e.clone()
                })
                .collect(),
            watermark: Some(Watermark {
                first_seq,
                through_seq,
            }),
            coverage: CoverageChange::Keep,
            session: SessionChange::Keep,
        }))
    }

    /// Evaluates a populate: orders the log by links, compares it with the stored chain position
    /// by position, and resolves the outcome and its effects.
    pub fn evaluate_populate(
        &self,
        exec: &ExecutionId,
        log: &[LogEvent],
    ) -> Result<PopulatePlan, PopulateError> {
        self.check_log_events(log)?;

        let part = self.read_partition(exec)?;
        let stored_len = part.head.as_ref().map_or(0, |h| h.exec_seq);
        let revoke = |outcome: FromLog| PopulatePlan {
            outcome,
            effects: match part.coverage {
                Some(_) => vec![Effect {
                    execution_id: exec.clone(),
                    head_check: HeadCheck::Expect(part.head.clone()),
                    events: Vec::new(),
                    watermark: None,
                    coverage: CoverageChange::Drop,
                    session: SessionChange::Keep,
                }],
                None => Vec::new(),
            },
        };

        if log.is_empty() {
            if stored_len > 0 {
                return Ok(PopulatePlan {
                    outcome: FromLog::StaleLog {
                        stored_len,
                        log_len: 0,
                    },
                    effects: Vec::new(),
                });
            }
            let coverage = Coverage {
                root_event_id: None,
                total: 0,
                origin: Origin::Log,
            };
            let effect = Effect {
                execution_id: exec.clone(),
                head_check: HeadCheck::Expect(None),
                events: Vec::new(),
                watermark: Some(Watermark::EMPTY),
                coverage: CoverageChange::Raise(coverage.clone()),
                session: SessionChange::Keep,
            };
            let unchanged = part.watermark == Some(Watermark::EMPTY)
                && part.coverage.as_ref() == Some(&coverage);
            return Ok(PopulatePlan {
                outcome: FromLog::InSync {
                    total: 0,
                    appended: 0,
                },
                effects: if unchanged { Vec::new() } else { vec![effect] },
            });
        }

        let ordered = match order_by_links(log) {
            Ok(ordered) => ordered,
            Err(reason) => return Ok(revoke(FromLog::Refused { reason })),
        };
        let log_len = ordered.len() as u64;

        // The stored chain must be a prefix of the log, position for position. A content
        // conflict wins over length: a shorter log that disagrees is a divergence, not staleness.
        for stored in &part.events {
            let position = stored.exec_seq - 1;
            let Some(logged) = usize::try_from(position).ok().and_then(|p| ordered.get(p)) else {
                continue;
            };
            if !same_as_logged(stored, logged) {
                return Ok(revoke(FromLog::Diverged {
                    at_position: position,
                    stored: stored.event_id.clone(),
                    log: logged.event_id.clone(),
                }));
            }
        }
        if stored_len > log_len {
            return Ok(PopulatePlan {
                outcome: FromLog::StaleLog {
                    stored_len,
                    log_len,
                },
                effects: Vec::new(),
            });
        }

        let stored_seqs: BTreeSet<u64> = part.events.iter().map(|e| e.exec_seq).collect();
        let missing: Vec<ChainEvent> = ordered
            .iter()
            .zip(1u64..)
            .filter(|(_, seq)| !stored_seqs.contains(seq))
            .map(|(logged, exec_seq)| stored_as(exec, exec_seq, logged))
            .collect();
        let coverage = Coverage {
            root_event_id: Some(ordered[0].event_id.clone()),
            total: log_len,
            origin: Origin::Log,
        }
        .raise(part.coverage.as_ref());
        let watermark = Watermark {
            first_seq: 1,
            through_seq: log_len,
        };
        let outcome = FromLog::InSync {
            total: coverage.total,
            appended: missing.len() as u64,
        };

        let unchanged = part.coverage.as_ref() == Some(&coverage)
            && Some(watermark.widen(part.watermark)) == part.watermark;
        let effects = self.fill_effects(
            exec,
            part.head.clone(),
            &missing,
            (Some(coverage), Some(watermark)),
            SessionChange::Keep,
            unchanged,
        );
        Ok(PopulatePlan { outcome, effects })
    }

    /// Refuses a log (or a session's part) over the count limit, with a payload over the size
    /// limit, or holding one id twice.
    pub(crate) fn check_log_events(&self, log: &[LogEvent]) -> Result<(), PopulateError> {
        if log.len() > self.config.populate_events_max {
            return Err(PopulateError::TooLarge(Oversize {
                what: Limit::PopulateEvents,
                size: Some(log.len() as u64),
                limit: self.config.populate_events_max as u64,
            }));
        }
        let mut seen = BTreeSet::new();
        for event in log {
            self.checked_payload(&event.payload)
                .map_err(PopulateError::TooLarge)?;
            if !seen.insert(&event.event_id) {
                return Err(PopulateError::InvalidInput(format!(
                    "event {} appears twice in the log",
                    event.event_id
                )));
            }
        }
        Ok(())
    }

    /// The effects that store `missing` (ascending sequences) after `head`, in batches bounded
    /// by count and bytes: the coverage rides with the first batch, the watermark and the session
    /// change with the last, so a crash between batches leaves either no watermark or one that
    /// disagrees with the head, and the partition is refused until a later populate completes
    /// it. With nothing missing, one effect carries the records, or none when `unchanged`.
    pub(crate) fn fill_effects(
        &self,
        exec: &ExecutionId,
        mut head: Option<Head>,
        missing: &[ChainEvent],
        (coverage, watermark): (Option<Coverage>, Option<Watermark>),
        session: SessionChange,
        unchanged: bool,
    ) -> Vec<Effect> {
        let raise = |coverage: Option<Coverage>| match coverage {
            Some(coverage) => CoverageChange::Raise(coverage),
            None => CoverageChange::Keep,
        };
        if missing.is_empty() {
            if unchanged && session == SessionChange::Keep {
                return Vec::new();
            }
            return vec![Effect {
                execution_id: exec.clone(),
                head_check: HeadCheck::Expect(head),
                events: Vec::new(),
                watermark,
                coverage: raise(coverage),
                session,
            }];
        }
        let chunks = batches(
            missing,
            self.config.populate_batch_events_max,
            self.config.populate_batch_bytes_max,
        );
        let chunk_count = chunks.len();
        let mut effects = Vec::with_capacity(chunk_count);
        for (i, chunk) in chunks.into_iter().enumerate() {
            let head_check = HeadCheck::Expect(head.clone());
            if let Some(last) = chunk.iter().max_by_key(|e| e.exec_seq) {
                if head.as_ref().is_none_or(|h| last.exec_seq > h.exec_seq) {
                    head = Some(Head {
                        exec_seq: last.exec_seq,
                        event_id: last.event_id.clone(),
                    });
                }
            }
            let last = i + 1 == chunk_count;
            effects.push(Effect {
                execution_id: exec.clone(),
                head_check,
                events: chunk.to_vec(),
                watermark: if last { watermark } else { None },
                coverage: if i == 0 {
                    raise(coverage.clone())
                } else {
                    CoverageChange::Keep
                },
                session: if last {
                    session.clone()
                } else {
                    SessionChange::Keep
                },
            });
        }
        effects
    }

    /// Evaluates one part of a populate session ([`PopulateSession`]): checks the part against
    /// the session's record and against the stored chain over the part's own positions, and
    /// resolves the outcome and its effects. Reads O(part), whatever the chain's length.
    ///
    /// The rules are SPEC §4.3's, spread over the parts: each part compares the positions it
    /// covers with the stored chain and stores the missing ones, raising the coverage to the
    /// declared total with its first batch; the last part raises it again and writes the
    /// watermark. A part that is not one chain segment after the anchor is `refused`,
    /// one that disagrees with the stored chain is `diverged`: both revoke the coverage and end
    /// the session. When the store holds more than the declared total, parts write nothing and
    /// the last answers `stale_log`.
    pub fn evaluate_populate_part(
        &self,
        exec: &ExecutionId,
        session: &PopulateSession,
        log: &[LogEvent],
    ) -> Result<PartPlan, PopulateError> {
        self.check_log_events(log)?;
        if log.is_empty() {
            return Err(PopulateError::InvalidInput(
                "a session part holds at least one event (an empty log is a plain populate)".into(),
            ));
        }
        let end = session
            .position
            .checked_add(log.len() as u64)
            .filter(|end| *end <= session.total)
            .ok_or_else(|| {
                PopulateError::InvalidInput(format!(
                    "a part of {} events at position {} runs past the session's total of {}",
                    log.len(),
                    session.position,
                    session.total
                ))
            })?;
        let record = self.read_session(exec)?;
        let taken = match &record {
            Some(r) if r.id == session.id && session.position > 0 => Some(r),
            _ if session.position > 0 => {
                return Err(PopulateError::SessionConflict {
                    next_position: None,
                })
            }
            _ => None,
        };
        let anchor = match taken {
            None => None,
            Some(r) if r.total != session.total => {
                return Err(PopulateError::InvalidInput(format!(
                    "session {} declared a log of {} events, this part says {}",
                    r.id, r.total, session.total
                )))
            }
            Some(r) if session.position > r.next_position => {
                return Err(PopulateError::SessionConflict {
                    next_position: Some(r.next_position),
                })
            }
            Some(r) if session.position == r.next_position => Some(r.tail.clone()),
            // A part sent again: its anchor is the stored event before it, which an earlier
            // part of this session checked.
            Some(r) => match self.read_event_at(exec, session.position)? {
                Some(event) => Some(event.event_id),
                None => {
                    return Err(PopulateError::SessionConflict {
                        next_position: Some(r.next_position),
                    })
                }
            },
        };
        if let Some(anchor) = &anchor {
            if log.iter().any(|e| e.event_id == *anchor) {
                return Err(PopulateError::InvalidInput(format!(
                    "event {anchor} appears twice in the log"
                )));
            }
        }

        let head = self.read_head(exec)?;
        let existing = self.read_coverage(exec)?;
        let finished = |outcome: FromLog, effects: Vec<Effect>| PartPlan {
            outcome: PartOutcome::Finished(outcome),
            effects,
        };
        let revoke = |outcome: FromLog| {
            let effect = Effect {
                execution_id: exec.clone(),
                head_check: HeadCheck::Expect(head.clone()),
                events: Vec::new(),
                watermark: None,
                coverage: match existing {
                    Some(_) => CoverageChange::Drop,
                    None => CoverageChange::Keep,
                },
                session: match record {
                    Some(_) => SessionChange::Clear,
                    None => SessionChange::Keep,
                },
            };
            let changes =
                effect.coverage != CoverageChange::Keep || effect.session != SessionChange::Keep;
            finished(outcome, if changes { vec![effect] } else { Vec::new() })
        };
        let ordered = match order_segment(log, anchor.as_ref()) {
            Ok(ordered) => ordered,
            Err(reason) => return Ok(revoke(FromLog::Refused { reason })),
        };

        // Compare the positions this part covers, one stored event at a time.
        let first_seq = session.position + 1;
        let mut stored_seqs = BTreeSet::new();
        let mut diverged = None;
        let view = self.engine.view();
        let prefix_len = keys::partition(exec).len();
        crate::engine::scan_in_steps(
            &*view,
            &keys::event(exec, first_seq),
            &keys::event(exec, end + 1),
            1_024,
            |piece| {
                for (key, value) in piece {
                    let Some(PartitionKey::Event(seq)) =
                        keys::parse_partition_key(prefix_len, &key)
                    else {
                        return Err(StorageError::Corrupted("malformed event key".into()));
                    };
                    let stored = codec::decode_event(exec, seq, &value)?;
                    let logged = ordered[(seq - first_seq) as usize];
                    if !same_as_logged(&stored, logged) {
                        diverged = Some(FromLog::Diverged {
                            at_position: seq - 1,
                            stored: stored.event_id,
                            log: logged.event_id.clone(),
                        });
                        return Ok(false);
                    }
                    stored_seqs.insert(seq);
                }
                Ok(true)
            },
        )?;
        drop(view);
        if let Some(outcome) = diverged {
            return Ok(revoke(outcome));
        }

        let root = match taken {
            Some(r) => r.root.clone(),
            None => ordered[0].event_id.clone(),
        };
        let next = SessionRecord {
            id: session.id.clone(),
            total: session.total,
            next_position: end.max(taken.map_or(0, |r| r.next_position)),
            root: root.clone(),
            tail: match taken {
                Some(r) if r.next_position > end => r.tail.clone(),
                _ => ordered[ordered.len() - 1].event_id.clone(),
            },
        };
        let session_change = if record.as_ref() == Some(&next) {
            SessionChange::Keep
        } else {
            SessionChange::Set(next.clone())
        };
        let is_last = end == session.total;
        let accepted = |appended: u64| PartOutcome::Accepted {
            next_position: next.next_position,
            total: session.total,
            appended,
        };

        let stored_len = head.as_ref().map_or(0, |h| h.exec_seq);
        if stored_len > session.total {
            // The store holds more than the whole log: write nothing but the session's progress,
            // and let the last part say so.
            let effects = self.fill_effects(exec, head, &[], (None, None), session_change, true);
            return Ok(match is_last {
                true => finished(
                    FromLog::StaleLog {
                        stored_len,
                        log_len: session.total,
                    },
                    effects,
                ),
                false => PartPlan {
                    outcome: accepted(0),
                    effects,
                },
            });
        }

        let mut missing = Vec::new();
        for (logged, exec_seq) in ordered.iter().zip(first_seq..) {
            if stored_seqs.contains(&exec_seq) {
                continue;
            }
            // Ids are unique in a chain: an id stored elsewhere means the log repeats it (an
            // earlier position) or the store holds it at a later position than the log does.
            if let Some(stored_seq) = self.read_id_index(exec, &logged.event_id)? {
                return Err(PopulateError::Forked(Fork::IdElsewhere {
                    event_id: logged.event_id.clone(),
                    stored_seq,
                    offered_seq: exec_seq,
                }));
            }
            missing.push(stored_as(exec, exec_seq, logged));
        }
        let appended = missing.len() as u64;
        // Coverage rides with the first batch that appends (coverage first, SPEC §4.3), so parts
        // over positions already stored leave a served chain served; and again with the last
        // part, which completes a check of every position (an append between parts may have
        // dropped it, and its event was compared since).
        let coverage = (is_last || !missing.is_empty()).then(|| {
            Coverage {
                root_event_id: Some(root),
                total: session.total,
                origin: Origin::Log,
            }
            .raise(existing.as_ref())
        });
        let watermark = is_last.then_some(Watermark {
            first_seq: 1,
            through_seq: session.total,
        });
        let unchanged = coverage
            .as_ref()
            .is_none_or(|c| existing.as_ref() == Some(c))
            && match watermark {
                None => true,
                Some(w) => {
                    let stored = self.read_watermark(exec)?;
                    Some(w.widen(stored)) == stored
                }
            };
        let outcome = match (&coverage, is_last) {
            (Some(c), true) => PartOutcome::Finished(FromLog::InSync {
                total: c.total,
                appended,
            }),
            _ => accepted(appended),
        };
        let effects = self.fill_effects(
            exec,
            head,
            &missing,
            (coverage, watermark),
            session_change,
            unchanged,
        );
        Ok(PartPlan { outcome, effects })
    }

    /// Turns one effect into one write batch, reading the state it depends on. Writes nothing
    /// itself. Refuses (and stages nothing) when the head precondition fails or when an event
    /// would land on an occupied sequence with different content or repeat a known id at
    /// another sequence.
    pub fn stage_effect(
        &self,
        effect: &Effect,
        commit_index: u64,
    ) -> Result<(WriteBatch, Applied), ApplyError> {
        let exec = &effect.execution_id;
        let head = self.read_head(exec)?;
        if let HeadCheck::Expect(expected) = &effect.head_check {
            if *expected != head {
                return Err(ApplyError::HeadMoved {
                    expected: expected.clone(),
                    found: head,
                });
            }
        }

        let mut batch = WriteBatch::new();
        let mut applied = Applied::default();
        let mut staged_by_seq: BTreeMap<u64, &ChainEvent> = BTreeMap::new();
        let mut staged_by_id: BTreeMap<&EventId, u64> = BTreeMap::new();
        let mut new_head = head.clone();
        for event in &effect.events {
            if event.execution_id != *exec {
                return Err(ApplyError::Malformed(format!(
                    "event {} of execution {} inside an effect on {exec}",
                    event.event_id, event.execution_id
                )));
            }
            let seq = event.exec_seq;
            if seq == 0 {
                return Err(ApplyError::Malformed(format!(
                    "event {} at seq 0",
                    event.event_id
                )));
            }
            // Sequence first, then id, each against this effect's earlier events and then the
            // store, so that the verdict does not depend on where the conflicting event lives.
            let occupant = match staged_by_seq.get(&seq) {
                Some(staged) => Some((*staged).clone()),
                None => self.read_event_at(exec, seq)?,
            };
            if let Some(occupant) = occupant {
                if occupant.same_content(event) {
                    applied.duplicates += 1;
                    staged_by_seq.insert(seq, event);
                    staged_by_id.insert(&event.event_id, seq);
                    continue;
                }
                return Err(ApplyError::Forked(Fork::SeqTaken {
                    exec_seq: seq,
                    stored: occupant.event_id,
                    offered: event.event_id.clone(),
                }));
            }
            let id_seq = match staged_by_id.get(&event.event_id) {
                Some(staged_seq) => Some(*staged_seq),
                None => self.read_id_index(exec, &event.event_id)?,
            };
            if let Some(stored_seq) = id_seq {
                return Err(ApplyError::Forked(Fork::IdElsewhere {
                    event_id: event.event_id.clone(),
                    stored_seq,
                    offered_seq: seq,
                }));
            }
            let stored = ChainEvent {
                commit_index,
                ..event.clone()
            };
            let payload = codec::payload_bytes(&stored.payload);
            batch.put(
                keys::event(exec, seq),
                codec::encode_event(&stored, &payload),
            );
            batch.put(
                keys::id_index(exec, &event.event_id),
                codec::encode_seq(seq),
            );
            batch.put(
                keys::feed(commit_index, exec, seq),
                event.event_id.as_bytes(),
            );
            applied.applied += 1;
            staged_by_seq.insert(seq, event);
            staged_by_id.insert(&event.event_id, seq);
            if new_head.as_ref().is_none_or(|h| seq > h.exec_seq) {
                new_head = Some(Head {
                    exec_seq: seq,
                    event_id: event.event_id.clone(),
                });
            }
        }
        if new_head != head {
            if let Some(h) = &new_head {
                batch.put(keys::head(exec), codec::encode_head(h));
            }
        }
        if let Some(watermark) = effect.watermark {
            let existing = self.read_watermark(exec)?;
            let widened = watermark.widen(existing);
            if Some(widened) != existing {
                batch.put(keys::watermark(exec), codec::encode_watermark(&widened));
            }
        }
        match &effect.coverage {
            CoverageChange::Keep => {}
            CoverageChange::Drop => batch.delete(keys::coverage(exec)),
            CoverageChange::Raise(coverage) => {
                let existing = self.read_coverage(exec)?;
                let raised = coverage.clone().raise(existing.as_ref());
                if Some(&raised) != existing.as_ref() {
                    batch.put(keys::coverage(exec), codec::encode_coverage(&raised));
                }
            }
        }
        match &effect.session {
            SessionChange::Keep => {}
            SessionChange::Clear => batch.delete(keys::session(exec)),
            SessionChange::Set(record) => {
                batch.put(keys::session(exec), codec::encode_session(record))
            }
        }
        Ok((batch, applied))
    }
}

/// The log's event as the store keeps it at `exec_seq` (the commit index is set on apply).
pub(crate) fn stored_as(exec: &ExecutionId, exec_seq: u64, logged: &LogEvent) -> ChainEvent {
    ChainEvent {
        execution_id: exec.clone(),
        exec_seq,
        event_id: logged.event_id.clone(),
        prev_event_id: logged.prev_event_id.clone(),
        parent_execution_id: logged.parent_execution_id.clone(),
        payload: logged.payload.clone(),
        commit_index: 0,
    }
}

/// Whether a stored event is the log's event at its position (the commit index aside).
pub(crate) fn same_as_logged(stored: &ChainEvent, logged: &LogEvent) -> bool {
    stored.event_id == logged.event_id
        && stored.prev_event_id == logged.prev_event_id
        && stored.parent_execution_id == logged.parent_execution_id
        && stored.payload == logged.payload
}

/// The coverage change of an append without `genesis`. A genesis execution's total grows with
/// its chain. Coverage from a log is dropped: the per-event path cannot prove its event is the log's, and a total left in
/// place could be reached by events the log never held (after a populate interrupted between
/// batches, say), which would create authority out of a failure.
fn per_event_coverage(existing: Option<Coverage>, events: u64) -> CoverageChange {
    match existing {
        Some(c) if c.origin == Origin::Genesis => CoverageChange::Raise(Coverage {
            root_event_id: c.root_event_id,
            total: c.total.saturating_add(events),
            origin: Origin::Genesis,
        }),
        Some(_) => CoverageChange::Drop,
        None => CoverageChange::Keep,
    }
}

impl Effect {
    /// About how many bytes the effect's events take in a Raft entry (see [`encoded_size`]):
    /// what bounds an entry holding the effects of several requests.
    pub fn encoded_size(&self) -> usize {
        self.events.iter().map(encoded_size).sum()
    }
}

/// Splits `events` into runs of at most `count_max` events and about `bytes_max` encoded bytes
/// each (one event at least), in order.
fn batches(events: &[ChainEvent], count_max: usize, bytes_max: usize) -> Vec<&[ChainEvent]> {
    let mut runs = Vec::new();
    let mut start = 0;
    let mut bytes = 0usize;
    for (i, event) in events.iter().enumerate() {
        let size = encoded_size(event);
        if i > start && (i - start >= count_max.max(1) || bytes.saturating_add(size) > bytes_max) {
            runs.push(&events[start..i]);
            start = i;
            bytes = 0;
        }
        bytes = bytes.saturating_add(size);
    }
    if start < events.len() {
        runs.push(&events[start..]);
    }
    runs
}

/// About how many bytes `event` takes in a Raft entry: its payload's JSON and its ids.
fn encoded_size(event: &ChainEvent) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing a `Value` cannot fail: its map keys are strings.
    let _ = serde_json::to_writer(&mut count, &event.payload);
    count.0 + 3 * 129 + 64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(seq: u64, payload_chars: usize) -> ChainEvent {
        ChainEvent {
            execution_id: ExecutionId::new("x").expect("id"),
            exec_seq: seq,
            event_id: EventId::new(format!("e{seq}")).expect("id"),
            prev_event_id: None,
            parent_execution_id: None,
            payload: serde_json::Value::String("p".repeat(payload_chars)),
            commit_index: 0,
        }
    }

    fn lengths(runs: &[&[ChainEvent]]) -> Vec<usize> {
        runs.iter().map(|run| run.len()).collect()
    }

    #[test]
    fn populate_batches_are_bounded_by_count_and_by_bytes_and_keep_every_event_in_order() {
        let small: Vec<ChainEvent> = (1..=10).map(|seq| event(seq, 10)).collect();
        assert_eq!(lengths(&batches(&small, 4, usize::MAX)), vec![4, 4, 2]);
        // Events of ~100 kB against a 250 kB budget: two per batch.
        let large: Vec<ChainEvent> = (1..=5).map(|seq| event(seq, 100_000)).collect();
        assert_eq!(lengths(&batches(&large, 1_000, 250_000)), vec![2, 2, 1]);
        // An event over the budget travels alone.
        assert_eq!(lengths(&batches(&large, 1_000, 10)), vec![1; 5]);
        let seqs: Vec<u64> = batches(&large, 1_000, 250_000)
            .into_iter()
            .flatten()
            .map(|e| e.exec_seq)
            .collect();
        assert_eq!(seqs, vec![1, 2, 3, 4, 5]);
        assert!(batches(&[], 4, 4).is_empty());
    }
}
