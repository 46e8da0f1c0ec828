//! [`WarpSpec`]: the typed warp request. gdalwarp's argument list is
//! derived from it ([`WarpSpec::gdalwarp_args`]), one way: nothing parses
//! flags back, so an accelerator reads the same typed fields the
//! arguments were made from.

use std::fmt::Write as _;

/// A resampling method, by gdalwarp's names (`-r`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[allow(missing_docs)]
pub enum Resampling {
    #[default]
    Near,
    Bilinear,
    Cubic,
    CubicSpline,
    Lanczos,
    Average,
    Rms,
    Mode,
    Max,
    Min,
    Med,
    Q1,
    Q3,
    Sum,
}

impl Resampling {
    /// Every method with gdalwarp's name for it.
    pub const ALL: &'static [(Resampling, &'static str)] = &[
        (Resampling::Near, "near"),
        (Resampling::Bilinear, "bilinear"),
        (Resampling::Cubic, "cubic"),
        (Resampling::CubicSpline, "cubicspline"),
        (Resampling::Lanczos, "lanczos"),
        (Resampling::Average, "average"),
        (Resampling::Rms, "rms"),
        (Resampling::Mode, "mode"),
        (Resampling::Max, "max"),
        (Resampling::Min, "min"),
        (Resampling::Med, "med"),
        (Resampling::Q1, "q1"),
        (Resampling::Q3, "q3"),
        (Resampling::Sum, "sum"),
    ];

    /// gdalwarp's name (`-r NAME`).
    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(m, _)| *m == self)
            .map_or("near", |(_, n)| n)
    }

    /// The method gdalwarp calls `name` (any case; `nearest` is `near`).
    pub fn from_name(name: &str) -> Option<Resampling> {
        let lower = name.to_ascii_lowercase();
        let lower = if lower == "nearest" { "near" } else { &lower };
        Self::ALL.iter().find(|(_, n)| *n == lower).map(|(m, _)| *m)
    }
}

/// The transformer for a source placed by GCPs, RPCs or geolocation
/// arrays (gdalwarp's `-order`, `-tps`, `-rpc`, `-geoloc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GcpTransformer {
    /// A polynomial of this order (1-3; 0: from the GCP count).
    Polynomial(u32),
    /// A thin plate spline.
    Tps,
    /// Rational polynomial coefficients.
    Rpc,
    /// Geolocation arrays.
    Geoloc,
}

/// A cutline: the polygons outside which output pixels stay empty.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Cutline {
    /// The vector file (`-cutline`).
    pub path: String,
    /// Its layer (`-cl`).
    pub layer: Option<String>,
    /// An attribute filter (`-cwhere`).
    pub where_clause: Option<String>,
    /// An SQL query (`-csql`).
    pub sql: Option<String>,
    /// Blend distance in pixels (`-cblend`).
    pub blend: Option<f64>,
    /// The output's extent is the cutline's (`-crop_to_cutline`).
    pub crop: bool,
}

/// What a warp is asked to do: every gdalwarp option warpline offers, typed,
/// with gdalwarp's defaults. `WarpSpec::new(crs)` is `gdalwarp -t_srs crs
/// -r near -et 0.125 -wm 64MiB`.
#[derive(Debug, Clone, PartialEq)]
pub struct WarpSpec {
    /// The target CRS as the user wrote it (`-t_srs`).
    pub dst_crs: String,
    /// A CRS for the source that overrides its own (`-s_srs`).
    pub src_crs: Option<String>,
    /// The resampling method (`-r`).
    pub resampling: Resampling,
    /// Output resolution in target units (`-tr`).
    pub resolution: Option<(f64, f64)>,
    /// Output size in pixels (`-ts`; one of them 0: kept in proportion).
    pub size: Option<(u32, u32)>,
    /// Output extent `[xmin, ymin, xmax, ymax]` (`-te`).
    pub extent: Option<[f64; 4]>,
    /// The CRS `extent` is in (`-te_srs`).
    pub extent_crs: Option<String>,
    /// Target-aligned pixels (`-tap`).
    pub target_aligned: bool,
    /// Source nodata, in gdalwarp's syntax (`-srcnodata`).
    pub src_nodata: Option<String>,
    /// Output nodata, in gdalwarp's syntax (`-dstnodata`).
    pub dst_nodata: Option<String>,
    /// Take the last source band as alpha (`-srcalpha`) or never
    /// (`-nosrcalpha`); `None`: gdalwarp's own choice.
    pub src_alpha: Option<bool>,
    /// Give the output an alpha band (`-dstalpha`).
    pub dst_alpha: bool,
    /// The output's data type by GDAL's name (`-ot`).
    pub output_type: Option<String>,
    /// The working data type by GDAL's name (`-wt`).
    pub working_type: Option<String>,
    /// The overview level to read (`-ovr`: `AUTO`, `NONE`, `AUTO-n`, n).
    pub overview: Option<String>,
    /// Copy metadata (`false`: `-nomd`).
    pub metadata: bool,
    /// The value given to conflicting metadata (`-cvmd`).
    pub conflicting_metadata: Option<String>,
    /// Apply a vertical shift (`-vshift`) or never (`-novshift`).
    pub vertical_shift: Option<bool>,
    /// The transformer's error threshold in pixels (`-et`; 0: exact).
    pub error_threshold: f64,
    /// The transformer for sources without a geotransform.
    pub gcp_transformer: Option<GcpTransformer>,
    /// GCP refinement: tolerance and minimum GCP count (`-refine_gcps`).
    pub refine_gcps: Option<(f64, Option<u32>)>,
    /// Transformer options, `NAME=VALUE` (`-to`).
    pub transformer_options: Vec<(String, String)>,
    /// A coordinate operation as PROJ text (`-ct`).
    pub coordinate_operation: Option<String>,
    /// The source's coordinate epoch (`-s_coord_epoch`).
    pub src_coord_epoch: Option<f64>,
    /// The target's coordinate epoch (`-t_coord_epoch`).
    pub dst_coord_epoch: Option<f64>,
    /// A cutline (`-cutline` and its companions).
    pub cutline: Option<Cutline>,
    /// The warp's memory in bytes, which decides its chunks (`-wm`).
    pub warp_memory: u64,
    /// Warp options, `NAME=VALUE` (`-wo`).
    pub warp_options: Vec<(String, String)>,
    /// An area of interest every tile's transformer shares, when an
    /// accelerator proved it harmless (`-to AREA_OF_INTEREST=...`).
    pub area_of_interest: Option<String>,
}

/// gdalwarp's `-et` default, in pixels.
pub const DEFAULT_ERROR_THRESHOLD: f64 = 0.125;
/// gdalwarp's `-wm` default as warpline sets it, in bytes.
pub const DEFAULT_WARP_MEMORY: u64 = 64 << 20;

impl WarpSpec {
    /// A warp to `dst_crs` with gdalwarp's defaults (and `-wm 64MiB`).
    pub fn new(dst_crs: impl Into<String>) -> Self {
        WarpSpec {
            dst_crs: dst_crs.into(),
            src_crs: None,
            resampling: Resampling::Near,
            resolution: None,
            size: None,
            extent: None,
            extent_crs: None,
            target_aligned: false,
            src_nodata: None,
            dst_nodata: None,
            src_alpha: None,
            dst_alpha: false,
            output_type: None,
            working_type: None,
            overview: None,
            metadata: true,
            conflicting_metadata: None,
            vertical_shift: None,
            error_threshold: DEFAULT_ERROR_THRESHOLD,
            gcp_transformer: None,
            refine_gcps: None,
            transformer_options: Vec::new(),
            coordinate_operation: None,
            src_coord_epoch: None,
            dst_coord_epoch: None,
            cutline: None,
            warp_memory: DEFAULT_WARP_MEMORY,
            warp_options: Vec::new(),
            area_of_interest: None,
        }
    }

    /// The `gdalwarp` arguments this spec means (without `-of`, the
    /// sources and the destination), in a fixed order.
    pub fn gdalwarp_args(&self) -> Vec<String> {
        let mut a = Args::default();
        a.flag("-t_srs", [self.dst_crs.clone()]);
        if let Some(s) = &self.src_crs {
            a.flag("-s_srs", [s.clone()]);
        }
        a.flag("-r", [self.resampling.name().to_owned()]);
        if let Some((x, y)) = self.resolution {
            a.flag("-tr", [num(x), num(y)]);
        }
        if let Some((w, h)) = self.size {
            a.flag("-ts", [w.to_string(), h.to_string()]);
        }
        if let Some(e) = self.extent {
            a.flag("-te", e.map(num));
        }
        if let Some(c) = &self.extent_crs {
            a.flag("-te_srs", [c.clone()]);
        }
        if self.target_aligned {
            a.flag("-tap", []);
        }
        self.pixel_args(&mut a);
        self.transformer_args(&mut a);
        if let Some(c) = &self.cutline {
            cutline_args(c, &mut a);
        }
        // gdalwarp reads values of 10000 or more as bytes.
        a.flag("-wm", [self.warp_memory.to_string()]);
        for (k, v) in &self.warp_options {
            a.flag("-wo", [format!("{k}={v}")]);
        }
        if let Some(aoi) = &self.area_of_interest {
            a.flag("-to", [aoi.clone()]);
        }
        a.0
    }

    /// Nodata, alpha, types, overviews, metadata, vertical shift.
    fn pixel_args(&self, a: &mut Args) {
        if let Some(v) = &self.src_nodata {
            a.flag("-srcnodata", [v.clone()]);
        }
        if let Some(v) = &self.dst_nodata {
            a.flag("-dstnodata", [v.clone()]);
        }
        match self.src_alpha {
            Some(true) => a.flag("-srcalpha", []),
            Some(false) => a.flag("-nosrcalpha", []),
            None => {}
        }
        if self.dst_alpha {
            a.flag("-dstalpha", []);
        }
        if let Some(t) = &self.output_type {
            a.flag("-ot", [t.clone()]);
        }
        if let Some(t) = &self.working_type {
            a.flag("-wt", [t.clone()]);
        }
        if let Some(o) = &self.overview {
            a.flag("-ovr", [o.clone()]);
        }
        if !self.metadata {
            a.flag("-nomd", []);
        }
        if let Some(v) = &self.conflicting_metadata {
            a.flag("-cvmd", [v.clone()]);
        }
        match self.vertical_shift {
            Some(true) => a.flag("-vshift", []),
            Some(false) => a.flag("-novshift", []),
            None => {}
        }
    }

    /// The error threshold and the transformer's own options.
    fn transformer_args(&self, a: &mut Args) {
        a.flag("-et", [num(self.error_threshold)]);
        match self.gcp_transformer {
            None => {}
            Some(GcpTransformer::Polynomial(0)) => {}
            Some(GcpTransformer::Polynomial(n)) => a.flag("-order", [n.to_string()]),
            Some(GcpTransformer::Tps) => a.flag("-tps", []),
            Some(GcpTransformer::Rpc) => a.flag("-rpc", []),
            Some(GcpTransformer::Geoloc) => a.flag("-geoloc", []),
        }
        match self.refine_gcps {
            None => {}
            Some((t, None)) => a.flag("-refine_gcps", [num(t)]),
            Some((t, Some(n))) => a.flag("-refine_gcps", [num(t), n.to_string()]),
        }
        for (k, v) in &self.transformer_options {
            a.flag("-to", [format!("{k}={v}")]);
        }
        if let Some(op) = &self.coordinate_operation {
            a.flag("-ct", [op.clone()]);
        }
        if let Some(e) = self.src_coord_epoch {
            a.flag("-s_coord_epoch", [num(e)]);
        }
        if let Some(e) = self.dst_coord_epoch {
            a.flag("-t_coord_epoch", [num(e)]);
        }
    }

    /// The options gdalwarp gives its transformer (`NAME=VALUE`), without
    /// `DST_SRS`: for sizing the output as gdalwarp does.
    pub fn transformer_items(&self, src_crs_wkt: Option<&str>) -> Vec<String> {
        let mut t = Vec::new();
        if let Some(wkt) = src_crs_wkt {
            t.push(format!("SRC_SRS={wkt}"));
        }
        match self.gcp_transformer {
            None => {}
            Some(GcpTransformer::Polynomial(n)) => {
                t.push("METHOD=GCP_POLYNOMIAL".to_owned());
                if n > 0 {
                    t.push(format!("MAX_GCP_ORDER={n}"));
                }
            }
            Some(GcpTransformer::Tps) => t.push("METHOD=GCP_TPS".to_owned()),
            Some(GcpTransformer::Rpc) => t.push("METHOD=RPC".to_owned()),
            Some(GcpTransformer::Geoloc) => t.push("METHOD=GEOLOC_ARRAY".to_owned()),
        }
        if let Some((tol, n)) = self.refine_gcps {
            t.push(format!("REFINE_TOLERANCE={}", num(tol)));
            if let Some(n) = n {
                t.push(format!("REFINE_MINIMUM_GCPS={n}"));
            }
        }
        t.extend(
            self.transformer_options
                .iter()
                .map(|(k, v)| format!("{k}={v}")),
        );
        if let Some(op) = &self.coordinate_operation {
            t.push(format!("COORDINATE_OPERATION={op}"));
        }
        if let Some(e) = self.src_coord_epoch {
            t.push(format!("SRC_COORDINATE_EPOCH={}", num(e)));
        }
        if let Some(e) = self.dst_coord_epoch {
            t.push(format!("DST_COORDINATE_EPOCH={}", num(e)));
        }
        t
    }

    /// Whether the transformer promotes coordinates to 3D.
    pub fn promotes_to_3d(&self) -> bool {
        self.transformer_options
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("PROMOTE_TO_3D"))
    }
}

/// The cutline's arguments.
fn cutline_args(c: &Cutline, a: &mut Args) {
    a.flag("-cutline", [c.path.clone()]);
    if let Some(l) = &c.layer {
        a.flag("-cl", [l.clone()]);
    }
    if let Some(w) = &c.where_clause {
        a.flag("-cwhere", [w.clone()]);
    }
    if let Some(q) = &c.sql {
        a.flag("-csql", [q.clone()]);
    }
    if let Some(d) = c.blend {
        a.flag("-cblend", [num(d)]);
    }
    if c.crop {
        a.flag("-crop_to_cutline", []);
    }
}

/// A number as gdalwarp's arguments show it: Rust's shortest round trip.
fn num(v: f64) -> String {
    let mut s = String::new();
    let _ = write!(s, "{v}");
    s
}

#[derive(Default)]
struct Args(Vec<String>);

impl Args {
    fn flag<const N: usize>(&mut self, flag: &str, values: [String; N]) {
        self.0.push(flag.to_owned());
        self.0.extend(values);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_gdalwarps() {
        let args = WarpSpec::new("EPSG:3857").gdalwarp_args();
        assert_eq!(
            args,
            [
                "-t_srs",
                "EPSG:3857",
                "-r",
                "near",
                "-et",
                "0.125",
                "-wm",
                "67108864"
            ]
        );
    }

    #[test]
    fn every_field_becomes_its_flag() {
        let mut s = WarpSpec::new("EPSG:4326");
        s.resampling = Resampling::Cubic;
        s.resolution = Some((30.0, 30.0));
        s.extent = Some([0.0, 1.0, 2.0, 3.0]);
        s.target_aligned = true;
        s.dst_nodata = Some("0".into());
        s.dst_alpha = true;
        s.gcp_transformer = Some(GcpTransformer::Polynomial(2));
        s.cutline = Some(Cutline {
            path: "c.geojson".into(),
            crop: true,
            ..Cutline::default()
        });
        s.warp_options.push(("NUM_THREADS".into(), "2".into()));
        s.area_of_interest = Some("AREA_OF_INTEREST=-180,-90,180,90".into());
        let args = s.gdalwarp_args().join(" ");
        assert_eq!(
            args,
            "-t_srs EPSG:4326 -r cubic -tr 30 30 -te 0 1 2 3 -tap -dstnodata 0 -dstalpha \
             -et 0.125 -order 2 -cutline c.geojson -crop_to_cutline -wm 67108864 \
             -wo NUM_THREADS=2 -to AREA_OF_INTEREST=-180,-90,180,90"
        );
    }

    #[test]
    fn methods_are_read_by_gdalwarps_names() {
        assert_eq!(Resampling::from_name("NEAREST"), Some(Resampling::Near));
        assert_eq!(Resampling::from_name("q3"), Some(Resampling::Q3));
        assert_eq!(Resampling::from_name("bicubic"), None);
        for (m, n) in Resampling::ALL {
            assert_eq!(Resampling::from_name(n), Some(*m));
        }
    }
}
