//! `validate` and `plan`: the binary's findings on a pipeline, as JSON the
//! Python side makes objects of. `validate` checks every tier in one pass
//! (the file, how its parts connect, this machine) as `warpline validate`
//! does; `plan` is `warpline plan`'s `Plan`, the same type.

use pyo3::prelude::*;

use crate::load::{load, registry, Spec};
use crate::run::NativeRun;

/// What one validation found, as `warpline validate --format json` says
/// it of one file.
pub(crate) fn validate(py: Python<'_>, spec: &Spec, options: &crate::load::Options) -> String {
    let loader = options.loader(spec).with_environment_checks();
    let loaded = py.detach(|| loader.load(&registry()));
    let json = match loaded {
        Ok(p) => serde_json::json!({
            "valid": true,
            "admission_bound": p.admission_bound(),
            "problems": [],
            "not_checked": [],
        }),
        Err(e) => serde_json::json!({
            "valid": e.problems.is_empty(),
            "admission_bound": null,
            "problems": e.problems,
            "not_checked": e.not_checked,
        }),
    };
    json.to_string()
}

/// The plan as JSON and as text; raises `PipelineError`.
pub(crate) fn plan(
    py: Python<'_>,
    spec: &Spec,
    options: &crate::load::Options,
) -> PyResult<(String, String)> {
    let pipeline = load(py, spec, options)?;
    let runtime = crate::runtime::runtime()?;
    // As `warpline plan` does: the first inputs sized for the estimate.
    let plan = py.detach(|| {
        runtime.block_on(
            warpline_cli::plan::Plan::of(&pipeline)
                .sized(&pipeline, warpline_cli::plan::memory::DEFAULT_SAMPLE),
        )
    });
    let json = serde_json::to_string(&plan).map_err(|e| {
        pyo3::exceptions::PyRuntimeError::new_err(format!("cannot serialise the plan: {e}"))
    })?;
    Ok((json, plan.to_string()))
}

/// Compiles and starts a run; raises `PipelineError`.
pub(crate) fn start(
    py: Python<'_>,
    spec: &Spec,
    options: &crate::load::Options,
) -> PyResult<NativeRun> {
    let pipeline = load(py, spec, options)?;
    NativeRun::start(pipeline, ())
}
