//! Replicated deliveries (SPEC §4.2): events stored at the sequences they carry, in any order,
//! refused whole when they would fork the chain, split into entries a peer accepts.

use chainstore_model::{ChainEvent, ExecutionId, Limit, Oversize, ReplicateError, Watermark};

use super::batches;
use crate::chain::effect::{ApplyError, CoverageChange, Effect, HeadCheck, SessionChange};
use crate::chain::store::ChainStore;
use crate::engine::Engine;

impl<E: Engine> ChainStore<E> {
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
}
