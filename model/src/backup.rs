//! A sharded cluster's backup set: one backup file per shard, in one directory, and the manifest
//! that names them ([`BackupManifest`], `manifest.json`).
//!
//! Each shard's file is that shard's group's backup (the same file format as a single-shard
//! cluster's backup), taken on its leader after a linearizable read barrier. The shards are
//! copied one after another, so the set is not one point in time across shards; no operation
//! spans two executions, hence none spans two shards, and every shard's copy is consistent on
//! its own. The manifest is written last: a directory without one is an unfinished set.
//!
//! Restore reads the manifest and refuses the set before it changes anything when it does not
//! match: another format or shard function, a shard missing or named twice, a file that is not
//! a plain name in the set's directory, or a file whose size or SHA-256 differs from what the
//! manifest says (a file of another set, or of another shard of this one).

use serde::{Deserialize, Serialize};

use crate::shard::{ShardCount, SHARD_HASH};

/// The manifest's file name in a backup set's directory.
pub const MANIFEST_FILE: &str = "manifest.json";

/// The format this build writes and reads.
const FORMAT: &str = "chainstore-backup-set/1";

/// What a backup set holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackupManifest {
    /// `chainstore-backup-set/1`.
    pub format: String,
    /// The cluster's shard count: the restored cluster has as many.
    pub shards: ShardCount,
    /// The shard function the files were split by ([`SHARD_HASH`]).
    pub hash: String,
    /// One file per shard, in shard order.
    pub files: Vec<ShardBackup>,
}

/// One shard's backup file in a set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardBackup {
    /// The shard.
    pub shard: u32,
    /// The file's name in the set's directory.
    pub file: String,
    /// Its length in bytes.
    pub bytes: u64,
    /// Its SHA-256, lowercase hex.
    pub sha256: String,
    /// The last log index of the shard's group the file includes.
    pub last_log_index: u64,
}

/// Why a manifest does not describe a set this build can restore.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a backup set this build restores: {0}")]
pub struct InvalidManifest(pub String);

impl BackupManifest {
    /// The manifest of a set of `files` (one per shard of `shards`, in shard order).
    pub fn new(shards: ShardCount, files: Vec<ShardBackup>) -> Result<Self, InvalidManifest> {
        let manifest = BackupManifest {
            format: FORMAT.into(),
            shards,
            hash: SHARD_HASH.into(),
            files,
        };
        manifest.check()?;
        Ok(manifest)
    }

    /// The name a set gives shard `shard`'s file.
    pub fn file_name(shard: u32) -> String {
        format!("shard-{shard:04}.snap")
    }

    /// Checks what can be checked without the files: the format, the shard function, one file
    /// per shard in shard order, plain file names named once, and well-formed digests.
    pub fn check(&self) -> Result<(), InvalidManifest> {
        let invalid = |why: String| Err(InvalidManifest(why));
        if self.format != FORMAT {
            return invalid(format!("format {:?}, expected {FORMAT:?}", self.format));
        }
        if self.hash != SHARD_HASH {
            return invalid(format!(
                "its shards were split by {:?}; this build splits by {SHARD_HASH:?}",
                self.hash
            ));
        }
        let count = self.shards.get();
        if self.files.len() != count as usize {
            return invalid(format!(
                "{} files for {count} shards: every shard needs one",
                self.files.len()
            ));
        }
        let mut names = std::collections::BTreeSet::new();
        for (expected, file) in (0..count).zip(&self.files) {
            if file.shard != expected {
                return invalid(format!(
                    "file {expected} is shard {}: the files must be shards 0 to {}, in order",
                    file.shard,
                    count - 1
                ));
            }
            if !is_plain_name(&file.file) {
                return invalid(format!(
                    "shard {expected}'s file {:?} is not a plain file name in the set's directory",
                    file.file
                ));
            }
            if !names.insert(file.file.as_str()) {
                return invalid(format!("the file {:?} is named twice", file.file));
            }
            let hex = |c: char| c.is_ascii_digit() || ('a'..='f').contains(&c);
            if file.sha256.len() != 64 || !file.sha256.chars().all(hex) {
                return invalid(format!(
                    "shard {expected}'s sha256 {:?} is not 64 lowercase hex digits",
                    file.sha256
                ));
            }
        }
        Ok(())
    }

    /// Reads and checks a manifest.
    pub fn from_json(bytes: &[u8]) -> Result<Self, InvalidManifest> {
        let manifest: BackupManifest =
            serde_json::from_slice(bytes).map_err(|e| InvalidManifest(e.to_string()))?;
        manifest.check()?;
        Ok(manifest)
    }
}

/// A name that stays in the directory it is read from: no separator, not `.` or `..`, not
/// hidden, not empty, printable ASCII.
fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(shard: u32) -> ShardBackup {
        ShardBackup {
            shard,
            file: BackupManifest::file_name(shard),
            bytes: 10,
            sha256: "ab".repeat(32),
            last_log_index: 7,
        }
    }

    #[test]
    fn a_set_names_each_shard_once_in_order_with_plain_names() {
        let three = ShardCount::new(3).unwrap();
        let good = BackupManifest::new(three, (0..3).map(file).collect()).unwrap();
        let text = serde_json::to_vec(&good).unwrap();
        assert_eq!(BackupManifest::from_json(&text).unwrap(), good);

        let mut bad: Vec<(&str, BackupManifest)> = Vec::new();
        let mut missing = good.clone();
        missing.files.pop();
        bad.push(("a shard missing", missing));
        let mut swapped = good.clone();
        swapped.files.swap(0, 1);
        bad.push(("shards out of order", swapped));
        let mut twice = good.clone();
        twice.files[2].file = twice.files[1].file.clone();
        bad.push(("a file named twice", twice));
        for name in [
            "../shard-0000.snap",
            "/etc/passwd",
            "a/b",
            ".hidden",
            "",
            "..",
        ] {
            let mut escaping = good.clone();
            escaping.files[0].file = name.into();
            bad.push(("a name that is not plain", escaping));
        }
        let mut digest = good.clone();
        digest.files[1].sha256 = "AB".repeat(32);
        bad.push(("an uppercase digest", digest));
        let mut hash = good.clone();
        hash.hash = "crc32".into();
        bad.push(("another shard function", hash));
        let mut format = good.clone();
        format.format = "chainstore-backup-set/2".into();
        bad.push(("another format", format));
        for (what, manifest) in bad {
            assert!(manifest.check().is_err(), "{what} was accepted");
            let text = serde_json::to_vec(&manifest).unwrap();
            assert!(BackupManifest::from_json(&text).is_err(), "{what} was read");
        }
        assert!(BackupManifest::from_json(br#"{"format":"chainstore-backup-set/1"}"#).is_err());
    }
}
