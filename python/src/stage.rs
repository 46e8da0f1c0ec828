//! Stages written in Python: `@warpline.stage(...)` registers a function
//! by kind name; every pipeline loaded afterwards may name it (`kind =
//! "ndvi"`), its other settings passed to the function as keyword
//! arguments. It runs as a `BlockingStage`, on the engine's blocking
//! workers under the stage's limits, and takes the GIL only for the
//! function's call. An exception fails that item with the exception's
//! text, never the run.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use serde_json::{Map, Value};
use warpline::stages::gdal::Raster;
use warpline::stages::payloads::{self, Written};
use warpline::{
    BlockingStage, Handler, Item, Outcome, Payload, Problem, Registry, Settings, Stage, StageError,
};

use crate::raster::RasterView;

/// What a stage takes or hands on, by the name Python gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Raster,
    Written,
    Any,
}

impl Kind {
    fn parse(what: &str, name: &str) -> PyResult<Kind> {
        match name {
            "raster" => Ok(Kind::Raster),
            "written" => Ok(Kind::Written),
            "any" => Ok(Kind::Any),
            other => Err(PyValueError::new_err(format!(
                "{what} is \"raster\", \"written\" or \"any\", got {other:?}"
            ))),
        }
    }

    fn payload(self) -> Payload {
        match self {
            Kind::Raster => payloads::raster(),
            Kind::Written => payloads::written(),
            Kind::Any => Payload::ANY,
        }
    }
}

/// What the stage charges to the byte limiters it lists, per item.
#[derive(Debug)]
enum Memory {
    /// The input's files, every band as float64, and an output as large.
    Estimate,
    /// A fixed number of bytes.
    Bytes(u64),
    /// `f(width, height, bands)`, bytes.
    Call(Py<PyAny>),
}

/// A registered stage kind.
#[derive(Debug)]
struct StageDef {
    kind: String,
    func: Py<PyAny>,
    takes: Kind,
    hands_on: Kind,
    memory: Memory,
}

fn stages() -> &'static Mutex<BTreeMap<String, Arc<StageDef>>> {
    static STAGES: OnceLock<Mutex<BTreeMap<String, Arc<StageDef>>>> = OnceLock::new();
    STAGES.get_or_init(Mutex::default)
}

fn registered() -> std::sync::MutexGuard<'static, BTreeMap<String, Arc<StageDef>>> {
    // Only inserts and removals happen under the lock: a poisoned map is
    // whole.
    stages().lock().unwrap_or_else(|p| p.into_inner())
}

/// Adds every stage registered in Python to `registry`.
pub(crate) fn register_all(registry: &mut Registry) {
    for (kind, def) in registered().iter() {
        let def = Arc::clone(def);
        registry.register_stage(kind, move |s| factory(&def, s));
    }
}

/// Registers `func` as the stage kind `kind` (replacing an earlier one of
/// the name); a kind warpline ships cannot be replaced.
#[pyfunction]
#[pyo3(signature = (kind, func, *, takes = "raster", hands_on = "raster", memory = None))]
pub(crate) fn register_stage(
    kind: &str,
    func: Bound<'_, PyAny>,
    takes: &str,
    hands_on: &str,
    memory: Option<Bound<'_, PyAny>>,
) -> PyResult<()> {
    if warpline::registry().stage_kinds().contains(&kind) {
        return Err(PyValueError::new_err(format!(
            "`{kind}` is a stage kind warpline ships; give yours another name"
        )));
    }
    if !func.is_callable() {
        return Err(PyValueError::new_err("a stage is a function"));
    }
    let (takes, hands_on) = (
        Kind::parse("takes", takes)?,
        Kind::parse("hands_on", hands_on)?,
    );
    if hands_on == Kind::Raster && takes != Kind::Raster {
        return Err(PyValueError::new_err(
            "a stage hands on a raster only when it takes one (takes=\"raster\")",
        ));
    }
    let memory = match memory {
        None => Memory::Estimate,
        Some(m) if m.is_callable() => Memory::Call(m.unbind()),
        Some(m) => Memory::Bytes(m.extract().map_err(|_| {
            PyValueError::new_err(
                "memory= is bytes (an int) or a function of (width, height, bands)",
            )
        })?),
    };
    let def = StageDef {
        kind: kind.to_owned(),
        func: func.unbind(),
        takes,
        hands_on,
        memory,
    };
    registered().insert(kind.to_owned(), Arc::new(def));
    Ok(())
}

/// Forgets the stage kind `kind`; whether it was registered.
#[pyfunction]
pub(crate) fn unregister_stage(kind: &str) -> bool {
    registered().remove(kind).is_some()
}

/// The stage kinds registered in Python, sorted.
#[pyfunction]
pub(crate) fn stage_kinds() -> Vec<String> {
    registered().keys().cloned().collect()
}

/// Builds the stage for one pipeline: its settings are the function's
/// keyword arguments, checked against its signature here, so a misspelt
/// one is a problem when the pipeline compiles.
fn factory(def: &Arc<StageDef>, s: &Settings) -> Result<Handler, Vec<Problem>> {
    let settings: Map<String, Value> = s.parse()?;
    let problems: Vec<Problem> = Python::try_attach(|py| check_settings(py, def, &settings))
        .unwrap_or_else(|| Ok(Vec::new()))
        .unwrap_or_else(|e| vec![(String::new(), e.to_string())])
        .into_iter()
        .map(|(key, message)| match key.as_str() {
            "" => Problem::new(s.path(), message),
            key => s.problem(key, message),
        })
        .collect();
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(Handler::from_blocking(PyStage {
        def: Arc::clone(def),
        settings: Value::Object(settings),
    }))
}

/// `warpline._stage.check_settings(func, settings)`: (key, message) for
/// each setting the function cannot take, and each it needs and lacks.
fn check_settings(
    py: Python<'_>,
    def: &StageDef,
    settings: &Map<String, Value>,
) -> PyResult<Vec<(String, String)>> {
    let kwargs = crate::convert::to_python(py, &Value::Object(settings.clone()))?;
    py.import("warpline._stage")?
        .getattr("check_settings")?
        .call1((def.func.bind(py), kwargs))?
        .extract()
}

/// One pipeline's stage of a registered kind.
struct PyStage {
    def: Arc<StageDef>,
    settings: Value,
}

impl Stage for PyStage {
    fn takes(&self) -> Payload {
        self.def.takes.payload()
    }

    fn hands_on(&self) -> Payload {
        self.def.hands_on.payload()
    }

    /// What the stage says it holds ([`Memory`]); the item's size hint
    /// for a stage that takes no raster.
    fn demand(&self, item: &mut Item) -> Result<u64, StageError> {
        let Some(raster) = item.payload::<Raster>() else {
            return Ok(match self.def.memory {
                Memory::Bytes(n) => n,
                _ => item.size_hint.unwrap_or(0),
            });
        };
        let ((w, h), bands) = (raster.size(), raster.band_count());
        match &self.def.memory {
            Memory::Bytes(n) => Ok(*n),
            Memory::Estimate => Ok(raster.file_bytes() + 2 * (w * h * bands) as u64 * 8),
            Memory::Call(f) => attach(&item.id, |py| {
                f.bind(py).call1((w, h, bands))?.extract::<u64>()
            }),
        }
    }
}

/// Runs `f` with the GIL; a Python exception (or an interpreter shutting
/// down) as the item's permanent error with the exception's text.
fn attach<T>(
    id: &str,
    f: impl for<'py> FnOnce(Python<'py>) -> PyResult<T>,
) -> Result<T, StageError> {
    match Python::try_attach(|py| f(py).map_err(|e| describe(py, &e))) {
        Some(Ok(v)) => Ok(v),
        Some(Err(text)) => Err(StageError::permanent(format!("{id}: {text}"))),
        None => Err(StageError::permanent(format!(
            "{id}: the Python interpreter is shutting down"
        ))),
    }
}

/// `ValueError: text`, as Python prints an exception's last line.
fn describe(py: Python<'_>, e: &PyErr) -> String {
    let name = e
        .get_type(py)
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "Exception".to_owned());
    match e.value(py).str() {
        Ok(text) if !text.to_string().is_empty() => format!("{name}: {text}"),
        _ => name,
    }
}

impl BlockingStage for PyStage {
    fn process(&self, item: &mut Item) -> Result<Outcome, StageError> {
        match self.def.takes {
            Kind::Raster => self.process_raster(item),
            Kind::Written | Kind::Any => {
                let path = item
                    .payload::<Written>()
                    .map(|w| w.path.display().to_string());
                let (id, source) = (item.id.clone(), item.source.clone());
                attach(&item.id, |py| {
                    let view = ItemView { id, source, path };
                    self.call(py, Py::new(py, view)?.into_any().bind(py))?;
                    Ok(())
                })?;
                Ok(Outcome::Continue)
            }
        }
    }
}

impl PyStage {
    /// `func(arg, **settings)`.
    fn call<'py>(&self, py: Python<'py>, arg: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let kwargs = crate::convert::to_python(py, &self.settings)?;
        let kwargs = kwargs.cast::<PyDict>()?;
        self.def.func.bind(py).call((arg,), Some(kwargs))
    }

    /// Lends the raster to the function and hands on what it returns:
    /// `None` (the raster as it was), a `Raster` (from `with_bands`), or
    /// arrays (made a raster as `with_bands(arrays)` would).
    fn process_raster(&self, item: &mut Item) -> Result<Outcome, StageError> {
        let id = item.id.clone();
        let Some(raster) = item.take_payload::<Raster>() else {
            return Err(StageError::permanent(format!(
                "{id}: stage `{}` needs a decoded raster",
                self.def.kind
            )));
        };
        let input = RasterView::new(raster, &item.id, &item.source);
        let cell = std::sync::Arc::clone(&input.cell);
        let out = attach(&id, |py| {
            let input = Py::new(py, input)?;
            let ret = self.call(py, input.bind(py).as_any())?;
            let handed = if ret.is_none() {
                input.get().take()
            } else if let Ok(view) = ret.cast::<RasterView>() {
                view.get().take()
            } else {
                let made = input.get().with_bands_of(py, &ret)?;
                input.get().take();
                made.take()
            };
            Ok(handed)
        });
        // Whatever happened, the input is not Python's any more.
        cell.lock().unwrap_or_else(|p| p.into_inner()).take();
        match out? {
            Some(raster) => {
                item.set_payload(raster);
                Ok(Outcome::Continue)
            }
            None => Err(StageError::permanent(format!(
                "{id}: stage `{}` returned a raster another call had already handed on",
                self.def.kind
            ))),
        }
    }
}

/// An item as a stage that takes no raster sees it.
#[pyclass(module = "warpline._warpline", name = "Item", frozen, get_all)]
pub(crate) struct ItemView {
    /// The item's id.
    id: String,
    /// The item's source (URL or path).
    source: String,
    /// Where `write` put the output, for a stage after it.
    path: Option<String>,
}

#[pymethods]
impl ItemView {
    fn __repr__(&self) -> String {
        format!("<warpline.Item {}>", self.id)
    }
}
