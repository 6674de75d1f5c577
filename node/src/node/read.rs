//! Read barriers: the read index of a linearizable read (leadership confirmed by a quorum, then
//! everything committed applied here), a node's own applied index for a local read, and the
//! wait for a minimum index.

use std::time::Duration;

use chainstore_model::api::Consistency;
use openraft::async_runtime::WatchReceiver;
use openraft::errors::{LinearizableReadError, RaftError};
use openraft::ReadPolicy;

use super::Node;
use crate::errors::{Leader, ReadError};
use crate::raft_types::{NodeMetrics, NodeRaft};

impl Node {
    /// The read index of a linearizable read: leadership confirmed by a quorum's answers to
    /// messages sent after this call, and everything committed when it was made applied here
    /// (openraft's `ReadIndex` policy; concurrent reads share the heartbeats that confirm
    /// them). Returns the applied index.
    pub(super) async fn read_index(&self) -> Result<u64, ReadError> {
        self.metrics.record_linearizable_read();
        match confirm_leadership(&self.raft, self.config.limits.write_timeout).await {
            // The leader as this node sees it (none, when it has not heard from it lately).
            Err(ReadError::NotLeader(_)) => Err(ReadError::NotLeader(self.leader())),
            confirmed => confirmed,
        }
    }

    /// Passes the barrier a read of `consistency` needs; returns the applied index the read
    /// reflects at least.
    pub async fn read_barrier(
        &self,
        consistency: Consistency,
        min_index: Option<u64>,
    ) -> Result<u64, ReadError> {
        if let Some(failure) = self.storage_failure() {
            return Err(ReadError::Unavailable {
                message: format!("this node's storage failed: {failure}"),
                applied_index: self.applied_index(),
            });
        }
        let applied = match consistency {
            Consistency::Linearizable => self.read_index().await?,
            Consistency::Local => self.applied_index(),
        };
        match min_index {
            Some(min) if applied < min => {
                self.wait_applied(min, self.config.limits.min_index_wait)
                    .await
            }
            _ => Ok(applied),
        }
    }

    /// Waits until `reached` finds what it looks for in the Raft metrics; `None` when Raft shuts
    /// down first. The caller bounds the wait.
    pub(super) async fn metrics_until<T>(
        &self,
        mut reached: impl FnMut(&NodeMetrics) -> Option<T>,
    ) -> Option<T> {
        let mut metrics = self.raft.metrics();
        loop {
            if let Some(found) = reached(&metrics.borrow_and_update()) {
                return Some(found);
            }
            metrics.changed().await.ok()?;
        }
    }

    /// Waits until the applied index reaches `min`.
    pub async fn wait_applied(&self, min: u64, wait: Duration) -> Result<u64, ReadError> {
        let reached = self.metrics_until(|m| {
            let applied = m.last_applied.as_ref().map_or(0, |id| id.index);
            (applied >= min).then_some(applied)
        });
        match tokio::time::timeout(wait, reached).await {
            Ok(Some(applied)) => Ok(applied),
            _ => Err(ReadError::Unavailable {
                message: format!("this node has not applied index {min} yet"),
                applied_index: self.applied_index(),
            }),
        }
    }
}

/// One leadership confirmation: `ensure_linearizable` within `timeout`, then the applied index.
async fn confirm_leadership(raft: &NodeRaft, timeout: Duration) -> Result<u64, ReadError> {
    let applied_index = || {
        raft.metrics()
            .borrow_watched()
            .last_applied
            .as_ref()
            .map_or(0, |id| id.index)
    };
    match tokio::time::timeout(timeout, raft.ensure_linearizable(ReadPolicy::ReadIndex)).await {
        Err(_) => Err(ReadError::Unavailable {
            message: "leadership could not be confirmed in time".into(),
            applied_index: applied_index(),
        }),
        Ok(Ok(_)) => Ok(applied_index()),
        Ok(Err(RaftError::APIError(LinearizableReadError::ForwardToLeader(forward)))) => {
            Err(ReadError::NotLeader(
                forward
                    .leader_id
                    .zip(forward.leader_node)
                    .map(|(id, node)| Leader {
                        id,
                        addr: node.addr,
                    }),
            ))
        }
        Ok(Err(err)) => Err(ReadError::Unavailable {
            message: err.to_string(),
            applied_index: applied_index(),
        }),
    }
}
