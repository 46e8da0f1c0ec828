//! A raster opened from the files the engine made (or a `/vsiwarpline/`
//! remote file), as the decode stage needs it: only by the allowed
//! drivers, refused if its metadata or its siblings would make GDAL open
//! other files (`refs`), its header read before any pixel, its
//! georeferencing checked, and an assumed CRS given by a VRT view (as
//! `gdal_translate -a_srs` makes it).

use gdal::{Dataset, DatasetOptions, GdalOpenFlags, Metadata};

use crate::{vrt_view, DataType, Error, MemDir, Raster, RemoteFile};

mod refs;

/// A dataset just opened, checked for references to other files, not yet
/// a [`Raster`].
#[derive(Debug)]
pub struct Opened {
    ds: Dataset,
}

/// What a raster's header says of its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Width in pixels.
    pub width: u64,
    /// Height in pixels.
    pub height: u64,
    /// Number of bands.
    pub bands: usize,
    /// Bytes of one pixel of every band together, decoded.
    pub pixel_bytes: u64,
}

/// Opens `path` with only `drivers` and `open_options` (`NAME=VALUE`), and
/// refuses it if its metadata, its archive's other files or its siblings
/// would make GDAL open other files.
pub fn open(path: &str, drivers: &[String], open_options: &[String]) -> Result<Opened, Error> {
    let allowed: Vec<&str> = drivers.iter().map(String::as_str).collect();
    let options: Vec<&str> = open_options.iter().map(String::as_str).collect();
    crate::reset_error();
    let ds = Dataset::open_ex(
        path,
        DatasetOptions {
            open_flags: GdalOpenFlags::GDAL_OF_RASTER
                | GdalOpenFlags::GDAL_OF_READONLY
                | GdalOpenFlags::GDAL_OF_VERBOSE_ERROR,
            allowed_drivers: Some(&allowed),
            open_options: (!options.is_empty()).then_some(&options),
            sibling_files: None,
        },
    )
    .map_err(|e| {
        // The gdal crate takes GDAL's message into its error and resets
        // GDAL's own, so it is read from the error.
        let why = crate::error_message(e, "unrecognised format");
        Error::Input(format!(
            "not a readable raster for the allowed drivers ({}): {why}",
            drivers.join(", "),
        ))
    })?;
    refs::refuse_references(&ds)?;
    if path.starts_with("/vsizip/") || path.starts_with("/vstar/") {
        refs::refuse_archive_siblings(path)?;
    } else {
        refs::refuse_sibling_references(path)?;
    }
    Ok(Opened { ds })
}

impl Opened {
    /// The header's size, before any pixel is read.
    pub fn header(&self) -> Result<Header, Error> {
        let (width, height) = self.ds.raster_size();
        let bands = self.ds.raster_count();
        let mut pixel_bytes = 0u64;
        for i in 1..=bands {
            let band = self
                .ds
                .rasterband(i)
                .map_err(|e| Error::Input(format!("band {i}: {e}")))?;
            pixel_bytes += DataType::of_gdal(band.band_type() as u32).size_bytes();
        }
        Ok(Header {
            width: width as u64,
            height: height as u64,
            bands,
            pixel_bytes,
        })
    }

    /// The raster, over its in-memory `files` (or its `remote` file), if
    /// GDAL can place it: a geotransform, GCPs or RPCs, and a CRS, or
    /// `assume_crs` (WKT) for one without.
    pub fn into_raster(
        self,
        files: MemDir,
        remote: Option<RemoteFile>,
        assume_crs: Option<&str>,
    ) -> Result<Raster, Error> {
        let Some(how) = georeferencing(&self.ds) else {
            return Err(Error::Input(
                "has no geotransform (nor GCPs, RPCs or a world file): it cannot be placed on the map"
                    .to_owned(),
            ));
        };
        let mut raster = Raster::in_memory(self.ds);
        raster.files = Some(files);
        raster.remote = remote;
        if has_crs(&raster.ds, how) {
            return Ok(raster);
        }
        let Some(assumed) = assume_crs else {
            return Err(Error::Input(
                "has no CRS; set `assume_crs` on the decode stage if you know it".to_owned(),
            ));
        };
        let view = vrt_view(&raster.ds, &["-a_srs".to_owned(), assumed.to_owned()])
            .map_err(|m| Error::Gdal(format!("cannot assume the CRS: {m}")))?;
        let under = std::mem::replace(&mut raster.ds, view);
        raster._under = Some(under);
        Ok(raster)
    }
}

/// Whether GDAL can place the raster: a geotransform, GCPs, RPCs or
/// geolocation arrays.
fn georeferencing(ds: &Dataset) -> Option<&'static str> {
    if ds.geo_transform().is_ok() {
        return Some("geotransform");
    }
    if !ds.gcps().is_empty() {
        return Some("gcps");
    }
    // Geolocation arrays are refused before this (see `refs`).
    ds.metadata_domain("RPC")
        .is_some_and(|m| !m.is_empty())
        .then_some("rpc")
}

/// The CRS GDAL sees for the raster's georeferencing, if any.
fn has_crs(ds: &Dataset, how: &str) -> bool {
    match how {
        "geotransform" => !ds.projection().is_empty(),
        "gcps" => ds.gcp_projection().is_some_and(|p| !p.is_empty()),
        // RPCs are in WGS 84.
        _ => true,
    }
}
