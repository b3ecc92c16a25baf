//! What `correlator load` prints: a terminal summary, JSON (schema
//! `correlator.load/v1`) and an HdrHistogram interval log (.hlog).

use std::{fmt::Write as _, io::Write as _, path::Path, time::Duration};

use anyhow::{Context as _, Result};
use hdrhistogram::serialization::{
    Deserializer, V2DeflateSerializer,
    interval_log::{IntervalLogWriterBuilder, Tag},
};
use serde::Serialize;

use super::LoadResult;
use crate::latency::{Summary, fmt_ns, table};

pub const SCHEMA: &str = "correlator.load/v1";

/// The schedule counts as kept when the send slip's p99 stays under this.
pub const SLIP_P99_BOUND_NS: u64 = 1_000_000;

#[derive(Serialize)]
pub struct LoadJson {
    pub schema: &'static str,
    pub target: String,
    pub mode: &'static str,
    pub connections: usize,
    pub timeout_ns: u64,
    /// p50 of two back-to-back CLOCK_MONOTONIC reads.
    pub clock_read_ns: u64,
    /// CPU time the generator used, as a share of one core.
    pub generator_cpu_share: f64,
    /// The pacer ran SCHED_FIFO.
    pub rt_pacer: bool,
    /// Interrupted (Ctrl-C, SIGTERM): the results cover `after_s` of the
    /// `planned_s` asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<Interrupted>,
    pub phases: Vec<PhaseJson>,
}

#[derive(Serialize)]
pub struct Interrupted {
    pub after_s: f64,
    pub planned_s: f64,
}

#[derive(Serialize)]
pub struct PhaseJson {
    pub rate_asked: f64,
    /// Requests sent per second inside the measured window.
    pub rate_achieved: f64,
    pub duration_s: f64,
    pub warmup_s: f64,
    pub sent: u64,
    pub completed: u64,
    pub timeouts: u64,
    pub errors: u64,
    /// From the intended send time (coordinated-omission free).
    pub corrected: Summary,
    /// From the actual send.
    pub service: Summary,
    /// Actual − intended send time: the generator's own lateness.
    pub send_slip: Summary,
    pub schedule_kept: bool,
    pub notes: Vec<String>,
}

pub fn json(r: &LoadResult) -> LoadJson {
    let wall = r.end_ns.saturating_sub(r.start_ns).max(1) as f64;
    let warmup_s = r.opts.warmup.as_secs_f64();
    let phases = r
        .recorder
        .phases
        .iter()
        .zip(&r.opts.rates)
        .zip(&r.phase_windows)
        .map(|((p, &rate), &(start, end))| {
            // Sends over the time they actually took: a late generator
            // stretches the phase and offers less than asked.
            let measured_start = start + (warmup_s * 1e9) as u64;
            let measured_s = (p.last_sent_ns.max(end).saturating_sub(measured_start) as f64 / 1e9).max(1e-9);
            let slip = p.slip.summary();
            let slip_p99 = p.slip.histogram().value_at_quantile(0.99);
            let schedule_kept = r.opts.closed_loop || slip_p99 <= SLIP_P99_BOUND_NS;
            let mut notes = Vec::new();
            if !schedule_kept {
                notes.push(format!(
                    "the generator could not keep the schedule: send slip p99 {} > {}; \
                     the offered rate was lower and burstier than asked",
                    fmt_ns(slip_p99),
                    fmt_ns(SLIP_P99_BOUND_NS)
                ));
            }
            if r.opts.closed_loop {
                notes.push(
                    "closed loop: one request at a time per connection; `service` (from the actual \
                     send) is what most tools report and hides stalls; `corrected` charges the wait \
                     for the connection to each request"
                        .into(),
                );
            }
            if p.timeouts + p.errors > 0 {
                notes.push(format!(
                    "{} timeouts ({:.3}%) and {} errors ({:.3}%); timeouts are in the distribution at ≥ the timeout",
                    p.timeouts,
                    100.0 * p.timeouts as f64 / p.sent.max(1) as f64,
                    p.errors,
                    100.0 * p.errors as f64 / p.sent.max(1) as f64
                ));
            }
            PhaseJson {
                rate_asked: rate,
                rate_achieved: p.sent_measured as f64 / measured_s,
                duration_s: (end - start) as f64 / 1e9,
                warmup_s,
                sent: p.sent,
                completed: p.completed,
                timeouts: p.timeouts,
                errors: p.errors,
                corrected: p.corrected.summary(),
                service: p.service.summary(),
                send_slip: slip,
                schedule_kept,
                notes,
            }
        })
        .collect();
    LoadJson {
        schema: SCHEMA,
        target: r.opts.url.clone(),
        mode: if r.opts.closed_loop {
            "closed-loop"
        } else {
            "open-loop"
        },
        connections: r.opts.connections,
        timeout_ns: u64::try_from(r.opts.timeout.as_nanos()).unwrap_or(u64::MAX),
        clock_read_ns: r.clock_read_ns,
        generator_cpu_share: r.cpu_ns as f64 / wall,
        rt_pacer: r.opts.rt_pacer && !r.rt_refused,
        interrupted: r.interrupted_ns.map(|stop| Interrupted {
            after_s: stop.saturating_sub(r.start_ns) as f64 / 1e9,
            planned_s: r.planned_ns as f64 / 1e9,
        }),
        phases,
    }
}

/// The terminal summary.
pub fn text(j: &LoadJson) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} load on {}: {} connection(s), timeout {}, clock read {}, generator CPU {:.0}% of a core",
        j.mode,
        j.target,
        j.connections,
        fmt_ns(j.timeout_ns),
        fmt_ns(j.clock_read_ns),
        j.generator_cpu_share * 100.0
    );
    if let Some(i) = &j.interrupted {
        let _ = writeln!(
            out,
            "interrupted after {:.1} s of {:.1} s: the results below cover the time before",
            i.after_s, i.planned_s
        );
    }
    for p in &j.phases {
        let _ = writeln!(
            out,
            "\nphase at {:.0} req/s: {:.1} s ({:.1} s warm-up discarded), achieved {:.0} req/s, \
             {} sent, {} completed, {} timeouts, {} errors",
            p.rate_asked,
            p.duration_s,
            p.warmup_s,
            p.rate_achieved,
            p.sent,
            p.completed,
            p.timeouts,
            p.errors
        );
        let (first, first_title, second, second_title) = if j.mode == "closed-loop" {
            (
                &p.service,
                "latency from the actual send (closed loop)",
                &p.corrected,
                "latency from the intended send time",
            )
        } else {
            (
                &p.corrected,
                "latency from the intended send time (CO-corrected)",
                &p.service,
                "service time from the actual send",
            )
        };
        out.push_str(&table(first_title, first));
        out.push_str(&table(second_title, second));
        out.push_str(&table("send slip (actual − intended)", &p.send_slip));
        for n in &p.notes {
            let _ = writeln!(out, "  note: {n}");
        }
    }
    out
}

/// Writes the 1-second interval histograms of the corrected latency as an
/// HdrHistogram interval log (readable by HdrHistogram's log tools).
pub fn write_hlog(r: &mut LoadResult, path: &Path) -> Result<()> {
    let intervals = r.recorder.take_intervals(r.end_ns);
    let file =
        std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let mut w = std::io::BufWriter::new(file);
    let mut serializer = V2DeflateSerializer::new();
    let mut deserializer = Deserializer::new();
    {
        // StartTime and BaseTime: the run's start in wall time; interval
        // timestamps are offsets from it (HdrHistogram's log convention).
        let wall_start = std::time::SystemTime::now()
            - Duration::from_nanos(crate::clock::monotonic_ns().saturating_sub(r.start_ns));
        let mut log = IntervalLogWriterBuilder::new()
            .add_comment("correlator load: latency from the intended send time, ns")
            .add_comment("unit: ns (read with --hlog-unit ns); tag: corrected")
            .with_max_value_divisor(1e6)
            .with_start_time(wall_start)
            .with_base_time(wall_start)
            .begin_log_with(&mut w, &mut serializer)
            .context("writing the .hlog header")?;
        let tag = Tag::new("corrected");
        for i in intervals {
            let hist: hdrhistogram::Histogram<u64> = deserializer
                .deserialize(&mut i.encoded.as_slice())
                .context("re-reading an interval histogram")?;
            let start = Duration::from_nanos(i.start_ns.saturating_sub(r.start_ns));
            log.write_histogram(&hist, start, Duration::from_nanos(i.duration_ns), tag)
                .context("writing an .hlog interval")?;
        }
    }
    w.flush()?;
    Ok(())
}
