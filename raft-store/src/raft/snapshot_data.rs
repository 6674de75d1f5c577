//! Where a Raft snapshot's bytes live while it is built, sent, received and installed: in memory
//! (the simulations and the library's tests) or in a file of the node's snapshot directory
//! (production), so that a node's memory does not grow with its state.
//!
//! openraft reads a snapshot and writes a received one through tokio's async I/O traits. The
//! file variant does plain blocking reads and writes inside them, as every engine call on a Tokio
//! worker already does: a call moves at most one chunk (`snapshot_max_chunk_size`), and no
//! thread or blocking task is involved, so nothing here depends on a scheduler.

use std::fs::File;
use std::io::{self, Cursor, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncSeek, AsyncWrite, ReadBuf};

/// A snapshot's bytes: openraft's `SnapshotData` for chainstore.
#[derive(Debug)]
pub enum SnapshotData {
    /// Held in memory.
    Memory(Cursor<Vec<u8>>),
    /// In a file of the node's snapshot directory.
    File(SnapshotFile),
}

impl SnapshotData {
    /// An empty in-memory snapshot.
    pub fn memory(bytes: Vec<u8>) -> Self {
        Self::Memory(Cursor::new(bytes))
    }

    /// The whole content, from the start (tests and tools; a file is read whole).
    pub fn to_vec(&mut self) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        self.seek(SeekFrom::Start(0))?;
        self.read_to_end(&mut out)?;
        Ok(out)
    }
}

/// An open snapshot file and its path.
#[derive(Debug)]
pub struct SnapshotFile {
    file: File,
    path: PathBuf,
    /// The result of the last `start_seek`, handed out by `poll_complete`.
    seek: Option<io::Result<u64>>,
}

impl SnapshotFile {
    fn new(file: File, path: PathBuf) -> Self {
        Self {
            file,
            path,
            seek: None,
        }
    }

    /// Where the file is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Read for SnapshotData {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Self::Memory(cursor) => cursor.read(buf),
            Self::File(file) => file.file.read(buf),
        }
    }
}

impl Write for SnapshotData {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Self::Memory(cursor) => cursor.write(buf),
            Self::File(file) => file.file.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Self::Memory(cursor) => cursor.flush(),
            Self::File(file) => file.file.flush(),
        }
    }
}

impl Seek for SnapshotData {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        match self {
            Self::Memory(cursor) => cursor.seek(pos),
            Self::File(file) => file.file.seek(pos),
        }
    }
}

impl AsyncRead for SnapshotData {
    fn poll_read(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let n = this.read(buf.initialize_unfilled())?;
        buf.advance(n);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for SnapshotData {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Poll::Ready(self.get_mut().write(buf))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.get_mut().flush())
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.get_mut().flush())
    }
}

impl AsyncSeek for SnapshotData {
    fn start_seek(self: Pin<&mut Self>, position: SeekFrom) -> io::Result<()> {
        let this = self.get_mut();
        match this {
            Self::Memory(cursor) => Pin::new(cursor).start_seek(position),
            Self::File(file) => {
                file.seek = Some(file.file.seek(position));
                Ok(())
            }
        }
    }

    fn poll_complete(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<u64>> {
        let this = self.get_mut();
        match this {
            Self::Memory(cursor) => Pin::new(cursor).poll_complete(cx),
            Self::File(file) => Poll::Ready(match file.seek.take() {
                Some(result) => result,
                None => file.file.stream_position(),
            }),
        }
    }
}

/// The directory a node keeps its snapshot files in. Nothing in it outlives the process that
/// wrote it: opening clears it (after a restart openraft builds a new snapshot when it needs
/// one), so a file half-written before a crash is never sent.
#[derive(Debug)]
pub struct SnapshotDir {
    path: PathBuf,
    next: AtomicU64,
}

impl SnapshotDir {
    /// Creates `path` if needed and removes every file in it.
    pub fn open(path: impl Into<PathBuf>) -> io::Result<Self> {
        let path = path.into();
        match std::fs::remove_dir_all(&path) {
            Ok(()) => {}
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(err) => return Err(err),
        }
        std::fs::create_dir_all(&path)?;
        Ok(Self {
            path,
            next: AtomicU64::new(0),
        })
    }

    /// A new, empty file named after `what` (`built`, `received`).
    pub(crate) fn create(&self, what: &str) -> io::Result<SnapshotFile> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let path = self.path.join(format!("{what}-{n}.snap"));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)?;
        Ok(SnapshotFile::new(file, path))
    }

    /// Opens the file at `path` (one this directory created) for reading from the start.
    pub(crate) fn reopen(path: &Path) -> io::Result<SnapshotFile> {
        Ok(SnapshotFile::new(File::open(path)?, path.to_path_buf()))
    }
}
