//! Code that is not the engine's own (a stage's, a source's, an event
//! sink's, a rate backend's) runs guarded: a panic in it comes back as what
//! it said, and the task that called it goes on.

use std::panic::AssertUnwindSafe;

use futures::FutureExt;

/// Runs code that is not the engine's own (a stage's, a source's, an
/// event sink's): a panic in it comes back as what it said, and the worker
/// that called it goes on.
pub(crate) fn guarded<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(AssertUnwindSafe(f)).map_err(|p| panic_text(p.as_ref()))
}

/// [`guarded`] for a future.
pub(crate) async fn guarded_async<T>(f: impl std::future::Future<Output = T>) -> Result<T, String> {
    AssertUnwindSafe(f)
        .catch_unwind()
        .await
        .map_err(|p| panic_text(p.as_ref()))
}

/// What a panic said, if it said it as text.
fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_owned())
}
