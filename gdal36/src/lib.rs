//! # warpline-gdal36
//!
//! warpline's warp accelerator, proven on GDAL 3.6 with PROJ 9.1 (every
//! path) and on GDAL 3.12 with PROJ 9.6 (every path, three of the loops
//! keyed on the version): code that mirrors GDAL versions' internals, so
//! it is an optional plug-in (cargo feature `gdal36` of `warpline` and
//! `warpline-cli`, named after the version it was first proven on),
//! installed at start-up ([`install`]) and probed once: on any other GDAL
//! it switches itself off and says why, and every warp is GDAL's own.
//!
//! Its rooms, in the order a warp meets them:
//!
//! - `area`: when one area of interest serves every tile (two CRSs that
//!   share their datum, a CRS PROJ knows only by its PROJ string, and with
//!   the `proj-db` feature a CRS PROJ's registry holds no operation for),
//!   so GDAL's cache of transformations serves them all;
//! - `kernel`: gdalwarp's own calls made one by one, with warpline's
//!   resampling loops in a pre-warp chunk processor (bilinear, nearest,
//!   cubic, average) and two transformer shortcuts (`plain`, `limb`),
//!   where each is proven equal to gdalwarp to the bit.
//!
//! The arguments behind each proof are in docs/design/accelerator.md and
//! in the module docs; the proofs' tests are here and in the workspace's
//! fidelity suite (`tests/all/fidelity/`).

#![warn(missing_debug_implementations, unreachable_pub)]
#![deny(unsafe_op_in_unsafe_fn)]

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use gdal::spatial_ref::SpatialRef;
use gdal::Dataset;
use warpline_gdal::accel::{Accelerated, Accelerator, Took};
use warpline_gdal::{WarpError, WarpSpec};

mod area;
mod kernel;

use area::OneArea;

/// The accelerator (one per process, installed by [`install`]).
#[derive(Debug, Default)]
pub struct Gdal36 {
    /// By target CRS and source CRS (WKT2): whether one area of interest
    /// serves every tile, and why.
    areas: Mutex<HashMap<(String, String), OneArea>>,
    /// The target CRS as GDAL reads it, by the text the pipeline gave.
    targets: Mutex<HashMap<String, Option<String>>>,
}

/// Installs the accelerator for this process (once; later calls do
/// nothing). Its probe runs when the first warp path is asked for.
pub fn install() {
    static ONE: OnceLock<Gdal36> = OnceLock::new();
    warpline_gdal::accel::install(ONE.get_or_init(Gdal36::default));
}

/// Cached answers kept at most (they are cleared past this).
const KEPT: usize = 64;

impl Accelerator for Gdal36 {
    fn name(&self) -> &'static str {
        "gdal36"
    }

    fn probe(&self) -> Result<(), String> {
        let v = warpline_gdal::versions();
        if !matches!((v.gdal.major, v.gdal.minor), (3, 6) | (3, 12)) {
            return Err(format!(
                "GDAL {} is neither 3.6 nor 3.12, the versions whose warp kernel it mirrors",
                v.gdal
            ));
        }
        Ok(())
    }

    fn area_of_interest(&self, srcs: &[&Dataset], spec: &WarpSpec) -> Option<String> {
        if !area::spec_argued(spec) {
            return None;
        }
        let target = self.target(&spec.dst_crs)?;
        srcs.iter()
            .all(|src| self.one_area_for(src, spec, &target).holds())
            .then(|| area::shared_area().to_owned())
    }

    fn warp(&self, src: &Dataset, spec: &WarpSpec) -> Result<Option<Accelerated>, WarpError> {
        let Some(plan) = kernel::Plan::from_spec(spec) else {
            return Ok(None);
        };
        if let Some(why) = kernel::source_refusal(src, &plan) {
            tracing::debug!("GDAL's warp ({why})");
            return Ok(None);
        }
        let (output, took, checks) = match kernel::warp(src, &plan)? {
            kernel::Warp::Done(output, took, checks) => (output, took, checks),
            kernel::Warp::Refused(why) => {
                tracing::debug!("GDAL's warp ({why})");
                return Ok(None);
            }
            // `kernel::warp` does its own again.
            kernel::Warp::Again => {
                return Err(WarpError::Failed(
                    "the warp asked for itself again".to_owned(),
                ))
            }
        };
        Ok(Some(Accelerated {
            output,
            took: match took {
                kernel::Took::Ours => Took::Accelerated,
                kernel::Took::Theirs(why) => Took::Gdal(why),
            },
            checks_skipped: checks.skipped,
            checks_kept: checks.kept,
        }))
    }
}

impl Gdal36 {
    /// The target CRS as WKT, as the stage reads it (`None`: PROJ does not
    /// understand it), found once per text.
    fn target(&self, text: &str) -> Option<String> {
        let mut known = self.targets.lock().unwrap_or_else(|p| p.into_inner());
        if known.len() >= KEPT {
            known.clear();
        }
        known
            .entry(text.to_owned())
            .or_insert_with(|| warpline_gdal::crs_to_wkt(text).ok())
            .clone()
    }

    /// Why one area may serve `src`'s CRS (the spec's `src_crs` when one
    /// is given, read as GDAL's transformer reads it; else the dataset's
    /// own CRS object), found once per CRS and target.
    fn one_area_for(&self, src: &Dataset, spec: &WarpSpec, target_wkt: &str) -> OneArea {
        let srs = match &spec.src_crs {
            Some(text) => match warpline_gdal::crs_to_wkt(text) {
                Ok(wkt) => SpatialRef::from_definition(&wkt),
                Err(_) => return OneArea::No,
            },
            None => src.spatial_ref(),
        };
        let Ok(srs) = srs else {
            return OneArea::No;
        };
        // The key holds all a WKT2 can say (a WKT1 loses epochs, say).
        let Some(key) = area::wkt2(&srs) else {
            return OneArea::No;
        };
        let key = (target_wkt.to_owned(), key);
        let mut known = self.areas.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(why) = known.get(&key) {
            return *why;
        }
        let why =
            SpatialRef::from_wkt(target_wkt).map_or(OneArea::No, |t| area::one_area(&srs, &t));
        if known.len() >= KEPT {
            known.clear();
        }
        known.insert(key, why);
        why
    }
}

#[cfg(test)]
mod tests;

/// Whether this process's GDAL is one the accelerator is not for: then a
/// test of it says "skipped: ..." and passes.
#[cfg(test)]
pub(crate) fn skipped() -> bool {
    match Gdal36::default().probe() {
        Ok(()) => false,
        Err(why) => {
            eprintln!("skipped: {why}");
            true
        }
    }
}

/// Whether the shared area of interest's tests skip here: it is proven on
/// GDAL 3.6 with PROJ 9.1 and GDAL 3.12 with PROJ 9.6 only, and off
/// elsewhere (said once per test).
#[cfg(test)]
pub(crate) fn area_skipped() -> bool {
    if skipped() {
        return true;
    }
    let off = !area::versions_proven();
    if off {
        eprintln!(
            "skipped: the shared area of interest is proven on GDAL 3.6 with PROJ 9.1 \
             and GDAL 3.12 with PROJ 9.6 only"
        );
    }
    off
}
