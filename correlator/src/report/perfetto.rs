//! Chrome trace-event JSON, which the Perfetto UI opens: slow requests and
//! episodes as slices, off-CPU intervals as slices on their thread, kernel
//! event counts as counters. Timestamps are µs on CLOCK_MONOTONIC.

use serde_json::{Value, json};

use crate::{analysis::kernel::KernelTimeline, latency::capture::LatencyCapture, runfile::RunFile};

use super::Report;

/// Synthetic process ids for the tracks that are not the target's threads.
const REQUESTS_PID: u32 = 1;
const EPISODES_PID: u32 = 2;

fn us(ns: u64) -> f64 {
    ns as f64 / 1e3
}

pub fn render(report: &Report, run: &RunFile, latency: &LatencyCapture) -> Value {
    let mut events: Vec<Value> = Vec::new();
    let meta = |pid: u32, name: &str| json!({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": name}});
    events.push(meta(
        REQUESTS_PID,
        "slow requests (from intended send time)",
    ));
    events.push(meta(EPISODES_PID, "episodes"));
    events.push(meta(
        run.target.pid,
        &format!("{} (target)", run.target.comm),
    ));
    for r in &latency.requests {
        events.push(json!({
            "ph": "X", "name": "request", "cat": "latency",
            "pid": REQUESTS_PID, "tid": r.connection,
            "ts": us(r.intended_ns), "dur": us(r.corrected()),
            "args": {"sent_after_ns": r.sent_ns - r.intended_ns, "phase": r.phase}
        }));
    }
    for (i, e) in report.episodes.iter().enumerate() {
        events.push(json!({
            "ph": "X", "name": format!("episode {}", i + 1), "cat": "episode",
            "pid": EPISODES_PID, "tid": 0,
            "ts": us(e.window.start_ns), "dur": us(e.duration_ns),
            "args": {"peak_ns": e.window.peak_ns, "requests": e.window.requests, "account": e.account}
        }));
    }
    for o in &run.offcpu {
        let name = if o.preempted {
            format!("preempted by {}", o.next_comm)
        } else {
            "blocked".into()
        };
        events.push(json!({
            "ph": "X", "name": name, "cat": "offcpu",
            "pid": o.tgid, "tid": o.tid,
            "ts": us(o.start_ns), "dur": us(o.end_ns - o.start_ns),
            "args": {"runnable_ns": o.runnable_ns, "blocked_ns": o.blocked_ns, "cpu_out": o.cpu_out, "cpu_in": o.cpu_in}
        }));
    }
    let kt = KernelTimeline::new(run);
    for (t, counts) in kt.rows(run.started_ns, run.ended_ns) {
        let args: serde_json::Map<String, Value> = run
            .counter_names
            .iter()
            .zip(counts.iter())
            .filter(|(n, _)| !n.ends_with("_ns"))
            .map(|(n, c)| (n.clone(), json!(c)))
            .collect();
        events.push(json!({
            "ph": "C", "name": "kernel events per bucket", "pid": run.target.pid,
            "ts": us(t), "args": args
        }));
    }
    json!({
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {"schema": "correlator.perfetto/v1", "report_schema": report.schema}
    })
}
