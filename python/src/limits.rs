//! `warpline.Limits`: limiters shared by every run of the process that
//! names them (`[limits.NAME] shared = true`), as `warpline::Limits` is
//! for a Rust service: one `cpu` or `memory` budget for several pipelines
//! at once.

use std::num::NonZeroU32;
use std::sync::Mutex;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyString;
use warpline::{Limiter, Oversize, RateKey};

/// Limiters shared by the runs given them (`limits=`).
#[pyclass(module = "warpline._warpline", name = "Limits", frozen)]
#[derive(Debug, Default)]
pub(crate) struct Limits {
    inner: Mutex<warpline::Limits>,
}

impl Limits {
    /// The engine's set (its limiters are shared, not copied).
    pub(crate) fn shared(&self) -> warpline::Limits {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, warpline::Limits> {
        // A panic while adding leaves the set as it was: still usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn add(&self, limiter: Limiter) -> PyResult<()> {
        self.lock()
            .add(limiter)
            .map_err(|e| PyValueError::new_err(e.to_string()))
    }
}

/// A positive count of at most `u32::MAX`.
fn positive(what: &str, n: u64) -> PyResult<NonZeroU32> {
    u32::try_from(n)
        .ok()
        .and_then(NonZeroU32::new)
        .ok_or_else(|| PyValueError::new_err(format!("{what} must be 1 or more, got {n}")))
}

#[pymethods]
impl Limits {
    #[new]
    fn new() -> Self {
        Limits::default()
    }

    /// Adds a count limiter of `permits` slots (cores, connections).
    fn count(&self, name: &str, permits: u64) -> PyResult<()> {
        self.add(Limiter::count(name, positive("permits", permits)?))
    }

    /// Adds a byte budget: `budget` in bytes or as text ("512MiB").
    #[pyo3(signature = (name, budget, *, oversize = "fail"))]
    fn bytes(&self, name: &str, budget: &Bound<'_, PyAny>, oversize: &str) -> PyResult<()> {
        let bytes = match budget.cast::<PyString>() {
            Ok(text) => warpline::engine::units::parse_size(&text.to_cow()?)
                .map_err(|e| PyValueError::new_err(e.to_string()))?,
            Err(_) => budget.extract::<u64>()?,
        };
        let oversize = match oversize {
            "fail" => Oversize::Fail,
            "alone" => Oversize::Alone,
            other => {
                return Err(PyValueError::new_err(format!(
                    "oversize is \"fail\" or \"alone\", got {other:?}"
                )))
            }
        };
        self.add(Limiter::bytes(name, bytes, oversize))
    }

    /// Adds a token bucket of `per_second` tokens a second, holding at
    /// most `burst` (one bucket for the run, or one per host), paced 2%
    /// under `per_second` as a pipeline's rate limiter is by default (its
    /// `margin`), and a wider margin after a refusal at its pace.
    #[pyo3(signature = (name, per_second, *, burst = 1, per_host = false))]
    fn rate(&self, name: &str, per_second: f64, burst: u64, per_host: bool) -> PyResult<()> {
        let key = if per_host {
            RateKey::Host
        } else {
            RateKey::All
        };
        let limiter =
            Limiter::rate(name, per_second, positive("burst", burst)?, key).ok_or_else(|| {
                PyValueError::new_err(format!(
                    "per_second must be a positive number, got {per_second}"
                ))
            })?;
        self.add(limiter)
    }

    /// The limiters' names, in acquisition order.
    fn names(&self) -> Vec<String> {
        self.lock().iter().map(|l| l.name().to_owned()).collect()
    }

    /// Slots or bytes in use now, by every run together (0 for a rate).
    fn in_use(&self, name: &str) -> PyResult<u64> {
        self.with(name, Limiter::in_use)
    }

    /// The most slots or bytes held at once since the limiter was made.
    fn peak_in_use(&self, name: &str) -> PyResult<u64> {
        self.with(name, Limiter::peak_in_use)
    }

    /// Slots, bytes, or burst.
    fn capacity(&self, name: &str) -> PyResult<u64> {
        self.with(name, Limiter::capacity)
    }

    fn __len__(&self) -> usize {
        self.lock().len()
    }

    fn __contains__(&self, name: &str) -> bool {
        self.lock().get(name).is_some()
    }

    fn __repr__(&self) -> String {
        let inner = self.lock();
        let parts: Vec<String> = inner
            .iter()
            .map(|l| format!("{} ({}, {})", l.name(), l.kind(), l.capacity()))
            .collect();
        format!("Limits([{}])", parts.join(", "))
    }
}

impl Limits {
    fn with(&self, name: &str, f: impl Fn(&Limiter) -> u64) -> PyResult<u64> {
        self.lock()
            .get(name)
            .map(f)
            .ok_or_else(|| PyValueError::new_err(format!("no limiter named {name:?}")))
    }
}
