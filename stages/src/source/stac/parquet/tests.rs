//! The stac-geoparquet source: the reference implementation's file
//! (tests/data/stac/items.parquet, written by the `stac-geoparquet`
//! package), generated files, and files that are not what they should be.

use std::path::{Path, PathBuf};

use serde_json::Value;
use warpline_engine::{Source, SourceSpec};

use super::super::{Kind, Stac};
use super::*;
use crate::source::Schemes;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/stac/items.parquet")
}

fn spec(path: &Path, assets: &[&str]) -> Stac {
    Stac {
        kind: Kind::Geoparquet,
        first: super::super::read::Request::get(Url::from_file_path(path).unwrap()),
        assets: assets.iter().map(|a| a.to_string()).collect(),
        schemes: Schemes {
            allowed: crate::source::KNOWN_SCHEMES
                .iter()
                .map(|s| s.to_string())
                .collect(),
        },
        client: reqwest::Client::new(),
    }
}

async fn all(source: &mut Box<dyn Source>) -> Vec<Result<Input, SourceError>> {
    let mut got = Vec::new();
    while let Some(x) = source.next().await {
        got.push(x);
    }
    got
}

/// Every item of the reference file, its assets resolved as a JSON
/// item's are (absolute, against its `self` link, s3://), its times and
/// collection carried; the item without `B08` a failed input naming the
/// file and row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_files_items_are_inputs() {
    let mut source = spec(&fixture(), &["B04", "B08"]).open().unwrap();
    assert_eq!(source.len_hint(), Some(10));
    let got = all(&mut source).await;
    let ok: Vec<(String, String)> = got
        .iter()
        .filter_map(|g| g.as_ref().ok())
        .map(|i| (i.id.clone(), i.source.clone()))
        .collect();
    let want = [
        ("S2B_T33_0_B04", "https://data.test/s2/0/B04.tif"),
        ("S2B_T33_0_B08", "https://data.test/s2/0/B08.tif"),
        ("S2B_T33_1_B04", "https://data.test/s2/1/B04.tif"),
        ("S2B_T33_1_B08", "https://data.test/s2/1/B08.tif"),
        ("S2B_T33_2_B04", "s3://bucket/s2/2/B04.tif"),
        ("S2B_T33_2_B08", "s3://bucket/s2/2/B08.tif"),
        ("S2B_T33_3_B04", "https://data.test/s2/3/B04.tif"),
        ("S2B_T33_4_B04", "https://data.test/s2/4/B04.tif"),
        ("S2B_T33_4_B08", "https://data.test/s2/4/B08.tif"),
    ];
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(ok, want);
    let failed: Vec<&SourceError> = got.iter().filter_map(|g| g.as_ref().err()).collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].id, "S2B_T33_3_B08");
    let file = fixture().display().to_string();
    assert_eq!(
        failed[0].message,
        format!("item \"S2B_T33_3\" has no asset \"B08\" (its assets: B04) ({file} row 3)")
    );
    let meta = |n: usize| got[n].as_ref().unwrap().meta["stac"].clone();
    assert_eq!(meta(0)["datetime"], "2024-06-01T10:20:30.500Z");
    assert_eq!(meta(0)["collection"], "s2");
    assert_eq!(meta(0)["item"], "S2B_T33_0");
    assert_eq!(meta(4)["start_datetime"], "2024-06-03T00:00:00Z");
    assert_eq!(meta(4)["end_datetime"], "2024-06-03T23:59:59Z");
    assert_eq!(meta(4).get("datetime"), None::<&Value>);
}

/// A file of many row groups is read a chunk at a time, the next chunk
/// while this one's inputs are taken: never more than one chunk ahead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_are_read_a_chunk_ahead() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("items.parquet");
    let n = (CHUNK * 3 + 10) as u64;
    warpline_testkit::geoparquet::write_items(
        &path,
        n,
        100,
        &warpline_testkit::geoparquet::data_test_href,
    )
    .unwrap();
    let mut source = ParquetRun::open(&path, spec(&path, &["B04"]).maker()).unwrap();
    assert_eq!(source.len_hint(), Some(n));
    assert_eq!(
        source.read.load(Ordering::Acquire),
        0,
        "nothing read at open"
    );
    let first = source.next().await.unwrap().unwrap();
    assert_eq!(first.id, "item-0000000_B04");
    assert_eq!(first.source, "https://data.test/items/item-0000000/B04.tif");
    assert_eq!(first.meta["stac"]["datetime"], "2024-06-01T00:00:00Z");
    let mut ids = vec![first.id];
    while let Some(input) = source.next().await {
        // The inputs of chunk c taken: chunk c + 1 read, or being read.
        let chunk = ids.len() / CHUNK;
        let read = source.read.load(Ordering::Acquire);
        assert!(
            read <= ((chunk + 2) * CHUNK) as u64,
            "{read} rows read at input {}",
            ids.len()
        );
        ids.push(input.unwrap().id);
    }
    assert_eq!(ids.len() as u64, n);
    let unique: std::collections::HashSet<&String> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len(), "every item once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_that_is_not_stac_geoparquet_fails_at_open_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("items.parquet");
    std::fs::write(&json, br#"{"type": "FeatureCollection"}"#).unwrap();
    let e = spec(&json, &["B04"]).open().err().unwrap().0;
    assert!(
        e.starts_with(&format!("{}: not a Parquet file", json.display())),
        "{e}"
    );

    let other = dir.path().join("other.parquet");
    warpline_testkit::geoparquet::write_not_stac(&other, 3).unwrap();
    let e = spec(&other, &["B04"]).open().err().unwrap().0;
    assert_eq!(
        e,
        format!(
            "{}: not stac-geoparquet: no `id` column (its columns: name)",
            other.display()
        )
    );

    let e = spec(&fixture(), &["B04", "visual"]).open().err().unwrap().0;
    assert!(
        e.ends_with("no item has an asset \"visual\" (the file's assets: B04, B08)"),
        "{e}"
    );

    let missing = dir.path().join("missing.parquet");
    let e = spec(&missing, &["B04"]).open().err().unwrap().0;
    assert!(e.starts_with("cannot read "), "{e}");
}

/// A file cut short (its footer gone) is refused; one whose row group is
/// damaged past the footer ends with a failed item naming the row group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_file_is_named_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("items.parquet");
    warpline_testkit::geoparquet::write_items(
        &path,
        500,
        100,
        &warpline_testkit::geoparquet::data_test_href,
    )
    .unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    let cut = dir.path().join("cut.parquet");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let e = spec(&cut, &["B04"]).open().err().unwrap().0;
    assert!(e.contains("not a Parquet file"), "{e}");
    // 2,000 bytes in the middle zeroed: a page there cannot be read (a
    // zero is thrift's end of a struct, so no page header reads as one).
    let middle = bytes.len() / 2;
    for b in &mut bytes[middle - 2000..middle] {
        *b = 0;
    }
    std::fs::write(&path, &bytes).unwrap();
    let mut source = spec(&path, &["B04"]).open().unwrap();
    let got = all(&mut source).await;
    let failed: Vec<&SourceError> = got.iter().filter_map(|g| g.as_ref().err()).collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    let file = path.display().to_string();
    assert!(
        failed[0].id.starts_with(&format!("{file} row group ")),
        "{:?}",
        failed[0]
    );
    assert!(
        failed[0].message.contains("cannot be read from row"),
        "{:?}",
        failed[0]
    );
    assert!(got.len() < 500, "the source ended at the damage");
}

/// Times as other writers store them: nanoseconds (`TIMESTAMP(NANOS)`,
/// which the record API reads as integers) and a `DATE` are read as
/// times; a plain integer column is not a time, and is left out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nanosecond_and_date_times_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("times.parquet");
    warpline_testkit::geoparquet::write_other_times(&path).unwrap();
    let mut source = spec(&path, &["B04"]).open().unwrap();
    let got = all(&mut source).await;
    let stac: Vec<Value> = got
        .iter()
        .map(|g| g.as_ref().unwrap().meta["stac"].clone())
        .collect();
    assert_eq!(stac.len(), 2);
    assert_eq!(stac[0]["datetime"], "2024-06-01T00:00:00.000000005Z");
    assert_eq!(stac[1]["datetime"], "2024-06-01T00:00:01.000000005Z");
    assert_eq!(stac[0]["start_datetime"], "2024-06-01T00:00:00Z");
    assert!(
        stac[0].get("end_datetime").is_none_or(Value::is_null),
        "{}",
        stac[0]
    );
}
