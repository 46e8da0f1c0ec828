//! `warpline verify`: are the outputs what their provenance says? For each
//! output (of a folder, of the items a `collection.json` links, or the
//! same in a bucket: `targets`), read
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
mod targets;

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde::Serialize;
use serde_json::Value;
use warpline::stages::provenance::{self, Origin};

use super::{runtime, Format, EXIT_ITEMS_FAILED, EXIT_OK};
use derive::NotRederivable;
use targets::Output;

/// Some outputs are not re-derivable, none is different.
pub(super) const EXIT_NOT_REDERIVABLE: u8 = 4;

/// What `verify` was asked.
#[derive(Debug)]
pub(super) struct VerifyArgs<'a> {
    pub(super) target: &'a Path,
    pub(super) sample: Option<usize>,
    pub(super) gdalwarp: bool,
    pub(super) format: Format,
    /// The store's server, for a bucket prefix.
    pub(super) endpoint: Option<String>,
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
    let outputs = targets::outputs(args.target, args.endpoint.clone())?;
    if outputs.is_empty() {
        bail!(
            "{}: no output to verify (no .tif file)",
            args.target.display()
        );
    }
    let chosen = targets::sample(&outputs, args.sample);
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

/// One output checked.
fn one(rt: &tokio::runtime::Runtime, out: &Output, gdalwarp: bool) -> anyhow::Result<Verdict> {
    let shown = out.shown.clone();
    let verdict = |status, pixels, metadata, reason| Verdict {
        output: shown.clone(),
        status,
        pixels,
        metadata,
        reason,
    };
    let not = |why: String| verdict("not_rederivable", Vec::new(), Vec::new(), Some(why));
    let scratch = tempfile::tempdir().context("cannot make a scratch folder")?;
    let output = out
        .local(scratch.path())
        .map_err(|e| anyhow::anyhow!("cannot read {shown}: {e}"))?;
    let output = output.as_path();
    let record = match record_of(output) {
        Ok(r) => r,
        Err(why) => return Ok(not(why)),
    };
    let dir = scratch.path().join("made");
    std::fs::create_dir(&dir).context("cannot make a scratch folder")?;
    let made = if gdalwarp {
        by_gdalwarp(&record, &dir)
    } else {
        rt.block_on(by_warpline(&record, &dir))
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
