//! [`Proposer`]: the effects of concurrent writes ride in one Raft entry.
//!
//! Every write the leader has evaluated (under its execution's latch) is handed to one task,
//! which proposes what has queued up as ONE entry ([`Command::Effects`]) while at most
//! `in_flight_max` entries of its own are under way: while one entry is being made durable and
//! replicated, the next one gathers the writes that arrive meanwhile. One log write, one fsync
//! per replica and one replication round serve all of them; each waiter gets its own effect's
//! result. An entry never holds two effects on one execution (the latch already holds a second
//! write back until the first is applied; the proposer keeps it so even for a waiter that gave
//! up), and is bounded by count and by bytes. A waiter that gave up before its effect was
//! proposed is left out. A rebuild ([`Command::Rebuild`]) goes through the same queue and
//! slots, always alone in its entry.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use chainstore_model::QuarantineRecord;
use openraft::errors::{ClientWriteError, RaftError};
use raft_store::raft::{Command, CommandResult, Rejection};
use raft_store::{Applied, Effect, Rebuild};
use tokio::sync::{mpsc, oneshot, Semaphore};

use crate::errors::Leader;
use crate::raft_types::NodeRaft;

/// Why a proposal has no result: the same for every effect of its entry.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ProposeError {
    /// This node is not the leader (the leader, when known).
    NotLeader(Option<Leader>),
    /// Raft failed or is shutting down.
    Unavailable(String),
}

/// What one write came to once its entry was applied here: the entry's log index, and what the
/// write did or why the state machine refused it.
pub(crate) type Proposed<T> = Result<(u64, Result<T, Rejection>), ProposeError>;

/// What bounds one entry.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EntryLimits {
    /// Most effects in one entry.
    pub effects_max: usize,
    /// About the most bytes of events in one entry (an effect alone may reach it).
    pub bytes_max: usize,
    /// Entries of this proposer under way at once.
    pub in_flight_max: usize,
    /// How long an entry may take to be applied before its slot is given to the next one (its
    /// waiters are told its outcome is unknown): an entry that never answers — proposed by a
    /// leader deposed before it committed — must not stop every later write.
    pub write_timeout: Duration,
}

type Answer = oneshot::Sender<Result<(u64, CommandResult), ProposeError>>;

/// What one waiter asked to have written.
enum Write {
    /// An effect, which may share its entry.
    Effect(Effect),
    /// A rebuild, alone in its entry.
    Rebuild(Rebuild),
}

impl Write {
    fn execution_id(&self) -> &chainstore_model::ExecutionId {
        match self {
            Write::Effect(effect) => &effect.execution_id,
            Write::Rebuild(rebuild) => &rebuild.effect.execution_id,
        }
    }
}

struct Proposal {
    write: Write,
    /// The effect's bytes (`usize::MAX` for a rebuild: nothing fits beside it).
    bytes: usize,
    answer: Answer,
}

/// The queue of evaluated writes, and the task that proposes them.
pub(crate) struct Proposer {
    queue: mpsc::UnboundedSender<Proposal>,
}

impl Proposer {
    /// Starts the proposing task on the current runtime.
    pub(crate) fn start(raft: NodeRaft, limits: EntryLimits) -> Self {
        let (queue, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(raft, rx, limits));
        Self { queue }
    }

    /// Proposes `effect` with the writes queued alongside it; resolves to the entry's index and
    /// what this effect applied once the entry is applied on this node.
    pub(crate) async fn propose(&self, effect: Effect) -> Proposed<Applied> {
        let bytes = effect.encoded_size();
        match self.send(Write::Effect(effect), bytes).await? {
            (index, CommandResult::Applied(applied)) => Ok((index, Ok(applied))),
            (index, CommandResult::Rejected(rejection)) => Ok((index, Err(rejection))),
            (_, other) => Err(unexpected(&other)),
        }
    }

    /// Proposes `rebuild` as an entry of its own; resolves to the record the partition went
    /// into once it is applied on this node.
    pub(crate) async fn propose_rebuild(&self, rebuild: Rebuild) -> Proposed<QuarantineRecord> {
        match self.send(Write::Rebuild(rebuild), usize::MAX).await? {
            (index, CommandResult::Rebuilt(record, _)) => Ok((index, Ok(record))),
            (index, CommandResult::Rejected(rejection)) => Ok((index, Err(rejection))),
            (_, other) => Err(unexpected(&other)),
        }
    }

    async fn send(&self, write: Write, bytes: usize) -> Result<(u64, CommandResult), ProposeError> {
        let (answer, result) = oneshot::channel();
        self.queue
            .send(Proposal {
                write,
                bytes,
                answer,
            })
            .map_err(|_| ProposeError::Unavailable("the proposer has stopped".into()))?;
        result
            .await
            .unwrap_or_else(|_| Err(ProposeError::Unavailable("the proposer has stopped".into())))
    }
}

/// A write answered with another command's result: the state machine and the proposer disagree
/// (a bug); the write's outcome is unknown.
fn unexpected(result: &CommandResult) -> ProposeError {
    ProposeError::Unavailable(format!("the write applied as {result:?}"))
}

async fn run(raft: NodeRaft, mut queue: mpsc::UnboundedReceiver<Proposal>, limits: EntryLimits) {
    let slots = Arc::new(Semaphore::new(limits.in_flight_max.max(1)));
    let mut held_back: Option<Proposal> = None;
    loop {
        let first = match held_back.take() {
            Some(proposal) => proposal,
            None => match queue.recv().await {
                Some(proposal) => proposal,
                None => return,
            },
        };
        // Writes that arrive while every slot is taken wait here and join the next entry.
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        let mut entry = Vec::new();
        let mut executions = BTreeSet::new();
        let mut bytes = 0usize;
        let mut next = Some(first);
        while let Some(proposal) = next.take() {
            if !proposal.answer.is_closed() {
                let fits = entry.is_empty()
                    || (entry.len() < limits.effects_max
                        && bytes.saturating_add(proposal.bytes) <= limits.bytes_max
                        && !executions.contains(proposal.write.execution_id()));
                if !fits {
                    held_back = Some(proposal);
                    break;
                }
                bytes = bytes.saturating_add(proposal.bytes);
                executions.insert(proposal.write.execution_id().clone());
                entry.push(proposal);
            }
            next = queue.try_recv().ok();
        }
        if entry.is_empty() {
            continue;
        }
        let raft = raft.clone();
        let timeout = limits.write_timeout;
        tokio::spawn(async move {
            write(&raft, entry, timeout).await;
            drop(slot);
        });
    }
}

/// Proposes `entry` as one Raft entry and answers each of its waiters.
async fn write(raft: &NodeRaft, entry: Vec<Proposal>, timeout: Duration) {
    let count = entry.len();
    let (mut writes, answers): (Vec<Write>, Vec<Answer>) =
        entry.into_iter().map(|p| (p.write, p.answer)).unzip();
    let command = match writes.pop() {
        Some(Write::Rebuild(rebuild)) if writes.is_empty() => Command::Rebuild(rebuild),
        Some(Write::Effect(only)) if writes.is_empty() => Command::Effect(only),
        Some(last) => {
            writes.push(last);
            let mut effects = Vec::with_capacity(writes.len());
            for write in writes {
                match write {
                    Write::Effect(effect) => effects.push(effect),
                    // The queue never puts a rebuild beside another write.
                    Write::Rebuild(_) => {
                        for answer in answers {
                            let _ = answer.send(Err(ProposeError::Unavailable(
                                "a rebuild was queued beside other writes".into(),
                            )));
                        }
                        return;
                    }
                }
            }
            Command::Effects(effects)
        }
        None => return,
    };
    let written = tokio::time::timeout(timeout, raft.client_write(command)).await;
    let results: Vec<Result<(u64, CommandResult), ProposeError>> = match written {
        Err(_) => vec![
            Err(ProposeError::Unavailable(
                "the write was not applied in time; its outcome is unknown: retry it unchanged"
                    .into()
            ));
            count
        ],
        Ok(Ok(response)) => {
            let index = response.log_id.index;
            match response.data {
                CommandResult::Each(results) if count > 1 && results.len() == count => {
                    results.into_iter().map(|r| Ok((index, r))).collect()
                }
                result if count == 1 => vec![Ok((index, result))],
                other => vec![
                    Err(ProposeError::Unavailable(format!(
                        "an entry of {count} effects applied as {other:?}"
                    )));
                    count
                ],
            }
        }
        Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(forward)))) => {
            let leader = forward
                .leader_id
                .zip(forward.leader_node)
                .map(|(id, node)| Leader {
                    id,
                    addr: node.addr,
                });
            vec![Err(ProposeError::NotLeader(leader)); count]
        }
        Ok(Err(err)) => vec![Err(ProposeError::Unavailable(err.to_string())); count],
    };
    for (answer, result) in answers.into_iter().zip(results) {
        // A waiter that gave up has nobody to tell.
        let _ = answer.send(result);
    }
}
