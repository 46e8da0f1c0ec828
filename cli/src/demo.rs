//! `warpline demo`: the whole pipeline on a fresh machine, with no network
//! and no data files. It makes sample GeoTIFF tiles in four CRSs, serves
//! them on a loopback HTTP server, lists their URLs in `DIR/tiles.txt`, and
//! loads `pipelines/demo.toml` (built into the binary) to fetch, decode,
//! reproject them to EPSG:3857 and write COGs to `DIR/output`.

use std::path::Path;

use warpline_engine::{ConfigErrors, Loader, Pipeline};

use warpline_testkit::TileServer;

/// The demo pipeline file, as shipped in `pipelines/demo.toml`.
pub const PIPELINE: &str = include_str!("../../pipelines/demo.toml");

/// Sample tiles per CRS, and their size in pixels.
pub const TILES_PER_CRS: usize = 6;
/// The sample tiles' width and height.
pub const TILE_SIZE: usize = 512;

/// A prepared demo: the server and the pipeline pointed at it.
#[derive(Debug)]
pub struct Demo {
    /// The tile server (stops when dropped).
    pub server: TileServer,
    /// The pipeline, reading `DIR/tiles.txt` and writing `DIR/output`.
    pub pipeline: Pipeline,
}

/// Why the demo could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// Making the tiles or the list failed.
    #[error("{0}")]
    Setup(String),
    /// The demo pipeline did not compile (with the overrides given).
    #[error(transparent)]
    Config(#[from] ConfigErrors),
}

/// Makes the tiles, starts the server, writes the list and compiles the
/// pipeline with `sets` applied after the demo's own.
pub async fn prepare(dir: &Path, sets: &[(String, String)]) -> Result<Demo, DemoError> {
    let tiles = tokio::task::spawn_blocking(|| {
        warpline_stages::samples::sample_tiles(TILES_PER_CRS, TILE_SIZE)
    })
    .await
    .map_err(|e| DemoError::Setup(e.to_string()))?
    .map_err(|e| DemoError::Setup(e.to_string()))?;
    let names: Vec<String> = tiles.iter().map(|t| t.name.clone()).collect();
    let server = TileServer::start(tiles.into_iter().map(|t| (t.name, t.bytes)))
        .await
        .map_err(|e| DemoError::Setup(format!("cannot start the tile server: {e}")))?;
    std::fs::create_dir_all(dir)
        .map_err(|e| DemoError::Setup(format!("cannot create {}: {e}", dir.display())))?;
    let list = dir.join("tiles.txt");
    let mut text = String::from("# Sample tiles served by `warpline demo` on loopback\n");
    for n in &names {
        text.push_str(&server.url(n));
        text.push('\n');
    }
    std::fs::write(&list, text)
        .map_err(|e| DemoError::Setup(format!("cannot write {}: {e}", list.display())))?;

    let mut loader = Loader::from_toml_str(PIPELINE)
        .with_env()
        .set("source.path", list.display().to_string())
        .set("stages.write.dir", dir.join("output").display().to_string());
    for (k, v) in sets {
        loader = loader.set(k.clone(), v.clone());
    }
    let pipeline = loader.load(&warpline::registry())?;
    Ok(Demo { server, pipeline })
}
