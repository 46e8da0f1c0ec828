//! # warpline for Python
//!
//! The extension module `warpline._warpline`: the engine, the stages and
//! the registry of the `warpline` crate, reached from Python. The Python
//! package `warpline` (beside this crate, in `warpline/`) is the API users
//! call; this module is what it calls, kept small and plain: values in,
//! JSON out, so the report and the plan have one form (the binary's) and
//! their Python objects never drift from it.
//!
//! Where things live:
//!
//! - `runtime`: the one tokio runtime every run of the process shares,
//!   and the bridge from its futures to asyncio futures;
//! - `convert`: Python values as JSON and TOML, and back;
//! - `load`: a pipeline given as a path, TOML text or a dict, with its
//!   overrides and shared limits, compiled (every problem at once, as a
//!   `PipelineError`);
//! - `limits`: `Limits` shared by the runs of the process;
//! - `check`: `validate` and `plan` (the binary's own `Plan`);
//! - `run`: a run in the background (progress, events, stop, abort, the
//!   report), every wait with the GIL released;
//! - `stage` and `raster`: stages written in Python over numpy
//!   arrays, on the engine's blocking workers;
//! - `demo`: the binary's demo, and the sample tiles.

#![warn(missing_debug_implementations, unreachable_pub)]
#![forbid(unsafe_code)]

mod check;
mod convert;
mod demo;
mod limits;
mod load;
mod raster;
mod run;
mod runtime;
mod stage;

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::PyDict;

use load::{Options, Spec};

/// The options every entry point takes: `set=`, `limits=`, `env=`.
fn options(
    sets: Option<&Bound<'_, PyDict>>,
    limits: Option<&Bound<'_, limits::Limits>>,
    env: bool,
) -> PyResult<Options> {
    Options::new(sets, limits.map(|l| l.get().shared()), env)
}

/// Compiles `pipeline` and starts it in the background.
#[pyfunction]
#[pyo3(signature = (pipeline, *, set = None, limits = None, env = false))]
fn start(
    py: Python<'_>,
    pipeline: &Bound<'_, PyAny>,
    set: Option<&Bound<'_, PyDict>>,
    limits: Option<&Bound<'_, limits::Limits>>,
    env: bool,
) -> PyResult<run::NativeRun> {
    check::start(
        py,
        &Spec::from_python(pipeline)?,
        &options(set, limits, env)?,
    )
}

/// Every problem of `pipeline`, every tier, as JSON.
#[pyfunction]
#[pyo3(signature = (pipeline, *, set = None, limits = None, env = false))]
fn validate(
    py: Python<'_>,
    pipeline: &Bound<'_, PyAny>,
    set: Option<&Bound<'_, PyDict>>,
    limits: Option<&Bound<'_, limits::Limits>>,
    env: bool,
) -> PyResult<String> {
    let spec = Spec::from_python(pipeline)?;
    Ok(check::validate(py, &spec, &options(set, limits, env)?))
}

/// The pipeline as it will run, as JSON and as text.
#[pyfunction]
#[pyo3(signature = (pipeline, *, set = None, limits = None, env = false))]
fn plan(
    py: Python<'_>,
    pipeline: &Bound<'_, PyAny>,
    set: Option<&Bound<'_, PyDict>>,
    limits: Option<&Bound<'_, limits::Limits>>,
    env: bool,
) -> PyResult<(String, String)> {
    check::plan(
        py,
        &Spec::from_python(pipeline)?,
        &options(set, limits, env)?,
    )
}

/// Starts the binary's demo in `dir`.
#[pyfunction]
#[pyo3(signature = (dir, *, set = None))]
fn start_demo(
    py: Python<'_>,
    dir: PathBuf,
    set: Option<&Bound<'_, PyDict>>,
) -> PyResult<run::NativeRun> {
    let sets = Options::new(set, None, false)?.sets;
    demo::start_demo(py, dir, sets)
}

/// Writes sample tiles to `dir`; their paths.
#[pyfunction]
#[pyo3(signature = (dir, *, per_crs = 2, size = 256))]
fn sample_tiles(
    py: Python<'_>,
    dir: PathBuf,
    per_crs: usize,
    size: usize,
) -> PyResult<Vec<PathBuf>> {
    demo::sample_tiles(py, dir, per_crs, size)
}

/// The GDAL and PROJ this module runs, and which loop warps and why.
#[pyfunction]
fn versions() -> (String, String, String) {
    warpline::install_accelerator();
    let v = warpline::stages::gdal::versions();
    (
        v.gdal.to_string(),
        v.proj.to_string(),
        warpline::warp_path().to_string(),
    )
}

#[pymodule]
fn _warpline(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(start, m)?)?;
    m.add_function(wrap_pyfunction!(validate, m)?)?;
    m.add_function(wrap_pyfunction!(plan, m)?)?;
    m.add_function(wrap_pyfunction!(start_demo, m)?)?;
    m.add_function(wrap_pyfunction!(sample_tiles, m)?)?;
    m.add_function(wrap_pyfunction!(versions, m)?)?;
    m.add_function(wrap_pyfunction!(stage::register_stage, m)?)?;
    m.add_function(wrap_pyfunction!(stage::unregister_stage, m)?)?;
    m.add_function(wrap_pyfunction!(stage::stage_kinds, m)?)?;
    m.add_class::<limits::Limits>()?;
    m.add_class::<run::NativeRun>()?;
    m.add_class::<run::EventStream>()?;
    m.add_class::<raster::RasterView>()?;
    m.add_class::<stage::ItemView>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
