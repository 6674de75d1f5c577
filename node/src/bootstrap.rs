//! Automatic bootstrap for deployments: every node is given the same list of initial voters (and
//! shard count), and the one with the lowest id initializes the cluster, once.
//!
//! "Once" rests on two checks, both repeated until one of them ends the task: a node whose own
//! storage already holds a membership never initializes (a restart does nothing), and the
//! bootstrapping node initializes only after every other listed voter has answered that it knows
//! no cluster either (so a bootstrapper whose disk was wiped cannot found a second cluster beside
//! the first). Initializing needs every voter reachable; until then the task waits and retries.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use chainstore_model::ShardCount;
use raft_store::raft::NodeId;

use crate::errors::MembershipError;
use crate::host::{deployment_layout, Host};

/// How the bootstrap ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bootstrapped {
    /// This node initialized the cluster.
    Initialized,
    /// This node already belongs to a cluster (a restart).
    AlreadyMember,
    /// Another listed voter already belongs to a cluster; this node waits to be added to it.
    PeerHasCluster(NodeId),
    /// Another node is the bootstrapper.
    NotBootstrapper,
}

/// Parses `1=host:port,2=host:port,...`.
pub fn parse_voters(text: &str) -> Result<BTreeMap<NodeId, String>, String> {
    let mut voters = BTreeMap::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (id, addr) = item
            .split_once('=')
            .ok_or_else(|| format!("{item:?} is not of the form id=host:port"))?;
        let id: NodeId = id
            .trim()
            .parse()
            .ok()
            .filter(|id| *id > 0)
            .ok_or_else(|| format!("{id:?} is not a positive node id"))?;
        let addr = addr.trim();
        if addr.is_empty() {
            return Err(format!("node {id} has an empty address"));
        }
        if voters.insert(id, addr.to_string()).is_some() {
            return Err(format!("node {id} is listed twice"));
        }
    }
    if voters.is_empty() {
        return Err("the list of voters is empty".into());
    }
    Ok(voters)
}

/// Whether this node belongs to a cluster: it holds a layout, or one of its groups has voters.
fn is_member(host: &Host) -> bool {
    host.layout().is_some() || host.groups().iter().any(|node| node.is_member())
}

/// Asks node `peer` at `addr` whether it belongs to a cluster: `Some(true/false)`, or `None`
/// when it did not answer.
async fn peer_has_cluster(node: &Host, peer: NodeId, addr: &str) -> Option<bool> {
    let request = node
        .peer_credentials()
        .request(http::Method::GET, peer, addr, "/v1/cluster")
        .body(Bytes::new())
        .ok()?;
    let timeout = node.config().limits.forward_timeout;
    let response = node.transport().send(request, timeout).await.ok()?;
    if !response.status().is_success() {
        return None;
    }
    let status: serde_json::Value = serde_json::from_slice(response.body()).ok()?;
    let voters = status.get("voters")?.as_array()?;
    Some(!voters.is_empty())
}

/// Runs the bootstrap for `node` with the initial `voters`; returns when there is nothing left
/// to do. Safe to run on every node, on every start.
pub async fn bootstrap(
    node: Arc<Host>,
    voters: BTreeMap<NodeId, String>,
    shards: ShardCount,
    retry: Duration,
) -> Bootstrapped {
    if voters.keys().next() != Some(&node.id()) {
        return Bootstrapped::NotBootstrapper;
    }
    loop {
        if is_member(&node) {
            return Bootstrapped::AlreadyMember;
        }
        let mut all_fresh = true;
        for (id, addr) in voters.iter().filter(|(id, _)| **id != node.id()) {
            match peer_has_cluster(&node, *id, addr).await {
                Some(true) => return Bootstrapped::PeerHasCluster(*id),
                Some(false) => {}
                None => all_fresh = false,
            }
        }
        if all_fresh && !is_member(&node) {
            match make(&node, &voters, shards, retry).await {
                Ok(()) => return Bootstrapped::Initialized,
                Err(MembershipError::Invalid(message)) if is_member(&node) => {
                    tracing::info!(%message, "bootstrap: already initialized");
                    return Bootstrapped::AlreadyMember;
                }
                Err(err) => tracing::warn!(%err, "bootstrap: initialize failed; retrying"),
            }
        }
        tokio::time::sleep(retry).await;
    }
}

/// Makes the cluster: one group of every voter, or `shards` groups of three replicas each (or
/// of every voter, when fewer) placed over them. Once this node has taken a layout it counts as
/// a member, so a sharded make that some node could not finish is retried here, every `retry`,
/// until it is done (a bootstrapper restarted meanwhile leaves it to `POST /v1/cluster/init`
/// with the same nodes and shards, which finishes it).
async fn make(
    node: &Host,
    voters: &BTreeMap<NodeId, String>,
    shards: ShardCount,
    retry: Duration,
) -> Result<(), MembershipError> {
    if shards == ShardCount::ONE {
        let first = node
            .first()
            .ok_or_else(|| MembershipError::Unavailable("the node is stopping".into()))?;
        return first.initialize(voters.clone()).await;
    }
    let layout = deployment_layout(voters, shards)
        .map_err(|e| MembershipError::Invalid(format!("no layout fits: {e}")))?;
    loop {
        match node.make_sharded(layout.clone()).await {
            Err(MembershipError::Unavailable(why)) => {
                tracing::warn!(%why, "bootstrap: the cluster is not made yet; retrying");
                tokio::time::sleep(retry).await;
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn voters_parse_and_bad_lists_are_refused() {
        let voters = parse_voters("1=n1:7001, 2=n2:7001,3=n3:7001").unwrap();
        assert_eq!(
            voters.into_iter().collect::<Vec<_>>(),
            vec![
                (1, "n1:7001".to_string()),
                (2, "n2:7001".to_string()),
                (3, "n3:7001".to_string())
            ]
        );
        for bad in ["", "1", "0=n:1", "x=n:1", "1=", "1=a:1,1=b:1"] {
            assert!(parse_voters(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
