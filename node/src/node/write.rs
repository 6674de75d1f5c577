//! The leader's write path (SPEC §5): each write waits for a ready leader, is evaluated under its
//! execution's latch, and its effect is proposed and applied before it is answered; answers from
//! local state alone (a duplicate, a refusal that depends on the head) wait for a confirmation
//! of leadership first.

use std::sync::atomic::{AtomicUsize, Ordering};

use chainstore_model::{
    AppendError, AppendRequest, Appended, ChainEvent, ExecutionId, FromLog, LogEvent, PartOutcome,
    PopulateError, PopulateSession, QuarantineRecord, RebuildError, ReplicateError, Replicated,
};
use openraft::async_runtime::WatchReceiver;
use openraft::ServerState;
use raft_store::raft::Rejection;
use raft_store::{Applied, BatchPlan, Effect};

use super::Node;
use crate::errors::{ReadError, WriteError};
use crate::proposer::{ProposeError, Proposed, Proposer};

impl Node {
    /// Waits until this node is the leader and has applied an entry of its current term.
    async fn ready_leader(&self) -> Result<(), WriteError> {
        if let Some(failure) = self.storage_failure() {
            return Err(WriteError::Unavailable(format!(
                "this node's storage failed: {failure}"
            )));
        }
        let mut metrics = self.raft.metrics();
        let wait = async {
            loop {
                {
                    let m = metrics.borrow_and_update();
                    if self.leader_id_in(&m) != Some(self.config.id) {
                        return Err(WriteError::NotLeader(self.leader_in(&m)));
                    }
                    let applied_term = m.last_applied.as_ref().map(|id| id.leader_id.term);
                    if m.state == ServerState::Leader && applied_term == Some(m.current_term) {
                        return Ok(());
                    }
                }
                if metrics.changed().await.is_err() {
                    return Err(WriteError::Unavailable("raft is shutting down".into()));
                }
            }
        };
        tokio::time::timeout(self.config.limits.write_timeout, wait)
            .await
            .unwrap_or_else(|_| {
                Err(WriteError::Unavailable(
                    "the leader did not become ready in time".into(),
                ))
            })
    }

    /// Confirms leadership with a read-index round before answering from local state.
    async fn confirm_leader(&self) -> Result<(), WriteError> {
        match self.read_index().await {
            Ok(_) => Ok(()),
            Err(ReadError::NotLeader(leader)) => Err(WriteError::NotLeader(leader)),
            Err(ReadError::Unavailable { message, .. }) => Err(WriteError::Unavailable(message)),
        }
    }

    /// Proposes one effect and waits until it is applied here. Returns its log index and what
    /// it applied; an effect the state machine refused is `WriteError::Rejected`.
    async fn propose(&self, effect: Effect) -> Result<(u64, Applied), WriteError> {
        let (index, applied) = self.submit(|proposer| proposer.propose(effect)).await?;
        Ok((index, applied.map_err(WriteError::Rejected)?))
    }

    /// Hands one write to the proposer (unless leadership is being handed over) and waits, at
    /// most the write timeout, until it is applied here.
    async fn submit<'a, T, F, Fut>(
        &'a self,
        write: F,
    ) -> Result<(u64, Result<T, Rejection>), WriteError>
    where
        F: FnOnce(&'a Proposer) -> Fut,
        Fut: std::future::Future<Output = Proposed<T>>,
    {
        self.proposing.fetch_add(1, Ordering::SeqCst);
        let _done = Decrement(&self.proposing);
        if self.handing_off.load(Ordering::SeqCst) {
            return Err(WriteError::Unavailable(
                "this node is stopping and hands its leadership over; retry".into(),
            ));
        }
        match tokio::time::timeout(self.config.limits.write_timeout, write(&self.proposer)).await {
            Err(_) => Err(WriteError::Unavailable(
                "the write was not applied in time; its outcome is unknown: retry it unchanged"
                    .into(),
            )),
            Ok(Ok(applied)) => Ok(applied),
            Ok(Err(ProposeError::NotLeader(leader))) => Err(WriteError::NotLeader(leader)),
            Ok(Err(ProposeError::Unavailable(message))) => Err(WriteError::Unavailable(message)),
        }
    }

    /// Appends one event at the head of `exec` (SPEC §4.1, §5).
    pub async fn append(
        &self,
        exec: &ExecutionId,
        request: &AppendRequest,
    ) -> Result<Appended, WriteError> {
        self.append_batch(exec, std::slice::from_ref(request))
            .await?
            .pop()
            .ok_or_else(|| WriteError::Unavailable("the append answered for no event".into()))
    }

    /// Appends several events linked in order at the head of `exec`, all or none, as ONE Raft
    /// entry (see `ChainStore::evaluate_append_batch`); one answer per event, in order.
    pub async fn append_batch(
        &self,
        exec: &ExecutionId,
        requests: &[AppendRequest],
    ) -> Result<Vec<Appended>, WriteError> {
        let result = self.append_inner(exec, requests).await;
        self.metrics.record_append(&result);
        result
    }

    async fn append_inner(
        &self,
        exec: &ExecutionId,
        requests: &[AppendRequest],
    ) -> Result<Vec<Appended>, WriteError> {
        let _latch = self.latches.acquire(exec).await;
        self.ready_leader().await?;
        match self.store.evaluate_append_batch(exec, requests) {
            Ok(BatchPlan {
                duplicates,
                write: None,
            }) => {
                self.confirm_leader().await?;
                Ok(duplicates)
            }
            Ok(BatchPlan {
                mut duplicates,
                write: Some(effect),
            }) => {
                let seqs: Vec<u64> = effect.events.iter().map(|e| e.exec_seq).collect();
                let (commit_index, _) = self.propose(effect).await?;
                duplicates.extend(seqs.into_iter().map(|exec_seq| Appended {
                    exec_seq,
                    commit_index,
                    duplicate: false,
                }));
                Ok(duplicates)
            }
            Err(AppendError::Storage(err)) => Err(WriteError::Storage(err)),
            // Errors of the request alone need no leadership confirmation.
            Err(err @ (AppendError::GenesisWithPrev | AppendError::TooLarge(_))) => {
                Err(WriteError::Append(err))
            }
            Err(err) => {
                self.confirm_leader().await?;
                Err(WriteError::Append(err))
            }
        }
    }

    /// Builds or extends `exec` from the authoritative log (SPEC §4.3). A log longer than one
    /// batch is proposed as several entries, coverage first and watermark last.
    pub async fn populate(
        &self,
        exec: &ExecutionId,
        events: &[LogEvent],
    ) -> Result<FromLog, WriteError> {
        let result = self.populate_inner(exec, events).await;
        self.metrics.record_populate(&result);
        result
    }

    async fn populate_inner(
        &self,
        exec: &ExecutionId,
        events: &[LogEvent],
    ) -> Result<FromLog, WriteError> {
        let _latch = self.latches.acquire(exec).await;
        self.ready_leader().await?;
        let plan = self
            .store
            .evaluate_populate(exec, events)
            .map_err(populate_error)?;
        self.propose_effects(plan.effects).await?;
        Ok(plan.outcome)
    }

    /// Takes one part of a populate session: a log longer than one request, sent in parts.
    pub async fn populate_part(
        &self,
        exec: &ExecutionId,
        session: &PopulateSession,
        events: &[LogEvent],
    ) -> Result<PartOutcome, WriteError> {
        let result = async {
            let _latch = self.latches.acquire(exec).await;
            self.ready_leader().await?;
            let plan = self
                .store
                .evaluate_populate_part(exec, session, events)
                .map_err(populate_error)?;
            self.propose_effects(plan.effects).await?;
            Ok(plan.outcome)
        }
        .await;
        self.metrics.record_populate_part(&result);
        result
    }

    /// Proposes the effects of one request in order, each one entry, and adds up what they
    /// applied; with none, confirms leadership so that the answer reflects the committed state.
    async fn propose_effects(&self, effects: Vec<Effect>) -> Result<Applied, WriteError> {
        if effects.is_empty() {
            self.confirm_leader().await?;
        }
        let mut total = Applied::default();
        for effect in effects {
            let (_, applied) = self.propose(effect).await?;
            total.applied += applied.applied;
            total.duplicates += applied.duplicates;
        }
        Ok(total)
    }

    /// Rebuilds `exec` from the log: its partition moved into a quarantine record and the log's
    /// chain written in its place, in one entry (a longer log continues in populate batches,
    /// leaving the execution unservable until the last lands). Returns the record and the
    /// chain's length.
    pub async fn rebuild(
        &self,
        exec: &ExecutionId,
        events: &[LogEvent],
        reason: &str,
    ) -> Result<(QuarantineRecord, u64), WriteError> {
        let result = self.rebuild_inner(exec, events, reason).await;
        self.metrics.record_rebuild(&result);
        result
    }

    async fn rebuild_inner(
        &self,
        exec: &ExecutionId,
        events: &[LogEvent],
        reason: &str,
    ) -> Result<(QuarantineRecord, u64), WriteError> {
        let _latch = self.latches.acquire(exec).await;
        self.ready_leader().await?;
        // The leader's wall clock, carried in the entry so every replica keeps the same record.
        // Only a rebuild reads it, and the simulations' workload never sends one.
        let at_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let plan = self
            .store
            .evaluate_rebuild(exec, events, reason, at_ms)
            .map_err(|err| match err {
                RebuildError::Storage(err) => WriteError::Storage(err),
                other => WriteError::Rebuild(other),
            })?;
        // A retry of a rebuild whose outcome was unknown is safe: applied once, it is refused
        // the second time as not needed.
        let (_, record) = self
            .submit(|proposer| proposer.propose_rebuild(plan.rebuild))
            .await?;
        let record = record.map_err(WriteError::Rejected)?;
        self.propose_effects(plan.rest).await?;
        Ok((record, plan.total))
    }

    /// Stores replicated events in any order (SPEC §4.2).
    pub async fn replicated(
        &self,
        exec: &ExecutionId,
        events: &[ChainEvent],
    ) -> Result<Replicated, WriteError> {
        let _latch = self.latches.acquire(exec).await;
        self.ready_leader().await?;
        let effects = match self.store.evaluate_replicated(exec, events) {
            Ok(effects) => effects,
            Err(ReplicateError::Storage(err)) => return Err(WriteError::Storage(err)),
            Err(err @ ReplicateError::Forked(_)) => {
                self.confirm_leader().await?;
                return Err(WriteError::Replicate(err));
            }
            Err(err) => return Err(WriteError::Replicate(err)),
        };
        let applied = self.propose_effects(effects).await?;
        Ok(Replicated {
            applied: applied.applied,
            duplicates: applied.duplicates,
        })
    }
}

/// Decrements a counter when dropped.
struct Decrement<'a>(&'a AtomicUsize);

impl Drop for Decrement<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn populate_error(err: PopulateError) -> WriteError {
    match err {
        PopulateError::Storage(err) => WriteError::Storage(err),
        other => WriteError::Populate(other),
    }
}
