//! The scenario suite behind `correlator demo`: for each injected cause,
//! start the demo server (and the neighbour, for preemption), run the whole
//! pipeline against it, and compare what correlator names with what was
//! injected.

use std::{
    io::{BufRead as _, BufReader},
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::Arc,
    time::Duration,
};

use anyhow::{Context as _, Result};
use serde::Serialize;

use super::Scenario;
use crate::{
    analysis::{AnalysisOptions, CauseKind},
    experiment::knobs::{self, Knob, Saved},
    latency::fmt_ns,
    loadgen::{
        LoadOptions,
        protocol::{KvOp, Target},
    },
    probes::ProbeConfig,
    run::{self, Outputs, RunOptions},
};

/// The serving CPU and the one everything else uses.
const SERVER_CPU: usize = 1;
const OTHER_CPU: usize = 0;

#[derive(Clone, Debug)]
pub struct SuiteOptions {
    pub scenarios: Vec<Scenario>,
    pub out_dir: PathBuf,
    pub duration: Duration,
    pub rate: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Outcome {
    pub scenario: &'static str,
    pub injected: &'static str,
    pub expected_signature: &'static str,
    pub expected_cause: Option<CauseKind>,
    pub detected_signature: String,
    pub detected_cause: Option<CauseKind>,
    pub episodes: usize,
    /// Mean share of episode time measured (the account's `explained_share`).
    pub explained: f64,
    pub p99_ns: Option<u64>,
    pub correct: bool,
    pub html: PathBuf,
}

/// A child process killed on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn injected(s: Scenario) -> &'static str {
    match s {
        Scenario::None => "nothing (clean baseline)",
        Scenario::Periodic => "48 MiB GC-like sweep every 300 ms",
        Scenario::Load => "150 µs per request, rate sweep",
        Scenario::PageFaults => "working set dropped, refaulted",
        Scenario::MajorFaults => "mapped file evicted, read back",
        Scenario::Preemption => "CPU hog bursts on the server CPU",
        Scenario::Migrations => "bursts of CPU hops",
        Scenario::Blocking => "lock held 10-20 ms by another thread",
        Scenario::Softirq => "UDP bursts, receive work on server CPU",
    }
}

/// A system setting changed for one scenario, put back on drop (success,
/// error, panic; SIGINT/SIGTERM end the run normally, so they pass here too).
struct Setting(Option<Saved>);

impl Setting {
    fn apply(knob: &Knob) -> Result<Self> {
        let target = crate::target::Target::from_pid(std::process::id())?;
        Ok(Self(Some(knobs::apply(knob, &target)?)))
    }
}

impl Drop for Setting {
    fn drop(&mut self) {
        if let Some(saved) = self.0.take()
            && let Err(e) = knobs::restore(&saved)
        {
            eprintln!("correlator: {e:#}");
        }
    }
}

fn spawn_server(exe: &PathBuf, s: Scenario) -> Result<(Proc, String)> {
    let every = if s == Scenario::Softirq {
        "250ms"
    } else {
        "500ms"
    };
    let mut child = Command::new(exe)
        .args(["demo-server", "--scenario", s.name(), "--every", every])
        .args([
            "--cpu",
            &SERVER_CPU.to_string(),
            "--injector-cpu",
            &OTHER_CPU.to_string(),
        ])
        .args(["--period", "300ms"])
        .stdout(Stdio::piped())
        .spawn()
        .context("cannot start the demo server")?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().context("demo server stdout")?)
        .read_line(&mut line)
        .context("demo server did not start")?;
    let addr = line
        .trim()
        .rsplit(' ')
        .next()
        .filter(|a| a.contains(':'))
        .with_context(|| format!("demo server said {line:?}"))?
        .to_string();
    Ok((Proc(child), addr))
}

pub fn run_scenario(exe: &PathBuf, s: Scenario, opts: &SuiteOptions) -> Result<Outcome> {
    // Loopback receive work goes to the server's CPU, as a NIC's IRQ
    // affinity or RPS would send it there in production.
    let _rps = if s == Scenario::Softirq {
        Some(Setting::apply(&Knob::Rps {
            dev: "lo".into(),
            cpus: vec![SERVER_CPU],
        })?)
    } else {
        None
    };
    let (server, addr) = spawn_server(exe, s)?;
    let _hog = if s == Scenario::Preemption {
        Some(Proc(
            Command::new(exe)
                .args(["demo-hog", "--cpu", &SERVER_CPU.to_string()])
                .spawn()
                .context("cannot start the CPU hog")?,
        ))
    } else {
        None
    };
    let url = format!("tcp://{addr}");
    let (rates, duration) = if s == Scenario::Load {
        (vec![2_000.0, 4_500.0, 7_000.0], Duration::from_secs(5))
    } else {
        (vec![opts.rate], opts.duration)
    };
    let base = opts.out_dir.join(s.name());
    let outputs = Outputs {
        json: Some(base.with_extension("json")),
        html: Some(base.with_extension("html")),
        perfetto: None,
        folded: None,
        run_file: Some(base.with_extension("run")),
    };
    let (_, report) = run::run(RunOptions {
        pid: server.0.id(),
        load: LoadOptions {
            url: url.clone(),
            target: Target::parse(&url, &KvOp::Ping)?,
            rates,
            duration,
            warmup: Duration::from_secs(1),
            connections: 4,
            timeout: Duration::from_secs(2),
            closed_loop: false,
            // The pacer shares CPU 0 with the recorder: keep it on schedule.
            rt_pacer: true,
            cancel: Arc::default(),
            cpus: Some(vec![OTHER_CPU]),
        },
        probes: ProbeConfig::default(),
        analysis: AnalysisOptions::default(),
        outputs: outputs.clone(),
        progress: false,
    })
    .with_context(|| format!("scenario {}", s.name()))?;
    let (expected_signature, expected_cause) = s.expected();
    let c = &report.classification;
    let detected_signature = serde_json::to_value(c.signature)?
        .as_str()
        .unwrap_or_default()
        .to_string();
    let detected_cause = c.causes.first().map(|c| c.cause);
    // A clean baseline may still spike for reasons nobody injected and
    // outside the server: the hypervisor taking the CPU, the load
    // generator sending late. Naming those, measured, is not inventing a
    // cause; naming any server cause is.
    let environment = s == Scenario::None && detected_cause.is_some_and(|c| !c.is_server());
    let correct = environment
        || (detected_signature == expected_signature && detected_cause == expected_cause);
    let explained = if report.episodes.is_empty() {
        0.0
    } else {
        report
            .episodes
            .iter()
            .map(|e| e.account.explained_share)
            .sum::<f64>()
            / report.episodes.len() as f64
    };
    Ok(Outcome {
        scenario: s.name(),
        injected: injected(s),
        expected_signature,
        expected_cause,
        detected_signature,
        detected_cause,
        episodes: report.episodes.len(),
        explained,
        p99_ns: report.latency.summary.value_at(99.0),
        correct,
        html: outputs.html.unwrap_or_default(),
    })
}

pub fn run_suite(opts: &SuiteOptions, mut each: impl FnMut(&Outcome)) -> Result<Vec<Outcome>> {
    std::fs::create_dir_all(&opts.out_dir)
        .with_context(|| format!("cannot create {}", opts.out_dir.display()))?;
    let exe = std::env::current_exe().context("cannot find the correlator binary")?;
    let mut out = Vec::new();
    for &s in &opts.scenarios {
        let o = run_scenario(&exe, s, opts)?;
        each(&o);
        out.push(o);
    }
    Ok(out)
}

pub fn header() -> String {
    format!(
        "{:<13} {:<38} {:<16} {:<13} {:<16} {:<13} {:>8} {:>9} {:>9}  result",
        "scenario",
        "injected",
        "expected sig",
        "expected",
        "detected sig",
        "detected",
        "episodes",
        "explained",
        "p99"
    )
}

pub fn row(o: &Outcome) -> String {
    format!(
        "{:<13} {:<38} {:<16} {:<13} {:<16} {:<13} {:>8} {:>8.0}% {:>9}  {}",
        o.scenario,
        o.injected,
        o.expected_signature,
        o.expected_cause.map_or("-", CauseKind::name),
        o.detected_signature,
        o.detected_cause.map_or("-", CauseKind::name),
        o.episodes,
        o.explained * 100.0,
        o.p99_ns.map_or("-".into(), fmt_ns),
        if o.correct { "ok" } else { "MISATTRIBUTED" }
    )
}
