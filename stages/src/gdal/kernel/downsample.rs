//! warpline's bilinear loop where the warp downsamples (a resampling
//! scale under 0.95 on either axis): GDAL 3.6.2's `GWKRealCaseThread`
//! with `GWKResample` and its `GWKBilinear` weights over a window of
//! `ceil(1 / scale)` source pixels each side (alg/gdalwarpkernel.cpp), with
//! `GWKGetPixelRow` over whole rows of that window. The rest (source
//! coordinates and offsets, densities, the value's store) is the 4-sample
//! loop's.

use super::bilinear::{bit, mixed, set_bit, Chunk, Sample, Transform, SRC_DENSITY_THRESHOLD};

/// `BAND_DENSITY_THRESHOLD`.
const BAND_DENSITY_THRESHOLD: f64 = 0.0000000001;

/// `GWKBilinear`: the triangle filter.
#[inline(always)]
fn weight(x: f64) -> f64 {
    let a = x.abs();
    if a <= 1.0 {
        1.0 - a
    } else {
        0.0
    }
}

/// The filter of one warp: `PerformWarp`'s scales and radii for bilinear.
#[derive(Debug, Clone, Copy)]
pub(super) struct Filter {
    pub(super) scale: (f64, f64),
    radius: (i32, i32),
}

impl Filter {
    pub(super) fn new(scale: (f64, f64)) -> Filter {
        let r = |s: f64| if s < 1.0 { (1.0 / s).ceil() as i32 } else { 1 };
        Filter {
            scale,
            radius: (r(scale.0), r(scale.1)),
        }
    }
}

impl<T: Sample> Chunk<'_, T> {
    /// The whole chunk, row by row, pixel by pixel, band by band, as
    /// `GWKRealCaseThread` when the 4-sample formula does not apply.
    pub(crate) fn run_scaled(&mut self, tr: &mut impl Transform, filter: Filter) {
        let (w, _) = self.dst_size;
        let mut x = vec![0f64; w];
        let mut y = vec![0f64; w];
        let mut z = vec![0f64; w];
        let mut ok = vec![0i32; w];
        let mut row_buf = RowBuf::new(filter);
        for row in 0..self.dst_size.1 {
            self.source_coordinates(tr, row, [&mut x, &mut y, &mut z], &mut ok);
            for col in 0..w {
                let Some(offset) = self.source_offset(tr, row, col, &mut x, &mut y, &mut ok) else {
                    continue;
                };
                let sx = x[col] - f64::from(self.src_off.0);
                let sy = y[col] - f64::from(self.src_off.1);
                self.scaled_pixel(offset, row * w + col, (sx, sy), filter, &mut row_buf);
            }
        }
    }

    /// One destination pixel `at`, whose source pixel is `offset`.
    fn scaled_pixel(
        &mut self,
        offset: usize,
        at: usize,
        s: (f64, f64),
        f: Filter,
        buf: &mut RowBuf,
    ) {
        let Some(density) = self.source_density(offset) else {
            return;
        };
        let mut found = false;
        for band in 0..self.src.len() {
            let (d, v) = self.resample(band, s, f, buf);
            if d < BAND_DENSITY_THRESHOLD {
                continue;
            }
            found = true;
            let nodata = self.dst_nodata.as_ref().map(|n| n[band]);
            let current = self.dst[band][at];
            self.dst[band][at] = mixed(
                current,
                at,
                d,
                v,
                self.dst_density.as_deref(),
                self.dst_valid.as_deref(),
                nodata,
            );
        }
        if !found {
            return;
        }
        if density >= 0.0001 {
            if let Some(d) = self.dst_density.as_deref_mut() {
                d[at] = (1.0 - (1.0 - density) * (1.0 - f64::from(d[at]))) as f32;
            }
        }
        if let Some(m) = self.dst_valid.as_deref_mut() {
            set_bit(m, at);
        }
    }

    /// `GWKResample` for one band at source point `(sx, sy)`: (density,
    /// value).
    fn resample(
        &self,
        band: usize,
        (sx, sy): (f64, f64),
        f: Filter,
        buf: &mut RowBuf,
    ) -> (f64, f64) {
        let (w, h) = (self.src_size.0 as i32, self.src_size.1 as i32);
        let ix = (sx - 0.5).floor() as i32;
        let iy = (sy - 0.5).floor() as i32;
        let offset = i64::from(ix) + i64::from(iy) * i64::from(w);
        let dx = sx - 0.5 - f64::from(ix);
        let dy = sy - 0.5 - f64::from(iy);
        let (xs, ys) = f.scale;
        let (mut j, mut j_max) = (-f.radius.1, f.radius.1);
        if iy + j < 0 {
            j = -iy;
        }
        if iy + j_max >= h {
            j_max = h - iy - 1;
        }
        let (mut i_min, mut i_max) = (-f.radius.0, f.radius.0);
        if ix + i_min < 0 {
            i_min = -ix;
        }
        if ix + i_max >= w {
            i_max = w - ix - 1;
        }
        let (mut real, mut dens, mut total) = (0.0f64, 0.0f64, 0.0f64);
        let mut row = offset + i64::from(j - 1) * i64::from(w) + i64::from(i_min);
        let half = (i_max - i_min + 2) / 2;
        while j <= j_max {
            row += i64::from(w);
            let j_now = j;
            j += 1;
            if !self.row_of(band, row as usize, half as usize * 2, buf) {
                continue;
            }
            let w1 = if ys < 1.0 {
                weight((f64::from(j_now) - dy) * ys)
            } else {
                weight(f64::from(j_now) - dy)
            };
            let (mut real_l, mut dens_l, mut total_l) = (0.0f64, 0.0f64, 0.0f64);
            for i in i_min..=i_max {
                let k = (i - i_min) as usize;
                if buf.density[k] < SRC_DENSITY_THRESHOLD {
                    continue;
                }
                let w2 = if xs < 1.0 {
                    weight((f64::from(i) - dx) * xs)
                } else {
                    weight(f64::from(i) - dx)
                };
                real_l += buf.real[k] * w2;
                dens_l += buf.density[k] * w2;
                total_l += w2;
            }
            real += real_l * w1;
            dens += dens_l * w1;
            total += total_l * w1;
        }
        if total < 0.000001 || dens < 0.000001 {
            return (0.0, 0.0);
        }
        if !(0.99999..=1.00001).contains(&total) {
            (dens / total, real / total)
        } else {
            (dens, real)
        }
    }

    /// `GWKGetPixelRow` for `n` pixels from `offset` into `buf`: false
    /// when none is valid.
    fn row_of(&self, band: usize, offset: usize, n: usize, buf: &mut RowBuf) -> bool {
        buf.density[..n].fill(1.0);
        let band_valid = self.band_valid.as_ref().and_then(|v| v[band]);
        for m in [self.unified_valid, band_valid].into_iter().flatten() {
            let mut any = false;
            for k in 0..n {
                if bit(m, offset + k) {
                    any = true;
                } else {
                    buf.density[k] = 0.0;
                }
            }
            if !any {
                return false;
            }
        }
        let src = self.src[band];
        for k in 0..n {
            buf.real[k] = src[offset + k].value();
        }
        let mut valid = false;
        for k in 0..n {
            if buf.density[k] > SRC_DENSITY_THRESHOLD {
                buf.density[k] = match self.unified_density {
                    Some(ud) => f64::from(ud[offset + k]),
                    None => 1.0,
                };
            }
            if buf.density[k] > SRC_DENSITY_THRESHOLD {
                valid = true;
            }
        }
        valid
    }
}

/// One row of the filter window: densities and values.
pub(super) struct RowBuf {
    density: Vec<f64>,
    real: Vec<f64>,
}

impl RowBuf {
    fn new(f: Filter) -> RowBuf {
        let n = ((f.radius.0 + 1) * 2) as usize + 2;
        RowBuf {
            density: vec![0.0; n],
            real: vec![0.0; n],
        }
    }
}
