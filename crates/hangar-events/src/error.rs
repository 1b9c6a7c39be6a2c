//! The crate's error type. Parsing never fails (bad lines become `warning` events); only file
//! I/O does.

use std::path::PathBuf;

/// What can go wrong reading a run log or digesting a file.
#[derive(Debug, thiserror::Error)]
pub enum CoreError {
    /// Opening, seeking or reading a file failed.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The saved cursor is past the end of the run log: the log was truncated or replaced, so
    /// resuming from the cursor would lose or repeat events.
    #[error("{path}: cursor {cursor} is past the end of the log ({len} bytes); was it replaced?")]
    CursorPastEnd {
        path: PathBuf,
        cursor: u64,
        len: u64,
    },
    /// The log is read as sealed and the reader was given no seal key.
    #[error("{path}: the run log is sealed and no seal key was given to read it")]
    NoSealKey { path: PathBuf },
}

impl CoreError {
    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> CoreError {
        CoreError::Io {
            path: path.to_owned(),
            source,
        }
    }
}
