//! The production engine: RocksDB, one database per node, with every option spelled out.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rocksdb::{
    BlockBasedOptions, Cache, DBCompressionType, DBRecoveryMode, IngestExternalFileOptions,
    Options, ReadOptions, Snapshot, SstFileWriter, WriteOptions, DB,
};

use super::{
    seal, unseal, Engine, EngineView, KeyValue, PairSource, ScanOrder, StorageError, WriteBatch,
    WriteOp,
};

/// Subdirectory of the database where [`Engine::replace_range`] stages its table file.
const STAGING_DIR: &str = "staging";

/// The RocksDB settings a deployment may tune. Everything else is fixed in
/// [`RocksEngine::open`], where a reader sees each choice and why.
#[derive(Debug, Clone)]
pub struct RocksOptions {
    /// Directory of the database; created when missing.
    pub path: PathBuf,
    /// Size of the shared LRU block cache.
    pub block_cache_bytes: usize,
    /// Size of one memtable before it is flushed.
    pub write_buffer_bytes: usize,
    /// Background flush and compaction threads.
    pub background_jobs: i32,
}

impl RocksOptions {
    /// Defaults sized for a small node (2 cores, a few GiB of memory).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            block_cache_bytes: 256 << 20,
            write_buffer_bytes: 64 << 20,
            background_jobs: 2,
        }
    }
}

/// [`Engine`] over a RocksDB database.
pub struct RocksEngine {
    db: DB,
    path: PathBuf,
    /// The options the database was opened with; a staged table file is written with them.
    options: Options,
    staged: AtomicU64,
}

fn io(err: rocksdb::Error) -> StorageError {
    use rocksdb::ErrorKind as Rocks;
    let kind = match err.kind() {
        Rocks::NotFound => std::io::ErrorKind::NotFound,
        Rocks::TimedOut => std::io::ErrorKind::TimedOut,
        Rocks::Busy | Rocks::TryAgain => std::io::ErrorKind::WouldBlock,
        Rocks::Aborted => std::io::ErrorKind::Interrupted,
        Rocks::InvalidArgument => std::io::ErrorKind::InvalidInput,
        Rocks::NotSupported => std::io::ErrorKind::Unsupported,
        _ => std::io::ErrorKind::Other,
    };
    StorageError::io(kind, err.into_string())
}

impl RocksEngine {
    /// Opens (or creates) the database at `options.path`.
    pub fn open(options: &RocksOptions) -> Result<Self, StorageError> {
        let mut opts = Options::default();
        opts.create_if_missing(true);
        // Fail loudly on any checksum mismatch rather than serve damaged data.
        opts.set_paranoid_checks(true);
        // After a crash, recover the write-ahead log up to the last intact record: the database
        // reflects a prefix of the batches written, never a torn batch and never a hole.
        opts.set_wal_recovery_mode(DBRecoveryMode::PointInTime);
        // fdatasync is enough for the WAL and cheaper than fsync.
        opts.set_use_fsync(false);
        // Smooth background writeback so a flush does not stall foreground syncs.
        opts.set_bytes_per_sync(1 << 20);
        opts.set_write_buffer_size(options.write_buffer_bytes);
        opts.set_max_write_buffer_number(4);
        opts.set_max_background_jobs(options.background_jobs);
        opts.set_level_compaction_dynamic_level_bytes(true);
        // LZ4: cheap on CPU, and event payloads are JSON, which compresses well.
        opts.set_compression_type(DBCompressionType::Lz4);
        opts.set_max_open_files(1024);
        opts.set_keep_log_file_num(4);

        let mut table = BlockBasedOptions::default();
        table.set_block_cache(&Cache::new_lru_cache(options.block_cache_bytes));
        table.set_block_size(16 << 10);
        // Point reads (head, watermark, coverage, id index) dominate the write path; a bloom
        // filter lets a miss skip the data block.
        table.set_bloom_filter(10.0, false);
        table.set_cache_index_and_filter_blocks(true);
        table.set_format_version(5);
        opts.set_block_based_table_factory(&table);

        let db = DB::open(&opts, &options.path).map_err(io)?;
        // A staged table file left by a crash was never ingested: nothing refers to it.
        let staging = options.path.join(STAGING_DIR);
        match std::fs::remove_dir_all(&staging) {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => {
                return Err(StorageError::from_io(
                    &err,
                    &format!("clearing {staging:?}"),
                ))
            }
        }
        Ok(Self {
            db,
            path: options.path.clone(),
            options: opts,
            staged: AtomicU64::new(0),
        })
    }

    /// Writes the range tombstone and the pairs into one table file under the staging
    /// directory. A table's range tombstone does not delete the point keys of the same file,
    /// and an ingested file is newer than everything in the database: ingesting it replaces the
    /// range in one step, made durable by RocksDB (file and manifest synced) before it returns.
    fn stage_table(
        &self,
        file: &Path,
        start: &[u8],
        end: &[u8],
        pairs: &mut PairSource<'_>,
    ) -> Result<(), StorageError> {
        let mut writer = SstFileWriter::create(&self.options);
        writer.open(file).map_err(io)?;
        writer.delete_range(start, end).map_err(io)?;
        for pair in pairs {
            let (key, value) = pair?;
            let sealed = seal(&key, value);
            writer.put(&key, sealed).map_err(io)?;
        }
        writer.finish().map_err(io)
    }

    /// The database directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn write_with(&self, batch: WriteBatch, sync: bool) -> Result<(), StorageError> {
        let mut rocks_batch = rocksdb::WriteBatch::default();
        for op in batch.into_ops() {
            match op {
                WriteOp::Put { key, value } => {
                    let sealed = seal(&key, value);
                    rocks_batch.put(key, sealed)
                }
                WriteOp::Delete { key } => rocks_batch.delete(key),
                WriteOp::DeleteRange { start, end } => rocks_batch.delete_range(start, end),
            }
        }
        let mut write_opts = WriteOptions::default();
        write_opts.set_sync(sync);
        write_opts.disable_wal(false);
        self.db.write_opt(rocks_batch, &write_opts).map_err(io)
    }
}

impl Engine for RocksEngine {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        self.db
            .get(key)
            .map_err(io)?
            .map(|stored| unseal(key, stored))
            .transpose()
    }

    fn scan(
        &self,
        start: &[u8],
        end: &[u8],
        order: ScanOrder,
        limit: usize,
    ) -> Result<Vec<KeyValue>, StorageError> {
        // An iterator reads from an implicit snapshot taken when it is created, so the whole scan
        // is one point-in-time view.
        scan_with(
            &self.db,
            ReadOptions::default(),
            start,
            end,
            order,
            limit,
            usize::MAX,
        )
    }

    fn write(&self, batch: WriteBatch) -> Result<(), StorageError> {
        self.write_with(batch, false)
    }

    fn sync(&self) -> Result<(), StorageError> {
        self.db.flush_wal(true).map_err(io)
    }

    fn write_durable(&self, batch: WriteBatch) -> Result<(), StorageError> {
        self.write_with(batch, true)
    }

    fn replace_range(
        &self,
        start: &[u8],
        end: &[u8],
        pairs: &mut dyn Iterator<Item = Result<KeyValue, StorageError>>,
    ) -> Result<(), StorageError> {
        let staging = self.path.join(STAGING_DIR);
        std::fs::create_dir_all(&staging)
            .map_err(|e| StorageError::from_io(&e, &format!("creating {staging:?}")))?;
        let file = staging.join(format!(
            "replace-{}.sst",
            self.staged.fetch_add(1, Ordering::Relaxed)
        ));
        let mut source = PairSource::new(pairs);
        let result = self
            .stage_table(&file, start, end, &mut source)
            .and_then(|()| {
                let mut ingest = IngestExternalFileOptions::default();
                // The staged file becomes part of the database (a link, not a copy).
                ingest.set_move_files(true);
                self.db
                    .ingest_external_file_opts(&ingest, vec![&file])
                    .map_err(io)
            });
        // Gone after a move; after a failure, never ingested.
        let _ = std::fs::remove_file(&file);
        result
    }

    fn view(&self) -> Box<dyn EngineView + '_> {
        Box::new(RocksView {
            db: &self.db,
            snapshot: self.db.snapshot(),
        })
    }
}

/// A RocksDB snapshot: it pins the versions it sees (memtables and files stay until it drops),
/// so a view is for one read, not to be kept.
struct RocksView<'a> {
    db: &'a DB,
    snapshot: Snapshot<'a>,
}

impl RocksView<'_> {
    /// Reads as of the view's snapshot.
    fn read_opts(&self) -> ReadOptions {
        let mut read_opts = ReadOptions::default();
        read_opts.set_snapshot(&self.snapshot);
        read_opts
    }
}

impl EngineView for RocksView<'_> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        self.snapshot
            .get(key)
            .map_err(io)?
            .map(|stored| unseal(key, stored))
            .transpose()
    }

    fn scan(
        &self,
        start: &[u8],
        end: &[u8],
        order: ScanOrder,
        limit: usize,
    ) -> Result<Vec<KeyValue>, StorageError> {
        scan_with(
            self.db,
            self.read_opts(),
            start,
            end,
            order,
            limit,
            usize::MAX,
        )
    }

    fn scan_bounded(
        &self,
        start: &[u8],
        end: &[u8],
        limit: usize,
        bytes_max: usize,
    ) -> Result<Vec<KeyValue>, StorageError> {
        scan_with(
            self.db,
            self.read_opts(),
            start,
            end,
            ScanOrder::Forward,
            limit,
            bytes_max,
        )
    }
}

fn scan_with(
    db: &DB,
    mut read_opts: ReadOptions,
    start: &[u8],
    end: &[u8],
    order: ScanOrder,
    limit: usize,
    bytes_max: usize,
) -> Result<Vec<KeyValue>, StorageError> {
    if start >= end || limit == 0 {
        return Ok(Vec::new());
    }
    read_opts.set_iterate_lower_bound(start.to_vec());
    read_opts.set_iterate_upper_bound(end.to_vec());
    let mut iter = db.raw_iterator_opt(read_opts);
    match order {
        ScanOrder::Forward => iter.seek_to_first(),
        ScanOrder::Reverse => iter.seek_to_last(),
    }
    let mut out = Vec::new();
    let mut bytes = 0usize;
    while iter.valid() && out.len() < limit && bytes < bytes_max {
        if let (Some(key), Some(value)) = (iter.key(), iter.value()) {
            let value = unseal(key, value.to_vec())?;
            bytes = bytes.saturating_add(key.len() + value.len());
            out.push((key.to_vec(), value));
        }
        match order {
            ScanOrder::Forward => iter.next(),
            ScanOrder::Reverse => iter.prev(),
        }
    }
    iter.status().map_err(io)?;
    Ok(out)
}
