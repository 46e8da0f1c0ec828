//! The hook through which an accelerator takes the warps it is proven on.
//!
//! An accelerator is code tied to one GDAL version's internals (the
//! `warpline-gdal36` crate mirrors GDAL 3.6's warp kernel), so it lives in
//! a crate of its own, behind a cargo feature, and plugs in here at
//! start-up ([`install`]). It is probed once ([`Accelerator::probe`]); the
//! answer is the [`WarpPath`] that `warpline plan`, the run report and a
//! start-up log line show. Without one, or when its probe says no, every
//! warp is GDAL's own (`GDALWarp`), on any GDAL from 3.4 on.

use std::sync::OnceLock;

use gdal::Dataset;

use crate::spec::WarpSpec;
use crate::warp::WarpError;

/// Which loop warped one output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Took {
    /// The accelerator's, every chunk.
    Accelerated,
    /// GDAL's (for some chunk), and why.
    Gdal(&'static str),
}

/// An output the accelerator made, which loop warped it, and how many
/// points skipped gdalwarp's inverse projection check and how many ran it.
#[derive(Debug)]
pub struct Accelerated {
    /// The warped dataset (MEM).
    pub output: Dataset,
    /// Which loop warped it.
    pub took: Took,
    /// Points whose inverse check was proven to pass and skipped.
    pub checks_skipped: u64,
    /// Points whose inverse check ran.
    pub checks_kept: u64,
}

/// Code that warps some inputs faster than `GDALWarp`, with `GDALWarp`'s
/// pixels. Implemented by an accelerator crate; called on the blocking
/// stages' threads.
pub trait Accelerator: Send + Sync + 'static {
    /// Its name, as `plan` and the report show it (`gdal36`).
    fn name(&self) -> &'static str;

    /// Whether it is proven for the GDAL and PROJ this process runs (and
    /// their configuration): `Err` says why not. Called once.
    fn probe(&self) -> Result<(), String>;

    /// An area of interest every transformer of these sources may share
    /// (a `-to AREA_OF_INTEREST=...` value) where it provably cannot change
    /// PROJ's choice of operation, so GDAL's cache of transformations
    /// serves every tile; `None` to leave GDAL's per-tile area.
    fn area_of_interest(&self, srcs: &[&Dataset], spec: &WarpSpec) -> Option<String>;

    /// The warp of `src` with `spec` to a new MEM dataset, or `Ok(None)`
    /// where it is not proven for these settings or this input (the caller
    /// then calls `GDALWarp`); the reason is logged at debug level.
    fn warp(&self, src: &Dataset, spec: &WarpSpec) -> Result<Option<Accelerated>, WarpError>;
}

static INSTALLED: OnceLock<&'static dyn Accelerator> = OnceLock::new();
static PATH: OnceLock<WarpPath> = OnceLock::new();

/// Installs `accelerator` for this process, once (a second call is
/// ignored: the first stays). Call it before the first pipeline compiles.
pub fn install(accelerator: &'static dyn Accelerator) {
    let _ = INSTALLED.set(accelerator);
}

/// The warp path this process takes, probed once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WarpPath {
    /// The accelerator `name` warps what it is proven on; GDAL the rest.
    Accelerated {
        /// The accelerator's name.
        name: &'static str,
    },
    /// Every warp is `GDALWarp`'s, and why.
    Gdal {
        /// Why no accelerator is active.
        why: String,
    },
}

impl std::fmt::Display for WarpPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = crate::versions();
        match self {
            WarpPath::Accelerated { name } => write!(
                f,
                "accelerated ({name}: warpline's resampling loops where proven equal to gdalwarp, GDAL's elsewhere; {v})"
            ),
            WarpPath::Gdal { why } => write!(f, "GDAL's warp loop ({why}; {v})"),
        }
    }
}

/// The warp path of this process: the installed accelerator's probe, run
/// once, or why there is none.
pub fn warp_path() -> &'static WarpPath {
    PATH.get_or_init(|| match INSTALLED.get() {
        None => WarpPath::Gdal {
            why: "no accelerator built in (cargo feature `gdal36`)".to_owned(),
        },
        Some(a) => match a.probe() {
            Ok(()) => WarpPath::Accelerated { name: a.name() },
            Err(why) => WarpPath::Gdal {
                why: format!("accelerator {} is off: {why}", a.name()),
            },
        },
    })
}

/// The active accelerator, if its probe passed.
pub(crate) fn active() -> Option<&'static dyn Accelerator> {
    match warp_path() {
        WarpPath::Accelerated { .. } => INSTALLED.get().copied(),
        WarpPath::Gdal { .. } => None,
    }
}
