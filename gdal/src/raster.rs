//! [`Raster`]: what travels between the raster stages, and typed access
//! to it for a stage of your own (band reads and writes as typed slices,
//! size, data type, geotransform, CRS, nodata) with warpline's own
//! [`Pixel`] and [`DataType`].

use gdal::{Dataset, Metadata};
use gdal_sys as sys;

use crate::types::{DataType, Pixel};

use super::files::MemDir;
use super::{dtype_size, last_error, reset_error};

/// A band's unit, scale and offset, where set.
#[derive(Debug, Clone, PartialEq)]
pub struct BandScaling {
    /// The unit of its values (`""`: none).
    pub unit: String,
    /// Values are `value * scale + offset`.
    pub scale: Option<f64>,
    /// See `scale`.
    pub offset: Option<f64>,
}

/// What went wrong reading or making a raster: GDAL's message.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct RasterError(String);

/// A raster on its way through the stages: the input as GDAL opened it
/// from its in-memory files (decode), or a MEM dataset GDAL made (the
/// warp's output).
pub struct Raster {
    // Declared first so they are closed before the files under them.
    pub(crate) ds: Dataset,
    /// The dataset `ds` is a view of (an in-memory VRT), if it is one:
    /// held only to be closed after the view.
    pub(crate) _under: Option<Dataset>,
    pub(crate) files: Option<MemDir>,
    /// A mosaic's other inputs, in order (this one is the first).
    pub(crate) others: Vec<Raster>,
    /// The file on disk `ds` is (a warp too large for memory), removed
    /// when the raster is dropped, after `ds` is closed.
    pub(crate) scratch: Option<ScratchFile>,
    /// The remote file `ds` reads by ranges (fetch's `read = "window"`),
    /// registered while the raster lives.
    pub(crate) remote: Option<super::RemoteFile>,
}

/// A file a stage made on disk for one item (the warp's output when it
/// does not fit the memory budget): removed on drop, with the side files
/// GDAL may have written beside it.
#[derive(Debug)]
pub struct ScratchFile(std::path::PathBuf);

impl ScratchFile {
    /// Owns `path` from now on: it is removed on drop.
    pub fn new(path: std::path::PathBuf) -> Self {
        ScratchFile(path)
    }

    pub fn path(&self) -> &std::path::Path {
        &self.0
    }

    /// GDAL's side files of `path` (PAM metadata, a mask, overviews).
    pub fn side_files(path: &std::path::Path) -> Vec<std::path::PathBuf> {
        [".aux.xml", ".msk", ".ovr"]
            .iter()
            .map(|ext| {
                let mut p = path.as_os_str().to_owned();
                p.push(ext);
                std::path::PathBuf::from(p)
            })
            .collect()
    }
}

impl Drop for ScratchFile {
    fn drop(&mut self) {
        if self.0.as_os_str().is_empty() {
            return;
        }
        let _ = std::fs::remove_file(&self.0);
        for side in Self::side_files(&self.0) {
            let _ = std::fs::remove_file(side);
        }
    }
}

impl std::fmt::Debug for Raster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (w, h) = self.ds.raster_size();
        f.debug_struct("Raster")
            .field("width", &w)
            .field("height", &h)
            .field("bands", &self.ds.raster_count())
            .finish()
    }
}

// SAFETY: the datasets are only used by the thread that holds the
// `Raster` (a `Raster` is moved between stages, never shared), and the
// files are plain bytes. `gdal::Dataset` is `Send` for the same reason.
unsafe impl Send for Raster {}

impl Raster {
    /// A dataset GDAL made in memory (no files under it).
    pub fn in_memory(ds: Dataset) -> Self {
        Raster {
            ds,
            _under: None,
            files: None,
            others: Vec::new(),
            scratch: None,
            remote: None,
        }
    }

    /// A dataset GDAL wrote to `file` on disk, removed when the raster is
    /// dropped.
    pub fn on_disk(ds: Dataset, file: ScratchFile) -> Self {
        Raster {
            scratch: Some(file),
            ..Raster::in_memory(ds)
        }
    }

    /// Whether the raster is a file on disk (see [`Raster::on_disk`]).
    pub fn is_on_disk(&self) -> bool {
        self.scratch.is_some()
    }

    /// The file on disk the raster is, if it is one: closes the dataset
    /// and hands the file over.
    pub fn into_scratch(self) -> Option<ScratchFile> {
        let Raster { ds, scratch, .. } = self;
        drop(ds);
        scratch
    }

    /// The dataset (for this crate and an accelerator, never for stages).
    pub(crate) fn dataset(&self) -> &Dataset {
        &self.ds
    }

    /// Every band's nodata value, in band order.
    pub fn nodata_values(&self) -> Vec<Option<f64>> {
        (1..=self.ds.raster_count())
            .filter_map(|i| self.ds.rasterband(i).ok())
            .map(|b| b.no_data_value())
            .collect()
    }

    /// Bytes of pixel data at full resolution, decoded.
    pub fn pixel_bytes(&self) -> u64 {
        pixel_bytes(&self.ds)
    }

    /// Bytes of the files under the dataset (the input and its siblings,
    /// as fetched); 0 for a dataset made in memory.
    pub fn file_bytes(&self) -> u64 {
        self.files.as_ref().map_or(0, MemDir::bytes)
            + self.remote.as_ref().map_or(0, |_| super::CACHE_BYTES)
            + self.others.iter().map(Raster::file_bytes).sum::<u64>()
    }

    /// Why a range read of a remote input failed, if one did (this input's
    /// or a mosaic's other's); taken, so a retry reads afresh.
    pub fn remote_failure(&self) -> Option<String> {
        self.remote
            .as_ref()
            .and_then(super::RemoteFile::take_failure)
            .or_else(|| self.others.iter().find_map(Raster::remote_failure))
    }

    /// A mosaic: this raster first, then `others`, in order, warped
    /// together into one output.
    pub fn with_others(mut self, others: Vec<Raster>) -> Raster {
        self.others = others;
        self
    }

    /// How many inputs it holds: 1, or a mosaic's count.
    pub fn inputs(&self) -> usize {
        1 + self.others.len()
    }
}

/// Bytes of `ds`'s pixels at full resolution.
pub fn pixel_bytes(ds: &Dataset) -> u64 {
    let (w, h) = ds.raster_size();
    (1..=ds.raster_count())
        .filter_map(|i| ds.rasterband(i).ok())
        .map(|b| (w * h) as u64 * u64::from(dtype_size(b.band_type() as u32)))
        .sum()
}

impl Raster {
    /// Width and height in pixels.
    pub fn size(&self) -> (usize, usize) {
        self.ds.raster_size()
    }

    /// Number of bands.
    pub fn band_count(&self) -> usize {
        self.ds.raster_count()
    }

    /// The data type of band `band` (from 1).
    pub fn data_type(&self, band: usize) -> Result<DataType, RasterError> {
        Ok(DataType::of_gdal(self.band(band)?.band_type() as u32))
    }

    /// The affine geotransform, if the raster has one.
    pub fn geo_transform(&self) -> Option<[f64; 6]> {
        self.ds.geo_transform().ok()
    }

    /// The CRS as WKT (empty if none).
    pub fn crs_wkt(&self) -> String {
        self.ds.projection()
    }

    /// The dataset's metadata item `key` in `domain` (`""`: the default
    /// domain), if it has one.
    pub fn metadata_item(&self, key: &str, domain: &str) -> Option<String> {
        self.ds.metadata_item(key, domain)
    }

    /// Sets the dataset's metadata item `key` in `domain` (`""`: the
    /// default domain): a driver that copies the raster writes it with its
    /// own (GeoTIFF and COG: every domain but a few of GDAL's own, in the
    /// file's `GDAL_METADATA` tag).
    pub fn set_metadata_item(
        &mut self,
        key: &str,
        value: &str,
        domain: &str,
    ) -> Result<(), RasterError> {
        self.ds
            .set_metadata_item(key, value, domain)
            .map_err(|e| RasterError(e.to_string()))
    }

    /// Sets the XML document of an `xml:` metadata domain (`xml:XMP`: a
    /// GeoTIFF's XMP packet, which the GTiff and COG drivers copy into the
    /// file, TIFF tag 700, whatever the GDAL version; other non-default
    /// domains they copy only from GDAL 3.8, with `COPY_SRC_MDD`).
    pub fn set_xml_metadata(&mut self, domain: &str, xml: &str) -> Result<(), RasterError> {
        let list = crate::string_list(&[xml]).map_err(|e| RasterError(e.to_string()))?;
        let domain = std::ffi::CString::new(domain)
            .map_err(|_| RasterError(format!("{domain:?} contains a NUL byte")))?;
        reset_error();
        // SAFETY: a valid dataset handle; the list and the domain are valid
        // C strings for the call's duration (GDAL copies them).
        let err = unsafe {
            sys::GDALSetMetadata(self.ds.c_dataset().cast(), list.as_ptr(), domain.as_ptr())
        };
        if err != sys::CPLErr::CE_None {
            return Err(RasterError(last_error("cannot set the metadata")));
        }
        Ok(())
    }

    /// Every band's unit, scale and offset, in band order (as GDAL has
    /// them: an empty unit, a scale of 1 and an offset of 0 when unset).
    pub fn band_scaling(&self) -> Vec<BandScaling> {
        (1..=self.ds.raster_count())
            .filter_map(|i| self.ds.rasterband(i).ok())
            .map(|b| BandScaling {
                unit: b.unit(),
                scale: b.scale(),
                offset: b.offset(),
            })
            .collect()
    }

    /// Band `band`'s nodata value.
    pub fn nodata(&self, band: usize) -> Option<f64> {
        self.band(band).ok()?.no_data_value()
    }

    fn band(&self, band: usize) -> Result<gdal::raster::RasterBand<'_>, RasterError> {
        self.ds
            .rasterband(band)
            .map_err(|e| RasterError(format!("band {band} of {}: {e}", self.ds.raster_count())))
    }

    /// Every pixel of band `band` (from 1), row by row, as `T` (GDAL
    /// converts from the band's type). The buffer is allocated fallibly:
    /// charge `width x height x size_of::<T>()` to your `memory` budget in
    /// your stage's `demand`.
    pub fn read_band<T: Pixel + Copy>(&self, band: usize) -> Result<Vec<T>, RasterError> {
        let b = self.band(band)?;
        let (w, h) = self.size();
        let len = w * h;
        let mut out: Vec<T> = Vec::new();
        out.try_reserve_exact(len)
            .map_err(|_| RasterError(format!("cannot allocate {len} pixels")))?;
        reset_error();
        // SAFETY: `out` has room for `len` = w x h values of T, written by
        // GDAL row by row (pixel spacing size_of T, line spacing w pixels);
        // its length is set only after GDAL filled every one.
        let err = unsafe {
            sys::GDALRasterIOEx(
                b.c_rasterband(),
                sys::GDALRWFlag::GF_Read,
                0,
                0,
                w as i32,
                h as i32,
                out.as_mut_ptr().cast(),
                w as i32,
                h as i32,
                T::TYPE.to_gdal(),
                0,
                0,
                std::ptr::null_mut(),
            )
        };
        if err != sys::CPLErr::CE_None {
            return Err(RasterError(last_error("read failed")));
        }
        // SAFETY: GDAL wrote all `len` values (checked above).
        unsafe { out.set_len(len) };
        Ok(out)
    }

    /// A new raster in memory the size of `like`, with its geotransform and
    /// CRS, whose bands are `bands` (each `width x height` pixels of `T`,
    /// row by row), each with nodata `nodata`. Takes `bands.len() x width x
    /// height x size_of::<T>()` bytes: charge it in your stage's `demand`.
    pub fn with_bands<T: Pixel + Copy>(
        like: &Raster,
        bands: Vec<Vec<T>>,
        nodata: Option<f64>,
    ) -> Result<Raster, RasterError> {
        let (w, h) = like.size();
        if bands.is_empty() || bands.iter().any(|b| b.len() != w * h) {
            return Err(RasterError(format!(
                "give one or more bands of {w} x {h} = {} pixels",
                w * h
            )));
        }
        let fail = |e: gdal::errors::GdalError| RasterError(e.to_string());
        let mem = gdal::DriverManager::get_driver_by_name("MEM").map_err(fail)?;
        let mut ds = create_mem(&mem, (w, h), bands.len(), T::TYPE)?;
        if let Some(gt) = like.geo_transform() {
            ds.set_geo_transform(&gt).map_err(fail)?;
        }
        ds.set_projection(&like.crs_wkt()).map_err(fail)?;
        if let Some(v) = like.ds.metadata_item("AREA_OR_POINT", "") {
            ds.set_metadata_item("AREA_OR_POINT", &v, "")
                .map_err(fail)?;
        }
        for (i, data) in bands.into_iter().enumerate() {
            let mut band = ds.rasterband(i + 1).map_err(fail)?;
            write_band(&band, (w, h), &data)?;
            band.set_no_data_value(nodata).map_err(fail)?;
        }
        Ok(Raster::in_memory(ds))
    }
}

/// A new MEM dataset of `size` pixels and `bands` bands of `dtype`.
fn create_mem(
    mem: &gdal::Driver,
    (w, h): (usize, usize),
    bands: usize,
    dtype: DataType,
) -> Result<Dataset, RasterError> {
    let dim = |v: usize| {
        i32::try_from(v).map_err(|_| RasterError(format!("{v} pixels is too large for GDAL")))
    };
    reset_error();
    // SAFETY: a valid driver; "" names an in-memory dataset; no options.
    let out = unsafe {
        sys::GDALCreate(
            mem.c_driver(),
            c"".as_ptr(),
            dim(w)?,
            dim(h)?,
            dim(bands)?,
            dtype.to_gdal(),
            std::ptr::null_mut(),
        )
    };
    if out.is_null() {
        return Err(RasterError(last_error("cannot create a MEM dataset")));
    }
    // SAFETY: a new dataset GDALCreate handed to us; closed on drop.
    Ok(unsafe { Dataset::from_c_dataset(out) })
}

/// Writes `data` (`size` pixels of `T`, row by row) to the whole `band`.
fn write_band<T: Pixel>(
    band: &gdal::raster::RasterBand<'_>,
    (w, h): (usize, usize),
    data: &[T],
) -> Result<(), RasterError> {
    if data.len() != w * h {
        return Err(RasterError(format!("{} values for {w} x {h}", data.len())));
    }
    reset_error();
    // SAFETY: `data` holds w x h values of T (checked), read by GDAL row
    // by row (pixel spacing size_of T, line spacing w pixels); the band's
    // size is w x h (made so by `create_mem`).
    let err = unsafe {
        sys::GDALRasterIOEx(
            band.c_rasterband(),
            sys::GDALRWFlag::GF_Write,
            0,
            0,
            w as i32,
            h as i32,
            data.as_ptr().cast_mut().cast(),
            w as i32,
            h as i32,
            T::TYPE.to_gdal(),
            0,
            0,
            std::ptr::null_mut(),
        )
    };
    if err != sys::CPLErr::CE_None {
        return Err(RasterError(last_error("write failed")));
    }
    Ok(())
}
