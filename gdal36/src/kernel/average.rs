//! warpline's average loop: GDAL 3.6.2's `GWKAverageOrModeThread` for
//! `GRA_Average` (alg/gdalwarpkernel.cpp), with the same floating-point
//! operations in the same order. Each destination pixel's corners go
//! through the warp's transformer (two rows of points per line, as GDAL
//! transforms them); the source pixels under the footprint are averaged,
//! the partial ones at its edges weighted by how much of them it covers
//! (`COMPUTE_WEIGHT_Y`, `COMPUTE_WEIGHT`).
//!
//! GDAL's quirks are kept: once any band of a pixel found a value, a
//! later band that found none still stores (at the density its last
//! sample read, which leaves the pixel as it was unless that density is
//! NaN); the destination density is overlaid with 1.
//!
//! GDAL 3.12 (`Chunk::mean_incremental`) averages otherwise, and so does
//! this on 3.12: a weighted incremental mean over the samples of positive
//! weight (`dfValueReal += (dfWeight / dfTotalWeight) * (v - dfValueReal)`,
//! 3.12.1 alg/gdalwarpkernel.cpp:7596-7640), a footprint that misses the
//! source window takes nothing, and a footprint across the antimeridian
//! is one only where the pixel's middle transforms left of it
//! (`GWKAverageOrModeComputeSourceCoords`, 6596-6680).

use super::bilinear::{bit, Chunk, Sample, Transform, BAND_DENSITY_THRESHOLD};

/// `dfDensity` of `GWKAverageOrModeThread`, never changed for average.
const PIXEL_DENSITY: f64 = 1.0;

/// The source window under one destination pixel's footprint.
#[derive(Debug, Clone, Copy)]
struct Footprint {
    x: (f64, f64),
    y: (f64, f64),
    ix: (i32, i32),
    iy: (i32, i32),
    wrap: bool,
}

impl Footprint {
    /// `COMPUTE_WEIGHT_Y`.
    #[inline(always)]
    fn weight_y(&self, iy: i32) -> f64 {
        let (min, max) = self.iy;
        if iy == min {
            if min + 1 == max {
                1.0
            } else {
                1.0 - (self.y.0 - f64::from(min))
            }
        } else if iy + 1 == max {
            1.0 - (f64::from(max) - self.y.1)
        } else {
            1.0
        }
    }

    /// `COMPUTE_WEIGHT`.
    #[inline(always)]
    fn weight(&self, ix: i32, wy: f64) -> f64 {
        let (min, max) = self.ix;
        if ix == min {
            if min + 1 == max {
                wy
            } else {
                wy * (1.0 - (self.x.0 - f64::from(min)))
            }
        } else if ix + 1 == max {
            wy * (1.0 - (f64::from(max) - self.x.1))
        } else {
            wy
        }
    }
}

impl<T: Sample> Chunk<'_, T> {
    /// The whole chunk, line by line, as `GWKAverageOrModeThread`; `scale`
    /// is `PerformWarp`'s (`dfXScale`, `dfYScale`).
    pub(crate) fn run_average(&mut self, tr: &mut impl Transform, scale: (f64, f64)) {
        let (w, _) = self.dst_size;
        let (mut x, mut y, mut z) = (vec![0f64; w], vec![0f64; w], vec![0f64; w]);
        let (mut x2, mut y2, mut z2) = (vec![0f64; w], vec![0f64; w], vec![0f64; w]);
        let (mut ok, mut ok2) = (vec![0i32; w], vec![0i32; w]);
        let (xo, yo) = (f64::from(self.dst_off.0), f64::from(self.dst_off.1));
        for row in 0..self.dst_size.1 {
            for col in 0..w {
                // `iDstX + nDstXOff`: an integer sum, then a double.
                x[col] = (col as i64 + i64::from(self.dst_off.0)) as f64;
                y[col] = (row as i64 + i64::from(self.dst_off.1)) as f64;
                x2[col] = col as f64 + 1.0 + xo;
                y2[col] = row as f64 + 1.0 + yo;
            }
            z.fill(0.0);
            z2.fill(0.0);
            tr.transform(&mut x, &mut y, &mut z, &mut ok);
            tr.transform(&mut x2, &mut y2, &mut z2, &mut ok2);
            for col in 0..w {
                if ok[col] == 0 || ok2[col] == 0 {
                    continue;
                }
                let corners = ((x[col], y[col]), (x2[col], y2[col]));
                if let Some(f) = self.footprint(tr, (col, row), corners, scale) {
                    self.average_pixel(row * w + col, &f);
                }
            }
        }
    }

    /// The footprint of one destination pixel from its two transformed
    /// corners, or None when they are far off the source window (GDAL's
    /// check for issue 2365).
    fn footprint(
        &self,
        tr: &mut impl Transform,
        (col, row): (usize, usize),
        ((mut x, mut y), (mut x2, mut y2)): ((f64, f64), (f64, f64)),
        scale: (f64, f64),
    ) -> Option<Footprint> {
        let margin = |s: f64| f64::from(2 * 1.max((1.0 / s).ceil() as i32));
        let (xm, ym) = (margin(scale.0), margin(scale.1));
        let (sw, sh) = (self.src_size.0 as i32, self.src_size.1 as i32);
        let (xoff, yoff) = (f64::from(self.src_off.0), f64::from(self.src_off.1));
        let inside = x - xoff >= -xm
            && x2 - xoff >= -xm
            && y - yoff >= -ym
            && y2 - yoff >= -ym
            && x - xoff - f64::from(sw) <= xm
            && x2 - xoff - f64::from(sw) <= xm
            && y - yoff - f64::from(sh) <= ym
            && y2 - yoff - f64::from(sh) <= ym;
        if !inside {
            return None;
        }
        if x > x2 {
            std::mem::swap(&mut x, &mut x2);
        }
        // Near the antimeridian, a footprint across the window's two ends.
        let threshold = f64::from(2.min(sw / 10));
        let wrap = self.src_off.0 == 0
            && x * scale.0 < threshold
            && (f64::from(sw) - x2) * scale.0 < threshold
            && (!self.mean_incremental || self.middle_left_of(tr, (col, row), x));
        if wrap {
            std::mem::swap(&mut x, &mut x2);
            x2 += f64::from(sw);
        }
        let x_min = x - xoff;
        let misses =
            |min: f64, max: f64, size: i32| !(max > -1e-10 && min < f64::from(size) + 1e-10);
        if self.mean_incremental && misses(x_min, x2 - xoff, sw) {
            return None;
        }
        let ix_min = ((x_min + 1e-10).floor().max(0.0)).min(f64::from(sw)) as i32;
        let x_max = x2 - xoff;
        let mut ix_max = (x_max - 1e-10).ceil().min(f64::from(i32::MAX)) as i32;
        if !wrap {
            ix_max = ix_max.min(sw);
        }
        if ix_min == ix_max && ix_max < sw {
            ix_max += 1;
        }
        if y > y2 {
            std::mem::swap(&mut y, &mut y2);
        }
        let y_min = y - yoff;
        if self.mean_incremental && misses(y_min, y2 - yoff, sh) {
            return None;
        }
        let iy_min = ((y_min + 1e-10).floor().max(0.0)).min(f64::from(sh)) as i32;
        let y_max = y2 - yoff;
        let mut iy_max = (y_max - 1e-10).ceil().min(f64::from(sh)) as i32;
        if iy_min == iy_max && iy_max < sh {
            iy_max += 1;
        }
        Some(Footprint {
            x: (x_min, x_max),
            y: (y_min, y_max),
            ix: (ix_min, ix_max),
            iy: (iy_min, iy_max),
            wrap,
        })
    }

    /// GDAL 3.12's test of a footprint across the antimeridian: the
    /// middle of the pixel's top edge transforms left of `x`.
    fn middle_left_of(&self, tr: &mut impl Transform, (col, row): (usize, usize), x: f64) -> bool {
        let mut mx = [col as f64 + 0.5 + f64::from(self.dst_off.0)];
        // `iDstY + nDstYOff`: an integer sum, then a double.
        let mut my = [(row as i64 + i64::from(self.dst_off.1)) as f64];
        let (mut mz, mut ok) = ([0f64], [0i32]);
        tr.transform(&mut mx, &mut my, &mut mz, &mut ok);
        ok[0] != 0 && mx[0] < x
    }

    /// One destination pixel `at`: each band's weighted average, stored.
    fn average_pixel(&mut self, at: usize, f: &Footprint) {
        let mut found = false;
        for band in 0..self.src.len() {
            let (density, value) = self.average(band, f);
            if density.is_some() {
                found = true;
            }
            if found {
                let d = density.unwrap_or_else(|| self.last_density(band, f));
                self.store(band, at, d, value);
            }
        }
        if found {
            self.overlay(at, PIXEL_DENSITY);
        }
    }

    /// The source offset of pixel `ix` of source line `iy`.
    #[inline(always)]
    fn offset(&self, f: &Footprint, ix: i32, iy: i32) -> usize {
        let sw = self.src_size.0;
        if f.wrap {
            (ix as usize % sw) + iy as usize * sw
        } else {
            ix as usize + iy as usize * sw
        }
    }

    /// `GWKGetPixelValue` for a pixel the unified mask lets through: the
    /// density it reports, and the value when it is valid.
    #[inline(always)]
    fn pixel(&self, band: usize, offset: usize) -> (f64, Option<f64>) {
        if let Some(m) = self.band_valid.as_ref().and_then(|v| v[band]) {
            if !bit(m, offset) {
                return (0.0, None);
            }
        }
        let density = self.unified_density.map_or(1.0, |d| f64::from(d[offset]));
        (density, Some(self.src[band][offset].value()))
    }

    /// One band's average over the footprint: (Some(1), value) when any
    /// sample counted, else (None, 0).
    fn average(&self, band: usize, f: &Footprint) -> (Option<f64>, f64) {
        let (mut total, mut weight) = (0.0f64, 0.0f64);
        for iy in f.iy.0..f.iy.1 {
            let wy = f.weight_y(iy);
            for ix in f.ix.0..f.ix.1 {
                let offset = self.offset(f, ix, iy);
                if self.unified_valid.is_some_and(|m| !bit(m, offset)) {
                    continue;
                }
                let (density, value) = self.pixel(band, offset);
                if let Some(v) = value {
                    if density != 0.0 && density > BAND_DENSITY_THRESHOLD {
                        let wt = f.weight(ix, wy);
                        if !self.mean_incremental {
                            weight += wt;
                            total += v * wt;
                        } else if wt > 0.0 {
                            // `total` is the running mean.
                            weight += wt;
                            total += (wt / weight) * (v - total);
                        }
                    }
                }
            }
        }
        if weight > 0.0 {
            (
                Some(1.0),
                if self.mean_incremental {
                    total
                } else {
                    total / weight
                },
            )
        } else {
            (None, 0.0)
        }
    }

    /// The density `GWKGetPixelValue` last reported over the footprint
    /// for `band` (0 when it read none): what GDAL stores a band that
    /// found nothing with, once an earlier band found a value.
    fn last_density(&self, band: usize, f: &Footprint) -> f64 {
        for iy in (f.iy.0..f.iy.1).rev() {
            for ix in (f.ix.0..f.ix.1).rev() {
                let offset = self.offset(f, ix, iy);
                if self.unified_valid.is_some_and(|m| !bit(m, offset)) {
                    continue;
                }
                return self.pixel(band, offset).0;
            }
        }
        0.0
    }
}
