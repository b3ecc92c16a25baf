//! The metrics `correlator watch` exports for the fleet tools users already
//! run: an OpenMetrics endpoint (`--listen`), encoded by the
//! `prometheus-client` crate. Every value is a running total or a current
//! reading that the watch loop updates once a second (or once per
//! request for the latency histogram: one atomic add), never a per-event
//! computation of its own.
//!
//! The endpoint itself is a few lines over `std::net`: one GET at a time,
//! on a thread of its own, head parsed by `httparse`. A scrape every few
//! seconds needs no HTTP framework.

use std::{
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpListener, TcpStream},
    sync::Arc,
    time::Duration,
};

use anyhow::{Context as _, Result};
use prometheus_client::{
    encoding::text::{encode_eof, encode_registry},
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::Registry,
};

use super::latency_histogram::LatencyHistogram;

type Labels = Vec<(String, String)>;

const LATENCY_NAME: &str = "correlator_request_latency_seconds";
const LATENCY_HELP: &str = "Server-side request latency (passive probes); exemplars: a written report's slowest spike in the bucket, labelled with the report's directory name under --out";

/// Handles to every exported metric (cheap clones of shared atomics).
#[derive(Clone)]
pub struct Metrics {
    pub requests: Counter,
    /// Encoded beside the registry (see `latency_histogram` for why).
    pub latency: LatencyHistogram,
    /// The trigger's percentile over its sliding window, seconds.
    pub window_percentile: Gauge<f64, std::sync::atomic::AtomicU64>,
    pub kernel_events: Family<Labels, Counter>,
    pub episodes: Family<Labels, Counter>,
    pub reports: Counter,
    pub reports_suppressed: Family<Labels, Counter>,
    pub reports_removed: Counter,
    /// One series per written report (value: its Unix time), labelled with
    /// its directory and named cause: the pointer from a spike to its report.
    pub report_info: Family<Labels, Gauge>,
    pub lost: Family<Labels, Counter>,
    pub probe_cpu_share: Gauge<f64, std::sync::atomic::AtomicU64>,
    /// The hooks' dispatch beside it (the calibration's cost per hook run
    /// times the runs of that second), in every task that hit them.
    pub probe_dispatch_cpu_share: Gauge<f64, std::sync::atomic::AtomicU64>,
    pub attached: Gauge,
    pub restarts: Counter,
    pub gap_seconds: Gauge<f64, std::sync::atomic::AtomicU64>,
    pub recorder_requests: Gauge,
    pub rss_bytes: Gauge,
}

impl Metrics {
    pub fn new(registry: &mut Registry) -> Self {
        let m = Self {
            requests: Counter::default(),
            latency: LatencyHistogram::default(),
            window_percentile: Gauge::default(),
            kernel_events: Family::default(),
            episodes: Family::default(),
            reports: Counter::default(),
            reports_suppressed: Family::default(),
            reports_removed: Counter::default(),
            report_info: Family::default(),
            lost: Family::default(),
            probe_cpu_share: Gauge::default(),
            probe_dispatch_cpu_share: Gauge::default(),
            attached: Gauge::default(),
            restarts: Counter::default(),
            gap_seconds: Gauge::default(),
            recorder_requests: Gauge::default(),
            rss_bytes: Gauge::default(),
        };
        let r = registry.sub_registry_with_prefix("correlator");
        r.register(
            "requests",
            "Requests of the target seen by the passive latency probes",
            m.requests.clone(),
        );
        r.register(
            "window_percentile_seconds",
            "The trigger percentile of the last --window of requests",
            m.window_percentile.clone(),
        );
        r.register(
            "kernel_events",
            "Kernel events that hit the target, by family",
            m.kernel_events.clone(),
        );
        r.register(
            "episodes",
            "Spike episodes in written reports, by family cause and signature",
            m.episodes.clone(),
        );
        r.register("reports", "Reports written", m.reports.clone());
        // At 0 from the start: a dashboard shows "none", not "no data".
        m.reports_suppressed
            .get_or_create(&label("reason", "hourly_budget"))
            .inc_by(0);
        r.register(
            "reports_suppressed",
            "Triggers not written, by reason (hourly budget)",
            m.reports_suppressed.clone(),
        );
        r.register(
            "reports_removed",
            "Old reports removed to stay within --max-disk",
            m.reports_removed.clone(),
        );
        r.register(
            "report_info",
            "A written report: its directory and cause (value: Unix time written)",
            m.report_info.clone(),
        );
        r.register(
            "lost",
            "Records, samples and requests lost, by kind",
            m.lost.clone(),
        );
        r.register(
            "probe_cpu_share",
            "CPU time of the BPF programs per second of wall time, from the last sampled second",
            m.probe_cpu_share.clone(),
        );
        r.register(
            "probe_dispatch_cpu_share",
            "CPU time of the hooks' dispatch (the tracepoints' calls into the BPF programs, not in their run time) per second of wall time, in every task that hit them: the cost per hook run measured at watch's first attach times the runs of the last sampled second",
            m.probe_dispatch_cpu_share.clone(),
        );
        r.register(
            "attached",
            "1 while the probes are attached to the target",
            m.attached.clone(),
        );
        r.register(
            "target_restarts",
            "Times the target exited and a successor was attached",
            m.restarts.clone(),
        );
        r.register(
            "unwatched_seconds",
            "Seconds without a target attached (restarts)",
            m.gap_seconds.clone(),
        );
        r.register(
            "recorder_requests",
            "Requests held in the flight recorder",
            m.recorder_requests.clone(),
        );
        r.register(
            "resident_memory_bytes",
            "correlator watch's own resident memory",
            m.rss_bytes.clone(),
        );
        m
    }
}

pub fn label(k: &str, v: &str) -> Labels {
    vec![(k.to_string(), v.to_string())]
}

/// Binds `addr` now (so a taken port fails before attaching) and serves
/// `registry` and `latency` on `/metrics` from a thread of its own.
pub fn serve(
    addr: SocketAddr,
    registry: Registry,
    latency: LatencyHistogram,
) -> Result<SocketAddr> {
    let listener =
        TcpListener::bind(addr).with_context(|| format!("cannot listen on {addr} (--listen)"))?;
    let local = listener.local_addr()?;
    let registry = Arc::new(registry);
    std::thread::Builder::new()
        .name("correlator-metrics".into())
        .spawn(move || {
            for stream in listener.incoming().flatten() {
                if let Err(e) = answer(stream, &registry, &latency) {
                    log::debug!("metrics request: {e:#}");
                }
            }
        })
        .context("cannot start the metrics thread")?;
    Ok(local)
}

fn answer(mut stream: TcpStream, registry: &Registry, latency: &LatencyHistogram) -> Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    let path = loop {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut req = httparse::Request::new(&mut headers);
        if let httparse::Status::Complete(_) = req.parse(&buf)? {
            break req.path.unwrap_or("/").to_string();
        }
        if buf.len() > 16 * 1024 {
            anyhow::bail!("request head over 16 KiB");
        }
    };
    let (status, kind, body) = if path == "/metrics" || path.starts_with("/metrics?") {
        let mut text = String::new();
        encode_registry(&mut text, registry)?;
        latency.encode(&mut text, LATENCY_NAME, LATENCY_HELP)?;
        encode_eof(&mut text)?;
        (
            "200 OK",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            text,
        )
    } else {
        (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "correlator watch serves /metrics\n".to_string(),
        )
    };
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    Ok(())
}
