//! `warpline demo` from Python: the sample tiles, served on loopback by
//! warpline-testkit's tile server for as long as the run lasts, and the
//! demo pipeline the binary ships (the binary's own `prepare`), so the
//! two never differ. And the sample tiles alone, as files, for a
//! pipeline of your own.

use std::path::PathBuf;

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;

use crate::load::{pipeline_error, run_error};
use crate::run::NativeRun;
use crate::runtime::runtime;

/// Prepares the demo in `dir` (tiles served, `dir/tiles.txt`, outputs to
/// `dir/output`) and starts it.
pub(crate) fn start_demo(
    py: Python<'_>,
    dir: PathBuf,
    sets: Vec<(String, String)>,
) -> PyResult<NativeRun> {
    let rt = runtime()?;
    let prepared = py.detach(|| rt.block_on(warpline_cli::demo::prepare(&dir, &sets)));
    match prepared {
        Ok(demo) => NativeRun::start(demo.pipeline, demo.server),
        Err(warpline_cli::demo::DemoError::Config(e)) => Err(pipeline_error(py, &e)),
        Err(e) => Err(run_error(py, format!("cannot prepare the demo: {e}"))),
    }
}

/// Writes `per_crs` sample tiles of `size` pixels in each sample CRS to
/// `dir`; their paths.
pub(crate) fn sample_tiles(
    py: Python<'_>,
    dir: PathBuf,
    per_crs: usize,
    size: usize,
) -> PyResult<Vec<PathBuf>> {
    py.detach(|| {
        let tiles = warpline::stages::samples::sample_tiles(per_crs, size)
            .map_err(|e| PyOSError::new_err(e.to_string()))?;
        std::fs::create_dir_all(&dir)
            .map_err(|e| PyOSError::new_err(format!("cannot create {}: {e}", dir.display())))?;
        tiles
            .into_iter()
            .map(|t| {
                let path = dir.join(&t.name);
                std::fs::write(&path, &t.bytes).map_err(|e| {
                    PyOSError::new_err(format!("cannot write {}: {e}", path.display()))
                })?;
                Ok(path)
            })
            .collect()
    })
}
