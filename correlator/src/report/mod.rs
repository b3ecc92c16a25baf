//! The report model (schema `correlator.report/v2`, docs/report.md) and its
//! views: terminal, JSON, HTML with SVG plots, and a native Perfetto trace.
//! Every view renders this one model.

pub mod confirmation;
pub mod flame;
pub mod html;
pub mod perfetto;
pub mod pprof;
pub mod terminal;

use serde::{Deserialize, Serialize};

use crate::{
    analysis::{
        self, Analysis, AnalysisOptions, Classification, CodePaths, Episode, LatencyReport,
    },
    latency::capture::LatencyCapture,
    runfile::{Environment, EventTotals, Losses, RunFile},
    target::Target,
};

pub const SCHEMA: &str = "correlator.report/v2";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProgramOverhead {
    pub name: String,
    pub run_count: u64,
    pub ns_per_run: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OverheadReport {
    pub stats_enabled: bool,
    /// Total CPU time the probes took, and as a share of the run's wall time.
    pub probes_cpu_ms: f64,
    pub probes_cpu_share: f64,
    /// Run counts over the whole run; with `stats_sampled_ns`, the sampled
    /// windows' counts scaled to the run's length.
    pub programs: Vec<ProgramOverhead>,
    /// How long the BPF statistics were on (one second in ten): the
    /// programs' costs were measured then and scaled to the run. Absent:
    /// measured over the whole run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats_sampled_ns: Option<u64>,
    /// With the syscall hooks (`--syscall-time exact`): the kernel's slow
    /// syscall path they put every task's syscalls on, which the programs'
    /// own time does not include.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub syscall_path: Option<SyscallPathReport>,
    /// Every other hook's dispatch (the tracepoint's call into its
    /// program), which the programs' own time does not include either.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook_dispatch: Option<HookDispatchReport>,
    /// The BPF statistics' own cost while they were on (the windows that
    /// time the programs): the kernel then times every program run, and
    /// that time is in neither the programs' time nor the dispatch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub statistics: Option<StatisticsCostReport>,
}

/// The syscall hooks' cost beyond their programs' run time over the run:
/// the per-call cost measured when they attached, times the syscalls the
/// machine made meanwhile (`sys_enter`'s run count).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SyscallPathReport {
    pub ns_per_syscall: f64,
    pub syscalls: u64,
    pub cpu_ms: f64,
    /// The calibration it comes from.
    pub measured: crate::probes::calibrate::SyscallPathCost,
}

/// The hooks' dispatch over the run: the cost of one hook run beyond its
/// program's time, measured when the socket transfer hooks attached, times
/// every program's runs but the syscall hooks' (their path is
/// [`SyscallPathReport`]'s). One figure for every hook: measured at the
/// socket ones, taken to hold at the others (the same call into a BPF
/// program from a tracepoint).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HookDispatchReport {
    pub ns_per_run: f64,
    pub runs: u64,
    pub cpu_ms: f64,
    /// The calibration it comes from (per socket round trip: two runs).
    pub measured: crate::probes::calibrate::HookDispatchCost,
}

impl HookDispatchReport {
    fn of(
        measured: Option<crate::probes::calibrate::HookDispatchCost>,
        programs: &[ProgramOverhead],
    ) -> Option<Self> {
        let measured = measured?;
        let runs: u64 = programs
            .iter()
            .filter(|p| !crate::probes::SYSCALL_HOOKS.contains(&p.name.as_str()))
            .map(|p| p.run_count)
            .sum();
        let ns_per_run = measured.extra_ns_per_dispatch();
        Some(Self {
            ns_per_run,
            runs,
            cpu_ms: ns_per_run * runs as f64 / 1e6,
            measured,
        })
    }
}

/// The BPF statistics' own cost over the runs they timed: the cost of
/// timing one hook run, measured when the socket transfer hooks attached
/// (their round trip with the statistics on less with them off), times the
/// runs the statistics counted, which are exactly the runs that paid it.
/// One figure for every program: the kernel's timing wraps each run the
/// same way, whatever the program.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StatisticsCostReport {
    pub ns_per_run: f64,
    /// Program runs while the statistics were on (not scaled to the run).
    pub runs: u64,
    pub cpu_ms: f64,
}

impl StatisticsCostReport {
    /// None when the calibration could not turn the statistics off (their
    /// cost is then inside the dispatch figure); `ns_per_run` 0 when it
    /// found none above its noise.
    fn of(
        measured: Option<crate::probes::calibrate::HookDispatchCost>,
        counted: &[crate::probes::ProgramCost],
    ) -> Option<Self> {
        let ns_per_run = measured?.stats_ns_per_dispatch()?;
        let runs: u64 = counted.iter().map(|p| p.run_count).sum();
        Some(Self {
            ns_per_run,
            runs,
            cpu_ms: ns_per_run * runs as f64 / 1e6,
        })
    }
}

impl OverheadReport {
    /// How the programs' costs were measured, when from sampled windows
    /// of BPF statistics: said beside the figure (terminal and HTML).
    pub fn sampled_note(&self) -> Option<String> {
        self.stats_sampled_ns.map(|s| {
            format!(
                "BPF statistics on for {:.1} s of it, scaled",
                s as f64 / 1e9
            )
        })
    }
}

impl SyscallPathReport {
    fn of(
        measured: Option<crate::probes::calibrate::SyscallPathCost>,
        programs: &[ProgramOverhead],
    ) -> Option<Self> {
        let measured = measured?;
        let syscalls = programs.iter().find(|p| p.name == "sys_enter")?.run_count;
        let ns_per_syscall = measured.extra_ns();
        Some(Self {
            ns_per_syscall,
            syscalls,
            cpu_ms: ns_per_syscall * syscalls as f64 / 1e6,
            measured,
        })
    }
}

/// Plot series, downsampled to a bounded number of bins.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Series {
    /// Bin width in ns; bin i starts at `start_ns + i * bin_ns`.
    pub start_ns: u64,
    pub bin_ns: u64,
    /// Slowest request completed in each bin (0: none).
    pub latency_max_ns: Vec<u64>,
    pub requests: Vec<u64>,
    /// Event counts per bin, by family name.
    pub events: Vec<(String, Vec<u64>)>,
    /// Percentile curve: (percentile, value ns) from p0 to the last quotable one.
    pub percentile_curve: Vec<(f64, u64)>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub schema: String,
    pub correlator_version: String,
    pub target: Target,
    pub duration_s: f64,
    pub environment: Environment,
    pub latency: LatencyReport,
    pub events: EventTotals,
    pub losses: Losses,
    pub episodes: Vec<Episode>,
    pub classification: Classification,
    pub overhead: OverheadReport,
    pub series: Series,
    /// Server-side latency seen passively beside the analysed latency
    /// (`run --syscalls` / `--uprobe`): the coordinated-omission cross-check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_side: Option<ServerSide>,
    /// `--stacks`: folded stacks of episode and baseline time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code_paths: Option<CodePaths>,
    /// The target's upstreams (connections it opened) and their reply
    /// times inside and outside the episodes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upstreams: Vec<crate::analysis::upstreams::UpstreamSummary>,
    /// Threads that queued cross-CPU calls (IPIs) to the CPU a target thread
    /// ran on, over the run, most first (TLB shootdowns counted apart).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ipi_senders: Vec<crate::timeline::ipis::IpiSender>,
    /// Device hard IRQs that took time from the server's threads, by IRQ
    /// number, over the run, most time first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub device_irqs: Vec<crate::timeline::irqs::DeviceIrq>,
    /// The target's memory cgroup, its limits and memory pressure, read at
    /// the end of the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_cgroup: Option<crate::timeline::memory::MemoryCgroup>,
    /// Episode families, by impact on the chosen percentile.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub families: Vec<crate::analysis::families::Family>,
    /// `run --confirm`: each cause's experiment and its outcome, in the
    /// causes' order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub confirmation: Vec<confirmation::Confirmation>,
    pub notes: Vec<String>,
}

/// The server's own view of its requests next to the client's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServerSide {
    pub source: String,
    pub stats: crate::latency::passive::PassiveStats,
    pub warnings: Vec<String>,
    #[serde(flatten)]
    pub summary: crate::latency::Summary,
    /// Requests the client completed in the analysed windows.
    pub client_requests: u64,
    /// Server-side requests in the same windows, as the latency holds them
    /// (a read of k requests' bytes is k latencies; `PassiveStats::requests`
    /// counts the read/write pairs).
    pub server_requests: u64,
    /// `--syscalls`: the same, counting a read of k requests' bytes as k
    /// (requests queued behind a stall or pipelined, answered together).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_requests_estimated: Option<u64>,
    /// Episodes found in the server-side latency alone (same threshold rule).
    pub server_episodes: usize,
    /// Client episodes overlapped by a server-side episode.
    pub client_episodes_seen: usize,
    /// Per client episode (in `episodes` order): whether it was.
    pub episodes_seen: Vec<bool>,
}

impl ServerSide {
    fn build(
        server: &crate::latency::passive::ServerLatency,
        client: &LatencyCapture,
        client_episodes: &[Episode],
    ) -> Self {
        // Compare counts over the client's measured windows (after warm-up).
        let in_windows = |t: u64| {
            client
                .phases
                .iter()
                .any(|p| t >= p.start_ns && t < p.end_ns)
        };
        let lat_bucket_ns = 1u64 << server.latency.bucket_shift;
        let in_window =
            |i: usize| in_windows((server.latency.bucket_origin + i as u64) * lat_bucket_ns);
        let server_requests: u64 = server
            .latency
            .buckets
            .iter()
            .enumerate()
            .filter(|(i, _)| in_window(*i))
            .map(|(_, b)| u64::from(b.count))
            .sum();
        let server_requests_estimated = (!server.estimated_per_bucket.is_empty()).then(|| {
            server
                .estimated_per_bucket
                .iter()
                .enumerate()
                .filter(|(i, _)| in_window(*i))
                .map(|(_, &n)| u64::from(n))
                .sum()
        });
        let merged = server.latency.merged();
        let windows = analysis::episodes::default_threshold(&merged)
            .map(|t| analysis::episodes::episodes(&server.latency.requests, t))
            .unwrap_or_default();
        // One bucket of slack: the two views time the same stall from
        // different ends of the connection.
        let slack = lat_bucket_ns;
        let episodes_seen: Vec<bool> = client_episodes
            .iter()
            .map(|e| {
                windows.iter().any(|w| {
                    w.start_ns <= e.window.end_ns + slack && e.window.start_ns <= w.end_ns + slack
                })
            })
            .collect();
        let seen = episodes_seen.iter().filter(|&&s| s).count();
        let mut warnings = server.warnings.clone();
        if let Some(est) = server_requests_estimated
            && est as f64 > 1.005 * server_requests as f64
            && !warnings.iter().any(|w| w.contains("several requests"))
        {
            warnings.push(format!(
                "in the measured windows {server_requests} request/response pairs, but about {est} requests counting reads of several requests' worth of bytes (queued behind a stall or pipelined, answered together)"
            ));
        }
        Self {
            source: server.latency.source.clone(),
            stats: server.stats.clone(),
            warnings,
            summary: merged.summary(),
            client_requests: client.phases.iter().map(|p| p.completed).sum(),
            server_requests,
            server_requests_estimated,
            server_episodes: windows.len(),
            client_episodes_seen: seen,
            episodes_seen,
        }
    }
}

/// Most plot bins.
const MAX_BINS: u64 = 1_500;

impl Report {
    pub fn build(run: &RunFile, latency: &LatencyCapture, opts: &AnalysisOptions) -> Self {
        let Analysis {
            latency: latency_report,
            episodes,
            classification,
            families,
            code_paths,
        } = analysis::analyze(run, latency, opts);
        // Sampled statistics stand for the whole run, scaled by its length.
        let scale = run
            .overhead
            .sampled_ns
            .filter(|&s| s > 0)
            .map_or(1.0, |s| run.duration_ns() as f64 / s as f64);
        let programs: Vec<ProgramOverhead> = run
            .overhead
            .programs
            .iter()
            .filter(|p| p.run_count > 0)
            .map(|p| ProgramOverhead {
                name: p.name.clone(),
                run_count: (p.run_count as f64 * scale).round() as u64,
                ns_per_run: p.ns_per_run,
            })
            .collect();
        let probes_ns = run
            .overhead
            .programs
            .iter()
            .map(|p| p.run_time_ns)
            .sum::<u64>() as f64
            * scale;
        let mut notes = run.notes.clone();
        if run.totals.lost > 0 {
            notes.push(format!(
                "{} kernel records or events were lost: event counts are incomplete",
                run.totals.lost
            ));
        }
        if latency.requests_over_cap > 0 {
            notes.push(format!(
                "{} slow requests were not kept with exact timestamps (memory cap): episodes may be incomplete",
                latency.requests_over_cap
            ));
        }
        let duration_s = run.duration_ns() as f64 / 1e9;
        if latency_report.late_sends > 0 {
            notes.push(format!(
                "{} slow requests were sent late by the load generator (most of their latency passed \
                 before the send): its own lateness, not counted as server spikes",
                latency_report.late_sends
            ));
        }
        notes.push(format!(
            "the run lasted {duration_s:.1} s: it says nothing about events rarer than that"
        ));
        if let Some(cp) = &code_paths {
            notes.extend(cp.notes.iter().map(|n| format!("code paths: {n}")));
        }
        Self {
            schema: SCHEMA.into(),
            correlator_version: env!("CARGO_PKG_VERSION").into(),
            target: run.target.clone(),
            duration_s,
            environment: run.environment.clone(),
            series: series(run, latency),
            server_side: run
                .server_latency
                .as_ref()
                .filter(|s| s.latency.source != latency.source)
                .map(|s| ServerSide::build(s, latency, &episodes)),
            upstreams: analysis::upstreams::summarize(&run.upstreams, &episodes),
            ipi_senders: run.ipi_senders.clone(),
            device_irqs: run.device_irqs.clone(),
            memory_cgroup: run.memory_cgroup.clone(),
            latency: latency_report,
            events: run.totals.clone(),
            losses: run.losses.clone(),
            episodes,
            classification,
            overhead: OverheadReport {
                stats_enabled: run.overhead.stats_enabled,
                probes_cpu_ms: probes_ns / 1e6,
                probes_cpu_share: probes_ns / run.duration_ns().max(1) as f64,
                syscall_path: SyscallPathReport::of(run.overhead.syscall_path, &programs),
                hook_dispatch: HookDispatchReport::of(run.overhead.hook_dispatch, &programs),
                // Only when the programs' counts are the statistics' own
                // (sampled windows, unscaled): `watch` hands them scaled
                // to its window, and older runs had them on throughout.
                statistics: run.overhead.sampled_ns.and_then(|_| {
                    StatisticsCostReport::of(run.overhead.hook_dispatch, &run.overhead.programs)
                }),
                stats_sampled_ns: run.overhead.sampled_ns,
                programs,
            },
            code_paths,
            families,
            confirmation: Vec::new(),
            notes,
        }
    }
}

fn series(run: &RunFile, latency: &LatencyCapture) -> Series {
    let start = latency.start_ns();
    let end = latency.end_ns().max(start + 1);
    let span = end - start;
    let bin = (span / MAX_BINS).max(run.bucket_ns).max(1);
    let bins = usize::try_from(span.div_ceil(bin)).unwrap_or(0);
    let mut latency_max = vec![0u64; bins];
    let mut requests = vec![0u64; bins];
    let index = |t: u64| -> Option<usize> {
        let i = usize::try_from(t.checked_sub(start)? / bin).ok()?;
        (i < bins).then_some(i)
    };
    let lat_bucket_ns = 1u64 << latency.bucket_shift;
    for (i, b) in latency.buckets.iter().enumerate() {
        let t = (latency.bucket_origin + i as u64) * lat_bucket_ns;
        if let Some(k) = index(t) {
            latency_max[k] = latency_max[k].max(b.max_ns);
            requests[k] += u64::from(b.count);
        }
    }
    let kt = analysis::kernel::KernelTimeline::new(run);
    let families = [
        ("page faults", correlator_common::Counter::PageFaultsMinor),
        ("major faults", correlator_common::Counter::PageFaultsMajor),
        (
            "preemptions",
            correlator_common::Counter::SwitchesInvoluntary,
        ),
        ("migrations", correlator_common::Counter::Migrations),
        ("hard IRQs", correlator_common::Counter::HardIrqs),
        ("softirqs", correlator_common::Counter::SoftIrqs),
    ];
    let mut events: Vec<(String, Vec<u64>)> = families
        .iter()
        .map(|(n, _)| (n.to_string(), vec![0; bins]))
        .collect();
    for (t, counts) in kt.rows(start, end) {
        if let Some(k) = index(t) {
            for ((_, c), (_, lane)) in families.iter().zip(events.iter_mut()) {
                lane[k] += counts[*c as usize];
            }
        }
    }
    let merged = latency.merged();
    let mut percentile_curve = Vec::new();
    let mut q = 0.0f64;
    while q < 99.9999 {
        let p = merged.percentile(q);
        match p.value_ns {
            Some(v) => percentile_curve.push((q, v)),
            None => break,
        }
        // Evenly spaced on a log scale of 1 / (1 - q).
        q = 100.0 - (100.0 - q) / 1.25;
    }
    Series {
        start_ns: start,
        bin_ns: bin,
        latency_max_ns: latency_max,
        requests,
        events,
        percentile_curve,
    }
}

#[cfg(test)]
mod overhead_tests {
    use super::StatisticsCostReport;
    use crate::probes::{ProgramCost, calibrate::HookDispatchCost};

    fn counted() -> Vec<ProgramCost> {
        vec![
            ProgramCost::new("sched_switch".into(), 3_000, 600_000),
            ProgramCost::new("sys_enter".into(), 1_000, 100_000),
        ]
    }

    #[test]
    fn the_statistics_cost_every_run_they_counted() {
        let measured = HookDispatchCost {
            unhooked_ns: 2_000.0,
            hooked_ns: 2_400.0,
            programs_ns: 150.0,
            hooked_no_stats_ns: Some(2_200.0),
        };
        let s = StatisticsCostReport::of(Some(measured), &counted()).expect("measured");
        // (2400 - 2200) ns per round trip of two hook runs, over all 4000
        // runs the statistics counted, syscall hooks included.
        assert_eq!(s.ns_per_run, 100.0);
        assert_eq!(s.runs, 4_000);
        assert!((s.cpu_ms - 0.4).abs() < 1e-12);
    }

    #[test]
    fn without_a_measurement_with_them_off_nothing_is_claimed() {
        let on_only = HookDispatchCost {
            unhooked_ns: 2_000.0,
            hooked_ns: 2_400.0,
            programs_ns: 150.0,
            hooked_no_stats_ns: None,
        };
        assert_eq!(StatisticsCostReport::of(Some(on_only), &counted()), None);
        assert_eq!(StatisticsCostReport::of(None, &counted()), None);
        // Off slower than on: inside the noise, no cost claimed.
        let noise = HookDispatchCost {
            hooked_no_stats_ns: Some(2_450.0),
            ..on_only
        };
        let s = StatisticsCostReport::of(Some(noise), &counted()).expect("measured");
        assert_eq!((s.ns_per_run, s.cpu_ms), (0.0, 0.0));
    }
}
