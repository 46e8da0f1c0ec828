//! The reproject stage's settings, turned into `gdalwarp` arguments: one
//! key per gdalwarp option (docs/pipeline.md lists them all, and says why
//! an option has no key), each checked here with the key's name in the
//! message, then the whole list checked by `GDALWarpAppOptionsNew` itself.

use std::collections::BTreeMap;

use gdal_sys as sys;
use serde::Deserialize;
use warpline_engine::units::Size;
use warpline_engine::{Problem, Settings};

use super::disk::WarpTo;
use crate::decode::crs_to_wkt;
use crate::gdal::{dtype_by_name, WarpOptions};

/// The resampling methods, by gdalwarp's names (`nearest` is also taken
/// for `near`).
pub const RESAMPLING: &[&str] = &[
    "near",
    "bilinear",
    "cubic",
    "cubicspline",
    "lanczos",
    "average",
    "rms",
    "mode",
    "max",
    "min",
    "med",
    "q1",
    "q3",
    "sum",
];

/// A resampling method by gdalwarp's name (`-r`), any case; `nearest` is
/// taken for `near`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Resampling(&'static str);

impl<'de> Deserialize<'de> for Resampling {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // As `#[serde(try_from = "String")]` does; derived, serde would
        // take the `&'static str` for text borrowed from the file.
        Resampling::try_from(String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

impl TryFrom<String> for Resampling {
    type Error = String;
    fn try_from(given: String) -> Result<Self, String> {
        let method = match given.to_ascii_lowercase().as_str() {
            "nearest" => "near".to_owned(),
            m => m.to_owned(),
        };
        RESAMPLING
            .iter()
            .find(|m| **m == method)
            .map(|m| Resampling(m))
            .ok_or_else(|| format!("unknown method {given:?}; one of {}", RESAMPLING.join(", ")))
    }
}

/// gdalwarp's transformers for a source without a geotransform.
const TRANSFORMERS: &[(&str, &str, &str)] = &[
    ("polynomial", "-order", "GCP_POLYNOMIAL"),
    ("tps", "-tps", "GCP_TPS"),
    ("rpc", "-rpc", "RPC"),
    ("geoloc", "-geoloc", "GEOLOC_ARRAY"),
];

/// A number or a pair of numbers.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged, expecting = "expected one number or [x, y]")]
enum OneOrTwo {
    One(f64),
    Two(Vec<f64>),
}

/// A nodata value: a number, a list (one per band), or text such as
/// "nan", "None" or "1 2 3".
#[derive(Debug, Clone, Deserialize)]
#[serde(
    untagged,
    expecting = "expected a number, a list of numbers (one per band), or a word such as \"nan\" or \"None\""
)]
enum NoData {
    Number(f64),
    List(Vec<f64>),
    Text(String),
}

impl NoData {
    fn arg(&self) -> String {
        match self {
            NoData::Number(n) => format!("{n}"),
            NoData::List(v) => v
                .iter()
                .map(|n| format!("{n}"))
                .collect::<Vec<_>>()
                .join(" "),
            NoData::Text(t) => t.clone(),
        }
    }
}

/// A level of overviews: a word (AUTO, NONE, AUTO-n) or a number.
#[derive(Debug, Clone, Deserialize)]
#[serde(
    untagged,
    expecting = "expected \"AUTO\", \"NONE\", \"AUTO-n\" or a level number"
)]
enum Overview {
    Level(u32),
    Word(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ReprojectSettings {
    crs: Option<String>,
    src_crs: Option<String>,
    resampling: Option<Resampling>,
    resolution: Option<OneOrTwo>,
    size: Option<Vec<u32>>,
    extent: Option<Vec<f64>>,
    extent_crs: Option<String>,
    tap: Option<bool>,
    src_nodata: Option<NoData>,
    dst_nodata: Option<NoData>,
    src_alpha: Option<bool>,
    dst_alpha: Option<bool>,
    dtype: Option<String>,
    working_type: Option<String>,
    bands: Option<Vec<u32>>,
    overview: Option<Overview>,
    error_threshold: Option<f64>,
    transformer: Option<String>,
    order: Option<u32>,
    refine_gcps: Option<Vec<f64>>,
    transformer_options: Option<BTreeMap<String, String>>,
    coordinate_operation: Option<String>,
    src_coord_epoch: Option<f64>,
    dst_coord_epoch: Option<f64>,
    cutline: Option<String>,
    cutline_layer: Option<String>,
    cutline_where: Option<String>,
    cutline_sql: Option<String>,
    cutline_blend: Option<f64>,
    crop_to_cutline: Option<bool>,
    metadata: Option<bool>,
    conflicting_metadata: Option<String>,
    vertical_shift: Option<bool>,
    warp_memory: Option<Size>,
    warp_options: Option<BTreeMap<String, String>>,
    max_pixels: Option<u64>,
    warp_to: Option<WarpTo>,
    scratch: Option<String>,
    kernel: Option<Kernel>,
}

/// What the stage needs from its settings.
#[derive(Debug, Default)]
pub(super) struct Parsed {
    /// gdalwarp's arguments (without `-of`, sources and destination).
    pub(super) args: Vec<String>,
    /// The options gdalwarp gives the transformer, for sizing the output
    /// the same way (`DST_SRS` and an area of interest are added per item).
    pub(super) transformer: Vec<String>,
    pub(super) target_wkt: String,
    pub(super) resolution: Option<(f64, f64)>,
    pub(super) size: Option<(u32, u32)>,
    pub(super) extent: Option<[f64; 4]>,
    pub(super) dtype: Option<sys::GDALDataType::Type>,
    pub(super) bands: Option<Vec<usize>>,
    pub(super) max_pixels: u64,
    pub(super) warp_memory: u64,
    /// Where the output is made (`warp_to`), and the directory of those
    /// made on disk (`scratch`).
    pub(super) warp_to: WarpTo,
    pub(super) scratch: Option<std::path::PathBuf>,
    /// Whose resampling loop may warp (`kernel`).
    pub(super) kernel: Kernel,
}

/// Whose resampling loop warps (`kernel`): warpline's where it is proven
/// equal to GDAL's, else GDAL's (`auto`), or always GDAL's (`gdal`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Kernel {
    #[default]
    Auto,
    Gdal,
}

pub(super) const DEFAULT_WARP_MEMORY: u64 = 64 << 20;

/// Collects the arguments and the problems of every key.
struct Builder<'a> {
    s: &'a Settings,
    r: ReprojectSettings,
    out: Parsed,
    problems: Vec<Problem>,
}

/// Parses and checks the settings; every problem at once.
pub(super) fn parse(s: &Settings) -> Result<Parsed, Vec<Problem>> {
    let mut problems = Vec::new();
    let Some(r) = s.read::<ReprojectSettings>(&mut problems) else {
        return Err(problems);
    };
    let mut b = Builder {
        s,
        r,
        out: Parsed::default(),
        problems,
    };
    b.crs();
    b.resampling();
    b.grid();
    b.nodata_and_alpha();
    b.types_and_bands();
    b.transformer();
    b.cutline();
    b.warp();
    let Builder {
        out, mut problems, ..
    } = b;
    // The options must be accepted by GDALWarp itself.
    if problems.is_empty() {
        if let Err(m) = WarpOptions::new(&out.args) {
            problems.push(s.problem("", format!("GDALWarp refuses these settings: {m}")));
        }
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(problems)
    }
}

impl Builder<'_> {
    fn problem(&mut self, key: &str, message: impl Into<String>) {
        self.problems.push(self.s.problem(key, message));
    }

    fn arg(&mut self, flag: &str, values: &[String]) {
        self.out.args.push(flag.to_owned());
        self.out.args.extend(values.iter().cloned());
    }

    /// A CRS key: checked with PROJ, its WKT returned.
    fn check_crs(&mut self, key: &str, text: &str) -> Option<String> {
        crs_to_wkt(text)
            .map_err(|m| self.problems.push(self.s.env_problem(key, m)))
            .ok()
    }

    fn crs(&mut self) {
        match self.r.crs.clone() {
            None => self.problem(
                "crs",
                "missing: the target CRS, e.g. \"EPSG:3857\", a WKT or a PROJ string",
            ),
            Some(text) => {
                self.out.target_wkt = self.check_crs("crs", &text).unwrap_or_default();
                self.arg("-t_srs", &[text]);
            }
        }
        if let Some(text) = self.r.src_crs.clone() {
            if let Some(wkt) = self.check_crs("src_crs", &text) {
                self.out.transformer.push(format!("SRC_SRS={wkt}"));
            }
            self.arg("-s_srs", &[text]);
        }
    }

    fn resampling(&mut self) {
        let Resampling(method) = self.r.resampling.unwrap_or(Resampling("near"));
        self.arg("-r", &[method.to_owned()]);
    }

    fn grid(&mut self) {
        let resolution = match self.r.resolution.clone() {
            None => None,
            Some(OneOrTwo::One(x)) => Some((x, x)),
            Some(OneOrTwo::Two(v)) if v.len() == 2 => Some((v[0], v[1])),
            Some(OneOrTwo::Two(_)) => {
                self.problem("resolution", "give one number or [x, y]");
                None
            }
        };
        if let Some((x, y)) = resolution {
            if !(x > 0.0 && y > 0.0 && x.is_finite() && y.is_finite()) {
                self.problem("resolution", "must be positive");
            }
            self.arg("-tr", &[format!("{x}"), format!("{y}")]);
        }
        self.out.resolution = resolution;
        let size = match self.r.size.clone() {
            None => None,
            Some(v) if v.len() == 2 && (v[0] > 0 || v[1] > 0) => Some((v[0], v[1])),
            Some(_) => {
                self.problem(
                    "size",
                    "give [width, height] in pixels (one of them may be 0: kept in proportion)",
                );
                None
            }
        };
        if let Some((w, h)) = size {
            if resolution.is_some() {
                self.problem("size", "give `resolution` or `size`, not both");
            }
            self.arg("-ts", &[w.to_string(), h.to_string()]);
        }
        self.out.size = size;
        self.extent();
        if self.r.tap == Some(true) {
            if resolution.is_none() {
                self.problem("tap", "needs `resolution` (as gdalwarp's -tap needs -tr)");
            }
            self.arg("-tap", &[]);
        }
    }

    fn extent(&mut self) {
        let extent = match self.r.extent.clone() {
            None => None,
            Some(v) if v.len() == 4 && v[0] < v[2] && v[1] < v[3] => Some([v[0], v[1], v[2], v[3]]),
            Some(_) => {
                self.problem(
                    "extent",
                    "give [xmin, ymin, xmax, ymax] with xmin < xmax and ymin < ymax",
                );
                None
            }
        };
        if let Some(e) = extent {
            let values: Vec<String> = e.iter().map(|v| format!("{v}")).collect();
            self.arg("-te", &values);
        }
        if let Some(text) = self.r.extent_crs.clone() {
            if extent.is_none() {
                self.problem("extent_crs", "only applies with `extent`");
            }
            self.check_crs("extent_crs", &text);
            self.arg("-te_srs", &[text]);
        }
        // In another CRS, the extent in the target's is GDAL's to work out.
        self.out.extent = extent.filter(|_| self.r.extent_crs.is_none());
    }

    fn nodata_and_alpha(&mut self) {
        if let Some(v) = self.r.src_nodata.clone() {
            self.arg("-srcnodata", &[v.arg()]);
        }
        if let Some(v) = self.r.dst_nodata.clone() {
            self.arg("-dstnodata", &[v.arg()]);
        }
        match self.r.src_alpha {
            Some(true) => self.arg("-srcalpha", &[]),
            Some(false) => self.arg("-nosrcalpha", &[]),
            None => {}
        }
        if self.r.dst_alpha == Some(true) {
            self.arg("-dstalpha", &[]);
        }
    }

    fn data_type(&mut self, key: &str, flag: &str) -> Option<sys::GDALDataType::Type> {
        let name = match key {
            "dtype" => self.r.dtype.clone()?,
            _ => self.r.working_type.clone()?,
        };
        let t = dtype_by_name(&name);
        if t.is_none() {
            self.problem(
                key,
                format!("unknown data type {name:?}; e.g. Byte, UInt16, Int16, UInt32, Int32, Float32, Float64"),
            );
        }
        self.arg(flag, &[name]);
        t
    }

    fn types_and_bands(&mut self) {
        self.out.dtype = self.data_type("dtype", "-ot");
        self.data_type("working_type", "-wt");
        if let Some(b) = self.r.bands.clone() {
            if b.is_empty() || b.contains(&0) {
                self.problem("bands", "give band numbers counted from 1, e.g. [1, 2, 3]");
            }
            self.out.bands = Some(b.iter().map(|n| *n as usize).collect());
        }
        match self.r.overview.clone() {
            None => {}
            Some(Overview::Level(n)) => self.arg("-ovr", &[n.to_string()]),
            Some(Overview::Word(w)) => {
                let upper = w.to_ascii_uppercase();
                let ok = upper == "AUTO"
                    || upper == "NONE"
                    || upper
                        .strip_prefix("AUTO-")
                        .is_some_and(|n| n.parse::<u32>().is_ok());
                if !ok {
                    self.problem(
                        "overview",
                        format!("{w:?}: give \"AUTO\" (gdalwarp's default), \"NONE\", \"AUTO-n\" or a level number from 0"),
                    );
                }
                self.arg("-ovr", &[upper]);
            }
        }
        if self.r.metadata == Some(false) {
            self.arg("-nomd", &[]);
        }
        if let Some(v) = self.r.conflicting_metadata.clone() {
            self.arg("-cvmd", &[v]);
        }
        match self.r.vertical_shift {
            Some(true) => self.arg("-vshift", &[]),
            Some(false) => self.arg("-novshift", &[]),
            None => {}
        }
    }

    fn transformer(&mut self) {
        let et = self.r.error_threshold.unwrap_or(0.125);
        if !(et >= 0.0 && et.is_finite()) {
            self.problem(
                "error_threshold",
                "must be 0 (exact) or a positive number of pixels",
            );
        }
        self.arg("-et", &[format!("{et}")]);
        if let Some(name) = self.r.transformer.clone() {
            match TRANSFORMERS.iter().find(|(n, _, _)| *n == name) {
                None => self.problem(
                    "transformer",
                    format!("unknown transformer {name:?}; one of polynomial, tps, rpc, geoloc"),
                ),
                Some(("polynomial", _, method)) => {
                    self.out.transformer.push(format!("METHOD={method}"));
                    let order = self.r.order.unwrap_or(0);
                    if order > 3 {
                        self.problem(
                            "order",
                            "the polynomial order is 1, 2 or 3 (0: from the GCP count)",
                        );
                    }
                    if order > 0 {
                        self.out.transformer.push(format!("MAX_GCP_ORDER={order}"));
                        self.arg("-order", &[order.to_string()]);
                    }
                }
                Some((_, flag, method)) => {
                    self.out.transformer.push(format!("METHOD={method}"));
                    self.arg(flag, &[]);
                }
            }
        } else if self.r.order.is_some() {
            self.problem("order", "only applies with transformer = \"polynomial\"");
        }
        match self.r.refine_gcps.clone().as_deref() {
            None => {}
            Some([t]) if *t > 0.0 => {
                self.out.transformer.push(format!("REFINE_TOLERANCE={t}"));
                self.arg("-refine_gcps", &[format!("{t}")]);
            }
            Some([t, n]) if *t > 0.0 && *n >= 1.0 && n.fract() == 0.0 => {
                self.out.transformer.push(format!("REFINE_TOLERANCE={t}"));
                self.out.transformer.push(format!("REFINE_MINIMUM_GCPS={n}"));
                self.arg("-refine_gcps", &[format!("{t}"), format!("{n}")]);
            }
            Some(_) => self.problem(
                "refine_gcps",
                "give [tolerance] or [tolerance, minimum GCPs]: a positive tolerance (pixels, or georeferenced units with polynomial order > 1) and a whole number",
            ),
        }
        for (k, v) in self.r.transformer_options.clone().iter().flatten() {
            self.out.transformer.push(format!("{k}={v}"));
            self.arg("-to", &[format!("{k}={v}")]);
        }
        if let Some(op) = self.r.coordinate_operation.clone() {
            self.out
                .transformer
                .push(format!("COORDINATE_OPERATION={op}"));
            self.arg("-ct", &[op]);
        }
        if let Some(e) = self.r.src_coord_epoch {
            self.out
                .transformer
                .push(format!("SRC_COORDINATE_EPOCH={e}"));
            self.arg("-s_coord_epoch", &[format!("{e}")]);
        }
        if let Some(e) = self.r.dst_coord_epoch {
            self.out
                .transformer
                .push(format!("DST_COORDINATE_EPOCH={e}"));
            self.arg("-t_coord_epoch", &[format!("{e}")]);
        }
    }

    fn cutline(&mut self) {
        let Some(path) = self.r.cutline.clone() else {
            for (key, set) in [
                ("cutline_layer", self.r.cutline_layer.is_some()),
                ("cutline_where", self.r.cutline_where.is_some()),
                ("cutline_sql", self.r.cutline_sql.is_some()),
                ("cutline_blend", self.r.cutline_blend.is_some()),
                ("crop_to_cutline", self.r.crop_to_cutline.is_some()),
            ] {
                if set {
                    self.problem(key, "only applies with `cutline`");
                }
            }
            return;
        };
        // The pipeline's own file (trusted, like its output directory),
        // never a name from input.
        if !std::path::Path::new(&path).is_file() {
            self.problems.push(
                self.s
                    .env_problem("cutline", format!("{path}: no such file")),
            );
        }
        self.arg("-cutline", &[path]);
        if let Some(l) = self.r.cutline_layer.clone() {
            self.arg("-cl", &[l]);
        }
        if let Some(w) = self.r.cutline_where.clone() {
            self.arg("-cwhere", &[w]);
        }
        if let Some(q) = self.r.cutline_sql.clone() {
            self.arg("-csql", &[q]);
        }
        if let Some(d) = self.r.cutline_blend {
            self.arg("-cblend", &[format!("{d}")]);
        }
        if self.r.crop_to_cutline == Some(true) {
            self.arg("-crop_to_cutline", &[]);
        }
    }

    fn warp(&mut self) {
        let wm = match self.r.warp_memory {
            None => DEFAULT_WARP_MEMORY,
            Some(Size(b)) if b >= 1 << 20 => b,
            Some(_) => {
                self.problem("warp_memory", "must be at least 1MiB");
                DEFAULT_WARP_MEMORY
            }
        };
        // gdalwarp reads values of 10000 or more as bytes.
        self.arg("-wm", &[wm.to_string()]);
        self.out.warp_memory = wm;
        for (k, v) in self.r.warp_options.clone().iter().flatten() {
            self.arg("-wo", &[format!("{k}={v}")]);
        }
        self.out.max_pixels = self.r.max_pixels.unwrap_or(1 << 28);
        self.out.warp_to = self.r.warp_to.unwrap_or_default();
        self.out.kernel = self.r.kernel.unwrap_or_default();
        match self.r.scratch.as_deref() {
            Some(d) if d.trim().is_empty() => self.problem("scratch", "must not be empty"),
            Some(d) => self.out.scratch = Some(d.into()),
            None => {}
        }
    }
}
