//! The `stac` source at the pace of the catalog (issue 39, item 3): a STAC
//! API that throttles, read through the engine's per-host gate while fetch
//! draws on the same host, and a stac-geoparquet file as docs/pipeline.md
//! shows it, run whole.

use std::path::Path;
use std::sync::Arc;

use warpline_testkit::{Faults, StacApi, Strict, TileServer};

use crate::common::{self, runtime};

/// A STAC API of 5 pages that throttles at 5 requests a second (a sliding
/// window, 429 with `Retry-After`), its items' assets on the same host:
/// every item fetched once, no failed page, and the server did refuse.
#[test]
fn a_stac_api_of_5_pages_throttling_at_5_per_second_loses_nothing() {
    let api = StacApi::new(10, 2);
    let body = Arc::new(vec![7u8; 1024]);
    let tiles: Vec<(String, Arc<Vec<u8>>)> = (0..api.items)
        .map(|n| (StacApi::tile(n), Arc::clone(&body)))
        .collect();
    let faults = Faults {
        strict: Some(Strict::sliding(5)),
        ..Faults::default()
    };
    let rt = runtime();
    rt.block_on(async {
        let server = TileServer::start_stac(tiles, faults, api).await.unwrap();
        let toml = format!(
            r#"
[pipeline]
flow = ["fetch", "sink"]

[source]
kind = "stac"
search = "http://{}/search"
assets = "B04"

[stages.fetch]
kind = "fetch"

[stages.sink]
kind = "discard"
"#,
            server.addr()
        );
        let report = common::run_async(&toml).await;
        assert_eq!(report.items.total, 10, "{report}");
        assert_eq!(report.items.done, 10, "{report}");
        assert_eq!(report.items.failed, 0, "no failed page or item: {report}");
        let pages = server.page_counts();
        assert_eq!(pages.served, 5, "every page read once: {pages:?}");
        assert_eq!(server.served(), 10, "every asset fetched once");
        let strict = server.strict_counts();
        assert!(strict.refused > 0, "the server throttled: {strict:?}");
    });
}

/// The stac-geoparquet example of docs/pipeline.md, run over a file of
/// 12 items in 5 row groups whose assets are sample tiles on loopback.
#[test]
fn the_geoparquet_example_of_the_reference_runs() {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/pipeline.md"))
            .unwrap();
    let example = doc
        .split("```toml\n")
        .filter_map(|b| b.split("```").next())
        .find(|b| b.contains("geoparquet = \"sentinel-2-l2a.parquet\""))
        .expect("the stac-geoparquet example")
        .to_owned();
    let tiles = common::tiles(3, 64);
    let rt = runtime();
    let server = rt.block_on(TileServer::start(tiles.clone())).unwrap();
    let work = tempfile::tempdir().unwrap();
    let file = work.path().join("items.parquet");
    let names: Vec<String> = tiles.iter().map(|(n, _)| server.url(n)).collect();
    let href = |n: u64| names[n as usize].clone();
    warpline_testkit::geoparquet::write_items(&file, names.len() as u64, 3, &href).unwrap();
    let out = work.path().join("out");
    let toml = example
        .replace(
            "\"sentinel-2-l2a.parquet\"",
            &format!("{:?}", file.display().to_string()),
        )
        .replace("\"out/B04\"", &format!("{:?}", out.display().to_string()));
    let report = rt.block_on(common::run_async(&toml));
    assert_eq!(report.items.done, 12, "{report}");
    let written = std::fs::read_dir(&out)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "tif")
        })
        .count();
    assert_eq!(written, 12);
}
