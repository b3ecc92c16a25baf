//! `correlator-testkit watch-memcheck`: watch's flight recorder fed by a
//! synthetic stream instead of the probes, on a simulated clock, as fast
//! as it goes: `--rate` requests per simulated second (with the kernel
//! records a busy server produces: a bucket of counts per bucket width, an
//! off-CPU record and a thread account per 10 requests), the SLO window,
//! the once-a-second pruning, an analysis of the last 10 s every 5 s, and
//! a report written every `--report-every` into a directory held to
//! `--max-disk`. Prints the resident memory at 2 simulated minutes and at
//! the end: the recorder must be bounded by its window, not by how long it
//! runs. Synthetic, and said so: the probes' own maps and rings are fixed
//! sizes allocated at attach and not part of this.

use std::{path::PathBuf, time::Duration};

use anyhow::Result;
use correlator_common::{NUM_ACCOUNT, NUM_COUNTERS, RequestRecord, UPROBE_FD};

use crate::{
    latency::passive::PassiveSource,
    memory::rss_bytes,
    probes::KernelTotals,
    report::Report,
    run::{Outputs, write_outputs},
    runfile::RunFile,
    stats::Rng,
    target::Target,
    timeline::{Comm, OffCpu, ThreadAccount, syscalls::Site},
    watch::{
        outdir::{self, ReportDir},
        ring::{FlightRecorder, Window},
        trigger::SloWindow,
    },
};

#[derive(Clone, Debug, clap::Args)]
pub struct WatchBenchArgs {
    /// Requests per simulated second.
    #[arg(long, default_value_t = 20_000)]
    pub rate: u64,
    /// Simulated run length.
    #[arg(long, default_value = "30m", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// A report written every this much simulated time (0: none).
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    pub report_every: Duration,
    #[arg(long)]
    pub out: PathBuf,
    #[arg(long, default_value = "200MiB", value_parser = crate::memory::parse_bytes)]
    pub max_disk: u64,
}

const BUCKET_NS: u64 = 1 << 19;
const S: u64 = 1_000_000_000;

pub fn run(a: &WatchBenchArgs) -> Result<()> {
    // As `watch` does: RSS follows live memory.
    crate::memory::return_freed_memory();
    let me = Target::from_pid(std::process::id())?;
    let t0 = 1_000 * S;
    let mut rec = FlightRecorder::new(60 * S, BUCKET_NS, 2_000_000, 2_000_000, t0);
    let mut slo = SloWindow::new(10);
    let mut dir = ReportDir::open(&a.out, u32::MAX, a.max_disk)?;
    let mut rng = Rng::new(7);
    let mut totals = KernelTotals::default();
    let seconds = a.duration.as_secs();
    let report_every = a.report_every.as_secs();
    let mut rss_2min = None;
    let mut max_dir = 0u64;
    let gap = S / a.rate.max(1);
    for sec in 0..seconds {
        let base = t0 + sec * S;
        for i in 0..a.rate {
            let start = base + i * gap;
            // A 50 µs service time, and one request in 5,000 stalled 10 ms.
            let len = if rng.below(5_000) == 0 {
                10_000_000
            } else {
                50_000 + rng.below(20_000) as u64
            };
            let r = RequestRecord {
                tgid: me.pid,
                tid: me.pid,
                fd: UPROBE_FD,
                reads: 1,
                bytes_in: 64,
                bytes_out: 64,
                start_ns: start,
                end_ns: start + len,
                last_start_ns: start,
            };
            rec.push_request(&r, |ns| slo.record(ns));
            if i % 10 == 0 {
                rec.timeline.push_offcpu(OffCpu {
                    tid: me.pid,
                    tgid: me.pid,
                    preempted: false,
                    cpu_out: 1,
                    cpu_in: 1,
                    start_ns: start + len,
                    end_ns: start + len + gap * 9,
                    runnable_ns: 2_000,
                    blocked_ns: gap * 9 - 2_000,
                    next_pid: 0,
                    next_comm: Comm::default(),
                    syscall: Some(232),
                    site: Site::Idle,
                    kstack: None,
                    ustack: None,
                    waker: None,
                    moved_ns: 0,
                });
                let mut ns = [0u64; NUM_ACCOUNT];
                ns[0] = len;
                rec.timeline.push_account(ThreadAccount {
                    tid: me.pid,
                    epoch: start / BUCKET_NS,
                    top_syscall: None,
                    ns,
                });
            }
        }
        let mut counts = [0u64; NUM_COUNTERS];
        counts[2] = a.rate / 1_000;
        for e in base / BUCKET_NS..(base + S) / BUCKET_NS {
            rec.timeline.add_bucket(e, &counts);
        }
        totals.counters[2] += counts[2] * (S / BUCKET_NS);
        rec.drained_at(base + S + 2 * BUCKET_NS);
        rec.second(base + S, totals.clone());
        slo.roll();
        let _ = slo.percentile(99.9);
        if sec % 5 == 4 {
            // The cause check: the last 10 s analysed.
            let (_, report) = analyse(&rec, &me, Some(10 * S))?;
            std::hint::black_box(report.episodes.len());
        }
        if report_every > 0 && sec % report_every == report_every - 1 {
            let (run, report) = analyse(&rec, &me, None)?;
            let d = dir.create(std::time::Instant::now(), std::time::SystemTime::now())?;
            write_outputs(
                &run,
                &report,
                &Outputs {
                    json: Some(d.join(outdir::REPORT_JSON)),
                    html: Some(d.join(outdir::REPORT_HTML)),
                    run_file: Some(d.join(outdir::RUN_FILE)),
                    ..Outputs::default()
                },
            )?;
            let (_, total) = dir.enforce_disk()?;
            max_dir = max_dir.max(total);
        }
        if sec == 119 {
            rss_2min = rss_bytes();
        }
    }
    let end = rss_bytes();
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    let fmt =
        |b: Option<u64>| b.map_or_else(|| "unknown".to_string(), |b| format!("{:.1} MiB", mib(b)));
    // Runs shorter than two simulated minutes have no 2-minute reading.
    let growth = match (rss_2min, end) {
        (Some(a), Some(b)) if a > 0 => format!("{:+.1}%", (mib(b) / mib(a) - 1.0) * 100.0),
        _ => "no 2-minute reading to compare".to_string(),
    };
    println!(
        "synthetic feed (no probes), {} req/s for {} simulated: RSS {} after 2 min, {} at the end ({growth}); report directory at most {:.1} MiB of --max-disk {:.1} MiB; {} requests kept in the ring at the end",
        a.rate,
        humantime::format_duration(a.duration),
        fmt(rss_2min),
        fmt(end),
        mib(max_dir),
        mib(a.max_disk),
        rec.requests()
    );
    Ok(())
}

fn analyse(rec: &FlightRecorder, me: &Target, span: Option<u64>) -> Result<(RunFile, Report)> {
    let capture = rec.capture(
        Window {
            probes: None,
            target: me,
            follow_children: false,
            passive: Some(PassiveSource::Uprobe {
                binary: "synthetic".into(),
                symbol: "feed".into(),
                every: 1,
            }),
            stacks: false,
            min_offcpu_record_ns: 50_000,
            sample_period_ns: 1_000_000,
            syscall_time: crate::probes::SyscallTime::Sampled,
            programs: Vec::new(),
            notes: vec!["synthetic feed (watch-memcheck)".into()],
        },
        span,
    )?;
    crate::watch::window_report(capture, None, 99.9)
}
