//! `correlator summary RUN_FILE`: totals per event family, as text or JSON.

use std::fmt::Write as _;

use serde::Serialize;

use crate::runfile::{EventTotals, RunFile};

/// The JSON shape of `correlator summary --json` (versioned).
#[derive(Serialize)]
pub struct SummaryJson<'a> {
    pub schema: &'static str,
    pub target: &'a crate::target::Target,
    pub duration_s: f64,
    pub stop_reason: crate::runfile::StopReason,
    pub events: &'a EventTotals,
    pub durations: &'a crate::runfile::Durations,
    pub losses: &'a crate::runfile::Losses,
    /// `--syscalls` / `--uprobe`: what the passive source saw.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_latency: Option<ServerSummary<'a>>,
    pub notes: &'a [String],
}

#[derive(Serialize)]
pub struct ServerSummary<'a> {
    pub source: String,
    #[serde(flatten)]
    pub stats: &'a crate::latency::passive::PassiveStats,
    #[serde(flatten)]
    pub latency: crate::latency::Summary,
}

pub fn json(run: &RunFile) -> SummaryJson<'_> {
    SummaryJson {
        schema: "correlator.summary/v1",
        target: &run.target,
        duration_s: run.duration_ns() as f64 / 1e9,
        stop_reason: run.stop_reason,
        events: &run.totals,
        durations: &run.durations,
        losses: &run.losses,
        server_latency: run.server_latency.as_ref().map(|s| ServerSummary {
            source: s.latency.source.clone(),
            stats: &s.stats,
            latency: s.latency.merged().summary(),
        }),
        notes: &run.notes,
    }
}

fn ms(ns: u64) -> String {
    format!("{:.3} ms", ns as f64 / 1e6)
}

/// A terminal summary readable in ten seconds.
pub fn text(run: &RunFile) -> String {
    let t = &run.totals;
    let d = &run.durations;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "PID {} ({}), {:.1} s recorded, stopped by {:?}",
        run.target.pid,
        run.target.comm,
        run.duration_ns() as f64 / 1e9,
        run.stop_reason
    );
    let rows: [(&str, u64, String); 8] = [
        ("page_faults_minor", t.page_faults_minor, String::new()),
        ("page_faults_major", t.page_faults_major, String::new()),
        (
            "context_switches_voluntary",
            t.context_switches_voluntary,
            format!("blocked {}", ms(d.blocked_ns)),
        ),
        (
            "context_switches_involuntary",
            t.context_switches_involuntary,
            format!("runnable-waiting {}", ms(d.runnable_ns)),
        ),
        ("migrations", t.migrations, String::new()),
        (
            "hardirqs",
            t.hardirqs,
            format!("stolen {}", ms(d.hardirq_ns)),
        ),
        (
            "softirqs",
            t.softirqs,
            format!("stolen {}", ms(d.softirq_ns)),
        ),
        ("lost", t.lost, String::new()),
    ];
    for (name, value, extra) in rows {
        let _ = writeln!(out, "  {name:<30} {value:>12}  {extra}");
    }
    if t.lost > 0 {
        let l = &run.losses;
        let _ = writeln!(
            out,
            "  LOSSES: ring full {}, thread map full {}, records over cap {}, undrained bucket events {}",
            l.ring_reserve_failed, l.thread_map_full, l.records_over_cap, l.bucket_events_undrained
        );
    }
    if run.losses.untraced_switches > 0 {
        let _ = writeln!(
            out,
            "  UNTRACED SWITCHES: {} context switches of the target the kernel did not trace (found at the next IRQ or switch); {} switch-ins dated by the scheduler's own stamp, the time before the others unexplained",
            run.losses.untraced_switches, run.losses.unseen_switch_ins_dated
        );
    }
    if let Some(s) = &run.server_latency {
        let d = s.latency.merged();
        let _ = writeln!(
            out,
            "  SERVER LATENCY ({}): {} requests",
            s.latency.source, s.stats.requests
        );
        for p in d.summary().percentiles {
            let v = p
                .value_ns
                .map_or("not enough samples".into(), crate::latency::fmt_ns);
            let _ = writeln!(out, "    p{:<8} {v:>18}   ({} above)", p.p, p.samples_above);
        }
        let _ = writeln!(
            out,
            "    max {:>23}",
            d.max().map_or("-".into(), crate::latency::fmt_ns)
        );
    }
    for note in &run.notes {
        let _ = writeln!(out, "  note: {note}");
    }
    out
}
