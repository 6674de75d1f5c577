//! [`ReadRounds`]: linearizable reads share leadership confirmations, as etcd batches its
//! ReadIndex requests.
//!
//! A linearizable read needs the leader to confirm, with a quorum, that it still leads, and then
//! to have applied up to the commit index it held when the confirmation STARTED. A read may only
//! use a confirmation that started after the read arrived: one already in flight may have taken
//! its commit index before a write that this reader saw acknowledged. So a read joins the next
//! confirmation to start, and every read that arrives while one is in flight shares the one after
//! it. Confirmations run one at a time, in a task of their own (a read that gives up does not
//! stop the others' confirmation).

use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::watch;

/// The outcome of one confirmation, shared by the reads that joined it.
type Outcome<T, E> = Option<Result<T, E>>;

/// The confirmations of one node.
pub struct ReadRounds<T, E> {
    state: Mutex<Rounds<T, E>>,
}

struct Rounds<T, E> {
    /// The confirmation that has not started yet: every read arriving now joins it.
    next: Option<watch::Sender<Outcome<T, E>>>,
    /// Whether a task is running confirmations (it starts `next` when the current one ends).
    running: bool,
}

impl<T, E> Default for ReadRounds<T, E> {
    fn default() -> Self {
        Self {
            state: Mutex::new(Rounds {
                next: None,
                running: false,
            }),
        }
    }
}

impl<T, E> ReadRounds<T, E>
where
    T: Clone + Send + Sync + 'static,
    E: Clone + Send + Sync + 'static,
{
    fn lock(&self) -> MutexGuard<'_, Rounds<T, E>> {
        // The state is two fields updated together under the lock; a panic cannot leave it
        // half-written, so a poisoned lock is still sound.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Waits for the next confirmation to start after this call and returns its outcome.
    /// `confirm` runs one confirmation; it is called once per round, from a spawned task.
    /// `dropped` is the error when the confirming task ended without an outcome.
    pub async fn join<F, Fut>(
        self: &Arc<Self>,
        confirm: F,
        dropped: impl FnOnce() -> E,
    ) -> Result<T, E>
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
    {
        let (mut outcome, start) = {
            let mut rounds = self.lock();
            let next = rounds.next.get_or_insert_with(|| watch::channel(None).0);
            let outcome = next.subscribe();
            let start = !std::mem::replace(&mut rounds.running, true);
            (outcome, start)
        };
        if start {
            let rounds = Arc::clone(self);
            tokio::spawn(async move { rounds.run(confirm).await });
        }
        let shared = match outcome.wait_for(Option::is_some).await {
            Ok(shared) => shared.clone(),
            Err(_) => None,
        };
        shared.unwrap_or_else(|| Err(dropped()))
    }

    /// Runs confirmations while reads wait for one.
    async fn run<F, Fut>(&self, confirm: F)
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        loop {
            let round = {
                let mut rounds = self.lock();
                match rounds.next.take() {
                    Some(round) => round,
                    None => {
                        rounds.running = false;
                        return;
                    }
                }
            };
            let outcome = confirm().await;
            round.send_replace(Some(outcome));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    use super::*;

    /// Reads that arrive while a confirmation is in flight share the next one; a read never
    /// gets the outcome of a confirmation that started before it arrived.
    #[tokio::test(flavor = "current_thread")]
    async fn reads_arriving_during_a_confirmation_share_the_next_and_never_an_earlier_one() {
        let rounds: Arc<ReadRounds<u64, String>> = Arc::default();
        let started = Arc::new(AtomicU64::new(0));
        let confirm = {
            let started = Arc::clone(&started);
            move || {
                // Each confirmation answers with its own number, counted when it starts.
                let number = started.fetch_add(1, Ordering::SeqCst) + 1;
                async move {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    Ok(number)
                }
            }
        };
        let first = {
            let (rounds, confirm) = (Arc::clone(&rounds), confirm.clone());
            tokio::spawn(async move { rounds.join(confirm, || "dropped".into()).await })
        };
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert_eq!(
            started.load(Ordering::SeqCst),
            1,
            "the first read starts a confirmation"
        );
        let later: Vec<_> = (0..50)
            .map(|_| {
                let (rounds, confirm) = (Arc::clone(&rounds), confirm.clone());
                tokio::spawn(async move { rounds.join(confirm, || "dropped".into()).await })
            })
            .collect();
        assert_eq!(first.await.unwrap(), Ok(1));
        for read in later {
            // They arrived while confirmation 1 was in flight: they must get confirmation 2.
            assert_eq!(read.await.unwrap(), Ok(2));
        }
        assert_eq!(
            started.load(Ordering::SeqCst),
            2,
            "51 reads, two confirmations"
        );
        // Idle again: the next read starts a confirmation of its own.
        assert_eq!(rounds.join(confirm, || "dropped".into()).await, Ok(3));
    }
}
