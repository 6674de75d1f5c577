//! Appends (SPEC §4.1): a batch of linked events checked for shape, its leading duplicates
//! answered without writing, the rest placed after the head as ONE effect.
use std::collections::BTreeSet;

use chainstore_model::StorageError;
use chainstore_model::{
    AppendError, AppendRequest, Appended, ChainEvent, Coverage, ExecutionId, Limit, Origin,
    Oversize, Watermark,
};

use super::{encoded_size, per_event_coverage, AppendPlan, BatchPlan};
use crate::chain::effect::{CoverageChange, Effect, HeadCheck, SessionChange};
use crate::chain::store::ChainStore;
use crate::engine::Engine;

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
        self.check_batch(requests)?;
        let duplicates = self.leading_duplicates(exec, requests)?;
        let new = &requests[duplicates.len()..];
        if new.is_empty() {
            return Ok(BatchPlan {
                duplicates,
                write: None,
            });
        }
        Ok(BatchPlan {
            duplicates,
            write: Some(self.placed_after_head(exec, new)?),
        })
    }

    /// The checks of a batch that need no state: at least one event, at most the limit, only
    /// the first `genesis` (and then without a predecessor), each naming the one before it, no
    /// id twice, every payload within its limit.
    fn check_batch(&self, requests: &[AppendRequest]) -> Result<(), AppendError> {
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
        Ok(())
    }

    /// The batch's leading events already stored with identical content, answered as
    /// duplicates; a stored event with other content, or one after a new event, is an
    /// `event_conflict`.
    fn leading_duplicates(
        &self,
        exec: &ExecutionId,
        requests: &[AppendRequest],
    ) -> Result<Vec<Appended>, AppendError> {
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
        Ok(duplicates)
    }

    /// The effect that stores `new` (not empty) after the head: the head check for its first
    /// event, a genesis only on a never-seen execution, sequences after the head, the coverage
    /// change, and the batch within the bytes of one entry.
    fn placed_after_head(
        &self,
        exec: &ExecutionId,
        new: &[AppendRequest],
    ) -> Result<Effect, AppendError> {
        let Some(first_new) = new.first() else {
            return Err(AppendError::InvalidInput(
                "an append needs at least one event".into(),
            ));
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
        Ok(Effect {
            execution_id: exec.clone(),
            head_check: HeadCheck::Expect(head),
            events,
            watermark: Some(Watermark {
                first_seq,
                through_seq: last_seq,
            }),
            coverage,
            session: SessionChange::Keep,
        })
    }
}
