//! `warpline verify`: are the outputs what their provenance says? For each
//! output (of a folder, or of the items a `collection.json` links), read
//! its own provenance record (the GeoTIFF's XMP packet, see
//! `warpline_stages::provenance`), make it again from the recorded inputs
//! and settings (`derive`) in a scratch folder, and compare: identical
//! (byte for byte), different (how: pixels, metadata), or not re-derivable
//! (an input changed or cannot be read, a stage whose work is not
//! recorded). `--gdalwarp` compares the full-resolution pixels and
//! metadata with what the gdalwarp command of the recorded options makes.
//! Exit codes: 0 all identical, 3 one or more different, 4 none different
//! but one or more not re-derivable, 1 nothing to check, 2 usage.

mod derive;

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde::Serialize;
use serde_json::Value;
use warpline::stages::provenance::{self, Origin};

use super::{runtime, Format, EXIT_ITEMS_FAILED, EXIT_OK};
use derive::NotRederivable;

/// Some outputs are not re-derivable, none is different.
pub(super) const EXIT_NOT_REDERIVABLE: u8 = 4;

/// What `verify` was asked.
#[derive(Debug)]
pub(super) struct VerifyArgs<'a> {
    pub(super) target: &'a Path,
    pub(super) sample: Option<usize>,
    pub(super) gdalwarp: bool,
    pub(super) format: Format,
}

/// One output's verdict.
#[derive(Debug, Serialize)]
struct Verdict {
    output: String,
    /// `identical`, `different` or `not_rederivable`.
    status: &'static str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pixels: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    metadata: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
}

pub(super) fn verify(args: &VerifyArgs<'_>) -> anyhow::Result<u8> {
    let outputs = outputs(args.target)?;
    if outputs.is_empty() {
        bail!(
            "{}: no output to verify (no .tif file)",
            args.target.display()
        );
    }
    let chosen = sample(&outputs, args.sample);
    let versions = args.gdalwarp.then(GdalVersions::now);
    if let (Some(note), Format::Text) =
        (versions.as_ref().and_then(GdalVersions::note), args.format)
    {
        say!("{note}");
    }
    let rt = runtime()?;
    let mut verdicts = Vec::with_capacity(chosen.len());
    for output in chosen {
        let verdict = one(&rt, output, args.gdalwarp)?;
        if args.format == Format::Text {
            say!("{}", line(&verdict));
        }
        verdicts.push(verdict);
    }
    let count = |s: &str| verdicts.iter().filter(|v| v.status == s).count();
    let (same, different, not) = (
        count("identical"),
        count("different"),
        count("not_rederivable"),
    );
    match args.format {
        Format::Text => say!(
            "verify: {} of {} outputs checked{}: {same} identical, {different} different, {not} not re-derivable",
            verdicts.len(),
            outputs.len(),
            if args.gdalwarp { " against gdalwarp" } else { "" }
        ),
        Format::Json => say!(
            "{}",
            serde_json::json!({
                "outputs": verdicts,
                "total": outputs.len(),
                "identical": same,
                "different": different,
                "not_rederivable": not,
                "gdalwarp_note": versions.as_ref().and_then(GdalVersions::note),
            })
        ),
    }
    Ok(if different > 0 {
        EXIT_ITEMS_FAILED
    } else if not > 0 {
        EXIT_NOT_REDERIVABLE
    } else {
        EXIT_OK
    })
}

fn line(v: &Verdict) -> String {
    let status = match v.status {
        "not_rederivable" => "not re-derivable",
        other => other,
    };
    let mut text = format!("{status:<16} {}", v.output);
    if !v.pixels.is_empty() {
        text.push_str(&format!("\n    pixels: {}", v.pixels.join("; ")));
    }
    if !v.metadata.is_empty() {
        text.push_str(&format!("\n    metadata: {}", v.metadata.join("; ")));
    }
    if let Some(r) = &v.reason {
        text.push_str(&format!(": {r}"));
    }
    text
}

/// The outputs of a folder (its `.tif` files, in subfolders too) or of a
/// collection (the data asset of each item it links), sorted.
fn outputs(target: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut found = if target.is_dir() {
        let mut found = Vec::new();
        walk(target, &mut found)?;
        found
    } else {
        collection_outputs(target)?
    };
    found.sort();
    Ok(found)
}

fn walk(dir: &Path, found: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    let entries =
        std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))?;
    for entry in entries {
        let path = entry?.path();
        let hidden = path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with('.'));
        if hidden {
            continue;
        }
        if path.is_dir() {
            walk(&path, found)?;
        } else if path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("tif") || e.eq_ignore_ascii_case("tiff"))
        {
            found.push(path);
        }
    }
    Ok(())
}

fn collection_outputs(path: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let read = |p: &Path| -> anyhow::Result<Value> {
        let text = std::fs::read(p).with_context(|| format!("cannot read {}", p.display()))?;
        serde_json::from_slice(&text).with_context(|| format!("{}: not JSON", p.display()))
    };
    let collection = read(path)?;
    if collection["type"] != "Collection" {
        bail!("{}: not a folder nor a STAC collection", path.display());
    }
    let base = path.parent().unwrap_or(Path::new("."));
    let mut out = Vec::new();
    let links = collection["links"].as_array().into_iter().flatten();
    for href in links
        .filter(|l| l["rel"] == "item")
        .filter_map(|l| l["href"].as_str())
    {
        let item_path = base.join(href.strip_prefix("./").unwrap_or(href));
        let item = read(&item_path)?;
        let Some(asset) = item["assets"]["data"]["href"].as_str() else {
            bail!("{}: no data asset", item_path.display());
        };
        let asset = asset.strip_prefix("./").unwrap_or(asset);
        out.push(item_path.parent().unwrap_or(base).join(asset));
    }
    Ok(out)
}

/// `n` outputs spread evenly over the sorted list (all without `--sample`).
fn sample(all: &[PathBuf], n: Option<usize>) -> Vec<&PathBuf> {
    match n {
        Some(n) if n < all.len() => (0..n).map(|i| &all[i * all.len() / n.max(1)]).collect(),
        _ => all.iter().collect(),
    }
}

/// One output checked.
fn one(rt: &tokio::runtime::Runtime, output: &Path, gdalwarp: bool) -> anyhow::Result<Verdict> {
    let shown = output.display().to_string();
    let verdict = |status, pixels, metadata, reason| Verdict {
        output: shown.clone(),
        status,
        pixels,
        metadata,
        reason,
    };
    let not = |why: String| verdict("not_rederivable", Vec::new(), Vec::new(), Some(why));
    let record = match record_of(output) {
        Ok(r) => r,
        Err(why) => return Ok(not(why)),
    };
    let scratch = tempfile::tempdir().context("cannot make a scratch folder")?;
    let made = if gdalwarp {
        by_gdalwarp(&record, scratch.path())
    } else {
        rt.block_on(by_warpline(&record, scratch.path()))
    };
    let made = match made {
        Ok(path) => path,
        Err(NotRederivable(why)) => return Ok(not(why)),
    };
    if !gdalwarp && std::fs::read(output)? == std::fs::read(&made)? {
        return Ok(verdict("identical", Vec::new(), Vec::new(), None));
    }
    let d = warpline_gdal::compare::compare_files(output, &made, false, !gdalwarp)
        .map_err(|e| anyhow::anyhow!("{shown}: {e}"))?;
    let mut metadata = d.metadata;
    if !gdalwarp {
        metadata.extend(record_differences(&record, &made));
        if d.pixels.is_empty() && metadata.is_empty() {
            // Same to a reader, not byte for byte: the file's layout.
            metadata
                .push("the file's bytes differ (its layout), not its pixels nor metadata".into());
        }
    }
    Ok(if d.pixels.is_empty() && metadata.is_empty() {
        verdict("identical", Vec::new(), Vec::new(), None)
    } else {
        verdict("different", d.pixels, metadata, None)
    })
}

/// The provenance record in the output's XMP packet.
fn record_of(output: &Path) -> Result<Value, String> {
    let xmp = warpline_gdal::compare::read_xmp(output).map_err(|e| e.to_string())?;
    let text = xmp
        .as_deref()
        .and_then(provenance::from_xmp)
        .ok_or("no provenance record (not written by warpline with stac = true)")?;
    serde_json::from_str(&text).map_err(|e| format!("its provenance record does not read: {e}"))
}

/// The fields of the two records that differ (the versions, the inputs'
/// ETags...), a line each.
fn record_differences(record: &Value, made: &Path) -> Vec<String> {
    let Ok(again) = record_of(made) else {
        return vec!["provenance: none in the output made again".to_owned()];
    };
    let fields = record.as_object().into_iter().flat_map(|m| m.keys());
    fields
        .filter(|k| record[k.as_str()] != again[k.as_str()])
        .map(|k| {
            format!(
                "provenance {k}: {}, made again {}",
                record[k.as_str()],
                again[k.as_str()]
            )
        })
        .collect()
}

/// Runs the recorded pipeline into `dir`; the output, or why there is none
/// (an input that changed is named, with what changed).
async fn by_warpline(record: &Value, dir: &Path) -> Result<PathBuf, NotRederivable> {
    let inputs = derive::inputs(record)?;
    let text = derive::pipeline(record, dir)?;
    let pipeline = warpline::Loader::from_toml_str(&text)
        .load(&warpline::registry())
        .map_err(|e| NotRederivable(format!("its recorded settings do not compile here: {e}")))?;
    let report = pipeline
        .run()
        .await
        .map_err(|e| NotRederivable(format!("the run could not start: {e}")))?;
    if let Some(f) = report.failures.first() {
        let named = inputs.iter().find(|i| f.message.contains(&i.href));
        let what = match named {
            Some(i) if f.stage == "fetch" => {
                format!("input {} cannot be read: {}", i.href, f.message)
            }
            _ => format!("{} failed: {}", f.stage, f.message),
        };
        return Err(NotRederivable(what));
    }
    let made = derive::written(dir).ok_or_else(|| NotRederivable("nothing was written".into()))?;
    // The inputs as they are now: one that changed is not the input the
    // output was made of.
    let again = record_of(&made).map_err(NotRederivable)?;
    let now: Vec<Origin> = serde_json::from_value(again["inputs"].clone()).unwrap_or_default();
    for (was, is) in inputs.iter().zip(&now) {
        if let Some(why) = was.changed(is) {
            return Err(NotRederivable(format!("input {} changed: {why}", was.href)));
        }
    }
    Ok(made)
}

/// The GDAL warpline runs and the one of the `gdalwarp` on the PATH: the
/// same options can give outputs that differ in their last bits between
/// GDAL versions (a pixel size one unit in the last place apart), which
/// `--gdalwarp` then reports as different.
struct GdalVersions {
    linked: String,
    gdalwarp: Option<String>,
}

impl GdalVersions {
    fn now() -> Self {
        // `gdalwarp --version` says "GDAL 3.6.2, released 2023/01/02".
        let gdalwarp = std::process::Command::new("gdalwarp")
            .arg("--version")
            .output()
            .ok()
            .and_then(|o| {
                let text = String::from_utf8_lossy(&o.stdout).into_owned();
                let version = text.strip_prefix("GDAL ")?.split([',', ' ']).next()?;
                Some(version.trim().to_owned())
            });
        GdalVersions {
            linked: warpline_gdal::versions().gdal.to_string(),
            gdalwarp,
        }
    }

    /// What to say when the two differ.
    fn note(&self) -> Option<String> {
        let other = self.gdalwarp.as_deref().filter(|v| *v != self.linked)?;
        Some(format!(
            "note: the gdalwarp on the PATH is GDAL {other}, warpline runs GDAL {}: \
             outputs can differ between GDAL versions in their last bits",
            self.linked
        ))
    }
}

/// Runs the recorded options' gdalwarp command into `dir`.
fn by_gdalwarp(record: &Value, dir: &Path) -> Result<PathBuf, NotRederivable> {
    let out = dir.join("gdalwarp.tif");
    let args = derive::gdalwarp(record, &out)?;
    let ran = std::process::Command::new("gdalwarp").args(&args).output();
    match ran {
        Err(e) => Err(NotRederivable(format!("cannot run gdalwarp: {e}"))),
        Ok(o) if !o.status.success() => Err(NotRederivable(format!(
            "gdalwarp {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr).trim()
        ))),
        Ok(_) => Ok(out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_is_spread_over_the_outputs() {
        let all: Vec<PathBuf> = (0..10).map(|i| PathBuf::from(format!("{i}"))).collect();
        let picked: Vec<String> = sample(&all, Some(3))
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        assert_eq!(picked, ["0", "3", "6"]);
        assert_eq!(sample(&all, Some(20)).len(), 10);
        assert_eq!(sample(&all, None).len(), 10);
    }
}
