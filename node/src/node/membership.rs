//! Membership: initializing a cluster, adding a learner (and waiting until it has caught up),
//! changing the voters.

use std::collections::{BTreeMap, BTreeSet};

use openraft::errors::{ClientWriteError, InitializeError, RaftError};
use openraft::BasicNode;
use raft_store::raft::{NodeId, TypeConfig};

use super::Node;
use crate::errors::{Leader, MembershipError};

impl Node {
    /// Initializes a fresh cluster with `nodes` as its voters. Runs on one node, once.
    pub async fn initialize(&self, nodes: BTreeMap<NodeId, String>) -> Result<(), MembershipError> {
        if !nodes.contains_key(&self.config.id) {
            return Err(MembershipError::Invalid(format!(
                "the initial members must include this node ({})",
                self.config.id
            )));
        }
        let members: BTreeMap<NodeId, BasicNode> = nodes
            .into_iter()
            .map(|(id, addr)| (id, BasicNode::new(addr)))
            .collect();
        match self.raft.initialize(members).await {
            Ok(()) => Ok(()),
            Err(RaftError::APIError(InitializeError::NotAllowed(e))) => Err(
                MembershipError::Invalid(format!("the cluster is already initialized: {e}")),
            ),
            Err(RaftError::APIError(InitializeError::NotInMembers(e))) => {
                Err(MembershipError::Invalid(e.to_string()))
            }
            Err(err) => Err(MembershipError::Unavailable(err.to_string())),
        }
    }

    /// Adds a learner and waits until it has replicated the log up to the entry that added it.
    /// A learner that cannot be reached (or whose certificate does not name it) stays a learner
    /// and the call answers unavailable.
    pub async fn add_learner(&self, id: NodeId, addr: String) -> Result<(), MembershipError> {
        let deadline = tokio::time::Instant::now() + self.config.limits.membership_timeout;
        // openraft's own blocking wait gives up silently after a short while; this one says so.
        let change = self.raft.add_learner(id, BasicNode::new(addr), false);
        let added = tokio::time::timeout_at(deadline, change).await;
        let log_id = match added {
            Ok(Ok(response)) => response.log_id,
            other => return membership_result(other),
        };
        let caught_up = self.metrics_until(|m| {
            let matched = m.replication.as_ref()?.get(&id)?.as_ref()?;
            (*matched >= log_id).then_some(())
        });
        match tokio::time::timeout_at(deadline, caught_up).await {
            Ok(Some(())) => Ok(()),
            _ => Err(MembershipError::Unavailable(format!(
                "node {id} was added as a learner but has not caught up: check that it runs, is \
                 reachable at its address, and presents a certificate naming node {id}"
            ))),
        }
    }

    /// Makes exactly `voters` the voting members (each must already be a member).
    pub async fn change_voters(&self, voters: BTreeSet<NodeId>) -> Result<(), MembershipError> {
        let change = self.raft.change_membership(voters, false);
        membership_result(tokio::time::timeout(self.config.limits.membership_timeout, change).await)
    }
}

type MembershipOutcome<T> = Result<
    Result<T, RaftError<TypeConfig, ClientWriteError<TypeConfig>>>,
    tokio::time::error::Elapsed,
>;

fn membership_result<T>(outcome: MembershipOutcome<T>) -> Result<(), MembershipError> {
    match outcome {
        Err(_) => Err(MembershipError::Unavailable(
            "the membership change did not finish in time".into(),
        )),
        Ok(Ok(_)) => Ok(()),
        Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(forward)))) => Err(
            MembershipError::NotLeader(forward.leader_id.zip(forward.leader_node).map(
                |(id, node)| Leader {
                    id,
                    addr: node.addr,
                },
            )),
        ),
        Ok(Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(e)))) => {
            Err(MembershipError::Invalid(e.to_string()))
        }
        Ok(Err(err)) => Err(MembershipError::Unavailable(err.to_string())),
    }
}
