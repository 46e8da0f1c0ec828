//! Two raster files compared as a reader sees them, for `warpline
//! verify`: what differs in their pixels (size, bands, data types, every
//! pixel of every band and of every overview) and in their metadata
//! (georeferencing, nodata, colour interpretation, the default domain's
//! items of the dataset and its bands, the XMP packet). Pixels are read a
//! strip of rows at a time, so memory stays small whatever the size.

use std::path::Path;

use gdal::raster::RasterBand;
use gdal::{Dataset, Metadata};
use gdal_sys as sys;

use crate::{dtype_size, last_error, reset_error, Error};

/// Rows read at a time (of each file).
const STRIP_ROWS: usize = 256;

/// What differs between two rasters (both empty: the same to a reader).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Differences {
    /// How their pixels differ, a line each.
    pub pixels: Vec<String>,
    /// How their metadata differ, a line each.
    pub metadata: Vec<String>,
}

impl Differences {
    /// Whether nothing differs.
    pub fn is_empty(&self) -> bool {
        self.pixels.is_empty() && self.metadata.is_empty()
    }
}

fn open(path: &Path) -> Result<Dataset, Error> {
    crate::init();
    Dataset::open(path).map_err(|e| Error::Gdal(format!("cannot open {}: {e}", path.display())))
}

/// The XMP packet of the raster at `path` (GDAL's `xml:XMP` domain), if
/// it has one.
pub fn read_xmp(path: &Path) -> Result<Option<String>, Error> {
    let ds = open(path)?;
    Ok(ds
        .metadata_domain("xml:XMP")
        .and_then(|l| l.into_iter().next()))
}

/// What differs between the rasters at `a` (the one checked) and `b`
/// (made again). `xmp`: compare their XMP packets too; `overviews`: their
/// overviews too (not when `b` was made by a command that makes none).
pub fn compare_files(a: &Path, b: &Path, xmp: bool, overviews: bool) -> Result<Differences, Error> {
    let (da, db) = (open(a)?, open(b)?);
    let mut d = Differences::default();
    metadata(&da, &db, xmp, &mut d.metadata);
    let same_shape = da.raster_size() == db.raster_size() && da.raster_count() == db.raster_count();
    if !same_shape {
        let shape = |ds: &Dataset| {
            let (w, h) = ds.raster_size();
            format!("{w} x {h} pixels, {} bands", ds.raster_count())
        };
        d.pixels
            .push(format!("size: {}, made again: {}", shape(&da), shape(&db)));
        return Ok(d);
    }
    for i in 1..=da.raster_count() {
        let (ba, bb) = (band(&da, i)?, band(&db, i)?);
        if ba.band_type() != bb.band_type() {
            d.pixels.push(format!(
                "band {i}: data type {:?}, made again {:?}",
                ba.band_type(),
                bb.band_type()
            ));
            continue;
        }
        if let Some(n) = differing(&ba, &bb)? {
            d.pixels.push(format!("band {i}: {n}"));
        }
        if !overviews {
            continue;
        }
        let (oa, ob) = (
            ba.overview_count().unwrap_or(0),
            bb.overview_count().unwrap_or(0),
        );
        if oa != ob {
            d.pixels
                .push(format!("band {i}: {oa} overviews, made again {ob}"));
            continue;
        }
        for o in 0..oa as usize {
            let (va, vb) = (
                ba.overview(o).map_err(gdal_error)?,
                bb.overview(o).map_err(gdal_error)?,
            );
            if va.size() != vb.size() {
                d.pixels
                    .push(format!("band {i}, overview {}: another size", o + 1));
            } else if let Some(n) = differing(&va, &vb)? {
                d.pixels.push(format!("band {i}, overview {}: {n}", o + 1));
            }
        }
    }
    Ok(d)
}

fn gdal_error(e: gdal::errors::GdalError) -> Error {
    Error::Gdal(e.to_string())
}

fn band(ds: &Dataset, i: usize) -> Result<RasterBand<'_>, Error> {
    ds.rasterband(i).map_err(gdal_error)
}

/// Georeferencing, nodata, colour interpretation and metadata items.
fn metadata(a: &Dataset, b: &Dataset, xmp: bool, out: &mut Vec<String>) {
    let gt = |ds: &Dataset| ds.geo_transform().ok();
    if gt(a) != gt(b) {
        out.push(format!("geotransform: {:?}, made again {:?}", gt(a), gt(b)));
    }
    if a.projection() != b.projection() {
        out.push("CRS: another definition".to_owned());
    }
    items("dataset", a.metadata_domain(""), b.metadata_domain(""), out);
    if xmp {
        let packet = |ds: &Dataset| ds.metadata_domain("xml:XMP");
        if packet(a) != packet(b) {
            out.push("XMP packet (provenance): differs".to_owned());
        }
    }
    for i in 1..=a.raster_count().min(b.raster_count()) {
        let (Ok(x), Ok(y)) = (a.rasterband(i), b.rasterband(i)) else {
            continue;
        };
        let bits = |v: Option<f64>| v.map(f64::to_bits);
        if bits(x.no_data_value()) != bits(y.no_data_value()) {
            out.push(format!(
                "band {i} nodata: {:?}, made again {:?}",
                x.no_data_value(),
                y.no_data_value()
            ));
        }
        if x.color_interpretation() != y.color_interpretation() {
            out.push(format!("band {i} colour interpretation differs"));
        }
        let what = format!("band {i}");
        items(&what, x.metadata_domain(""), y.metadata_domain(""), out);
    }
}

/// The items of one metadata list that differ, by name.
fn items(what: &str, a: Option<Vec<String>>, b: Option<Vec<String>>, out: &mut Vec<String>) {
    let (a, b) = (a.unwrap_or_default(), b.unwrap_or_default());
    let map = |l: &[String]| -> std::collections::BTreeMap<String, String> {
        l.iter()
            .map(|i| match i.split_once('=') {
                Some((k, v)) => (k.to_owned(), v.to_owned()),
                None => (i.clone(), String::new()),
            })
            .collect()
    };
    let (ma, mb) = (map(&a), map(&b));
    for key in ma.keys().chain(mb.keys().filter(|k| !ma.contains_key(*k))) {
        if ma.get(key) != mb.get(key) {
            out.push(format!(
                "{what} metadata {key}: {:?}, made again {:?}",
                ma.get(key),
                mb.get(key)
            ));
        }
    }
}

/// How many pixels of two bands of one size and type differ (`None`:
/// none), compared as their bytes.
fn differing(a: &RasterBand<'_>, b: &RasterBand<'_>) -> Result<Option<String>, Error> {
    let (w, h) = a.size();
    let size = dtype_size(a.band_type() as u32) as usize;
    let mut count = 0u64;
    let mut row = 0;
    while row < h {
        let rows = STRIP_ROWS.min(h - row);
        let (x, y) = (strip(a, row, rows, w, size)?, strip(b, row, rows, w, size)?);
        count += x
            .chunks_exact(size.max(1))
            .zip(y.chunks_exact(size.max(1)))
            .filter(|(p, q)| p != q)
            .count() as u64;
        row += rows;
    }
    Ok((count > 0).then(|| format!("{count} of {} pixels differ", w as u64 * h as u64)))
}

/// Rows `row..row + rows` of `band`, in its own type, as bytes.
fn strip(
    band: &RasterBand<'_>,
    row: usize,
    rows: usize,
    w: usize,
    size: usize,
) -> Result<Vec<u8>, Error> {
    let mut buf = vec![0u8; w * rows * size];
    let dim = |v: usize| i32::try_from(v).map_err(|_| Error::Input(format!("{v} is too large")));
    reset_error();
    // SAFETY: `buf` holds w x rows values of the band's own type (its size
    // in bytes is `size`), written by GDAL row by row; the window is inside
    // the band (the caller's loop keeps row + rows <= height).
    let err = unsafe {
        sys::GDALRasterIO(
            band.c_rasterband(),
            sys::GDALRWFlag::GF_Read,
            0,
            dim(row)?,
            dim(w)?,
            dim(rows)?,
            buf.as_mut_ptr().cast(),
            dim(w)?,
            dim(rows)?,
            band.band_type() as u32,
            0,
            0,
        )
    };
    if err != sys::CPLErr::CE_None {
        return Err(Error::Gdal(last_error("read failed")));
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_pixel_and_a_changed_item_are_told_apart() {
        let dir = tempfile::tempdir().unwrap();
        let tile = crate::samples::sample_tiles(1, 32).unwrap().remove(0);
        let a = dir.path().join("a.tif");
        std::fs::write(&a, &tile.bytes).unwrap();
        assert!(compare_files(&a, &a, true, true).unwrap().is_empty());
        let b = dir.path().join("b.tif");
        std::fs::write(&b, &tile.bytes).unwrap();
        {
            let mut ds = Dataset::open_ex(
                &b,
                gdal::DatasetOptions {
                    open_flags: gdal::GdalOpenFlags::GDAL_OF_UPDATE,
                    ..Default::default()
                },
            )
            .unwrap();
            ds.set_metadata_item("NOTE", "changed", "").unwrap();
            let mut band = ds.rasterband(1).unwrap();
            let mut one = gdal::raster::Buffer::new((1, 1), vec![255u8]);
            band.write((0, 0), (1, 1), &mut one).unwrap();
        }
        let d = compare_files(&a, &b, true, true).unwrap();
        assert_eq!(d.pixels.len(), 1, "{d:?}");
        assert!(
            d.pixels[0].starts_with("band 1: 1 of 1024 pixels differ"),
            "{d:?}"
        );
        assert!(d.metadata.iter().any(|m| m.contains("NOTE")), "{d:?}");
    }
}
