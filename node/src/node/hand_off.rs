//! Handing leadership over before a node stops, so that writes resume within a round trip
//! instead of after an election timeout.

use std::sync::atomic::Ordering;
use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use openraft::ServerState;
use raft_store::raft::NodeId;

use super::Node;
use crate::errors::HandOff;
use crate::raft_types::NodeMetrics;

/// How long a successor asked to take over has to win before it is asked again.
const TRANSFER_RETRY: Duration = Duration::from_millis(300);

impl Node {
    /// Hands leadership to the most caught-up voter before this node stops, so that writes
    /// resume within a round trip instead of after an election timeout. New writes are refused
    /// (retryable) from now on; once a voter has matched the whole log, openraft's leadership
    /// transfer asks it to campaign (and the other voters to grant it their votes at once).
    /// Takes at most `within`; if no successor takes over by then, the others elect one after
    /// this node stops.
    pub async fn hand_off_leadership(&self, within: Duration) -> HandOff {
        if self.raft.metrics().borrow_watched().current_leader != Some(self.config.id) {
            return HandOff::NotLeader;
        }
        self.handing_off.store(true, Ordering::SeqCst);
        let deadline = tokio::time::Instant::now() + within;
        // Proposals already under way finish first: the successor must match a log that no
        // longer grows.
        while self.proposing.load(Ordering::SeqCst) > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let mut asked: Option<(NodeId, tokio::time::Instant)> = None;
        loop {
            let m = self.raft.metrics().borrow_watched().clone();
            match m.current_leader {
                Some(leader) if leader != self.config.id => return HandOff::HandedTo(leader),
                _ => {}
            }
            let ask_again = asked.is_none_or(|(_, at)| at.elapsed() > TRANSFER_RETRY);
            if m.state == ServerState::Leader && ask_again {
                if let Some(successor) = caught_up_voter(&m, self.config.id) {
                    asked = Some((successor, tokio::time::Instant::now()));
                    if let Err(err) = self.raft.trigger().transfer_leader(successor).await {
                        return HandOff::NoSuccessor(format!("raft stopped: {err}"));
                    }
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return HandOff::NoSuccessor(format!(
                    "no voter took over within {within:?} (asked: {:?})",
                    asked.map(|(id, _)| id)
                ));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

impl Node {
    /// Asks `target` to take this group's leadership over when this node leads it, is not
    /// handing it off, and `target` has matched the whole log (a group that is behind is never
    /// moved). True when it was asked.
    pub(crate) async fn move_leadership_to(&self, target: NodeId) -> bool {
        if self.handing_off.load(Ordering::SeqCst) {
            return false;
        }
        let m = self.raft.metrics().borrow_watched().clone();
        if m.state != ServerState::Leader || m.current_leader != Some(self.config.id) {
            return false;
        }
        let caught_up = m.last_log_index.is_some_and(|last| {
            m.replication
                .as_ref()
                .and_then(|r| r.get(&target))
                .and_then(|matched| matched.as_ref())
                .is_some_and(|matched| matched.index >= last)
        });
        caught_up && self.raft.trigger().transfer_leader(target).await.is_ok()
    }
}

/// The voter other than `me` whose replication has matched the leader's whole log, if any.
fn caught_up_voter(metrics: &NodeMetrics, me: NodeId) -> Option<NodeId> {
    let last = metrics.last_log_index?;
    let replication = metrics.replication.as_ref()?;
    let membership = metrics.membership_config.membership();
    membership.voter_ids().filter(|id| *id != me).find(|id| {
        replication
            .get(id)
            .and_then(|matched| matched.as_ref())
            .is_some_and(|matched| matched.index >= last)
    })
}
