//! `correlator record`: attach to a process, record until the duration
//! ends, Ctrl-C / SIGTERM, or the target exits, and write a run file.
//! Whatever stops the run, what was captured is written.

use std::{
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use anyhow::{Context as _, Result};
use correlator_common::Counter;
use indicatif::{ProgressBar, ProgressStyle};
use tokio::signal::unix::{SignalKind, signal};

use crate::runfile::{Capture, Overhead, RunFile, StopReason, compact, journal};
use crate::{
    clock,
    latency::passive::Passive,
    probes::{ProbeConfig, Probes, stats_windows::StatsWindows},
    target::Target,
    timeline::{Timeline, steal::StealSampler},
};

/// How often the buckets and the ring buffer are drained.
const DRAIN_EVERY: Duration = Duration::from_millis(100);

/// Drains between two reads of the target's thread names (once a second:
/// a read per thread, from /proc).
const NAMES_EVERY: u32 = 10;

#[derive(Clone, Debug)]
pub struct RecordOptions {
    pub pid: u32,
    pub duration: Duration,
    pub out: PathBuf,
    pub probes: ProbeConfig,
    pub progress: bool,
}

/// Fails if `path` cannot be written (its directory missing or read-only):
/// checked before attaching, so a recording is never lost to a typo in
/// the output path at its end. Leaves no file behind.
pub fn check_writable(path: &std::path::Path) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    let probe = dir.join(format!(".correlator-write-test-{}", std::process::id()));
    std::fs::write(&probe, b"").with_context(|| {
        format!(
            "cannot write {} (is {} an existing, writable directory?)",
            path.display(),
            dir.display()
        )
    })?;
    let _ = std::fs::remove_file(probe);
    Ok(())
}

/// Records and writes the run file; returns it.
pub fn record(opts: &RecordOptions) -> Result<RunFile> {
    let target = Target::from_pid(opts.pid)?;
    check_writable(&opts.out)?;
    let bar = opts.progress.then(|| progress_bar(opts.duration));
    let capture = block_on(capture(
        target,
        &opts.probes,
        Session {
            duration: opts.duration,
            done: None,
            bar,
            message: &event_message,
            journal_to: Some(&opts.out),
        },
        || {},
    ))??;
    let run = RunFile::from_capture(capture);
    run.save(&opts.out)?;
    Ok(run)
}

pub fn block_on<F: Future>(f: F) -> Result<F::Output> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    Ok(runtime.block_on(f))
}

/// When and how a capture ends, and what it shows while it runs.
pub struct Session<'a> {
    pub duration: Duration,
    /// Set by someone else (the load generator) when the run is complete.
    pub done: Option<Arc<AtomicBool>>,
    pub bar: Option<ProgressBar>,
    pub message: &'a dyn Fn(&Timeline) -> String,
    /// The run file to write as the capture goes ([`journal`]), so a
    /// recorder killed with SIGKILL leaves its run up to the last second.
    /// The caller replaces it with the complete run at the end.
    pub journal_to: Option<&'a std::path::Path>,
}

/// How often the journal gets a frame: what a kill can lose.
const JOURNAL_EVERY: u32 = 10;

/// Attaches, calls `attached`, then drains every 100 ms until the session
/// ends, the process exits, or SIGINT / SIGTERM; detaches and returns
/// everything captured.
pub async fn capture(
    target: Target,
    cfg: &ProbeConfig,
    session: Session<'_>,
    attached: impl FnOnce(),
) -> Result<Capture> {
    let mut sigint = signal(SignalKind::interrupt()).context("cannot watch SIGINT")?;
    let mut sigterm = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
    let mut probes = Probes::attach(&target, cfg)?;
    let started_ns = clock::monotonic_ns();
    let memory_pressure_from = crate::timeline::memory::PsiReading::of(target.pid, started_ns);
    let mut steal = StealSampler::default();
    steal.sample(started_ns);
    let mut passive = cfg
        .passive
        .clone()
        .map(|source| Passive::new(source, started_ns));
    let mut timeline = Timeline::new(probes.bucket_ns(), cfg.max_records);
    let mut thread_names = std::collections::BTreeMap::new();
    target.thread_names(cfg.follow_children, &mut thread_names);
    let mut journal = match session.journal_to {
        Some(path) if !crate::runfile::is_json_export(path) => {
            timeline.track_touched();
            let start = compact::Start::new(
                target.clone(),
                cfg,
                started_ns,
                timeline.bucket_ns(),
                thread_names.clone(),
            );
            Some(journal::Journal::create(path, start)?)
        }
        _ => None,
    };
    let mut ticks = 0u32;
    // BPF statistics on one second in ten (see `stats_windows`); not when
    // the caller turned them off.
    let mut stats_windows = probes
        .stats_enabled()
        .then(|| StatsWindows::start(started_ns, probes.costs()));
    // Server-side requests since the journal's last frame.
    let mut journal_requests = Vec::new();
    eprintln!(
        "correlator: attached to PID {} ({}); recording for {} (Ctrl-C stops early)",
        target.pid,
        target.comm,
        humantime::format_duration(session.duration)
    );
    attached();
    let deadline = tokio::time::Instant::now() + session.duration;
    let mut tick = tokio::time::interval(DRAIN_EVERY);
    let done = || {
        session
            .done
            .as_ref()
            .is_some_and(|d| d.load(Ordering::Relaxed))
    };
    let stop_reason = loop {
        tokio::select! {
            _ = sigint.recv() => break StopReason::Interrupted,
            _ = sigterm.recv() => break StopReason::Interrupted,
            _ = tokio::time::sleep_until(deadline) => break StopReason::Duration,
            _ = tick.tick() => {
                probes.drain(&mut timeline)?;
                steal.sample(clock::monotonic_ns());
                if let Some(w) = stats_windows.as_mut() {
                    match w.tick(started_ns, clock::monotonic_ns(), || probes.costs()) {
                        Some(false) => {
                            probes.set_stats(false);
                        }
                        Some(true) if !probes.set_stats(true) => w.refused(),
                        _ => {}
                    }
                }
                if let Some(p) = &mut passive {
                    probes.drain_requests(|r| {
                        if p.push(r) && journal.is_some() {
                            journal_requests.push(compact::Request::from(r));
                        }
                    });
                }
                ticks += 1;
                // Threads that exit before the end (a worker per
                // connection, closed when the load stops) keep their names.
                if ticks.is_multiple_of(NAMES_EVERY) {
                    target.thread_names(cfg.follow_children, &mut thread_names);
                }
                if let Some(j) = journal.as_mut().filter(|_| ticks.is_multiple_of(JOURNAL_EVERY)) {
                    j.append(
                        &mut timeline,
                        steal.samples(),
                        &mut journal_requests,
                        clock::monotonic_ns(),
                    )?;
                }
                if !target.is_alive() {
                    break StopReason::TargetExited;
                }
                if done() {
                    break StopReason::Duration;
                }
                if let Some(bar) = &session.bar {
                    bar.set_position(clock::monotonic_ns().saturating_sub(started_ns) / 1_000_000);
                    bar.set_message((session.message)(&timeline));
                }
            }
        }
    };
    // Its queued frames written before anything reads or replaces the file.
    drop(journal);
    let ended_ns = clock::monotonic_ns();
    steal.sample(ended_ns);
    target.thread_names(cfg.follow_children, &mut thread_names);
    if let Some(bar) = session.bar {
        bar.finish_and_clear();
    }
    let stats_enabled = stats_windows.is_some();
    if let Some(w) = stats_windows.as_mut() {
        w.close(ended_ns, probes.costs());
    }
    let syscall_path = probes.syscall_path();
    let hook_dispatch = probes.hook_dispatch();
    let steal_measured = probes.steal_measured();
    let memory_missing = probes.memory_missing().to_vec();
    let runtime_gc_note = probes.runtime_gc_note();
    let upstream_note = probes.upstream_note(started_ns);
    let runtime_gc = probes.runtime_gc_run(0);
    let crate::probes::Finished {
        programs: all_programs,
        kernel,
        stacks,
    } = probes.finish(&mut timeline, |r| {
        if let Some(p) = &mut passive {
            p.push(r);
        }
    })?;
    // With the statistics sampled, the programs' costs are the windows';
    // without statistics, the (zero) cumulative ones say so.
    let (programs, sampled_ns) = match stats_windows {
        Some(w) => {
            let (programs, sampled) = w.finish();
            (programs, Some(sampled))
        }
        None => (all_programs, None),
    };
    // Now, while the process (and its mappings) are still there.
    let stacks = if cfg.stacks {
        crate::symbols::symbolize(target.pid, &stacks)
    } else {
        Default::default()
    };
    let server_latency = passive.map(|p| p.finish(ended_ns, &kernel.passive));
    let mut notes = Vec::new();
    let secs = (ended_ns - started_ns) as f64 / 1e9;
    match stop_reason {
        StopReason::TargetExited => notes.push(format!(
            "the target exited after {secs:.1} s; the run covers its life until then"
        )),
        StopReason::Interrupted => {
            notes.push(format!("recording was interrupted after {secs:.1} s"))
        }
        StopReason::Duration | StopReason::Triggered | StopReason::Unfinished => {}
    }
    if crate::probes::floor_only_requested() {
        notes.push(
            "CORRELATOR_FLOOR_ONLY was set: every program returned at once, nothing was counted (a cost measurement)".into(),
        );
    }
    notes.extend(cfg.syscall_time.note().map(String::from));
    if !stats_enabled {
        notes.push("BPF run-time statistics were unavailable: program costs unknown".into());
    }
    // Only where it matters: a kernel that refuses fentry cannot time
    // memory.high handling, which only a v2 cgroup with memory.high has.
    let high_limited =
        crate::timeline::memory::MemoryCgroup::of(target.pid).is_some_and(|m| m.high.is_some());
    let relevant: Vec<&String> = memory_missing
        .iter()
        .filter(|m| high_limited || !m.contains("over_high"))
        .collect();
    if !relevant.is_empty() {
        notes.push(format!(
            "memory stalls not timed (this kernel refused the programs): {}",
            relevant
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    notes.extend(runtime_gc_note);
    notes.extend(upstream_note);
    if !steal_measured {
        notes.push(
            "this kernel has no run-queue steal clock the probes can read (needs paravirt steal accounting and group scheduling): hypervisor steal was not measured and shows as on-CPU time".into(),
        );
    }
    if let Some(s) = &server_latency {
        notes.extend(s.warnings.iter().map(|w| format!("passive latency: {w}")));
        if s.stats.lost > 0 {
            notes.push(format!(
                "passive latency: {} request records were lost (ring full)",
                s.stats.lost
            ));
        }
    }
    let runtime_gc = runtime_gc.map(|r| crate::probes::RuntimeGcRun {
        collections: kernel.runtime_gcs,
        ..r
    });
    if let Some(r) = &runtime_gc {
        notes.push(r.note());
    }
    Ok(Capture {
        target,
        follow_children: cfg.follow_children,
        started_ns,
        ended_ns,
        stop_reason,
        min_offcpu_record_ns: u64::try_from(cfg.min_offcpu_record.as_nanos()).unwrap_or(u64::MAX),
        timeline,
        kernel,
        overhead: Overhead {
            stats_enabled,
            programs,
            syscall_path,
            hook_dispatch,
            sampled_ns,
        },
        notes,
        server_latency,
        steal: steal.into_samples(),
        sample_period_ns: cfg.sample_period_ns(),
        syscall_time: cfg.syscall_time,
        thread_names,
        stacks,
        runtime_gc,
        memory_pressure_from,
    })
}

pub fn progress_bar(duration: Duration) -> ProgressBar {
    let total_ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
    let bar = ProgressBar::new(total_ms);
    if let Ok(style) = ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {msg}")
    {
        bar.set_style(style);
    }
    bar
}

/// Progress line: kernel events so far.
pub fn event_message(timeline: &Timeline) -> String {
    let sum = timeline.sum();
    let at = |c: Counter| sum[c as usize];
    format!(
        "faults {} switches {} migrations {} irqs {}",
        at(Counter::PageFaultsMinor) + at(Counter::PageFaultsMajor),
        at(Counter::SwitchesVoluntary) + at(Counter::SwitchesInvoluntary),
        at(Counter::Migrations),
        at(Counter::HardIrqs) + at(Counter::SoftIrqs)
    )
}
