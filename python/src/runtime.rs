//! The one tokio runtime the module runs every pipeline on, started on
//! first use, and the bridge from its futures to asyncio: a future of the
//! runtime resolves an asyncio future through the loop's
//! `call_soon_threadsafe`, so the event loop never waits on the engine.

use std::future::Future;
use std::sync::OnceLock;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::IntoPyObjectExt;

/// The runtime, started once per process (threads as cores, as the
/// `warpline` binary's). Blocking stages run on threads of their own, never
/// on it.
pub(crate) fn runtime() -> PyResult<&'static tokio::runtime::Runtime> {
    static RUNTIME: OnceLock<Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .thread_name("warpline-rt")
                .build()
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| PyRuntimeError::new_err(format!("cannot start the async runtime: {e}")))
}

/// Runs `fut` on the runtime and returns an asyncio future of
/// `event_loop` that gets its value (or a `RuntimeError` with its
/// message) through `warpline._aio.resolve`, called on the loop's thread.
/// Cancelling the asyncio future does not cancel `fut`: the caller says
/// what cancelling means (a run is aborted by the Python side).
pub(crate) fn bridge<F, T>(event_loop: &Bound<'_, PyAny>, fut: F) -> PyResult<Py<PyAny>>
where
    F: Future<Output = Result<T, String>> + Send + 'static,
    T: for<'py> IntoPyObject<'py> + Send + 'static,
{
    let py = event_loop.py();
    let future = event_loop.call_method0("create_future")?;
    let resolve = py.import("warpline._aio")?.getattr("resolve")?.unbind();
    let (target, loop_) = (future.clone().unbind(), event_loop.clone().unbind());
    runtime()?.spawn(async move {
        let out = fut.await;
        // The interpreter may be shutting down: then nobody waits.
        let _ = Python::try_attach(|py| -> PyResult<()> {
            let (ok, value) = match out {
                Ok(v) => (true, v.into_py_any(py)?),
                Err(message) => (false, message.into_py_any(py)?),
            };
            // A closed loop raises: nobody is left to resolve for.
            let _ = loop_
                .bind(py)
                .call_method1("call_soon_threadsafe", (resolve, target, ok, value));
            Ok(())
        });
    });
    Ok(future.unbind())
}
