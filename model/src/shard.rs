//! Shards: which of a cluster's Raft groups holds an execution.
//!
//! An execution's shard is a hash of its id's UTF-8 bytes modulo the cluster's shard count:
//! FNV-1a (64-bit), then MurmurHash3's 64-bit finalizer (`fmix64`), so that every bit of the id
//! reaches the low bits the modulo keeps (FNV-1a alone leaves the low `k` bits of its hash a
//! function of the low `k` bits of each byte only). The shard count is fixed when a cluster is
//! made and the function never changes for a cluster's life: a test holds it to known vectors.
//! No operation spans two executions, so no operation spans two shards.

use std::num::NonZeroU32;

use serde::{Deserialize, Serialize};

use crate::ids::ExecutionId;

/// The name of the shard function ([`ShardCount::shard_of`]), written where a shard number must
/// be read back by the same function (a backup set's manifest).
pub const SHARD_HASH: &str = "fnv1a64-fmix64";

/// The most shards a cluster may have.
pub const SHARDS_MAX: u32 = 1024;

/// One shard of a cluster: `0..count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ShardId(pub u32);

impl std::fmt::Display for ShardId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// How many shards a cluster has: 1 to [`SHARDS_MAX`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "u32", into = "u32")]
pub struct ShardCount(NonZeroU32);

/// A shard count outside 1 to [`SHARDS_MAX`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a cluster has 1 to {SHARDS_MAX} shards, not {0}")]
pub struct InvalidShardCount(pub u32);

impl ShardCount {
    /// One shard: the whole store in one Raft group.
    pub const ONE: ShardCount = ShardCount(NonZeroU32::MIN);

    /// `count` shards, when it is 1 to [`SHARDS_MAX`].
    pub fn new(count: u32) -> Result<Self, InvalidShardCount> {
        NonZeroU32::new(count)
            .filter(|n| n.get() <= SHARDS_MAX)
            .map(ShardCount)
            .ok_or(InvalidShardCount(count))
    }

    /// The count.
    pub fn get(self) -> u32 {
        self.0.get()
    }

    /// The shard that holds `execution`.
    pub fn shard_of(self, execution: &ExecutionId) -> ShardId {
        let hash = fmix64(fnv1a64(execution.as_str().as_bytes()));
        // The remainder is below the count, a u32.
        ShardId((hash % u64::from(self.get())) as u32)
    }
}

impl TryFrom<u32> for ShardCount {
    type Error = InvalidShardCount;

    fn try_from(count: u32) -> Result<Self, Self::Error> {
        ShardCount::new(count)
    }
}

impl From<ShardCount> for u32 {
    fn from(count: ShardCount) -> u32 {
        count.get()
    }
}

/// FNV-1a, 64-bit.
fn fnv1a64(bytes: &[u8]) -> u64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes.iter().fold(OFFSET_BASIS, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(PRIME)
    })
}

/// MurmurHash3's 64-bit finalizer: every input bit flips each output bit with probability ½.
fn fmix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exec(id: &str) -> ExecutionId {
        ExecutionId::new(id).unwrap()
    }

    #[test]
    fn the_hash_is_fixed_by_known_vectors() {
        // FNV-1a's published vectors.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
        // fmix64 of zero is zero; of one, the finalizer's known value.
        assert_eq!(fmix64(0), 0);
        assert_eq!(fmix64(1), 0xb456_bcfc_34c2_cb2c);
        // Hashes and shards of fixed ids (computed apart from this code): a cluster made by any
        // release finds its executions where they were put.
        let cases = [
            ("wf-1", 0x9e3c_1c32_f9ea_24d3, 8, 3),
            ("wf-2", 0xcd47_0669_2153_6d3b, 8, 3),
            ("wf-3", 0x6748_6171_4771_fed6, 8, 6),
            ("order-7f3a", 0x8510_a69f_9605_6f75, 12, 5),
            ("a", 0x82a2_a958_a9be_ce5b, 1024, 603),
        ];
        for (id, hash, count, shard) in cases {
            assert_eq!(fmix64(fnv1a64(id.as_bytes())), hash, "{id}");
            let count = ShardCount::new(count).unwrap();
            assert_eq!(
                count.shard_of(&exec(id)),
                ShardId(shard),
                "{id} over {count:?}"
            );
        }
        assert_eq!(ShardCount::ONE.shard_of(&exec("anything")), ShardId(0));
    }

    #[test]
    fn ids_that_differ_in_any_byte_spread_evenly() {
        let count = ShardCount::new(8).unwrap();
        // Sequential suffixes, and prefixes that differ only in bits the low three miss.
        let families: [Box<dyn Fn(u32) -> String>; 2] = [
            Box::new(|i| format!("wf-{i}")),
            Box::new(|i| format!("{i:08}-0")),
        ];
        for family in families {
            let mut counts = [0u32; 8];
            for i in 0..80_000 {
                counts[count.shard_of(&exec(&family(i))).0 as usize] += 1;
            }
            for n in counts {
                assert!((9_500..=10_500).contains(&n), "{counts:?}");
            }
        }
    }

    #[test]
    fn counts_outside_the_range_are_refused_and_serde_checks_them() {
        assert_eq!(ShardCount::new(0), Err(InvalidShardCount(0)));
        assert_eq!(
            ShardCount::new(SHARDS_MAX + 1),
            Err(InvalidShardCount(SHARDS_MAX + 1))
        );
        assert_eq!(ShardCount::new(SHARDS_MAX).unwrap().get(), SHARDS_MAX);
        assert_eq!(
            serde_json::to_string(&ShardCount::new(8).unwrap()).unwrap(),
            "8"
        );
        assert!(serde_json::from_str::<ShardCount>("0").is_err());
        assert!(serde_json::from_str::<ShardCount>("2000").is_err());
        assert_eq!(
            serde_json::from_str::<ShardCount>("3").unwrap(),
            ShardCount::new(3).unwrap()
        );
    }
}
