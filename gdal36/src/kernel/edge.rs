//! GDAL 3.12's neighbour on the edge of the validity area: where a
//! destination pixel's source pixel is invalid, and a corner of the
//! chunk's source window does not project to the output (a geostationary
//! disk's limb, say), GDAL 3.12's `GWKRealCaseThread` and
//! `GWKNearestThread` take a valid neighbour of that pixel instead, if
//! one of the pixel's own corners does not project either (3.12.1
//! alg/gdalwarpkernel.cpp: `GWKOneSourceCornerFailsToReproject` 5067-5085,
//! `GWKAdjustSrcOffsetOnEdge` 5094-5164 and its density twin 5170-5241,
//! used at 5630-5668 and 6316-6338). GDAL 3.6 has none of it: its loops
//! skip the pixel, and so do these on 3.6 ([`Chunk::edge`] never set).
//!
//! GDAL then reads the neighbour's density and, for nearest, its value;
//! bilinear and cubic keep sampling at the point itself. The transforms
//! are GDAL's: the warp's transformer, source to destination, one point
//! at a time.

use super::bilinear::{bit, Chunk, Sample, Transform, SRC_DENSITY_THRESHOLD};

impl<T: Sample> Chunk<'_, T> {
    /// `GWKOneSourceCornerFailsToReproject`, once a chunk (GDAL: once a
    /// job, and a job per chunk in one thread), where GDAL has it.
    pub(super) fn start_edge(&mut self, tr: &mut impl Transform) {
        self.edge = self.edge_neighbours && {
            let (x0, y0) = (f64::from(self.src_off.0), f64::from(self.src_off.1));
            let (w, h) = (self.src_size.0 as f64, self.src_size.1 as f64);
            [(0.0, 0.0), (w, 0.0), (0.0, h), (w, h)]
                .iter()
                .any(|&(dx, dy)| !tr.forward(x0 + dx, y0 + dy))
        };
    }

    /// `GWKRealCaseThread`'s gate: the source pixel it reads and its
    /// unified density, or None when it skips the destination pixel. The
    /// density first (a neighbour dense enough, whose density it then
    /// takes), the unified mask second (a neighbour valid in it, the
    /// density left as it was), as 3.12.1 gdalwarpkernel.cpp:5630-5668.
    #[inline(always)]
    pub(super) fn real_gate(&self, tr: &mut impl Transform, offset: usize) -> Option<(usize, f64)> {
        if !self.edge {
            return self.source_density(offset).map(|d| (offset, d));
        }
        let mut offset = offset;
        let mut density = 1.0;
        if let Some(d) = self.unified_density {
            density = f64::from(d[offset]);
            // As GDAL's `< threshold` test (a NaN density passes).
            if density < SRC_DENSITY_THRESHOLD {
                offset = self.neighbour(tr, offset, |o| d[o] >= SRC_DENSITY_THRESHOLD as f32)?;
                density = f64::from(d[offset]);
            }
        }
        if let Some(m) = self.unified_valid {
            if !bit(m, offset) {
                offset = self.neighbour(tr, offset, |o| bit(m, o))?;
            }
        }
        Some((offset, density))
    }

    /// `GWKNearestThread`'s gate: the unified mask first (a valid
    /// neighbour), then the density of the pixel it reads, with no
    /// neighbour for it, as 3.12.1 gdalwarpkernel.cpp:6316-6338.
    #[inline(always)]
    pub(super) fn nearest_gate(
        &self,
        tr: &mut impl Transform,
        offset: usize,
    ) -> Option<(usize, f64)> {
        if !self.edge {
            return self.source_density(offset).map(|d| (offset, d));
        }
        let mut offset = offset;
        if let Some(m) = self.unified_valid {
            if !bit(m, offset) {
                offset = self.neighbour(tr, offset, |o| bit(m, o))?;
            }
        }
        self.source_density(offset).map(|d| (offset, d))
    }

    /// `GWKAdjustSrcOffsetOnEdge`: when the source pixel's top-left,
    /// bottom-left or top-right corner does not project, its first
    /// neighbour that is `ok`: right, below, left, above.
    fn neighbour(
        &self,
        tr: &mut impl Transform,
        offset: usize,
        ok: impl Fn(usize) -> bool,
    ) -> Option<usize> {
        let (w, h) = self.src_size;
        let (col, row) = (offset % w, offset / w);
        let (x, y) = (
            f64::from(self.src_off.0 + col as i32),
            f64::from(self.src_off.1 + row as i32),
        );
        if tr.forward(x, y) && tr.forward(x, y + 1.0) && tr.forward(x + 1.0, y) {
            return None;
        }
        if col + 1 < w && ok(offset + 1) {
            Some(offset + 1)
        } else if row + 1 < h && ok(offset + w) {
            Some(offset + w)
        } else if col > 0 && ok(offset - 1) {
            Some(offset - 1)
        } else if row > 0 && ok(offset - w) {
            Some(offset - w)
        } else {
            None
        }
    }
}
