//! One self-contained HTML file with inline SVG plots: latency over time
//! with episodes shaded and event-rate lanes on the same time axis; the
//! percentile curve; the per-episode time account.
//!
//! SVG is written by hand: three plot shapes, no interactivity, and no
//! JavaScript or external assets in the file; a plotting crate would add
//! far more than it saves here.

use std::fmt::Write as _;

use super::Report;
use crate::latency::fmt_ns;

const W: f64 = 960.0;
const LEFT: f64 = 90.0;
const RIGHT: f64 = 20.0;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// x position of time `t_ns` on the shared time axis.
fn x_of(r: &Report, t_ns: u64) -> f64 {
    let s = &r.series;
    let span = (s.bin_ns * s.latency_max_ns.len() as u64).max(1) as f64;
    LEFT + (t_ns.saturating_sub(s.start_ns) as f64 / span) * (W - LEFT - RIGHT)
}

/// Rows of a sub-second heatmap: 50 of 20 ms for the offset within each
/// second, and 50 phase bins for the fold at a period.
const HEAT_ROWS: usize = 50;

/// FlameScope-style sub-second heatmaps of the episodes' spike requests
/// (by each episode's start): one column per second of the run, one row
/// per 20 ms offset within it, so a job every 300 ms draws slanted stripes;
/// beside it, when a family has an estimated period, the same folded at
/// that period (phase on the y axis), where a periodic family is one
/// straight line and its jitter the line's width.
fn heatmaps(r: &Report) -> String {
    let start = r.series.start_ns;
    let seconds = (r.duration_s.ceil() as usize).clamp(1, 600);
    let at = |e: &crate::analysis::Episode| e.window.start_ns.saturating_sub(start);
    let second = heat(
        seconds,
        r.episodes.iter().map(|e| {
            let t = at(e);
            (
                (t / 1_000_000_000) as usize,
                ((t % 1_000_000_000) / 20_000_000) as usize,
                e.window.requests,
            )
        }),
    );
    let mut out = format!(
        "<div style=\"display:flex;gap:20px;flex-wrap:wrap\"><div><p>Spike requests by second (x) and offset within the second (y, 20 ms rows, 0 at the top)</p>{}</div>",
        heat_svg(
            &second,
            seconds,
            "offset in the second: 0 ms (top) to 1000 ms"
        )
    );
    // Only a family the periodicity test called periodic: a fold at the
    // best period of a family that is not would draw noise as a pattern.
    let periodic = r
        .families
        .iter()
        .filter(|f| f.signature == crate::analysis::Signature::Periodic)
        .filter_map(|f| f.periodicity.as_ref().map(|p| (f, p)))
        .find(|(_, p)| p.period_ms > 0.0);
    if periodic.is_none() {
        out.push_str(
            "<div><p>No family is periodic (by its periodicity test): nothing to fold.</p></div>",
        );
    }
    if let Some((f, p)) = periodic {
        let period = (p.period_ms * 1e6).max(1.0) as u64;
        let members: std::collections::HashSet<usize> = f.episodes.iter().copied().collect();
        let folded = heat(
            seconds,
            r.episodes
                .iter()
                .enumerate()
                .filter(|(i, _)| members.contains(i))
                .map(|(_, e)| {
                    let t = at(e);
                    let phase = ((t % period) as f64 / period as f64 * HEAT_ROWS as f64) as usize;
                    ((t / 1_000_000_000) as usize, phase, e.window.requests)
                }),
        );
        let _ = write!(
            out,
            "<div><p>{} folded at its period, {:.1} ms (p = {:.1e}): phase (y) against time (x)</p>{}</div>",
            esc(&f.name()),
            p.period_ms,
            p.p_value,
            heat_svg(&folded, seconds, "phase in the period")
        );
    }
    out.push_str("</div>");
    out
}

/// Counts per (column, row) cell.
fn heat(columns: usize, points: impl Iterator<Item = (usize, usize, u64)>) -> Vec<u64> {
    let mut cells = vec![0u64; columns * HEAT_ROWS];
    for (c, row, n) in points {
        if c < columns {
            cells[c * HEAT_ROWS + row.min(HEAT_ROWS - 1)] += n;
        }
    }
    cells
}

fn heat_svg(cells: &[u64], columns: usize, y_title: &str) -> String {
    let (cw, ch) = ((440.0 / columns as f64).max(1.0), 4.0);
    let (w, h) = (cw * columns as f64 + 40.0, ch * HEAT_ROWS as f64 + 20.0);
    let max = cells.iter().copied().max().unwrap_or(0).max(1) as f64;
    let mut svg = format!(
        r##"<svg viewBox="0 0 {w:.0} {h:.0}" width="{w:.0}" height="{h:.0}" class="plot"><rect x="30" y="0" width="{:.1}" height="{:.1}" fill="#fafafa" stroke="#ccc"><title>{}</title></rect>"##,
        cw * columns as f64,
        ch * HEAT_ROWS as f64,
        esc(y_title)
    );
    for (i, &n) in cells.iter().enumerate().filter(|(_, n)| **n > 0) {
        let (c, row) = (i / HEAT_ROWS, i % HEAT_ROWS);
        // Square-root scale: one request still shows beside hundreds.
        let heat = (n as f64 / max).sqrt();
        let (g, b) = ((230.0 * (1.0 - heat)) as u8, (200.0 * (1.0 - heat)) as u8);
        let _ = write!(
            svg,
            r##"<rect x="{:.1}" y="{:.1}" width="{cw:.1}" height="{ch}" fill="rgb(220,{g},{b})"><title>second {c}, row {row}: {n} spike requests</title></rect>"##,
            30.0 + c as f64 * cw,
            row as f64 * ch
        );
    }
    let _ = write!(
        svg,
        r##"<text x="30" y="{:.0}" font-size="10">0 s</text><text x="{:.0}" y="{:.0}" font-size="10" text-anchor="end">{columns} s</text></svg>"##,
        h - 4.0,
        30.0 + cw * columns as f64,
        h - 4.0
    );
    svg
}

/// Latency over time (log scale) with episodes shaded.
fn latency_plot(r: &Report) -> String {
    let h = 260.0;
    let (top, bottom) = (10.0, h - 30.0);
    let s = &r.series;
    let max = s.latency_max_ns.iter().copied().max().unwrap_or(1).max(1) as f64;
    let min = s
        .latency_max_ns
        .iter()
        .copied()
        .filter(|&v| v > 0)
        .min()
        .unwrap_or(1)
        .max(1) as f64;
    let (lo, hi) = (
        min.log10().floor(),
        max.log10().ceil().max(min.log10().floor() + 1.0),
    );
    let y = |v: f64| bottom - (v.max(1.0).log10() - lo) / (hi - lo) * (bottom - top);
    let mut svg = format!(r#"<svg viewBox="0 0 {W} {h}" width="{W}" height="{h}" class="plot">"#);
    for e in &r.episodes {
        let (x0, x1) = (x_of(r, e.window.start_ns), x_of(r, e.window.end_ns));
        let _ = write!(
            svg,
            r##"<rect x="{x0:.1}" y="{top}" width="{:.1}" height="{:.1}" fill="#f4a3a3" opacity="0.5"><title>episode: peak {}, {} requests</title></rect>"##,
            (x1 - x0).max(1.0),
            bottom - top,
            fmt_ns(e.window.peak_ns),
            e.window.requests
        );
    }
    if let Some(t) = r.latency.threshold_ns {
        let yt = y(t as f64);
        let _ = write!(
            svg,
            r##"<line x1="{LEFT}" x2="{:.1}" y1="{yt:.1}" y2="{yt:.1}" stroke="#c00" stroke-dasharray="4 3"/><text x="{:.1}" y="{:.1}" font-size="11" fill="#c00" text-anchor="end">spike threshold {}</text>"##,
            W - RIGHT,
            W - RIGHT,
            yt - 3.0,
            fmt_ns(t)
        );
    }
    let mut path = String::new();
    for (i, &v) in s.latency_max_ns.iter().enumerate() {
        if v == 0 {
            continue;
        }
        let x = x_of(r, s.start_ns + i as u64 * s.bin_ns);
        let _ = write!(
            path,
            "{}{x:.1},{:.1} ",
            if path.is_empty() { "M" } else { "L" },
            y(v as f64)
        );
    }
    let _ = write!(
        svg,
        r##"<path d="{path}" fill="none" stroke="#1f5fa8" stroke-width="1"/>"##
    );
    let mut d = lo;
    while d <= hi {
        let v = 10f64.powf(d);
        let _ = write!(
            svg,
            r##"<line x1="{LEFT}" x2="{:.1}" y1="{0:.1}" y2="{0:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" font-size="11" text-anchor="end">{}</text>"##,
            W - RIGHT,
            LEFT - 4.0,
            y(v) + 4.0,
            fmt_ns(v as u64)
        );
        d += 1.0;
    }
    let _ = write!(
        svg,
        r#"<text x="{LEFT}" y="{:.1}" font-size="12">slowest request per {} bin (log scale), episodes shaded</text></svg>"#,
        h - 8.0,
        fmt_ns(s.bin_ns)
    );
    svg
}

/// Event-rate lanes on the same time axis.
fn lanes(r: &Report) -> String {
    let lane_h = 42.0;
    let s = &r.series;
    let shown: Vec<&(String, Vec<u64>)> = s
        .events
        .iter()
        .filter(|(_, v)| v.iter().any(|&c| c > 0))
        .collect();
    let h = lane_h * shown.len().max(1) as f64 + 10.0;
    let mut svg = format!(r#"<svg viewBox="0 0 {W} {h}" width="{W}" height="{h}" class="plot">"#);
    let bar_w = ((W - LEFT - RIGHT) / s.latency_max_ns.len().max(1) as f64).max(1.0);
    for (k, (name, values)) in shown.iter().enumerate() {
        let base = 5.0 + (k as f64 + 1.0) * lane_h - 6.0;
        let max = values.iter().copied().max().unwrap_or(1).max(1) as f64;
        for e in &r.episodes {
            let (x0, x1) = (x_of(r, e.window.start_ns), x_of(r, e.window.end_ns));
            let _ = write!(
                svg,
                r##"<rect x="{x0:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="#f4a3a3" opacity="0.35"/>"##,
                base - lane_h + 8.0,
                (x1 - x0).max(1.0),
                lane_h - 8.0
            );
        }
        for (i, &v) in values.iter().enumerate() {
            if v == 0 {
                continue;
            }
            let x = x_of(r, s.start_ns + i as u64 * s.bin_ns);
            let bh = (v as f64 / max) * (lane_h - 12.0);
            let _ = write!(
                svg,
                r##"<rect x="{x:.1}" y="{:.1}" width="{bar_w:.1}" height="{bh:.1}" fill="#555"/>"##,
                base - bh
            );
        }
        let _ = write!(
            svg,
            r##"<line x1="{LEFT}" x2="{:.1}" y1="{base:.1}" y2="{base:.1}" stroke="#999"/><text x="{:.1}" y="{:.1}" font-size="11" text-anchor="end">{}</text><text x="{:.1}" y="{:.1}" font-size="10" fill="#777" text-anchor="end">max {max:.0}/bin</text>"##,
            W - RIGHT,
            LEFT - 4.0,
            base - 12.0,
            esc(name),
            W - RIGHT,
            base - lane_h + 18.0
        );
    }
    svg.push_str("</svg>");
    svg
}

/// Latency by percentile, x = 1 / (1 − q) on a log scale.
fn percentile_plot(r: &Report) -> String {
    let (w, h) = (520.0, 260.0);
    let (left, right, top, bottom) = (70.0, 15.0, 10.0, h - 35.0);
    let pts = &r.series.percentile_curve;
    let mut svg = format!(r#"<svg viewBox="0 0 {w} {h}" width="{w}" height="{h}" class="plot">"#);
    if pts.len() < 2 {
        svg.push_str(r#"<text x="20" y="40">not enough samples for a curve</text></svg>"#);
        return svg;
    }
    let xmax = pts
        .iter()
        .map(|(q, _)| (1.0 / (1.0 - q / 100.0)).log10())
        .fold(1.0, f64::max);
    let vmax = pts.iter().map(|(_, v)| *v).max().unwrap_or(1).max(1) as f64;
    let vmin = pts
        .iter()
        .map(|(_, v)| *v)
        .filter(|&v| v > 0)
        .min()
        .unwrap_or(1)
        .max(1) as f64;
    let (lo, hi) = (
        vmin.log10().floor(),
        vmax.log10().ceil().max(vmin.log10().floor() + 1.0),
    );
    let x = |q: f64| left + (1.0 / (1.0 - q / 100.0)).log10() / xmax * (w - left - right);
    let y = |v: f64| bottom - (v.max(1.0).log10() - lo) / (hi - lo) * (bottom - top);
    let path: String = pts
        .iter()
        .enumerate()
        .map(|(i, (q, v))| {
            format!(
                "{}{:.1},{:.1} ",
                if i == 0 { "M" } else { "L" },
                x(*q),
                y(*v as f64)
            )
        })
        .collect();
    let _ = write!(
        svg,
        r##"<path d="{path}" fill="none" stroke="#1f5fa8" stroke-width="2"/>"##
    );
    for q in [50.0f64, 90.0, 99.0, 99.9, 99.99] {
        if (1.0 / (1.0 - q / 100.0)).log10() <= xmax {
            let _ = write!(
                svg,
                r##"<line x1="{0:.1}" x2="{0:.1}" y1="{top}" y2="{bottom}" stroke="#ddd"/><text x="{0:.1}" y="{1:.1}" font-size="11" text-anchor="middle">p{q}</text>"##,
                x(q),
                bottom + 14.0
            );
        }
    }
    let mut d = lo;
    while d <= hi {
        let _ = write!(
            svg,
            r##"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="end">{}</text>"##,
            left - 4.0,
            y(10f64.powf(d)) + 4.0,
            fmt_ns(10f64.powf(d) as u64)
        );
        d += 1.0;
    }
    let _ = write!(
        svg,
        r#"<text x="{left}" y="{:.1}" font-size="12">latency by percentile (stops where fewer than 10 samples lie above)</text></svg>"#,
        h - 6.0
    );
    svg
}

/// Stacked bars: where each episode's time went.
fn account_plot(r: &Report) -> String {
    let shown: Vec<_> = r.episodes.iter().take(40).collect();
    let bar_h = 14.0;
    let h = 54.0 + bar_h * shown.len() as f64 * 1.3;
    let mut svg = format!(r#"<svg viewBox="0 0 {W} {h}" width="{W}" height="{h}" class="plot">"#);
    let parts: [(&str, &str); 11] = [
        ("user code", "#4c78a8"),
        ("kernel: syscalls", "#72b7b2"),
        ("kernel: faults", "#2a9d8f"),
        ("migration", "#54a24b"),
        ("waiting runnable", "#e8853d"),
        ("blocked", "#8a63d2"),
        ("hard IRQ", "#c33"),
        ("softirq", "#e0b000"),
        ("host steal", "#5b8fd6"),
        ("idle (no work)", "#e6e6e6"),
        ("unexplained", "#bbb"),
    ];
    for (i, (name, color)) in parts.iter().enumerate() {
        let (col, row) = (i % 6, i / 6);
        let _ = write!(
            svg,
            r#"<rect x="{:.1}" y="{:.1}" width="10" height="10" fill="{color}"/><text x="{:.1}" y="{:.1}" font-size="11">{name}</text>"#,
            LEFT + col as f64 * 118.0,
            6.0 + row as f64 * 14.0,
            LEFT + col as f64 * 118.0 + 14.0,
            15.0 + row as f64 * 14.0
        );
    }
    for (k, e) in shown.iter().enumerate() {
        let a = &e.account;
        let d = a.duration_ns.max(1) as f64;
        let values = [
            a.on_cpu_user_ns,
            a.syscall_ns,
            a.fault_ns,
            a.migration_ns,
            a.runnable_ns,
            a.blocked_ns(),
            a.hardirq_ns,
            a.softirq_ns,
            a.steal_ns,
            a.idle_ns,
            a.unexplained_ns,
        ];
        let total: f64 = values.iter().map(|&v| v as f64).sum::<f64>().max(d);
        let y = 42.0 + k as f64 * bar_h * 1.3;
        let mut x = LEFT;
        // Hovering a bar shows the episode's heaviest code path (--stacks).
        let _ = write!(
            svg,
            "<g><title>{}</title>",
            esc(&e.code_path.as_ref().map_or_else(String::new, |p| format!(
                "code path {:.0}%: {}",
                p.share * 100.0,
                super::flame::one_line(p)
            )))
        );
        for (v, (_, color)) in values.iter().zip(parts.iter()) {
            let wv = *v as f64 / total * (W - LEFT - RIGHT);
            if wv > 0.0 {
                let _ = write!(
                    svg,
                    r#"<rect x="{x:.1}" y="{y:.1}" width="{wv:.1}" height="{bar_h}" fill="{color}"/>"#
                );
            }
            x += wv;
        }
        svg.push_str("</g>");
        let _ = write!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="end">#{} {}</text>"#,
            LEFT - 4.0,
            y + bar_h - 3.0,
            k + 1,
            fmt_ns(a.duration_ns)
        );
    }
    svg.push_str("</svg>");
    svg
}

/// Client-side and server-side percentiles side by side (the
/// coordinated-omission cross-check), when the run has both.
fn server_side(r: &Report) -> String {
    let Some(s) = &r.server_side else {
        return String::new();
    };
    let quoted = |v: Option<u64>| v.map_or("not enough samples".into(), fmt_ns);
    let mut rows = String::new();
    for p in &r.latency.summary.percentiles {
        let _ = write!(
            rows,
            "<tr><td>p{}</td><td>{}</td><td>{}</td></tr>",
            p.p,
            quoted(p.value_ns),
            quoted(s.summary.value_at(p.p))
        );
    }
    let warnings: String = s
        .warnings
        .iter()
        .map(|w| format!("<li>{}</li>", esc(w)))
        .collect();
    format!(
        "<h2>Server side ({source})</h2>\
         <p>The server's own time per request (read to response) leaves out the wait in the socket \
         that the client sees: a gap between the columns is queueing.</p>\
         <table><tr><th></th><th>client (from intended send)</th><th>server side</th></tr>{rows}</table>\
         <p>{server} server-side requests in the measured windows vs {client} completed by the client; \
         {seen} of {episodes} episodes also slow server-side ({server_episodes} server-side episodes).</p><ul>{warnings}</ul>",
        source = esc(&s.source),
        server = s.server_requests,
        client = s.client_requests,
        seen = s.client_episodes_seen,
        episodes = r.episodes.len(),
        server_episodes = s.server_episodes,
    )
}

/// The code-path flame graph (runs recorded with `--stacks`), inline:
/// inferno's SVG carries its own search and zoom script.
fn flame_section(r: &Report) -> String {
    let Some(cp) = &r.code_paths else {
        return String::new();
    };
    let Some(svg) = super::flame::svg(cp) else {
        return String::new();
    };
    // Inline SVG in HTML takes no XML prolog or doctype.
    let body = svg.find("<svg").map_or(svg.as_str(), |i| &svg[i..]);
    format!(
        "<h2>Code paths during episodes</h2><p>The accounted thread's on-CPU samples and off-CPU time in episodes, by stack (user frames, then kernel frames marked _[k]; the root frame says what the thread was doing). Click to zoom.</p>{body}"
    )
}

pub fn render(r: &Report) -> String {
    let c = &r.classification;
    let mut causes = String::new();
    for cause in &c.causes {
        let paths: String = cause
            .stacks
            .iter()
            .take(3)
            .map(|p| {
                format!(
                    "<br><small>code path {:.0}%: {}</small>",
                    p.share * 100.0,
                    esc(&super::flame::one_line(p))
                )
            })
            .collect();
        let _ = write!(
            causes,
            "<tr><td><b>{}</b></td><td>{:.0}%</td><td>{}{}</td><td>{}</td></tr>",
            esc(cause.cause.name()),
            cause.score * 100.0,
            esc(&cause.evidence),
            paths,
            esc(&cause.experiment)
        );
    }
    let mut pct = String::new();
    for p in &r.latency.summary.percentiles {
        let _ = write!(
            pct,
            "<tr><td>p{}</td><td>{}</td><td>{}</td></tr>",
            p.p,
            p.value_ns.map_or("not enough samples".into(), fmt_ns),
            p.samples_above
        );
    }
    let _ = write!(
        pct,
        "<tr><td>max</td><td>{}</td><td></td></tr>",
        r.latency.summary.max_ns.map_or("-".into(), fmt_ns)
    );
    let notes: String = r
        .notes
        .iter()
        .map(|n| format!("<li>{}</li>", esc(n)))
        .collect();
    let confirmation = confirmation_section(r);
    let sig = serde_json::to_value(c.signature)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    format!(
        r#"<!doctype html><html><head><meta charset="utf-8"><title>correlator: {comm} ({pid})</title>
<style>body{{font-family:system-ui,sans-serif;max-width:1000px;margin:20px auto;color:#222}}
table{{border-collapse:collapse;margin:8px 0}}td,th{{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}}
.sig{{font-size:20px;font-weight:bold}}.plot{{display:block;margin:6px 0}}</style></head><body>
<h1>Why did the tail spike? PID {pid} ({comm})</h1>
<p>{dur:.1} s, latency from {source}; kernel {kernel}, {cpus} CPUs, THP {thp}</p>
<p class="sig">{sig_up}</p><p>{evidence}</p>
{confirmation}
<h2>Causes, best first</h2><table><tr><th>cause</th><th>share of episode time</th><th>evidence</th><th>confirm with</th></tr>{causes}</table>{unclaimed}
<h2>Latency over time and kernel events</h2>{lat}{lanes}
<h2>Sub-second heatmap</h2>{heat}
<h2>Percentiles</h2><div style="display:flex;gap:20px"><table><tr><th></th><th>value</th><th>samples above</th></tr>{pct}</table>{curve}</div>
<p>{count} requests, {spikes} spikes, {timeouts} timeouts, {errors} errors</p>
{server_side}
<h2>Where each episode's time went</h2>{account}
{flame}
<h2>Overhead and losses</h2><p>probes used {probe_ms:.1} ms of CPU ({probe_share:.2}% of the run{sampled}){slow_path}{dispatch}{statistics}; lost kernel records/events: {lost}</p>
<ul>{notes}</ul></body></html>"#,
        comm = esc(&r.target.comm),
        heat = heatmaps(r),
        confirmation = confirmation,
        pid = r.target.pid,
        dur = r.duration_s,
        source = esc(&r.latency.source),
        kernel = esc(&r.environment.kernel),
        cpus = r.environment.cpus,
        thp = esc(&r.environment.transparent_hugepage),
        sig_up = esc(&sig.to_uppercase()),
        evidence = esc(&c.evidence),
        unclaimed = unclaimed(c),
        lat = latency_plot(r),
        lanes = lanes(r),
        curve = percentile_plot(r),
        server_side = server_side(r),
        count = r.latency.summary.count,
        spikes = r.latency.spikes,
        timeouts = r.latency.timeouts,
        errors = r.latency.errors,
        account = account_plot(r),
        flame = flame_section(r),
        probe_ms = r.overhead.probes_cpu_ms,
        probe_share = r.overhead.probes_cpu_share * 100.0,
        sampled = r
            .overhead
            .sampled_note()
            .map_or(String::new(), |n| format!("; {n}")),
        slow_path = r.overhead.syscall_path.as_ref().map_or(String::new(), |p| format!(
            ", and the syscall hooks' slow path {:.1} ms more ({:.0} ns × {} syscalls on the machine, measured at attach; not in the programs' time)",
            p.cpu_ms, p.ns_per_syscall, p.syscalls
        )),
        dispatch = r.overhead.hook_dispatch.as_ref().map_or(String::new(), |d| if d.ns_per_run > 0.0 {
            format!(
                ", and the hooks' dispatch {:.1} ms more, of every task that hit them ({:.0} ns × {} runs, measured at attach on the socket hooks and taken for every hook; not in the programs' time)",
                d.cpu_ms, d.ns_per_run, d.runs
            )
        } else {
            ", and the hooks' dispatch (not measured above this host's noise at attach)".to_string()
        }),
        statistics = r.overhead.statistics.as_ref().map_or(String::new(), |s| if s.ns_per_run > 0.0 {
            format!(
                ", and the BPF statistics' own cost while on {:.1} ms more, of every task that hit the hooks ({:.0} ns × {} runs they counted, measured at attach on the socket hooks; in neither the programs' time nor the dispatch)",
                s.cpu_ms, s.ns_per_run, s.runs
            )
        } else {
            ", and the BPF statistics' own cost while on (not measured above this host's noise at attach)".to_string()
        }),
        lost = r.events.lost,
    )
}

/// The server categories tested and not claimed, and why.
fn unclaimed(c: &crate::analysis::Classification) -> String {
    let mut out = String::new();
    for (why, list) in [
        (
            "Not enough evidence (not above the baseline windows)",
            &c.not_significant,
        ),
        (
            "Above the baseline beside the causes, not claimed (the largest share of no episode)",
            &c.beside,
        ),
    ] {
        if !list.is_empty() {
            out.push_str(&format!("<p>{why}: {}</p>", esc(&list.join(", "))));
        }
    }
    out
}

/// `run --confirm`: per cause, the outcome with the measured change and
/// the predicted one side by side.
fn confirmation_section(r: &Report) -> String {
    use super::confirmation::Outcome;
    if r.confirmation.is_empty() {
        return String::new();
    }
    let mut rows = String::new();
    for c in &r.confirmation {
        let measured = match (c.change_pct, c.ci_pct) {
            (Some(ch), Some((lo, hi))) => format!("{ch:+.0}% (CI {lo:+.0}..{hi:+.0}%)"),
            _ => "not measured".into(),
        };
        let color = match c.outcome {
            Outcome::Confirmed => "#1a7f37",
            Outcome::Refuted => "#b42318",
            _ => "#666",
        };
        let _ = write!(
            rows,
            r#"<tr><td>{}</td><td style="color:{color};font-weight:bold">{}</td><td>{}</td><td>{measured}</td><td>{}</td></tr>"#,
            esc(&c.planned.name()),
            esc(&format!("{:?}", c.outcome).to_lowercase()),
            esc(&c.planned.prediction()),
            esc(&c.verdict)
        );
    }
    let headline = r
        .confirmation
        .iter()
        .find_map(|c| c.headline())
        .map_or(String::new(), |h| {
            format!(r#"<p class="sig">{}</p>"#, esc(&h))
        });
    format!(
        "{headline}<h2>Confirmed by experiment?</h2><table><tr><th>cause</th><th>outcome</th><th>predicted</th><th>measured</th><th>verdict</th></tr>{rows}</table>"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heat_cells_are_column_by_row_and_rows_clamp() {
        let cells = heat(
            3,
            [(0, 0, 2), (2, 49, 1), (2, 80, 4), (5, 1, 9)].into_iter(),
        );
        assert_eq!(cells.len(), 3 * HEAT_ROWS);
        assert_eq!(cells[0], 2);
        assert_eq!(cells[2 * HEAT_ROWS + 49], 5, "a row past the last joins it");
        assert_eq!(
            cells.iter().sum::<u64>(),
            7,
            "a column past the run is dropped"
        );
    }
}
