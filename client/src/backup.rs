//! [`Client::save_backup`]: a cluster's backup saved to disk, whole or not at all — one file for
//! a cluster of one shard, a backup set for a cluster of several (one file per shard, each taken
//! on its shard's leader, and `manifest.json` naming them with their sizes and SHA-256, written
//! last). `chainstore-node --restore-from` takes either.

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};

use chainstore_model::{BackupManifest, ShardBackup, MANIFEST_FILE};
use tokio::io::AsyncWrite;

use crate::{Client, ClientError};

/// What [`Client::save_backup`] saved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SavedBackup {
    /// One backup file (a cluster of one shard).
    File {
        /// Its length.
        bytes: u64,
        /// The last log index it includes.
        last_log_index: u64,
    },
    /// A backup set: the manifest written in the set's directory.
    Set(BackupManifest),
}

impl Client {
    /// Saves a consistent backup of the cluster at `path`: a file when the cluster has one
    /// shard, a directory holding a backup set when it has several (`path` must then not exist,
    /// or be an empty directory). Every file is written to `<name>.partial` as it arrives and
    /// renamed once whole and synced, and a set's manifest is written after all of its files,
    /// so a failure leaves no file that passes for a backup.
    pub async fn save_backup(&self, path: &Path) -> Result<SavedBackup, ClientError> {
        let shards = self.shards().await;
        if shards.get() == 1 {
            let (bytes, last_log_index, _) = save_file(self, None, path).await?;
            return Ok(SavedBackup::File {
                bytes,
                last_log_index,
            });
        }
        let cannot = |e: std::io::Error| write_error(path, e);
        match tokio::fs::read_dir(path).await {
            Ok(mut entries) => {
                if entries.next_entry().await.map_err(cannot)?.is_some() {
                    return Err(ClientError::Write(format!(
                        "{} is not empty: a backup set needs a directory of its own",
                        path.display()
                    )));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                tokio::fs::create_dir_all(path).await.map_err(cannot)?
            }
            Err(e) => return Err(cannot(e)),
        }
        let mut files = Vec::with_capacity(shards.get() as usize);
        for shard in 0..shards.get() {
            let file = BackupManifest::file_name(shard);
            let (bytes, last_log_index, sha256) =
                save_file(self, Some(shard), &path.join(&file)).await?;
            files.push(ShardBackup {
                shard,
                file,
                bytes,
                sha256,
                last_log_index,
            });
        }
        let manifest = BackupManifest::new(shards, files)
            .map_err(|e| ClientError::Protocol(format!("the set's manifest: {e}")))?;
        let text = serde_json::to_vec_pretty(&manifest)
            .map_err(|e| ClientError::Protocol(format!("the set's manifest: {e}")))?;
        let manifest_path = path.join(MANIFEST_FILE);
        let partial = partial_of(&manifest_path);
        let write = async {
            tokio::fs::write(&partial, &text).await?;
            tokio::fs::File::open(&partial).await?.sync_all().await?;
            tokio::fs::rename(&partial, &manifest_path).await?;
            sync_directory(path).await
        };
        write.await.map_err(|e| write_error(&manifest_path, e))?;
        Ok(SavedBackup::Set(manifest))
    }
}

/// Saves the backup of `shard` (`None`: a cluster of one shard) to `path` through
/// `<path>.partial`; returns its length, last log index and SHA-256 (hex).
async fn save_file(
    client: &Client,
    shard: Option<u32>,
    path: &Path,
) -> Result<(u64, u64, String), ClientError> {
    let partial = partial_of(path);
    let cannot = |e: std::io::Error| write_error(path, e);
    let file = tokio::fs::File::create(&partial).await.map_err(cannot)?;
    let mut out = Hashing {
        inner: file,
        digest: ring::digest::Context::new(&ring::digest::SHA256),
        bytes: 0,
    };
    let last_log_index = match client.shard_snapshot_to(shard, &mut out).await {
        Ok(index) => index,
        Err(err) => {
            let _ = tokio::fs::remove_file(&partial).await;
            return Err(err);
        }
    };
    out.inner.sync_all().await.map_err(cannot)?;
    let sha256 = hex(out.digest.finish().as_ref());
    drop(out.inner);
    tokio::fs::rename(&partial, path).await.map_err(cannot)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        sync_directory(dir).await.map_err(cannot)?;
    }
    Ok((out.bytes, last_log_index, sha256))
}

/// A writer that hashes what it passes on.
struct Hashing<W> {
    inner: W,
    digest: ring::digest::Context,
    bytes: u64,
}

impl<W: AsyncWrite + Unpin> AsyncWrite for Hashing<W> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = written {
            this.digest.update(&buf[..n]);
            this.bytes += n as u64;
        }
        written
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

fn partial_of(path: &Path) -> PathBuf {
    let mut partial = path.as_os_str().to_owned();
    partial.push(".partial");
    PathBuf::from(partial)
}

/// Makes the renames in `dir` durable.
async fn sync_directory(dir: &Path) -> std::io::Result<()> {
    tokio::fs::File::open(dir).await?.sync_all().await
}

fn write_error(path: &Path, e: std::io::Error) -> ClientError {
    ClientError::Write(format!("cannot write {}: {e}", path.display()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
