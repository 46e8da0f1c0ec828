//! Making an output again from its provenance record: the pipeline the
//! record means (its inputs as a source, each recorded stage with its
//! recorded settings, `write` into a scratch folder), run with the stage
//! kinds `warpline run` uses; or, with `--gdalwarp`, the gdalwarp command
//! of the recorded options.

use std::path::{Path, PathBuf};

use serde_json::Value;
use warpline::stages::provenance::Origin;

/// The stage kinds whose settings an output's record holds: what a
/// pipeline of only these is made again from.
const KNOWN: [&str; 4] = ["fetch", "decode", "reproject", "write"];

/// Why an output cannot be made again.
#[derive(Debug)]
pub(super) struct NotRederivable(pub(super) String);

/// The recorded inputs, or why they cannot be read again.
pub(super) fn inputs(record: &Value) -> Result<Vec<Origin>, NotRederivable> {
    let inputs: Vec<Origin> = serde_json::from_value(record["inputs"].clone())
        .map_err(|e| NotRederivable(format!("its record's inputs do not read: {e}")))?;
    if inputs.is_empty() {
        return Err(NotRederivable("its record names no input".to_owned()));
    }
    if let Some(i) = inputs.iter().find(|i| i.href.contains("***")) {
        return Err(NotRederivable(format!(
            "input {} was read with credentials in its address, which are not recorded",
            i.href
        )));
    }
    Ok(inputs)
}

/// The stages the item passed, if warpline knows each of them.
fn flow(record: &Value) -> Result<Vec<String>, NotRederivable> {
    let passed: Vec<String> = serde_json::from_value(record["passed"].clone())
        .map_err(|_| NotRederivable("its record says no stage".to_owned()))?;
    if let Some(kind) = passed.iter().find(|k| !KNOWN.contains(&k.as_str())) {
        return Err(NotRederivable(format!(
            "it was made by a stage of kind `{kind}`, whose work is not recorded"
        )));
    }
    Ok(passed)
}

/// The recorded settings of the stage of `kind`.
fn settings<'a>(record: &'a Value, kind: &str) -> Option<&'a serde_json::Map<String, Value>> {
    record["stages"]
        .as_array()?
        .iter()
        .find(|s| s["kind"] == kind)?
        .get("settings")?
        .as_object()
}

/// The pipeline that makes the output again into `dir`, as TOML.
pub(super) fn pipeline(record: &Value, dir: &Path) -> Result<String, NotRederivable> {
    let inputs = inputs(record)?;
    let flow = flow(record)?;
    let quoted: Vec<String> = inputs.iter().map(|i| string(&i.href)).collect();
    let mut text = format!(
        "[pipeline]\nname = \"verify\"\nflow = [{}]\n\n[source]\n",
        flow.iter()
            .map(|k| string(k))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if inputs.len() == 1 {
        text.push_str(&format!("kind = \"inline\"\ninputs = [{}]\n", quoted[0]));
    } else {
        text.push_str(&format!(
            "kind = \"mosaic\"\nid = \"output\"\ninputs = [{}]\n",
            quoted.join(", ")
        ));
    }
    for kind in &flow {
        text.push_str(&format!("\n[stages.{kind}]\nkind = {}\n", string(kind)));
        let recorded = settings(record, kind).cloned().unwrap_or_default();
        if kind == "write" {
            text.push_str(&format!(
                "dir = {}\nexists = \"overwrite\"\nstac = true\n",
                string(&dir.display().to_string())
            ));
        }
        for (key, value) in &recorded {
            if !value.is_null() {
                text.push_str(&format!("{} = {}\n", string(key), toml(value)));
            }
        }
    }
    Ok(text)
}

/// The gdalwarp command that makes the output's full resolution again
/// into `out`, or why the record cannot be said as one.
pub(super) fn gdalwarp(record: &Value, out: &Path) -> Result<Vec<String>, NotRederivable> {
    let inputs = inputs(record)?;
    flow(record)?;
    let words = record["gdalwarp"]
        .as_array()
        .ok_or_else(|| NotRederivable("it was not warped (no reproject stage)".to_owned()))?;
    let mut args: Vec<String> = words
        .iter()
        .skip(1)
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect();
    if let Some(decode) = settings(record, "decode") {
        let unsaid = decode
            .keys()
            .find(|k| !matches!(k.as_str(), "drivers" | "open_options"));
        if let Some(key) = unsaid {
            return Err(NotRederivable(format!(
                "decode's `{key}` has no gdalwarp option"
            )));
        }
        for driver in decode
            .get("drivers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            args.extend([
                "-if".to_owned(),
                driver.as_str().unwrap_or_default().to_owned(),
            ]);
        }
        for (k, v) in decode
            .get("open_options")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            args.extend([
                "-oo".to_owned(),
                format!("{k}={}", v.as_str().unwrap_or_default()),
            ]);
        }
    }
    if settings(record, "reproject").is_some_and(|r| r.contains_key("bands")) {
        return Err(NotRederivable(
            "reproject's `bands` has no gdalwarp option in GDAL 3.6 (a VRT view of the input)"
                .to_owned(),
        ));
    }
    args.push("-q".to_owned());
    args.extend(inputs.iter().map(|i| vsi(&i.href)));
    args.push(out.display().to_string());
    Ok(args)
}

/// An input's address as GDAL's virtual file systems name it.
fn vsi(href: &str) -> String {
    let (path, member) = match href.split_once("!/") {
        Some((p, m)) => (p, Some(m)),
        None => (href, None),
    };
    let base = if href.starts_with("http://") || href.starts_with("https://") {
        format!("/vsicurl/{path}")
    } else if let Some(rest) = path.strip_prefix("s3://") {
        format!("/vsis3/{rest}")
    } else if let Some(rest) = path.strip_prefix("az://") {
        format!("/vsiaz/{rest}")
    } else if let Some(rest) = path.strip_prefix("gs://") {
        format!("/vsigs/{rest}")
    } else {
        path.strip_prefix("file://").unwrap_or(path).to_owned()
    };
    match member {
        Some(m) if base.ends_with(".zip") => format!("/vsizip/{base}/{m}"),
        Some(m) => format!("/vsitar/{base}/{m}"),
        None => base,
    }
}

/// `text` as a TOML basic string (JSON's escapes are TOML's).
fn string(text: &str) -> String {
    Value::from(text).to_string()
}

/// A JSON value as TOML (an object as an inline table).
fn toml(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let fields: Vec<String> = m
                .iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| format!("{} = {}", string(k), toml(v)))
                .collect();
            format!("{{ {} }}", fields.join(", "))
        }
        Value::Array(a) => format!("[{}]", a.iter().map(toml).collect::<Vec<_>>().join(", ")),
        other => other.to_string(),
    }
}

/// The only raster file in `dir` (what the pipeline wrote).
pub(super) fn written(dir: &Path) -> Option<PathBuf> {
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|e| e == "tif" || e == "tiff"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record() -> Value {
        json!({
            "inputs": [{"href": "/data/a b.tif", "size": 10}],
            "passed": ["fetch", "decode", "reproject", "write"],
            "stages": [
                {"kind": "fetch", "settings": {}},
                {"kind": "decode", "settings": {"drivers": ["GTiff"], "open_options": {"NUM_THREADS": "1"}}},
                {"kind": "reproject", "settings": {"crs": "EPSG:3857", "resolution": [30, 30]}},
                {"kind": "write", "settings": {"format": "COG", "creation_options": {"COMPRESS": "DEFLATE"}}},
            ],
            "gdalwarp": ["gdalwarp", "-t_srs", "EPSG:3857", "-tr", "30", "30", "-of", "GTiff"],
        })
    }

    #[test]
    fn the_record_becomes_a_pipeline_that_compiles() {
        let text = pipeline(&record(), Path::new("/tmp/x")).unwrap();
        assert!(text.contains("inputs = [\"/data/a b.tif\"]"), "{text}");
        assert!(
            text.contains("\"open_options\" = { \"NUM_THREADS\" = \"1\" }"),
            "{text}"
        );
        assert!(text.contains("\"resolution\" = [30, 30]"), "{text}");
        warpline::Loader::from_toml_str(&text)
            .load(&warpline::registry())
            .unwrap_or_else(|e| panic!("{e}\n{text}"));
    }

    #[test]
    fn what_is_not_recorded_is_said() {
        let mut r = record();
        r["passed"] = json!(["fetch", "decode", "ndvi", "write"]);
        let why = pipeline(&r, Path::new("/tmp")).unwrap_err().0;
        assert!(why.contains("kind `ndvi`"), "{why}");
        let mut r = record();
        r["inputs"][0]["href"] = json!("https://***@host/a.tif");
        let why = pipeline(&r, Path::new("/tmp")).unwrap_err().0;
        assert!(why.contains("credentials"), "{why}");
    }

    #[test]
    fn the_gdalwarp_command_reads_the_inputs_through_gdal() {
        let args = gdalwarp(&record(), Path::new("/tmp/o.tif")).unwrap();
        assert_eq!(
            args,
            [
                "-t_srs",
                "EPSG:3857",
                "-tr",
                "30",
                "30",
                "-of",
                "GTiff",
                "-if",
                "GTiff",
                "-oo",
                "NUM_THREADS=1",
                "-q",
                "/data/a b.tif",
                "/tmp/o.tif"
            ]
        );
        assert_eq!(vsi("https://h/a.tif"), "/vsicurl/https://h/a.tif");
        assert_eq!(vsi("s3://b/k.tif"), "/vsis3/b/k.tif");
        assert_eq!(vsi("x.zip!/y.tif"), "/vsizip/x.zip/y.tif");
    }
}
