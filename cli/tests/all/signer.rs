//! fetch's `signer` through the binary (issue 39, item 2): the reference's
//! Planetary Computer example, run against a STAC API, a token endpoint
//! and a storage on loopback (their URLs replaced), the storage's clock
//! running ahead of this machine's so that tokens are refused as expired
//! mid-run: every item done but the one whose asset is missing, and no
//! token anywhere a run writes (stdout, a trace log, the report, the
//! events, the failure records, the STAC items and the collection, the
//! GeoTIFFs' provenance).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::binary::warpline;
use crate::common;
use crate::s3::server::files;
use crate::s3::stac_api::{item, serve};
use warpline_testkit::{Clock, Faults, Sas, TileServer, TokenServer};

/// The reference's example of a signed STAC search.
fn reference_example() -> String {
    crate::binary::reference_example(
        "[pipeline]\nflow = [\"fetch\", \"decode\", \"reproject\", \"write\"]\n\n[source]\nkind = \"stac\"\nsearch = \"https://planetarycomputer",
        "the signed STAC example in docs/pipeline.md",
    )
}

/// Four scenes of `tiles` served by `server`, B04 and B08 each; the last
/// one's B08 is not there.
fn scenes(server: &TileServer, tiles: &[(String, Vec<u8>)]) -> Vec<serde_json::Value> {
    let mut scenes = Vec::new();
    for (i, (name, _)) in tiles.iter().enumerate() {
        let b08 = if i == 3 {
            server.url("missing.tif")
        } else {
            server.url(name)
        };
        let assets = [("B04", server.url(name)), ("B08", b08)];
        let (x, id) = (11.0 + i as f64 * 0.1, format!("S2B_32TPS_{i}"));
        scenes.push(item(
            &id,
            "sentinel-2-l2a",
            x,
            46.0,
            "2024-06-10T10:00:00Z",
            &assets,
        ));
    }
    scenes
}

/// Asserts no token `sas` handed out (its signature, or whole) is in
/// `said` or any file under `work`: the outputs' bytes too (their XMP
/// provenance).
fn assert_no_token_written(sas: &Sas, work: &Path, said: String) {
    let mut written = vec![("stdout and the trace log".to_owned(), said.into_bytes())];
    for f in files(work) {
        written.push((f.display().to_string(), std::fs::read(&f).unwrap()));
    }
    for token in sas.tokens() {
        let sig = token.rsplit_once("sig=").unwrap().1.to_owned();
        for (what, bytes) in &written {
            for secret in [&sig, &token] {
                let found = bytes.windows(secret.len()).any(|w| w == secret.as_bytes());
                assert!(!found, "{what} holds a token");
            }
        }
    }
}

#[test]
fn the_reference_signer_example_runs_and_no_token_is_shown() {
    let work = tempfile::tempdir().unwrap();
    let rt = common::runtime();
    // Tokens of an hour; the storage's clock moves on 10 minutes a tile:
    // a token is refused as expired at its 8th.
    let sas = Sas::new(
        Clock::system(),
        Duration::from_secs(3600),
        Duration::from_secs(600),
    );
    let tiles = common::tiles(1, 64);
    let (server, tokens) = rt.block_on(async {
        let faults = Faults {
            sas: Some(Arc::clone(&sas)),
            ..Faults::default()
        };
        let server = TileServer::start_with(tiles.clone(), faults).await.unwrap();
        let tokens = TokenServer::start(Arc::clone(&sas), None).await.unwrap();
        (server, tokens)
    });
    let api = serve("sentinel-2-l2a", scenes(&server, &tiles));
    let base = server.url("");
    let toml = reference_example()
        .replace(
            "https://planetarycomputer.microsoft.com/api/stac/v1/search",
            &format!("{}/search", api.url),
        )
        .replace(
            "https://planetarycomputer.microsoft.com/api/sas/v1/token/sentinel-2-l2a",
            &tokens.url("sentinel-2-l2a"),
        )
        .replace(
            "https://sentinel2l2a01.blob.core.windows.net/sentinel2-l2/",
            &base,
        );
    assert!(
        !toml.contains("microsoft") && !toml.contains("windows.net"),
        "{toml}"
    );
    std::fs::write(work.path().join("pipeline.toml"), &toml).unwrap();
    let out = warpline()
        .current_dir(work.path())
        .env("WARPLINE_LOG", "trace")
        .args(["run", "pipeline.toml", "--report", "report.json"])
        .args(["--events", "events.jsonl", "--failures", "failures.jsonl"])
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(3), "{said}");
    let report = common::read_json(work.path().join("report.json"));
    assert_eq!(report["items"]["done"], 7, "{said}");
    assert_eq!(report["items"]["failed"], 1, "{said}");
    let failures = std::fs::read_to_string(work.path().join("failures.jsonl")).unwrap();
    assert!(
        failures.contains(&server.url("missing.tif")) && failures.contains("404"),
        "the record names the input as given: {failures}"
    );
    // Refused as expired mid-run, renewed, and done.
    assert!(
        sas.issued() >= 2 && sas.expired() >= 1,
        "{} tokens, {} refused",
        sas.issued(),
        sas.expired()
    );
    assert_eq!(sas.forged(), 0);
    // 7 COGs, their STAC items, and the collection.
    let outputs = files(&work.path().join("out/sentinel-2"));
    assert_eq!(outputs.len(), 7 * 2 + 1, "{outputs:?}");
    assert_no_token_written(&sas, work.path(), said);
    drop((server, tokens, rt));
}
