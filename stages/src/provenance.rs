//! How an output was made, as the stages record it in the item's
//! [`Meta`](warpline_engine::item::Meta) on the way to `write`, which puts
//! it in the output's STAC item and in the GeoTIFF itself (a leaf module:
//! every raster stage records, no stage imports another).
//!
//! - `meta["inputs"]` (fetch): each input read, [`Origin`]: its address
//!   with credentials removed, size, ETag and modification time where the
//!   server or the file system said them;
//! - `meta["stages"]` (fetch, decode, reproject): each stage's settings
//!   that decide the output's bytes, `{"kind": ..., "settings": {...}}`,
//!   in the order the item passed them; reproject adds `gdalwarp`, its
//!   warp as gdalwarp's arguments;
//! - `meta["input_datetime"]` (decode): the input's own `TIFFTAG_DATETIME`,
//!   as RFC 3339;
//! - `meta["stac"]` (the `stac` source): the source item's id, asset,
//!   collection and times.
//!
//! In the GeoTIFF, the record is the element `warpline:provenance` (JSON
//! text) of its XMP packet (GDAL's `xml:XMP` metadata domain, TIFF tag
//! 700): [`xmp_packet`], [`from_xmp`]. XMP is the one non-default domain
//! GDAL's GTiff and COG drivers copy into a file on every GDAL version
//! warpline supports, and the standard place for such a record.

use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use warpline_engine::Item;

/// The meta key of the inputs read ([`Origin`]s).
pub const INPUTS: &str = "inputs";
/// The meta key of the stages' recorded settings.
pub const STAGES: &str = "stages";
/// The meta key of the input's own date (`TIFFTAG_DATETIME`).
pub const INPUT_DATETIME: &str = "input_datetime";
/// The meta key the `stac` source records the source item under.
pub const STAC: &str = "stac";

/// One input as it was read: enough to tell later whether it is still the
/// same (a changed ETag, size or modification time).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    /// Where it was read, credentials removed (`***`).
    pub href: String,
    /// Its size in bytes, where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// The server's ETag, where it said one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
    /// Its modification time (RFC 3339, UTC), where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modified: Option<String>,
}

impl Origin {
    /// How `now` differs from this (`None`: the same as far as both
    /// know): an ETag both have decides; else the size and the time.
    pub fn changed(&self, now: &Origin) -> Option<String> {
        let differ = |what: &str, was: &Option<String>, is: &Option<String>| {
            Some(format!(
                "its {what} was {}, now {}",
                was.as_deref().unwrap_or("none"),
                is.as_deref().unwrap_or("none")
            ))
        };
        if let (Some(a), Some(b)) = (&self.etag, &now.etag) {
            return (a != b)
                .then(|| differ("ETag", &self.etag, &now.etag))
                .flatten();
        }
        if let (Some(a), Some(b)) = (self.size, now.size) {
            if a != b {
                return Some(format!("its size was {a} bytes, now {b}"));
            }
        }
        match (&self.modified, &now.modified) {
            (Some(a), Some(b)) if a != b => {
                differ("modification time", &self.modified, &now.modified)
            }
            _ => None,
        }
    }
}

/// The XMP namespace of warpline's provenance element.
pub const XMP_NAMESPACE: &str = "urn:warpline:provenance:1";

/// The GDAL metadata domain of a GeoTIFF's XMP packet (TIFF tag 700).
pub const XMP_DOMAIN: &str = "xml:XMP";

/// An XMP packet holding `record` (JSON text) as the element
/// `warpline:provenance`: what the write stage puts in the GeoTIFF.
pub fn xmp_packet(record: &str) -> String {
    let escaped = record
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    format!(
        "<?xpacket begin=\"\u{feff}\" id=\"W5M0MpCehiHzreSzNTczkc9d\"?>\n\
         <x:xmpmeta xmlns:x=\"adobe:ns:meta/\">\n\
         <rdf:RDF xmlns:rdf=\"http://www.w3.org/1999/02/22-rdf-syntax-ns#\">\n\
         <rdf:Description rdf:about=\"\" xmlns:warpline=\"{XMP_NAMESPACE}\">\n\
         <warpline:provenance>{escaped}</warpline:provenance>\n\
         </rdf:Description>\n\
         </rdf:RDF>\n\
         </x:xmpmeta>\n\
         <?xpacket end=\"w\"?>"
    )
}

/// The provenance record (JSON text) in an XMP packet, if it holds one.
pub fn from_xmp(xmp: &str) -> Option<String> {
    // The packet's processing instructions are XML; a BOM inside one is not
    // a problem for roxmltree.
    let doc = roxmltree::Document::parse(xmp).ok()?;
    let node = doc
        .descendants()
        .find(|n| n.has_tag_name((XMP_NAMESPACE, "provenance")))?;
    Some(node.text().unwrap_or_default().to_owned())
}

/// `t` as RFC 3339 in UTC, to the second (`2024-05-01T10:00:00Z`).
pub fn rfc3339(t: SystemTime) -> String {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rest = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// The date of day `z` since 1970-01-01 (H. Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// A TIFF date (`TIFFTAG_DATETIME`, `YYYY:MM:DD HH:MM:SS`, no time zone)
/// as RFC 3339, read as UTC; `None` when it is not one.
pub fn tiff_datetime(text: &str) -> Option<String> {
    let t = text.trim().as_bytes();
    let digits =
        |r: std::ops::Range<usize>| t.get(r).is_some_and(|s| s.iter().all(u8::is_ascii_digit));
    let shape = t.len() == 19
        && [4, 7].iter().all(|&i| t[i] == b':')
        && t[10] == b' '
        && [13, 16].iter().all(|&i| t[i] == b':');
    let ok = shape
        && [0..4, 5..7, 8..10, 11..13, 14..16, 17..19]
            .into_iter()
            .all(digits);
    // Zeros are TIFF's "unknown".
    if !ok || &t[..4] == b"0000" {
        return None;
    }
    let s = text.trim();
    Some(format!(
        "{}-{}-{}T{}Z",
        &s[0..4],
        &s[5..7],
        &s[8..10],
        &s[11..19]
    ))
}

/// Records the settings of a stage of `kind` that decide the output's
/// bytes (appended to `meta["stages"]`, with `extra` fields beside
/// `kind` and `settings`).
pub fn record_stage(item: &mut Item, kind: &str, settings: Value, extra: Map<String, Value>) {
    let mut entry = Map::new();
    entry.insert("kind".to_owned(), Value::from(kind));
    entry.insert("settings".to_owned(), settings);
    entry.extend(extra);
    let stages = item
        .meta
        .entry(STAGES.to_owned())
        .or_insert_with(|| Value::Array(Vec::new()));
    match stages {
        Value::Array(list) => {
            // A try again of the stage replaces its earlier record.
            list.retain(|s| s.get("kind").and_then(Value::as_str) != Some(kind));
            list.push(Value::Object(entry));
        }
        other => *other = Value::Array(vec![Value::Object(entry)]),
    }
}

/// `settings` without `drop`'s keys, as JSON.
pub fn settings_json<T: Serialize>(settings: &T, drop: &[&str]) -> Value {
    let mut value = serde_json::to_value(settings).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut value {
        map.retain(|k, v| !drop.contains(&k.as_str()) && !v.is_null());
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_rfc3339() {
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(951_782_400 + 3661);
        assert_eq!(rfc3339(t), "2000-02-29T01:01:01Z");
        assert_eq!(rfc3339(SystemTime::UNIX_EPOCH), "1970-01-01T00:00:00Z");
        assert_eq!(
            tiff_datetime("2021:03:04 05:06:07").as_deref(),
            Some("2021-03-04T05:06:07Z")
        );
        assert_eq!(tiff_datetime("0000:00:00 00:00:00"), None);
        assert_eq!(tiff_datetime("2021-03-04 05:06:07"), None);
        assert_eq!(tiff_datetime("yesterday"), None);
    }

    #[test]
    fn a_record_goes_into_xmp_and_comes_back() {
        let record = r#"{"a":"<b> & c","d":[1,2]}"#;
        let packet = xmp_packet(record);
        assert!(packet.starts_with("<?xpacket begin="));
        assert_eq!(from_xmp(&packet).as_deref(), Some(record));
        assert_eq!(from_xmp("<x/>"), None);
        assert_eq!(from_xmp("not xml"), None);
    }

    #[test]
    fn an_etag_decides_else_size_and_time() {
        let a = Origin {
            href: "x".into(),
            size: Some(10),
            etag: Some("\"1\"".into()),
            modified: Some("t1".into()),
        };
        let same_tag = Origin {
            modified: Some("t2".into()),
            ..a.clone()
        };
        assert_eq!(a.changed(&same_tag), None);
        let new_tag = Origin {
            etag: Some("\"2\"".into()),
            ..a.clone()
        };
        assert!(a.changed(&new_tag).unwrap().contains("ETag"));
        let no_tag = Origin {
            etag: None,
            size: Some(11),
            ..a.clone()
        };
        assert!(a
            .changed(&no_tag)
            .unwrap()
            .contains("size was 10 bytes, now 11"));
        let touched = Origin {
            etag: None,
            modified: Some("t3".into()),
            ..a.clone()
        };
        assert!(a.changed(&touched).unwrap().contains("modification time"));
    }
}
