//! Blocking work off the async threads.

use crate::error::ControlError;

/// Runs blocking file work off the async threads.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ControlError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ControlError::Internal(format!("a blocking task failed: {e}")))
}

/// Runs short blocking file work that a person waits on (a command landing in a run's `in/`:
/// a lock, a small write and a rename) on this thread, the runtime moving its other tasks to
/// another worker meanwhile (`block_in_place`). Handed to the blocking pool instead, the work
/// waited for a pool thread to be woken and scheduled: under `scripts/load` (200 live runs on
/// 2 CPUs) that wake-up was up to 15 ms of an answer's p99. A runtime of one thread (tests)
/// has no other worker to move tasks to, and uses the pool.
pub(crate) async fn blocking_here<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ControlError> {
    match tokio::runtime::Handle::current().runtime_flavor() {
        tokio::runtime::RuntimeFlavor::MultiThread => Ok(tokio::task::block_in_place(f)),
        _ => blocking(f).await,
    }
}
