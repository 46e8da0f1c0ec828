//! warpline's cubic loop for a chunk with validity masks: GDAL 3.6.2's
//! `GWKCubicResample4Sample` (Catmull-Rom weights from
//! `GWKCubicComputeWeights`, rows summed by `CONVOL4`, alg/gdalwarpkernel.cpp)
//! inside the bilinear loop's walk (`bilinear.rs`): where any of the 16
//! samples is off the window or invalid, GDAL falls back to its bilinear
//! 4-sample formula, and so does this. With an alpha band alone it is
//! `GWKCubicResampleSrcMaskIsDensity4SampleReal` (the same operations) or,
//! for Byte and UInt16, its template, which reads the densities directly.

use super::bilinear::{bit, Corners, Sample, Source, SRC_DENSITY_THRESHOLD};

/// `GWKCubicComputeWeights`.
#[inline(always)]
fn weights(x: f64) -> [f64; 4] {
    let half = 0.5 * x;
    let three = 3.0 * x;
    let half2 = half * x;
    [
        half * (-1.0 + x * (2.0 - x)),
        1.0 + half2 * (-5.0 + three),
        half * (1.0 + x * (4.0 - three)),
        half2 * (-1.0 + x),
    ]
}

/// `CONVOL4`.
#[inline(always)]
fn convol4(a: &[f64; 4], b: &[f64; 4]) -> f64 {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2] + a[3] * b[3]
}

impl<T: Sample> Source<'_, T> {
    /// `GWKCubicResample4Sample` for this band: (density, value).
    #[inline(always)]
    pub(super) fn cubic(&self, at: &Corners) -> (f64, f64) {
        let (sx, sy) = at.at;
        let (w, h) = self.size;
        // A truncation, not a floor, as GDAL's cast.
        let ix = (sx - 0.5) as i32 as isize;
        let iy = (sy - 0.5) as i32 as isize;
        let offset = ix + iy * w;
        let dx = sx - 0.5 - ix as f64;
        let dy = sy - 0.5 - iy as f64;
        if ix - 1 < 0 || ix + 2 >= w || iy - 1 < 0 || iy + 2 >= h {
            return self.bilinear(at);
        }
        let cx = weights(dx);
        let (mut dens, mut real) = ([0f64; 4], [0f64; 4]);
        // An alpha band alone, for Byte and UInt16: GDAL's template reads
        // the densities as they are (no `GWKGetPixelRow`).
        let template = T::DENSITY_TEMPLATE
            && self.unified_valid.is_none()
            && self.band_valid.is_none()
            && self.unified_density.is_some();
        for i in -1..3isize {
            let row = (offset + i * w - 1) as usize;
            let pixels = if template {
                Some(self.density_row4(row))
            } else {
                self.pixel_row4(row)
            };
            let Some((d, v)) = pixels else {
                return self.bilinear(at);
            };
            if d.iter().any(|x| *x < SRC_DENSITY_THRESHOLD) {
                return self.bilinear(at);
            }
            dens[(i + 1) as usize] = convol4(&cx, &d);
            real[(i + 1) as usize] = convol4(&cx, &v);
        }
        let cy = weights(dy);
        (convol4(&cy, &dens), convol4(&cy, &real))
    }

    /// Four pixels from `offset` with their unified densities, as
    /// `GWKCubicResampleSrcMaskIsDensity4SampleRealT` reads them.
    #[inline(always)]
    fn density_row4(&self, offset: usize) -> ([f64; 4], [f64; 4]) {
        let s = &self.src[offset..offset + 4];
        let d = self.unified_density.map_or([1.0; 4], |ud| {
            let u = &ud[offset..offset + 4];
            [u[0], u[1], u[2], u[3]].map(f64::from)
        });
        (d, [s[0].value(), s[1].value(), s[2].value(), s[3].value()])
    }

    /// `GWKGetPixelRow` for four pixels from `offset`.
    #[inline(always)]
    fn pixel_row4(&self, offset: usize) -> Option<([f64; 4], [f64; 4])> {
        let mut d = [1.0f64; 4];
        for m in [self.unified_valid, self.band_valid].into_iter().flatten() {
            let mut any = false;
            for (k, dk) in d.iter_mut().enumerate() {
                if bit(m, offset + k) {
                    any = true;
                } else {
                    *dk = 0.0;
                }
            }
            if !any {
                return None;
            }
        }
        let s = &self.src[offset..offset + 4];
        let v = [s[0].value(), s[1].value(), s[2].value(), s[3].value()];
        let mut valid = false;
        for (k, dk) in d.iter_mut().enumerate() {
            if *dk > SRC_DENSITY_THRESHOLD {
                *dk = match self.unified_density {
                    Some(ud) => f64::from(ud[offset + k]),
                    None => 1.0,
                };
            }
            if *dk > SRC_DENSITY_THRESHOLD {
                valid = true;
            }
        }
        valid.then_some((d, v))
    }
}
