//! warpline's bilinear and cubic loops where the warp downsamples (a
//! resampling scale under 0.95 on either axis): GDAL 3.6.2's
//! `GWKRealCaseThread` with `GWKResample` and its `GWKBilinear` or
//! `GWKCubic` weights over a window of `ceil(radius / scale)` source
//! pixels each side (alg/gdalwarpkernel.cpp), with `GWKGetPixelRow` over
//! whole rows of that window. The rest (source coordinates and offsets,
//! densities, the value's store) is the 4-sample loop's.
//!
//! GDAL's window is `ceil(radius / scale)` wide whatever the weights, so
//! at a scale just under 1 most of its taps weigh `+0.0`. For integer
//! data those at the window's ends are left out where that provably
//! changes no sum ([`RowBuf::trim`]), and where every density is 0 or 1
//! the valid taps of a row are read as bits of the masks: the sums are
//! still GDAL's, operation for operation, over the taps that count.

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

#[cfg(test)]
thread_local! {
    /// Chunks warped by [`Chunk::run_scaled`] on this thread (for the
    /// property test's count of downsampling cases).
    pub(super) static SCALED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

impl<T: Sample> Chunk<'_, T> {
    /// The whole chunk, row by row, pixel by pixel, band by band, as
    /// `GWKRealCaseThread` when the 4-sample formula does not apply.
    pub(crate) fn run_scaled(&mut self, tr: &mut impl Transform, filter: Filter) {
        #[cfg(test)]
        SCALED.with(|c| c.set(c.get() + 1));
        let (w, _) = self.dst_size;
        let mut x = vec![0f64; w];
        let mut y = vec![0f64; w];
        let mut z = vec![0f64; w];
        let mut ok = vec![0i32; w];
        let mut row_buf = RowBuf::new(filter);
        self.start_edge(tr);
        for row in 0..self.dst_size.1 {
            self.source_coordinates(tr, row, [&mut x, &mut y, &mut z], &mut ok);
            for col in 0..w {
                let Some(offset) = self.source_offset(tr, row, col, &mut x, &mut y, &mut ok) else {
                    continue;
                };
                let Some((_, density)) = self.real_gate(tr, offset) else {
                    continue;
                };
                let sx = x[col] - f64::from(self.src_off.0);
                let sy = y[col] - f64::from(self.src_off.1);
                self.scaled_pixel(density, row * w + col, (sx, sy), filter, &mut row_buf);
            }
        }
    }

    /// One destination pixel `at`, whose source pixel's unified density
    /// is `density`.
    fn scaled_pixel(
        &mut self,
        density: f64,
        at: usize,
        s: (f64, f64),
        f: Filter,
        buf: &mut RowBuf,
    ) {
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
    /// (`GWKGetPixelRow`'s band-independent half). Where zero weights may
    /// be left out (see [`RowBuf::trim`]), the rows before the first of
    /// nonzero weight are not read: every band leaves them out.
    fn prepare(&self, win: &Window, f: Filter, buf: &mut RowBuf) {
        let (xs, ys) = f.scale;
        buf.clear();
        let scaled = |s: f64, x: f64| {
            if s < 1.0 {
                f.weight(x * s)
            } else {
                f.weight(x)
            }
        };
        for i in win.i.0..=win.i.1 {
            buf.wx.push(scaled(xs, f64::from(i) - win.dx));
        }
        for j in win.j.0..=win.j.1 {
            buf.wy.push(scaled(ys, f64::from(j) - win.dy));
        }
        // Densities are 0 or 1 without a unified density: finite.
        let lead = T::FINITE && self.unified_density.is_none();
        let first = if lead { nonzero(&buf.wy).0 } else { 0 };
        let n = win.n;
        buf.bits = self.unified_density.is_none() && n <= 32;
        for r in 0..buf.wy.len() {
            if r < first {
                buf.unified.extend(std::iter::repeat_n(0.0, n));
                buf.valid.push(0);
                buf.rows.push(Row {
                    any: false,
                    valid: false,
                });
                continue;
            }
            let row = win.row(r);
            if buf.bits {
                // Densities of 0 or 1: the unified mask's bits say them.
                let u = self
                    .unified_valid
                    .map_or(ones(n), |m| window_bits(m, row, n));
                buf.valid.push(u);
                let any = self.unified_valid.is_none() || u != 0;
                buf.rows.push(Row { any, valid: u != 0 });
                continue;
            }
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
        buf.trim = lead || (T::FINITE && buf.unified.iter().all(|d| d.is_finite()));
        buf.cols = nonzero(&buf.wx);
    }

    /// `GWKResample` for one band over the prepared window: (density,
    /// value). The sums run in GDAL's order, row by row; where
    /// [`RowBuf::trim`] allows, without the taps and rows of zero weight
    /// at the window's ends.
    fn resample(&self, band: usize, win: &Window, buf: &RowBuf) -> (f64, f64) {
        let (mut real, mut dens, mut total) = (0.0f64, 0.0f64, 0.0f64);
        let src = self.src[band];
        let band_valid = self.band_valid.as_ref().and_then(|v| v[band]);
        let n = win.n;
        let cols = if buf.trim {
            buf.cols
        } else {
            (0, buf.wx.len())
        };
        for r in 0..buf.rows.len() {
            let info = buf.rows[r];
            if !info.any {
                continue;
            }
            let w1 = buf.wy[r];
            if buf.trim && w1.to_bits() == 0 && !negative_zero([real, dens, total]) {
                continue;
            }
            let row = win.row(r);
            if buf.bits {
                let valid = match band_valid {
                    None if !info.valid => continue,
                    None => buf.valid[r],
                    Some(mask) => {
                        // `GWKGetPixelRow`'s test: a pixel valid in the
                        // band's mask, one valid in both (density 1).
                        let b = window_bits(mask, row, n);
                        if b == 0 || b & buf.valid[r] == 0 {
                            continue;
                        }
                        b & buf.valid[r]
                    }
                };
                let [real_l, weight_l] = bit_row_sums(src, row, &buf.wx, cols, valid);
                real += real_l * w1;
                // The density sum is the weight sum: each density is 1.
                dens += weight_l * w1;
                total += weight_l * w1;
                continue;
            }
            let unified = &buf.unified[r * n..(r + 1) * n];
            let [real_l, dens_l, total_l] = match band_valid {
                None if !info.valid => continue,
                None => row_sums(src, row, &buf.wx, cols, |k| unified[k]),
                Some(mask) => {
                    // `GWKGetPixelRow`'s test, over the whole row: a pixel
                    // valid in the band's mask, one above the threshold.
                    let (mut any, mut valid) = (false, false);
                    for (k, &u) in unified.iter().enumerate() {
                        let ok = bit(mask, row + k);
                        any |= ok;
                        valid |= ok && u > SRC_DENSITY_THRESHOLD;
                    }
                    if !any || !valid {
                        continue;
                    }
                    let density = |k: usize| if bit(mask, row + k) { unified[k] } else { 0.0 };
                    row_sums(src, row, &buf.wx, cols, density)
                }
            };
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

/// One window row's sums (value, density, weight) in GDAL's order, from
/// tap `cols.0`; the taps from `cols.1` on only while a sum is `-0.0`
/// (the caller leaves out only taps of weight `+0.0`).
#[inline(always)]
fn row_sums<T: Sample>(
    src: &[T],
    row: usize,
    wx: &[f64],
    cols: (usize, usize),
    density: impl Fn(usize) -> f64,
) -> [f64; 3] {
    let (mut real, mut dens, mut total) = (0.0f64, 0.0f64, 0.0f64);
    for (k, &w2) in wx.iter().enumerate().skip(cols.0) {
        if k == cols.1 && !negative_zero([real, dens, total]) {
            break;
        }
        let d = density(k);
        if d < SRC_DENSITY_THRESHOLD {
            continue;
        }
        real += src[row + k].value() * w2;
        dens += d * w2;
        total += w2;
    }
    [real, dens, total]
}

/// [`row_sums`] where each tap's density is 1 (bit `k` of `valid` set)
/// or 0: (value sum, weight sum), the density sum being the weight sum
/// (`1.0 * w` is `w`). Kept apart from `row_sums` on purpose: folded into
/// it (a density closure of 1 or 0), the downsampling loop of a GOES
/// tile ran 12% more instructions (358 M, then 402 M).
#[inline(always)]
fn bit_row_sums<T: Sample>(
    src: &[T],
    row: usize,
    wx: &[f64],
    cols: (usize, usize),
    valid: u64,
) -> [f64; 2] {
    let (mut real, mut total) = (0.0f64, 0.0f64);
    for (k, &w2) in wx.iter().enumerate().skip(cols.0) {
        if k == cols.1 && !negative_zero([real, total, total]) {
            break;
        }
        if (valid >> k) & 1 == 0 {
            continue;
        }
        real += src[row + k].value() * w2;
        total += w2;
    }
    [real, total]
}

/// Bits `start..start + n` of `mask` (`n` at most 32, so that they lie
/// in two words), bit `k` of the result being bit `start + k`.
#[inline(always)]
fn window_bits(mask: &[u32], start: usize, n: usize) -> u64 {
    let (w, s) = (start >> 5, start & 31);
    let word = |i: usize| u64::from(mask.get(i).copied().unwrap_or(0));
    ((word(w) | word(w + 1) << 32) >> s) & ones(n)
}

/// The low `n` bits set (`n` at most 32).
#[inline(always)]
fn ones(n: usize) -> u64 {
    (1u64 << n) - 1
}

/// The range of `weights` outside which every weight is `+0.0`: (first
/// nonzero, one past the last; both `len` when none is).
fn nonzero(weights: &[f64]) -> (usize, usize) {
    let first = weights.iter().position(|w| w.to_bits() != 0);
    match first {
        None => (weights.len(), weights.len()),
        Some(lo) => {
            let last = weights.iter().rposition(|w| w.to_bits() != 0);
            (lo, last.map_or(lo, |l| l + 1))
        }
    }
}

/// Whether any of these sums is `-0.0`: the one value a sum of zeros
/// can change (`-0.0 + 0.0` is `+0.0`), and one GDAL's sums, started at
/// `+0.0`, never take (see [`RowBuf::trim`]).
#[inline(always)]
fn negative_zero(sums: [f64; 3]) -> bool {
    sums.iter().any(|s| s.to_bits() == (-0.0f64).to_bits())
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
    /// Whether taps and rows of weight `+0.0` at the window's ends may be
    /// left out: every value and density is finite. Such a tap or row
    /// then adds `±0.0` to each sum, which changes no sum but `-0.0`
    /// (`-0.0 + 0.0` is `+0.0`). A sum started at `+0.0` is never `-0.0`
    /// (rounding to nearest, a sum is `-0.0` only when both terms are),
    /// so nothing is ever changed; the trailing taps are still added
    /// while a sum is `-0.0`, a guard that costs one test and keeps the
    /// argument local.
    trim: bool,
    /// The window's columns of nonzero weight (first, one past the last).
    cols: (usize, usize),
    /// Whether densities are 0 or 1 (no unified density) and a window
    /// row is at most 32 taps: then each row's valid taps are the bits of
    /// `valid`, and `unified` is not filled.
    bits: bool,
    valid: Vec<u64>,
    wx: Vec<f64>,
    wy: Vec<f64>,
    unified: Vec<f64>,
    rows: Vec<Row>,
}

impl RowBuf {
    fn new(f: Filter) -> RowBuf {
        let n = ((f.radius.0 + 1) * 2) as usize + 2;
        RowBuf {
            trim: false,
            cols: (0, 0),
            bits: false,
            valid: Vec::new(),
            wx: Vec::with_capacity(n),
            wy: Vec::new(),
            unified: Vec::new(),
            rows: Vec::new(),
        }
    }

    fn clear(&mut self) {
        self.wx.clear();
        self.wy.clear();
        self.unified.clear();
        self.rows.clear();
        self.valid.clear();
    }
}
