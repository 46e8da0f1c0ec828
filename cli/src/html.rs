//! `--report-html FILE`: the run report as one self-contained HTML page
//! (inline CSS and SVG, no script, nothing fetched), viewable offline: the
//! diagnosis, a map of where the data went (`map`), a timeline of items in
//! flight per stage and of limiter use, and the report's tables.

use std::fmt::Write;

mod map;

use warpline_engine::observe::Timeline;
use warpline_engine::{LimiterKind, RunReport};

const PALETTE: &[&str] = &[
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

fn esc(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Escaped `text` with its Markdown code spans (`` `cpu` ``) as `<code>`
/// elements, not raw backticks.
fn code_spans(text: &str) -> String {
    let mut out = String::new();
    for (i, part) in text.split('`').enumerate() {
        // Odd parts are inside a pair of backticks; a lone last backtick
        // leaves an odd part at the end, shown as it was.
        let closed = i % 2 == 1 && i < text.matches('`').count();
        if closed {
            let _ = write!(out, "<code>{}</code>", esc(part));
        } else {
            if i > 0 && i % 2 == 1 {
                out.push('`');
            }
            out.push_str(&esc(part));
        }
    }
    out
}

/// A step of 1, 2 or 5 times a power of ten that cuts `0..=max` into at
/// most about `n` parts.
fn nice_step(max: f64, n: f64) -> f64 {
    let raw = (max / n).max(1e-9);
    let power = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|step| *step >= raw)
        .unwrap_or(10.0 * power)
}

/// Tick values from 0 to the first multiple of `step` at or over `max`.
fn ticks(max: f64, step: f64) -> Vec<f64> {
    let n = (max / step).ceil().max(1.0) as usize;
    (0..=n).map(|i| i as f64 * step).collect()
}

/// A tick's label, with as many decimals as the step has.
fn tick_label(v: f64, step: f64) -> String {
    let decimals = (-step.log10().floor()).clamp(0.0, 6.0) as usize;
    format!("{v:.decimals$}")
}

/// What a chart's y axis shows.
struct YAxis {
    /// Its title, with the unit (`items`, `% of capacity`).
    title: &'static str,
    /// A fixed top (100 for a share), or `None` to fit the values.
    fixed_max: Option<f64>,
}

/// A chart's plot area and scales: `left`, `top`, `w`, `h` in SVG units;
/// times up to `tend` s across, values up to `vend` up.
struct Plot {
    left: f64,
    top: f64,
    w: f64,
    h: f64,
    tend: f64,
    vend: f64,
}

impl Plot {
    fn x(&self, t: f64) -> f64 {
        self.left + t / self.tend * self.w
    }

    fn y(&self, v: f64) -> f64 {
        self.top + self.h - v.min(self.vend) / self.vend * self.h
    }

    /// Horizontal grid lines with the value of each on the left.
    fn y_ticks(&self, svg: &mut String, step: f64) {
        for v in ticks(self.vend, step) {
            let _ = write!(
                svg,
                r##"<line x1="{l}" y1="{py:.1}" x2="{r}" y2="{py:.1}" stroke="#e4e4e4"/><text x="{lx}" y="{ty:.1}" text-anchor="end">{label}</text>"##,
                l = self.left,
                py = self.y(v),
                r = self.left + self.w,
                lx = self.left - 6.0,
                ty = self.y(v) + 4.0,
                label = tick_label(v, step)
            );
        }
    }

    /// The time axis's ticks, labelled.
    fn x_ticks(&self, svg: &mut String, times: &[f64], step: f64) {
        let b = self.top + self.h;
        for t in times {
            let _ = write!(
                svg,
                r##"<line x1="{px:.1}" y1="{b}" x2="{px:.1}" y2="{tb}" stroke="#888"/><text x="{px:.1}" y="{ly}" text-anchor="middle">{label}</text>"##,
                px = self.x(*t),
                tb = b + 5.0,
                ly = b + 18.0,
                label = tick_label(*t, step)
            );
        }
    }

    /// One line per series, its name as its tooltip.
    fn lines(&self, svg: &mut String, times: &[f64], series: &[(String, Vec<f64>)]) {
        for (i, (name, values)) in series.iter().enumerate() {
            let points: Vec<String> = times
                .iter()
                .zip(values)
                .map(|(t, v)| format!("{:.1},{:.1}", self.x(*t), self.y(*v)))
                .collect();
            let _ = write!(
                *svg,
                r##"<polyline fill="none" stroke="{c}" stroke-width="1.5" points="{p}"><title>{n}</title></polyline>"##,
                c = PALETTE[i % PALETTE.len()],
                p = points.join(" "),
                n = esc(name)
            );
        }
    }

    /// Both axes' lines and titles.
    fn axes(&self, svg: &mut String, y_title: &str) {
        let b = self.top + self.h;
        let _ = write!(
            svg,
            r##"<line x1="{l}" y1="{b}" x2="{r}" y2="{b}" stroke="#888"/><line x1="{l}" y1="{t}" x2="{l}" y2="{b}" stroke="#888"/><text x="{cx}" y="{ly}" text-anchor="middle">time since the run started (s)</text><text transform="translate(14 {cy}) rotate(-90)" text-anchor="middle">{y_title}</text>"##,
            l = self.left,
            t = self.top,
            r = self.left + self.w,
            cx = self.left + self.w / 2.0,
            ly = b + 38.0,
            cy = self.top + self.h / 2.0,
        );
    }
}

/// The value axis's tick step and top: `y`'s fixed top, or the values'
/// largest rounded up to a tick.
fn y_scale(y: &YAxis, series: &[(String, Vec<f64>)]) -> (f64, f64) {
    let vmax = series
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .fold(1.0f64, f64::max);
    match y.fixed_max {
        Some(m) => (m / 4.0, m),
        None => {
            let step = nice_step(vmax, 5.0).max(1.0);
            (step, ticks(vmax, step).last().copied().unwrap_or(vmax))
        }
    }
}

/// One line chart: `series` of (name, values at each sample time), with
/// ticked and labelled axes.
fn chart(title: &str, y: &YAxis, times: &[f64], series: &[(String, Vec<f64>)]) -> String {
    let tmax = times.last().copied().unwrap_or(0.0).max(1e-9);
    let tstep = nice_step(tmax, 8.0);
    // The axis ends with the run; ticks past its end are left out.
    let mut xticks = ticks(tmax, tstep);
    xticks.retain(|t| *t <= tmax * 1.0001);
    let (vstep, vend) = y_scale(y, series);
    let plot = Plot {
        left: 64.0,
        top: 10.0,
        w: 800.0,
        h: 220.0,
        tend: tmax,
        vend,
    };
    let mut svg = format!(
        r##"<figure><figcaption>{t}</figcaption><svg class="chart" viewBox="0 0 {vw} {vh}" role="img" aria-label="{t}">"##,
        t = esc(title),
        vw = plot.left + plot.w + 20.0,
        vh = plot.top + plot.h + 44.0
    );
    plot.y_ticks(&mut svg, vstep);
    plot.x_ticks(&mut svg, &xticks, tstep);
    plot.axes(&mut svg, y.title);
    plot.lines(&mut svg, times, series);
    svg.push_str("</svg>");
    svg + &legend(series) + "</figure>"
}

fn legend(series: &[(String, Vec<f64>)]) -> String {
    let mut out = String::from("<div class=\"legend\">");
    for (i, (name, _)) in series.iter().enumerate() {
        let _ = write!(
            out,
            r#"<span><i style="background:{}"></i>{}</span>"#,
            PALETTE[i % PALETTE.len()],
            esc(name)
        );
    }
    out + "</div>"
}

fn charts(t: &Timeline) -> String {
    let times: Vec<f64> = t.samples.iter().map(|s| s.t_s).collect();
    let stages: Vec<(String, Vec<f64>)> = t
        .stages
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let v = t
                .samples
                .iter()
                .map(|s| (s.working[i] + s.queued[i]) as f64)
                .collect();
            (name.clone(), v)
        })
        .collect();
    let limiters: Vec<(String, Vec<f64>)> = t
        .limiters
        .iter()
        .enumerate()
        .map(|(i, (name, cap))| {
            let v = t
                .samples
                .iter()
                .map(|s| s.in_use[i] as f64 * 100.0 / (*cap).max(1) as f64)
                .collect();
            (name.clone(), v)
        })
        .collect();
    let every = format!("the most in each {} interval", seconds(t.interval_s));
    let items = YAxis {
        title: "items",
        fixed_max: None,
    };
    let share = YAxis {
        title: "% of capacity",
        fixed_max: Some(100.0),
    };
    chart(
        &format!("Items in flight per stage, working + queued ({every})"),
        &items,
        &times,
        &stages,
    ) + &chart(
        &format!("Limiter use, % of capacity ({every})"),
        &share,
        &times,
        &limiters,
    )
}

/// `0.1 s`, `2 s`.
fn seconds(s: f64) -> String {
    if s < 10.0 {
        format!("{s:.1} s")
    } else {
        format!("{s:.0} s")
    }
}

/// The report as a self-contained HTML page.
pub fn render(report: &RunReport) -> String {
    let mut page = String::new();
    let i = &report.items;
    let _ = write!(
        page,
        r#"<!doctype html><html lang="en"><head><meta charset="utf-8"><title>warpline: {name}</title>
<style>body{{font:14px system-ui,sans-serif;margin:2em;max-width:960px}}table{{border-collapse:collapse;margin:1em 0}}
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}th{{background:#f4f4f4;text-align:center}}td:first-child{{text-align:left}}
.chart{{width:100%;height:auto;font-size:11px}}.legend span{{margin-right:1em}}.legend i{{display:inline-block;width:10px;height:10px;margin-right:4px}}
.diagnosis{{font-size:16px;padding:.6em;background:#fff7e0;border-left:4px solid #f0a000}}{map_style}</style></head><body>
<h1>warpline: pipeline <code>{name}</code></h1>
<p>{outcome} in {elapsed:.2} s: {total} items, {done} done, {skipped} skipped, {failed} failed; {tp:.1} items/s.</p>
<p class="diagnosis">{diagnosis}</p>"#,
        name = esc(&report.pipeline),
        outcome = report.outcome,
        elapsed = report.elapsed_s,
        total = i.total,
        done = i.done,
        skipped = i.skipped,
        failed = i.failed,
        tp = report.throughput_per_s,
        diagnosis = code_spans(&report.diagnosis),
        map_style = map::STYLE,
    );
    page.push_str(&map::map(report));
    match &report.timeline {
        Some(t) if !t.samples.is_empty() => page.push_str(&charts(t)),
        _ => page.push_str("<p>(No timeline: the run was not sampled.)</p>"),
    }
    tables(&mut page, report);
    page.push_str("</body></html>\n");
    page
}

/// A limiter's capacity or use as people read it: `8.0 MiB` for a byte
/// budget, `5000/s burst 50` for a rate, the slots for a count.
fn limiter_size(kind: LimiterKind, n: u64, per_second: Option<f64>) -> String {
    match (kind, per_second) {
        (LimiterKind::Bytes, _) => bytesize::ByteSize(n).display().iec().to_string(),
        (LimiterKind::Rate, Some(r)) => format!("{r}/s burst {n}"),
        _ => n.to_string(),
    }
}

/// The stages table's columns.
const STAGE_COLUMNS: [&str; 9] = [
    "stage",
    "kind",
    "workers",
    "mailbox",
    "processed",
    "busy s",
    "busy %",
    "starved s",
    "blocked s",
];

/// The limiters table's columns.
const LIMITER_COLUMNS: [&str; 7] = [
    "limiter",
    "kind",
    "capacity",
    "peak in use",
    "at capacity %",
    "waited s",
    "p95 wait s",
];

/// The report's tables: stages, limiters, hosts, failures.
fn tables(page: &mut String, report: &RunReport) {
    let stages = report.stages.iter().map(|s| {
        vec![
            esc(&s.name),
            esc(&s.kind),
            s.workers.to_string(),
            s.mailbox.to_string(),
            s.processed.to_string(),
            format!("{:.2}", s.busy_s),
            format!("{:.0}", s.utilisation * 100.0),
            format!("{:.2}", s.starved_s),
            format!("{:.2}", s.blocked_s),
        ]
    });
    table(page, "Stages", &STAGE_COLUMNS, stages);
    let limiters = report.limiters.iter().map(|l| {
        vec![
            esc(&l.name),
            l.kind.to_string(),
            limiter_size(l.kind, l.capacity, l.per_second),
            l.peak_in_use
                .map_or_else(|| "-".into(), |p| limiter_size(l.kind, p, None)),
            format!("{:.0}", l.share_at_capacity * 100.0),
            format!("{:.2}", l.wait_s),
            format!("{:.3}", l.p95_wait_s),
        ]
    });
    table(page, "Limiters", &LIMITER_COLUMNS, limiters);
    if !report.hosts.is_empty() {
        let hosts = report.hosts.iter().map(|h| {
            vec![
                esc(&h.host),
                h.requests.to_string(),
                format!("{:.1}", h.achieved_per_s),
                h.throttled_429.to_string(),
                h.retries.to_string(),
            ]
        });
        let columns = ["host", "requests", "per s", "429s", "retries"];
        table(page, "Hosts", &columns, hosts);
    }
    if !report.failures.is_empty() {
        let failures = report.failures.iter().take(200).map(|f| {
            vec![
                esc(&f.id),
                esc(&f.stage),
                f.kind.to_string(),
                format!("<div style=\"text-align:left\">{}</div>", esc(&f.message)),
            ]
        });
        table(
            page,
            "Failures",
            &["item", "stage", "kind", "message"],
            failures,
        );
    }
}

/// A table under its heading: a header row of `columns`, then a row for
/// each of `rows` (its cells' HTML, escaped already).
fn table(
    page: &mut String,
    title: &str,
    columns: &[&str],
    rows: impl Iterator<Item = Vec<String>>,
) {
    let _ = write!(*page, "<h2>{title}</h2><table><tr>");
    for c in columns {
        let _ = write!(*page, "<th>{c}</th>");
    }
    page.push_str("</tr>");
    for row in rows {
        page.push_str("<tr>");
        for cell in row {
            let _ = write!(*page, "<td>{cell}</td>");
        }
        page.push_str("</tr>");
    }
    page.push_str("</table>");
}

#[cfg(test)]
mod tests {
    use super::{charts, code_spans, nice_step};
    use warpline_engine::observe::{Sample, Timeline};

    #[test]
    fn ticks_are_round_numbers() {
        assert_eq!(nice_step(4.1, 8.0), 1.0);
        assert_eq!(nice_step(1.48, 8.0), 0.2);
        assert_eq!(nice_step(32.0, 5.0), 10.0);
        assert_eq!(nice_step(130.0, 5.0), 50.0);
    }

    #[test]
    fn charts_have_ticked_axes_with_units_and_limiters_on_0_to_100_percent() {
        let sample = |t_s: f64, working: u64, in_use: u64| Sample {
            t_s,
            working: vec![working],
            queued: vec![0],
            in_use: vec![in_use],
        };
        let t = Timeline {
            interval_s: 0.1,
            stages: vec!["fetch".into()],
            // At most 3 of 25 held: 12%, drawn on a 0-100% axis.
            limiters: vec![("connections".into(), 25)],
            samples: vec![sample(0.0, 0, 0), sample(2.0, 7, 3), sample(4.1, 2, 1)],
        };
        let html = charts(&t);
        let texts: Vec<&str> = html
            .split("</text>")
            .filter_map(|s| s.rsplit('>').next())
            .collect();
        for label in [
            "0",
            "1",
            "2",
            "3",
            "4",
            "time since the run started (s)",
            "items",
        ] {
            assert!(texts.contains(&label), "no tick {label:?} in {texts:?}");
        }
        // The time axis ends with the run: no tick at 5 s.
        assert!(!texts.contains(&"5"), "{texts:?}");
        for label in ["25", "50", "75", "100", "% of capacity"] {
            assert!(texts.contains(&label), "no tick {label:?} in {texts:?}");
        }
        assert!(html.contains("the most in each 0.1 s interval"), "{html}");
    }

    #[test]
    fn the_diagnosis_shows_code_not_backticks() {
        assert_eq!(
            code_spans("`cpu` was at capacity; raising `cpu` <now 2> may help"),
            "<code>cpu</code> was at capacity; raising <code>cpu</code> &lt;now 2&gt; may help"
        );
        assert_eq!(code_spans("no code"), "no code");
        assert_eq!(code_spans("a lone ` tick"), "a lone ` tick");
    }
}
