//! The storage failure every operation can surface.

use std::io;

/// An error from the storage layer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StorageError {
    /// The engine could not read or write (disk error, injected fault, closed database).
    #[error("storage I/O error: {message}")]
    Io {
        /// The I/O error's kind (`Other` when the engine does not say).
        kind: io::ErrorKind,
        /// What failed, with its context.
        message: String,
    },
    /// Bytes read back from the engine do not decode; the store refuses to guess.
    #[error("stored data is corrupted: {0}")]
    Corrupted(String),
}

impl StorageError {
    /// An I/O failure of `kind`.
    pub fn io(kind: io::ErrorKind, message: impl Into<String>) -> Self {
        StorageError::Io {
            kind,
            message: message.into(),
        }
    }

    /// The I/O error `err`, met while doing `context`: its kind kept, both in the message.
    pub fn from_io(err: &io::Error, context: &str) -> Self {
        Self::io(err.kind(), format!("{context}: {err}"))
    }
}
