//! The tiles the raster bench serves: normal 512 px tiles, and the skewed
//! corpora's large ones, on the loopback tile server.

use std::path::Path;
use std::sync::Arc;

use gdal::raster::Buffer;
use gdal::DriverManager;
use warpline_testkit::{Faults, TileServer};

use super::{matrix, mixed};

/// A normal tile's size in pixels.
pub const TILE: usize = 512;
/// Distinct normal tiles; every name serves one of them.
pub const DISTINCT: usize = 48;

/// A 3-band Byte GeoTIFF in UTM 18N, `size` px, with texture; tiled and
/// DEFLATE-compressed when `compress` (the texture hardly compresses: a
/// large tile's body is about its decoded size, 74 MiB for 75 MiB).
pub fn make_tile(seed: usize, size: usize, compress: bool, dir: &Path) -> Vec<u8> {
    let path = dir.join(format!("t{seed}-{size}.tif"));
    let mem = DriverManager::get_driver_by_name("MEM").unwrap();
    let mut ds = mem
        .create_with_band_type::<u8, _>("", size, size, 3)
        .unwrap();
    let x0 = 583_000.0 + (seed % 8) as f64 * size as f64 * 30.0;
    let y0 = 4_507_000.0 - (seed / 8) as f64 * size as f64 * 30.0;
    ds.set_geo_transform(&[x0, 30.0, 0.0, y0, 0.0, -30.0])
        .unwrap();
    ds.set_spatial_ref(&gdal::spatial_ref::SpatialRef::from_epsg(32618).unwrap())
        .unwrap();
    for b in 0..3 {
        let data: Vec<u8> = (0..size * size)
            .map(|p| {
                let (x, y) = (p % size, p / size);
                ((x * (b + 1) + y * 3 + seed * 17 + (x * y) % 7) % 251) as u8
            })
            .collect();
        ds.rasterband(b + 1)
            .unwrap()
            .write((0, 0), (size, size), &mut Buffer::new((size, size), data))
            .unwrap();
    }
    let opts: Vec<&str> = if compress {
        vec!["COMPRESS=DEFLATE", "TILED=YES"]
    } else {
        vec![]
    };
    let gtiff = DriverManager::get_driver_by_name("GTiff").unwrap();
    ds.create_copy(&gtiff, &path, &gdal::cpl::CslStringList::from_iter(opts))
        .unwrap();
    drop(ds);
    let bytes = std::fs::read(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    bytes
}

pub struct Served {
    pub list: std::path::PathBuf,
    pub server: TileServer,
}

/// How a corpus is skewed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Skew {
    /// Every tile the same size, uncompressed.
    None,
    /// 1% of the tiles 20-100x larger (`skewed-1000`).
    Light,
    /// 10% of the tiles 40-100x larger (the `skew10-*` matrix).
    Heavy,
    /// The mixed corpus of real tiles (`mixed`), kinds in turn.
    Mixed,
}

/// The tiles of a scenario, and how its corpus is skewed.
pub fn shape(name: &str) -> (usize, Skew) {
    match name {
        "cpu-1000" | "fetch-1000" => (1000, Skew::None),
        "cpu-10000" => (10000, Skew::None),
        "skewed-1000" => (1000, Skew::Light),
        "rate" => (200, Skew::None),
        // Ten rounds of the 48 distinct tiles, 60 of each kind.
        "mixed" | "mixed-python" | "mixed-cli" | "mixed-pyapi" | "mixed-pystage" => {
            (480, Skew::Mixed)
        }
        "mixed-floor" | "mixed-kernel" | "mixed-instructions" => (0, Skew::Mixed),
        m if matrix::budget_mib(m).is_some() => (matrix::tiles(), Skew::Heavy),
        other => panic!("unknown scenario {other}"),
    }
}

/// The distinct tiles of a corpus: every name serves one of them, shared,
/// not copied. Made once per bench run (the large ones take seconds).
pub struct Corpus {
    pub normal: Vec<Arc<Vec<u8>>>,
    pub big: Vec<Arc<Vec<u8>>>,
    /// The mixed corpus's folder of tiles (the child reads them for its
    /// floor).
    pub dir: Option<std::path::PathBuf>,
}

pub fn corpus(skew: Skew, work: &Path) -> Corpus {
    if skew == Skew::Mixed {
        return mixed_corpus(work);
    }
    let compress = skew != Skew::None;
    let normal = (0..DISTINCT)
        .map(|i| Arc::new(make_tile(i, TILE, compress, work)))
        .collect();
    // Multiples of a normal tile's pixels.
    let factors: &[f64] = match skew {
        Skew::None | Skew::Mixed => &[],
        Skew::Light => &[20.0, 35.0, 50.0, 70.0, 100.0],
        Skew::Heavy => &matrix::HEAVY_FACTORS,
    };
    let big = factors
        .iter()
        .enumerate()
        .map(|(i, factor)| {
            let size = (TILE as f64 * factor.sqrt()) as usize;
            Arc::new(make_tile(100 + i, size, true, work))
        })
        .collect();
    Corpus {
        normal,
        big,
        dir: None,
    }
}

/// The mixed corpus, made in `work/mixed`: tile `i` is of kind `i % 8`.
fn mixed_corpus(work: &Path) -> Corpus {
    let dir = work.join("mixed");
    let kinds = mixed::make(&dir);
    let normal = (0..mixed::PER_KIND)
        .flat_map(|t| kinds.iter().map(move |(_, tiles)| &tiles[t]))
        .map(|p| Arc::new(std::fs::read(p).unwrap()))
        .collect();
    Corpus {
        normal,
        big: Vec::new(),
        dir: Some(dir),
    }
}

pub async fn serve(n: usize, skew: Skew, corpus: &Corpus, faults: Faults, work: &Path) -> Served {
    let tiles: Vec<(String, Arc<Vec<u8>>)> = (0..n)
        .map(|i| {
            let bytes = match skew {
                Skew::Light if i % 100 == 50 => &corpus.big[(i / 100) % corpus.big.len()],
                Skew::Heavy if i % 10 == 5 => &corpus.big[(i / 10) % corpus.big.len()],
                _ => &corpus.normal[i % corpus.normal.len()],
            };
            (format!("tile-{i:05}.tif"), Arc::clone(bytes))
        })
        .collect();
    let server = TileServer::start_with(tiles.iter().cloned(), faults)
        .await
        .unwrap();
    let list = work.join("tiles.txt");
    let urls: Vec<String> = tiles.iter().map(|(n, _)| server.url(n)).collect();
    std::fs::write(&list, urls.join("\n")).unwrap();
    Served { list, server }
}
