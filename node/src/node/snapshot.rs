//! Snapshots received from the leader chunk by chunk: one at a time, each chunk continuing the
//! one before, the last one installing the whole.

use openraft::errors::Fatal;
use openraft::raft::SnapshotResponse;
use raft_store::raft::{Snapshot, SnapshotData, TypeConfig};
use raft_store::wire::snapshot::SnapshotChunk;

use super::Node;

/// A snapshot being received from the leader, chunk by chunk.
pub(super) struct Receiving {
    vote: raft_store::raft::Vote,
    meta: raft_store::raft::SnapshotMeta,
    data: SnapshotData,
    /// Where the next chunk starts.
    next: u64,
}

impl Receiving {
    /// Removes the file of a transfer that will not be installed.
    fn discard(self) {
        if let SnapshotData::File(file) = &self.data {
            let _ = std::fs::remove_file(file.path());
        }
    }
}

impl Node {
    /// Takes one chunk of a snapshot the leader sends: the first one (offset 0) begins a new
    /// file, every other one must continue the snapshot being received where it stopped, and
    /// the last one installs it. `Ok(None)` for a chunk stored; `Err` for a chunk out of place
    /// (the leader starts over).
    pub async fn receive_snapshot(
        &self,
        chunk: SnapshotChunk,
        data: &[u8],
    ) -> Result<Result<Option<SnapshotResponse<TypeConfig>>, Fatal<TypeConfig>>, String> {
        use std::io::{Seek, SeekFrom, Write};
        let mut receiving = self.receiving.lock().await;
        if chunk.offset == 0 {
            if let Some(previous) = receiving.take() {
                previous.discard();
            }
            let data = self
                .state_machine
                .begin_receiving_snapshot()
                .map_err(|e| format!("cannot receive a snapshot: {e}"))?;
            *receiving = Some(Receiving {
                vote: chunk.vote,
                meta: chunk.meta.clone(),
                data,
                next: 0,
            });
        }
        let Some(current) = receiving.as_mut() else {
            return Err(format!(
                "a snapshot chunk at offset {} with no snapshot being received",
                chunk.offset
            ));
        };
        if current.vote != chunk.vote || current.meta != chunk.meta || current.next != chunk.offset
        {
            return Err(format!(
                "a snapshot chunk at offset {} does not continue the snapshot being received \
                 (next offset {})",
                chunk.offset, current.next
            ));
        }
        let written = current
            .data
            .write_all(data)
            .and_then(|()| current.data.flush());
        if let Err(err) = written {
            if let Some(failed) = receiving.take() {
                failed.discard();
            }
            return Err(format!("cannot store a snapshot chunk: {err}"));
        }
        current.next += data.len() as u64;
        if !chunk.done {
            return Ok(Ok(None));
        }
        let Some(mut whole) = receiving.take() else {
            return Err("the snapshot went away".into());
        };
        if let Err(err) = whole.data.seek(SeekFrom::Start(0)) {
            whole.discard();
            return Err(format!("cannot read the received snapshot: {err}"));
        }
        let snapshot = Snapshot {
            meta: whole.meta,
            snapshot: whole.data,
        };
        Ok(self
            .raft
            .install_full_snapshot(whole.vote, snapshot)
            .await
            .map(Some))
    }
}
