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
const SRC_DENSITY_THRESHOLD: f64 = 0.000000001f32 as f64;
/// `BAND_DENSITY_THRESHOLD`.
const BAND_DENSITY_THRESHOLD: f64 = 0.0000000001;

/// A sample type of the working buffers.
pub(crate) trait Sample: Copy + PartialEq {
    fn value(self) -> f64;
    /// `GWKSetPixelValueReal`'s store: clamped and rounded for integers
    /// (`CLAMP`), a plain cast for `f32`; an integer equal to the
    /// destination's nodata is moved one step off it.
    fn store(v: f64, nodata: Option<f64>) -> Self;
}

macro_rules! integer_sample {
    ($t:ty, $signed:expr) => {
        impl Sample for $t {
            #[inline(always)]
            fn value(self) -> f64 {
                f64::from(self)
            }
            #[inline(always)]
            fn store(v: f64, nodata: Option<f64>) -> Self {
                let mut out = if v < f64::from(<$t>::MIN) {
                    <$t>::MIN
                } else if v > f64::from(<$t>::MAX) {
                    <$t>::MAX
                } else if $signed {
                    (v + 0.5).floor() as $t
                } else {
                    (v + 0.5) as $t
                };
                if nodata == Some(f64::from(out)) {
                    out = if out == <$t>::MIN {
                        <$t>::MIN + 1
                    } else {
                        out - 1
                    };
                }
                out
            }
        }
    };
}

integer_sample!(u8, false);
integer_sample!(u16, false);
integer_sample!(i16, true);

impl Sample for f32 {
    #[inline(always)]
    fn value(self) -> f64 {
        f64::from(self)
    }
    #[inline(always)]
    fn store(v: f64, _nodata: Option<f64>) -> Self {
        v as f32
    }
}

/// The working type GDAL picks when a nodata value does not fit the
/// bands' type (gdalwarp's placeholder for bands without one, say).
impl Sample for f64 {
    #[inline(always)]
    fn value(self) -> f64 {
        self
    }
    #[inline(always)]
    fn store(v: f64, _nodata: Option<f64>) -> Self {
        v
    }
}

/// `CPLMaskGet`.
#[inline(always)]
fn bit(mask: &[u32], i: usize) -> bool {
    mask[i >> 5] & (1 << (i & 31)) != 0
}

/// `CPLMaskSet`.
#[inline(always)]
fn set_bit(mask: &mut [u32], i: usize) {
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
    /// The source window: size and offset in the source raster.
    pub(crate) src_size: (usize, usize),
    pub(crate) src_off: (i32, i32),
    /// The destination chunk: size and offset in the output.
    pub(crate) dst_size: (usize, usize),
    pub(crate) dst_off: (i32, i32),
}

/// The warp's transformer, destination pixel/line to source: the x, y
/// and z of each point in place, and whether each succeeded.
pub(crate) trait Transform {
    fn transform(&mut self, x: &mut [f64], y: &mut [f64], z: &mut [f64], ok: &mut [i32]);
}

impl<T: Sample> Chunk<'_, T> {
    /// The whole chunk, row by row, as `GWKRealCaseThread` for bilinear
    /// with the 4-sample formula.
    pub(crate) fn run(&mut self, tr: &mut impl Transform) {
        let (w, _) = self.dst_size;
        let mut x = vec![0f64; w];
        let mut y = vec![0f64; w];
        let mut z = vec![0f64; w];
        let mut ok = vec![0i32; w];
        for row in 0..self.dst_size.1 {
            for (i, xi) in x.iter_mut().enumerate() {
                *xi = i as f64 + 0.5 + f64::from(self.dst_off.0);
            }
            let line = row as f64 + 0.5 + f64::from(self.dst_off.1);
            y.fill(line);
            z.fill(0.0);
            tr.transform(&mut x, &mut y, &mut z, &mut ok);
            for col in 0..w {
                self.pixel(tr, row, col, &mut x, &mut y, &mut ok);
            }
        }
    }

    /// One destination pixel (the body of GDAL's `iDstX` loop).
    #[inline(always)]
    fn pixel(
        &mut self,
        tr: &mut impl Transform,
        row: usize,
        col: usize,
        x: &mut [f64],
        y: &mut [f64],
        ok: &mut [i32],
    ) {
        let Some(offset) = self.source_offset(tr, row, col, x, y, ok) else {
            return;
        };
        let mut density = 1.0f64;
        if let Some(d) = self.unified_density {
            density = f64::from(d[offset]);
            if density < SRC_DENSITY_THRESHOLD {
                return;
            }
        }
        if let Some(m) = self.unified_valid {
            if !bit(m, offset) {
                return;
            }
        }
        let sx = x[col] - f64::from(self.src_off.0);
        let sy = y[col] - f64::from(self.src_off.1);
        let at = Corners::new(sx, sy, self.src_size);
        let dst_offset = col + row * self.dst_size.0;
        let mut found = false;
        for band in 0..self.src.len() {
            let (band_density, value) = self.bilinear(band, &at);
            if band_density < BAND_DENSITY_THRESHOLD {
                continue;
            }
            found = true;
            self.set_value(band, dst_offset, band_density, value);
        }
        if !found {
            return;
        }
        if density >= 0.0001 {
            if let Some(d) = self.dst_density.as_deref_mut() {
                d[dst_offset] = (1.0 - (1.0 - density) * (1.0 - f64::from(d[dst_offset]))) as f32;
            }
        }
        if let Some(m) = self.dst_valid.as_deref_mut() {
            set_bit(m, dst_offset);
        }
    }

    /// `GWKCheckAndComputeSrcOffsets`: the source pixel under the
    /// destination pixel `col` of this row, or None when it is off the
    /// source window (after a second, exact transform of a point slightly
    /// outside, as GDAL does).
    #[inline(always)]
    fn source_offset(
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
/// the four weights, as `GWKBilinearResample4Sample` computes them.
struct Corners {
    x: i32,
    y: i32,
    offset: isize,
    shifted: bool,
    /// Top row's weights (left, right), then the bottom row's.
    top: (f64, f64),
    bottom: (f64, f64),
}

impl Corners {
    #[inline(always)]
    fn new(sx: f64, sy: f64, (w, h): (usize, usize)) -> Corners {
        let mut x = (sx - 0.5).floor() as i32;
        let mut y = (sy - 0.5).floor() as i32;
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
        Corners {
            x,
            y,
            offset,
            shifted,
            top: (rx * ry, (1.0 - rx) * ry),
            bottom: (rx * (1.0 - ry), (1.0 - rx) * (1.0 - ry)),
        }
    }
}

impl<T: Sample> Chunk<'_, T> {
    /// `GWKBilinearResample4Sample` for one band: (density, value).
    #[inline(always)]
    fn bilinear(&self, band: usize, at: &Corners) -> (f64, f64) {
        let (w, h) = (self.src_size.0 as isize, self.src_size.1 as isize);
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
            let Some((mut d, mut v)) = self.pixel_row(band, offset as usize) else {
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
        if divisor == 1.0 {
            (dens, real)
        } else if divisor < 0.00001 {
            (0.0, 0.0)
        } else {
            (dens / divisor, real / divisor)
        }
    }

    /// `GWKGetPixelRow` for two pixels from `offset`: their densities and
    /// values, or None when neither is valid.
    #[inline(always)]
    fn pixel_row(&self, band: usize, offset: usize) -> Option<([f64; 2], [f64; 2])> {
        let mut d = [1.0f64, 1.0];
        if let Some(m) = self.unified_valid {
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
        if let Some(Some(m)) = self.band_valid.as_ref().map(|v| v[band]) {
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
        let src = self.src[band];
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

    /// `GWKSetPixelValueReal`: the value mixed with what the destination
    /// holds where the density is partial, then stored.
    #[inline(always)]
    fn set_value(&mut self, band: usize, at: usize, density: f64, mut value: f64) {
        if density < 0.9999 {
            if density < 0.0001 {
                return;
            }
            let mut dst_density = 1.0f64;
            if let Some(d) = self.dst_density.as_deref() {
                dst_density = f64::from(d[at]);
            } else if let Some(m) = self.dst_valid.as_deref() {
                if !bit(m, at) {
                    dst_density = 0.0;
                }
            }
            let dst = self.dst[band][at].value();
            let influence = (1.0 - density) * dst_density;
            value = (value * density + dst * influence) / (density + influence);
        }
        let nodata = self.dst_nodata.as_ref().map(|n| n[band]);
        self.dst[band][at] = T::store(value, nodata);
    }
}

#[cfg(test)]
mod tests {
    use super::Sample;

    #[test]
    fn integers_round_clamp_and_step_off_nodata_as_gdal() {
        assert_eq!(u8::store(254.5, None), 255);
        assert_eq!(u8::store(300.0, None), 255);
        assert_eq!(u8::store(-3.0, None), 0);
        assert_eq!(u8::store(0.2, Some(0.0)), 1);
        assert_eq!(i16::store(-2.5, None), -2);
        assert_eq!(i16::store(-32768.0, Some(-32768.0)), -32767);
        assert_eq!(u16::store(7.4, Some(7.0)), 6);
        assert!(f32::store(f64::NAN, Some(0.0)).is_nan());
    }
}
