//! Small georeferenced GeoTIFF tiles made on the spot, for the demo and the
//! tests: a few CRSs, three Byte bands with gradients and a checkerboard, a
//! nodata border. No file or network is needed to make them.

use gdal::raster::Buffer;
use gdal::spatial_ref::SpatialRef;

use crate::{error_message, init};

/// One sample tile.
#[derive(Debug, Clone)]
pub struct SampleTile {
    /// A file name such as `utm18n-003.tif`.
    pub name: String,
    /// The CRS the tile is in.
    pub crs: &'static str,
    /// The GeoTIFF's bytes.
    pub bytes: Vec<u8>,
}

/// Where each CRS's tiles sit: (label, CRS, origin x, origin y, pixel size).
const PLACES: &[(&str, &str, f64, f64, f64)] = &[
    ("utm18n", "EPSG:32618", 583_000.0, 4_507_000.0, 30.0),
    ("wgs84", "EPSG:4326", -74.05, 40.80, 0.0003),
    ("webmerc", "EPSG:3857", -8_240_000.0, 4_980_000.0, 30.0),
    ("laea", "EPSG:3035", 4_321_000.0, 3_210_000.0, 50.0),
];

/// A sample tile GDAL could not make.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name}: {message}")]
pub struct SampleError {
    /// The tile's file name.
    pub name: String,
    /// What GDAL said.
    pub message: String,
}

/// `per_crs` tiles of `size` x `size` pixels in each of the sample CRSs,
/// side by side.
pub fn sample_tiles(per_crs: usize, size: usize) -> Result<Vec<SampleTile>, SampleError> {
    init();
    let mut tiles = Vec::new();
    for (label, crs, x0, y0, px) in PLACES {
        for i in 0..per_crs {
            let name = format!("{label}-{i:03}.tif");
            let gt = [x0 + (i * size) as f64 * px, *px, 0.0, *y0, 0.0, -px];
            let bytes = match make_tile(&name, crs, gt, size, i) {
                Ok(bytes) => bytes,
                Err(message) => return Err(SampleError { name, message }),
            };
            tiles.push(SampleTile { name, crs, bytes });
        }
    }
    Ok(tiles)
}

fn make_tile(
    name: &str,
    crs: &str,
    gt: [f64; 6],
    size: usize,
    seed: usize,
) -> Result<Vec<u8>, String> {
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = format!("/vsimem/warpline-samples/{}-{n}-{name}", std::process::id());
    let driver = gdal::DriverManager::get_driver_by_name("GTiff").map_err(|e| e.to_string())?;
    {
        let mut ds = driver
            .create_with_band_type::<u8, _>(&path, size, size, 3)
            .map_err(|e| e.to_string())?;
        ds.set_geo_transform(&gt).map_err(|e| e.to_string())?;
        let srs = SpatialRef::from_definition(crs).map_err(|e| e.to_string())?;
        ds.set_spatial_ref(&srs).map_err(|e| e.to_string())?;
        for b in 0..3 {
            let mut band = ds.rasterband(b + 1).map_err(|e| e.to_string())?;
            let data: Vec<u8> = (0..size * size)
                .map(|p| {
                    let (x, y) = (p % size, p / size);
                    if x < 2 || y < 2 {
                        return 0; // a nodata border
                    }
                    let v = match b {
                        0 => x * 255 / size,
                        1 => y * 255 / size,
                        _ => ((x / 16 + y / 16 + seed) % 2) * 180 + 40,
                    };
                    (v.clamp(1, 255)) as u8
                })
                .collect();
            let mut buffer = Buffer::new((size, size), data);
            band.write((0, 0), (size, size), &mut buffer)
                .map_err(|e| e.to_string())?;
            band.set_no_data_value(Some(0.0))
                .map_err(|e| e.to_string())?;
        }
    }
    gdal::vsi::get_vsi_mem_file_bytes_owned(&path)
        .map_err(|e| error_message(e, "the tile was not written"))
}
