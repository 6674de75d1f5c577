//! [`Host`]: this node as a cluster member — the Raft groups it runs (one per shard it holds a
//! replica of), the layout they were made with, and the parts every group shares.
//!
//! A node without a layout runs group 0 alone: a fresh node (until `cluster init` gives it a
//! layout, or a leader adds it to group 0) or a member of a single-shard cluster, including one
//! made by a release before shards. `cluster init` with several shards gives every node the same
//! [`Layout`], which each stores durably under `y/layout` (the node's own keyspace of the shared
//! engine) before it answers, and then runs the groups the layout places on it. Once every node
//! has taken it, each group's preferred leader initializes its group with the group's voters. A
//! stored layout is never replaced: taking the same one again does nothing, taking another is
//! refused.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use chainstore_model::{Layout, ShardCount, ShardId};
use raft_store::engine::WriteBatch;
use raft_store::raft::NodeId;
use raft_store::Engine;

use crate::config::NodeConfig;
use crate::errors::{MembershipError, StartError};
use crate::metrics::Metrics;
use crate::node::{Node, Shared};
use chainstore_transport::Transport;

/// The peer route that hands a member the cluster's layout ([`LayoutOffer`]).
pub const LAYOUT_PATH: &str = "/raft/layout";

/// What `POST /raft/layout` carries: the layout to take, and whether to initialize the groups
/// the taker is the preferred leader of (the second step of [`Host::make_sharded`]).
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayoutOffer {
    /// The cluster's layout.
    pub layout: Layout,
    /// Whether to initialize the groups the taker is meant to lead.
    pub initialize: bool,
}

/// Where a node keeps its layout: in the node's own keyspace (`y…`), which no group's keys
/// reach.
const LAYOUT_KEY: &[u8] = b"y/layout";

/// One running cluster member: its groups, by shard.
pub struct Host {
    config: NodeConfig,
    shared: Shared,
    layout: RwLock<Option<Arc<Layout>>>,
    groups: RwLock<BTreeMap<u32, Arc<Node>>>,
    /// One layout taken at a time.
    adopting: tokio::sync::Mutex<()>,
}

impl Host {
    /// Opens the node's engine and starts the groups its stored layout places on it (group 0
    /// alone when it has none).
    pub async fn start(
        config: NodeConfig,
        engine: Arc<dyn Engine>,
        transport: Arc<dyn Transport>,
    ) -> Result<Arc<Host>, StartError> {
        let shared = Shared::new(&config, engine, transport);
        let layout = read_layout(&*shared.engine)?;
        let held: Vec<u32> = match &layout {
            Some(layout) => layout
                .placement()
                .held_by(config.id)
                .map(|shard| shard.0)
                .collect(),
            None => vec![0],
        };
        if held.is_empty() {
            return Err(StartError::Raft(format!(
                "the stored cluster layout places no shard on this node ({})",
                config.id
            )));
        }
        let mut groups = BTreeMap::new();
        for group in held {
            groups.insert(group, Node::start(config.clone(), &shared, group).await?);
        }
        let host = Arc::new(Host {
            config,
            shared,
            layout: RwLock::new(layout.map(Arc::new)),
            groups: RwLock::new(groups),
            adopting: tokio::sync::Mutex::new(()),
        });
        tokio::spawn(balance(Arc::downgrade(&host)));
        Ok(host)
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.config.id
    }

    /// The configuration the node runs with.
    pub fn config(&self) -> &NodeConfig {
        &self.config
    }

    /// The transport to peers (shared by every group).
    pub fn transport(&self) -> &Arc<dyn Transport> {
        &self.shared.transport
    }

    /// This node's credential for requests to its peers.
    pub fn peer_credentials(&self) -> &crate::network::PeerCredentials {
        &self.shared.peer_credentials
    }

    /// Outcome counters (shared by every group).
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.shared.metrics
    }

    /// The first storage error this process saw: once set, every group's Raft is stopped.
    pub fn storage_failure(&self) -> Option<String> {
        self.shared.health.failure()
    }

    /// The layout this node was given, if it was (a single-shard cluster has none).
    pub fn layout(&self) -> Option<Arc<Layout>> {
        self.layout
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The cluster's shard count: the layout's, or 1.
    pub fn shards(&self) -> ShardCount {
        self.layout().map_or(ShardCount::ONE, |l| l.shards())
    }

    /// This node's replica of group `group`, when it runs one.
    pub fn group(&self, group: u32) -> Option<Arc<Node>> {
        self.groups
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&group)
            .cloned()
    }

    /// Every group this node runs, in group order.
    pub fn groups(&self) -> Vec<Arc<Node>> {
        self.groups
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// The lowest group this node runs: it answers what is not about one execution (group 0
    /// of a single-shard cluster is the whole cluster). A node runs one group at least (start
    /// refuses a layout that places none on it, and a layout gives every node one), so `None`
    /// only while a node stops.
    pub fn first(&self) -> Option<Arc<Node>> {
        let groups = self.groups.read().unwrap_or_else(|p| p.into_inner());
        groups.values().next().cloned()
    }

    /// Whether node `id` may act as a peer of this one: the layout names it, or one of this
    /// node's groups has it as a member, or this node knows no cluster yet (a fresh node learns
    /// its cluster from whoever initializes or adds it).
    pub fn accepts_peer(&self, id: NodeId) -> bool {
        if let Some(layout) = self.layout() {
            return layout.nodes().contains_key(&id);
        }
        self.groups().iter().all(|node| node.accepts_peer(id))
    }

    /// Takes `layout`: stores it durably, starts the groups it places on this node and stops a
    /// group it does not. Taking the layout already stored does nothing (a retried `cluster
    /// init`); any other layout, or any layout on a member of a single-shard cluster, is
    /// refused. No group is initialized here: [`Host::lead_preferred`] does that, once every
    /// node has taken the layout, so that no node hears of a group of the layout (group 0 above
    /// all, which a fresh node runs) before it knows the layout, and mistakes itself for a member
    /// of a single-shard cluster.
    pub async fn adopt(&self, layout: Layout) -> Result<(), MembershipError> {
        let _one = self.adopting.lock().await;
        let id = self.config.id;
        if !layout.nodes().contains_key(&id) {
            return Err(MembershipError::Invalid(format!(
                "the layout does not name this node ({id})"
            )));
        }
        match self.layout() {
            Some(stored) if *stored == layout => Ok(()),
            Some(_) => Err(MembershipError::Invalid(
                "this node already belongs to a cluster with another layout".into(),
            )),
            None if self.groups().iter().any(|node| node.is_member()) => {
                Err(MembershipError::Invalid(
                    "this node already belongs to a single-shard cluster".into(),
                ))
            }
            None => {
                self.store_layout(&layout)?;
                self.run_groups(&layout).await
            }
        }
    }

    /// Initializes every group of the stored layout that this node is the preferred leader of
    /// and that has no members yet, with the group's voters.
    pub async fn lead_preferred(&self) -> Result<(), MembershipError> {
        let _one = self.adopting.lock().await;
        let Some(layout) = self.layout() else {
            return Err(MembershipError::Invalid(
                "this node holds no layout to initialize groups from".into(),
            ));
        };
        for (shard, replicas) in layout.placement().shards() {
            if replicas.leader != self.config.id {
                continue;
            }
            let Some(node) = self.group(shard.0) else {
                continue;
            };
            if node.is_member() {
                continue;
            }
            match node.initialize(layout.voters(shard)).await {
                Ok(()) => {}
                // Initialized meanwhile: what was asked for.
                Err(MembershipError::Invalid(_)) if node.is_member() => {}
                Err(err) => return Err(err),
            }
        }
        Ok(())
    }

    /// Makes the cluster of several shards `layout` describes, from this node: every node takes
    /// the layout, then every node initializes the groups it is meant to lead ([`Host::adopt`]
    /// says why in two steps). A node that cannot be reached leaves it unfinished (unavailable,
    /// naming the node); doing it again with the same layout finishes it.
    pub async fn make_sharded(&self, layout: Layout) -> Result<(), MembershipError> {
        self.adopt(layout.clone()).await?;
        self.hand_out(&layout, false).await?;
        self.lead_preferred().await?;
        self.hand_out(&layout, true).await
    }

    /// Sends `layout` to every other node it names (to take it, or with `initialize` to
    /// initialize the groups each is the preferred leader of); unavailable, naming them, when
    /// some did not.
    async fn hand_out(&self, layout: &Layout, initialize: bool) -> Result<(), MembershipError> {
        let offer = LayoutOffer {
            layout: layout.clone(),
            initialize,
        };
        let body = serde_json::to_vec(&offer)
            .map_err(|e| MembershipError::Unavailable(format!("cannot encode the layout: {e}")))?;
        let timeout = self.config.limits.membership_timeout;
        let sends = layout
            .nodes()
            .iter()
            .filter(|(id, _)| **id != self.id())
            .map(|(&id, addr)| {
                let request = self
                    .shared
                    .peer_credentials
                    .request(http::Method::POST, id, addr, LAYOUT_PATH)
                    .header(http::header::CONTENT_TYPE, "application/json")
                    .body(bytes::Bytes::from(body.clone()));
                let transport = Arc::clone(&self.shared.transport);
                async move {
                    let outcome = match request {
                        Ok(request) => match transport.send(request, timeout).await {
                            Ok(answer) if answer.status().is_success() => Ok(()),
                            Ok(answer) => Err(format!(
                                "HTTP {}: {}",
                                answer.status().as_u16(),
                                String::from_utf8_lossy(answer.body())
                                    .chars()
                                    .take(300)
                                    .collect::<String>()
                            )),
                            Err(err) => Err(err.to_string()),
                        },
                        Err(err) => Err(err.to_string()),
                    };
                    (id, outcome)
                }
            });
        let refused: Vec<String> = futures_util::future::join_all(sends)
            .await
            .into_iter()
            .filter_map(|(id, outcome)| outcome.err().map(|why| format!("node {id}: {why}")))
            .collect();
        if refused.is_empty() {
            return Ok(());
        }
        Err(MembershipError::Unavailable(format!(
            "the layout is stored on this node, but not every node {} ({}); make the cluster \
             again, with the same layout, once they can be reached",
            if initialize {
                "initialized its groups"
            } else {
                "took it"
            },
            refused.join("; ")
        )))
    }

    fn store_layout(&self, layout: &Layout) -> Result<(), MembershipError> {
        let mut batch = WriteBatch::new();
        stage_layout(&mut batch, layout)
            .map_err(|e| MembershipError::Unavailable(format!("cannot encode the layout: {e}")))?;
        self.shared
            .engine
            .write_durable(batch)
            .map_err(|e| MembershipError::Unavailable(format!("cannot store the layout: {e}")))?;
        *self.layout.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(layout.clone()));
        Ok(())
    }

    /// Starts the groups `layout` places on this node that are not running, then stops those
    /// it does not place here (group 0 of a fresh node, empty: it was never initialized).
    async fn run_groups(&self, layout: &Layout) -> Result<(), MembershipError> {
        let held: Vec<u32> = layout.placement().held_by(self.id()).map(|s| s.0).collect();
        for &group in &held {
            if self.group(group).is_some() {
                continue;
            }
            let node = Node::start(self.config.clone(), &self.shared, group)
                .await
                .map_err(|e| {
                    MembershipError::Unavailable(format!("cannot start group {group}: {e}"))
                })?;
            self.groups
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .insert(group, node);
        }
        let idle: Vec<Arc<Node>> = {
            let mut groups = self.groups.write().unwrap_or_else(|p| p.into_inner());
            let idle: Vec<u32> = groups
                .keys()
                .copied()
                .filter(|g| !held.contains(g))
                .collect();
            idle.iter().filter_map(|g| groups.remove(g)).collect()
        };
        for node in idle {
            node.shutdown().await;
        }
        Ok(())
    }

    /// Stops every group's Raft.
    pub async fn shutdown(&self) {
        for node in self.groups() {
            node.shutdown().await;
        }
    }
}

/// How often the balancer looks for a group to hand back to its preferred leader.
const BALANCE_INTERVAL: std::time::Duration = std::time::Duration::from_millis(500);

/// The balancer: every [`BALANCE_INTERVAL`], the first group this node leads whose preferred
/// leader is another node that has matched the whole log is handed to it, and the balancer waits
/// (up to an election timeout) until the group names another leader before it looks again: one
/// transfer at a time per node, none to a node that is behind. Leaders move only towards the
/// layout's preferred leaders, which balance to within one per node, so nothing moves back and
/// forth. Ends with the node.
async fn balance(host: std::sync::Weak<Host>) {
    loop {
        tokio::time::sleep(BALANCE_INTERVAL).await;
        let Some(host) = host.upgrade() else {
            return;
        };
        let Some(layout) = host.layout() else {
            continue;
        };
        for node in host.groups() {
            let Some(preferred) = layout
                .placement()
                .shard(ShardId(node.group()))
                .map(|replicas| replicas.leader)
            else {
                continue;
            };
            if preferred == host.id() || !node.move_leadership_to(preferred).await {
                continue;
            }
            tracing::info!(
                group = node.group(),
                to = preferred,
                "balancer: handing the group's leadership to its preferred leader"
            );
            let deadline = tokio::time::Instant::now() + host.config.raft.election_max;
            while node.raft_metrics().current_leader == Some(host.id())
                && tokio::time::Instant::now() < deadline
            {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            break;
        }
    }
}

/// The layout a deployment's bootstrap (and a backup set's restore) makes of `voters`: `shards`
/// groups of three replicas each (of every voter, when fewer), placed over them.
pub(crate) fn deployment_layout(
    voters: &BTreeMap<NodeId, String>,
    shards: ShardCount,
) -> Result<Layout, chainstore_model::PlacementError> {
    Layout::new(voters.clone(), shards, voters.len().min(3))
}

/// Adds the writing of `layout`, as this node's layout, to `batch`.
pub(crate) fn stage_layout(batch: &mut WriteBatch, layout: &Layout) -> serde_json::Result<()> {
    batch.put(LAYOUT_KEY, serde_json::to_vec(layout)?);
    Ok(())
}

/// The layout stored in `engine`, if one is.
pub(crate) fn read_layout(engine: &dyn Engine) -> Result<Option<Layout>, StartError> {
    let Some(bytes) = engine
        .get(LAYOUT_KEY)
        .map_err(|e| StartError::Raft(format!("cannot read the cluster's layout: {e}")))?
    else {
        return Ok(None);
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| StartError::Raft(format!("the stored cluster layout is damaged: {e}")))
}
