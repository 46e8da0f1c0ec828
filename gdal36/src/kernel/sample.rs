//! The sample types of the working buffers, and how GDAL 3.6.2 reads and
//! stores each (`GWKSetPixelValueReal`'s `CLAMP`, alg/gdalwarpkernel.cpp).

/// A sample type of the working buffers.
pub(crate) trait Sample: Copy + PartialEq {
    /// Whether GDAL's cubic loop for an alpha-only source is its template
    /// (`GWKCubicResampleSrcMaskIsDensity4SampleRealT`: Byte, UInt16).
    const DENSITY_TEMPLATE: bool = false;
    /// Whether every value is finite (an integer type): then a value
    /// times a zero weight is a zero.
    const FINITE: bool = false;
    fn value(self) -> f64;
    /// `GWKSetPixelValueReal`'s store: clamped and rounded for integers
    /// (`CLAMP`), a plain cast for `f32`; an integer equal to the
    /// destination's nodata is moved one step off it.
    fn store(v: f64, nodata: Option<f64>) -> Self;
}

macro_rules! integer_sample {
    ($t:ty, $signed:expr, $template:expr) => {
        impl Sample for $t {
            const DENSITY_TEMPLATE: bool = $template;
            const FINITE: bool = true;
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
                    floor(v + 0.5) as $t
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

integer_sample!(u8, false, true);
integer_sample!(u16, false, true);
integer_sample!(i16, true, false);

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

/// `floor`, exactly, for the source coordinates (well inside the range
/// of an `i64`): without SSE4.1 `f64::floor` is a call into libm.
#[inline(always)]
pub(super) fn floor(v: f64) -> f64 {
    let t = v as i64 as f64;
    if t > v {
        t - 1.0
    } else {
        t
    }
}
