//! The `stac` source at the pace of the catalog (issue 39, item 3): a STAC
//! API that throttles, read through the engine's per-host gate while fetch
//! draws on the same host, and a stac-geoparquet file as docs/pipeline.md
//! shows it, run whole.

use std::path::Path;
use std::sync::Arc;

use warpline_testkit::tileserver::PageCounts;
use warpline_testkit::{Fault, Faults, StacApi, Strict, TileServer};

use crate::common::{self, runtime};

/// A STAC API of 5 pages that throttles at 5 requests a second (a sliding
/// window, 429 with `Retry-After`), its items' assets on the same host:
/// every item fetched once, no failed page, and the server did refuse.
#[test]
fn a_stac_api_of_5_pages_throttling_at_5_per_second_loses_nothing() {
    let faults = Faults {
        strict: Some(Strict::sliding(5)),
        ..Faults::default()
    };
    let (refused, _) = search_and_fetch(faults);
    assert!(refused > 0, "the server throttled");
}

/// Every request's first try refused (429, `Retry-After: 1`), pages
/// included: the source's own requests are tried again through the
/// host's gate, and no page fails (the window above may refuse only
/// tiles).
#[test]
fn refused_pages_are_tried_again() {
    let faults = Faults {
        throttle: Some((Fault::all(1), 1)),
        ..Faults::default()
    };
    let (_, pages) = search_and_fetch(faults);
    // The first page is `/search`, the other four `search?...`: each of
    // those refused once.
    assert!(
        pages.refused >= 4,
        "pages refused and tried again: {pages:?}"
    );
}

/// Searches a STAC API of 10 items, 2 a page, on a server with `faults`,
/// and fetches each item's asset from it: every item done once, every
/// page read once. What the strict limit refused, and what the server
/// did with pages.
fn search_and_fetch(faults: Faults) -> (u64, PageCounts) {
    let api = StacApi::new(10, 2);
    let body = Arc::new(vec![7u8; 1024]);
    let tiles: Vec<(String, Arc<Vec<u8>>)> = (0..api.items)
        .map(|n| (StacApi::tile(n), Arc::clone(&body)))
        .collect();
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
        (server.strict_counts().refused, pages)
    })
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
