//! The crate's error type.

use std::path::{Path, PathBuf};

/// Everything that can go wrong while hashing a work tree or storing objects.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file system call failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done (`read`, `lstat`, `write`, ...).
        op: &'static str,
        /// The path it was done to.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The repository's index could not be understood.
    #[error("the index {path} cannot be read: {reason}")]
    Index {
        /// The index file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The repository uses something this crate does not read (for example SHA-256 object ids).
    #[error("unsupported repository: {0}")]
    Unsupported(String),
    /// An object in the turn's store is damaged.
    #[error("object {id} in the store is damaged: {reason}")]
    CorruptObject {
        /// The object's id.
        id: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A file kept changing while it was read, three times in a row.
    #[error("{0} kept changing while it was read")]
    Unstable(PathBuf),
    /// A worker thread of the stat walk or of the hashing died.
    #[error("a worker thread died")]
    Worker,
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Maps an `io::Error` to [`Error::Io`] for `path`.
pub(crate) fn io_err<'a>(
    op: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |source| Error::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}
