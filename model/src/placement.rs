//! Placement: which nodes hold each shard's replicas, and which of them is meant to lead it.
//!
//! Computed once, when a cluster is made, from its node ids, its shard count and the replicas
//! each shard has; then stored with the cluster, so every node reads the same placement rather
//! than computing its own. The node ids are sorted first, so the placement does not depend on
//! the order they were given in.
//!
//! The rule: lay the shards' replica slots end to end and deal the sorted nodes around them in
//! turn — shard `s` holds the `R` nodes at positions `s·R … s·R + R − 1` of the cycle (distinct,
//! as `R` is at most the node count). Any `S·R` consecutive positions of a cycle of `N` nodes
//! give every node ⌊S·R/N⌋ or ⌈S·R/N⌉ of them, so replicas are balanced to within one. Each
//! shard's preferred leader is the one of its replicas that leads the fewest shards so far (the
//! first in its slots on a tie); a test checks that leaders then balance to within one for
//! every cluster of 3 to 32 nodes, 3 or 5 replicas and 1 to 1,024 shards.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::shard::{ShardCount, ShardId};

/// The nodes of one shard's Raft group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardReplicas {
    /// The node meant to lead the group (the balancer moves its leadership back there).
    pub leader: u64,
    /// The group's other voters, ascending.
    pub followers: Vec<u64>,
}

impl ShardReplicas {
    /// Every voter of the group, the preferred leader first.
    pub fn voters(&self) -> impl Iterator<Item = u64> + '_ {
        std::iter::once(self.leader).chain(self.followers.iter().copied())
    }

    /// Whether `node` holds a replica of the group.
    pub fn holds(&self, node: u64) -> bool {
        self.voters().any(|voter| voter == node)
    }
}

/// Every shard's replicas, indexed by shard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Vec<ShardReplicas>", into = "Vec<ShardReplicas>")]
pub struct Placement {
    shards: Vec<ShardReplicas>,
}

/// Why a placement cannot be made, or why a stored one is not valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    /// More replicas asked for than there are nodes, or none.
    #[error("{replicas} replicas per shard cannot be placed on {nodes} nodes")]
    Replicas {
        /// Replicas per shard asked for.
        replicas: usize,
        /// Distinct nodes given.
        nodes: usize,
    },
    /// A node id given twice.
    #[error("node {0} is named twice")]
    DuplicateNode(u64),
    /// A layout whose nodes and placement do not fit together.
    #[error("{0}")]
    Layout(String),
    /// A stored placement that is not one a cluster could have been made with.
    #[error("shard {shard}: {reason}")]
    Invalid {
        /// The shard at fault.
        shard: u32,
        /// What is wrong with it.
        reason: String,
    },
}

impl Placement {
    /// The placement of `shards` shards of `replicas` replicas each over `nodes`.
    pub fn compute(
        nodes: &[u64],
        shards: ShardCount,
        replicas: usize,
    ) -> Result<Self, PlacementError> {
        let mut sorted = nodes.to_vec();
        sorted.sort_unstable();
        if let Some(twice) = sorted.windows(2).find(|pair| pair[0] == pair[1]) {
            return Err(PlacementError::DuplicateNode(twice[0]));
        }
        let n = sorted.len();
        if replicas == 0 || replicas > n {
            return Err(PlacementError::Replicas { replicas, nodes: n });
        }
        let mut leads = vec![0usize; n];
        let mut placed = Vec::new();
        for shard in 0..shards.get() as usize {
            let slots: Vec<usize> = (0..replicas).map(|k| (shard * replicas + k) % n).collect();
            // The replica leading the fewest shards so far; `min_by_key` keeps the first of equals.
            let leader = slots
                .iter()
                .copied()
                .min_by_key(|&slot| leads[slot])
                .unwrap_or(slots[0]);
            leads[leader] += 1;
            let mut followers: Vec<u64> = slots
                .iter()
                .filter(|&&slot| slot != leader)
                .map(|&slot| sorted[slot])
                .collect();
            followers.sort_unstable();
            placed.push(ShardReplicas {
                leader: sorted[leader],
                followers,
            });
        }
        Ok(Self { shards: placed })
    }

    /// How many shards it places.
    pub fn shard_count(&self) -> ShardCount {
        // A placement holds 1 to SHARDS_MAX shards (checked when made or read back).
        ShardCount::new(self.shards.len() as u32).unwrap_or(ShardCount::ONE)
    }

    /// The replicas of `shard`, when the placement has it.
    pub fn shard(&self, shard: ShardId) -> Option<&ShardReplicas> {
        self.shards.get(shard.0 as usize)
    }

    /// Every shard with its replicas, in shard order.
    pub fn shards(&self) -> impl Iterator<Item = (ShardId, &ShardReplicas)> {
        self.shards
            .iter()
            .enumerate()
            .map(|(shard, replicas)| (ShardId(shard as u32), replicas))
    }

    /// The shards `node` holds a replica of.
    pub fn held_by(&self, node: u64) -> impl Iterator<Item = ShardId> + '_ {
        self.shards()
            .filter(move |(_, replicas)| replicas.holds(node))
            .map(|(shard, _)| shard)
    }
}

impl TryFrom<Vec<ShardReplicas>> for Placement {
    type Error = PlacementError;

    /// A stored placement, checked: 1 to `SHARDS_MAX` shards, each with distinct voters.
    fn try_from(shards: Vec<ShardReplicas>) -> Result<Self, Self::Error> {
        let count = u32::try_from(shards.len()).unwrap_or(u32::MAX);
        if ShardCount::new(count).is_err() {
            return Err(PlacementError::Invalid {
                shard: count,
                reason: format!("a placement has 1 to {} shards", crate::SHARDS_MAX),
            });
        }
        for (shard, replicas) in shards.iter().enumerate() {
            let mut voters: Vec<u64> = replicas.voters().collect();
            voters.sort_unstable();
            if voters.windows(2).any(|pair| pair[0] == pair[1]) {
                return Err(PlacementError::Invalid {
                    shard: shard as u32,
                    reason: "a node holds two of its replicas".to_string(),
                });
            }
        }
        Ok(Self { shards })
    }
}

impl From<Placement> for Vec<ShardReplicas> {
    fn from(placement: Placement) -> Self {
        placement.shards
    }
}

/// What a sharded cluster was made with, stored on every node by `cluster init` and identical on
/// all of them: the members' addresses and the placement of every shard. A node starts the
/// groups it holds from it; a cluster without one is a single group (shard 0) over its members.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "LayoutRecord", into = "LayoutRecord")]
pub struct Layout {
    nodes: BTreeMap<u64, String>,
    placement: Placement,
}

/// [`Layout`]'s stored form, checked when read back.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct LayoutRecord {
    nodes: BTreeMap<u64, String>,
    placement: Placement,
}

impl Layout {
    /// `shards` shards of `replicas` replicas each over `nodes` (id → address). Every node must
    /// hold a replica of one shard at least (`shards · replicas ≥ nodes`): a node that holds none
    /// would serve nothing.
    pub fn new(
        nodes: BTreeMap<u64, String>,
        shards: ShardCount,
        replicas: usize,
    ) -> Result<Self, PlacementError> {
        let ids: Vec<u64> = nodes.keys().copied().collect();
        let placement = Placement::compute(&ids, shards, replicas)?;
        Self::checked(nodes, placement)
    }

    fn checked(nodes: BTreeMap<u64, String>, placement: Placement) -> Result<Self, PlacementError> {
        if let Some((id, _)) = nodes.iter().find(|(_, addr)| addr.is_empty()) {
            return Err(PlacementError::Layout(format!("node {id} has no address")));
        }
        for (shard, replicas) in placement.shards() {
            if let Some(stranger) = replicas.voters().find(|id| !nodes.contains_key(id)) {
                return Err(PlacementError::Invalid {
                    shard: shard.0,
                    reason: format!("its replica on node {stranger} is not a member"),
                });
            }
        }
        if let Some(idle) = nodes
            .keys()
            .find(|id| placement.held_by(**id).next().is_none())
        {
            return Err(PlacementError::Layout(format!(
                "node {idle} would hold no shard: shards × replicas must be at least the number \
                 of nodes"
            )));
        }
        Ok(Self { nodes, placement })
    }

    /// Every member's address, by id.
    pub fn nodes(&self) -> &BTreeMap<u64, String> {
        &self.nodes
    }

    /// Where each shard's replicas are.
    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    /// How many shards the cluster has.
    pub fn shards(&self) -> ShardCount {
        self.placement.shard_count()
    }

    /// The voters of `shard` with their addresses (empty for a shard the layout lacks).
    pub fn voters(&self, shard: ShardId) -> BTreeMap<u64, String> {
        self.placement
            .shard(shard)
            .into_iter()
            .flat_map(ShardReplicas::voters)
            .filter_map(|id| Some((id, self.nodes.get(&id)?.clone())))
            .collect()
    }
}

impl TryFrom<LayoutRecord> for Layout {
    type Error = PlacementError;

    fn try_from(record: LayoutRecord) -> Result<Self, Self::Error> {
        Self::checked(record.nodes, record.placement)
    }
}

impl From<Layout> for LayoutRecord {
    fn from(layout: Layout) -> Self {
        LayoutRecord {
            nodes: layout.nodes,
            placement: layout.placement,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spread(counts: impl Iterator<Item = usize>) -> usize {
        let counts: Vec<usize> = counts.collect();
        counts.iter().max().unwrap_or(&0) - counts.iter().min().unwrap_or(&0)
    }

    #[test]
    fn replicas_and_leaders_are_balanced_to_within_one() {
        for n in 3..=32u64 {
            let nodes: Vec<u64> = (1..=n).collect();
            for replicas in [3, 5].into_iter().filter(|r| *r as u64 <= n) {
                for shards in 1..=crate::SHARDS_MAX {
                    // Every count up to 64, then a sample: the loop's cost grows with both.
                    if shards > 64 && shards % 61 != 0 && shards != crate::SHARDS_MAX {
                        continue;
                    }
                    let count = ShardCount::new(shards).expect("count");
                    let placement = Placement::compute(&nodes, count, replicas).expect("placed");
                    let mut held = vec![0usize; n as usize];
                    let mut led = vec![0usize; n as usize];
                    for (_, shard) in placement.shards() {
                        let mut voters: Vec<u64> = shard.voters().collect();
                        assert_eq!(voters.len(), replicas);
                        voters.sort_unstable();
                        voters.dedup();
                        assert_eq!(voters.len(), replicas, "{shard:?}");
                        for voter in voters {
                            held[(voter - 1) as usize] += 1;
                        }
                        led[(shard.leader - 1) as usize] += 1;
                    }
                    let what = format!("{n} nodes, {replicas} replicas, {shards} shards");
                    assert!(spread(held.into_iter()) <= 1, "replicas, {what}");
                    assert!(spread(led.into_iter()) <= 1, "leaders, {what}");
                }
            }
        }
    }

    #[test]
    fn the_placement_does_not_depend_on_the_order_nodes_are_named_in() {
        let count = ShardCount::new(12).expect("count");
        let one = Placement::compute(&[1, 2, 3, 4, 5, 6], count, 3).expect("placed");
        let other = Placement::compute(&[6, 3, 5, 1, 4, 2], count, 3).expect("placed");
        assert_eq!(one, other);
        // Fixed: every node reads the stored placement, but a change to the rule would place a
        // new cluster differently from the documented one.
        let first: Vec<(u64, Vec<u64>)> = one
            .shards()
            .take(4)
            .map(|(_, r)| (r.leader, r.followers.clone()))
            .collect();
        assert_eq!(
            first,
            [
                (1, vec![2, 3]),
                (4, vec![5, 6]),
                (2, vec![1, 3]),
                (5, vec![4, 6])
            ]
        );
        assert_eq!(one.held_by(1).count(), 6);
    }

    #[test]
    fn a_placement_that_cannot_be_made_is_refused() {
        let count = ShardCount::new(4).expect("count");
        assert_eq!(
            Placement::compute(&[1, 2], count, 3),
            Err(PlacementError::Replicas {
                replicas: 3,
                nodes: 2
            })
        );
        assert_eq!(
            Placement::compute(&[1, 2, 2, 3], count, 3),
            Err(PlacementError::DuplicateNode(2))
        );
        assert!(Placement::compute(&[1, 2, 3], count, 0).is_err());
        // One node, one replica: a single-node cluster.
        let single = Placement::compute(&[7], count, 1).expect("placed");
        assert!(single
            .shards()
            .all(|(_, r)| r.leader == 7 && r.followers.is_empty()));
    }

    #[test]
    fn a_stored_placement_is_checked_when_read_back() {
        let count = ShardCount::new(3).expect("count");
        let placement = Placement::compute(&[1, 2, 3, 4], count, 3).expect("placed");
        let json = serde_json::to_string(&placement).expect("json");
        let read: Placement = serde_json::from_str(&json).expect("read");
        assert_eq!(read, placement);
        assert_eq!(read.shard_count(), count);
        for bad in [
            r#"[]"#,
            r#"[{"leader":1,"followers":[2,1]}]"#,
            r#"[{"leader":1,"followers":[2,3]},{"leader":2,"followers":[2]}]"#,
        ] {
            assert!(serde_json::from_str::<Placement>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_layout_names_every_replica_and_gives_every_node_a_shard() {
        let nodes: BTreeMap<u64, String> = (1..=6).map(|id| (id, format!("n{id}:7001"))).collect();
        let layout = Layout::new(nodes.clone(), ShardCount::new(12).unwrap(), 3).unwrap();
        assert_eq!(layout.shards().get(), 12);
        assert_eq!(
            layout.voters(ShardId(0)),
            [
                (1, "n1:7001".to_string()),
                (2, "n2:7001".to_string()),
                (3, "n3:7001".to_string())
            ]
            .into_iter()
            .collect()
        );
        let stored = serde_json::to_string(&layout).unwrap();
        assert_eq!(serde_json::from_str::<Layout>(&stored).unwrap(), layout);
        // One shard of three replicas cannot give six nodes a shard each.
        assert!(matches!(
            Layout::new(nodes.clone(), ShardCount::ONE, 3),
            Err(PlacementError::Layout(_))
        ));
        // A stored layout whose placement names a node it does not list is refused.
        let mut fewer = nodes;
        fewer.remove(&6);
        let forged = serde_json::json!({ "nodes": fewer, "placement": layout.placement() });
        assert!(serde_json::from_value::<Layout>(forged).is_err());
        let unknown = serde_json::json!({ "nodes": layout.nodes(), "placement": layout.placement(), "extra": 1 });
        assert!(serde_json::from_value::<Layout>(unknown).is_err());
    }
}
