//! One band's value at a source point from its four samples: GDAL 3.6.2's
//! `GWKBilinearResample4Sample` (alg/gdalwarpkernel.cpp), with a fast path
//! for the common case where all four are inside the window and valid.
//! The bilinear loop (`bilinear.rs`) says where the samples are; the cubic
//! and downsampling loops fall back to this where GDAL does.

use super::bilinear::{bit, four, Corners, Sample, Source, SRC_DENSITY_THRESHOLD};

impl<T: Sample> Source<'_, T> {
    /// `GWKBilinearResample4Sample` for this band: (density, value).
    #[inline(always)]
    pub(super) fn bilinear(&self, at: &Corners) -> (f64, f64) {
        if let Some(v) = self.all_valid(at) {
            return v;
        }
        let (w, h) = self.size;
        let n = w * h;
        let (mut divisor, mut real, mut dens) = (0.0f64, 0.0f64, 0.0f64);
        let rows = [
            (at.y as isize, at.offset, at.top),
            (at.y as isize + 1, at.offset + w, at.bottom),
        ];
        for (line, offset, (m1, m2)) in rows {
            if !(line >= 0 && line < h && offset >= 0 && offset < n) {
                continue;
            }
            let Some((mut d, mut v)) = self.pixel_row(offset as usize) else {
                continue;
            };
            if at.shifted {
                v[0] = v[1];
                d[0] = d[1];
            }
            let x = at.x as isize;
            if x >= 0 && x < w && d[0] > SRC_DENSITY_THRESHOLD {
                divisor += m1;
                real += v[0] * m1;
                dens += d[0] * m1;
            }
            if x + 1 >= 0 && x + 1 < w && d[1] > SRC_DENSITY_THRESHOLD {
                divisor += m2;
                real += v[1] * m2;
                dens += d[1] * m2;
            }
        }
        weighed(divisor, dens, real)
    }

    /// The common case, where all four samples are inside the window and
    /// valid (with a density above the threshold, if any): GDAL's sums
    /// (from 0.0, in the same order: top left, top right, bottom left,
    /// bottom right) without its per-sample tests. Without a density
    /// every density is 1, so the density sum is the divisor and the
    /// result's density is exactly 1.
    #[inline(always)]
    fn all_valid(&self, at: &Corners) -> Option<(f64, f64)> {
        if !at.inside {
            return None;
        }
        let o = at.offset as usize;
        let w = self.size.0 as usize;
        if !self.band_valid.is_none_or(|m| four(m, o, w)) {
            return None;
        }
        let (top, bottom) = (&self.src[o..o + 2], &self.src[o + w..o + w + 2]);
        let (m1, m2) = at.top;
        let (m3, m4) = at.bottom;
        let divisor = 0.0 + m1 + m2 + m3 + m4;
        let real = 0.0
            + top[0].value() * m1
            + top[1].value() * m2
            + bottom[0].value() * m3
            + bottom[1].value() * m4;
        let Some(ud) = self.unified_density else {
            // Every density 1: the density sum is the divisor.
            return Some(weighed(divisor, divisor, real));
        };
        // `GWKGetPixelRow` takes a sample whose density is above the
        // threshold (a NaN is not): then all four, as here.
        let d = [ud[o], ud[o + 1], ud[o + w], ud[o + w + 1]].map(f64::from);
        if !d.iter().all(|&d| d > SRC_DENSITY_THRESHOLD) {
            return None;
        }
        let dens = 0.0 + d[0] * m1 + d[1] * m2 + d[2] * m3 + d[3] * m4;
        Some(weighed(divisor, dens, real))
    }

    /// `GWKGetPixelRow` for two pixels from `offset`: their densities and
    /// values, or None when neither is valid.
    #[inline(always)]
    fn pixel_row(&self, offset: usize) -> Option<([f64; 2], [f64; 2])> {
        let mut d = [1.0f64, 1.0];
        // The unified mask, then the band's: each zeroes the density of
        // an invalid pixel, and fails the row when neither is valid.
        for m in [self.unified_valid, self.band_valid].into_iter().flatten() {
            let (a, b) = (bit(m, offset), bit(m, offset + 1));
            if !a {
                d[0] = 0.0;
            }
            if !b {
                d[1] = 0.0;
            }
            if !(a || b) {
                return None;
            }
        }
        let src = self.src;
        let v = [src[offset].value(), src[offset + 1].value()];
        let mut valid = false;
        match self.unified_density {
            None => {
                for di in d.iter_mut() {
                    if *di > SRC_DENSITY_THRESHOLD {
                        *di = 1.0;
                        valid = true;
                    }
                }
            }
            Some(ud) => {
                for (k, di) in d.iter_mut().enumerate() {
                    if *di > SRC_DENSITY_THRESHOLD {
                        *di = f64::from(ud[offset + k]);
                    }
                    if *di > SRC_DENSITY_THRESHOLD {
                        valid = true;
                    }
                }
            }
        }
        valid.then_some((d, v))
    }
}

/// `GWKBilinearResample4Sample`'s end: the sums of density and value
/// divided by the sum of the weights taken, unless it is 1 (then as they
/// are) or nearly 0 (then nothing).
#[inline(always)]
fn weighed(divisor: f64, dens: f64, real: f64) -> (f64, f64) {
    if divisor == 1.0 {
        (dens, real)
    } else if divisor < 0.00001 {
        (0.0, 0.0)
    } else {
        (dens / divisor, real / divisor)
    }
}
