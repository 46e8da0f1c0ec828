//! The reproject stage's settings, turned into a typed
//! [`WarpSpec`](warpline_gdal::WarpSpec): one key per gdalwarp option
//! (docs/pipeline.md lists them all, and says why an option has no key),
//! each checked here with the key's name in the message, then the
//! gdalwarp arguments derived from the spec checked by
//! `GDALWarpAppOptionsNew` itself.

use std::collections::BTreeMap;

use serde::Deserialize;
use warpline_engine::units::Size;
use warpline_engine::{Problem, Settings};
use warpline_gdal::spec::{DEFAULT_ERROR_THRESHOLD, DEFAULT_WARP_MEMORY};
use warpline_gdal::{Cutline, DataType, GcpTransformer, Resampling as Method, WarpSpec};

use super::disk::WarpTo;

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
pub(super) struct Resampling(Method);

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
        Method::from_name(&given)
            .map(Resampling)
            .ok_or_else(|| format!("unknown method {given:?}; one of {}", RESAMPLING.join(", ")))
    }
}

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
#[derive(Debug)]
pub(super) struct Parsed {
    /// The warp, typed; gdalwarp's arguments are derived from it.
    pub(super) spec: WarpSpec,
    /// The target CRS as WKT, and `src_crs`'s (for sizing the output as
    /// gdalwarp's transformer does).
    pub(super) target_wkt: String,
    pub(super) src_crs_wkt: Option<String>,
    pub(super) dtype: Option<DataType>,
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
        out: Parsed {
            spec: WarpSpec::new(""),
            target_wkt: String::new(),
            src_crs_wkt: None,
            dtype: None,
            bands: None,
            max_pixels: 0,
            warp_memory: DEFAULT_WARP_MEMORY,
            warp_to: WarpTo::default(),
            scratch: None,
            kernel: Kernel::default(),
        },
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
        if let Err(m) = warpline_gdal::warp::WarpOptions::new(&out.spec.gdalwarp_args()) {
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

    /// A CRS key: checked with PROJ, its WKT returned.
    fn check_crs(&mut self, key: &str, text: &str) -> Option<String> {
        warpline_gdal::crs_to_wkt(text)
            .map_err(|e| self.problems.push(self.s.env_problem(key, e.to_string())))
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
                self.out.spec.dst_crs = text;
            }
        }
        if let Some(text) = self.r.src_crs.clone() {
            self.out.src_crs_wkt = self.check_crs("src_crs", &text);
            self.out.spec.src_crs = Some(text);
        }
    }

    fn resampling(&mut self) {
        let Resampling(method) = self.r.resampling.unwrap_or(Resampling(Method::Near));
        self.out.spec.resampling = method;
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
        }
        self.out.spec.resolution = resolution;
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
        if size.is_some() && resolution.is_some() {
            self.problem("size", "give `resolution` or `size`, not both");
        }
        self.out.spec.size = size;
        self.extent();
        if self.r.tap == Some(true) {
            if resolution.is_none() {
                self.problem("tap", "needs `resolution` (as gdalwarp's -tap needs -tr)");
            }
            self.out.spec.target_aligned = true;
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
        self.out.spec.extent = extent;
        if let Some(text) = self.r.extent_crs.clone() {
            if extent.is_none() {
                self.problem("extent_crs", "only applies with `extent`");
            }
            self.check_crs("extent_crs", &text);
            self.out.spec.extent_crs = Some(text);
        }
    }

    fn nodata_and_alpha(&mut self) {
        self.out.spec.src_nodata = self.r.src_nodata.as_ref().map(NoData::arg);
        self.out.spec.dst_nodata = self.r.dst_nodata.as_ref().map(NoData::arg);
        self.out.spec.src_alpha = self.r.src_alpha;
        self.out.spec.dst_alpha = self.r.dst_alpha == Some(true);
    }

    fn data_type(&mut self, key: &str) -> Option<DataType> {
        let name = match key {
            "dtype" => self.r.dtype.clone()?,
            _ => self.r.working_type.clone()?,
        };
        let t = DataType::from_name(&name);
        if t.is_none() {
            self.problem(
                key,
                format!("unknown data type {name:?}; e.g. Byte, UInt16, Int16, UInt32, Int32, Float32, Float64"),
            );
        }
        match key {
            "dtype" => self.out.spec.output_type = Some(name),
            _ => self.out.spec.working_type = Some(name),
        }
        t
    }

    fn types_and_bands(&mut self) {
        self.out.dtype = self.data_type("dtype");
        self.data_type("working_type");
        if let Some(b) = self.r.bands.clone() {
            if b.is_empty() || b.contains(&0) {
                self.problem("bands", "give band numbers counted from 1, e.g. [1, 2, 3]");
            }
            self.out.bands = Some(b.iter().map(|n| *n as usize).collect());
        }
        match self.r.overview.clone() {
            None => {}
            Some(Overview::Level(n)) => self.out.spec.overview = Some(n.to_string()),
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
                self.out.spec.overview = Some(upper);
            }
        }
        self.out.spec.metadata = self.r.metadata != Some(false);
        self.out.spec.conflicting_metadata = self.r.conflicting_metadata.clone();
        self.out.spec.vertical_shift = self.r.vertical_shift;
    }

    fn transformer(&mut self) {
        let et = self.r.error_threshold.unwrap_or(DEFAULT_ERROR_THRESHOLD);
        if !(et >= 0.0 && et.is_finite()) {
            self.problem(
                "error_threshold",
                "must be 0 (exact) or a positive number of pixels",
            );
        }
        self.out.spec.error_threshold = et;
        if let Some(name) = self.r.transformer.clone() {
            let order = self.r.order.unwrap_or(0);
            let t = match name.as_str() {
                "polynomial" => Some(GcpTransformer::Polynomial(order)),
                "tps" => Some(GcpTransformer::Tps),
                "rpc" => Some(GcpTransformer::Rpc),
                "geoloc" => Some(GcpTransformer::Geoloc),
                _ => None,
            };
            if t.is_none() {
                self.problem(
                    "transformer",
                    format!("unknown transformer {name:?}; one of polynomial, tps, rpc, geoloc"),
                );
            }
            if order > 3 && name == "polynomial" {
                self.problem(
                    "order",
                    "the polynomial order is 1, 2 or 3 (0: from the GCP count)",
                );
            }
            self.out.spec.gcp_transformer = t;
        } else if self.r.order.is_some() {
            self.problem("order", "only applies with transformer = \"polynomial\"");
        }
        self.out.spec.refine_gcps = match self.r.refine_gcps.clone().as_deref() {
            None => None,
            Some([t]) if *t > 0.0 => Some((*t, None)),
            Some([t, n])
                if *t > 0.0 && *n >= 1.0 && n.fract() == 0.0 && *n <= f64::from(u32::MAX) =>
            {
                Some((*t, Some(*n as u32)))
            }
            Some(_) => {
                self.problem(
                    "refine_gcps",
                    "give [tolerance] or [tolerance, minimum GCPs]: a positive tolerance (pixels, or georeferenced units with polynomial order > 1) and a whole number",
                );
                None
            }
        };
        self.out.spec.transformer_options = self
            .r
            .transformer_options
            .clone()
            .into_iter()
            .flatten()
            .collect();
        self.out.spec.coordinate_operation = self.r.coordinate_operation.clone();
        self.out.spec.src_coord_epoch = self.r.src_coord_epoch;
        self.out.spec.dst_coord_epoch = self.r.dst_coord_epoch;
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
        self.out.spec.cutline = Some(Cutline {
            path,
            layer: self.r.cutline_layer.clone(),
            where_clause: self.r.cutline_where.clone(),
            sql: self.r.cutline_sql.clone(),
            blend: self.r.cutline_blend,
            crop: self.r.crop_to_cutline == Some(true),
        });
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
        self.out.spec.warp_memory = wm;
        self.out.warp_memory = wm;
        self.out.spec.warp_options = self.r.warp_options.clone().into_iter().flatten().collect();
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
