//! Plain Python values to and from JSON, the one form settings, overrides
//! and pipelines given as dicts take on their way to the engine (which
//! reads TOML): `None` is left out (TOML has no null), paths are text.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::{Map, Value};

/// A Python value as JSON: `bool`, `int`, `float`, `str`, `os.PathLike`,
/// lists and tuples, dicts with `str` keys. `None` is `Value::Null`, which
/// [`to_toml`] leaves out.
pub(crate) fn to_json(value: &Bound<'_, PyAny>) -> PyResult<Value> {
    if value.is_none() {
        return Ok(Value::Null);
    }
    // `bool` before `int`: in Python a bool is an int.
    if let Ok(b) = value.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if value.is_instance_of::<PyInt>() {
        if let Ok(i) = value.extract::<i64>() {
            return Ok(Value::from(i));
        }
        return Ok(Value::from(value.extract::<u64>()?));
    }
    if let Ok(f) = value.cast::<PyFloat>() {
        return Ok(Value::from(f.value()));
    }
    if let Ok(s) = value.cast::<PyString>() {
        return Ok(Value::String(s.to_cow()?.into_owned()));
    }
    if let Ok(d) = value.cast::<PyDict>() {
        let mut map = Map::new();
        for (k, v) in d.iter() {
            let key = k.cast::<PyString>().map_err(|_| {
                PyTypeError::new_err(format!("keys must be str, got {}", type_name(&k)))
            })?;
            map.insert(key.to_cow()?.into_owned(), to_json(&v)?);
        }
        return Ok(Value::Object(map));
    }
    if value.is_instance_of::<PyList>() || value.is_instance_of::<PyTuple>() {
        let items: PyResult<Vec<Value>> = value.try_iter()?.map(|v| to_json(&v?)).collect();
        return Ok(Value::Array(items?));
    }
    if let Ok(path) = fspath(value) {
        return Ok(Value::String(path));
    }
    Err(PyTypeError::new_err(format!(
        "cannot use a {} in a pipeline: use str, int, float, bool, list or dict",
        type_name(value)
    )))
}

/// `os.fspath(value)` as text, for `str` and `os.PathLike`.
pub(crate) fn fspath(value: &Bound<'_, PyAny>) -> PyResult<String> {
    let os = value.py().import("os")?;
    os.call_method1("fspath", (value,))?.extract::<String>()
}

/// The name of `value`'s type, for messages.
pub(crate) fn type_name(value: &Bound<'_, PyAny>) -> String {
    value
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "value".to_owned())
}

/// JSON as TOML, with every `null` left out (TOML has none).
pub(crate) fn to_toml(value: &Value) -> Option<toml::Value> {
    Some(match value {
        Value::Null => return None,
        Value::Bool(b) => toml::Value::Boolean(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => toml::Value::Integer(i),
            None => toml::Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => toml::Value::String(s.clone()),
        Value::Array(a) => toml::Value::Array(a.iter().filter_map(to_toml).collect()),
        Value::Object(m) => toml::Value::Table(
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), to_toml(v)?)))
                .collect(),
        ),
    })
}

/// JSON as a Python value (`dict`, `list`, `str`, `int`, `float`, `bool`,
/// `None`), for a stage's settings.
pub(crate) fn to_python<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => i.into_pyobject(py)?.into_any(),
            (None, Some(u)) => u.into_pyobject(py)?.into_any(),
            _ => PyFloat::new(py, n.as_f64().unwrap_or(f64::NAN)).into_any(),
        },
        Value::String(s) => PyString::new(py, s).into_any(),
        Value::Array(a) => {
            let items: PyResult<Vec<Bound<'py, PyAny>>> =
                a.iter().map(|v| to_python(py, v)).collect();
            PyList::new(py, items?)?.into_any()
        }
        Value::Object(m) => {
            let d = PyDict::new(py);
            for (k, v) in m {
                d.set_item(k, to_python(py, v)?)?;
            }
            d.into_any()
        }
    })
}
