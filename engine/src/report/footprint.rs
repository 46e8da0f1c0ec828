//! Where each item's data went: its [`Footprint`] (bounds in EPSG:4326)
//! and how it ended, for the report's map ([`RunReport::footprints`]).
//! A stage that knows where an item lies on the Earth sets
//! [`Item::footprint`]: the raster stages set the input's when `decode`
//! opens it and the output's when `write` has written it.
//!
//! [`RunReport::footprints`]: super::RunReport::footprints
//! [`Item::footprint`]: crate::Item::footprint

use serde::Serialize;

/// Bounds in EPSG:4326, in degrees: longitudes `west` and `east` in
/// -180..=180, latitudes `south` and `north` in -90..=90. Bounds that
/// cross the antimeridian have `west > east` (as a GeoJSON `bbox` does).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Footprint {
    /// The westernmost longitude.
    pub west: f64,
    /// The southernmost latitude.
    pub south: f64,
    /// The easternmost longitude.
    pub east: f64,
    /// The northernmost latitude.
    pub north: f64,
}

impl Footprint {
    /// Whether the bounds cross the antimeridian (`west > east`).
    pub fn crosses_antimeridian(&self) -> bool {
        self.west > self.east
    }

    /// The bounds as boxes that do not cross the antimeridian, each
    /// `[west, south, east, north]` with `west <= east`: one, or two split
    /// at 180°.
    pub fn parts(&self) -> Vec<[f64; 4]> {
        let Footprint {
            west,
            south,
            east,
            north,
        } = *self;
        if self.crosses_antimeridian() {
            vec![[west, south, 180.0, north], [-180.0, south, east, north]]
        } else {
            vec![[west, south, east, north]]
        }
    }
}

/// How an item ended, as the report's map colours it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Ended {
    /// Passed every stage.
    Done,
    /// Stopped early on purpose (its output was already there).
    Skipped,
    /// Failed, or was interrupted.
    Failed,
}

impl Ended {
    /// `done`, `skipped` or `failed`.
    pub fn as_str(self) -> &'static str {
        match self {
            Ended::Done => "done",
            Ended::Skipped => "skipped",
            Ended::Failed => "failed",
        }
    }
}

/// One item whose footprint was known when it ended: a done item's is its
/// output's; a skipped or failed item's is its input's, when a stage had
/// read it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ItemFootprint {
    /// The item's id.
    pub id: String,
    /// How it ended.
    pub outcome: Ended,
    /// Where it lies.
    #[serde(flatten)]
    pub footprint: Footprint,
}

#[cfg(test)]
mod tests {
    use super::Footprint;

    #[test]
    fn bounds_across_the_antimeridian_are_split_at_it() {
        let across = Footprint {
            west: 178.0,
            south: -1.0,
            east: -179.0,
            north: 1.0,
        };
        assert!(across.crosses_antimeridian());
        assert_eq!(
            across.parts(),
            vec![[178.0, -1.0, 180.0, 1.0], [-180.0, -1.0, -179.0, 1.0]]
        );
        let within = Footprint {
            west: -10.0,
            east: 10.0,
            ..across
        };
        assert!(!within.crosses_antimeridian());
        assert_eq!(within.parts(), vec![[-10.0, -1.0, 10.0, 1.0]]);
    }
}
