//! Application: one effect turned into one write batch against the state it depends on (the
//! head check, occupied sequences, known ids), refused whole when it does not fit.
use std::collections::BTreeMap;

use chainstore_model::{ChainEvent, EventId, ExecutionId, Fork, Head};

use crate::chain::codec;
use crate::chain::effect::{Applied, ApplyError, CoverageChange, Effect, HeadCheck, SessionChange};
use crate::chain::keys;
use crate::chain::store::ChainStore;
use crate::engine::{Engine, WriteBatch};

/// The events an effect has staged so far, by sequence and by id.
#[derive(Default)]
struct Staged<'a> {
    by_seq: BTreeMap<u64, &'a ChainEvent>,
    by_id: BTreeMap<&'a EventId, u64>,
}

impl<'a> Staged<'a> {
    fn add(&mut self, event: &'a ChainEvent) {
        self.by_seq.insert(event.exec_seq, event);
        self.by_id.insert(&event.event_id, event.exec_seq);
    }
}

impl<E: Engine> ChainStore<E> {
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
        let mut staged = Staged::default();
        let mut new_head = head.clone();
        for event in &effect.events {
            if self.is_duplicate(exec, event, &staged)? {
                applied.duplicates += 1;
                staged.add(event);
                continue;
            }
            let seq = event.exec_seq;
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
            staged.add(event);
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
        self.stage_records(effect, &mut batch)?;
        Ok((batch, applied))
    }

    /// Whether `event` is already there, identical (a duplicate), at its sequence; refuses an
    /// event of another execution, at seq 0, on a sequence holding another event or with an id
    /// held at another sequence. Sequence first, then id, each against this effect's earlier
    /// events and then the store, so that the verdict does not depend on where the conflicting
    /// event lives.
    fn is_duplicate(
        &self,
        exec: &ExecutionId,
        event: &ChainEvent,
        staged: &Staged<'_>,
    ) -> Result<bool, ApplyError> {
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
        let occupant = match staged.by_seq.get(&seq) {
            Some(staged) => Some((*staged).clone()),
            None => self.read_event_at(exec, seq)?,
        };
        if let Some(occupant) = occupant {
            if occupant.same_content(event) {
                return Ok(true);
            }
            return Err(ApplyError::Forked(Fork::SeqTaken {
                exec_seq: seq,
                stored: occupant.event_id,
                offered: event.event_id.clone(),
            }));
        }
        let id_seq = match staged.by_id.get(&event.event_id) {
            Some(staged_seq) => Some(*staged_seq),
            None => self.read_id_index(exec, &event.event_id)?,
        };
        match id_seq {
            Some(stored_seq) => Err(ApplyError::Forked(Fork::IdElsewhere {
                event_id: event.event_id.clone(),
                stored_seq,
                offered_seq: seq,
            })),
            None => Ok(false),
        }
    }

    /// Stages the effect's changes to the execution's records: the watermark widened, the
    /// coverage kept, dropped or raised, the session record kept, cleared or set.
    fn stage_records(&self, effect: &Effect, batch: &mut WriteBatch) -> Result<(), ApplyError> {
        let exec = &effect.execution_id;
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
        Ok(())
    }
}
