//! `warpline.Raster`: the raster a stage written in Python works on, with
//! its georeferencing, its bands read as numpy arrays (GDAL converts to
//! the dtype asked for) and new rasters made from arrays, through the
//! same typed calls a Rust stage uses (`Raster::read_band`,
//! `Raster::with_bands`). The raster is lent to Python for the length of
//! the stage's call; a view kept after it says the raster is gone.

use std::sync::{Arc, Mutex};

use numpy::{PyArray1, PyArrayMethods, PyReadonlyArray2, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::{PyIndexError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};
use warpline::stages::gdal::{DataType, Pixel, Raster};

/// GDAL's geotransform as Python gets it: a tuple of six floats.
type GeoTransform = (f64, f64, f64, f64, f64, f64);

/// A raster lent to Python, taken back after the call.
pub(crate) type Cell = Arc<Mutex<Option<Raster>>>;

/// The raster of one item, as a stage written in Python sees it.
#[pyclass(module = "warpline._warpline", name = "Raster", frozen)]
pub(crate) struct RasterView {
    pub(crate) cell: Cell,
    id: String,
    source: String,
}

fn lock(cell: &Cell) -> std::sync::MutexGuard<'_, Option<Raster>> {
    // Each use takes the raster whole or leaves it: a panic in GDAL's code
    // (caught by the engine) leaves nothing half done.
    cell.lock().unwrap_or_else(|p| p.into_inner())
}

const GONE: &str = "this raster was lent to a stage's call that has returned; keep the \
                    arrays you need, not the raster";

/// Applies `f` to the raster, with the GIL released (GDAL's work).
fn with_raster<T: Send>(
    py: Python<'_>,
    cell: &Cell,
    f: impl FnOnce(&Raster) -> Result<T, String> + Send,
) -> PyResult<T> {
    py.detach(|| match lock(cell).as_ref() {
        Some(r) => f(r).map_err(Some),
        None => Err(None),
    })
    .map_err(|e| match e {
        Some(message) => PyRuntimeError::new_err(message),
        None => PyRuntimeError::new_err(GONE),
    })
}

/// numpy's name for a GDAL type warpline reads (`Int8`, as GDAL 3.7 has
/// it, reads as `int16`; complex types need a `dtype=`).
fn numpy_name(t: DataType) -> Option<&'static str> {
    Some(match t {
        DataType::Byte => "uint8",
        DataType::Int8 | DataType::Int16 => "int16",
        DataType::UInt16 => "uint16",
        DataType::UInt32 => "uint32",
        DataType::Int32 => "int32",
        DataType::UInt64 => "uint64",
        DataType::Int64 => "int64",
        DataType::Float32 => "float32",
        DataType::Float64 => "float64",
        _ => return None,
    })
}

/// Calls `$f::<T>(args)` for the numpy dtype named `$name`.
macro_rules! by_dtype {
    ($name:expr, $f:ident ( $($arg:expr),* )) => {
        match $name {
            "uint8" => $f::<u8>($($arg),*),
            "uint16" => $f::<u16>($($arg),*),
            "int16" => $f::<i16>($($arg),*),
            "uint32" => $f::<u32>($($arg),*),
            "int32" => $f::<i32>($($arg),*),
            "uint64" => $f::<u64>($($arg),*),
            "int64" => $f::<i64>($($arg),*),
            "float32" => $f::<f32>($($arg),*),
            "float64" => $f::<f64>($($arg),*),
            other => Err(PyTypeError::new_err(format!(
                "bands of dtype {other} cannot be raster bands: use uint8, int16, uint16, \
                 int32, uint32, int64, uint64, float32 or float64"
            ))),
        }
    };
}

/// The canonical numpy name of a dtype-like (`"float32"`, `np.float32`,
/// `np.dtype("f4")`).
fn dtype_name(value: &Bound<'_, PyAny>) -> PyResult<String> {
    let np = value.py().import("numpy")?;
    np.call_method1("dtype", (value,))?
        .getattr("name")?
        .extract()
}

fn read_as<'py, T: Pixel + numpy::Element>(
    py: Python<'py>,
    cell: &Cell,
    band: usize,
) -> PyResult<Bound<'py, PyAny>> {
    let (data, (w, h)) = with_raster(py, cell, |r| {
        Ok((r.read_band::<T>(band).map_err(|e| e.to_string())?, r.size()))
    })?;
    Ok(PyArray1::from_vec(py, data).reshape([h, w])?.into_any())
}

/// The pixels of `arrays` (each `h` x `w`, of `T`), row by row.
fn pixels<T: Pixel + numpy::Element>(
    arrays: &[Bound<'_, PyAny>],
    (w, h): (usize, usize),
) -> PyResult<Vec<Vec<T>>> {
    arrays
        .iter()
        .map(|a| {
            let a: PyReadonlyArray2<'_, T> = a.extract()?;
            if a.shape() != [h, w] {
                return Err(PyValueError::new_err(format!(
                    "a band is {:?}; this raster's bands are (height, width) = ({h}, {w})",
                    a.shape()
                )));
            }
            Ok(match a.as_slice() {
                Ok(s) => s.to_vec(),
                Err(_) => a.as_array().iter().copied().collect(),
            })
        })
        .collect()
}

fn make<T: Pixel + numpy::Element>(
    py: Python<'_>,
    cell: &Cell,
    arrays: &[Bound<'_, PyAny>],
    nodata: Option<f64>,
) -> PyResult<Raster> {
    let size = with_raster(py, cell, |r| Ok(r.size()))?;
    let bands = pixels::<T>(arrays, size)?;
    with_raster(py, cell, move |like| {
        Raster::with_bands(like, bands, nodata).map_err(|e| e.to_string())
    })
}

/// The bands given to `with_bands`: a 2-D array, a 3-D array (band,
/// row, column), or a list or tuple of 2-D arrays; all of one dtype.
fn band_arrays<'py>(bands: &Bound<'py, PyAny>) -> PyResult<(Vec<Bound<'py, PyAny>>, String)> {
    let np = bands.py().import("numpy")?;
    let list: Vec<Bound<'py, PyAny>> =
        if bands.is_instance_of::<PyList>() || bands.is_instance_of::<PyTuple>() {
            bands
                .try_iter()?
                .map(|b| np.call_method1("asarray", (b?,)))
                .collect::<PyResult<_>>()?
        } else {
            let a = np.call_method1("asarray", (bands,))?;
            match a.cast::<PyUntypedArray>()?.ndim() {
                2 => vec![a],
                3 => a.try_iter()?.collect::<PyResult<_>>()?,
                n => {
                    return Err(PyValueError::new_err(format!(
                        "give bands as a 2-D array, a 3-D array (band, row, column) or a list \
                         of 2-D arrays; got a {n}-D array"
                    )))
                }
            }
        };
    let Some(first) = list.first() else {
        return Err(PyValueError::new_err("give one band or more"));
    };
    let name = dtype_name(&first.getattr("dtype")?)?;
    for b in &list {
        let other = dtype_name(&b.getattr("dtype")?)?;
        if other != name {
            return Err(PyTypeError::new_err(format!(
                "every band must have one dtype; got {name} and {other} (cast with .astype)"
            )));
        }
    }
    Ok((list, name))
}

impl RasterView {
    pub(crate) fn new(raster: Raster, id: &str, source: &str) -> Self {
        RasterView {
            cell: Arc::new(Mutex::new(Some(raster))),
            id: id.to_owned(),
            source: source.to_owned(),
        }
    }

    /// Takes the raster back from Python.
    pub(crate) fn take(&self) -> Option<Raster> {
        lock(&self.cell).take()
    }

    /// What a stage's function returned, if not `None` or a `Raster`:
    /// arrays, made a raster as `with_bands(arrays)` makes it.
    pub(crate) fn with_bands_of(
        &self,
        py: Python<'_>,
        returned: &Bound<'_, PyAny>,
    ) -> PyResult<RasterView> {
        let np = py.import("numpy")?;
        let arrays = returned.is_instance(&np.getattr("ndarray")?)?
            || returned.is_instance_of::<PyList>()
            || returned.is_instance_of::<PyTuple>();
        if !arrays {
            return Err(PyTypeError::new_err(format!(
                "a stage returns None (the raster as it was), a Raster (from with_bands) or \
                 arrays; got {}",
                crate::convert::type_name(returned)
            )));
        }
        self.with_bands(py, returned, None)
    }

    fn band_index(&self, py: Python<'_>, band: usize) -> PyResult<usize> {
        let count = with_raster(py, &self.cell, |r| Ok(r.band_count()))?;
        if band == 0 || band > count {
            return Err(PyIndexError::new_err(format!(
                "band {band} of {count}: bands are counted from 1"
            )));
        }
        Ok(band)
    }
}

#[pymethods]
impl RasterView {
    /// The item's id.
    #[getter]
    fn id(&self) -> &str {
        &self.id
    }

    /// The item's source (URL or path).
    #[getter]
    fn source(&self) -> &str {
        &self.source
    }

    /// Width in pixels.
    #[getter]
    fn width(&self, py: Python<'_>) -> PyResult<usize> {
        with_raster(py, &self.cell, |r| Ok(r.size().0))
    }

    /// Height in pixels.
    #[getter]
    fn height(&self, py: Python<'_>) -> PyResult<usize> {
        with_raster(py, &self.cell, |r| Ok(r.size().1))
    }

    /// The number of bands.
    #[getter]
    fn count(&self, py: Python<'_>) -> PyResult<usize> {
        with_raster(py, &self.cell, |r| Ok(r.band_count()))
    }

    /// The CRS as WKT ("" when the raster has none).
    #[getter]
    fn crs_wkt(&self, py: Python<'_>) -> PyResult<String> {
        with_raster(py, &self.cell, |r| Ok(r.crs_wkt()))
    }

    /// GDAL's affine geotransform, or `None`.
    #[getter]
    fn geo_transform(&self, py: Python<'_>) -> PyResult<Option<GeoTransform>> {
        with_raster(py, &self.cell, |r| {
            Ok(r.geo_transform()
                .map(|g| (g[0], g[1], g[2], g[3], g[4], g[5])))
        })
    }

    /// Each band's nodata value (`None` where it has none).
    #[getter]
    fn nodata(&self, py: Python<'_>) -> PyResult<Vec<Option<f64>>> {
        with_raster(py, &self.cell, |r| Ok(r.nodata_values()))
    }

    /// Each band's numpy dtype name as `read` gives it (`None` for a
    /// type that needs `dtype=`).
    #[getter]
    fn dtypes(&self, py: Python<'_>) -> PyResult<Vec<Option<String>>> {
        with_raster(py, &self.cell, |r| {
            (1..=r.band_count())
                .map(|b| {
                    let t = r.data_type(b).map_err(|e| e.to_string())?;
                    Ok(numpy_name(t).map(str::to_owned))
                })
                .collect()
        })
    }

    /// Band `band` (from 1) as a (height, width) array of its own dtype,
    /// or of `dtype` (GDAL converts).
    #[pyo3(signature = (band, dtype = None))]
    fn read<'py>(
        &self,
        py: Python<'py>,
        band: usize,
        dtype: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let band = self.band_index(py, band)?;
        let name = match dtype {
            Some(d) => dtype_name(d)?,
            None => {
                let t = with_raster(py, &self.cell, |r| {
                    r.data_type(band).map_err(|e| e.to_string())
                })?;
                numpy_name(t)
                    .ok_or_else(|| {
                        PyTypeError::new_err(format!("band {band} is {t}: read it with dtype="))
                    })?
                    .to_owned()
            }
        };
        by_dtype!(name.as_str(), read_as(py, &self.cell, band))
    }

    /// A new raster of this one's size, geotransform and CRS whose bands
    /// are `bands` (a 2-D array, a 3-D array or a list of 2-D arrays, all
    /// of one dtype), each with nodata `nodata`. Return it from the stage
    /// to hand it on.
    #[pyo3(signature = (bands, nodata = None))]
    fn with_bands(
        &self,
        py: Python<'_>,
        bands: &Bound<'_, PyAny>,
        nodata: Option<f64>,
    ) -> PyResult<RasterView> {
        let (arrays, name) = band_arrays(bands)?;
        let raster = by_dtype!(name.as_str(), make(py, &self.cell, &arrays, nodata))?;
        Ok(RasterView::new(raster, &self.id, &self.source))
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        match with_raster(py, &self.cell, |r| Ok((r.size(), r.band_count()))) {
            Ok(((w, h), n)) => format!("<warpline.Raster {} {w}x{h}, {n} bands>", self.id),
            Err(_) => format!("<warpline.Raster {} (returned)>", self.id),
        }
    }
}
