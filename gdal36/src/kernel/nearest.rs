//! warpline's nearest-neighbour loop for a chunk with validity masks:
//! GDAL 3.6.2's `GWKNearestThread<T>` with `GWKGetPixelT` and
//! `GWKSetPixelValueRealT` (alg/gdalwarpkernel.cpp), which GDAL runs for
//! Byte (`GWKNearestByte`), Int16 and UInt16 (`GWKNearestShort`, which
//! reads both as Int16: so does this) and Float32 (`GWKNearestFloat`).
//! The source coordinates and the source offset are the bilinear loop's
//! (`Chunk::source_offset`, GDAL's `GWKCheckAndComputeSrcOffsets`).

use super::bilinear::{bit, Chunk, Corners, Sample, Source, Transform};

/// A sample type of GDAL's nearest loops: stepped off the destination
/// nodata as `GWKSetPixelValueRealT` steps (`numeric_limits<T>::min()`
/// is the smallest positive normal number for `float`).
pub(crate) trait Nearest: Sample {
    fn step_off(self) -> Self;
}

impl Nearest for u8 {
    fn step_off(self) -> Self {
        if self == u8::MIN {
            1
        } else {
            self - 1
        }
    }
}

impl Nearest for i16 {
    fn step_off(self) -> Self {
        if self == i16::MIN {
            i16::MIN + 1
        } else {
            self - 1
        }
    }
}

impl Nearest for f32 {
    fn step_off(self) -> Self {
        if self == f32::MIN_POSITIVE {
            f32::MIN_POSITIVE + 1.0
        } else {
            self - 1.0
        }
    }
}

impl<T: Nearest> Chunk<'_, T> {
    /// The whole chunk, row by row, as `GWKNearestThread<T>`.
    pub(crate) fn run_nearest(&mut self, tr: &mut impl Transform) {
        let (w, _) = self.dst_size;
        let mut x = vec![0f64; w];
        let mut y = vec![0f64; w];
        let mut z = vec![0f64; w];
        let mut ok = vec![0i32; w];
        self.start_edge(tr);
        for row in 0..self.dst_size.1 {
            self.source_coordinates(tr, row, [&mut x, &mut y, &mut z], &mut ok);
            for col in 0..w {
                let Some(offset) = self.source_offset(tr, row, col, &mut x, &mut y, &mut ok) else {
                    continue;
                };
                if let Some((offset, density)) = self.nearest_gate(tr, offset) {
                    self.nearest_pixel(offset, density, row * w + col);
                }
            }
        }
    }

    /// One destination pixel `at` from source pixel `offset`, whose
    /// unified density is `density`.
    #[inline(always)]
    fn nearest_pixel(&mut self, offset: usize, density: f64, at: usize) {
        for band in 0..self.src.len() {
            // `GWKGetPixelT`: the unified mask again, then the band's.
            let invalid = self.unified_valid.is_some_and(|m| !bit(m, offset))
                || self
                    .band_valid
                    .as_ref()
                    .and_then(|v| v[band])
                    .is_some_and(|m| !bit(m, offset));
            if invalid || density == 0.0 {
                continue;
            }
            let value = self.src[band][offset];
            if density < 1.0 {
                self.set_real_t(band, at, density, value);
            } else {
                self.dst[band][at] = value;
            }
        }
        self.overlay(at, density);
    }

    /// `GWKSetPixelValueRealT`.
    #[inline(always)]
    fn set_real_t(&mut self, band: usize, at: usize, density: f64, value: T) {
        let dst = &mut *self.dst[band];
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
            let influence = (1.0 - density) * dst_density;
            let real =
                (value.value() * density + dst[at].value() * influence) / (density + influence);
            dst[at] = T::store(real, None);
        } else {
            dst[at] = value;
        }
        if self
            .dst_nodata
            .as_ref()
            .is_some_and(|n| n[band] == dst[at].value())
        {
            dst[at] = dst[at].step_off();
        }
    }
}

impl<T: Sample> Source<'_, T> {
    /// `GWKGetPixelValueReal` at the source pixel under the point, as
    /// `GWKRealCaseThread`'s nearest takes it: (density, value), density 0
    /// where the band's mask says invalid.
    #[inline(always)]
    pub(super) fn nearest_real(&self, at: &Corners) -> (f64, f64) {
        let i = at.pixel;
        if self.band_valid.is_some_and(|m| !bit(m, i)) {
            return (0.0, 0.0);
        }
        let density = self.unified_density.map_or(1.0, |d| f64::from(d[i]));
        (density, self.src[i].value())
    }
}
