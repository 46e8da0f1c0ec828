//! The STAC Item `write` makes for each output (the `stac` key), and the
//! provenance record it shares with the GeoTIFF's own metadata.
//!
//! STAC 1.0.0 with the `projection` 2.0.0 (`proj:code` or `proj:wkt2`,
//! `proj:shape`, `proj:transform`), `raster` 1.1.0 (`raster:bands`), `file`
//! 2.1.0 (`file:size`, `file:checksum` as a sha2-256 multihash) and
//! `processing` 1.2.0 (`processing:software`, `processing:lineage`)
//! extensions. The item is the output's name with `.json` for its
//! extension, beside it; its asset's href is relative (`./NAME.tif`), so a
//! folder or a prefix moves whole.
//!
//! Provenance ([`record`]): the inputs as fetch read them, each stage's
//! settings that decide the bytes, gdalwarp's arguments, the GDAL, PROJ and
//! warpline versions and a hash of those settings. It holds no time and
//! nothing of the machine or the run (workers, paths of scratch files), so
//! an output's bytes are the same however it was run.

use std::io::Read as _;
use std::path::Path;

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};
use warpline_engine::Item;
use warpline_gdal::{CrsName, Raster};

use crate::provenance::{INPUTS, INPUT_DATETIME, STAC, STAGES};

/// The STAC version written.
pub(crate) const STAC_VERSION: &str = "1.0.0";

/// The extensions an item declares (their schemas are in
/// `tests/data/stac-schemas/`).
const EXTENSIONS: [&str; 4] = [
    "https://stac-extensions.github.io/projection/v2.0.0/schema.json",
    "https://stac-extensions.github.io/raster/v1.1.0/schema.json",
    "https://stac-extensions.github.io/file/v2.1.0/schema.json",
    "https://stac-extensions.github.io/processing/v1.2.0/schema.json",
];

/// What the write stage knows of how its outputs are written.
#[derive(Debug, Clone)]
pub(crate) struct Written<'a> {
    pub(crate) driver: &'a str,
    pub(crate) options: &'a [(String, String)],
}

/// The provenance record of `item` (see the module's documentation), as
/// written in the item's properties and, compact, in the GeoTIFF.
pub(crate) fn record(item: &Item, written: &Written<'_>) -> Value {
    let versions = warpline_gdal::versions();
    let mut stages = match item.meta.get(STAGES) {
        Some(Value::Array(list)) => list.clone(),
        _ => Vec::new(),
    };
    let options: Map<String, Value> = written
        .options
        .iter()
        .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
        .collect();
    stages.push(json!({
        "kind": "write",
        "settings": { "format": written.driver, "creation_options": options },
    }));
    let mut passed: Vec<Value> = item
        .passed()
        .iter()
        .map(|k| Value::from(k.as_str()))
        .collect();
    passed.push("write".into());
    let hash = settings_hash(&stages);
    json!({
        "warpline": env!("CARGO_PKG_VERSION"),
        "gdal": versions.gdal.to_string(),
        "proj": versions.proj.to_string(),
        "inputs": item.meta.get(INPUTS).cloned().unwrap_or_else(|| json!([])),
        "passed": passed,
        "stages": stages,
        "gdalwarp": gdalwarp_command(item, written),
        "settings_sha256": hash,
    })
}

/// sha2-256 of the stages' settings as canonical JSON (keys sorted): two
/// outputs with the same hash were made by the same settings.
fn settings_hash(stages: &[Value]) -> String {
    let canonical = canonical(&Value::Array(stages.to_vec()));
    hex(&Sha256::digest(canonical.to_string().as_bytes()))
}

/// `v` with every object's keys sorted.
fn canonical(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            Value::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), canonical(&m[k])))
                    .collect(),
            )
        }
        Value::Array(a) => Value::Array(a.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

/// The gdalwarp command line the warp means (`gdalwarp ARGS -of GTiff
/// INPUT OUTPUT.tif`, then `gdal_translate -of COG` for a COG), inputs
/// shown as they were read; `None` without a reproject stage.
fn gdalwarp_command(item: &Item, written: &Written<'_>) -> Value {
    let Some(Value::Array(stages)) = item.meta.get(STAGES) else {
        return Value::Null;
    };
    let Some(args) = stages
        .iter()
        .find(|s| s.get("kind").and_then(Value::as_str) == Some("reproject"))
        .and_then(|s| s.get("gdalwarp"))
        .and_then(Value::as_array)
    else {
        return Value::Null;
    };
    let mut words: Vec<String> = vec!["gdalwarp".into()];
    words.extend(args.iter().filter_map(Value::as_str).map(str::to_owned));
    let co = written.options.iter().map(|(k, v)| format!("{k}={v}"));
    if written.driver == "GTiff" {
        words.extend(["-of".to_owned(), "GTiff".to_owned()]);
        words.extend(co.flat_map(|o| ["-co".to_owned(), o]));
    } else {
        words.extend(["-of".to_owned(), "GTiff".to_owned()]);
    }
    Value::Array(words.into_iter().map(Value::from).collect())
}

/// What an item says of its output file.
#[derive(Debug, Clone)]
pub(crate) struct FileFacts {
    /// The output's file name, relative to the item (`./NAME.tif`).
    pub(crate) href: String,
    pub(crate) size: u64,
    /// sha2-256 multihash, hex (`1220` then the digest).
    pub(crate) checksum: String,
}

/// The file's size and sha2-256 multihash.
pub(crate) fn file_facts(path: &Path, href: String) -> std::io::Result<FileFacts> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        size += n as u64;
    }
    Ok(FileFacts {
        href,
        size,
        checksum: format!("1220{}", hex(&hasher.finalize())),
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What the item is made of beyond the raster: its id, collection, where
/// the collection is from it, its time, and the output's bounds in
/// EPSG:4326 (`[west, south, east, north]`, `west > east` across the
/// antimeridian).
#[derive(Debug, Clone)]
pub(crate) struct ItemFacts<'a> {
    pub(crate) id: String,
    pub(crate) collection: &'a str,
    /// The collection's href from the item (`../collection.json`).
    pub(crate) collection_href: String,
    /// When the run started (the date of last resort), RFC 3339.
    pub(crate) run_started: &'a str,
    /// When the item is written, RFC 3339.
    pub(crate) created: String,
    pub(crate) media_type: &'a str,
}

/// What an item says of the raster written: read before the driver
/// copies it (the file has the same grid, CRS and bands).
#[derive(Debug, Clone)]
pub(crate) struct Described {
    projection: Map<String, Value>,
    bands: Value,
    /// The footprint in EPSG:4326, `[west, south, east, north]`.
    pub(crate) bounds: Option<[f64; 4]>,
}

/// See [`Described`].
pub(crate) fn describe(raster: &Raster) -> Described {
    Described {
        projection: projection(raster),
        bands: bands(raster),
        bounds: super::publish::bounds(raster),
    }
}

/// The STAC Item of an output.
pub(crate) fn item_json(
    item: &Item,
    raster: &Described,
    facts: &ItemFacts<'_>,
    file: &FileFacts,
    provenance: &Value,
) -> Value {
    let mut properties = times(item, facts.run_started);
    properties.insert("created".into(), facts.created.clone().into());
    properties.extend(raster.projection.clone());
    let versions = warpline_gdal::versions();
    properties.insert(
        "processing:software".into(),
        json!({
            "warpline": env!("CARGO_PKG_VERSION"),
            "GDAL": versions.gdal.to_string(),
            "PROJ": versions.proj.to_string(),
        }),
    );
    properties.insert("processing:lineage".into(), lineage(provenance).into());
    properties.insert("warpline:provenance".into(), provenance.clone());
    let (geometry, bbox) = match raster.bounds {
        Some(b) => (geometry(b), json!(b)),
        None => (Value::Null, Value::Null),
    };
    let mut out = json!({
        "type": "Feature",
        "stac_version": STAC_VERSION,
        "stac_extensions": EXTENSIONS,
        "id": facts.id,
        "geometry": geometry,
        "bbox": bbox,
        "properties": properties,
        "links": [
            { "rel": "collection", "href": facts.collection_href, "type": "application/json" },
            { "rel": "parent", "href": facts.collection_href, "type": "application/json" },
            { "rel": "root", "href": facts.collection_href, "type": "application/json" },
        ],
        "assets": { "data": {
            "href": file.href,
            "type": facts.media_type,
            "roles": ["data"],
            "file:size": file.size,
            "file:checksum": file.checksum,
            "raster:bands": raster.bands,
        }},
        "collection": facts.collection,
    });
    if raster.bounds.is_none() {
        // A null geometry has no bbox (STAC 1.0.0).
        if let Some(m) = out.as_object_mut() {
            m.remove("bbox");
        }
    }
    out
}

/// The item's `datetime` (or `start_datetime` and `end_datetime` with a
/// null `datetime`): the source STAC item's, else the input's own
/// `TIFFTAG_DATETIME`, else the run's start.
fn times(item: &Item, run_started: &str) -> Map<String, Value> {
    let mut out = Map::new();
    let source = item.meta.get(STAC);
    let field = |name: &str| source.and_then(|s| s.get(name)).and_then(Value::as_str);
    if let Some(d) = field("datetime") {
        out.insert("datetime".into(), d.into());
        return out;
    }
    if let (Some(start), Some(end)) = (field("start_datetime"), field("end_datetime")) {
        out.insert("datetime".into(), Value::Null);
        out.insert("start_datetime".into(), start.into());
        out.insert("end_datetime".into(), end.into());
        return out;
    }
    let own = item.meta.get(INPUT_DATETIME).and_then(Value::as_str);
    out.insert("datetime".into(), own.unwrap_or(run_started).into());
    out
}

/// `proj:code` (or `proj:wkt2`), `proj:shape` and `proj:transform`.
fn projection(raster: &Raster) -> Map<String, Value> {
    let mut out = Map::new();
    match warpline_gdal::crs_name(&raster.crs_wkt()) {
        Some(CrsName::Code(code)) => {
            out.insert("proj:code".into(), code.into());
        }
        Some(CrsName::Wkt2(wkt)) => {
            out.insert("proj:code".into(), Value::Null);
            out.insert("proj:wkt2".into(), wkt.into());
        }
        None => {
            out.insert("proj:code".into(), Value::Null);
        }
    }
    let (w, h) = raster.size();
    out.insert("proj:shape".into(), json!([h, w]));
    if let Some(gt) = raster.geo_transform() {
        // GDAL's order (c, a, b, f, d, e) as STAC's (a, b, c, d, e, f).
        out.insert(
            "proj:transform".into(),
            json!([gt[1], gt[2], gt[0], gt[4], gt[5], gt[3]]),
        );
    }
    out
}

/// `raster:bands`: each band's data type, nodata, scale, offset and unit.
fn bands(raster: &Raster) -> Value {
    let scaling = raster.band_scaling();
    let list = (1..=raster.band_count()).map(|b| {
        let mut band = Map::new();
        let dtype = raster.data_type(b).map(|t| stac_type(&t.name()));
        band.insert("data_type".into(), dtype.unwrap_or("other").into());
        if let Some(v) = raster.nodata(b) {
            band.insert("nodata".into(), nodata(v));
        }
        if let Some(s) = scaling.get(b - 1) {
            if let Some(scale) = s.scale.filter(|v| *v != 1.0) {
                band.insert("scale".into(), scale.into());
            }
            if let Some(offset) = s.offset.filter(|v| *v != 0.0) {
                band.insert("offset".into(), offset.into());
            }
            if !s.unit.is_empty() {
                band.insert("unit".into(), s.unit.clone().into());
            }
        }
        Value::Object(band)
    });
    Value::Array(list.collect())
}

/// The raster extension's name for GDAL's data type `name`.
fn stac_type(name: &str) -> &'static str {
    match name {
        "Byte" => "uint8",
        "Int8" => "int8",
        "UInt16" => "uint16",
        "Int16" => "int16",
        "UInt32" => "uint32",
        "Int32" => "int32",
        "UInt64" => "uint64",
        "Int64" => "int64",
        "Float32" => "float32",
        "Float64" => "float64",
        "CInt16" => "cint16",
        "CInt32" => "cint32",
        "CFloat32" => "cfloat32",
        "CFloat64" => "cfloat64",
        _ => "other",
    }
}

/// A nodata value as the raster extension writes it (`"nan"`, `"inf"`,
/// `"-inf"` for those).
fn nodata(v: f64) -> Value {
    if v.is_nan() {
        "nan".into()
    } else if v.is_infinite() {
        if v > 0.0 { "inf" } else { "-inf" }.into()
    } else if v.fract() == 0.0 && v.abs() < 9.0e15 {
        // A whole number as an integer (`0`, not `0.0`).
        Value::from(v as i64)
    } else {
        v.into()
    }
}

/// The footprint as GeoJSON: a Polygon, or a MultiPolygon of the two parts
/// either side of the antimeridian (STAC's rule for such geometries).
pub(crate) fn geometry([w, s, e, n]: [f64; 4]) -> Value {
    let ring = |w: f64, e: f64| json!([[[w, s], [e, s], [e, n], [w, n], [w, s]]]);
    if w > e {
        json!({ "type": "MultiPolygon", "coordinates": [ring(w, 180.0), ring(-180.0, e)] })
    } else {
        json!({ "type": "Polygon", "coordinates": ring(w, e) })
    }
}

/// The lineage in a sentence: the inputs and the gdalwarp command.
fn lineage(provenance: &Value) -> String {
    let inputs: Vec<&str> = provenance["inputs"]
        .as_array()
        .map(|l| l.iter().filter_map(|i| i["href"].as_str()).collect())
        .unwrap_or_default();
    let command = provenance["gdalwarp"].as_array().map(|w| {
        let words: Vec<&str> = w.iter().filter_map(Value::as_str).collect();
        words.join(" ")
    });
    let mut text = format!("Made by warpline from {}", inputs.join(", "));
    if let Some(c) = command {
        text.push_str(&format!(", warped as `{c}`"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_footprint_across_the_antimeridian_is_split() {
        let g = geometry([170.0, -10.0, -170.0, 10.0]);
        assert_eq!(g["type"], "MultiPolygon");
        assert_eq!(g["coordinates"][0][0][1], json!([180.0, -10.0]));
        assert_eq!(g["coordinates"][1][0][0], json!([-180.0, -10.0]));
        assert_eq!(geometry([1.0, 2.0, 3.0, 4.0])["type"], "Polygon");
    }

    #[test]
    fn nodata_values_are_written_as_the_raster_extension_says() {
        assert_eq!(nodata(f64::NAN), json!("nan"));
        assert_eq!(nodata(f64::NEG_INFINITY), json!("-inf"));
        assert_eq!(nodata(0.0), json!(0));
        assert_eq!(nodata(-9999.5), json!(-9999.5));
    }

    #[test]
    fn the_settings_hash_ignores_key_order() {
        let a =
            [json!({"kind": "reproject", "settings": {"crs": "EPSG:3857", "resampling": "near"}})];
        let b =
            [json!({"settings": {"resampling": "near", "crs": "EPSG:3857"}, "kind": "reproject"})];
        let c =
            [json!({"kind": "reproject", "settings": {"crs": "EPSG:4326", "resampling": "near"}})];
        assert_eq!(settings_hash(&a), settings_hash(&b));
        assert_ne!(settings_hash(&a), settings_hash(&c));
        assert_eq!(settings_hash(&a).len(), 64);
    }
}
