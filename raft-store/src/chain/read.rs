//! Reads: raw and guarded chains, the head-to-root walk, the per-execution records, and the
//! change feed. Each read that needs several records takes them from ONE scan of the partition,
//! so it sees one point-in-time state.

use std::collections::BTreeMap;

use crate::chain::codec;
use crate::chain::effect::SessionRecord;
use crate::chain::keys::{self, PartitionKey};
use crate::chain::store::ChainStore;
use crate::engine::{Engine, ScanOrder};
use chainstore_model::StorageError;
use chainstore_model::{
    Authority, ChainEvent, ChainPage, Change, Completeness, Coverage, ExecutionState, Guarded,
    GuardedPage, Head, Reason, Watermark,
};
use chainstore_model::{EventId, ExecutionId};

/// Every record of one execution, from one scan.
#[derive(Debug, Default)]
pub(crate) struct Partition {
    pub(crate) head: Option<Head>,
    pub(crate) watermark: Option<Watermark>,
    pub(crate) coverage: Option<Coverage>,
    /// Stored events in sequence order.
    pub(crate) events: Vec<ChainEvent>,
}

/// One page of the change feed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangePage {
    /// Changes in commit order.
    pub changes: Vec<Change>,
    /// The value to pass as `after` for the following page.
    pub next: u64,
}

/// What one page of a paged read may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageBounds {
    /// The first sequence served (from 1).
    pub from_seq: u64,
    /// The last sequence served, if the reader pins an end (the `through_seq` of its first page,
    /// so a read of a growing chain ends).
    pub to_seq: Option<u64>,
    /// Most events in the page.
    pub events_max: usize,
    /// Most stored bytes of events in the page; a page always holds at least one event, so a
    /// single event larger than this is still served alone.
    pub bytes_max: usize,
}

/// Events checked per scan while a paged read walks a partition: the read's memory is one step
/// plus the page, whatever the partition's length.
const CHECK_STEP: usize = 1024;

/// Most changes one feed page returns (a page never splits the events of one commit, so it may
/// exceed this by the size of one commit).
pub const CHANGES_PAGE_MAX: usize = 10_000;

impl<E: Engine> ChainStore<E> {
    pub(crate) fn read_partition(&self, exec: &ExecutionId) -> Result<Partition, StorageError> {
        let (start, end) = keys::partition_range(exec);
        let pairs = self
            .engine
            .scan(&start, &end, ScanOrder::Forward, usize::MAX)?;
        let mut part = Partition::default();
        for (key, value) in pairs {
            match keys::parse_partition_key(start.len(), &key) {
                Some(PartitionKey::Head) => part.head = Some(codec::decode_head(&value)?),
                Some(PartitionKey::Watermark) => {
                    part.watermark = Some(codec::decode_watermark(&value)?)
                }
                Some(PartitionKey::Coverage) => {
                    part.coverage = Some(codec::decode_coverage(&value)?)
                }
                Some(PartitionKey::Event(seq)) => {
                    part.events.push(codec::decode_event(exec, seq, &value)?)
                }
                None => {
                    return Err(StorageError::Corrupted(format!(
                        "unknown key {:?} inside the partition of {exec}",
                        String::from_utf8_lossy(&key)
                    )))
                }
            }
        }
        Ok(part)
    }

    pub(crate) fn read_head(&self, exec: &ExecutionId) -> Result<Option<Head>, StorageError> {
        self.engine
            .get(&keys::head(exec))?
            .map(|v| codec::decode_head(&v))
            .transpose()
    }

    pub(crate) fn read_watermark(
        &self,
        exec: &ExecutionId,
    ) -> Result<Option<Watermark>, StorageError> {
        self.engine
            .get(&keys::watermark(exec))?
            .map(|v| codec::decode_watermark(&v))
            .transpose()
    }

    pub(crate) fn read_coverage(
        &self,
        exec: &ExecutionId,
    ) -> Result<Option<Coverage>, StorageError> {
        self.engine
            .get(&keys::coverage(exec))?
            .map(|v| codec::decode_coverage(&v))
            .transpose()
    }

    pub(crate) fn read_event_at(
        &self,
        exec: &ExecutionId,
        exec_seq: u64,
    ) -> Result<Option<ChainEvent>, StorageError> {
        self.engine
            .get(&keys::event(exec, exec_seq))?
            .map(|v| codec::decode_event(exec, exec_seq, &v))
            .transpose()
    }

    pub(crate) fn read_session(
        &self,
        exec: &ExecutionId,
    ) -> Result<Option<SessionRecord>, StorageError> {
        self.engine
            .get(&keys::session(exec))?
            .map(|v| codec::decode_session(&v))
            .transpose()
    }

    pub(crate) fn read_id_index(
        &self,
        exec: &ExecutionId,
        event_id: &EventId,
    ) -> Result<Option<u64>, StorageError> {
        self.engine
            .get(&keys::id_index(exec, event_id))?
            .map(|v| codec::decode_seq(&v))
            .transpose()
    }

    /// The stored events in sequence order, unguarded: for diagnosis, never for answers.
    pub fn chain(&self, exec: &ExecutionId) -> Result<Vec<ChainEvent>, StorageError> {
        let (start, end) = keys::event_range(exec);
        let prefix_len = keys::partition(exec).len();
        self.engine
            .scan(&start, &end, ScanOrder::Forward, usize::MAX)?
            .into_iter()
            .map(
                |(key, value)| match keys::parse_partition_key(prefix_len, &key) {
                    Some(PartitionKey::Event(seq)) => codec::decode_event(exec, seq, &value),
                    _ => Err(StorageError::Corrupted("malformed event key".into())),
                },
            )
            .collect()
    }

    /// The stored events from `bounds.from_seq` on, unguarded (for diagnosis), at most one
    /// page of them, and the sequence the next page starts at. Reads only the page's range.
    pub fn chain_raw_page(
        &self,
        exec: &ExecutionId,
        bounds: PageBounds,
    ) -> Result<(Vec<ChainEvent>, Option<u64>), StorageError> {
        let view = self.engine.view();
        let start = keys::event(exec, bounds.from_seq);
        let end = match bounds.to_seq.and_then(|to| to.checked_add(1)) {
            Some(after) => keys::event(exec, after),
            None => keys::event_range(exec).1,
        };
        let prefix_len = keys::partition(exec).len();
        let mut page = Vec::new();
        let mut page_bytes = 0usize;
        let mut next_from_seq = None;
        let step = bounds.events_max.saturating_add(1).min(CHECK_STEP);
        crate::engine::scan_in_steps(&*view, &start, &end, step, |piece| {
            for (key, value) in piece {
                let Some(PartitionKey::Event(seq)) = keys::parse_partition_key(prefix_len, &key)
                else {
                    return Err(StorageError::Corrupted("malformed event key".into()));
                };
                if page.len() >= bounds.events_max
                    || (!page.is_empty() && page_bytes + value.len() > bounds.bytes_max)
                {
                    next_from_seq = Some(seq);
                    return Ok(false);
                }
                page_bytes += value.len();
                page.push(codec::decode_event(exec, seq, &value)?);
            }
            Ok(true)
        })?;
        Ok((page, next_from_seq))
    }

    /// One event by id.
    pub fn event(
        &self,
        exec: &ExecutionId,
        event_id: &EventId,
    ) -> Result<Option<ChainEvent>, StorageError> {
        let Some(seq) = self.read_id_index(exec, event_id)? else {
            return Ok(None);
        };
        let event = self.read_event_at(exec, seq)?.ok_or_else(|| {
            StorageError::Corrupted(format!(
                "id index of {event_id} points at an empty seq {seq}"
            ))
        })?;
        if event.event_id != *event_id {
            return Err(StorageError::Corrupted(format!(
                "id index of {event_id} points at seq {seq}, which holds {}",
                event.event_id
            )));
        }
        Ok(Some(event))
    }

    /// The newest event's sequence and id.
    pub fn head(&self, exec: &ExecutionId) -> Result<Option<Head>, StorageError> {
        self.read_head(exec)
    }

    /// Whether the store has been told about the execution, and over which span.
    pub fn authority(&self, exec: &ExecutionId) -> Result<Authority, StorageError> {
        Ok(authority_of(self.read_watermark(exec)?))
    }

    /// The coverage record.
    pub fn coverage(&self, exec: &ExecutionId) -> Result<Option<Coverage>, StorageError> {
        self.read_coverage(exec)
    }

    /// The events met walking from the newest event to the root by `prev_event_id` links, newest
    /// first. The walk stops at a root, at a missing predecessor, or after the span.
    pub fn walk_from_head(&self, exec: &ExecutionId) -> Result<Vec<ChainEvent>, StorageError> {
        let part = self.read_partition(exec)?;
        let (walked, _) = walk(&part.events);
        Ok(walked.into_iter().cloned().collect())
    }

    /// Whether the walk from the head reaches a root after exactly as many events as the highest
    /// stored sequence; if not, which predecessor is missing.
    pub fn chain_is_complete(&self, exec: &ExecutionId) -> Result<Completeness, StorageError> {
        let part = self.read_partition(exec)?;
        Ok(walk(&part.events).1)
    }

    /// The guarded read (SPEC §4.4): the chain only when the store can prove it is the whole
    /// chain, otherwise the reason it cannot answer.
    pub fn chain_if_authoritative(&self, exec: &ExecutionId) -> Result<Guarded, StorageError> {
        Ok(guard(self.read_partition(exec)?))
    }

    /// One page of the guarded read. The whole partition is checked as [`Self::chain_if_authoritative`]
    /// checks it, in ONE point-in-time view, walking it in bounded steps; only then is the page
    /// served, and it names the chain's extent in that view (`through_seq`). Memory is one step
    /// plus the page; time is the partition's length.
    pub fn chain_page_if_authoritative(
        &self,
        exec: &ExecutionId,
        bounds: PageBounds,
    ) -> Result<GuardedPage, StorageError> {
        let view = self.engine.view();
        let head = view
            .get(&keys::head(exec))?
            .map(|v| codec::decode_head(&v))
            .transpose()?;
        let watermark = view
            .get(&keys::watermark(exec))?
            .map(|v| codec::decode_watermark(&v))
            .transpose()?;
        let coverage = view
            .get(&keys::coverage(exec))?
            .map(|v| codec::decode_coverage(&v))
            .transpose()?;
        let through_seq = head.as_ref().map_or(0, |h| h.exec_seq);
        let coverage = match check_records(watermark.as_ref(), head.as_ref(), coverage.as_ref()) {
            Ok(coverage) => coverage,
            Err(reason) => return Ok(GuardedPage::CannotAnswer(reason)),
        };

        let last_wanted = bounds.to_seq.unwrap_or(u64::MAX);
        let (start, end) = keys::event_range(exec);
        let prefix_len = keys::partition(exec).len();
        let mut check = EventCheck::new();
        let mut page = Vec::new();
        let mut page_bytes = 0usize;
        let mut next_from_seq = None;
        crate::engine::scan_in_steps(&*view, &start, &end, CHECK_STEP, |piece| {
            for (key, value) in piece {
                let Some(PartitionKey::Event(seq)) = keys::parse_partition_key(prefix_len, &key)
                else {
                    return Err(StorageError::Corrupted("malformed event key".into()));
                };
                let mut served = false;
                if seq >= bounds.from_seq && seq <= last_wanted && next_from_seq.is_none() {
                    if page.len() >= bounds.events_max
                        || (!page.is_empty() && page_bytes + value.len() > bounds.bytes_max)
                    {
                        next_from_seq = Some(seq);
                    } else {
                        served = true;
                    }
                }
                // Only the page's events are decoded whole; the rest give their links.
                if served {
                    let event = codec::decode_event(exec, seq, &value)?;
                    check.feed(seq, &event.event_id, event.prev_event_id.as_ref());
                    page_bytes += value.len();
                    page.push(event);
                } else {
                    let (id, prev) = codec::decode_event_links(&value)?;
                    check.feed(seq, &id, prev.as_ref());
                }
            }
            Ok(true)
        })?;
        if let Some(reason) = check.verdict(coverage) {
            return Ok(GuardedPage::CannotAnswer(reason));
        }
        Ok(GuardedPage::Authoritative(ChainPage {
            events: page,
            through_seq,
            next_from_seq,
        }))
    }

    /// Authority, coverage, head and completeness from one point-in-time view.
    pub fn state(&self, exec: &ExecutionId) -> Result<ExecutionState, StorageError> {
        let part = self.read_partition(exec)?;
        let completeness = walk(&part.events).1;
        Ok(ExecutionState {
            authority: authority_of(part.watermark),
            coverage: part.coverage,
            head: part.head,
            completeness,
        })
    }

    /// Events stored by writes with a commit index greater than `after`, in commit order, at most
    /// about `limit` of them (never splitting one commit across pages).
    pub fn changes(&self, after: u64, limit: usize) -> Result<ChangePage, StorageError> {
        let limit = limit.clamp(1, CHANGES_PAGE_MAX);
        let (start, end) = keys::feed_after(after);
        let mut pairs = self
            .engine
            .scan(&start, &end, ScanOrder::Forward, limit + 1)?;
        if pairs.len() > limit {
            let extra = pairs.pop();
            let last_ci = pairs
                .last()
                .and_then(|(k, _)| keys::parse_feed_key(k))
                .map(|f| f.0);
            let extra_ci = extra
                .as_ref()
                .and_then(|(k, _)| keys::parse_feed_key(k))
                .map(|f| f.0);
            if let (Some(last_ci), Some(extra_ci)) = (last_ci, extra_ci) {
                if last_ci == extra_ci {
                    // The page would end inside one commit; take the rest of that commit too.
                    let (commit_end, _) = keys::feed_after(last_ci);
                    let resume = extra.map(|(k, _)| k).unwrap_or_default();
                    pairs.extend(self.engine.scan(
                        &resume,
                        &commit_end,
                        ScanOrder::Forward,
                        usize::MAX,
                    )?);
                }
            }
        }
        let mut changes = Vec::with_capacity(pairs.len());
        for (key, value) in pairs {
            let (commit_index, exec, exec_seq) = keys::parse_feed_key(&key)
                .ok_or_else(|| StorageError::Corrupted("malformed change feed key".into()))?;
            changes.push(Change {
                commit_index,
                execution_id: codec::decode_feed_execution(exec)?,
                exec_seq,
                event_id: codec::decode_feed_value(&value)?,
            });
        }
        let next = changes.last().map_or(after, |c| c.commit_index);
        Ok(ChangePage { changes, next })
    }
}

fn authority_of(watermark: Option<Watermark>) -> Authority {
    match watermark {
        None => Authority::NotPopulated,
        Some(wm) => Authority::Authoritative {
            first_seq: wm.first_seq,
            through_seq: wm.through_seq,
        },
    }
}

/// The checks of the guarded read on the partition's records (SPEC §4.4, in its order): the
/// coverage the events must then match, or why the read cannot answer.
fn check_records<'a>(
    watermark: Option<&Watermark>,
    head: Option<&Head>,
    coverage: Option<&'a Coverage>,
) -> Result<&'a Coverage, Reason> {
    let watermark = watermark.ok_or(Reason::NotPopulated)?;
    if watermark.through_seq != head.map_or(0, |h| h.exec_seq) {
        return Err(Reason::WatermarkAhead);
    }
    coverage.ok_or(Reason::NoCoverage)
}

/// The guarded read's checks on the events, fed one at a time in stored (seq) order, so that a
/// partition can be checked whole in memory or walked in steps.
struct EventCheck {
    count: u64,
    first_id: Option<EventId>,
    prev_id: Option<EventId>,
    linked: bool,
}

impl EventCheck {
    fn new() -> Self {
        Self {
            count: 0,
            first_id: None,
            prev_id: None,
            linked: true,
        }
    }

    /// The next stored event: its seq, id and predecessor.
    fn feed(&mut self, seq: u64, id: &EventId, prev: Option<&EventId>) {
        self.count += 1;
        self.linked &= seq == self.count;
        if self.count == 1 {
            self.linked &= prev.is_none();
            self.first_id = Some(id.clone());
        } else {
            self.linked &= prev == self.prev_id.as_ref();
        }
        self.prev_id = Some(id.clone());
    }

    /// Why the events fed cannot be served under `coverage`, if they cannot.
    fn verdict(&self, coverage: &Coverage) -> Option<Reason> {
        if self.count != coverage.total || self.first_id != coverage.root_event_id {
            Some(Reason::CoverageMismatch)
        } else if !self.linked {
            Some(Reason::BrokenChain)
        } else {
            None
        }
    }
}

/// The guarded read over a whole partition in memory.
fn guard(part: Partition) -> Guarded {
    let coverage = match check_records(
        part.watermark.as_ref(),
        part.head.as_ref(),
        part.coverage.as_ref(),
    ) {
        Ok(coverage) => coverage,
        Err(reason) => return Guarded::CannotAnswer(reason),
    };
    let mut check = EventCheck::new();
    for event in &part.events {
        check.feed(
            event.exec_seq,
            &event.event_id,
            event.prev_event_id.as_ref(),
        );
    }
    match check.verdict(coverage) {
        Some(reason) => Guarded::CannotAnswer(reason),
        None => Guarded::Authoritative(part.events),
    }
}

/// Walks from the highest-sequence event towards the root; returns the events met, newest
/// first, and whether the walk covered the whole span.
fn walk(events: &[ChainEvent]) -> (Vec<&ChainEvent>, Completeness) {
    let Some(newest) = events.last() else {
        return (Vec::new(), Completeness::Complete);
    };
    let span = newest.exec_seq;
    let by_id: BTreeMap<&EventId, &ChainEvent> = events.iter().map(|e| (&e.event_id, e)).collect();
    let mut walked = vec![newest];
    let mut current = newest;
    let gap_at = loop {
        let Some(prev) = &current.prev_event_id else {
            break None;
        };
        if walked.len() as u64 >= span {
            // More links than sequences: a cycle, or links that skip around.
            break None;
        }
        match by_id.get(prev) {
            Some(event) => {
                walked.push(event);
                current = event;
            }
            None => break Some(prev.clone()),
        }
    };
    let reached_root = current.prev_event_id.is_none();
    let completeness = if reached_root && walked.len() as u64 == span {
        Completeness::Complete
    } else {
        Completeness::Incomplete {
            gap_at,
            walked: walked.len() as u64,
            span,
        }
    };
    (walked, completeness)
}
