//! Seeding a new node's empty storage from a backup (`--restore-from`): one backup file (a
//! cluster of one shard), or a backup set's directory (a cluster of several: one file per shard
//! and the manifest, [`BackupManifest`]).
//!
//! A set is restored as the cluster it came from, shard for shard: the node computes the new
//! cluster's layout from its voters and the set's shard count (the deployment bootstrap's
//! placement, so every node computes the same one), restores each shard it holds a replica of
//! into that group's keyspace with the group's voters, and stores the layout last. Before it
//! changes anything it checks the whole set: the manifest, and every file's size and SHA-256.
//! A crash midway is finished by the next start: a marker naming the set (`y/restoring`, the
//! manifest's SHA-256) is stored before the first shard and removed with the layout's storing,
//! and a group already restored under it is left as it is. A node that already holds data, or an
//! unfinished restore of another set, is never overwritten.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use chainstore_model::{BackupManifest, ShardCount, ShardId, MANIFEST_FILE};
use raft_store::engine::{GroupEngine, ScanOrder, WriteBatch};
use raft_store::raft::{restore_backup_from, BackupError, NodeId};
use raft_store::Engine;

use crate::host::{deployment_layout, read_layout, stage_layout};

/// Where an unfinished restore of a set names the set, in the node's own keyspace.
const RESTORING_KEY: &[u8] = b"y/restoring";
/// The largest manifest read (a set of the most shards takes a few hundred KiB).
const MANIFEST_BYTES_MAX: u64 = 4 << 20;

/// What a restore did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Restored {
    /// One backup file was restored; the cluster resumes after this log index.
    File { last_log_index: u64 },
    /// A set was restored: the shard count, and each group restored here with the log index it
    /// resumes after.
    Set {
        shards: u32,
        groups: Vec<(u32, u64)>,
    },
    /// The node already holds data (a restart of a restored node, or a node in use): nothing
    /// was changed.
    AlreadyHolds,
}

/// Restores the backup file or set at `path` into the empty storage `engine` of node `id`, as
/// a member of the new cluster of `voters`. `shards`, when given (`--bootstrap-shards`), must be
/// the backup's shard count.
pub async fn restore(
    engine: Arc<dyn Engine>,
    id: NodeId,
    voters: &BTreeMap<NodeId, String>,
    path: &Path,
    shards: Option<ShardCount>,
) -> Result<Restored, String> {
    match set_directory(path) {
        Some(dir) => restore_set(engine, id, voters, &dir, shards).await,
        None => restore_file(engine, id, voters, path, shards).await,
    }
}

/// Restores one backup file (of a cluster of one shard).
async fn restore_file(
    engine: Arc<dyn Engine>,
    id: NodeId,
    voters: &BTreeMap<NodeId, String>,
    path: &Path,
    shards: Option<ShardCount>,
) -> Result<Restored, String> {
    if shards.is_some_and(|s| s != ShardCount::ONE) {
        return Err(format!(
            "{} is one backup file, of a cluster of one shard; a cluster of several is \
             restored from a backup set's directory",
            path.display()
        ));
    }
    if let Some(set) = path.parent().filter(|d| d.join(MANIFEST_FILE).is_file()) {
        return Err(format!(
            "{} is one shard's file of the backup set in {}: restore the set (its \
             directory), not one of its files",
            path.display(),
            set.display()
        ));
    }
    let mut file = std::fs::File::open(path)
        .map_err(|e| format!("cannot read the backup {}: {e}", path.display()))?;
    match restore_backup_from(engine, id, voters, &mut file).await {
        Ok(log_id) => Ok(Restored::File {
            last_log_index: log_id.index,
        }),
        Err(BackupError::NotEmpty) => Ok(Restored::AlreadyHolds),
        Err(err) => Err(format!("cannot restore {}: {err}", path.display())),
    }
}

/// Restores the backup set in `dir` (see the module's documentation).
async fn restore_set(
    engine: Arc<dyn Engine>,
    id: NodeId,
    voters: &BTreeMap<NodeId, String>,
    dir: &Path,
    shards: Option<ShardCount>,
) -> Result<Restored, String> {
    let (manifest, digest) = read_manifest(dir)?;
    if let Some(asked) = shards.filter(|s| *s != manifest.shards) {
        return Err(format!(
            "the backup set has {} shards, --bootstrap-shards asks for {}",
            manifest.shards.get(),
            asked.get()
        ));
    }
    let layout = deployment_layout(voters, manifest.shards).map_err(|e| {
        format!(
            "no layout of {} shards fits the voters: {e}",
            manifest.shards.get()
        )
    })?;
    if !begin_set(&*engine, dir, &manifest, &digest, &layout)? {
        return Ok(Restored::AlreadyHolds);
    }
    let mut groups = Vec::new();
    for shard in layout.placement().held_by(id) {
        let file = &manifest.files[shard.0 as usize];
        let path = dir.join(&file.file);
        let mut source = std::fs::File::open(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let group = Arc::new(GroupEngine::new(Arc::clone(&engine), shard.0));
        let voters = layout.voters(ShardId(shard.0));
        match restore_backup_from(group, id, &voters, &mut source).await {
            Ok(log_id) if log_id.index == file.last_log_index => {
                groups.push((shard.0, log_id.index));
            }
            Ok(log_id) => {
                return Err(format!(
                    "{} holds shard {} up to index {}, the manifest says {}",
                    path.display(),
                    shard.0,
                    log_id.index,
                    file.last_log_index
                ))
            }
            // Restored by a start that stopped before it finished the set.
            Err(BackupError::NotEmpty) => groups.push((shard.0, file.last_log_index)),
            Err(err) => return Err(format!("cannot restore {}: {err}", path.display())),
        }
    }
    let mut done = WriteBatch::new();
    stage_layout(&mut done, &layout).map_err(|e| storage(&e))?;
    done.delete(RESTORING_KEY);
    engine.write_durable(done).map_err(|e| storage(&e))?;
    Ok(Restored::Set {
        shards: manifest.shards.get(),
        groups,
    })
}

fn storage(e: &dyn std::fmt::Display) -> String {
    format!("cannot restore the backup set: {e}")
}

/// Decides whether the set (`digest` names it) is to be restored into `engine`, and marks it
/// so when it is: `false` when the node already holds its result (the layout it makes) or data
/// of its own, an error when it holds another cluster's layout or another set's unfinished
/// restore, or when a file of the set is not the one the manifest names.
fn begin_set(
    engine: &dyn Engine,
    dir: &Path,
    manifest: &BackupManifest,
    digest: &str,
    layout: &chainstore_model::Layout,
) -> Result<bool, String> {
    match read_layout(engine).map_err(|e| storage(&e))? {
        Some(stored) if stored == *layout => return Ok(false),
        Some(_) => {
            return Err(format!(
                "this node belongs to a cluster with another layout; {} is not restored",
                dir.display()
            ))
        }
        None => {}
    }
    let marker = engine.get(RESTORING_KEY).map_err(|e| storage(&e))?;
    match &marker {
        Some(marker) if marker == digest.as_bytes() => {}
        Some(_) => {
            return Err(format!(
                "this node holds an unfinished restore of another backup set; {} is not \
                 restored (start it with an empty data directory)",
                dir.display()
            ))
        }
        None => {
            let any = engine
                .scan(b"", &[0xff], ScanOrder::Forward, 1)
                .map_err(|e| storage(&e))?;
            if !any.is_empty() {
                return Ok(false);
            }
        }
    }
    for file in &manifest.files {
        check_file(dir, file)?;
    }
    if marker.is_none() {
        let mut begun = WriteBatch::new();
        begun.put(RESTORING_KEY, digest.as_bytes().to_vec());
        engine.write_durable(begun).map_err(|e| storage(&e))?;
    }
    Ok(true)
}

/// The backup set `path` names (its directory, or its manifest), or `None` for one file.
fn set_directory(path: &Path) -> Option<PathBuf> {
    if path.is_dir() {
        return Some(path.to_path_buf());
    }
    (path.file_name()? == MANIFEST_FILE).then(|| path.parent().map(Path::to_path_buf))?
}

/// The set's manifest, checked, and its SHA-256 (which names the set in the restore marker).
fn read_manifest(dir: &Path) -> Result<(BackupManifest, String), String> {
    let path = dir.join(MANIFEST_FILE);
    let cannot = |e: std::io::Error| {
        format!(
            "cannot read {} (a backup set's directory holds one; without it the set is \
             unfinished): {e}",
            path.display()
        )
    };
    let mut bytes = Vec::new();
    std::fs::File::open(&path)
        .map_err(cannot)?
        .take(MANIFEST_BYTES_MAX + 1)
        .read_to_end(&mut bytes)
        .map_err(cannot)?;
    if bytes.len() as u64 > MANIFEST_BYTES_MAX {
        return Err(format!(
            "{} is larger than any manifest ({MANIFEST_BYTES_MAX} bytes)",
            path.display()
        ));
    }
    let manifest =
        BackupManifest::from_json(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok((
        manifest,
        hex(ring::digest::digest(&ring::digest::SHA256, &bytes).as_ref()),
    ))
}

/// Checks that one shard's file is the one the manifest names: its size and its SHA-256.
fn check_file(dir: &Path, file: &chainstore_model::ShardBackup) -> Result<(), String> {
    let path = dir.join(&file.file);
    let cannot = |e: std::io::Error| format!("cannot read {}: {e}", path.display());
    let mut source = std::fs::File::open(&path).map_err(cannot)?;
    let mut context = ring::digest::Context::new(&ring::digest::SHA256);
    let mut buffer = vec![0u8; 1 << 20];
    let mut bytes = 0u64;
    loop {
        let n = source.read(&mut buffer).map_err(cannot)?;
        if n == 0 {
            break;
        }
        context.update(&buffer[..n]);
        bytes += n as u64;
    }
    let sha256 = hex(context.finish().as_ref());
    if bytes != file.bytes || sha256 != file.sha256 {
        return Err(format!(
            "{} is not the file the manifest names for shard {} ({bytes} bytes, sha256 \
             {sha256}; the manifest says {} bytes, sha256 {}): the set does not match",
            path.display(),
            file.shard,
            file.bytes,
            file.sha256
        ));
    }
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
