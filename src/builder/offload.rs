//! The bridge from the build's async code to the blocking pool: reading a
//! spill file, sorting a bucket, training and assigning never run on a tokio
//! worker.

use super::error::BuildError;

/// Run `f` on tokio's blocking pool and await its result (a panic in `f`
/// is [`BuildError::Internal`]).
pub(super) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, BuildError> + Send + 'static,
) -> Result<T, BuildError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| BuildError::Internal(format!("worker task failed: {e}")))?
}
