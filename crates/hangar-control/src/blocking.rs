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
