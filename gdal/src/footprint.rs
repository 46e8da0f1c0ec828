//! Where a raster lies on the Earth: its extent as longitude/latitude
//! bounds in EPSG:4326 ([`GeoBounds`]), for the run report's map.
//!
//! The extent's edges are densified (21 points each) and transformed by
//! OGR (`OCTTransformBounds`), in the traditional GIS axis order (longitude
//! first, whatever the CRS's authority says), so a UTM scene's curved
//! edges are followed, not only its corners; an extent that crosses the
//! antimeridian comes back with `west > east` (GeoJSON's convention, RFC
//! 7946 §5.2), which a map splits in two.

use gdal::spatial_ref::{AxisMappingStrategy, CoordTransform, SpatialRef};
use gdal::Dataset;

use crate::Raster;

/// Points per edge of the extent that are transformed (GDAL's
/// recommended 21).
const DENSIFY: i32 = 21;

/// Bounds in EPSG:4326, in degrees: `west`/`east` longitudes in
/// -180..=180, `south`/`north` latitudes in -90..=90. `west > east` when
/// the bounds cross the antimeridian.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GeoBounds {
    /// The westernmost longitude.
    pub west: f64,
    /// The southernmost latitude.
    pub south: f64,
    /// The easternmost longitude.
    pub east: f64,
    /// The northernmost latitude.
    pub north: f64,
}

impl GeoBounds {
    /// Degrees of longitude covered, going east from `west` to `east`.
    pub fn width(&self) -> f64 {
        if self.west > self.east {
            self.east + 360.0 - self.west
        } else {
            self.east - self.west
        }
    }

    /// The smallest bounds that hold both: the shorter of the two ways
    /// round the globe that covers both longitude ranges (the whole globe
    /// when neither is shorter than a full turn).
    pub fn union(&self, other: &GeoBounds) -> GeoBounds {
        // Each range as a start and a width; `other`'s start moved to
        // within a turn east of `self`'s, and the other way round.
        let span = |a: &GeoBounds, b: &GeoBounds| {
            let shift = (b.west - a.west).rem_euclid(360.0);
            (a.west, a.width().max(shift + b.width()))
        };
        let (one, two) = (span(self, other), span(other, self));
        let (west, width) = if one.1 <= two.1 { one } else { two };
        let (west, east) = if width >= 360.0 {
            (-180.0, 180.0)
        } else {
            let east = west + width;
            (west, if east > 180.0 { east - 360.0 } else { east })
        };
        GeoBounds {
            west,
            south: self.south.min(other.south),
            east,
            north: self.north.max(other.north),
        }
    }
}

impl Raster {
    /// The raster's extent in EPSG:4326 (a mosaic's: the union of its
    /// inputs'), or `None` when it has no geotransform or no CRS, or PROJ
    /// cannot transform its extent (each logged at debug level). A rotated
    /// geotransform gives the bounds of its corners' box.
    pub fn bounds_4326(&self) -> Option<GeoBounds> {
        let own = dataset_bounds(&self.ds);
        self.others
            .iter()
            .map(Raster::bounds_4326)
            .fold(own, |acc, b| match (acc, b) {
                (Some(a), Some(b)) => Some(a.union(&b)),
                (a, b) => a.or(b),
            })
    }
}

/// `ds`'s extent in EPSG:4326.
fn dataset_bounds(ds: &Dataset) -> Option<GeoBounds> {
    let gt = ds.geo_transform().ok()?;
    let wkt = ds.projection();
    if wkt.is_empty() {
        return None;
    }
    let (w, h) = ds.raster_size();
    let (w, h) = (w as f64, h as f64);
    let corners = [(0.0, 0.0), (w, 0.0), (0.0, h), (w, h)].map(|(px, py)| {
        (
            gt[0] + px * gt[1] + py * gt[2],
            gt[3] + px * gt[4] + py * gt[5],
        )
    });
    let xs = corners.map(|c| c.0);
    let ys = corners.map(|c| c.1);
    let min = |v: [f64; 4]| v.into_iter().fold(f64::INFINITY, f64::min);
    let max = |v: [f64; 4]| v.into_iter().fold(f64::NEG_INFINITY, f64::max);
    let extent = [min(xs), min(ys), max(xs), max(ys)];
    match extent_to_4326(&wkt, extent) {
        Ok(b) => Some(b),
        Err(why) => {
            tracing::debug!("no footprint in EPSG:4326: {why}");
            None
        }
    }
}

/// `extent` (`[xmin, ymin, xmax, ymax]` in the CRS `wkt`, x first) as
/// bounds in EPSG:4326, or GDAL's reason why not.
pub fn extent_to_4326(wkt: &str, extent: [f64; 4]) -> Result<GeoBounds, String> {
    let [west, south, east, north] = with_transform(wkt, |t| {
        t.transform_bounds(&extent, DENSIFY)
            .map_err(|e| e.to_string())
    })?;
    if ![west, south, east, north].iter().all(|v| v.is_finite()) {
        return Err(format!(
            "the extent {extent:?} has no finite bounds in EPSG:4326"
        ));
    }
    // A raster in longitudes 0..360 (or beyond) comes back as it is.
    let (west, east) = if east - west >= 360.0 {
        (-180.0, 180.0)
    } else {
        (wrap(west), wrap(east))
    };
    Ok(GeoBounds {
        west,
        south: south.max(-90.0),
        east,
        north: north.min(90.0),
    })
}

/// The transforms to EPSG:4326 this thread made lately, by source CRS:
/// making one (PROJ's search for a pipeline) costs about a millisecond,
/// using one a few microseconds, and a batch's rasters share a few CRSs.
const KEPT_TRANSFORMS: usize = 8;

thread_local! {
    static TRANSFORMS: std::cell::RefCell<Vec<(String, CoordTransform)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Calls `f` with a transform from the CRS `wkt` to EPSG:4326, both in
/// the traditional GIS axis order (x, or longitude, first).
fn with_transform<T>(
    wkt: &str,
    f: impl FnOnce(&CoordTransform) -> Result<T, String>,
) -> Result<T, String> {
    TRANSFORMS.with(|kept| {
        let mut kept = kept.borrow_mut();
        let at = match kept.iter().position(|(w, _)| w == wkt) {
            Some(at) => at,
            None => {
                if kept.len() == KEPT_TRANSFORMS {
                    kept.remove(0);
                }
                kept.push((wkt.to_owned(), new_transform(wkt)?));
                kept.len() - 1
            }
        };
        f(&kept[at].1)
    })
}

/// A new transform from the CRS `wkt` to EPSG:4326.
fn new_transform(wkt: &str) -> Result<CoordTransform, String> {
    crate::init();
    let order = AxisMappingStrategy::TraditionalGisOrder;
    let mut source = SpatialRef::from_wkt(wkt).map_err(|e| e.to_string())?;
    source.set_axis_mapping_strategy(order);
    let mut target = SpatialRef::from_epsg(4326).map_err(|e| e.to_string())?;
    target.set_axis_mapping_strategy(order);
    CoordTransform::new(&source, &target).map_err(|e| e.to_string())
}

/// A longitude within -180..=180.
fn wrap(lon: f64) -> f64 {
    if (-180.0..=180.0).contains(&lon) {
        lon
    } else {
        (lon + 180.0).rem_euclid(360.0) - 180.0
    }
}

#[cfg(test)]
mod tests {
    use super::{extent_to_4326, GeoBounds};

    /// UTM zone 60N from 700 to 1,000 km east: across the antimeridian
    /// (about 833 km at these latitudes), so west > east; and EPSG:4326
    /// itself in longitudes 0..360 comes back within -180..180.
    #[test]
    fn an_extent_across_the_antimeridian_has_west_above_east() {
        let utm = crate::crs_to_wkt("EPSG:32660").unwrap();
        let b = extent_to_4326(&utm, [700_000.0, 200_000.0, 1_000_000.0, 500_000.0]).unwrap();
        assert!(b.west > 178.0 && b.west < 180.0, "{b:?}");
        assert!(b.east > -179.0 && b.east < -178.0, "{b:?}");
        assert!(b.width() < 5.0, "{b:?}");
        let geographic = crate::crs_to_wkt("EPSG:4326").unwrap();
        let b = extent_to_4326(&geographic, [0.0, -90.0, 360.0, 90.0]).unwrap();
        assert_eq!(
            (b.west, b.east, b.south, b.north),
            (-180.0, 180.0, -90.0, 90.0)
        );
    }

    fn b(west: f64, east: f64) -> GeoBounds {
        GeoBounds {
            west,
            south: 0.0,
            east,
            north: 1.0,
        }
    }

    #[test]
    fn a_union_goes_the_short_way_round() {
        assert_eq!(b(10.0, 20.0).union(&b(-5.0, 12.0)), b(-5.0, 20.0));
        // Either side of the antimeridian: across it, not round the world.
        assert_eq!(b(170.0, 179.0).union(&b(-179.0, -170.0)), b(170.0, -170.0));
        assert_eq!(b(-179.0, -170.0).union(&b(170.0, 179.0)), b(170.0, -170.0));
        // One that crosses it takes in one beside it.
        assert_eq!(b(175.0, -175.0).union(&b(-176.0, -160.0)), b(175.0, -160.0));
        // Ranges that, together, go round: the whole globe.
        assert_eq!(b(-180.0, 10.0).union(&b(0.0, 180.0)), b(-180.0, 180.0));
        assert_eq!(b(-180.0, 180.0).union(&b(5.0, 6.0)), b(-180.0, 180.0));
    }
}
