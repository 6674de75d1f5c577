//! Populates (SPEC §4.3): the authoritative log ordered by its links, compared with the stored
//! chain position by position, and the outcome resolved into effects (coverage first,
//! watermark last, in batches a peer accepts).
use std::collections::BTreeSet;

use chainstore_model::{
    order_by_links, ChainEvent, Coverage, ExecutionId, FromLog, Head, Limit, LogEvent, Origin,
    Oversize, PopulateError, Watermark,
};

use super::{batches, same_as_logged, stored_as, PopulatePlan};
use crate::chain::effect::{CoverageChange, Effect, HeadCheck, SessionChange};
use crate::chain::read::Partition;
use crate::chain::store::ChainStore;
use crate::engine::Engine;

impl<E: Engine> ChainStore<E> {
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

        if log.is_empty() {
            return Ok(empty_log(exec, &part));
        }

        let ordered = match order_by_links(log) {
            Ok(ordered) => ordered,
            Err(reason) => return Ok(revoke(exec, &part, FromLog::Refused { reason })),
        };
        let log_len = ordered.len() as u64;

        // A content conflict wins over length: a shorter log that disagrees is a divergence,
        // not staleness.
        if let Some(diverged) = first_divergence(&part.events, &ordered) {
            return Ok(revoke(exec, &part, diverged));
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
}

/// A populate of an empty log: in sync with a never-written execution (coverage of nothing,
/// the empty watermark), stale against a stored chain.
fn empty_log(exec: &ExecutionId, part: &Partition) -> PopulatePlan {
    let stored_len = part.head.as_ref().map_or(0, |h| h.exec_seq);
    if stored_len > 0 {
        return PopulatePlan {
            outcome: FromLog::StaleLog {
                stored_len,
                log_len: 0,
            },
            effects: Vec::new(),
        };
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
    let unchanged =
        part.watermark == Some(Watermark::EMPTY) && part.coverage.as_ref() == Some(&coverage);
    PopulatePlan {
        outcome: FromLog::InSync {
            total: 0,
            appended: 0,
        },
        effects: if unchanged { Vec::new() } else { vec![effect] },
    }
}

/// The first stored event that is not the log's at its position: the stored chain must be a
/// prefix of the log, position for position (stored events past the log's end are not
/// compared).
fn first_divergence(stored: &[ChainEvent], ordered: &[&LogEvent]) -> Option<FromLog> {
    stored.iter().find_map(|stored| {
        let position = stored.exec_seq - 1;
        let logged = usize::try_from(position)
            .ok()
            .and_then(|p| ordered.get(p))?;
        (!same_as_logged(stored, logged)).then(|| FromLog::Diverged {
            at_position: position,
            stored: stored.event_id.clone(),
            log: logged.event_id.clone(),
        })
    })
}

/// The plan of a log refused or diverged: `outcome`, and the effect that revokes the coverage
/// (none without coverage).
fn revoke(exec: &ExecutionId, part: &Partition, outcome: FromLog) -> PopulatePlan {
    PopulatePlan {
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
    }
}
