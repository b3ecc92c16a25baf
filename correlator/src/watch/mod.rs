//! `correlator watch`: stays attached to a server, keeps the last
//! `--keep` of kernel timeline and server-side latency in a flight
//! recorder, and when the tail spikes writes the window as a run file and
//! a report (JSON, HTML, optionally Perfetto) into `--out`.
//!
//! Two triggers: the chosen percentile of the last `--window` of requests
//! above `--slo`; and, every `--check-every`, the analysis of the
//! recorder's window naming a server cause (a family whose signature test
//! passed against the window's own noise, as `correlator run` claims
//! causes). A trigger waits `--after` so the report holds the spike's
//! aftermath too, then cuts the window `[now - keep, now]`.
//!
//! Always-on cost: the probes are the same as `record`'s; BPF run-time
//! statistics are on one second in sixty (they put two clock reads in
//! every program run); the loop's own work is per 100 ms drain, per second
//! (totals, pruning, the SLO window) and per check (one analysis).

mod latency_histogram;
pub mod metrics;
pub mod outdir;
pub mod ring;
pub mod trigger;

use std::{
    net::SocketAddr,
    path::PathBuf,
    time::{Duration, Instant, SystemTime},
};

use anyhow::{Context as _, Result};
use tokio::signal::unix::{SignalKind, signal};

use crate::{
    analysis::{AnalysisOptions, causes::SERVER_CAUSES},
    clock,
    probes::{KernelTotals, ProbeConfig, Probes, ProgramCost},
    report::Report,
    run::{Outputs, write_outputs},
    runfile::RunFile,
    target::{Target, TargetSpec},
};
use metrics::{Metrics, label};
use outdir::ReportDir;
use ring::{FlightRecorder, Window};
use trigger::{SloWindow, Trigger};

pub struct WatchOptions {
    pub target: TargetSpec,
    pub probes: ProbeConfig,
    pub keep: Duration,
    pub after: Duration,
    pub window: Duration,
    pub slo: Option<Duration>,
    pub percentile: f64,
    pub check_every: Duration,
    /// Run watch under SCHED_IDLE (see `--scheduling`).
    pub idle_priority: bool,
    pub out: PathBuf,
    pub max_reports_per_hour: u32,
    pub max_disk: u64,
    pub listen: Option<SocketAddr>,
    pub max_requests: usize,
    pub perfetto: bool,
    /// Stop after this long (tests, benchmarks); None: until SIGTERM.
    pub duration: Option<Duration>,
}

/// What a watch session did, for its last line and for tests.
#[derive(Debug, Default)]
pub struct WatchSummary {
    pub reports: Vec<PathBuf>,
    pub suppressed: u64,
    pub restarts: u64,
}

/// BPF statistics are sampled for one second every this many.
const STATS_EVERY_SECS: u64 = 60;
const DRAIN_EVERY: Duration = Duration::from_millis(100);

/// Validates everything it can, then watches until SIGINT / SIGTERM, the
/// duration, or (for a PID) the target's exit.
pub fn watch(opts: WatchOptions) -> Result<WatchSummary> {
    // Days attached: resident memory must follow the live window, not the
    // peak of the biggest report written so far.
    crate::memory::return_freed_memory();
    if opts.idle_priority {
        // Before any thread starts (the metrics server, the runtime's
        // workers): they inherit the policy.
        set_idle_priority()?;
    }
    if opts.probes.passive.is_none() {
        anyhow::bail!("watch needs server-side latency: give --syscalls or --uprobe BINARY:SYMBOL");
    }
    if opts.after >= opts.keep {
        anyhow::bail!(
            "--after ({}) must be shorter than --keep ({}): the report's window must reach back before the spike",
            humantime::format_duration(opts.after),
            humantime::format_duration(opts.keep)
        );
    }
    let target = opts.target.find()?.ok_or_else(|| {
        anyhow::anyhow!(
            "no process matches {} (is the server running?)",
            opts.target.describe()
        )
    })?;
    let dir = ReportDir::open(&opts.out, opts.max_reports_per_hour, opts.max_disk)?;
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = Metrics::new(&mut registry);
    if let Some(addr) = opts.listen {
        let local = metrics::serve(addr, registry, metrics.latency.clone())?;
        eprintln!("correlator watch: metrics on http://{local}/metrics");
    }
    crate::record::block_on(Watcher::new(opts, dir, metrics, target)?.run())?
}

/// Moves this thread (and the threads it starts) to SCHED_IDLE: a server
/// thread that wakes preempts watch at once, whatever watch is doing.
fn set_idle_priority() -> Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) } != 0 {
        anyhow::bail!(
            "cannot run watch under SCHED_IDLE ({}); --scheduling normal keeps the normal policy",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

/// Something is attached (or waiting for a successor).
struct Attached {
    target: Target,
    probes: Probes,
    rec: FlightRecorder,
    /// Totals at the last second, for the metrics' deltas.
    last_totals: KernelTotals,
    /// Set while a second of BPF statistics runs: costs at its start.
    stats_from: Option<(u64, Vec<ProgramCost>)>,
    /// Costs over the last sampled second and its length (ns).
    sampled_costs: Option<(Vec<ProgramCost>, u64)>,
    /// Said in every report whose window reaches back to the re-attach.
    restart_note: Option<String>,
}

struct Pending {
    fire_at: u64,
    trigger: Trigger,
}

struct Watcher {
    opts: WatchOptions,
    dir: ReportDir,
    metrics: Metrics,
    attached: Option<Attached>,
    /// When the target went away (a successor is searched for).
    lost_at: Option<(u64, u32)>,
    slo: SloWindow,
    pending: Option<Pending>,
    /// No new trigger before this: one `--keep` after the last report,
    /// less `--after`, so the next report (written `--after` its trigger)
    /// covers only time after the last one's window, and a cause that
    /// persists is reported once per `--keep`.
    quiet_until: u64,
    summary: WatchSummary,
}

impl Watcher {
    fn new(opts: WatchOptions, dir: ReportDir, metrics: Metrics, target: Target) -> Result<Self> {
        let slo = SloWindow::new(usize::try_from(opts.window.as_secs()).unwrap_or(10));
        let mut w = Self {
            opts,
            dir,
            metrics,
            attached: None,
            lost_at: None,
            slo,
            pending: None,
            quiet_until: 0,
            summary: WatchSummary::default(),
        };
        w.attach(target, None)?;
        Ok(w)
    }

    fn attach(&mut self, target: Target, note: Option<String>) -> Result<()> {
        let cfg = ProbeConfig {
            bpf_stats: false,
            ..self.opts.probes.clone()
        };
        let probes = Probes::attach(&target, &cfg)?;
        let now = clock::monotonic_ns();
        let keep = u64::try_from(self.opts.keep.as_nanos()).unwrap_or(u64::MAX);
        let mut rec = FlightRecorder::new(
            keep,
            probes.bucket_ns(),
            cfg.max_records,
            self.opts.max_requests,
            now,
        );
        let totals = probes.read_totals()?;
        rec.second(clock::monotonic_ns(), totals.clone());
        eprintln!(
            "correlator watch: attached to PID {} ({}); keeping the last {}, reports into {}",
            target.pid,
            target.comm,
            humantime::format_duration(self.opts.keep),
            self.opts.out.display()
        );
        self.metrics.attached.set(1);
        self.attached = Some(Attached {
            target,
            probes,
            rec,
            last_totals: totals,
            stats_from: None,
            sampled_costs: None,
            restart_note: note,
        });
        Ok(())
    }

    async fn run(mut self) -> Result<WatchSummary> {
        let mut sigint = signal(SignalKind::interrupt()).context("cannot watch SIGINT")?;
        let mut sigterm = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
        let deadline = self.opts.duration.map(|d| tokio::time::Instant::now() + d);
        let mut tick = tokio::time::interval(DRAIN_EVERY);
        let start = clock::monotonic_ns();
        let mut next_second = start + 1_000_000_000;
        let mut seconds: u64 = 0;
        let check_ns = u64::try_from(self.opts.check_every.as_nanos()).unwrap_or(u64::MAX);
        let mut next_check = start + check_ns;
        loop {
            let until_deadline = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = sigint.recv() => break,
                _ = sigterm.recv() => break,
                () = until_deadline => break,
                _ = tick.tick() => {
                    let now = clock::monotonic_ns();
                    if self.attached.is_none() {
                        // Between a restart's exit and its successor: look
                        // every tick, so the gap is the successor's start.
                        self.find_successor(now)?;
                    }
                    self.drain()?;
                    // The target's exit, seen within a tick (one read of
                    // /proc/PID/stat): a restarted server's successor is
                    // looked for from then, not from the next second.
                    if self.attached.as_ref().is_some_and(|a| !a.target.is_alive())
                        && !self.target_exited(now)?
                    {
                        break;
                    }
                    if now >= next_second {
                        next_second += 1_000_000_000;
                        seconds += 1;
                        self.second(now, seconds)?;
                    }
                    if now >= next_check {
                        next_check = now + check_ns;
                        self.check(now)?;
                    }
                    if self.pending.as_ref().is_some_and(|p| now >= p.fire_at) {
                        self.fire(now)?;
                    }
                }
            }
        }
        // Stopping: a pending trigger still gets its report (the window so far).
        if self.pending.is_some() && self.attached.is_some() {
            self.drain()?;
            self.fire(clock::monotonic_ns())?;
        }
        self.metrics.attached.set(0);
        Ok(self.summary)
    }

    /// Drains the probes into the recorder, and requests into the
    /// metrics and the SLO window.
    fn drain(&mut self) -> Result<()> {
        let Some(a) = &mut self.attached else {
            return Ok(());
        };
        let at = clock::monotonic_ns();
        a.probes.drain(&mut a.rec.timeline)?;
        a.rec.drained_at(at);
        let (rec, slo, m) = (&mut a.rec, &mut self.slo, &self.metrics);
        a.probes.drain_requests(|r| {
            rec.push_request(r, |ns| {
                slo.record(ns);
                m.requests.inc();
                m.latency.observe(ns);
            });
        });
        Ok(())
    }

    /// Once a second (the target's exit is seen at every tick).
    fn second(&mut self, now: u64, n: u64) -> Result<()> {
        self.slo.roll();
        if let Some(rss) = crate::memory::rss_bytes() {
            self.metrics
                .rss_bytes
                .set(i64::try_from(rss).unwrap_or(i64::MAX));
        }
        match &mut self.attached {
            Some(a) => {
                let totals = a.probes.read_totals()?;
                // Stamped after the read: every event it counts happened
                // before the stamp (see FlightRecorder::capture).
                let read_at = clock::monotonic_ns();
                export_totals(&self.metrics, &a.last_totals, &totals);
                a.last_totals = totals.clone();
                a.rec.second(read_at, totals);
                self.metrics
                    .recorder_requests
                    .set(i64::try_from(a.rec.requests()).unwrap_or(i64::MAX));
                sample_stats(a, now, n, &self.metrics);
            }
            None => return Ok(()),
        }
        let Some((value, _)) = self.slo.percentile(self.opts.percentile) else {
            return Ok(());
        };
        self.metrics.window_percentile.set(value as f64 / 1e9);
        if let Some(slo_ns) = self.slo_ns()
            && self.pending.is_none()
            && value > slo_ns
            && now >= self.quiet_until
        {
            self.arm(
                now,
                Trigger::Slo {
                    percentile: self.opts.percentile,
                    value_ns: value,
                    slo_ns,
                },
            );
        }
        Ok(())
    }

    fn arm(&mut self, now: u64, trigger: Trigger) {
        let after = u64::try_from(self.opts.after.as_nanos()).unwrap_or(0);
        eprintln!(
            "correlator watch: {trigger}; writing the report in {}",
            humantime::format_duration(self.opts.after)
        );
        self.pending = Some(Pending {
            fire_at: now + after,
            trigger,
        });
    }

    /// The analysis trigger: the recorder's window analysed as a report
    /// would be; a named server cause arms the report.
    fn check(&mut self, now: u64) -> Result<()> {
        if self.pending.is_some() || now < self.quiet_until {
            return Ok(());
        }
        let Some(a) = &self.attached else {
            return Ok(());
        };
        let window = u64::try_from(self.opts.window.as_nanos()).unwrap_or(u64::MAX);
        if now.saturating_sub(a.rec.since_ns) < window {
            return Ok(());
        }
        let took = Instant::now();
        let (run, report) = self.analyse(Some(window), self.slo_ns())?;
        drop(run);
        log::info!(
            "check: {} episodes, top cause {:?}, analysed in {:.0} ms",
            report.episodes.len(),
            report
                .classification
                .causes
                .first()
                .map(|c| (c.cause.name(), c.evidence.as_str())),
            took.elapsed().as_secs_f64() * 1e3
        );
        // Two tests per cause (KS on shares, Fisher on dominance, over
        // all episodes), either of which claims it: the level is corrected
        // over both. The report's third test, in the tail's episodes, does
        // not arm one (`Cause::p_episodes`).
        let alpha = trigger::cause_alpha(self.opts.keep, 2 * SERVER_CAUSES.len());
        // Queueing's evidence is its family's trend test (no p here). And
        // the cause must be what some episodes' time mostly went to (it
        // heads a server family): a clean minute here armed a report on
        // hard IRQs with 0% of episode time (0.2 ms in 12 episodes), whose
        // slight but steady presence in episodes passed the test. That
        // family must surely hold part of the tail (a sign test on its
        // requests at or above the percentile, `Family::held`): ten clean
        // minutes of a server at 2,000 req/s armed a report on NET_RX
        // softirq (KS p = 3.5e-10, the receive work of the server's own
        // replies, heavier after any stall) whose family was 1 episode of
        // 5 holding 1 of the window's 120 requests above p99.9; the report
        // written then led with the environment.
        let heads_family = |c: &crate::analysis::causes::Cause| {
            report
                .families
                .iter()
                .any(|f| !f.environment && f.cause == c.cause.tested_as() && f.held > 0.0)
        };
        let strong = |c: &&crate::analysis::causes::Cause| {
            c.p_episodes.or(c.p_value).is_none_or(|p| p < alpha) && heads_family(c)
        };
        // A neighbour's preemption is the server's cause, but not when the
        // neighbour is watch itself: that is the observer's own cost (in
        // the report's overhead), and a report on it is a false alarm.
        // SCHED_IDLE does not make it zero here: with bpftrace on the
        // server's wake-to-run delay (PREEMPT_NONE, HZ=250), a server woken
        // while watch compressed a chunk (user mode) or loaded a program
        // (the verifier) waited for the next tick, 0.5-4 ms, and a clean
        // minute of this test in CI armed a report naming watch.
        let me = std::process::id();
        let by_watch = |c: &&crate::analysis::causes::Cause| {
            c.cause == crate::analysis::cause_kind::CauseKind::Preemption
                && crate::confirm::pid_in(&c.evidence) == Some(me)
        };
        let server = report
            .classification
            .causes
            .iter()
            .filter(|c| c.cause.is_server())
            .filter(|c| !by_watch(c));
        // When the environment's causes lead (its family holds more of the
        // tail than any server family, and none would lead without it), a
        // server cause is not why the tail moved: the clean minutes of
        // `watch_live::watch_reports_a_sporadic_cause_and_prometheus_scrapes_it`
        // in two noisy CI runs armed reports on softirq (KS p = 1.2e-8) whose report
        // then led with steal.
        let environment_leads = report
            .classification
            .causes
            .first()
            .is_some_and(|c| !c.cause.is_server());
        match server.clone().find(strong).filter(|_| !environment_leads) {
            Some(c) => self.arm(
                now,
                Trigger::Cause {
                    cause: c.cause.name().to_string(),
                    evidence: c.evidence.clone(),
                    threshold_ns: report.latency.threshold_ns,
                },
            ),
            None => {
                if let Some(c) = server.clone().next() {
                    log::info!(
                        "check: {} (p = {:.1e}) not enough for a report (needs p < {alpha:.1e}, see cause_alpha, to head a server family that surely holds part of the tail, and the environment not to lead the tail)",
                        c.cause.name(),
                        c.p_episodes.or(c.p_value).unwrap_or(1.0)
                    );
                }
            }
        }
        Ok(())
    }

    fn slo_ns(&self) -> Option<u64> {
        self.opts
            .slo
            .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }

    /// The recorder's window (all of it, or the last `span_ns`) as a run
    /// file and its report, spikes being the requests over `slo_ns` when
    /// given (else the analysis's own threshold).
    fn analyse(&self, span_ns: Option<u64>, slo_ns: Option<u64>) -> Result<(RunFile, Report)> {
        let a = self
            .attached
            .as_ref()
            .context("nothing attached to analyse")?;
        let now = clock::monotonic_ns();
        let window_ns = now.saturating_sub(a.rec.since_ns);
        let mut notes: Vec<String> = self
            .opts
            .probes
            .syscall_time
            .note()
            .into_iter()
            .map(String::from)
            .collect();
        notes.extend(a.probes.upstream_note(a.rec.since_ns));
        if let Some(n) = &a.restart_note
            && window_ns <= u64::try_from(self.opts.keep.as_nanos()).unwrap_or(u64::MAX)
        {
            notes.push(n.clone());
        }
        let programs = match &a.sampled_costs {
            Some((costs, sampled_ns)) => {
                notes.push(format!(
                    "probe costs were measured over one sampled second ({:.2} s; BPF statistics are on one second in {STATS_EVERY_SECS}) and scaled to the window",
                    *sampled_ns as f64 / 1e9
                ));
                scale_costs(
                    costs,
                    *sampled_ns,
                    window_ns.min(u64::try_from(self.opts.keep.as_nanos()).unwrap_or(u64::MAX)),
                )
            }
            None => Vec::new(),
        };
        let capture = a.rec.capture(
            Window {
                probes: Some(&a.probes),
                target: &a.target,
                follow_children: self.opts.probes.follow_children,
                passive: self.opts.probes.passive.clone(),
                stacks: self.opts.probes.stacks,
                min_offcpu_record_ns: u64::try_from(self.opts.probes.min_offcpu_record.as_nanos())
                    .unwrap_or(u64::MAX),
                sample_period_ns: self.opts.probes.sample_period_ns(),
                syscall_time: self.opts.probes.syscall_time,
                programs,
                notes,
            },
            span_ns,
        )?;
        window_report(capture, slo_ns, self.opts.percentile)
    }

    /// Writes the pending trigger's report (if the hourly budget allows).
    fn fire(&mut self, now: u64) -> Result<()> {
        let Some(p) = self.pending.take() else {
            return Ok(());
        };
        let keep = u64::try_from(self.opts.keep.as_nanos()).unwrap_or(u64::MAX);
        let after = u64::try_from(self.opts.after.as_nanos()).unwrap_or(0);
        self.quiet_until = now.saturating_add(keep.saturating_sub(after));
        if !self.dir.allowed(Instant::now()) {
            self.summary.suppressed += 1;
            self.metrics
                .reports_suppressed
                .get_or_create(&label("reason", "hourly_budget"))
                .inc();
            eprintln!(
                "correlator watch: {} reports already written this hour (--max-reports-per-hour): this one is not written",
                self.opts.max_reports_per_hour
            );
            return Ok(());
        }
        // The report's spikes are the trigger's: over the SLO, or over the
        // threshold the analysis of the last window used. A cause that
        // started late in the kept window is a small share of its
        // requests; judged by the window's own threshold and share it
        // could be "too few to classify" in the report that was written
        // because of it.
        let slo_ns = match &p.trigger {
            Trigger::Cause { threshold_ns, .. } => self.slo_ns().or(*threshold_ns),
            _ => self.slo_ns(),
        };
        let (run, mut report) = self.analyse(None, slo_ns)?;
        report
            .notes
            .insert(0, format!("written by correlator watch: {}", p.trigger));
        if let (Trigger::Cause { .. }, None, Some(t)) = (&p.trigger, self.opts.slo, slo_ns) {
            report.notes.insert(
                1,
                format!(
                    "spikes are requests over {:.2} ms, the threshold of the analysis that triggered this report",
                    t as f64 / 1e6
                ),
            );
        }
        let wall = SystemTime::now();
        let dir = self.dir.create(Instant::now(), wall)?;
        let out = Outputs {
            json: Some(dir.join(outdir::REPORT_JSON)),
            html: Some(dir.join(outdir::REPORT_HTML)),
            perfetto: self.opts.perfetto.then(|| dir.join(outdir::TRACE)),
            folded: None,
            pprof: None,
            run_file: Some(dir.join(outdir::RUN_FILE)),
        };
        write_outputs(&run, &report, &out)?;
        let cause = report
            .classification
            .causes
            .first()
            .map_or("none", |c| c.cause.name());
        self.metrics.reports.inc();
        mark_exemplars(&self.metrics, &dir, &run, &report);
        let unix = wall
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        self.metrics
            .report_info
            .get_or_create(&vec![
                ("dir".to_string(), dir.display().to_string()),
                ("cause".to_string(), cause.to_string()),
            ])
            .set(unix);
        for f in &report.families {
            let sig = serde_json::to_value(f.signature)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            self.metrics
                .episodes
                .get_or_create(&vec![
                    ("cause".to_string(), f.cause.name().to_string()),
                    ("signature".to_string(), sig),
                    ("environment".to_string(), f.environment.to_string()),
                ])
                .inc_by(f.episodes.len() as u64);
        }
        eprintln!(
            "correlator watch: report {} (top cause: {cause}; {} episodes)",
            dir.display(),
            report.episodes.len()
        );
        self.summary.reports.push(dir);
        let (removed, total) = self.dir.enforce_disk()?;
        for r in &removed {
            self.metrics.reports_removed.inc();
            eprintln!(
                "correlator watch: removed the oldest report {} ({} KiB) to stay within --max-disk",
                r.dir.display(),
                r.bytes / 1024
            );
        }
        if total > self.opts.max_disk {
            eprintln!(
                "correlator watch: the newest report alone is {} KiB, over --max-disk; it is kept",
                total / 1024
            );
        }
        Ok(())
    }

    /// The target exited: a pending report is written from what was
    /// captured; then either a successor is searched for or watch ends.
    fn target_exited(&mut self, now: u64) -> Result<bool> {
        if self.pending.is_some() {
            self.drain()?;
            self.fire(now)?;
        }
        let Some(a) = self.attached.take() else {
            return Ok(true);
        };
        self.metrics.attached.set(0);
        let pid = a.target.pid;
        drop(a);
        if !self.opts.target.follows_restarts() {
            eprintln!("correlator watch: PID {pid} exited; stopping");
            return Ok(false);
        }
        eprintln!(
            "correlator watch: PID {pid} exited; waiting for the next process of {}",
            self.opts.target.describe()
        );
        self.lost_at = Some((now, pid));
        Ok(true)
    }

    /// Looks for the target's successor (every drain tick while detached).
    fn find_successor(&mut self, now: u64) -> Result<bool> {
        let Some(target) = self.opts.target.find()? else {
            return Ok(true);
        };
        let (lost, old) = self.lost_at.take().unwrap_or((now, 0));
        let pid = target.pid;
        self.attach(target, None)?;
        // Unwatched until the probes are on, not until the successor was
        // found: attaching (loading and verifying the programs) takes a
        // good part of a second on this host.
        let gap = clock::monotonic_ns().saturating_sub(lost);
        let note = format!(
            "the target restarted: PID {old} exited, PID {pid} was found {:.0} ms later and attached {:.0} ms later; this window begins at the re-attach",
            now.saturating_sub(lost) as f64 / 1e6,
            gap as f64 / 1e6
        );
        eprintln!("correlator watch: {note}");
        self.metrics.restarts.inc();
        self.metrics.gap_seconds.inc_by(gap as f64 / 1e9);
        self.summary.restarts += 1;
        if let Some(a) = &mut self.attached {
            a.restart_note = Some(note);
        }
        Ok(true)
    }
}

/// A captured window as a run file and its report, analysed on its
/// server-side latency.
pub fn window_report(
    capture: crate::runfile::Capture,
    slo_ns: Option<u64>,
    percentile: f64,
) -> Result<(RunFile, Report)> {
    let run = RunFile::from_capture(capture);
    let latency = run
        .server_latency
        .as_ref()
        .map(|s| s.latency.clone())
        .context("the window has no server-side latency")?;
    let report = Report::build(
        &run,
        &latency,
        &AnalysisOptions {
            slo_ns,
            percentile: Some(percentile),
        },
    );
    Ok((run, report))
}

/// Each latency bucket that holds an episode's slowest request points at
/// the report just written (its directory name), stamped with the
/// episode's end on the wall clock (by the clocks the capture read at one
/// instant).
fn mark_exemplars(m: &Metrics, dir: &std::path::Path, run: &RunFile, report: &Report) {
    let Some(name) = dir.file_name().and_then(|n| n.to_str()) else {
        return;
    };
    let clocks = run.clocks.unwrap_or_else(clock::ClockSnapshot::now);
    m.latency.mark(
        name,
        report
            .episodes
            .iter()
            .map(|e| (e.window.peak_ns, clocks.unix_s(e.window.end_ns))),
    );
}

/// Kernel event counts and losses since the last second, into the metrics.
fn export_totals(m: &Metrics, before: &KernelTotals, now: &KernelTotals) {
    let d = now.since(before);
    for &(name, c) in &crate::analysis::EVENT_FAMILIES {
        m.kernel_events
            .get_or_create(&label("family", name))
            .inc_by(d.counters[c as usize]);
    }
    for (kind, n) in [
        ("ring_reserve_failed", d.ring_reserve_failed),
        ("thread_map_full", d.thread_map_full),
        ("requests", d.passive.lost),
        ("accounts", d.accounts_lost),
        ("syscall_records", d.syscall_records_lost),
        ("sample_records", d.sample_records_lost),
        ("stack_collisions", d.stack_collisions),
    ] {
        m.lost.get_or_create(&label("kind", kind)).inc_by(n);
    }
}

/// BPF run-time statistics on for one second in `STATS_EVERY_SECS`.
fn sample_stats(a: &mut Attached, now: u64, n: u64, m: &Metrics) {
    if let Some((from, before)) = a.stats_from.take() {
        let after = a.probes.costs();
        a.probes.set_stats(false);
        let secs = now.saturating_sub(from);
        let costs: Vec<ProgramCost> = after.iter().map(|p| p.since(&before)).collect();
        let total: u64 = costs.iter().map(|c| c.run_time_ns).sum();
        if secs > 0 {
            m.probe_cpu_share.set(total as f64 / secs as f64);
            if let Some(d) = a.probes.hook_dispatch() {
                m.probe_dispatch_cpu_share
                    .set(dispatch_share(&costs, &d, secs));
            }
        }
        a.sampled_costs = Some((costs, secs));
    } else if n % STATS_EVERY_SECS == 1 && a.probes.set_stats(true) {
        a.stats_from = Some((now, a.probes.costs()));
    }
}

/// The hooks' dispatch per ns of wall time over a sampled span of
/// `span_ns`: the calibration's cost per hook run times the runs the
/// statistics counted, as the report counts it (every program's runs but
/// the syscall hooks', whose slow path is apart).
fn dispatch_share(
    costs: &[ProgramCost],
    dispatch: &crate::probes::calibrate::HookDispatchCost,
    span_ns: u64,
) -> f64 {
    let runs: u64 = costs
        .iter()
        .filter(|c| !crate::probes::SYSCALL_HOOKS.contains(&c.name.as_str()))
        .map(|c| c.run_count)
        .sum();
    dispatch.extra_ns_per_dispatch() * runs as f64 / span_ns.max(1) as f64
}

/// A sampled second's program costs, scaled to `window_ns`.
fn scale_costs(costs: &[ProgramCost], sampled_ns: u64, window_ns: u64) -> Vec<ProgramCost> {
    let k = window_ns as f64 / sampled_ns.max(1) as f64;
    costs
        .iter()
        .map(|c| ProgramCost {
            name: c.name.clone(),
            run_count: (c.run_count as f64 * k) as u64,
            run_time_ns: (c.run_time_ns as f64 * k) as u64,
            ns_per_run: c.ns_per_run,
        })
        .collect()
}

#[cfg(test)]
mod dispatch_tests {
    use super::dispatch_share;
    use crate::probes::{ProgramCost, calibrate::HookDispatchCost};

    #[test]
    fn the_dispatch_share_counts_every_hook_run_but_the_syscall_hooks() {
        let costs = vec![
            ProgramCost::new("sched_switch".into(), 300_000, 60_000_000),
            ProgramCost::new("sched_waking".into(), 100_000, 10_000_000),
            ProgramCost::new("sys_enter".into(), 1_000_000, 90_000_000),
        ];
        // 2,000 → 2,300 ns per round trip, 100 of it the programs, the
        // statistics off: 100 ns per hook run.
        let dispatch = HookDispatchCost {
            unhooked_ns: 2_000.0,
            hooked_ns: 2_500.0,
            programs_ns: 100.0,
            hooked_no_stats_ns: Some(2_300.0),
        };
        // 400,000 runs × 100 ns over one second: 4% of it.
        let share = dispatch_share(&costs, &dispatch, 1_000_000_000);
        assert!((share - 0.04).abs() < 1e-12, "{share}");
    }
}
