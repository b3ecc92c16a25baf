//! `correlator experiment`: change one candidate cause, re-measure the tail,
//! and judge with statistics whether it moved.
//!
//! Repetitions of A (baseline) and B (knob applied) are interleaved (ABAB…)
//! or in seeded random order, each a short open-loop load run whose warm-up
//! is discarded. Per repetition: p50, p99, p99.9 (under the percentile
//! rules). Then, per percentile: Mann-Whitney U (Bonferroni across the
//! percentiles), a bootstrap 95% CI of the relative change, and the verdict;
//! an A/A floor from the baseline repetitions alone sets the default minimum
//! meaningful change. Every setting the knob changes is restored on every
//! exit path, and recorded in a state file first so `--restore` can undo a
//! run that was killed.
//!
//! One piece on purpose (over 450 lines): the runner, the per-repetition
//! outcome and the verdicts are one procedure, read top to bottom; the
//! knobs live in `knobs.rs`.

pub mod knobs;

use std::{
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use anyhow::{Context as _, Result, bail};
use serde::{Deserialize, Serialize};

use crate::{
    latency::fmt_ns,
    loadgen::{self, LoadOptions},
    probes::{ProbeConfig, Probes},
    stats,
    target::Target,
};
use knobs::{Knob, Saved};

pub const SCHEMA: &str = "correlator.experiment/v1";

/// Set by SIGINT / SIGTERM: finish the repetition, restore, stop.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

fn install_signal_handlers() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic (async-signal-safe).
        unsafe { libc::signal(sig, on_signal as *const () as libc::sighandler_t) };
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Arm {
    A,
    B,
}

#[derive(Clone, Debug)]
pub struct ExperimentOptions {
    pub pid: u32,
    /// One phase: the repetition's rate, length and warm-up.
    pub load: LoadOptions,
    pub knob: Knob,
    /// Repetitions per arm.
    pub reps: usize,
    /// None: interleaved ABAB…; Some(seed): random order.
    pub random_order: Option<u64>,
    pub alpha: f64,
    /// Default: the A/A floor.
    pub min_change_pct: Option<f64>,
    pub state_file: PathBuf,
    pub seed: u64,
    /// What probes=off detaches (the event probes, plus any passive source).
    pub probes: ProbeConfig,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Rep {
    pub arm: Arm,
    pub count: u64,
    pub p50_ns: Option<u64>,
    pub p99_ns: Option<u64>,
    pub p999_ns: Option<u64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Test {
    pub percentile: f64,
    pub n_a: usize,
    pub n_b: usize,
    pub median_a_ns: f64,
    pub median_b_ns: f64,
    pub u: f64,
    pub p_value: f64,
    /// α after Bonferroni across the percentiles tested.
    pub alpha: f64,
    pub change_pct: f64,
    pub ci_low_pct: f64,
    pub ci_high_pct: f64,
    /// A/A: the same comparison between the two halves of the A repetitions.
    pub aa_change_pct: f64,
    pub aa_ci_low_pct: f64,
    pub aa_ci_high_pct: f64,
    pub min_change_pct: f64,
    pub verdict: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct ExperimentResult {
    pub schema: &'static str,
    pub target: Target,
    pub knob: String,
    pub load: String,
    pub rate: f64,
    pub rep_duration_s: f64,
    pub reps: Vec<Rep>,
    pub tests: Vec<Test>,
    pub environment: crate::runfile::Environment,
    pub notes: Vec<String>,
}

/// What the state file holds: enough to undo a killed experiment.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StateFile {
    pub pid: u32,
    pub knob: String,
    pub saved: Saved,
}

/// Restores a knob when dropped (success, error, panic), and removes the
/// state file once restored.
struct Applied<'a> {
    saved: Option<Saved>,
    state_file: &'a Path,
}

impl Applied<'_> {
    fn restore(&mut self) -> Result<()> {
        if let Some(s) = self.saved.take() {
            knobs::restore(&s)?;
            let _ = std::fs::remove_file(self.state_file);
        }
        Ok(())
    }
}

impl Drop for Applied<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.restore() {
            eprintln!("correlator: {e:#}");
        }
    }
}

fn apply_knob<'a>(opts: &'a ExperimentOptions, target: &Target) -> Result<Applied<'a>> {
    if opts.state_file.exists() {
        bail!(
            "{} exists: an earlier experiment did not finish; run `correlator experiment --restore` first",
            opts.state_file.display()
        );
    }
    // Write-ahead: what will change goes to the state file before anything
    // changes, so a kill at any point after leaves a record to restore from.
    let saved = knobs::prepare(&opts.knob, target)?;
    let state = StateFile {
        pid: opts.pid,
        knob: opts.knob.describe(),
        saved: saved.clone(),
    };
    std::fs::write(&opts.state_file, serde_json::to_string_pretty(&state)?)
        .with_context(|| format!("cannot write the state file {}", opts.state_file.display()))?;
    let changed = knobs::change(&opts.knob, &saved);
    let mut guard = Applied {
        saved: Some(saved),
        state_file: &opts.state_file,
    };
    if let Err(e) = changed {
        // Put back whatever part of the change was made; the guard removes
        // the state file once that worked.
        guard.restore()?;
        return Err(e);
    }
    Ok(guard)
}

/// Undoes a killed experiment from its state file.
pub fn restore_from(state_file: &Path) -> Result<String> {
    let text = std::fs::read_to_string(state_file).with_context(|| {
        format!(
            "no experiment to restore ({} not found)",
            state_file.display()
        )
    })?;
    let state: StateFile = serde_json::from_str(&text)
        .with_context(|| format!("{} is not an experiment state file", state_file.display()))?;
    knobs::restore(&state.saved)?;
    std::fs::remove_file(state_file)?;
    Ok(format!(
        "restored: {} (experiment on PID {})",
        state.knob, state.pid
    ))
}

fn order(reps: usize, random: Option<u64>) -> Vec<Arm> {
    let mut arms: Vec<Arm> = (0..reps).flat_map(|_| [Arm::A, Arm::B]).collect();
    if let Some(seed) = random {
        let mut rng = stats::Rng::new(seed);
        for i in (1..arms.len()).rev() {
            arms.swap(i, rng.below(i + 1));
        }
    }
    arms
}

fn one_rep(opts: &ExperimentOptions, arm: Arm, target: &Target) -> Result<Rep> {
    let cancel = Arc::new(AtomicBool::new(false));
    let mut load = opts.load.clone();
    load.cancel = Arc::clone(&cancel);
    let watcher = {
        let cancel = Arc::clone(&cancel);
        std::thread::spawn(move || {
            while !cancel.load(Ordering::Relaxed) {
                if INTERRUPTED.load(Ordering::Relaxed) {
                    cancel.store(true, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    // probes=off: the baseline runs with correlator's probes attached.
    let probes = if opts.knob == Knob::ProbesOff && arm == Arm::A {
        Some(Probes::attach(target, &opts.probes)?)
    } else {
        None
    };
    let result = loadgen::run(load, None);
    drop(probes);
    cancel.store(true, Ordering::Relaxed);
    let _ = watcher.join();
    let r = result?;
    let d = &r.recorder.phases[0].corrected;
    let pct = |p: f64| d.percentile(p).value_ns;
    Ok(Rep {
        arm,
        count: d.count(),
        p50_ns: pct(50.0),
        p99_ns: pct(99.0),
        p999_ns: pct(99.9),
    })
}

/// Runs the experiment.
pub fn run(
    opts: &ExperimentOptions,
    mut each: impl FnMut(usize, &Rep),
) -> Result<ExperimentResult> {
    let target = Target::from_pid(opts.pid)?;
    if opts.reps < 2 {
        bail!("--reps must be at least 2 per arm (≥ 9 for the U test to have power; 20 is better)");
    }
    // Before any setting changes: a bad load option or a dead server.
    loadgen::check(&opts.load)?;
    install_signal_handlers();
    let mut reps = Vec::new();
    for (i, arm) in order(opts.reps, opts.random_order).into_iter().enumerate() {
        if INTERRUPTED.load(Ordering::Relaxed) {
            bail!("interrupted after {i} repetitions; settings restored");
        }
        if !target.is_alive() {
            bail!("the target exited after {i} repetitions; settings restored");
        }
        let rep = if arm == Arm::B {
            let mut applied = apply_knob(opts, &target)?;
            let rep = one_rep(opts, arm, &target);
            applied.restore()?;
            rep
        } else {
            one_rep(opts, arm, &target)
        };
        // A target that dies mid-repetition shows up first as the load's
        // error (connection refused or reset): name the cause, not the symptom.
        let rep = rep.map_err(|e| {
            if target.is_alive() {
                e
            } else {
                anyhow::anyhow!(
                    "the target exited during repetition {}; settings restored ({e:#})",
                    i + 1
                )
            }
        })?;
        each(i, &rep);
        reps.push(rep);
    }
    if INTERRUPTED.load(Ordering::Relaxed) {
        bail!("interrupted; settings restored");
    }
    Ok(judge(opts, target, reps))
}

fn judge(opts: &ExperimentOptions, target: Target, reps: Vec<Rep>) -> ExperimentResult {
    type Pick = fn(&Rep) -> Option<u64>;
    let picks: [(f64, Pick); 3] = [
        (50.0, |r| r.p50_ns),
        (99.0, |r| r.p99_ns),
        (99.9, |r| r.p999_ns),
    ];
    let mut notes = Vec::new();
    let values = |arm: Arm, pick: Pick| -> Vec<f64> {
        reps.iter()
            .filter(|r| r.arm == arm)
            .filter_map(pick)
            .map(|v| v as f64)
            .collect()
    };
    let testable: Vec<(f64, Pick)> = picks
        .into_iter()
        .filter(|(p, pick)| {
            let (a, b) = (values(Arm::A, *pick), values(Arm::B, *pick));
            let ok = a.len() >= 4 && b.len() >= 2 && a.len() == opts.reps && b.len() == opts.reps;
            if !ok {
                notes.push(format!(
                    "p{p} not tested: some repetitions had fewer than 10 samples above it (lengthen --rep-duration or raise --rate)"
                ));
            }
            ok
        })
        .collect();
    let alpha = stats::bonferroni(opts.alpha, testable.len());
    let tests = testable
        .iter()
        .map(|&(p, pick)| {
            let (a, b) = (values(Arm::A, pick), values(Arm::B, pick));
            let mw = stats::mann_whitney(&a, &b);
            let ci = stats::bootstrap_change(&a, &b, 10_000, opts.seed);
            // A/A: the A repetitions in two interleaved halves.
            let a1: Vec<f64> = a.iter().copied().step_by(2).collect();
            let a2: Vec<f64> = a.iter().copied().skip(1).step_by(2).collect();
            let aa = stats::bootstrap_change(&a1, &a2, 10_000, opts.seed ^ 0xaa);
            let floor = aa.ci_low_pct.abs().max(aa.ci_high_pct.abs());
            let min_change = opts.min_change_pct.unwrap_or(floor);
            Test {
                percentile: p,
                n_a: a.len(),
                n_b: b.len(),
                median_a_ns: stats::median(&a),
                median_b_ns: stats::median(&b),
                u: mw.u,
                p_value: mw.p_value,
                alpha,
                change_pct: ci.change_pct,
                ci_low_pct: ci.ci_low_pct,
                ci_high_pct: ci.ci_high_pct,
                aa_change_pct: aa.change_pct,
                aa_ci_low_pct: aa.ci_low_pct,
                aa_ci_high_pct: aa.ci_high_pct,
                min_change_pct: min_change,
                verdict: stats::verdict(mw.p_value, alpha, &ci, min_change),
            }
        })
        .collect();
    if opts.reps < 9 {
        notes.push(format!(
            "{} repetitions per arm: below 9 the U test has little power",
            opts.reps
        ));
    }
    if opts.min_change_pct.is_none() {
        notes.push("minimum meaningful change = the A/A floor (widest end of the A/A 95% CI), per percentile".into());
    }
    let knob = match (&opts.knob, &opts.probes.passive) {
        (Knob::ProbesOff, Some(source)) => {
            format!("{} (with {})", opts.knob.describe(), source.describe())
        }
        _ => opts.knob.describe(),
    };
    ExperimentResult {
        schema: SCHEMA,
        target,
        knob,
        load: opts.load.url.clone(),
        rate: opts.load.rates.first().copied().unwrap_or(0.0),
        rep_duration_s: opts.load.duration.as_secs_f64(),
        reps,
        tests,
        environment: crate::runfile::Environment::current(),
        notes,
    }
}

/// Terminal summary.
pub fn text(r: &ExperimentResult) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "experiment on PID {} ({}): B = {}; {} repetitions per arm of {:.1} s at {:.0} req/s",
        r.target.pid,
        r.target.comm,
        r.knob,
        r.reps.len() / 2,
        r.rep_duration_s,
        r.rate
    );
    for t in &r.tests {
        let _ = writeln!(
            out,
            "  p{:<5} A median {:>10}  B median {:>10}  U {:>6.1}  p = {:.2e} (α {:.4})  change {:+.1}% [{:+.1}%, {:+.1}%]  A/A [{:+.1}%, {:+.1}%]\n         → {}",
            t.percentile,
            fmt_ns(t.median_a_ns as u64),
            fmt_ns(t.median_b_ns as u64),
            t.u,
            t.p_value,
            t.alpha,
            t.change_pct,
            t.ci_low_pct,
            t.ci_high_pct,
            t.aa_ci_low_pct,
            t.aa_ci_high_pct,
            t.verdict
        );
    }
    for n in &r.notes {
        let _ = writeln!(out, "  note: {n}");
    }
    out
}

/// HTML with a per-repetition dot plot per percentile.
pub fn html(r: &ExperimentResult) -> String {
    use std::fmt::Write as _;
    let mut body = String::new();
    type Pick = fn(&Rep) -> Option<u64>;
    let picks: [(&str, Pick); 3] = [
        ("p50", |x| x.p50_ns),
        ("p99", |x| x.p99_ns),
        ("p99.9", |x| x.p999_ns),
    ];
    for (name, pick) in picks {
        let vals: Vec<(Arm, u64)> = r
            .reps
            .iter()
            .filter_map(|x| pick(x).map(|v| (x.arm, v)))
            .collect();
        let Some(max) = vals.iter().map(|v| v.1).max() else {
            continue;
        };
        let (w, h) = (420.0, 220.0);
        let _ = write!(
            body,
            r#"<h3>{name} per repetition</h3><svg viewBox="0 0 {w} {h}" width="{w}" height="{h}">"#
        );
        for (i, (arm, v)) in vals.iter().enumerate() {
            let x = if *arm == Arm::A { 120.0 } else { 300.0 } + ((i * 37) % 40) as f64 - 20.0;
            let y = 200.0 - (*v as f64 / max as f64) * 180.0;
            let color = if *arm == Arm::A { "#1f5fa8" } else { "#e8853d" };
            let _ = write!(
                body,
                r#"<circle cx="{x:.1}" cy="{y:.1}" r="4" fill="{color}"><title>{}</title></circle>"#,
                fmt_ns(*v)
            );
        }
        let _ = write!(
            body,
            r#"<text x="100" y="215" font-size="12">A (baseline)</text><text x="270" y="215" font-size="12">B ({})</text><text x="5" y="15" font-size="11">max {}</text></svg>"#,
            r.knob.replace('<', "&lt;"),
            fmt_ns(max)
        );
    }
    let verdicts: String = r
        .tests
        .iter()
        .map(|t| {
            format!(
                "<li>p{}: {} (p = {:.2e})</li>",
                t.percentile,
                t.verdict.replace('<', "&lt;"),
                t.p_value
            )
        })
        .collect();
    format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>correlator experiment</title></head>\
         <body style=\"font-family:system-ui,sans-serif;max-width:900px;margin:20px auto\"><h1>Experiment: {}</h1><ul>{verdicts}</ul>{body}</body></html>",
        r.knob.replace('<', "&lt;")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loadgen::protocol::{KvOp, Target as LoadTarget};

    fn options(knob: Knob, state_file: PathBuf) -> ExperimentOptions {
        let url = "tcp://127.0.0.1:9";
        ExperimentOptions {
            pid: std::process::id(),
            load: LoadOptions {
                url: url.into(),
                target: LoadTarget::parse(url, &KvOp::Ping).expect("url"),
                rates: vec![1000.0],
                duration: Duration::from_secs(1),
                warmup: Duration::ZERO,
                connections: 1,
                timeout: Duration::from_secs(1),
                closed_loop: false,
                rt_pacer: false,
                cancel: Arc::default(),
                cpus: None,
            },
            knob,
            reps: 2,
            random_order: None,
            alpha: 0.05,
            min_change_pct: None,
            state_file,
            seed: 1,
            probes: ProbeConfig::default(),
        }
    }

    /// A panic while the treatment is applied unwinds through the guard,
    /// which reverts the setting and removes the state file. (The live tests
    /// cover success, error, Ctrl-C, SIGTERM and SIGKILL + --restore.)
    #[test]
    fn a_panic_while_applied_restores_the_setting() {
        let dir = std::env::temp_dir().join(format!("correlator-panic-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let marker = dir.join("applied");
        let state = dir.join("state.json");
        let opts = options(
            Knob::Command {
                apply: format!("touch {}", marker.display()),
                revert: format!("rm {}", marker.display()),
            },
            state.clone(),
        );
        let target = Target::from_pid(std::process::id()).expect("self");
        let outcome = std::panic::catch_unwind(|| {
            let _applied = apply_knob(&opts, &target).expect("apply");
            assert!(marker.exists(), "the knob was applied");
            assert!(state.exists(), "the state file was written first");
            panic!("injected panic in the treatment arm");
        });
        assert!(outcome.is_err(), "the panic happened");
        assert!(!marker.exists(), "the panic path reverted the setting");
        assert!(!state.exists(), "and removed the state file");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Write-ahead: the state file exists before the change is made (the
    /// knob's own command checks for it), and a change that fails is put
    /// back and leaves no state file.
    #[test]
    fn the_state_file_is_written_before_the_change() {
        let dir = std::env::temp_dir().join(format!("correlator-wal-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let state = dir.join("state.json");
        let reverted = dir.join("reverted");
        let target = Target::from_pid(std::process::id()).expect("self");
        let opts = options(
            Knob::Command {
                apply: format!("test -f {}", state.display()),
                revert: "true".into(),
            },
            state.clone(),
        );
        let applied = apply_knob(&opts, &target).expect("the state file was there at the change");
        drop(applied);
        assert!(!state.exists(), "restored and removed");
        let failing = options(
            Knob::Command {
                apply: "false".into(),
                revert: format!("touch {}", reverted.display()),
            },
            state.clone(),
        );
        assert!(apply_knob(&failing, &target).is_err());
        assert!(reverted.exists(), "a failed change is put back");
        assert!(!state.exists(), "and leaves no state file");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
