//! Helpers for the product's integration tests: the shared real rasters,
//! pipelines over local files, and a raster comparison with GDAL.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use gdal::{Dataset, Metadata};

/// The environment variable naming the folder of real rasters
/// (`../shared/data/real` in CI, set by `.ci/run`).
pub const DATA_VAR: &str = "WARPLINE_TEST_DATA";

/// The real rasters, if the variable is set. Panics when it is set but the
/// data is not there: a misconfigured run must not pass by skipping.
pub fn real_rasters() -> Option<Vec<PathBuf>> {
    let dir = match std::env::var_os(DATA_VAR) {
        None => {
            eprintln!("{DATA_VAR} is not set: the tests on real rasters are skipped");
            return None;
        }
        Some(d) => PathBuf::from(d),
    };
    let expected = [
        "RGB.byte.tif",
        "RGBA.uint16.tif",
        "float_raster_with_nodata.tif",
        "shade.tif",
    ];
    let paths: Vec<PathBuf> = expected.iter().map(|n| dir.join(n)).collect();
    for p in &paths {
        assert!(
            p.is_file(),
            "{DATA_VAR}={} is set but {} is missing",
            dir.display(),
            p.display()
        );
    }
    Some(paths)
}

/// Writes the sample tiles to `dir` and returns their paths.
pub fn sample_files(dir: &Path, per_crs: usize, size: usize) -> Vec<PathBuf> {
    std::fs::create_dir_all(dir).unwrap();
    warpline::stages::samples::sample_tiles(per_crs, size)
        .unwrap()
        .into_iter()
        .map(|t| {
            let p = dir.join(&t.name);
            std::fs::write(&p, &t.bytes).unwrap();
            p
        })
        .collect()
}

pub use warpline_testkit::pipelines::toml_list;
use warpline_testkit::pipelines::Raster;

/// A fetch -> decode -> reproject -> write pipeline over `inputs`, with the
/// reproject settings in `reproject` and the write settings in `write`:
/// `workers` workers a stage and `cpu` permits, four connections.
pub fn raster_pipeline(inputs: &[String], reproject: &str, write: &str, workers: u32) -> String {
    let workers = workers.to_string();
    Raster {
        source: &format!("kind = \"inline\"\ninputs = {}", toml_list(inputs)),
        cpu: &workers,
        workers: &workers,
        reproject,
        write,
        ..Raster::default()
    }
    .toml()
}

/// [`raster_pipeline`] of one input and one worker each, writing into
/// `out`, with `decode` added to the decode stage's settings.
pub fn one_raster_pipeline(input: &Path, reproject: &str, out: &Path, decode: &str) -> String {
    Raster {
        source: &format!(
            "kind = \"inline\"\ninputs = {}",
            toml_list(&[input.display().to_string()])
        ),
        decode,
        reproject,
        write: &format!("dir = {:?}", out.display().to_string()),
        ..Raster::default()
    }
    .toml()
}

/// Runs `toml` with the built-in kinds on the current runtime; panics on
/// an invalid pipeline or a run that cannot start.
pub async fn run_async(toml: &str) -> warpline::RunReport {
    warpline::Pipeline::from_toml_str(toml, &warpline::registry())
        .unwrap_or_else(|e| panic!("{e}\n{toml}"))
        .run()
        .await
        .unwrap()
}

/// Runs a pipeline from TOML on a fresh multi-threaded runtime.
pub fn run(toml: &str) -> warpline::RunReport {
    let pipeline = warpline::Pipeline::from_toml_str(toml, &warpline::registry())
        .unwrap_or_else(|e| panic!("{e}\n{toml}"));
    runtime().block_on(pipeline.run()).unwrap()
}

/// Pixel values of every band, as f64 bit patterns (exact for every GDAL
/// type up to 32-bit integers and all floats).
fn pixels(ds: &Dataset) -> Vec<Vec<u64>> {
    let (w, h) = ds.raster_size();
    (1..=ds.raster_count())
        .map(|i| {
            let band = ds.rasterband(i).unwrap();
            let buf = band.read_as::<f64>((0, 0), (w, h), (w, h), None).unwrap();
            buf.data().iter().map(|v| v.to_bits()).collect()
        })
        .collect()
}

/// Asserts two rasters are the same: size, geotransform, CRS, types,
/// nodata, colour interpretation and every pixel.
pub fn assert_same_raster(ours: &Path, oracle: &Path, what: &str) {
    let a = Dataset::open(ours)
        .unwrap_or_else(|e| panic!("{what}: cannot open {}: {e}", ours.display()));
    let b = Dataset::open(oracle).unwrap();
    assert_eq!(a.raster_size(), b.raster_size(), "{what}: size");
    assert_eq!(a.raster_count(), b.raster_count(), "{what}: band count");
    assert_eq!(
        a.geo_transform().unwrap(),
        b.geo_transform().unwrap(),
        "{what}: geotransform"
    );
    let (sa, sb) = (a.spatial_ref().unwrap(), b.spatial_ref().unwrap());
    assert!(
        sa.to_wkt().unwrap() == sb.to_wkt().unwrap(),
        "{what}: CRS differs:\n{}\n{}",
        sa.to_wkt().unwrap(),
        sb.to_wkt().unwrap()
    );
    for i in 1..=a.raster_count() {
        let (ba, bb) = (a.rasterband(i).unwrap(), b.rasterband(i).unwrap());
        assert_eq!(ba.band_type(), bb.band_type(), "{what}: band {i} type");
        assert_eq!(
            ba.no_data_value().map(f64::to_bits),
            bb.no_data_value().map(f64::to_bits),
            "{what}: band {i} nodata"
        );
        assert_eq!(
            ba.color_interpretation(),
            bb.color_interpretation(),
            "{what}: band {i} colour interpretation"
        );
    }
    let (pa, pb) = (pixels(&a), pixels(&b));
    for (i, (x, y)) in pa.iter().zip(&pb).enumerate() {
        let differing = x.iter().zip(y).filter(|(p, q)| p != q).count();
        assert_eq!(
            differing,
            0,
            "{what}: band {} has {differing} differing pixels",
            i + 1
        );
    }
}

/// Dataset and band metadata, descriptions, units, scale and offset, mask
/// flags: as gdalinfo shows them.
pub fn assert_same_metadata(ours: &Path, theirs: &Path, what: &str) {
    let (a, b) = (Dataset::open(ours).unwrap(), Dataset::open(theirs).unwrap());
    assert_eq!(
        a.metadata_domain(""),
        b.metadata_domain(""),
        "{what}: dataset metadata"
    );
    for i in 1..=a.raster_count() {
        let (x, y) = (a.rasterband(i).unwrap(), b.rasterband(i).unwrap());
        let what = format!("{what}: band {i}");
        assert_eq!(
            x.metadata_domain(""),
            y.metadata_domain(""),
            "{what} metadata"
        );
        assert_eq!(
            x.description().ok(),
            y.description().ok(),
            "{what} description"
        );
        assert_eq!(x.unit(), y.unit(), "{what} unit");
        assert_eq!(
            (x.scale(), x.offset()),
            (y.scale(), y.offset()),
            "{what} scale, offset"
        );
        let flags = |b: &gdal::raster::RasterBand| {
            let f = b.mask_flags().unwrap();
            (
                f.is_all_valid(),
                f.is_per_dataset(),
                f.is_alpha(),
                f.is_nodata(),
            )
        };
        assert_eq!(flags(&x), flags(&y), "{what} mask flags");
    }
}

mod oracle;

/// Whether a warp accelerator is active in this process; when it is not,
/// says "skipped: ..." (with why) for the assertions that need it.
pub fn accelerated() -> bool {
    warpline::install_accelerator();
    match warpline::warp_path() {
        warpline::stages::gdal::WarpPath::Accelerated { .. } => true,
        other => {
            eprintln!("skipped: the accelerator's own assertions: {other}");
            false
        }
    }
}
#[allow(unused_imports)] // cli/tests includes this module and warps with no oracle
pub use oracle::{gdalwarp, gdalwarp_many};

/// Sha-256 of every file in `dir`, by name (temporary files included, so a
/// leftover shows up). A file renamed away while listing (a run is live) is
/// passed over.
pub fn hashes(dir: &Path) -> std::collections::BTreeMap<String, String> {
    use sha2::{Digest, Sha256};
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| {
                    let p = e.ok()?.path();
                    let bytes = std::fs::read(&p).ok()?;
                    let digest = Sha256::digest(bytes);
                    Some((
                        p.file_name()?.to_string_lossy().into_owned(),
                        format!("{digest:x}"),
                    ))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// fetch -> decode -> write, two workers each, reading `source` (a TOML
/// `[source]` body) and writing into `out` with `write` (more of the write
/// stage's keys).
pub fn copy_pipeline(source: &str, out: &Path, write: &str) -> String {
    format!(
        r#"
[pipeline]
flow = ["fetch", "decode", "write"]
[source]
{source}
[stages.fetch]
kind = "fetch"
workers = 2
[stages.decode]
kind = "decode"
workers = 2
[stages.write]
kind = "write"
workers = 2
dir = {out:?}
{write}
"#,
        out = out.display().to_string()
    )
}

/// A fetch -> decode -> reproject -> write pipeline reading a list file,
/// with a per-host rate limiter and fetch settings in `fetch`: six
/// connections, two workers a stage, to EPSG:3857 (bilinear).
pub fn list_pipeline(list: &Path, out: &Path, fetch: &str) -> String {
    Raster {
        source: &format!("kind = \"list\"\npath = {:?}", list.display().to_string()),
        connections: 6,
        limits: "[limits.per_host]\nper_second = 1000\nburst = 100\nper = \"host\"",
        fetch_limits: r#"["connections", "per_host"]"#,
        fetch,
        cpu: "2",
        workers: "2",
        reproject: "crs = \"EPSG:3857\"\nresampling = \"bilinear\"",
        write: &format!("dir = {:?}", out.display().to_string()),
        ..Raster::default()
    }
    .toml()
}

/// The fetch -> decode -> write pipeline the coordinated (Redis) tests run
/// over a list of tile URLs: fetch under a per-host rate limit `tiles`
/// (global across workers when `global`), optionally also under 4
/// `connections`, with `attempts` tries per tile.
pub struct TilePipeline<'a> {
    pub name: &'a str,
    pub list: &'a Path,
    pub out: &'a Path,
    pub per_second: u32,
    pub burst: u32,
    pub global: bool,
    pub connections: bool,
    pub attempts: u32,
}

impl TilePipeline<'_> {
    /// The pipeline's TOML.
    pub fn toml(&self) -> String {
        let (connections, limits) = if self.connections {
            (
                "[limits.connections]\npermits = 4\n",
                r#"["connections", "tiles"]"#,
            )
        } else {
            ("", r#"["tiles"]"#)
        };
        let scope = if self.global {
            "scope = \"global\"\n"
        } else {
            ""
        };
        format!(
            r#"
[pipeline]
name = "{name}"
flow = ["fetch", "decode", "write"]
[source]
kind = "list"
path = {list:?}
{connections}[limits.tiles]
per_second = {per_second}
burst = {burst}
per = "host"
{scope}[stages.fetch]
kind = "fetch"
workers = 4
limits = {limits}
retry = {{ attempts = {attempts} }}
[stages.decode]
kind = "decode"
[stages.write]
kind = "write"
dir = {out:?}
"#,
            name = self.name,
            list = self.list.display().to_string(),
            out = self.out.display().to_string(),
            per_second = self.per_second,
            burst = self.burst,
            attempts = self.attempts,
        )
    }
}

pub use warpline_testkit::runtime;

/// Sample tiles as (name, bytes).
pub fn tiles(per_crs: usize, size: usize) -> Vec<(String, Vec<u8>)> {
    warpline::stages::samples::sample_tiles(per_crs, size)
        .unwrap()
        .into_iter()
        .map(|t| (t.name, t.bytes))
        .collect()
}

/// A tile server of `per_crs` x 4 sample tiles misbehaving as `faults`,
/// on a runtime of its own, with the list of their URLs written into a
/// fresh folder.
pub struct ServedTiles {
    pub server: warpline_testkit::TileServer,
    pub work: tempfile::TempDir,
    /// `work/tiles.txt`: one URL a line.
    pub list: PathBuf,
    /// The server's runtime: it serves while this lives.
    pub rt: tokio::runtime::Runtime,
}

impl ServedTiles {
    pub fn new(per_crs: usize, faults: warpline_testkit::Faults) -> Self {
        let rt = runtime();
        let tiles = tiles(per_crs, 64);
        let server = rt
            .block_on(warpline_testkit::TileServer::start_with(
                tiles.clone(),
                faults,
            ))
            .unwrap();
        let work = tempfile::tempdir().unwrap();
        let list = work.path().join("tiles.txt");
        write_url_list(&server, tiles.iter().map(|(n, _)| n.as_str()), &list);
        ServedTiles {
            server,
            work,
            list,
            rt,
        }
    }
}

/// Writes `list`, one URL a line: the server's URL of each name (a `list`
/// source's file).
pub fn write_url_list<'a>(
    server: &warpline_testkit::TileServer,
    names: impl IntoIterator<Item = &'a str>,
    list: &Path,
) {
    let urls: Vec<String> = names.into_iter().map(|n| server.url(n)).collect();
    std::fs::write(list, urls.join("\n")).unwrap();
}

/// Stops a running `warpline` as Ctrl-C does (SIGINT) and waits for it:
/// how it ended.
pub fn interrupt(child: &mut std::process::Child) -> std::process::ExitStatus {
    let kill = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    child.wait().unwrap()
}

/// Asserts that a finished `warpline` exited with `code`, showing its
/// standard output when not.
pub fn assert_exit(out: &std::process::Output, code: i32) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// The JSON file at `path` (a report, a list of failures), parsed.
pub fn read_json(path: impl AsRef<Path>) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The entry of the JSON array `list` (a report's stages, a plan's
/// limiters) whose `key` is `value`; panics when there is none.
pub fn entry<'a>(list: &'a serde_json::Value, key: &str, value: &str) -> &'a serde_json::Value {
    list.as_array()
        .unwrap_or_else(|| panic!("not a list: {list}"))
        .iter()
        .find(|e| e[key] == value)
        .unwrap_or_else(|| panic!("no {key} = {value:?} in {list}"))
}

/// Writes at `path` a tiny GeoTIFF that declares 100000 x 100000 pixels
/// (sparse: nothing written), to test that decoding refuses it.
pub fn write_bomb(path: &Path) {
    let gtiff = gdal::DriverManager::get_driver_by_name("GTiff").unwrap();
    let opts = gdal::cpl::CslStringList::from_iter(["SPARSE_OK=TRUE", "BLOCKYSIZE=100000"]);
    let mut ds = gtiff
        .create_with_band_type_with_options::<u8, _>(path, 100_000, 100_000, 1, &opts)
        .unwrap();
    ds.set_geo_transform(&[0.0, 1.0, 0.0, 0.0, 0.0, -1.0])
        .unwrap();
    ds.set_spatial_ref(&gdal::spatial_ref::SpatialRef::from_epsg(3857).unwrap())
        .unwrap();
}

/// Asserts a command succeeded, showing its standard error when not.
pub fn assert_success(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The report of the pipeline's `reproject` stage.
pub fn reproject_stage(report: &warpline::RunReport) -> &warpline::engine::report::StageReport {
    report
        .stages
        .iter()
        .find(|s| s.kind == "reproject")
        .expect("a reproject stage in the report")
}
