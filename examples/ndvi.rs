//! A raster stage of your own between decode and reproject: a normalized
//! difference of two bands, `(a - b) / (a + b)` (NDVI with a = near
//! infrared, b = red), as one Float32 band with NaN where either input is
//! nodata or both are 0. It reads the decoded raster with typed access
//! ([`Raster::read_band`]), makes a new one ([`Raster::with_bands`]), and
//! charges what it holds to the pipeline's `memory` budget in `demand`.
//!
//! ```sh
//! cargo run --example ndvi -- OUT_DIR
//! ```
//!
//! runs it on the sample tiles (no network, no data files): fetch, decode,
//! `ndvi`, reproject to EPSG:3857, write. The test suite runs it too
//! (tests/all/custom_stage.rs).

use std::path::Path;

use serde::Deserialize;
use warpline::stages::gdal::Raster;
use warpline::stages::payloads;
use warpline::{BlockingStage, Handler, Item, Outcome, Payload, Problem, Settings, StageError};

/// The `ndvi` stage: which bands are `a` and `b` (from 1).
#[derive(Debug)]
pub struct Ndvi {
    a: usize,
    b: usize,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NdviSettings {
    a: usize,
    b: usize,
}

/// The factory the registry calls for `kind = "ndvi"`.
pub fn factory(s: &Settings) -> Result<Handler, Vec<Problem>> {
    let n: NdviSettings = s.parse()?;
    if n.a == 0 || n.b == 0 {
        return Err(vec![s.problem("a", "bands are counted from 1")]);
    }
    Ok(Handler::from_blocking(Ndvi { a: n.a, b: n.b }))
}

impl warpline::Stage for Ndvi {
    /// Takes a decoded raster and hands one on: checked against its
    /// neighbours in the flow when the pipeline compiles.
    fn takes(&self) -> Payload {
        payloads::raster()
    }

    fn hands_on(&self) -> Payload {
        payloads::raster()
    }

    /// What this stage holds at its peak: the decoded input it keeps, two
    /// bands read as f32 and the result (one f32 band), and the new
    /// raster's own copy of it.
    fn demand(&self, item: &mut Item) -> Result<u64, StageError> {
        let raster = item.payload::<Raster>().ok_or_else(|| {
            StageError::permanent(format!("{}: ndvi needs a decoded raster", item.id))
        })?;
        let (w, h) = raster.size();
        let pixels = (w * h) as u64;
        Ok(raster.file_bytes() + 4 * pixels * 4)
    }
}

impl BlockingStage for Ndvi {
    fn process(&self, item: &mut Item) -> Result<Outcome, StageError> {
        let id = item.id.clone();
        let fail = |m: String| StageError::permanent(format!("{id}: {m}"));
        let raster = item
            .take_payload::<Raster>()
            .ok_or_else(|| fail("ndvi needs a decoded raster".into()))?;
        if raster.band_count() < self.a.max(self.b) {
            return Err(fail(format!(
                "has {} bands; ndvi needs bands {} and {}",
                raster.band_count(),
                self.a,
                self.b
            )));
        }
        let read = |band: usize| {
            raster
                .read_band::<f32>(band)
                .map_err(|e| fail(e.to_string()))
        };
        let (a, b) = (read(self.a)?, read(self.b)?);
        let (na, nb) = (raster.nodata(self.a), raster.nodata(self.b));
        let is_nodata = |v: f32, nodata: Option<f64>| nodata.is_some_and(|n| f64::from(v) == n);
        let out: Vec<f32> = a
            .iter()
            .zip(&b)
            .map(|(&x, &y)| {
                if is_nodata(x, na) || is_nodata(y, nb) || x + y == 0.0 {
                    f32::NAN
                } else {
                    (x - y) / (x + y)
                }
            })
            .collect();
        let ndvi = Raster::with_bands(&raster, vec![out], Some(f64::NAN))
            .map_err(|e| fail(e.to_string()))?;
        item.set_payload(ndvi);
        Ok(Outcome::Continue)
    }
}

/// The pipeline: the sample tiles in `input_dir` to EPSG:3857 NDVI in
/// `out_dir`, under a 256 MiB budget that every stage charges.
pub fn pipeline_toml(input_dir: &Path, out_dir: &Path) -> String {
    format!(
        r#"
[pipeline]
flow = ["fetch", "decode", "ndvi", "reproject", "write"]
[source]
kind = "glob"
pattern = "{input}/*.tif"
[limits.memory]
budget = "256MiB"
[limits.cpu]
permits = "cores"
[stages.fetch]
kind = "fetch"
memory = "memory"
[stages.decode]
kind = "decode"
limits = ["memory", "cpu"]
release = ["memory"]
carry = ["memory"]
[stages.ndvi]
kind = "ndvi"
a = 3
b = 1
limits = ["memory", "cpu"]
release = ["memory"]
carry = ["memory"]
[stages.reproject]
kind = "reproject"
crs = "EPSG:3857"
resampling = "bilinear"
limits = ["memory", "cpu"]
release = ["memory"]
carry = ["memory"]
[stages.write]
kind = "write"
dir = "{out}"
"#,
        input = input_dir.display(),
        out = out_dir.display()
    )
}

/// Writes the sample tiles to `work/in`, runs the pipeline into `out_dir`
/// and returns its report.
pub fn run(work: &Path, out_dir: &Path) -> Result<warpline::RunReport, Box<dyn std::error::Error>> {
    let input = work.join("in");
    std::fs::create_dir_all(&input)?;
    for tile in warpline::stages::samples::sample_tiles(2, 256)? {
        std::fs::write(input.join(&tile.name), &tile.bytes)?;
    }
    let mut registry = warpline::registry();
    registry.register_stage("ndvi", factory);
    let pipeline = warpline::Pipeline::from_toml_str(&pipeline_toml(&input, out_dir), &registry)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    Ok(runtime.block_on(pipeline.run())?)
}

#[allow(dead_code)]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "out/ndvi".to_owned());
    let work = tempfile::tempdir()?;
    let report = run(work.path(), Path::new(&out))?;
    println!("{report}");
    Ok(())
}
