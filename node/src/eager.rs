//! Eager appends: the leader sends the entries it has just written to its followers while it
//! makes them durable itself, so that the leader's fsync and the followers' run at the same
//! time rather than one after the other.
//!
//! openraft 0.9 replicates an entry only once the leader's own log flush has called back, so
//! an append waited for two fsyncs in a row: the leader's, then a follower's. Raft allows the
//! leader to send first (its vote for the entry is what waits for its own fsync). The log
//! store announces each append of this node's entries, written but not yet synced, as the
//! AppendEntries request a follower needs ([`raft_store::raft::LogStore::announce_appends`]);
//! this task sends it over an idle append stream to every other voter. The follower handles
//! it as any AppendEntries from its leader (the vote and the previous log id checked, the
//! entries stored and synced); its answer is counted and dropped. openraft's replication then
//! sends the same entries, which the follower already holds, and only ITS answers commit an
//! entry: nothing here tells openraft anything, so a lost, refused or late eager append costs
//! time, never safety. One eager append is under way per follower; an entry arriving while one
//! is is left to replication.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use openraft::network::RaftNetworkFactory;
use openraft::raft::AppendEntriesRequest;
use openraft::Raft;
use raft_store::raft::rpc_codec::encode_append_request;
use raft_store::raft::{NodeId, TypeConfig};
use tokio::sync::mpsc;

use crate::metrics::Metrics;
use crate::network::Network;

/// Announcements waiting to be sent; a full queue drops the newest (replication sends it).
pub(crate) const QUEUE: usize = 16;

/// Sends each announced append to the other voters of `raft`'s membership, each within `ttl`,
/// unless its encoding exceeds `bytes_max` (large entries go with replication alone). Ends when
/// the log store is dropped.
pub(crate) fn start(
    id: NodeId,
    raft: Raft<TypeConfig>,
    mut network: Network,
    mut appends: mpsc::Receiver<AppendEntriesRequest<TypeConfig>>,
    metrics: Arc<Metrics>,
    ttl: Duration,
    bytes_max: usize,
) {
    tokio::spawn(async move {
        let mut busy: BTreeMap<NodeId, Arc<AtomicBool>> = BTreeMap::new();
        while let Some(request) = appends.recv().await {
            let peers: Vec<_> = {
                let metrics = raft.metrics();
                let metrics = metrics.borrow();
                let membership = metrics.membership_config.membership();
                membership
                    .voter_ids()
                    .filter(|peer| *peer != id)
                    .filter_map(|peer| membership.get_node(&peer).map(|n| (peer, n.clone())))
                    .collect()
            };
            if peers.is_empty() {
                continue;
            }
            let Ok(body) = encode_append_request(&request) else {
                continue;
            };
            if body.len() > bytes_max {
                continue;
            }
            let body = Bytes::from(body);
            for (peer, node) in peers {
                let flag = Arc::clone(busy.entry(peer).or_default());
                if flag.swap(true, Ordering::AcqRel) {
                    metrics.record_eager_append("busy");
                    continue;
                }
                let mut client = network.new_client(peer, &node).await;
                let body = body.clone();
                let metrics = Arc::clone(&metrics);
                tokio::spawn(async move {
                    let outcome = client.eager_append(&body, ttl).await;
                    flag.store(false, Ordering::Release);
                    metrics.record_eager_append(outcome);
                });
            }
        }
    });
}
