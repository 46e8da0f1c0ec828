//! The report's map: where the data went. Each item's footprint (its
//! bounds in EPSG:4326, [`RunReport::footprints`]) drawn over a plain
//! world outline, coloured by how the item ended, so a batch's cover and
//! its failures show at a glance.
//!
//! Equirectangular, inline SVG, no script. The outline is Natural Earth's
//! 1:110m land (public domain), simplified to about 10 KB of SVG path in
//! tenths of a degree (`land-110m.svgpath`, made by
//! `scripts/world-outline.py`), so the map's own coordinates are tenths
//! of a degree (x = longitude, y = -latitude) and the view is a window on
//! them: the whole world, or the footprints' region with a margin when
//! they cover less than half of it. A footprint across the antimeridian is
//! drawn as its two parts, one each side; one too small to see at the
//! map's scale is drawn a few pixels wide around its centre.

use std::fmt::Write;

use warpline_engine::report::{Ended, ItemFootprint};
use warpline_engine::RunReport;

use super::{esc, nice_step};

/// Natural Earth's land, as one SVG path in tenths of a degree.
const LAND: &str = include_str!("land-110m.svgpath");

/// The map's plot area in the page's SVG units: 2:1, as the window is.
const LEFT: f64 = 44.0;
const TOP: f64 = 8.0;
const WIDTH: f64 = 800.0;
const HEIGHT: f64 = 400.0;

/// The fewest pixels a footprint is drawn across.
const MIN_PX: f64 = 6.0;

/// The smallest window, in degrees of longitude (half as many of latitude):
/// closer, the 1:110m outline is too coarse to tell where things are.
const MIN_SPAN: f64 = 40.0;

/// What the map shows, in degrees: `west`, `south` and its width (its
/// height is half of it).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Window {
    west: f64,
    south: f64,
    span: f64,
}

impl Window {
    const WORLD: Window = Window {
        west: -180.0,
        south: -90.0,
        span: 360.0,
    };

    fn north(&self) -> f64 {
        self.south + self.span / 2.0
    }

    fn east(&self) -> f64 {
        self.west + self.span
    }

    /// The page's x of longitude `lon`.
    fn x(&self, lon: f64) -> f64 {
        LEFT + (lon - self.west) / self.span * WIDTH
    }

    /// The page's y of latitude `lat`.
    fn y(&self, lat: f64) -> f64 {
        TOP + (self.north() - lat) / (self.span / 2.0) * HEIGHT
    }

    /// The window around `boxes` (`[west, south, east, north]`, none across
    /// the antimeridian) with a margin, 2:1, inside the world; the world
    /// when they cover half of it or more.
    fn around(boxes: &[[f64; 4]]) -> Window {
        let (mut w, mut s, mut e, mut n) = (180.0f64, 90.0f64, -180.0f64, -90.0f64);
        for b in boxes {
            (w, s, e, n) = (w.min(b[0]), s.min(b[1]), e.max(b[2]), n.max(b[3]));
        }
        if boxes.is_empty() || e - w >= 180.0 || n - s >= 90.0 {
            return Window::WORLD;
        }
        // Under 270 degrees: the clamps below have a range.
        let span = ((e - w) * 1.5)
            .max((n - s) * 1.5 * 2.0)
            .clamp(MIN_SPAN, 360.0);
        let west = ((w + e) / 2.0 - span / 2.0).clamp(-180.0, 180.0 - span);
        let south = ((s + n) / 2.0 - span / 4.0).clamp(-90.0, 90.0 - span / 2.0);
        Window { west, south, span }
    }
}

/// The map, with its caption and legend; empty when no item's footprint
/// is known (a run whose stages place nothing on the Earth).
pub(super) fn map(report: &RunReport) -> String {
    let placed = &report.footprints;
    if placed.is_empty() {
        if report.items.skipped > 0 && report.items.done == 0 {
            return "<p>(No map: every item was skipped before any stage read it, so where \
                    its output lies was not looked up.)</p>"
                .to_owned();
        }
        return String::new();
    }
    let boxes: Vec<[f64; 4]> = placed.iter().flat_map(|p| p.footprint.parts()).collect();
    let across = placed.iter().any(|p| p.footprint.crosses_antimeridian());
    let window = if across {
        Window::WORLD
    } else {
        Window::around(&boxes)
    };
    let mut svg = format!(
        r##"<figure><figcaption>Where the data went: each item's footprint in EPSG:4326 (a done item's output, a skipped or failed item's input), over Natural Earth's 1:110m land</figcaption><svg class="chart map" viewBox="0 0 {vw} {vh}" role="img" aria-label="map of the items' footprints">"##,
        vw = LEFT + WIDTH + 16.0,
        vh = TOP + HEIGHT + 24.0,
    );
    // The world, in tenths of a degree, seen through the window.
    let _ = write!(
        svg,
        r##"<svg x="{LEFT}" y="{TOP}" width="{WIDTH}" height="{HEIGHT}" viewBox="{vx:.1} {vy:.1} {vw:.1} {vh:.1}" preserveAspectRatio="none"><rect x="-1800" y="-900" width="3600" height="1800" fill="#eef4fa"/><path class="land" d="{LAND}"/>"##,
        vx = window.west * 10.0,
        vy = -window.north() * 10.0,
        vw = window.span * 10.0,
        vh = window.span * 5.0,
    );
    graticule(&mut svg, &window);
    // Failures last, on top.
    for outcome in [Ended::Done, Ended::Skipped, Ended::Failed] {
        for p in placed.iter().filter(|p| p.outcome == outcome) {
            shape(&mut svg, p, &window);
        }
    }
    svg.push_str("</svg>");
    labels(&mut svg, &window);
    let _ = write!(
        svg,
        r##"<rect x="{LEFT}" y="{TOP}" width="{WIDTH}" height="{HEIGHT}" fill="none" stroke="#888"/></svg>"##
    );
    svg + &legend(report) + "</figure>"
}

/// The step of the graticule, in degrees, for a window `span` wide.
fn grid_step(span: f64) -> f64 {
    match nice_step(span, 8.0) {
        s if s >= 20.0 => 30.0,
        s if s >= 10.0 => 15.0,
        s => s,
    }
}

/// The multiples of `step` from `from` to `to`.
fn multiples(from: f64, to: f64, step: f64) -> impl Iterator<Item = f64> {
    let first = (from / step).ceil() as i64;
    let last = (to / step).floor() as i64;
    (first..=last).map(move |k| k as f64 * step)
}

/// Lines of longitude and latitude, in tenths of a degree.
fn graticule(svg: &mut String, window: &Window) {
    let step = grid_step(window.span);
    svg.push_str(r##"<g class="grid">"##);
    for lon in multiples(window.west, window.east(), step) {
        let _ = write!(svg, "<path d=\"M{:.1} -900V900\"/>", lon * 10.0);
    }
    for lat in multiples(window.south, window.north(), step) {
        let _ = write!(svg, "<path d=\"M-1800 {:.1}H1800\"/>", -lat * 10.0);
    }
    svg.push_str("</g>");
}

/// `12.5°E`, `0°`, `30°S`: a graticule line's label.
fn degrees(v: f64, step: f64, positive: char, negative: char) -> String {
    let decimals = if step < 1.0 { 1 } else { 0 };
    let text = format!("{:.decimals$}", v.abs());
    match v {
        v if v.abs() < 1e-9 => "0°".to_owned(),
        v if v > 0.0 => format!("{text}°{positive}"),
        _ => format!("{text}°{negative}"),
    }
}

/// The graticule's values under the map and to its left.
fn labels(svg: &mut String, window: &Window) {
    let step = grid_step(window.span);
    for lon in multiples(window.west, window.east(), step) {
        let _ = write!(
            svg,
            r##"<text x="{x:.1}" y="{y:.1}" text-anchor="middle">{t}</text>"##,
            x = window.x(lon),
            y = TOP + HEIGHT + 16.0,
            t = degrees(lon, step, 'E', 'W')
        );
    }
    for lat in multiples(window.south, window.north(), step) {
        let _ = write!(
            svg,
            r##"<text x="{x:.1}" y="{y:.1}" text-anchor="end">{t}</text>"##,
            x = LEFT - 4.0,
            y = window.y(lat) + 4.0,
            t = degrees(lat, step, 'N', 'S')
        );
    }
}

/// One item's footprint: one path (two parts across the antimeridian) of
/// its outcome's class, its id and bounds as its tooltip.
fn shape(svg: &mut String, p: &ItemFootprint, window: &Window) {
    // At least MIN_PX across, in tenths of a degree.
    let least = MIN_PX / WIDTH * window.span * 10.0;
    let mut d = String::new();
    for [w, s, e, n] in p.footprint.parts() {
        let (mut x0, mut x1) = (w * 10.0, e * 10.0);
        let (mut y0, mut y1) = (-n * 10.0, -s * 10.0);
        (x0, x1) = widened(x0, x1, least, 1800.0);
        (y0, y1) = widened(y0, y1, least, 900.0);
        let _ = write!(d, "M{x0:.2} {y0:.2}H{x1:.2}V{y1:.2}H{x0:.2}Z");
    }
    let f = &p.footprint;
    let _ = write!(
        svg,
        r##"<path class="fp {o}" d="{d}"><title>{id}: {o}, {w:.3}..{e:.3} E, {s:.3}..{n:.3} N</title></path>"##,
        o = p.outcome.as_str(),
        id = esc(&p.id),
        w = f.west,
        e = f.east,
        s = f.south,
        n = f.north,
    );
}

/// `a..b` widened to `least` about its middle when narrower, and kept
/// within `-edge..=edge` (a part that ends at the antimeridian grows away
/// from it).
fn widened(a: f64, b: f64, least: f64, edge: f64) -> (f64, f64) {
    if b - a >= least {
        return (a, b);
    }
    let middle = ((a + b) / 2.0).clamp(-edge + least / 2.0, edge - least / 2.0);
    (middle - least / 2.0, middle + least / 2.0)
}

/// Each outcome's colour and count on the map, and what is not on it.
fn legend(report: &RunReport) -> String {
    let placed = &report.footprints;
    let mut out = String::from("<div class=\"legend\">");
    for outcome in [Ended::Done, Ended::Skipped, Ended::Failed] {
        let n = placed.iter().filter(|p| p.outcome == outcome).count();
        let _ = write!(
            out,
            r#"<span><i class="fp {o}"></i>{o}: {n}</span>"#,
            o = outcome.as_str()
        );
    }
    let ended = report.items.done + report.items.skipped + report.items.failed;
    let missing = ended.saturating_sub(placed.len() as u64);
    if missing > 0 {
        let _ = write!(
            out,
            "<span>not drawn: {missing} of {ended} items (no footprint known: skipped before \
             any stage read them, failed before decode, no georeferencing, or past the first {})</span>",
            warpline_engine::run::REPORTED_FOOTPRINTS
        );
    }
    out + "</div>"
}

/// The map's styles, for the page's `<style>`.
pub(super) const STYLE: &str = ".map .land{fill:#e6e4dc;stroke:#9a9a90;stroke-width:.7;vector-effect:non-scaling-stroke}\
.map .grid path{fill:none;stroke:#c9d6e3;stroke-width:.5;vector-effect:non-scaling-stroke}\
.fp{stroke-width:1.2;vector-effect:non-scaling-stroke}\
.fp.done{fill:#2ca02c38;stroke:#1b7a1b}.fp.skipped{fill:#1f77b438;stroke:#1f5f9a}.fp.failed{fill:#d6272870;stroke:#a01010}\
.legend i.fp{border:1px solid}.legend i.fp.done{background:#2ca02c55;border-color:#1b7a1b}\
.legend i.fp.skipped{background:#1f77b455;border-color:#1f5f9a}.legend i.fp.failed{background:#d6272888;border-color:#a01010}";

#[cfg(test)]
mod tests {
    use super::*;
    use warpline_engine::Footprint;

    fn fp(west: f64, south: f64, east: f64, north: f64) -> Footprint {
        Footprint {
            west,
            south,
            east,
            north,
        }
    }

    #[test]
    fn a_small_region_is_zoomed_in_and_the_world_otherwise() {
        // The Bahamas scene: a window around it, 2:1, with a margin.
        let w = Window::around(&[[-78.96, 23.56, -76.57, 25.55]]);
        assert_eq!(w.span, MIN_SPAN);
        assert!(w.west < -78.96 && w.east() > -76.57);
        assert!(w.south < 23.56 && w.north() > 25.55);
        // Outputs on several continents: the world.
        let w = Window::around(&[[-120.0, 30.0, -110.0, 40.0], [100.0, 0.0, 110.0, 10.0]]);
        assert_eq!(w, Window::WORLD);
        // Near the pole: the window stays inside the world.
        let w = Window::around(&[[0.0, 85.0, 5.0, 89.0]]);
        assert!(w.north() <= 90.0 && w.south >= -90.0, "{w:?}");
    }

    #[test]
    fn a_footprint_across_the_antimeridian_is_one_shape_of_two_parts() {
        let p = ItemFootprint {
            id: "fiji<1>".into(),
            outcome: Ended::Failed,
            footprint: fp(178.0, -19.0, -179.0, -16.0),
        };
        let mut svg = String::new();
        shape(&mut svg, &p, &Window::WORLD);
        assert!(
            svg.starts_with(r#"<path class="fp failed" d="M1773.00 160.00H1800.00"#),
            "{svg}"
        );
        // 2 degrees and 1 are under MIN_PX (2.7 degrees here): each part
        // grows away from the antimeridian.
        assert!(svg.contains("ZM-1800.00 160.00H-1773.00"), "{svg}");
        assert_eq!(svg.matches('Z').count(), 2, "{svg}");
        assert!(svg.contains("<title>fiji&lt;1&gt;: failed"), "{svg}");
    }

    #[test]
    fn a_small_footprint_is_widened_within_the_world() {
        assert_eq!(widened(10.0, 40.0, 18.0, 1800.0), (10.0, 40.0));
        assert_eq!(widened(10.0, 12.0, 18.0, 1800.0), (2.0, 20.0));
        assert_eq!(widened(1795.0, 1800.0, 18.0, 1800.0), (1782.0, 1800.0));
        assert_eq!(widened(-900.0, -899.0, 18.0, 900.0), (-900.0, -882.0));
    }

    #[test]
    fn graticule_labels_name_the_hemisphere() {
        assert_eq!(degrees(-30.0, 30.0, 'E', 'W'), "30°W");
        assert_eq!(degrees(0.0, 30.0, 'N', 'S'), "0°");
        assert_eq!(degrees(2.5, 0.5, 'N', 'S'), "2.5°N");
        assert_eq!(grid_step(360.0), 30.0);
        assert_eq!(grid_step(20.0), 5.0);
        assert_eq!(grid_step(4.0), 0.5);
    }
}
