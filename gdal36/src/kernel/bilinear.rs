//! warpline's bilinear resampling loop for a chunk with validity masks:
//! GDAL 3.6.2's `GWKRealCaseThread` with `GWKBilinearResample4Sample`,
//! `GWKGetPixelRow` and `GWKSetPixelValueReal`, written again in Rust
//! with the same floating-point operations in the same order, so the
//! output is GDAL's to the bit (alg/gdalwarpkernel.cpp; the oracle tests
//! check it). What is GDAL's stays GDAL's: the source coordinates come
//! from the warp's own transformer, the masks from GDAL's maskers, the
//! chunk and its source window from `GDALWarpOperation`.
//!
//! Where it gains on GDAL's loop: one monomorphised function per data
//! type (GDAL switches on the type for every sample), the four weights
//! computed once per pixel for all bands, and no call per sample.

/// `SRC_DENSITY_THRESHOLD` (a float in GDAL, compared as a double).
pub(super) const SRC_DENSITY_THRESHOLD: f64 = 0.000000001f32 as f64;
/// `BAND_DENSITY_THRESHOLD`.
pub(super) const BAND_DENSITY_THRESHOLD: f64 = 0.0000000001;

use super::sample::floor;
pub(crate) use super::sample::Sample;

/// `CPLMaskGet`.
#[inline(always)]
pub(super) fn bit(mask: &[u32], i: usize) -> bool {
    mask[i >> 5] & (1 << (i & 31)) != 0
}

/// Whether bits `i` and `i + 1` are both set.
#[inline(always)]
fn pair(mask: &[u32], i: usize) -> bool {
    let shift = i & 31;
    if shift == 31 {
        bit(mask, i) && bit(mask, i + 1)
    } else {
        (mask[i >> 5] >> shift) & 3 == 3
    }
}

/// Whether the four samples from `o` (two in this row, two in the next,
/// `w` further) are all valid in `mask`.
#[inline(always)]
pub(super) fn four(mask: &[u32], o: usize, w: usize) -> bool {
    pair(mask, o) && pair(mask, o + w)
}

/// `CPLMaskSet`.
#[inline(always)]
pub(super) fn set_bit(mask: &mut [u32], i: usize) {
    mask[i >> 5] |= 1 << (i & 31);
}

/// One chunk of a warp, as `GDALWarpOperation` prepared it: the source
/// window's pixels and masks, the destination's pixels and masks. Source
/// slices hold `src_w * src_h + 1` elements (GDAL's `WARP_EXTRA_ELTS`).
pub(crate) struct Chunk<'a, T> {
    pub(crate) src: Vec<&'a [T]>,
    pub(crate) band_valid: Option<Vec<Option<&'a [u32]>>>,
    pub(crate) unified_valid: Option<&'a [u32]>,
    pub(crate) unified_density: Option<&'a [f32]>,
    pub(crate) dst: Vec<&'a mut [T]>,
    pub(crate) dst_valid: Option<&'a mut [u32]>,
    pub(crate) dst_density: Option<&'a mut [f32]>,
    pub(crate) dst_nodata: Option<Vec<f64>>,
    /// Whether `GWKOverlayDensity` composes the destination density in
    /// `f32` (GDAL 3.12) rather than in `f64` rounded once (3.6).
    pub(crate) overlay_f32: bool,
    /// Whether GDAL takes a valid neighbour of an invalid source pixel
    /// on the edge of the validity area (3.12, `edge.rs`), and whether
    /// it does in this chunk (set when a loop starts).
    pub(crate) edge_neighbours: bool,
    pub(crate) edge: bool,
    /// Whether the average loop is GDAL 3.12's (`average.rs`).
    pub(crate) mean_incremental: bool,
    /// The source window: size and offset in the source raster.
    pub(crate) src_size: (usize, usize),
    pub(crate) src_off: (i32, i32),
    /// The destination chunk: size and offset in the output.
    pub(crate) dst_size: (usize, usize),
    pub(crate) dst_off: (i32, i32),
    /// How a band's value at a source point is found.
    pub(crate) sampler: Sampler,
}

/// The value of a band at a source point, as `GWKRealCaseThread` finds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sampler {
    /// `GWKBilinearResample4Sample`.
    Bilinear,
    /// `GWKCubicResample4Sample` and its alpha-only twins (`cubic.rs`).
    Cubic,
    /// `GWKGetPixelValueReal` at the source pixel (`nearest.rs`): nearest
    /// for a working type without a templated nearest loop.
    Nearest,
}

/// The warp's transformer, destination pixel/line to source: the x, y
/// and z of each point in place, and whether each succeeded.
pub(crate) trait Transform {
    fn transform(&mut self, x: &mut [f64], y: &mut [f64], z: &mut [f64], ok: &mut [i32]);
    /// Whether source pixel/line `(x, y)` projects to the destination
    /// (one point, source to destination, as GDAL's loops ask).
    fn forward(&mut self, x: f64, y: f64) -> bool;
}

impl<'a, T: Sample> Chunk<'a, T> {
    /// The whole chunk, row by row, as `GWKRealCaseThread` for bilinear
    /// with the 4-sample formula. GDAL goes pixel by pixel and, in each,
    /// band by band; here each row goes pixel by pixel once (where each
    /// pixel's samples are and with which weights, the same for every
    /// band), then band by band over the row's pixels, then once more for
    /// the destination's density and validity (with one band, each pixel
    /// is done at once, as GDAL goes). A destination pixel is only ever
    /// touched by its own source samples, so the order changes no value.
    pub(crate) fn run(&mut self, tr: &mut impl Transform) {
        let (w, _) = self.dst_size;
        let mut x = vec![0f64; w];
        let mut y = vec![0f64; w];
        let mut z = vec![0f64; w];
        let mut ok = vec![0i32; w];
        self.start_edge(tr);
        if self.src.len() == 1 {
            // One band: each pixel at once, as GDAL goes.
            let view = self.view(0);
            for row in 0..self.dst_size.1 {
                self.source_coordinates(tr, row, [&mut x, &mut y, &mut z], &mut ok);
                for col in 0..w {
                    if let Some(c) = self.corners(tr, row, col, &mut x, &mut y, &mut ok) {
                        let at = row * w + col;
                        if self.sample_into(&view, 0, at, &c) {
                            self.overlay(at, c.density);
                        }
                    }
                }
            }
            return;
        }
        let mut at: Vec<Corners> = Vec::with_capacity(w);
        let mut found = vec![false; w];
        for row in 0..self.dst_size.1 {
            self.source_coordinates(tr, row, [&mut x, &mut y, &mut z], &mut ok);
            at.clear();
            for col in 0..w {
                if let Some(c) = self.corners(tr, row, col, &mut x, &mut y, &mut ok) {
                    at.push(c);
                }
            }
            found.fill(false);
            for band in 0..self.src.len() {
                self.band_row(band, row, &at, &mut found);
            }
            self.overlay_row(row, &at, &found);
        }
    }

    /// The source pixel/line of each pixel centre of destination row
    /// `row`, by the warp's transformer, as GDAL's loops compute them.
    pub(super) fn source_coordinates(
        &self,
        tr: &mut impl Transform,
        row: usize,
        [x, y, z]: [&mut [f64]; 3],
        ok: &mut [i32],
    ) {
        for (i, xi) in x.iter_mut().enumerate() {
            *xi = i as f64 + 0.5 + f64::from(self.dst_off.0);
        }
        y.fill(row as f64 + 0.5 + f64::from(self.dst_off.1));
        z.fill(0.0);
        tr.transform(x, y, z, ok);
    }

    /// The unified density of source pixel `offset` (1 without one), or
    /// None when the pixel is transparent or invalid in the unified mask:
    /// GDAL's loops then leave the destination pixel alone.
    #[inline(always)]
    pub(super) fn source_density(&self, offset: usize) -> Option<f64> {
        if self.unified_valid.is_some_and(|m| !bit(m, offset)) {
            return None;
        }
        match self.unified_density {
            Some(d) => {
                let d = f64::from(d[offset]);
                // As GDAL's `< threshold` test (a NaN density passes).
                if d < SRC_DENSITY_THRESHOLD {
                    None
                } else {
                    Some(d)
                }
            }
            None => Some(1.0),
        }
    }

    /// Where the samples of destination pixel `col` are, or None when the
    /// pixel takes nothing (off the source, or its source pixel invalid).
    #[inline(always)]
    fn corners(
        &self,
        tr: &mut impl Transform,
        row: usize,
        col: usize,
        x: &mut [f64],
        y: &mut [f64],
        ok: &mut [i32],
    ) -> Option<Corners> {
        let offset = self.source_offset(tr, row, col, x, y, ok)?;
        let (pixel, density) = self.real_gate(tr, offset)?;
        let sx = x[col] - f64::from(self.src_off.0);
        let sy = y[col] - f64::from(self.src_off.1);
        let mut c = Corners::new((sx, sy), pixel, self.src_size, col, density);
        // The band-independent half of `Source::all_valid`'s test.
        c.inside = c.inside
            && self
                .unified_valid
                .is_none_or(|m| four(m, c.offset as usize, self.src_size.0));
        Some(c)
    }

    /// Band `band` of the source window, with the masks that apply to it.
    fn view(&self, band: usize) -> Source<'a, T> {
        Source {
            src: self.src[band],
            band_valid: self.band_valid.as_ref().and_then(|v| v[band]),
            unified_valid: self.unified_valid,
            unified_density: self.unified_density,
            size: (self.src_size.0 as isize, self.src_size.1 as isize),
        }
    }

    /// One band over a row's pixels ([`Chunk::sample_into`] each).
    #[inline(always)]
    fn band_row(&mut self, band: usize, row: usize, at: &[Corners], found: &mut [bool]) {
        let view = self.view(band);
        let row_start = row * self.dst_size.0;
        for c in at {
            if self.sample_into(&view, band, row_start + c.col, c) {
                found[c.col] = true;
            }
        }
    }

    /// Band `band`'s value at `c` (`GWKBilinearResample4Sample` or the
    /// sampler's), stored into destination pixel `at` by
    /// `GWKSetPixelValueReal`; whether it took one.
    #[inline(always)]
    fn sample_into(&mut self, view: &Source<'a, T>, band: usize, at: usize, c: &Corners) -> bool {
        let (density, value) = match self.sampler {
            Sampler::Bilinear => view.bilinear(c),
            Sampler::Cubic => view.cubic(c),
            Sampler::Nearest => view.nearest_real(c),
        };
        if density < BAND_DENSITY_THRESHOLD {
            return false;
        }
        let nodata = self.dst_nodata.as_ref().map(|n| n[band]);
        let (dst_density, dst_valid) = (self.dst_density.as_deref(), self.dst_valid.as_deref());
        let dst = &mut *self.dst[band];
        dst[at] = mixed(dst[at], at, density, value, dst_density, dst_valid, nodata);
        true
    }

    /// `GWKOverlayDensity` and the destination validity, for the pixels
    /// of a row that took a value.
    fn overlay_row(&mut self, row: usize, at: &[Corners], found: &[bool]) {
        let row_start = row * self.dst_size.0;
        for c in at.iter().filter(|c| found[c.col]) {
            self.overlay(row_start + c.col, c.density);
        }
    }

    /// `GWKOverlayDensity` with the source pixel's `density`, then the
    /// destination validity (`CPLMaskSet`), for destination pixel `at`
    /// once it took a value: every loop ends a pixel so.
    #[inline(always)]
    pub(super) fn overlay(&mut self, at: usize, density: f64) {
        if density >= 0.0001 {
            if let Some(d) = self.dst_density.as_deref_mut() {
                d[at] = match self.overlay_f32 {
                    true => 1.0 - (1.0 - density as f32) * (1.0 - d[at]),
                    false => (1.0 - (1.0 - density) * (1.0 - f64::from(d[at]))) as f32,
                };
            }
        }
        if let Some(m) = self.dst_valid.as_deref_mut() {
            set_bit(m, at);
        }
    }

    /// `GWKSetPixelValue(Real)`: band `band`'s `value` at `density` into
    /// destination pixel `at`, mixed with what it holds ([`mixed`]).
    #[inline(always)]
    pub(super) fn store(&mut self, band: usize, at: usize, density: f64, value: f64) {
        let nodata = self.dst_nodata.as_ref().map(|n| n[band]);
        let current = self.dst[band][at];
        self.dst[band][at] = mixed(
            current,
            at,
            density,
            value,
            self.dst_density.as_deref(),
            self.dst_valid.as_deref(),
            nodata,
        );
    }

    /// `GWKCheckAndComputeSrcOffsets`: the source pixel under the
    /// destination pixel `col` of this row, or None when it is off the
    /// source window (after a second, exact transform of a point slightly
    /// outside, as GDAL does).
    #[inline(always)]
    pub(super) fn source_offset(
        &self,
        tr: &mut impl Transform,
        row: usize,
        col: usize,
        x: &mut [f64],
        y: &mut [f64],
        ok: &mut [i32],
    ) -> Option<usize> {
        let (sw, sh) = (self.src_size.0 as i32, self.src_size.1 as i32);
        let (xoff, yoff) = self.src_off;
        for attempt in 0..2 {
            if attempt == 1 {
                x[col] = col as f64 + 0.5 + f64::from(self.dst_off.0);
                y[col] = row as f64 + 0.5 + f64::from(self.dst_off.1);
                let mut z = [0f64];
                tr.transform(
                    &mut x[col..=col],
                    &mut y[col..=col],
                    &mut z,
                    &mut ok[col..=col],
                );
            }
            if ok[col] == 0 || x[col].is_nan() || y[col].is_nan() {
                return None;
            }
            let (px, py) = (x[col], y[col]);
            let retry = attempt == 0;
            if px < f64::from(xoff) {
                if retry && px > f64::from(xoff - 1) {
                    continue;
                }
                return None;
            }
            if py < f64::from(yoff) {
                if retry && py > f64::from(yoff - 1) {
                    continue;
                }
                return None;
            }
            if px + 1e-10 > f64::from(sw + xoff) {
                if retry && px < f64::from(sw + xoff + 1) {
                    continue;
                }
                return None;
            }
            if py + 1e-10 > f64::from(sh + yoff) {
                if retry && py < f64::from(sh + yoff + 1) {
                    continue;
                }
                return None;
            }
            break;
        }
        let mut sx = (x[col] + 1.0e-10) as i32 - xoff;
        let mut sy = (y[col] + 1.0e-10) as i32 - yoff;
        if sx == sw {
            sx -= 1;
        }
        if sy == sh {
            sy -= 1;
        }
        Some(sx as usize + sy as usize * self.src_size.0)
    }
}

/// Where a bilinear sample falls: the top-left source pixel, its offset
/// (shifted back by one where GDAL shifts to stay inside the array), and
/// the four weights, as `GWKBilinearResample4Sample` computes them; and
/// the destination pixel (its column) with its source density.
pub(super) struct Corners {
    pub(super) x: i32,
    pub(super) y: i32,
    pub(super) offset: isize,
    pub(super) shifted: bool,
    /// Top row's weights (left, right), then the bottom row's.
    pub(super) top: (f64, f64),
    pub(super) bottom: (f64, f64),
    /// Whether all four samples lie inside the window (not shifted), valid
    /// in the unified mask (if any).
    pub(super) inside: bool,
    col: usize,
    density: f64,
    /// The source point itself (for cubic), and its pixel (for nearest).
    pub(super) at: (f64, f64),
    pub(super) pixel: usize,
}

impl Corners {
    #[inline(always)]
    fn new(
        (sx, sy): (f64, f64),
        pixel: usize,
        (w, h): (usize, usize),
        col: usize,
        density: f64,
    ) -> Corners {
        let mut x = floor(sx - 0.5) as i32;
        let mut y = floor(sy - 0.5) as i32;
        let mut rx = 1.5 - (sx - f64::from(x));
        let mut ry = 1.5 - (sy - f64::from(y));
        if x == -1 {
            x = 0;
            rx = 1.0;
        }
        if y == -1 {
            y = 0;
            ry = 1.0;
        }
        let mut offset = x as isize + y as isize * w as isize;
        let n = (w * h) as isize;
        let shifted = n == offset + 1 || n == offset + w as isize + 1;
        if shifted {
            offset -= 1;
        }
        let inside = !shifted && (x as usize) + 1 < w && (y as usize) + 1 < h;
        Corners {
            x,
            y,
            offset,
            shifted,
            inside,
            top: (rx * ry, (1.0 - rx) * ry),
            bottom: (rx * (1.0 - ry), (1.0 - rx) * (1.0 - ry)),
            col,
            density,
            at: (sx, sy),
            pixel,
        }
    }
}

/// One band of the source window, with the masks that apply to it.
pub(super) struct Source<'a, T> {
    pub(super) src: &'a [T],
    pub(super) band_valid: Option<&'a [u32]>,
    pub(super) unified_valid: Option<&'a [u32]>,
    pub(super) unified_density: Option<&'a [f32]>,
    pub(super) size: (isize, isize),
}

/// `GWKSetPixelValueReal`: `value` mixed with what the destination
/// pixel `i` holds (`current`) where the density is partial, then stored.
#[inline(always)]
pub(super) fn mixed<T: Sample>(
    current: T,
    i: usize,
    density: f64,
    mut value: f64,
    dst_density: Option<&[f32]>,
    dst_valid: Option<&[u32]>,
    nodata: Option<f64>,
) -> T {
    if density < 0.9999 {
        if density < 0.0001 {
            return current;
        }
        let mut dst_weight = 1.0f64;
        if let Some(d) = dst_density {
            dst_weight = f64::from(d[i]);
        } else if let Some(m) = dst_valid {
            if !bit(m, i) {
                dst_weight = 0.0;
            }
        }
        let influence = (1.0 - density) * dst_weight;
        value = (value * density + current.value() * influence) / (density + influence);
    }
    T::store(value, nodata)
}
