//! The consumer-side helpers of SPEC §7: a [`LogSource`] (the authoritative log, as the consumer
//! reads it), a [`Reconciler`] that turns the store's unresolved `stale_log` into a verdict by
//! re-reading the log, and a [`Comparator`] that reports agreement AND coverage together.
//!
//! Why the verdict lives here: "the store holds more than my snapshot of the log" is what a stale
//! snapshot looks like, and also what a second writer looks like. The store cannot tell them
//! apart; a consumer can, by reading the log again. If the log caught up, it was staleness. If it
//! still ends short while the store runs ahead, the extra events are not in the authoritative log:
//! a divergence, recorded.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use chainstore_model::{order_by_links, ExecutionId, FromLog, Guarded, LogEvent};

use crate::client::Client;
use crate::error::ClientError;
use crate::types::ReadOptions;

/// A boxed future, so that `LogSource` can be a trait object.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Reads an execution's events from the authoritative log (any order; links decide).
pub trait LogSource: Send + Sync {
    /// The log's events for `exec` as of now.
    fn read_log<'a>(
        &'a self,
        exec: &'a ExecutionId,
    ) -> BoxFuture<'a, Result<Vec<LogEvent>, LogError>>;
}

/// Why the log could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LogError {
    /// The log's store cannot be reached now; reading again later may succeed.
    #[error("the log is unavailable: {0}")]
    Unavailable(String),
    /// The log holds something that is not an event (a bad id, a payload that is not JSON):
    /// reading again gives the same answer.
    #[error("the log holds an invalid event: {0}")]
    Invalid(String),
}

/// What a reconciled populate concluded.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// The store matches the log (possibly after appending the log's new events).
    InSync {
        /// The populate's outcome.
        outcome: FromLog,
    },
    /// The store was ahead of a stale read of the log; a re-read caught up and matched.
    Staleness {
        /// The outcome of populating from the fresh read.
        outcome: FromLog,
        /// Re-reads it took.
        rereads: u32,
    },
    /// The store holds events the log still does not: a second writer. A real divergence.
    SecondWriter {
        /// The store's span.
        stored_len: u64,
        /// The log's length at the last re-read.
        log_len: u64,
    },
    /// A position both hold differs (the store revoked its serve-trust).
    Diverged {
        /// The populate's outcome.
        outcome: FromLog,
    },
    /// The log is not one chain (the store revoked its serve-trust).
    Refused {
        /// The populate's outcome.
        outcome: FromLog,
    },
}

impl Verdict {
    /// True for the verdicts that need an alarm.
    pub fn is_divergence(&self) -> bool {
        matches!(
            self,
            Verdict::SecondWriter { .. } | Verdict::Diverged { .. } | Verdict::Refused { .. }
        )
    }
}

/// Why reconciliation failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReconcileError {
    /// The log could not be read.
    #[error(transparent)]
    Log(#[from] LogError),
    /// The store could not be reached or refused the call.
    #[error(transparent)]
    Client(#[from] ClientError),
}

/// Populates executions from a log and resolves `stale_log` by re-reading it.
pub struct Reconciler<'a> {
    client: &'a Client,
    source: &'a dyn LogSource,
    /// Re-reads of the log before a still-short log is judged a second writer.
    pub rereads_max: u32,
    /// Pause between re-reads, giving the log time to catch up.
    pub reread_pause: Duration,
}

impl<'a> Reconciler<'a> {
    /// A reconciler with 3 re-reads 100 ms apart.
    pub fn new(client: &'a Client, source: &'a dyn LogSource) -> Self {
        Self {
            client,
            source,
            rereads_max: 3,
            reread_pause: Duration::from_millis(100),
        }
    }

    async fn read(&self, exec: &ExecutionId) -> Result<Vec<LogEvent>, ReconcileError> {
        Ok(self.source.read_log(exec).await?)
    }

    /// Reads the log, populates, and when the store says `stale_log`, re-reads until the log
    /// catches up (staleness) or the re-reads run out (a second writer).
    pub async fn reconcile(&self, exec: &ExecutionId) -> Result<Verdict, ReconcileError> {
        let log = self.read(exec).await?;
        let outcome = self.client.populate(exec, &log).await?;
        let FromLog::StaleLog {
            stored_len,
            mut log_len,
        } = outcome
        else {
            return Ok(classify(outcome));
        };
        for reread in 1..=self.rereads_max {
            tokio::time::sleep(self.reread_pause).await;
            let log = self.read(exec).await?;
            log_len = log.len() as u64;
            if log_len >= stored_len {
                let outcome = self.client.populate(exec, &log).await?;
                return Ok(match outcome {
                    FromLog::InSync { .. } => Verdict::Staleness {
                        outcome,
                        rereads: reread,
                    },
                    other => classify(other),
                });
            }
        }
        Ok(Verdict::SecondWriter {
            stored_len,
            log_len,
        })
    }
}

fn classify(outcome: FromLog) -> Verdict {
    match outcome {
        FromLog::Diverged { .. } => Verdict::Diverged { outcome },
        FromLog::Refused { .. } => Verdict::Refused { outcome },
        // A stale log reaching here was handled by the caller.
        _ => Verdict::InSync { outcome },
    }
}

/// Counts of one comparison run (or of all runs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Comparison {
    /// Executions compared.
    pub compared: u64,
    /// Executions the store answered authoritatively.
    pub answered: u64,
    /// Answers equal to the log's chain, or to its beginning: the log is read after the store,
    /// so a log that grew in between (the populator has not caught up yet) is not a
    /// disagreement.
    pub agreed: u64,
    /// Of the agreed answers, those shorter than the log's chain read after them.
    pub behind: u64,
    /// Answers that differ from the log's chain.
    pub disagreed: u64,
}

impl Comparison {
    /// Share of executions the store could answer. A store that refuses everything has perfect
    /// agreement and zero coverage: read both.
    pub fn coverage(&self) -> f64 {
        if self.compared == 0 {
            0.0
        } else {
            self.answered as f64 / self.compared as f64
        }
    }

    /// Share of answers that agree with the log.
    pub fn agreement(&self) -> f64 {
        if self.answered == 0 {
            1.0
        } else {
            self.agreed as f64 / self.answered as f64
        }
    }

    fn add(&mut self, other: &Comparison) {
        self.compared += other.compared;
        self.answered += other.answered;
        self.agreed += other.agreed;
        self.behind += other.behind;
        self.disagreed += other.disagreed;
    }
}

/// Compares the store's guarded reads with the log, per run and cumulatively.
#[derive(Debug, Default)]
pub struct Comparator {
    cumulative: Comparison,
}

impl Comparator {
    /// A comparator with nothing counted.
    pub fn new() -> Self {
        Self::default()
    }

    /// Everything counted so far.
    pub fn cumulative(&self) -> Comparison {
        self.cumulative
    }

    /// Compares each execution's guarded read with the log's chain (ordered by links), read
    /// after it.
    pub async fn run(
        &mut self,
        client: &Client,
        source: &dyn LogSource,
        executions: &[ExecutionId],
    ) -> Result<Comparison, ReconcileError> {
        let mut run = Comparison::default();
        for exec in executions {
            run.compared += 1;
            let read = client.chain(exec, ReadOptions::default()).await?;
            let Guarded::Authoritative(events) = read.answer else {
                continue;
            };
            run.answered += 1;
            let log = source.read_log(exec).await?;
            let stored: Vec<_> = events.iter().map(|e| (&e.event_id, &e.payload)).collect();
            let logged: Option<Vec<_>> = order_by_links(&log).ok().map(|ordered| {
                ordered
                    .into_iter()
                    .map(|e| (&e.event_id, &e.payload))
                    .collect()
            });
            // The store was read first: a log that grew since may hold more, never less.
            let (agrees, behind) = match logged {
                Some(logged) => (logged.starts_with(&stored), logged.len() > stored.len()),
                None => (log.is_empty() && stored.is_empty(), false),
            };
            if agrees {
                run.agreed += 1;
                run.behind += u64::from(behind);
            } else {
                run.disagreed += 1;
            }
        }
        self.cumulative.add(&run);
        Ok(run)
    }
}
