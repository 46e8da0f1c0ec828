//! A stac-geoparquet file as a source of items: one row per item, as large
//! collections are published (columns `id`, `collection`, `assets` (a
//! struct of one struct per asset key, each with its `href`), `links`,
//! the times `datetime`, `start_datetime`, `end_datetime` as timestamps
//! (milli-, micro- or nanoseconds), dates or strings; another type is left
//! out, said once per column;
//! `geometry`, `bbox` and the other properties are not read).
//!
//! Read with the `parquet` crate's record API (no Arrow: a few crates, not
//! a columnar engine, for a handful of strings a row), projected to the
//! columns used and the asset keys asked for. Rows are read in chunks of
//! [`CHUNK`] on a blocking thread, row group after row group, the next
//! chunk while the items of the one before are admitted: never more than
//! one chunk ahead, so memory is flat however many rows the file has.
//!
//! A file that is not Parquet, or not stac-geoparquet (no `id` or
//! `assets` column, an asset key no item has), fails the run when it
//! opens, naming the file; a row without an id, or without the asset
//! asked for, is a failed item naming the file and row; a row group that
//! cannot be read ends the source with a failed item naming it.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::reader::RowIter;
use parquet::record::{Field, Row};
use parquet::schema::types::{Type, TypePtr};
use url::Url;
use warpline_engine::{Input, Source, SourceError};

use super::inputs::{Maker, Taken};
use super::read::{Asset, Item, Link, Times};

/// Rows read on the blocking thread at a time (and so the most read
/// ahead of admission).
const CHUNK: usize = 256;

/// Rows the record reader decodes at once, per column.
const BATCH: usize = 256;

/// The item columns read besides `assets` and `links`.
const COLUMNS: [&str; 5] = [
    "id",
    "collection",
    "datetime",
    "start_datetime",
    "end_datetime",
];

/// The rows of one file, where the reading stands.
struct Rows {
    iter: RowIter<'static>,
    /// The file, as shown in messages.
    shown: String,
    /// The next row's number (from 0) and the rows of each row group.
    row: u64,
    /// Rows read so far, as the run sees it.
    read: Arc<AtomicU64>,
    groups: Vec<u64>,
    done: bool,
    /// The time columns stored as nanoseconds (`INT64`, `TIMESTAMP(NANOS)`:
    /// the record API reads them as plain integers).
    nanos: Vec<String>,
    /// The time columns already said to hold something that is not a
    /// time (said once each).
    said: Vec<String>,
}

/// One row read: an item and its row's number, or a failed item.
enum Got {
    Item(u64, Item),
    Failed(SourceError),
}

/// Opens `path` and checks it is stac-geoparquet with the `assets` asked
/// for; the rows, projected to what an item's inputs need.
fn open_rows(path: &Path, assets: &[String]) -> Result<(Rows, u64), String> {
    let shown = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read {shown}: {e}"))?;
    let reader = SerializedFileReader::new(file)
        .map_err(|e| format!("{shown}: not a Parquet file ({e})"))?;
    let meta = reader.metadata();
    let groups: Vec<u64> = meta
        .row_groups()
        .iter()
        .map(|g| u64::try_from(g.num_rows()).unwrap_or(0))
        .collect();
    let schema = meta.file_metadata().schema();
    let nanos = nanos_columns(schema);
    let projection = projection(schema, assets).map_err(|m| format!("{shown}: {m}"))?;
    let iter = RowIter::from_file_into(Box::new(reader))
        .project(Some(projection))
        .map_err(|e| format!("{shown}: {e}"))?
        .with_batch_size(BATCH);
    let total = groups.iter().sum();
    let rows = Rows {
        iter,
        shown,
        row: 0,
        read: Arc::new(AtomicU64::new(0)),
        groups,
        done: false,
        nanos,
        said: Vec::new(),
    };
    Ok((rows, total))
}

/// The time columns whose logical type is a timestamp in nanoseconds.
fn nanos_columns(root: &Type) -> Vec<String> {
    use parquet::basic::{LogicalType, TimeUnit};
    root.get_fields()
        .iter()
        .filter(|f| f.is_primitive() && COLUMNS[2..].contains(&f.name()))
        .filter(|f| {
            matches!(
                f.get_basic_info().logical_type_ref(),
                Some(LogicalType::Timestamp(t)) if matches!(t.unit, TimeUnit::NANOS)
            )
        })
        .map(|f| f.name().to_owned())
        .collect()
}

/// The file's schema cut to the columns read: `id`, `collection`, the
/// times, `links` (`rel` and `href` of each), and the `href` of each asset
/// asked for. Says what is missing when the file is not stac-geoparquet.
fn projection(root: &Type, assets: &[String]) -> Result<Type, String> {
    let field = |name: &str| root.get_fields().iter().find(|f| f.name() == name);
    let names: Vec<&str> = root.get_fields().iter().map(|f| f.name()).collect();
    let mut fields: Vec<TypePtr> = Vec::new();
    for name in ["id", "assets"] {
        if field(name).is_none() {
            return Err(format!(
                "not stac-geoparquet: no `{name}` column (its columns: {})",
                names.join(", ")
            ));
        }
    }
    for name in COLUMNS {
        if let Some(f) = field(name).filter(|f| f.is_primitive()) {
            fields.push(Arc::clone(f));
        }
    }
    if let Some(links) = field("links") {
        fields.push(links_projection(links).unwrap_or_else(|| Arc::clone(links)));
    }
    let all = field("assets")
        .filter(|a| a.is_group())
        .ok_or("not stac-geoparquet: `assets` is not a struct of one struct per asset key")?;
    let keys: Vec<&str> = all.get_fields().iter().map(|f| f.name()).collect();
    let mut kept = Vec::new();
    for key in assets {
        let Some(asset) = all.get_fields().iter().find(|f| f.name() == key) else {
            return Err(format!(
                "no item has an asset {key:?} (the file's assets: {})",
                keys.join(", ")
            ));
        };
        let href = asset
            .is_group()
            .then(|| asset.get_fields().iter().find(|f| f.name() == "href"))
            .flatten()
            .ok_or_else(|| format!("asset {key:?} has no `href`"))?;
        kept.push(Arc::new(group_like(asset, vec![Arc::clone(href)])?));
    }
    fields.push(Arc::new(group_like(all, kept)?));
    Type::group_type_builder(root.name())
        .with_fields(fields)
        .build()
        .map_err(|e| e.to_string())
}

/// `links` (a list of structs) cut to each link's `rel` and `href`; `None`
/// when it is not the list Parquet's LIST type lays out (then it is read
/// whole).
fn links_projection(links: &TypePtr) -> Option<TypePtr> {
    let [list] = links.get_fields() else {
        return None;
    };
    let [element] = list.get_fields() else {
        return None;
    };
    let kept: Vec<TypePtr> = element
        .get_fields()
        .iter()
        .filter(|f| matches!(f.name(), "rel" | "href"))
        .cloned()
        .collect();
    let element = group_like(element, kept).ok()?;
    let list = group_like(list, vec![Arc::new(element)]).ok()?;
    Some(Arc::new(group_like(links, vec![Arc::new(list)]).ok()?))
}

/// A group as `like` (its name, repetition and annotations) with `fields`.
fn group_like(like: &Type, fields: Vec<TypePtr>) -> Result<Type, String> {
    let info = like.get_basic_info();
    let mut b = Type::group_type_builder(info.name())
        .with_converted_type(info.converted_type())
        .with_logical_type(info.logical_type_ref().cloned())
        .with_id(info.has_id().then(|| info.id()))
        .with_fields(fields);
    if info.has_repetition() {
        b = b.with_repetition(info.repetition());
    }
    b.build().map_err(|e| e.to_string())
}

impl Rows {
    /// Up to [`CHUNK`] rows; fewer at the end (then `done`). A row group
    /// that cannot be read ends the rows with a failed item naming it.
    fn chunk(&mut self) -> Vec<Got> {
        let mut got = Vec::with_capacity(CHUNK);
        while got.len() < CHUNK && !self.done {
            // The record API panics on some malformed files: a failed
            // item, not a lost thread.
            let next = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.iter.next()));
            let row = self.row;
            let message = match next {
                Ok(None) => {
                    self.done = true;
                    break;
                }
                Ok(Some(Ok(r))) => {
                    self.row += 1;
                    self.read.store(self.row, Ordering::Release);
                    got.push(self.item(row, &r));
                    continue;
                }
                Ok(Some(Err(e))) => e.to_string(),
                Err(panic) => panic_text(&*panic),
            };
            self.done = true;
            let group = self.group_of(row);
            got.push(Got::Failed(SourceError {
                id: format!("{} row group {group}", self.shown),
                message: format!(
                    "{}: row group {group} cannot be read from row {row} on: {message}",
                    self.shown
                ),
            }));
        }
        got
    }

    /// The row group of row `row`.
    fn group_of(&self, row: u64) -> usize {
        let mut end = 0;
        for (i, n) in self.groups.iter().enumerate() {
            end += n;
            if row < end {
                return i;
            }
        }
        self.groups.len().saturating_sub(1)
    }

    /// The time in column `name` of a row, as RFC 3339; a value that is
    /// not a time is left out, and said once per column.
    fn time(&mut self, name: &str, value: &Field) -> Option<String> {
        let nanos = self.nanos.iter().any(|n| n == name);
        match time(value, nanos) {
            Ok(t) => t,
            Err(kind) => {
                if !self.said.iter().any(|n| n == name) {
                    self.said.push(name.to_owned());
                    tracing::warn!(
                        "{}: column `{name}` holds {kind}, not a timestamp, a date or a string: \
                         its items take their time from elsewhere (see the write stage's `stac`)",
                        self.shown
                    );
                }
                None
            }
        }
    }

    /// The item of row `row`.
    fn item(&mut self, row: u64, r: &Row) -> Got {
        let mut item = Item {
            id: None,
            assets: Default::default(),
            links: Vec::new(),
            properties: Times::default(),
            collection: None,
        };
        for (name, value) in r.get_column_iter() {
            match name.as_str() {
                "id" => item.id = text(value),
                "collection" => item.collection = text(value),
                "datetime" => item.properties.datetime = self.time(name, value),
                "start_datetime" => item.properties.start_datetime = self.time(name, value),
                "end_datetime" => item.properties.end_datetime = self.time(name, value),
                "links" => item.links = links(value),
                "assets" => item.assets = assets(value),
                _ => {}
            }
        }
        // An item without an id is the inputs' maker's to refuse, naming
        // the row (as for JSON items).
        Got::Item(row, item)
    }
}

/// What a panic said.
fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    let said = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned());
    format!("malformed ({})", said.unwrap_or_default())
}

fn text(f: &Field) -> Option<String> {
    match f {
        Field::Str(s) => Some(s.clone()),
        _ => None,
    }
}

/// A time as RFC 3339: a timestamp column, as stac-geoparquet writes
/// them (milli-, micro- or, `nanos`, nanoseconds: an integer to the record
/// API), a date (midnight UTC), or a string as it was given; `Ok(None)`
/// for a null; what the value is when it is none of these.
fn time(f: &Field, nanos: bool) -> Result<Option<String>, &'static str> {
    let at = match f {
        Field::Null => return Ok(None),
        Field::Str(s) => return Ok(Some(s.clone())),
        Field::TimestampMicros(us) => chrono::DateTime::from_timestamp_micros(*us),
        Field::TimestampMillis(ms) => chrono::DateTime::from_timestamp_millis(*ms),
        Field::Long(ns) if nanos => Some(chrono::DateTime::from_timestamp_nanos(*ns)),
        Field::Date(days) => chrono::DateTime::from_timestamp(i64::from(*days) * 86_400, 0),
        Field::Long(_) => return Err("integers"),
        _ => return Err("another type"),
    };
    Ok(at.map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)))
}

fn links(f: &Field) -> Vec<Link> {
    let Field::ListInternal(list) = f else {
        return Vec::new();
    };
    let link = |l: &Row| {
        let field = |name: &str| {
            l.get_column_iter()
                .find(|(n, _)| n.as_str() == name)
                .and_then(|(_, v)| text(v))
        };
        Link {
            rel: field("rel"),
            href: field("href"),
            method: None,
            body: None,
            merge: false,
            headers: Default::default(),
        }
    };
    list.elements()
        .iter()
        .filter_map(|e| match e {
            Field::Group(l) => Some(link(l)),
            _ => None,
        })
        .collect()
}

/// The assets a row has (a null struct: the item has no such asset).
fn assets(f: &Field) -> std::collections::BTreeMap<String, Asset> {
    let Field::Group(all) = f else {
        return Default::default();
    };
    all.get_column_iter()
        .filter_map(|(key, value)| {
            let Field::Group(asset) = value else {
                return None;
            };
            let href = asset
                .get_column_iter()
                .find(|(n, _)| n.as_str() == "href")
                .and_then(|(_, v)| text(v));
            Some((key.clone(), Asset { href }))
        })
        .collect()
}

/// The run over a stac-geoparquet file.
pub(super) struct ParquetRun {
    maker: Maker,
    /// The file as a URL: what relative hrefs are relative to.
    base: Url,
    shown: String,
    len: u64,
    /// Rows read from the file so far.
    read: Arc<AtomicU64>,
    pending: VecDeque<Taken>,
    /// The rows, when no chunk is being read.
    rows: Option<Rows>,
    /// The chunk being read.
    ahead: Option<tokio::task::JoinHandle<(Rows, Vec<Got>)>>,
    ended: bool,
    /// Whether the end was said (no items at all is a failed item).
    said_end: bool,
}

impl ParquetRun {
    /// Opens `path` (its footer and schema are read now).
    pub(super) fn open(path: &Path, maker: Maker) -> Result<Self, String> {
        let (rows, total) = open_rows(path, &maker.assets)?;
        let absolute = std::path::absolute(path).map_err(|e| format!("{}: {e}", rows.shown))?;
        let base = Url::from_file_path(&absolute)
            .map_err(|()| format!("{}: not a usable path", rows.shown))?;
        Ok(ParquetRun {
            len: total * maker.assets.len() as u64,
            read: Arc::clone(&rows.read),
            shown: rows.shown.clone(),
            maker,
            base,
            pending: VecDeque::new(),
            rows: Some(rows),
            ahead: None,
            ended: false,
            said_end: false,
        })
    }

    /// Reads the next chunk on a blocking thread.
    fn read(rows: Rows) -> tokio::task::JoinHandle<(Rows, Vec<Got>)> {
        tokio::task::spawn_blocking(move || {
            let mut rows = rows;
            let got = rows.chunk();
            (rows, got)
        })
    }
}

#[async_trait]
impl Source for ParquetRun {
    async fn next(&mut self) -> Option<Result<Input, SourceError>> {
        loop {
            if let Some(input) = self.pending.pop_front() {
                return Some(input);
            }
            if self.ended {
                if self.said_end || self.maker.items > 0 {
                    return None;
                }
                self.said_end = true;
                return Some(Err(SourceError {
                    id: self.shown.clone(),
                    message: format!("{}: no STAC items found", self.shown),
                }));
            }
            let task = match (self.ahead.take(), self.rows.take()) {
                (Some(task), _) => task,
                (None, Some(rows)) => Self::read(rows),
                (None, None) => {
                    self.ended = true;
                    continue;
                }
            };
            let (rows, got) = match task.await {
                Ok(read) => read,
                Err(e) => {
                    self.ended = true;
                    return Some(Err(SourceError {
                        id: self.shown.clone(),
                        message: format!(
                            "{}: its reading stopped after {} rows: {e}",
                            self.shown,
                            self.read.load(Ordering::Acquire)
                        ),
                    }));
                }
            };
            if rows.done {
                self.ended = true;
            } else {
                // The next chunk, while this one's items are admitted.
                self.ahead = Some(Self::read(rows));
            }
            for g in got {
                match g {
                    Got::Item(row, item) => {
                        let what = format!("{} row {row}", self.shown);
                        self.maker
                            .item(item, &self.base, &what, true, &mut self.pending);
                    }
                    Got::Failed(e) => self.pending.push_back(Err(e)),
                }
            }
        }
    }

    fn len_hint(&self) -> Option<u64> {
        Some(self.len)
    }
}

#[cfg(test)]
mod tests;
