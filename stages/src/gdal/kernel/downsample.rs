//! warpline's bilinear and cubic loops where the warp downsamples (a
//! resampling scale under 0.95 on either axis): GDAL 3.6.2's
//! `GWKRealCaseThread` with `GWKResample` and its `GWKBilinear` or
//! `GWKCubic` weights over a window of `ceil(radius / scale)` source
//! pixels each side (alg/gdalwarpkernel.cpp), with `GWKGetPixelRow` over
//! whole rows of that window. The rest (source coordinates and offsets,
//! densities, the value's store) is the 4-sample loop's.

use super::bilinear::{
    bit, Chunk, Sample, Transform, BAND_DENSITY_THRESHOLD, SRC_DENSITY_THRESHOLD,
};

/// `GWKBilinear`: the triangle filter.
#[inline(always)]
fn bilinear(x: f64) -> f64 {
    let a = x.abs();
    if a <= 1.0 {
        1.0 - a
    } else {
        0.0
    }
}

/// `GWKCubic`: Catmull-Rom (a = -0.5), GDAL's expression.
#[inline(always)]
fn cubic(x: f64) -> f64 {
    let a = x.abs();
    if a <= 1.0 {
        let x2 = x * x;
        x2 * (1.5 * a - 2.5) + 1.0
    } else if a <= 2.0 {
        let x2 = x * x;
        x2 * (-0.5 * a + 2.5) - 4.0 * a + 2.0
    } else {
        0.0
    }
}

/// The filter of one warp: `PerformWarp`'s scales, radii (`nXRadius`)
/// and window starts (`nFiltInitX`) for bilinear or cubic.
#[derive(Debug, Clone, Copy)]
pub(super) struct Filter {
    pub(super) scale: (f64, f64),
    radius: (i32, i32),
    init: (i32, i32),
    cubic: bool,
}

impl Filter {
    pub(super) fn new(scale: (f64, f64), cubic: bool) -> Filter {
        // `anGWKFilterRadius`: 1 for bilinear, 2 for cubic.
        let filter = if cubic { 2 } else { 1 };
        let r = |s: f64| {
            if s < 1.0 {
                (f64::from(filter) / s).ceil() as i32
            } else {
                filter
            }
        };
        let radius = (r(scale.0), r(scale.1));
        let parity = (filter + 1) % 2;
        Filter {
            scale,
            radius,
            init: (parity - radius.0, parity - radius.1),
            cubic,
        }
    }

    /// The filter's weight at `x`.
    #[inline(always)]
    fn weight(&self, x: f64) -> f64 {
        if self.cubic {
            cubic(x)
        } else {
            bilinear(x)
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
        let win = Window::new(s, f, self.src_size);
        self.prepare(&win, f, buf);
        let mut found = false;
        for band in 0..self.src.len() {
            let (d, v) = self.resample(band, &win, buf);
            if d < BAND_DENSITY_THRESHOLD {
                continue;
            }
            found = true;
            self.store(band, at, d, v);
        }
        if found {
            self.overlay(at, density);
        }
    }

    /// What every band of one pixel shares: the filter's weights, and each
    /// window row's densities by the unified mask and density alone
    /// (`GWKGetPixelRow`'s band-independent half).
    fn prepare(&self, win: &Window, f: Filter, buf: &mut RowBuf) {
        let (xs, ys) = f.scale;
        buf.clear(win);
        for i in win.i.0..=win.i.1 {
            buf.wx.push(if xs < 1.0 {
                f.weight((f64::from(i) - win.dx) * xs)
            } else {
                f.weight(f64::from(i) - win.dx)
            });
        }
        let n = win.n;
        for (r, j) in (win.j.0..=win.j.1).enumerate() {
            buf.wy.push(if ys < 1.0 {
                f.weight((f64::from(j) - win.dy) * ys)
            } else {
                f.weight(f64::from(j) - win.dy)
            });
            let row = win.row(r);
            let mut any = self.unified_valid.is_none();
            let mut valid = false;
            for k in 0..n {
                let ok = self.unified_valid.is_none_or(|m| bit(m, row + k));
                any |= ok;
                let d = if !ok {
                    0.0
                } else {
                    self.unified_density
                        .map_or(1.0, |ud| f64::from(ud[row + k]))
                };
                valid |= d > SRC_DENSITY_THRESHOLD;
                buf.unified.push(d);
            }
            buf.rows.push(Row { any, valid });
        }
    }

    /// `GWKResample` for one band over the prepared window: (density,
    /// value). The sums run in GDAL's order, row by row.
    fn resample(&self, band: usize, win: &Window, buf: &mut RowBuf) -> (f64, f64) {
        let (mut real, mut dens, mut total) = (0.0f64, 0.0f64, 0.0f64);
        let src = self.src[band];
        let band_valid = self.band_valid.as_ref().and_then(|v| v[band]);
        let (n, m) = (win.n, (win.i.1 - win.i.0) as usize + 1);
        for r in 0..buf.rows.len() {
            let info = buf.rows[r];
            if !info.any {
                continue;
            }
            let row = win.row(r);
            let unified = &buf.unified[r * n..(r + 1) * n];
            let density: &[f64] = match band_valid {
                None if !info.valid => continue,
                None => unified,
                Some(mask) => {
                    let (mut any, mut valid) = (false, false);
                    for (k, (out, &u)) in buf.density.iter_mut().zip(unified).enumerate() {
                        let ok = bit(mask, row + k);
                        any |= ok;
                        *out = if ok { u } else { 0.0 };
                        valid |= *out > SRC_DENSITY_THRESHOLD;
                    }
                    if !any || !valid {
                        continue;
                    }
                    &buf.density[..n]
                }
            };
            let w1 = buf.wy[r];
            let (mut real_l, mut dens_l, mut total_l) = (0.0f64, 0.0f64, 0.0f64);
            for k in 0..m {
                if density[k] < SRC_DENSITY_THRESHOLD {
                    continue;
                }
                let w2 = buf.wx[k];
                real_l += src[row + k].value() * w2;
                dens_l += density[k] * w2;
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
}

/// Where one pixel's filter window lies in the source window.
struct Window {
    dx: f64,
    dy: f64,
    /// The window's columns and rows relative to the pixel, clipped to
    /// the source window.
    i: (i32, i32),
    j: (i32, i32),
    /// The offset of its first row's first pixel, and the row stride.
    first: i64,
    stride: i64,
    /// Pixels `GWKGetPixelRow` reads a row (whole pairs).
    n: usize,
}

impl Window {
    fn new((sx, sy): (f64, f64), f: Filter, (w, h): (usize, usize)) -> Window {
        let (w, h) = (w as i32, h as i32);
        let ix = (sx - 0.5).floor() as i32;
        let iy = (sy - 0.5).floor() as i32;
        let offset = i64::from(ix) + i64::from(iy) * i64::from(w);
        let dx = sx - 0.5 - f64::from(ix);
        let dy = sy - 0.5 - f64::from(iy);
        let (mut j, mut j_max) = (f.init.1, f.radius.1);
        if iy + j < 0 {
            j = -iy;
        }
        if iy + j_max >= h {
            j_max = h - iy - 1;
        }
        let (mut i_min, mut i_max) = (f.init.0, f.radius.0);
        if ix + i_min < 0 {
            i_min = -ix;
        }
        if ix + i_max >= w {
            i_max = w - ix - 1;
        }
        let half = (i_max - i_min + 2) / 2;
        Window {
            dx,
            dy,
            i: (i_min, i_max),
            j: (j, j_max),
            first: offset + i64::from(j) * i64::from(w) + i64::from(i_min),
            stride: i64::from(w),
            n: (half.max(0) * 2) as usize,
        }
    }

    /// The offset of window row `r` (0 for the first).
    #[inline(always)]
    fn row(&self, r: usize) -> usize {
        (self.first + r as i64 * self.stride) as usize
    }
}

/// A window row's densities by the unified mask alone: whether any pixel
/// of it is valid there, and whether any has a density above the
/// threshold.
#[derive(Debug, Clone, Copy)]
struct Row {
    any: bool,
    valid: bool,
}

/// The prepared window of one pixel, and one band's densities.
pub(super) struct RowBuf {
    wx: Vec<f64>,
    wy: Vec<f64>,
    unified: Vec<f64>,
    rows: Vec<Row>,
    density: Vec<f64>,
}

impl RowBuf {
    fn new(f: Filter) -> RowBuf {
        let n = ((f.radius.0 + 1) * 2) as usize + 2;
        RowBuf {
            wx: Vec::with_capacity(n),
            wy: Vec::new(),
            unified: Vec::new(),
            rows: Vec::new(),
            density: vec![0.0; n],
        }
    }

    fn clear(&mut self, win: &Window) {
        self.wx.clear();
        self.wy.clear();
        self.unified.clear();
        self.rows.clear();
        if self.density.len() < win.n {
            self.density.resize(win.n, 0.0);
        }
    }
}
