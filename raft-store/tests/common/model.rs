//! A reference model of SPEC §4, written for clarity rather than speed: plain maps, no keys, no
//! batches, no effects. The property tests run the same operations against it and against the
//! store on each engine, and compare every outcome and every read.

use std::collections::{BTreeMap, BTreeSet};

use chainstore_model::{
    AppendError, AppendRequest, Appended, Authority, ChainEvent, Completeness, Coverage, EventId,
    ExecutionId, Fork, FromLog, Guarded, LogEvent, Origin, PopulateError, Reason, Refusal,
    ReplicateError, Replicated, Watermark,
};

/// What the model knows about one execution.
#[derive(Debug, Clone, Default)]
pub struct Exec {
    pub events: BTreeMap<u64, ChainEvent>,
    pub wm: Option<Watermark>,
    pub cov: Option<Coverage>,
}

impl Exec {
    fn head(&self) -> Option<&ChainEvent> {
        self.events.values().next_back()
    }

    fn head_seq(&self) -> u64 {
        self.head().map_or(0, |e| e.exec_seq)
    }

    fn seq_of(&self, id: &EventId) -> Option<u64> {
        self.events
            .values()
            .find(|e| &e.event_id == id)
            .map(|e| e.exec_seq)
    }

    fn widen(&mut self, first: u64, through: u64) {
        self.wm = Some(match self.wm {
            Some(w) if w.through_seq > 0 && through > 0 => Watermark {
                first_seq: w.first_seq.min(first),
                through_seq: w.through_seq.max(through),
            },
            Some(w) if through == 0 => w,
            _ => Watermark {
                first_seq: first,
                through_seq: through,
            },
        });
    }

    fn raise(&mut self, root: Option<EventId>, total: u64, origin: Origin) {
        let total = match &self.cov {
            Some(c) if c.root_event_id == root => c.total.max(total),
            _ => total,
        };
        self.cov = Some(Coverage {
            root_event_id: root,
            total,
            origin,
        });
    }
}

#[derive(Debug, Default)]
pub struct Model {
    pub execs: BTreeMap<ExecutionId, Exec>,
}

impl Model {
    pub fn exec(&self, id: &ExecutionId) -> Exec {
        self.execs.get(id).cloned().unwrap_or_default()
    }

    pub fn append(
        &mut self,
        exec_id: &ExecutionId,
        req: &AppendRequest,
        commit_index: u64,
    ) -> Result<Appended, AppendError> {
        if req.genesis && req.prev_event_id.is_some() {
            return Err(AppendError::GenesisWithPrev);
        }
        let exec = self.execs.entry(exec_id.clone()).or_default();
        if let Some(seq) = exec.seq_of(&req.event_id) {
            let stored = &exec.events[&seq];
            if stored.prev_event_id == req.prev_event_id
                && stored.parent_execution_id == req.parent_execution_id
                && stored.payload == req.payload
            {
                return Ok(Appended {
                    exec_seq: seq,
                    commit_index: stored.commit_index,
                    duplicate: true,
                });
            }
            return Err(AppendError::EventConflict {
                event_id: req.event_id.clone(),
                exec_seq: seq,
            });
        }
        let head_id = exec.head().map(|e| e.event_id.clone());
        if head_id != req.prev_event_id {
            return Err(AppendError::NotHead {
                expected: head_id,
                got: req.prev_event_id.clone(),
            });
        }
        if req.genesis && (exec.wm.is_some() || exec.cov.is_some()) {
            return Err(AppendError::InvalidInput(String::new()));
        }
        let seq = exec.head_seq() + 1;
        exec.events.insert(
            seq,
            ChainEvent {
                execution_id: exec_id.clone(),
                exec_seq: seq,
                event_id: req.event_id.clone(),
                prev_event_id: req.prev_event_id.clone(),
                parent_execution_id: req.parent_execution_id.clone(),
                payload: req.payload.clone(),
                commit_index,
            },
        );
        exec.widen(seq, seq);
        if req.genesis {
            exec.raise(Some(req.event_id.clone()), 1, Origin::Genesis);
        } else {
            match exec.cov.clone() {
                Some(c) if c.origin == Origin::Genesis => {
                    exec.raise(c.root_event_id, c.total + 1, Origin::Genesis)
                }
                Some(_) => exec.cov = None,
                None => {}
            }
        }
        Ok(Appended {
            exec_seq: seq,
            commit_index,
            duplicate: false,
        })
    }

    pub fn replicated(
        &mut self,
        exec_id: &ExecutionId,
        events: &[ChainEvent],
        commit_index: u64,
    ) -> Result<Replicated, ReplicateError> {
        if events
            .iter()
            .any(|e| &e.execution_id != exec_id || e.exec_seq == 0)
        {
            return Err(ReplicateError::InvalidInput(String::new()));
        }
        if events.is_empty() {
            return Ok(Replicated {
                applied: 0,
                duplicates: 0,
            });
        }
        let exec = self.execs.entry(exec_id.clone()).or_default();
        let mut next = exec.clone();
        let (mut applied, mut duplicates) = (0, 0);
        for event in events {
            match next.events.get(&event.exec_seq) {
                Some(stored) if same(stored, event) => {
                    duplicates += 1;
                    continue;
                }
                Some(stored) => {
                    return Err(ReplicateError::Forked(Fork::SeqTaken {
                        exec_seq: event.exec_seq,
                        stored: stored.event_id.clone(),
                        offered: event.event_id.clone(),
                    }))
                }
                None => {}
            }
            if let Some(stored_seq) = next.seq_of(&event.event_id) {
                return Err(ReplicateError::Forked(Fork::IdElsewhere {
                    event_id: event.event_id.clone(),
                    stored_seq,
                    offered_seq: event.exec_seq,
                }));
            }
            next.events.insert(
                event.exec_seq,
                ChainEvent {
                    commit_index,
                    ..event.clone()
                },
            );
            applied += 1;
        }
        let first = events.iter().map(|e| e.exec_seq).min().unwrap_or(0);
        let through = events.iter().map(|e| e.exec_seq).max().unwrap_or(0);
        next.widen(first, through);
        if applied > 0 {
            next.cov = None;
        }
        *exec = next;
        Ok(Replicated {
            applied,
            duplicates,
        })
    }

    pub fn populate(
        &mut self,
        exec_id: &ExecutionId,
        log: &[LogEvent],
        commit_index: u64,
    ) -> Result<FromLog, PopulateError> {
        let ids: BTreeSet<&EventId> = log.iter().map(|e| &e.event_id).collect();
        if ids.len() != log.len() {
            return Err(PopulateError::InvalidInput(String::new()));
        }
        let exec = self.execs.entry(exec_id.clone()).or_default();
        let stored_len = exec.head_seq();
        if log.is_empty() {
            if stored_len > 0 {
                return Ok(FromLog::StaleLog {
                    stored_len,
                    log_len: 0,
                });
            }
            exec.widen(0, 0);
            exec.raise(None, 0, Origin::Log);
            return Ok(FromLog::InSync {
                total: 0,
                appended: 0,
            });
        }
        let ordered = match model_order(log) {
            Ok(ordered) => ordered,
            Err(reason) => {
                exec.cov = None;
                return Ok(FromLog::Refused { reason });
            }
        };
        for (position, logged) in ordered.iter().enumerate() {
            if let Some(stored) = exec.events.get(&(position as u64 + 1)) {
                let same = stored.event_id == logged.event_id
                    && stored.prev_event_id == logged.prev_event_id
                    && stored.parent_execution_id == logged.parent_execution_id
                    && stored.payload == logged.payload;
                if !same {
                    exec.cov = None;
                    return Ok(FromLog::Diverged {
                        at_position: position as u64,
                        stored: stored.event_id.clone(),
                        log: logged.event_id.clone(),
                    });
                }
            }
        }
        let log_len = ordered.len() as u64;
        if stored_len > log_len {
            return Ok(FromLog::StaleLog {
                stored_len,
                log_len,
            });
        }
        exec.raise(Some(ordered[0].event_id.clone()), log_len, Origin::Log);
        let mut appended = 0;
        for (position, logged) in ordered.iter().enumerate() {
            let seq = position as u64 + 1;
            if exec.events.contains_key(&seq) {
                continue;
            }
            exec.events.insert(
                seq,
                ChainEvent {
                    execution_id: exec_id.clone(),
                    exec_seq: seq,
                    event_id: logged.event_id.clone(),
                    prev_event_id: logged.prev_event_id.clone(),
                    parent_execution_id: logged.parent_execution_id.clone(),
                    payload: logged.payload.clone(),
                    commit_index,
                },
            );
            appended += 1;
        }
        exec.widen(1, log_len);
        let total = exec.cov.as_ref().map_or(0, |c| c.total);
        Ok(FromLog::InSync { total, appended })
    }

    pub fn guarded(&self, exec_id: &ExecutionId) -> Guarded {
        let exec = self.exec(exec_id);
        let Some(wm) = exec.wm else {
            return Guarded::CannotAnswer(Reason::NotPopulated);
        };
        if wm.through_seq != exec.head_seq() {
            return Guarded::CannotAnswer(Reason::WatermarkAhead);
        }
        let Some(cov) = &exec.cov else {
            return Guarded::CannotAnswer(Reason::NoCoverage);
        };
        let events: Vec<ChainEvent> = exec.events.values().cloned().collect();
        if events.len() as u64 != cov.total
            || events.first().map(|e| e.event_id.clone()) != cov.root_event_id
        {
            return Guarded::CannotAnswer(Reason::CoverageMismatch);
        }
        for (i, event) in events.iter().enumerate() {
            let expected_prev = if i == 0 {
                None
            } else {
                Some(events[i - 1].event_id.clone())
            };
            if event.exec_seq != i as u64 + 1 || event.prev_event_id != expected_prev {
                return Guarded::CannotAnswer(Reason::BrokenChain);
            }
        }
        Guarded::Authoritative(events)
    }

    pub fn chain(&self, exec_id: &ExecutionId) -> Vec<ChainEvent> {
        self.exec(exec_id).events.into_values().collect()
    }

    pub fn authority(&self, exec_id: &ExecutionId) -> Authority {
        match self.exec(exec_id).wm {
            None => Authority::NotPopulated,
            Some(w) => Authority::Authoritative {
                first_seq: w.first_seq,
                through_seq: w.through_seq,
            },
        }
    }

    pub fn coverage(&self, exec_id: &ExecutionId) -> Option<Coverage> {
        self.exec(exec_id).cov
    }

    /// Completeness by the definition: walk links from the newest event; complete when a root is
    /// reached after exactly `span` steps.
    pub fn completeness(&self, exec_id: &ExecutionId) -> Completeness {
        let exec = self.exec(exec_id);
        let Some(newest) = exec.head().cloned() else {
            return Completeness::Complete;
        };
        let span = newest.exec_seq;
        let mut walked = 1u64;
        let mut current = newest;
        loop {
            let Some(prev) = current.prev_event_id.clone() else {
                return if walked == span {
                    Completeness::Complete
                } else {
                    Completeness::Incomplete {
                        gap_at: None,
                        walked,
                        span,
                    }
                };
            };
            if walked >= span {
                return Completeness::Incomplete {
                    gap_at: None,
                    walked,
                    span,
                };
            }
            match exec.events.values().find(|e| e.event_id == prev) {
                Some(e) => {
                    current = e.clone();
                    walked += 1;
                }
                None => {
                    return Completeness::Incomplete {
                        gap_at: Some(prev),
                        walked,
                        span,
                    }
                }
            }
        }
    }
}

fn same(a: &ChainEvent, b: &ChainEvent) -> bool {
    a.event_id == b.event_id
        && a.prev_event_id == b.prev_event_id
        && a.parent_execution_id == b.parent_execution_id
        && a.payload == b.payload
        && a.exec_seq == b.exec_seq
}

/// The refusal rules, checked in the documented order by counting.
fn model_order(log: &[LogEvent]) -> Result<Vec<LogEvent>, Refusal> {
    let roots: Vec<&LogEvent> = log.iter().filter(|e| e.prev_event_id.is_none()).collect();
    if roots.len() > 1 {
        return Err(Refusal::MultipleRoots);
    }
    for e in log {
        if let Some(prev) = &e.prev_event_id {
            if !log.iter().any(|o| &o.event_id == prev) {
                return Err(Refusal::DanglingPrev);
            }
        }
    }
    let Some(root) = roots.first() else {
        return Err(Refusal::NoRoot);
    };
    for e in log {
        let children = log
            .iter()
            .filter(|o| o.prev_event_id.as_ref() == Some(&e.event_id))
            .count();
        if children > 1 {
            return Err(Refusal::Fork);
        }
    }
    let mut ordered = vec![(*root).clone()];
    while let Some(next) = log
        .iter()
        .find(|o| o.prev_event_id.as_ref() == Some(&ordered[ordered.len() - 1].event_id))
    {
        if ordered.len() > log.len() {
            break;
        }
        ordered.push(next.clone());
    }
    if ordered.len() != log.len() {
        return Err(Refusal::Unreachable);
    }
    Ok(ordered)
}
