//! Populate sessions: a log longer than one request sent in parts. Each part is placed against
//! the session the store holds ([`place_part`], pure), compared with the stored chain over the
//! positions it covers, and its missing events stored; the record the session moves to is
//! [`next_record`], pure as well. The two are the session's state machine, tested on their own
//! by the table at the end of this file.

use std::cmp::Ordering;
use std::collections::BTreeSet;

use chainstore_model::{
    order_segment, ChainEvent, Coverage, EventId, ExecutionId, Fork, FromLog, Head, LogEvent,
    Origin, PartOutcome, PopulateError, PopulateSession, StorageError, Watermark,
};

use super::{same_as_logged, stored_as, PartPlan};
use crate::chain::codec;
use crate::chain::effect::{CoverageChange, Effect, HeadCheck, SessionChange, SessionRecord};
use crate::chain::keys::{self, PartitionKey};
use crate::chain::store::ChainStore;
use crate::engine::Engine;

/// Where a part of a populate session stands against the session record the store holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PartPlace<'a> {
    /// The part is at position 0: it starts the session, replacing any other of the execution.
    Starts,
    /// The part continues the session where its parts so far ended.
    Continues(&'a SessionRecord),
    /// The part starts at a position the session already took: a part sent again.
    Repeats(&'a SessionRecord),
}

impl<'a> PartPlace<'a> {
    /// The session's record, unless the part starts it anew.
    fn taken(self) -> Option<&'a SessionRecord> {
        match self {
            PartPlace::Starts => None,
            PartPlace::Continues(record) | PartPlace::Repeats(record) => Some(record),
        }
    }
}

/// Places a part (`session`: its id, its position, the declared total) against the session
/// `record` the store holds, or refuses it: a part after position 0 needs its own session, the
/// total its first part declared, and no gap after the parts taken.
pub(crate) fn place_part<'a>(
    record: Option<&'a SessionRecord>,
    session: &PopulateSession,
) -> Result<PartPlace<'a>, PopulateError> {
    if session.position == 0 {
        return Ok(PartPlace::Starts);
    }
    let Some(record) = record.filter(|r| r.id == session.id) else {
        return Err(PopulateError::SessionConflict {
            next_position: None,
        });
    };
    if record.total != session.total {
        return Err(PopulateError::InvalidInput(format!(
            "session {} declared a log of {} events, this part says {}",
            record.id, record.total, session.total
        )));
    }
    match session.position.cmp(&record.next_position) {
        Ordering::Greater => Err(PopulateError::SessionConflict {
            next_position: Some(record.next_position),
        }),
        Ordering::Equal => Ok(PartPlace::Continues(record)),
        Ordering::Less => Ok(PartPlace::Repeats(record)),
    }
}

/// The session's record after a part placed at `place` over the positions up to `end`, whose
/// events in link order run from `first` to `last`: the first part fixes the root, and the
/// record moves on only when the part reaches past where the session stood.
pub(crate) fn next_record(
    place: PartPlace<'_>,
    session: &PopulateSession,
    end: u64,
    first: &EventId,
    last: &EventId,
) -> SessionRecord {
    let taken = place.taken();
    SessionRecord {
        id: session.id.clone(),
        total: session.total,
        next_position: end.max(taken.map_or(0, |r| r.next_position)),
        root: taken.map_or_else(|| first.clone(), |r| r.root.clone()),
        tail: match taken {
            Some(r) if r.next_position > end => r.tail.clone(),
            _ => last.clone(),
        },
    }
}

/// Where a part leaves its session: whether it is the last, the record the session moves to,
/// and the change that writes it.
struct Last<'a> {
    is_last: bool,
    next: &'a SessionRecord,
    session_change: SessionChange,
}

/// What one part compares against: the execution as stored when the part was evaluated.
struct Stored {
    head: Option<Head>,
    coverage: Option<Coverage>,
    record: Option<SessionRecord>,
}

impl<E: Engine> ChainStore<E> {
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
        let end = self.checked_part(session, log)?;
        let stored = Stored {
            head: self.read_head(exec)?,
            coverage: self.read_coverage(exec)?,
            record: self.read_session(exec)?,
        };
        let place = place_part(stored.record.as_ref(), session)?;
        let anchor = self.anchor_of(exec, session, place)?;
        if let Some(anchor) = &anchor {
            if log.iter().any(|e| e.event_id == *anchor) {
                return Err(PopulateError::InvalidInput(format!(
                    "event {anchor} appears twice in the log"
                )));
            }
        }
        let ordered = match order_segment(log, anchor.as_ref()) {
            Ok(ordered) => ordered,
            Err(reason) => return Ok(revoke(exec, &stored, FromLog::Refused { reason })),
        };
        let first_seq = session.position + 1;
        let stored_seqs = match self.compare_part(exec, first_seq, end, &ordered)? {
            Ok(stored_seqs) => stored_seqs,
            Err(diverged) => return Ok(revoke(exec, &stored, diverged)),
        };

        let next = next_record(
            place,
            session,
            end,
            &ordered[0].event_id,
            &ordered[ordered.len() - 1].event_id,
        );
        let session_change = if stored.record.as_ref() == Some(&next) {
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

        let stored_len = stored.head.as_ref().map_or(0, |h| h.exec_seq);
        if stored_len > session.total {
            // The store holds more than the whole log: write nothing but the session's progress,
            // and let the last part say so.
            let effects =
                self.fill_effects(exec, stored.head, &[], (None, None), session_change, true);
            let outcome = match is_last {
                true => PartOutcome::Finished(FromLog::StaleLog {
                    stored_len,
                    log_len: session.total,
                }),
                false => accepted(0),
            };
            return Ok(PartPlan { outcome, effects });
        }

        let missing = self.missing_events(exec, first_seq, &ordered, &stored_seqs)?;
        let last = Last {
            is_last,
            next: &next,
            session_change,
        };
        self.stored_part(exec, session, stored, missing, last)
    }

    /// The plan of a part that agrees with the stored chain: its missing events stored, the
    /// coverage raised with the first batch that appends and again by the last part, the
    /// watermark written by the last part.
    fn stored_part(
        &self,
        exec: &ExecutionId,
        session: &PopulateSession,
        stored: Stored,
        missing: Vec<ChainEvent>,
        last: Last<'_>,
    ) -> Result<PartPlan, PopulateError> {
        let appended = missing.len() as u64;
        // Coverage rides with the first batch that appends (coverage first, SPEC §4.3), so parts
        // over positions already stored leave a served chain served; and again with the last
        // part, which completes a check of every position (an append between parts may have
        // dropped it, and its event was compared since).
        let coverage = (last.is_last || !missing.is_empty()).then(|| {
            Coverage {
                root_event_id: Some(last.next.root.clone()),
                total: session.total,
                origin: Origin::Log,
            }
            .raise(stored.coverage.as_ref())
        });
        let watermark = last.is_last.then_some(Watermark {
            first_seq: 1,
            through_seq: session.total,
        });
        let unchanged = coverage
            .as_ref()
            .is_none_or(|c| stored.coverage.as_ref() == Some(c))
            && match watermark {
                None => true,
                Some(w) => {
                    let stored = self.read_watermark(exec)?;
                    Some(w.widen(stored)) == stored
                }
            };
        let outcome = match (&coverage, last.is_last) {
            (Some(c), true) => PartOutcome::Finished(FromLog::InSync {
                total: c.total,
                appended,
            }),
            _ => PartOutcome::Accepted {
                next_position: last.next.next_position,
                total: session.total,
                appended,
            },
        };
        let effects = self.fill_effects(
            exec,
            stored.head,
            &missing,
            (coverage, watermark),
            last.session_change,
            unchanged,
        );
        Ok(PartPlan { outcome, effects })
    }

    /// Checks a part's events and that it fits in its session; returns the position after it.
    fn checked_part(
        &self,
        session: &PopulateSession,
        log: &[LogEvent],
    ) -> Result<u64, PopulateError> {
        self.check_log_events(log)?;
        if log.is_empty() {
            return Err(PopulateError::InvalidInput(
                "a session part holds at least one event (an empty log is a plain populate)".into(),
            ));
        }
        session
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
            })
    }

    /// The event the part's first event must name as its predecessor: none for a first part,
    /// the session's tail for the next part, and for a part sent again the stored event before
    /// it (which an earlier part of this session checked).
    fn anchor_of(
        &self,
        exec: &ExecutionId,
        session: &PopulateSession,
        place: PartPlace<'_>,
    ) -> Result<Option<EventId>, PopulateError> {
        match place {
            PartPlace::Starts => Ok(None),
            PartPlace::Continues(record) => Ok(Some(record.tail.clone())),
            PartPlace::Repeats(record) => match self.read_event_at(exec, session.position)? {
                Some(event) => Ok(Some(event.event_id)),
                None => Err(PopulateError::SessionConflict {
                    next_position: Some(record.next_position),
                }),
            },
        }
    }

    /// Compares the stored events at `first_seq..=end` with the part's (`ordered`), one stored
    /// event at a time: the sequences that hold the logged event, or the first divergence.
    fn compare_part(
        &self,
        exec: &ExecutionId,
        first_seq: u64,
        end: u64,
        ordered: &[&LogEvent],
    ) -> Result<Result<BTreeSet<u64>, FromLog>, StorageError> {
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
        Ok(match diverged {
            Some(outcome) => Err(outcome),
            None => Ok(stored_seqs),
        })
    }

    /// The part's events at the sequences that hold none yet, as they will be stored. Ids are
    /// unique in a chain: an id stored elsewhere means the log repeats it (an earlier position)
    /// or the store holds it at a later position than the log does.
    fn missing_events(
        &self,
        exec: &ExecutionId,
        first_seq: u64,
        ordered: &[&LogEvent],
        stored_seqs: &BTreeSet<u64>,
    ) -> Result<Vec<ChainEvent>, PopulateError> {
        let mut missing = Vec::new();
        for (logged, exec_seq) in ordered.iter().zip(first_seq..) {
            if stored_seqs.contains(&exec_seq) {
                continue;
            }
            if let Some(stored_seq) = self.read_id_index(exec, &logged.event_id)? {
                return Err(PopulateError::Forked(Fork::IdElsewhere {
                    event_id: logged.event_id.clone(),
                    stored_seq,
                    offered_seq: exec_seq,
                }));
            }
            missing.push(stored_as(exec, exec_seq, logged));
        }
        Ok(missing)
    }
}

/// The plan of a part refused or diverged: `outcome`, and an effect that revokes the coverage
/// and ends the session (none when there is neither).
fn revoke(exec: &ExecutionId, stored: &Stored, outcome: FromLog) -> PartPlan {
    let effect = Effect {
        execution_id: exec.clone(),
        head_check: HeadCheck::Expect(stored.head.clone()),
        events: Vec::new(),
        watermark: None,
        coverage: match stored.coverage {
            Some(_) => CoverageChange::Drop,
            None => CoverageChange::Keep,
        },
        session: match stored.record {
            Some(_) => SessionChange::Clear,
            None => SessionChange::Keep,
        },
    };
    let changes = effect.coverage != CoverageChange::Keep || effect.session != SessionChange::Keep;
    PartPlan {
        outcome: PartOutcome::Finished(outcome),
        effects: if changes { vec![effect] } else { Vec::new() },
    }
}

#[cfg(test)]
mod tests {
    use chainstore_model::SessionId;

    use super::*;

    fn id(s: &str) -> EventId {
        EventId::new(s).unwrap()
    }

    fn record(session: &str, total: u64, next_position: u64) -> SessionRecord {
        SessionRecord {
            id: SessionId::new(session).unwrap(),
            total,
            next_position,
            root: id("root"),
            tail: id(&format!("e{}", next_position - 1)),
        }
    }

    fn part(session: &str, position: u64, total: u64) -> PopulateSession {
        PopulateSession {
            id: SessionId::new(session).unwrap(),
            position,
            total,
        }
    }

    /// Every way a part can meet the session record, and what the transition makes of it.
    #[test]
    fn a_part_is_placed_against_the_session_the_store_holds() {
        let held = record("s1", 10, 4);
        type Expected = Result<&'static str, PopulateError>;
        let cases: Vec<(&str, Option<&SessionRecord>, PopulateSession, Expected)> = vec![
            (
                "a first part with no session",
                None,
                part("s1", 0, 10),
                Ok("starts"),
            ),
            (
                "a first part replaces another session",
                Some(&held),
                part("s2", 0, 7),
                Ok("starts"),
            ),
            (
                "a first part sent again restarts its own",
                Some(&held),
                part("s1", 0, 10),
                Ok("starts"),
            ),
            (
                "a later part with no session",
                None,
                part("s1", 4, 10),
                Err(PopulateError::SessionConflict {
                    next_position: None,
                }),
            ),
            (
                "a later part of another session",
                Some(&held),
                part("s2", 4, 10),
                Err(PopulateError::SessionConflict {
                    next_position: None,
                }),
            ),
            (
                "a later part declaring another total",
                Some(&held),
                part("s1", 4, 11),
                Err(PopulateError::InvalidInput(
                    "session s1 declared a log of 10 events, this part says 11".into(),
                )),
            ),
            (
                "a part that skips ahead",
                Some(&held),
                part("s1", 5, 10),
                Err(PopulateError::SessionConflict {
                    next_position: Some(4),
                }),
            ),
            (
                "the next part",
                Some(&held),
                part("s1", 4, 10),
                Ok("continues"),
            ),
            (
                "a part sent again",
                Some(&held),
                part("s1", 2, 10),
                Ok("repeats"),
            ),
        ];
        for (case, stored, session, expected) in cases {
            let placed = place_part(stored, &session).map(|place| match place {
                PartPlace::Starts => "starts",
                PartPlace::Continues(r) => {
                    assert_eq!(r, &held, "{case}");
                    "continues"
                }
                PartPlace::Repeats(r) => {
                    assert_eq!(r, &held, "{case}");
                    "repeats"
                }
            });
            assert_eq!(placed, expected, "{case}");
        }
    }

    /// What the session record becomes after a part: `(next_position, root, tail)`.
    #[test]
    fn the_session_moves_on_only_past_where_it_stood() {
        let held = record("s1", 10, 4);
        let (first, last) = (id("p-first"), id("p-last"));
        let after = |place, position, end| {
            let r = next_record(place, &part("s1", position, 10), end, &first, &last);
            assert_eq!((r.id.as_str(), r.total), ("s1", 10));
            (r.next_position, r.root.to_string(), r.tail.to_string())
        };
        let cases = [
            (
                "a first part fixes the root and the tail",
                after(PartPlace::Starts, 0, 3),
                (3, "p-first", "p-last"),
            ),
            (
                "the next part moves the tail",
                after(PartPlace::Continues(&held), 4, 7),
                (7, "root", "p-last"),
            ),
            (
                "a part sent again below where the session stood changes nothing",
                after(PartPlace::Repeats(&held), 1, 3),
                (4, "root", "e3"),
            ),
            (
                "a part sent again reaching past it moves on",
                after(PartPlace::Repeats(&held), 2, 6),
                (6, "root", "p-last"),
            ),
            (
                "a part sent again ending where the session stood ends on its own last event",
                after(PartPlace::Repeats(&held), 2, 4),
                (4, "root", "p-last"),
            ),
        ];
        for (case, got, (next, root, tail)) in cases {
            assert_eq!(got, (next, root.to_string(), tail.to_string()), "{case}");
        }
    }
}
