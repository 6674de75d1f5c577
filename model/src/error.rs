//! The storage failure every operation can surface.

/// An error from the storage layer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StorageError {
    /// The engine could not read or write (disk error, injected fault, closed database).
    #[error("storage I/O error: {0}")]
    Io(String),
    /// Bytes read back from the engine do not decode; the store refuses to guess.
    #[error("stored data is corrupted: {0}")]
    Corrupted(String),
}
