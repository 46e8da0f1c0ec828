//! `--report-html FILE`: the run report as one self-contained HTML page
//! (inline CSS and SVG, no script, nothing fetched), viewable offline: the
//! diagnosis, a timeline of items in flight per stage and of limiter use,
//! and the report's tables.

use std::fmt::Write;

use warpline_engine::observe::Timeline;
use warpline_engine::RunReport;

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

/// One line chart: `series` of (name, values at each sample time).
fn chart(title: &str, unit: &str, times: &[f64], series: &[(String, Vec<f64>)]) -> String {
    let (w, h, left, bottom) = (860.0, 240.0, 50.0, 30.0);
    let tmax = times.last().copied().unwrap_or(0.0).max(1e-9);
    let vmax = series
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .fold(0.0f64, f64::max)
        .max(1.0);
    let mut svg = String::new();
    let _ = write!(
        svg,
        r##"<figure><figcaption>{}</figcaption><svg class="chart" viewBox="0 0 {} {}" role="img" aria-label="{}">"##,
        esc(title),
        w + left + 10.0,
        h + bottom + 10.0,
        esc(title)
    );
    let _ = write!(
        svg,
        r##"<line x1="{left}" y1="{h}" x2="{}" y2="{h}" stroke="#888"/><line x1="{left}" y1="0" x2="{left}" y2="{h}" stroke="#888"/>"##,
        left + w
    );
    let _ = write!(
        svg,
        r##"<text x="{}" y="12" text-anchor="end">{vmax:.0}{unit}</text><text x="{}" y="{h}" text-anchor="end">0</text><text x="{}" y="{}" text-anchor="end">{tmax:.1} s</text>"##,
        left - 4.0,
        left - 4.0,
        left + w,
        h + 20.0
    );
    for (i, (name, values)) in series.iter().enumerate() {
        let points: Vec<String> = times
            .iter()
            .zip(values)
            .map(|(t, v)| format!("{:.1},{:.1}", left + t / tmax * w, h - v / vmax * h))
            .collect();
        let color = PALETTE[i % PALETTE.len()];
        let _ = write!(
            svg,
            r##"<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{}"><title>{}</title></polyline>"##,
            points.join(" "),
            esc(name)
        );
    }
    svg.push_str("</svg><div class=\"legend\">");
    for (i, (name, _)) in series.iter().enumerate() {
        let _ = write!(
            svg,
            r#"<span><i style="background:{}"></i>{}</span>"#,
            PALETTE[i % PALETTE.len()],
            esc(name)
        );
    }
    svg.push_str("</div></figure>");
    svg
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
    chart(
        "Items in flight per stage (working + queued)",
        "",
        &times,
        &stages,
    ) + &chart("Limiter use (% of capacity)", "%", &times, &limiters)
}

/// The report as a self-contained HTML page.
pub fn render(report: &RunReport) -> String {
    let mut page = String::new();
    let i = &report.items;
    let _ = write!(
        page,
        r#"<!doctype html><html lang="en"><head><meta charset="utf-8"><title>warpline: {name}</title>
<style>body{{font:14px system-ui,sans-serif;margin:2em;max-width:960px}}table{{border-collapse:collapse;margin:1em 0}}
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}th{{background:#f4f4f4}}td:first-child{{text-align:left}}
.chart{{width:100%;height:auto;font-size:11px}}.legend span{{margin-right:1em}}.legend i{{display:inline-block;width:10px;height:10px;margin-right:4px}}
.diagnosis{{font-size:16px;padding:.6em;background:#fff7e0;border-left:4px solid #f0a000}}</style></head><body>
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
        diagnosis = code_spans(&report.diagnosis)
    );
    match &report.timeline {
        Some(t) if !t.samples.is_empty() => page.push_str(&charts(t)),
        _ => page.push_str("<p>(No timeline: the run was not sampled.)</p>"),
    }
    tables(&mut page, report);
    page.push_str("</body></html>\n");
    page
}

/// The report's tables: stages, limiters, hosts, failures.
fn tables(page: &mut String, report: &RunReport) {
    page.push_str("<h2>Stages</h2><table><tr><th>stage</th><th>kind</th><th>workers</th><th>mailbox</th><th>processed</th><th>busy s</th><th>busy %</th><th>starved s</th><th>blocked s</th></tr>");
    for s in &report.stages {
        let _ = write!(
            *page,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.2}</td><td>{:.0}</td><td>{:.2}</td><td>{:.2}</td></tr>",
            esc(&s.name),
            esc(&s.kind),
            s.workers,
            s.mailbox,
            s.processed,
            s.busy_s,
            s.utilisation * 100.0,
            s.starved_s,
            s.blocked_s
        );
    }
    page.push_str("</table><h2>Limiters</h2><table><tr><th>limiter</th><th>kind</th><th>capacity</th><th>peak in use</th><th>at capacity %</th><th>waited s</th><th>p95 wait s</th></tr>");
    for l in &report.limiters {
        let _ = write!(
            *page,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.0}</td><td>{:.2}</td><td>{:.3}</td></tr>",
            esc(&l.name),
            l.kind,
            l.capacity,
            l.peak_in_use.map(|p| p.to_string()).unwrap_or_else(|| "-".into()),
            l.share_at_capacity * 100.0,
            l.wait_s,
            l.p95_wait_s
        );
    }
    page.push_str("</table>");
    if !report.hosts.is_empty() {
        page.push_str("<h2>Hosts</h2><table><tr><th>host</th><th>requests</th><th>per s</th><th>429s</th><th>retries</th></tr>");
        for h in &report.hosts {
            let _ = write!(
                *page,
                "<tr><td>{}</td><td>{}</td><td>{:.1}</td><td>{}</td><td>{}</td></tr>",
                esc(&h.host),
                h.requests,
                h.achieved_per_s,
                h.throttled_429,
                h.retries
            );
        }
        page.push_str("</table>");
    }
    if !report.failures.is_empty() {
        page.push_str("<h2>Failures</h2><table><tr><th>item</th><th>stage</th><th>kind</th><th>message</th></tr>");
        for f in report.failures.iter().take(200) {
            let _ = write!(
                *page,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td style=\"text-align:left\">{}</td></tr>",
                esc(&f.id),
                esc(&f.stage),
                f.kind,
                esc(&f.message)
            );
        }
        page.push_str("</table>");
    }
}

#[cfg(test)]
mod tests {
    use super::code_spans;

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
