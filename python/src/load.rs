//! A pipeline as Python gives it (a path, TOML text or a dict, with
//! `set=` overrides, shared `Limits` and `WARPLINE__` variables when
//! asked) compiled by the engine's one compile step, with the stages
//! written in Python registered beside warpline's own. Every problem comes
//! back at once, as a `warpline.PipelineError`.

use std::path::PathBuf;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use serde_json::Value;
use warpline::{ConfigErrors, Loader, Pipeline, Registry};

use crate::convert::{fspath, to_json, to_toml, type_name};

/// Where the pipeline's text comes from.
#[derive(Debug, Clone)]
pub(crate) enum Spec {
    /// A file.
    Path(PathBuf),
    /// TOML text (given as a string, or written from a dict).
    Text(String),
}

impl Spec {
    /// `str` with a newline: TOML text; other `str` and `os.PathLike`: a
    /// file; `dict`: the tables a file would hold.
    pub(crate) fn from_python(value: &Bound<'_, PyAny>) -> PyResult<Spec> {
        if let Ok(s) = value.cast::<PyString>() {
            let s = s.to_cow()?.into_owned();
            return Ok(if s.contains('\n') {
                Spec::Text(s)
            } else {
                Spec::Path(PathBuf::from(s))
            });
        }
        if value.is_instance_of::<PyDict>() {
            let json = without_nulls(to_json(value)?);
            // serde_json keeps the dict's order (limits are acquired in
            // the order they are declared).
            let text = toml::to_string(&json).map_err(|e| {
                PyTypeError::new_err(format!("the dict cannot be a pipeline file: {e}"))
            })?;
            return Ok(Spec::Text(text));
        }
        match fspath(value) {
            Ok(p) => Ok(Spec::Path(PathBuf::from(p))),
            Err(_) => Err(PyTypeError::new_err(format!(
                "a pipeline is a path (str or pathlib.Path), TOML text or a dict; got {}",
                type_name(value)
            ))),
        }
    }
}

/// `value` with every `null` left out, at any depth.
fn without_nulls(value: Value) -> Value {
    match value {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, without_nulls(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(without_nulls).collect()),
        other => other,
    }
}

/// What a call says besides the pipeline.
#[derive(Debug, Clone, Default)]
pub(crate) struct Options {
    /// `set=`: key paths and values, as `--set KEY=VALUE`.
    pub(crate) sets: Vec<(String, String)>,
    /// `limits=`: limiters shared with other runs of the process.
    pub(crate) limits: Option<warpline::Limits>,
    /// `env=True`: `WARPLINE__...` variables apply, as for the binary.
    pub(crate) env: bool,
}

impl Options {
    /// Reads `set=` (a dict of key path to value: a `str` is taken as the
    /// command line takes it, anything else as its TOML value).
    pub(crate) fn new(
        sets: Option<&Bound<'_, PyDict>>,
        limits: Option<warpline::Limits>,
        env: bool,
    ) -> PyResult<Self> {
        let mut out = Vec::new();
        for (k, v) in sets.into_iter().flat_map(|d| d.iter()) {
            let key: String = k.extract()?;
            let text = match v.cast::<PyString>() {
                Ok(s) => s.to_cow()?.into_owned(),
                Err(_) => match to_toml(&to_json(&v)?) {
                    Some(t) => t.to_string(),
                    None => continue,
                },
            };
            out.push((key, text));
        }
        Ok(Options {
            sets: out,
            limits,
            env,
        })
    }

    /// The engine's loader for `spec` with these options.
    pub(crate) fn loader(&self, spec: &Spec) -> Loader {
        let mut loader = match spec {
            Spec::Path(p) => Loader::from_path(p),
            Spec::Text(t) => Loader::from_toml_str(t),
        };
        if self.env {
            loader = loader.with_env();
        }
        if let Some(l) = &self.limits {
            loader = loader.with_limits(l);
        }
        for (k, v) in &self.sets {
            loader = loader.set(k.clone(), v.clone());
        }
        loader
    }
}

/// Every kind warpline ships, and the stages registered in Python.
pub(crate) fn registry() -> Registry {
    let mut r = warpline::registry();
    crate::stage::register_all(&mut r);
    r
}

/// Compiles `spec`, or raises `PipelineError` with every problem.
pub(crate) fn load(py: Python<'_>, spec: &Spec, options: &Options) -> PyResult<Pipeline> {
    let loader = options.loader(spec);
    py.detach(|| loader.load(&registry()))
        .map_err(|e| pipeline_error(py, &e))
}

/// `warpline.PipelineError` for `errors`: its text, and each problem
/// with its key path and tier.
pub(crate) fn pipeline_error(py: Python<'_>, errors: &ConfigErrors) -> PyErr {
    let detail = serde_json::json!({
        "origin": errors.origin,
        "problems": errors.problems,
        "not_checked": errors.not_checked,
    });
    let made = py
        .import("warpline._errors")
        .and_then(|m| m.getattr("PipelineError"))
        .and_then(|cls| cls.call_method1("_from_json", (errors.to_string(), detail.to_string())));
    match made {
        Ok(exc) => PyErr::from_value(exc),
        Err(e) => e,
    }
}

/// `warpline.RunError` with `message`.
pub(crate) fn run_error(py: Python<'_>, message: String) -> PyErr {
    let made = py
        .import("warpline._errors")
        .and_then(|m| m.getattr("RunError"))
        .and_then(|cls| cls.call1((message,)));
    match made {
        Ok(exc) => PyErr::from_value(exc),
        Err(e) => e,
    }
}
