//! Evaluation (SPEC §4.1–§4.3 resolved into effects) and application (one effect → one batch),
//! by operation: `append.rs`, `replicate.rs`, `populate.rs`, `session.rs` (a populate in
//! parts) and `stage.rs` (an effect staged into a batch). The plans each evaluation returns,
//! and the helpers they share, are here.

mod append;
mod populate;
mod replicate;
mod session;
mod stage;

use crate::chain::effect::{CoverageChange, Effect};
use chainstore_model::ExecutionId;
use chainstore_model::{Appended, ChainEvent, Coverage, FromLog, LogEvent, Origin, PartOutcome};

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
    use chainstore_model::EventId;

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
