//! stac-geoparquet files of generated items, as large collections are
//! published (one row per item: `id`, `collection`, `geometry` as WKB,
//! `datetime` as a UTC timestamp, `assets` as a struct of one struct per
//! asset key with its `href` and `type`), written row group by row group
//! with the `parquet` crate's column writers: for the tests and the memory
//! figure of the `stac` source (the 100,000-item file is made here, not
//! kept in the repository). The reference implementation's own file is
//! `tests/data/stac/items.parquet` (scripts/make-stac-geoparquet.py).

use std::path::Path;
use std::sync::Arc;

use parquet::basic::Compression;
use parquet::data_type::{ByteArray, ByteArrayType, Int32Type, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::{SerializedFileWriter, SerializedRowGroupWriter};
use parquet::schema::parser::parse_message_type;

/// The schema written: stac-geoparquet's columns for what an item needs.
const SCHEMA: &str = "message schema {
  optional binary id (STRING);
  optional binary collection (STRING);
  optional binary geometry;
  optional int64 datetime (TIMESTAMP(MICROS,true));
  optional group assets {
    optional group B04 {
      optional binary href (STRING);
      optional binary type (STRING);
    }
  }
}";

/// The WKB of a small polygon, as every generated item's geometry.
fn polygon() -> Vec<u8> {
    let mut wkb = vec![1u8];
    wkb.extend_from_slice(&3u32.to_le_bytes()); // polygon
    wkb.extend_from_slice(&1u32.to_le_bytes()); // one ring
    wkb.extend_from_slice(&5u32.to_le_bytes()); // five points
    for (x, y) in [
        (11.0f64, 46.0f64),
        (11.5, 46.0),
        (11.5, 46.5),
        (11.0, 46.5),
        (11.0, 46.0),
    ] {
        wkb.extend_from_slice(&x.to_le_bytes());
        wkb.extend_from_slice(&y.to_le_bytes());
    }
    wkb
}

/// Where [`write_items`]' item `n` has its asset `B04` unless told:
/// `https://data.test/items/item-NNNNNNN/B04.tif`.
pub fn data_test_href(n: u64) -> String {
    format!("https://data.test/items/item-{n:07}/B04.tif")
}

/// Writes `items` items (`item-0000000` on, asset `B04` at `href(n)`) to
/// `path`, `per_group` rows a row group, zstd-compressed.
///
/// # Errors
/// When the file cannot be written.
pub fn write_items(
    path: &Path,
    items: u64,
    per_group: u64,
    href: &dyn Fn(u64) -> String,
) -> parquet::errors::Result<()> {
    let schema = Arc::new(parse_message_type(SCHEMA)?);
    let props = Arc::new(
        WriterProperties::builder()
            .set_compression(Compression::ZSTD(Default::default()))
            .build(),
    );
    let file = std::fs::File::create(path)?;
    let mut writer = SerializedFileWriter::new(file, schema, props)?;
    let mut first = 0;
    while first < items {
        let rows: Vec<u64> = (first..items.min(first + per_group.max(1))).collect();
        first += rows.len() as u64;
        let text = |f: &dyn Fn(u64) -> String| -> Vec<ByteArray> {
            rows.iter()
                .map(|n| ByteArray::from(f(*n).as_str()))
                .collect()
        };
        let micros: Vec<i64> = rows
            .iter()
            .map(|n| 1_717_200_000_000_000 + i64::try_from(*n).unwrap_or(0) * 1_000_000)
            .collect();
        let mut group = writer.next_row_group()?;
        bytes(&mut group, text(&|n| format!("item-{n:07}")), 1)?;
        bytes(&mut group, text(&|_| "generated".to_owned()), 1)?;
        bytes(&mut group, vec![ByteArray::from(polygon()); rows.len()], 1)?;
        let mut col = group.next_column()?.ok_or_else(too_few)?;
        col.typed::<Int64Type>()
            .write_batch(&micros, Some(&vec![1; micros.len()]), None)?;
        col.close()?;
        bytes(&mut group, text(href), 3)?;
        bytes(
            &mut group,
            text(&|_| "image/tiff; application=geotiff".to_owned()),
            3,
        )?;
        group.close()?;
    }
    writer.close()?;
    Ok(())
}

/// Writes the next column of `group`: `values`, each defined at `level`.
fn bytes<W: std::io::Write + Send>(
    group: &mut SerializedRowGroupWriter<'_, W>,
    values: Vec<ByteArray>,
    level: i16,
) -> parquet::errors::Result<()> {
    let mut col = group.next_column()?.ok_or_else(too_few)?;
    col.typed::<ByteArrayType>()
        .write_batch(&values, Some(&vec![level; values.len()]), None)?;
    col.close()
}

fn too_few() -> parquet::errors::ParquetError {
    parquet::errors::ParquetError::General("the schema has fewer columns".to_owned())
}

/// Writes a Parquet file of `rows` rows with one column, `name` (a file
/// that is Parquet but not stac-geoparquet: no `id`, no `assets`).
///
/// # Errors
/// When the file cannot be written.
pub fn write_not_stac(path: &Path, rows: u64) -> parquet::errors::Result<()> {
    let schema = Arc::new(parse_message_type(
        "message schema { optional binary name (STRING); }",
    )?);
    let file = std::fs::File::create(path)?;
    let mut writer = SerializedFileWriter::new(file, schema, Default::default())?;
    let mut group = writer.next_row_group()?;
    let values = (0..rows).map(|n| ByteArray::from(format!("n{n}").as_str()));
    bytes(&mut group, values.collect(), 1)?;
    group.close()?;
    writer.close()?;
    Ok(())
}

/// Writes two items whose times are stored as other writers store them:
/// `datetime` in nanoseconds (`TIMESTAMP(NANOS)`, as pandas writes), the
/// days of `start_datetime` as a `DATE`, and `end_datetime` as a plain
/// integer (not a time at all). Item `n`: `datetime` 2024-06-01T00:00:00Z
/// plus `n` seconds and 5 nanoseconds, `start_datetime` 2024-06-01.
///
/// # Errors
/// When the file cannot be written.
pub fn write_other_times(path: &Path) -> parquet::errors::Result<()> {
    let schema = Arc::new(parse_message_type(
        "message schema {
  optional binary id (STRING);
  optional int64 datetime (TIMESTAMP(NANOS,true));
  optional int32 start_datetime (DATE);
  optional int64 end_datetime;
  optional group assets {
    optional group B04 {
      optional binary href (STRING);
    }
  }
}",
    )?);
    let file = std::fs::File::create(path)?;
    let mut writer =
        SerializedFileWriter::new(file, schema, Arc::new(WriterProperties::default()))?;
    let mut group = writer.next_row_group()?;
    bytes(
        &mut group,
        vec![ByteArray::from("t-0"), ByteArray::from("t-1")],
        1,
    )?;
    let nanos = [1_717_200_000_000_000_005i64, 1_717_200_001_000_000_005];
    let mut col = group.next_column()?.ok_or_else(too_few)?;
    col.typed::<Int64Type>()
        .write_batch(&nanos, Some(&[1, 1]), None)?;
    col.close()?;
    // 2024-06-01 is day 19,875 of the Unix epoch.
    let mut col = group.next_column()?.ok_or_else(too_few)?;
    col.typed::<Int32Type>()
        .write_batch(&[19_875, 19_875], Some(&[1, 1]), None)?;
    col.close()?;
    let mut col = group.next_column()?.ok_or_else(too_few)?;
    col.typed::<Int64Type>()
        .write_batch(&[7, 8], Some(&[1, 1]), None)?;
    col.close()?;
    let hrefs = vec![
        ByteArray::from("https://data.test/t/0.tif"),
        ByteArray::from("https://data.test/t/1.tif"),
    ];
    bytes(&mut group, hrefs, 3)?;
    group.close()?;
    writer.close()?;
    Ok(())
}
