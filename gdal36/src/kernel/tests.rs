//! The property test of warpline's loop against GDAL's: random rasters
//! (type, bands, size, grid, CRS pair, nodata pattern, mask) warped by
//! [`super::warp`] and by `GDALWarp` with the same gdalwarp arguments
//! must be equal to the bit: grid, nodata, metadata and every pixel.

use gdal::raster::{Buffer, GdalType};
use gdal::spatial_ref::SpatialRef;
use gdal::{Dataset, DriverManager, Metadata};

use super::{source_refusal, warp, Plan, Took, Warp};
use warpline_gdal::ffi::WarpOptions;
use warpline_gdal::init;
use warpline_gdal::warp::warp as gdal_warp;
use warpline_gdal::{Resampling, WarpSpec};

/// xorshift64*: reproducible cases from a seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A source CRS with a place in it and a pixel size there.
const SOURCES: &[(&str, f64, f64, f64)] = &[
    ("EPSG:32618", 500_000.0, 4_500_000.0, 30.0),
    ("EPSG:4326", -75.0, 40.0, 0.0005),
    ("EPSG:3857", -8_300_000.0, 4_900_000.0, 40.0),
    ("EPSG:3035", 4_300_000.0, 3_200_000.0, 60.0),
    ("EPSG:32612", 400_000.0, 3_700_000.0, 25.0),
    // A user-defined UTM CRS on a datum without a code (the corpus's
    // `masked` tiles): PROJ looks for it by name.
    (super::plain::tests::NAMED_UTM, 500_000.0, 4_500_000.0, 30.0),
];

const TARGETS: &[&str] = &["EPSG:3857", "EPSG:4326", "EPSG:32618", "EPSG:3035"];

/// How a case marks pixels invalid.
#[derive(Debug, Clone, Copy)]
enum Invalid {
    None,
    /// One nodata value for every band.
    Nodata,
    /// A nodata value on some bands only.
    SomeBands,
    /// A per-dataset mask band.
    Mask,
    /// The last band is alpha: 0 in the holes, partial or full elsewhere.
    Alpha,
    /// A per-dataset mask with holes of its own, and a nodata value on
    /// some bands (GDAL 3.6 then warps by the nodata alone: its unified
    /// mask is the union of the bands', the mask unread).
    MaskAndNodata,
}

fn fill<T: GdalType + Copy>(
    ds: &Dataset,
    rng: &mut Rng,
    (w, h): (usize, usize),
    value: impl Fn(f64) -> T,
    nodata: f64,
    invalid: Invalid,
) {
    let count = ds.raster_count();
    // A blob of invalid pixels: a rectangle, and a random scatter.
    let (bx, by) = (rng.below(w as u64) as usize, rng.below(h as u64) as usize);
    let (bw, bh) = (
        1 + rng.below(w as u64 / 2 + 1) as usize,
        1 + rng.below(h as u64 / 2 + 1) as usize,
    );
    let scatter = rng.unit() * 0.3;
    let holes: Vec<bool> = (0..w * h)
        .map(|i| {
            let (x, y) = (i % w, i / w);
            (x >= bx && x < bx + bw && y >= by && y < by + bh) || rng.unit() < scatter
        })
        .collect();
    for b in 1..=count {
        let mut band = ds.rasterband(b).unwrap();
        let hole_here = match invalid {
            Invalid::Nodata => true,
            Invalid::SomeBands | Invalid::MaskAndNodata => b % 2 == 1,
            _ => false,
        };
        if hole_here {
            band.set_no_data_value(Some(nodata)).unwrap();
        }
        let data: Vec<T> = (0..w * h)
            .map(|i| {
                if hole_here && holes[i] {
                    value(nodata)
                } else {
                    value(rng.unit())
                }
            })
            .collect();
        band.write((0, 0), (w, h), &mut Buffer::new((w, h), data))
            .unwrap();
    }
    if let (Invalid::Alpha, true) = (invalid, count > 1) {
        let mut band = ds.rasterband(count).unwrap();
        band.set_color_interpretation(gdal::raster::ColorInterpretation::AlphaBand)
            .unwrap();
        let data: Vec<T> = holes
            .iter()
            .map(|h| {
                value(if *h {
                    0.0
                } else if rng.unit() < 0.2 {
                    rng.unit()
                } else {
                    1.0
                })
            })
            .collect();
        band.write((0, 0), (w, h), &mut Buffer::new((w, h), data))
            .unwrap();
    }
    if let Invalid::Mask | Invalid::MaskAndNodata = invalid {
        let own: Vec<bool> = match invalid {
            Invalid::Mask => holes,
            _ => (0..w * h).map(|_| rng.unit() < 0.3).collect(),
        };
        let mut band = ds.rasterband(1).unwrap();
        band.create_mask_band(true).unwrap();
        let mut mask = band.open_mask_band().unwrap();
        let data: Vec<u8> = own.iter().map(|h| if *h { 0 } else { 255 }).collect();
        mask.write((0, 0), (w, h), &mut Buffer::new((w, h), data))
            .unwrap();
    }
}

/// A random raster in MEM, and a description for messages.
fn raster(rng: &mut Rng, case: usize) -> (Dataset, String) {
    let (w, h) = (8 + rng.below(90) as usize, 8 + rng.below(90) as usize);
    let bands = 1 + rng.below(3) as usize;
    let (srs, cx, cy, px) = SOURCES[rng.below(SOURCES.len() as u64) as usize];
    let invalid = [
        Invalid::None,
        Invalid::Nodata,
        Invalid::SomeBands,
        Invalid::Mask,
        Invalid::Alpha,
        Invalid::MaskAndNodata,
    ][rng.below(6) as usize];
    let kind = rng.below(4);
    let mem = DriverManager::get_driver_by_name("MEM").unwrap();
    let ds = match kind {
        0 => mem.create_with_band_type::<u8, _>("", w, h, bands),
        1 => mem.create_with_band_type::<u16, _>("", w, h, bands),
        2 => mem.create_with_band_type::<i16, _>("", w, h, bands),
        _ => mem.create_with_band_type::<f32, _>("", w, h, bands),
    }
    .unwrap();
    let scale = px * (0.5 + rng.unit() * 2.0);
    let jitter = rng.unit() - 0.5;
    let mut d = ds;
    d.set_spatial_ref(&SpatialRef::from_definition(srs).unwrap())
        .unwrap();
    d.set_geo_transform(&[
        cx + jitter * scale * 7.0,
        scale,
        0.0,
        cy,
        0.0,
        -scale * (0.8 + rng.unit() * 0.4),
    ])
    .unwrap();
    let nan = kind == 3 && rng.below(2) == 0;
    let byte_nodata = if rng.below(2) == 0 { 0.0 } else { 255.0 };
    match kind {
        0 => fill(&d, rng, (w, h), |v| (v * 255.0) as u8, byte_nodata, invalid),
        1 => fill(&d, rng, (w, h), |v| (v * 65535.0) as u16, 0.0, invalid),
        2 => fill(
            &d,
            rng,
            (w, h),
            |v| {
                if v <= 1.0 {
                    (v * 4000.0 - 2000.0) as i16
                } else {
                    v as i16
                }
            },
            -32768.0,
            invalid,
        ),
        _ => fill(
            &d,
            rng,
            (w, h),
            |v| {
                if nan && v > 1.0 {
                    f32::NAN
                } else {
                    (v * 1e4) as f32
                }
            },
            if nan { f64::NAN } else { -9999.0 },
            invalid,
        ),
    }
    let what = format!("case {case}: {w}x{h}x{bands}, type {kind}, {srs}, {invalid:?}, nan {nan}");
    (d, what)
}

/// Every band's pixels as bits, for an exact comparison (NaN included).
fn bits(ds: &Dataset) -> Vec<Vec<u64>> {
    let (w, h) = ds.raster_size();
    (1..=ds.raster_count())
        .map(|b| {
            let band = ds.rasterband(b).unwrap();
            let v = band.read_as::<f64>((0, 0), (w, h), (w, h), None).unwrap();
            v.data().iter().map(|x| x.to_bits()).collect()
        })
        .collect()
}

pub(super) fn same(ours: &Dataset, theirs: &Dataset, what: &str) {
    assert_eq!(ours.raster_size(), theirs.raster_size(), "{what}: size");
    assert_eq!(
        ours.geo_transform().unwrap(),
        theirs.geo_transform().unwrap(),
        "{what}: geotransform"
    );
    assert_eq!(ours.raster_count(), theirs.raster_count(), "{what}: bands");
    for b in 1..=ours.raster_count() {
        let (o, t) = (ours.rasterband(b).unwrap(), theirs.rasterband(b).unwrap());
        assert_eq!(o.band_type(), t.band_type(), "{what}: band {b} type");
        assert_eq!(
            o.no_data_value().map(f64::to_bits),
            t.no_data_value().map(f64::to_bits),
            "{what}: band {b} nodata"
        );
    }
    assert_eq!(
        ours.metadata().collect::<Vec<_>>().len(),
        theirs.metadata().collect::<Vec<_>>().len(),
        "{what}: metadata"
    );
    assert_eq!(ours.projection(), theirs.projection(), "{what}: CRS");
    let (o, t) = (bits(ours), bits(theirs));
    for (b, (ob, tb)) in o.iter().zip(&t).enumerate() {
        let differ = ob.iter().zip(tb).filter(|(a, b)| a != b).count();
        assert_eq!(
            differ,
            0,
            "{what}: band {} has {differ} pixels unlike GDAL's",
            b + 1
        );
    }
}

/// Cases per run (`WARPLINE_KERNEL_CASES` for more, `WARPLINE_KERNEL_SEED`
/// for others).
const CASES: usize = 60;

#[test]
fn the_loop_equals_gdal_on_random_rasters_grids_crs_pairs_and_nodata() {
    if crate::skipped() {
        return;
    }
    init();
    let seed = std::env::var("WARPLINE_KERNEL_SEED")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0x005e_ed0f_3a11);
    let mut rng = Rng(seed);
    let (mut ours, mut theirs) = (0, 0);
    let methods = ["near", "bilinear", "cubic", "average"];
    let mut ours_by = [0usize; 4];
    // Cases warpline's downsampling loop took (a chunk or more), and
    // cases warped over the plain base (`plain.rs`).
    let (mut scaled, mut plain) = (0, 0);
    let cases = std::env::var("WARPLINE_KERNEL_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(CASES);
    for case in 0..cases {
        let (src, what) = raster(&mut rng, case);
        let target = TARGETS[rng.below(TARGETS.len() as u64) as usize];
        let m = rng.below(methods.len() as u64) as usize;
        let method = methods[m];
        let args: Vec<String> = [
            "-t_srs", target, "-r", method, "-et", "0.125", "-wm", "67108864",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let plan = Plan::from_args(&args).unwrap();
        match source_refusal(&src, &plan) {
            None => {}
            // GDAL's fast path: still compared, through the replica.
            Some("no invalid pixels") => {}
            Some(why) => panic!("{what}: refused ({why})"),
        }
        super::downsample::SCALED.with(|c| c.set(0));
        super::plain::TOOK.with(|c| c.set(0));
        let (mine, took, _) = match warp(&src, &plan) {
            Ok(Warp::Done(mine, took, checks)) => (mine, took, checks),
            Ok(_) => panic!("{what}: refused or asked again"),
            Err(e) => panic!("{what}: {e:?}"),
        };
        plain += super::plain::TOOK.with(|c| c.get());
        let options = WarpOptions::new(&args).unwrap();
        let gdals = gdal_warp(&[&src], &options).unwrap_or_else(|e| panic!("{what}: {e:?}"));
        same(
            &mine,
            &gdals,
            &format!("{what} -> {target} {method} ({took:?})"),
        );
        match took {
            Took::Ours => {
                ours += 1;
                ours_by[m] += 1;
                scaled += usize::from(super::downsample::SCALED.with(|c| c.replace(0)) > 0);
            }
            Took::Theirs(why) => {
                eprintln!("{what} -> {target} {method}: GDAL's loop ({why})");
                theirs += 1
            }
        }
    }
    eprintln!(
        "warpline's loop: {ours} cases ({methods:?}: {ours_by:?}; downsampling: {scaled}), GDAL's: {theirs}; plain base: {plain}"
    );
    // Four of five cases have nodata, a mask or alpha (GDAL's loop for the
    // others, and for a few data types and windows).
    assert!(
        ours >= cases / 4,
        "warpline's loop took only {ours} of {cases} cases"
    );
    // Each method's loop is exercised, not only compared where GDAL's ran
    // (cubic the least: GDAL keeps its own loops for cubic with only an
    // alpha band and for cubic downsampling).
    for (method, n) in methods.iter().zip(ours_by) {
        assert!(
            n >= (cases / 40).max(1),
            "warpline's {method} loop took only {n} of {cases} cases"
        );
    }
    // And its downsampling loop (bilinear and cubic below a scale of
    // 0.95), which the anisotropic grids drawn here often need.
    assert!(
        scaled >= (cases / 40).max(1),
        "warpline's downsampling loop took only {scaled} of {cases} cases"
    );
    // Most projected sources to another CRS warp over the plain base.
    assert!(
        plain >= cases / 10,
        "the plain base took only {plain} of {cases} cases"
    );
}

#[test]
fn plans_only_the_arguments_the_replica_makes() {
    if crate::skipped() {
        return;
    }
    // The stage's arguments with `method` and `et`, then `extra`.
    let plan = |method: &str, et: &str, extra: &[&str]| {
        let mut a = vec!["-t_srs", "EPSG:3857", "-r", method, "-et", et, "-wm", "64"];
        a.extend(extra);
        Plan::from_args(&a.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    };
    let p = plan("bilinear", "0.125", &[]).unwrap();
    assert_eq!(p.warp_memory, 64.0 * 1024.0 * 1024.0);
    assert_eq!(p.method, gdal_sys::GDALResampleAlg::GRA_Bilinear);
    let near = plan("near", "0.125", &[]).unwrap();
    assert_eq!(near.method, gdal_sys::GDALResampleAlg::GRA_NearestNeighbour);
    assert_eq!(plan("lanczos", "0.125", &[]), None);
    assert_eq!(plan("bilinear", "0", &[]), None);
    assert_eq!(plan("bilinear", "0.125", &["-dstnodata", "0"]), None);
}

#[test]
fn integers_round_clamp_and_step_off_nodata_as_gdal() {
    if crate::skipped() {
        return;
    }
    use super::bilinear::Sample;
    assert_eq!(u8::store(254.5, None), 255);
    assert_eq!(u8::store(300.0, None), 255);
    assert_eq!(u8::store(-3.0, None), 0);
    assert_eq!(u8::store(0.2, Some(0.0)), 1);
    assert_eq!(i16::store(-2.5, None), -2);
    assert_eq!(i16::store(-32768.0, Some(-32768.0)), -32767);
    assert_eq!(u16::store(7.4, Some(7.0)), 6);
    assert!(f32::store(f64::NAN, Some(0.0)).is_nan());
}

/// A panic in warpline's loop (a bug) fails the warp with an error saying
/// so and how to go on, and never unwinds through GDAL's C frames.
#[test]
fn a_panic_in_the_loop_is_the_warps_error() {
    if crate::skipped() {
        return;
    }
    init();
    let mut rng = Rng(7);
    let (src, what) = loop {
        let (src, what) = raster(&mut rng, 0);
        if what.contains("Nodata") {
            break (src, what);
        }
    };
    let args: Vec<String> = [
        "-t_srs",
        "EPSG:3857",
        "-r",
        "near",
        "-et",
        "0.125",
        "-wm",
        "64",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let plan = Plan::from_args(&args).unwrap();
    super::hook::PANIC_IN_LOOP.with(|p| p.set(true));
    let result = warp(&src, &plan);
    super::hook::PANIC_IN_LOOP.with(|p| p.set(false));
    match result {
        Err(warpline_gdal::WarpError::Failed(m)) => {
            assert!(
                m.contains("warpline's resampling loop failed"),
                "{what}: {m}"
            );
            assert!(m.contains("kernel = \"gdal\""), "{m}");
        }
        Ok(Warp::Done(_, took, _)) => panic!("{what}: {took:?}"),
        Ok(_) => panic!("{what}: refused or asked again"),
        Err(e) => panic!("{what}: {e:?}"),
    }
}

/// The warp spec of a gdalwarp argument list of the flags the tests use
/// (`-t_srs -r -et -wm -dstnodata`).
pub(crate) fn spec_of(args: &[String]) -> WarpSpec {
    let mut spec = WarpSpec::new("");
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it.next().expect("a value for every flag");
        match flag.as_str() {
            "-t_srs" => spec.dst_crs = value.clone(),
            "-r" => spec.resampling = Resampling::from_name(value).expect("a method"),
            "-et" => spec.error_threshold = value.parse().expect("a number"),
            "-wm" => {
                let wm: u64 = value.parse().expect("a whole number");
                spec.warp_memory = if wm < 10000 { wm << 20 } else { wm };
            }
            "-dstnodata" => spec.dst_nodata = Some(value.clone()),
            other => panic!("spec_of does not know {other}"),
        }
    }
    spec
}

impl Plan {
    /// The plan for a gdalwarp argument list (see [`spec_of`]).
    pub(crate) fn from_args(args: &[String]) -> Option<Plan> {
        Plan::from_spec(&spec_of(args))
    }
}
