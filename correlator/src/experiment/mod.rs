//! `correlator experiment`: change one candidate cause, re-measure the tail,
//! and judge with statistics whether it moved.
//!
//! Repetitions of A (baseline) and B (knob applied) are interleaved (AB BA…)
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
    cpu::HOST_DISTURBED,
    latency::fmt_ns,
    loadgen::{self, LoadOptions},
    probes::{ProbeConfig, Probes},
    stats,
    target::Target,
};
use knobs::{Knob, Saved};
use stats::sequential::Design;

pub const SCHEMA: &str = "correlator.experiment/v2";
/// The previous schema: the same repetitions, without the design.
pub const SCHEMA_V1: &str = "correlator.experiment/v1";

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
    /// Repetitions per arm: fixed, or added until the answer is clear.
    pub reps: Reps,
    /// None: interleaved pairs of alternating order (AB BA AB …);
    /// Some(seed): random order.
    pub random_order: Option<u64>,
    pub alpha: f64,
    /// Default: the A/A floor.
    pub min_change_pct: Option<f64>,
    pub state_file: PathBuf,
    pub seed: u64,
    /// What probes=off detaches (the event probes, plus any passive source).
    pub probes: ProbeConfig,
    /// `--reps auto`: stop once this percentile is answered (None: once
    /// every tested percentile is). A confirming experiment cares about the
    /// report's percentile only, and p50 can take the longest to settle.
    pub decide_on: Option<f64>,
}

/// How many repetitions an experiment runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reps {
    /// Exactly this many per arm, judged once at the end.
    Fixed(usize),
    /// Looks after every [`LOOK_EVERY`] repetitions per arm, up to `max`,
    /// with a group-sequential design: stops as soon as a boundary is
    /// crossed or the CIs rule out a meaningful change.
    Auto { max: usize },
}

/// Repetitions per arm between two looks of `--reps auto`.
pub const LOOK_EVERY: usize = 5;

/// Percentiles every experiment tests (Bonferroni over all three).
const PERCENTILES: usize = 3;

impl Reps {
    /// The design: looks and their boundaries at α (Bonferroni across
    /// the percentiles).
    pub fn design(self, alpha: f64) -> Design {
        self.design_for(alpha, PERCENTILES)
    }

    /// The design when `deciding` percentiles decide the outcome: α is
    /// split over those only. A confirmation decides on the report's
    /// percentile alone (the others are shown, not judged), so it keeps
    /// the whole α: split three ways, a hog's −63% (CI −79..−8%) over 20
    /// noisy repetitions per arm missed the boundary and read "no
    /// significant difference".
    pub fn design_for(self, alpha: f64, deciding: usize) -> Design {
        let alpha = stats::bonferroni(alpha, deciding);
        match self {
            Reps::Fixed(n) => Design::fixed(n, alpha),
            Reps::Auto { max } => {
                let looks: Vec<usize> = (1..=max.div_ceil(LOOK_EVERY))
                    .map(|k| k * LOOK_EVERY)
                    .collect();
                Design::obrien_fleming(&looks, alpha)
            }
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Rep {
    pub arm: Arm,
    pub count: u64,
    pub p50_ns: Option<u64>,
    pub p99_ns: Option<u64>,
    pub p999_ns: Option<u64>,
    /// The most the host took of any CPU's wanted time during the
    /// repetition (steal ÷ (busy + steal) per CPU, /proc/stat, CPUs that
    /// wanted a tenth of the time); absent without a steal column.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_share: Option<f64>,
    /// Run again because the host disturbed it (see [`HOST_DISTURBED`]);
    /// kept in the result's `disturbed`, not in the tests.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub repeated: bool,
}

impl Rep {
    /// Whether the host took so much of the CPU that this repetition
    /// measured it rather than the server.
    pub fn host_disturbed(&self) -> bool {
        self.host_share.is_some_and(crate::cpu::host_disturbed)
    }
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
    /// Smallest change (either way, percent) the whole design detects with
    /// 80% power at its α, from the spread of the A repetitions.
    pub detectable_change_pct: f64,
    /// Non-finite bootstrap resamples (left out of the CI).
    #[serde(skip_serializing_if = "is_zero")]
    pub bootstrap_non_finite: usize,
    pub finding: stats::Finding,
    pub verdict: String,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Why an experiment stopped adding repetitions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stop {
    /// The fixed number of repetitions ran.
    Fixed,
    /// Every percentile answered, at least one with a meaningful change
    /// across its boundary (the others: CIs within ± the minimum change).
    Significant,
    /// Every CI lies within ± the minimum meaningful change.
    NoMeaningfulChange,
    /// The maximum number of repetitions ran.
    MaxReps,
}

/// The design as run: looks, boundaries, where it stopped and why.
#[derive(Clone, Debug, Serialize)]
pub struct DesignReport {
    /// "fixed" or "group-sequential (O'Brien-Fleming-type α spending)".
    pub kind: String,
    #[serde(flatten)]
    pub design: Design,
    /// Repetitions per arm when it stopped.
    pub stopped_after: usize,
    pub stop: Stop,
}

/// One look at the data: the tests at its boundary and whether to stop.
#[derive(Clone, Debug)]
pub struct Look {
    pub reps_per_arm: usize,
    pub tests: Vec<Test>,
    pub stop: Option<Stop>,
    pub notes: Vec<String>,
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
    pub design: DesignReport,
    pub environment: crate::runfile::Environment,
    pub notes: Vec<String>,
    /// Repetitions run again because the host disturbed them (not in the
    /// tests; see [`HOST_DISTURBED`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub disturbed: Vec<Rep>,
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
    write_durable(
        &opts.state_file,
        serde_json::to_string_pretty(&state)?.as_bytes(),
    )
    .with_context(|| format!("cannot write the state file {}", opts.state_file.display()))?;
    failpoint("after-state-write");
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

/// Writes `bytes` to `path` so that they survive a crash or power loss
/// before the caller goes on: a temporary file beside it, fsync, rename
/// over, fsync of the directory (the rename itself is only durable then).
fn write_durable(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write as _;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
    tmp_name.push(".tmp");
    let tmp = dir.join(tmp_name);
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(&dir)?.sync_all()?;
    Ok(())
}

/// Fault injection for the crash-safety tests: with
/// `CORRELATOR_FAILPOINT=NAME` the process dies (abort, like a SIGKILL:
/// no destructor runs) when it reaches the point `NAME`.
fn failpoint(name: &str) {
    if std::env::var("CORRELATOR_FAILPOINT").is_ok_and(|v| v == name) {
        eprintln!("correlator: failpoint {name}: aborting");
        std::process::abort();
    }
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

/// The arms of the next `reps` pairs, the first of them pair number
/// `first_pair` of the experiment. Interleaved pairs alternate their order
/// (AB BA AB …): with A always first, any drift over the run (the host
/// settling, the server warming) reads as the knob's effect, and one
/// direction of it always favours B.
fn order(reps: usize, first_pair: usize, random: Option<u64>) -> Vec<Arm> {
    let mut arms: Vec<Arm> = (first_pair..first_pair + reps)
        .flat_map(|j| {
            if j % 2 == 0 {
                [Arm::A, Arm::B]
            } else {
                [Arm::B, Arm::A]
            }
        })
        .collect();
    if let Some(seed) = random {
        let mut rng = stats::Rng::new(seed);
        for i in (1..arms.len()).rev() {
            arms.swap(i, rng.below(i + 1));
        }
    }
    arms
}

/// Where the in-process load generator runs, in both arms, and the note
/// that says so. A knob that moves work to other CPUs (receive steering,
/// an IRQ's affinity) moves it onto whatever runs there in B: with the
/// generator on those CPUs, B measures the disturbance moved onto the
/// client instead of removed from the server (a softirq confirmation
/// measured −2% this way where the account predicted −87%). So the
/// generator keeps off them: on its own CPUs (`--load-cpus`, or `run`'s
/// default away from the server) minus those, else on every other CPU;
/// left where it is, and said so, only when no CPU is left.
fn place_load(knob: &Knob, load: &LoadOptions, online: usize) -> (LoadOptions, Option<String>) {
    let mut load = load.clone();
    let Some(moved_to) = knob.moves_work_to() else {
        return (load, None);
    };
    let away = |c: &usize| !moved_to.contains(c);
    let mine: Vec<usize> = load.cpus.iter().flatten().copied().filter(away).collect();
    let rest: Vec<usize> = if mine.is_empty() {
        (0..online).filter(away).collect()
    } else {
        mine
    };
    if rest.is_empty() {
        let note = format!(
            "the load generator shares CPUs {moved_to:?} with the work the knob moves there: B's client-side latency includes it (run the client elsewhere)"
        );
        return (load, Some(note));
    }
    let note = format!(
        "the load generator ran on CPUs {rest:?} in both arms, off the CPUs {moved_to:?} the knob moves work to"
    );
    load.cpus = Some(rest);
    (load, Some(note))
}

fn one_rep(opts: &ExperimentOptions, load: &LoadOptions, arm: Arm, target: &Target) -> Result<Rep> {
    let cancel = Arc::new(AtomicBool::new(false));
    let mut load = load.clone();
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
    let before = crate::cpu::proc_stat_ticks();
    let result = loadgen::run(load, None);
    let host = crate::cpu::host_share(before, crate::cpu::proc_stat_ticks());
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
        host_share: host,
        repeated: false,
    })
}

/// The longest an experiment of at most `reps_per_arm` repetitions per
/// arm, each `per_rep` long, can take: both arms, and with the
/// repetitions the host disturbed run again (at most one arm's worth more,
/// see `run`), for the plan printed before it starts.
pub fn time_bound(per_rep: Duration, reps_per_arm: usize) -> (Duration, Duration) {
    let one_arm = per_rep * reps_per_arm as u32;
    (one_arm * 2, one_arm * 3)
}

/// Runs the experiment: repetitions up to each look of the design, a look
/// (reported through `on_look`), and on until a look says stop.
pub fn run(
    opts: &ExperimentOptions,
    mut each: impl FnMut(usize, &Rep),
    mut on_look: impl FnMut(&Look, &Design),
) -> Result<ExperimentResult> {
    let target = Target::from_pid(opts.pid)?;
    let first_look = match opts.reps {
        Reps::Fixed(n) => n,
        Reps::Auto { max } => max.min(LOOK_EVERY * 2),
    };
    if first_look < 2 {
        bail!("--reps must be at least 2 per arm (≥ 9 for the U test to have power; 20 is better)");
    }
    if let Reps::Auto { max } = opts.reps
        && max < 2 * LOOK_EVERY
    {
        bail!(
            "--max-reps must be at least {} with --reps auto (looks every {LOOK_EVERY})",
            2 * LOOK_EVERY
        );
    }
    // Before any setting changes: a bad load option or a dead server.
    loadgen::check(&opts.load)?;
    let deciding = if opts.decide_on.is_some() {
        1
    } else {
        PERCENTILES
    };
    let design = opts.reps.design_for(opts.alpha, deciding);
    let (load, placement) = place_load(
        &opts.knob,
        &opts.load,
        crate::cpu::online_cpu_count().unwrap_or(1),
    );
    install_signal_handlers();
    let mut reps: Vec<Rep> = Vec::new();
    let mut disturbed: Vec<Rep> = Vec::new();
    // At most one arm's worth of repetitions run again (`time_bound`): a
    // host that stays that busy is reported through the kept repetitions
    // and a note.
    let most_repeated = design.looks.last().copied().unwrap_or(0);
    let mut last: Option<Look> = None;
    for (k, &n) in design.looks.iter().enumerate() {
        let block = order(
            n - reps.len() / 2,
            reps.len() / 2,
            opts.random_order.map(|s| s ^ k as u64),
        );
        for arm in block {
            loop {
                let i = reps.len() + disturbed.len();
                let mut rep = measure(opts, &load, arm, &target, i)?;
                if rep.host_disturbed() && disturbed.len() < most_repeated {
                    rep.repeated = true;
                    each(i, &rep);
                    disturbed.push(rep);
                    continue;
                }
                each(i, &rep);
                reps.push(rep);
                break;
            }
        }
        if INTERRUPTED.load(Ordering::Relaxed) {
            bail!("interrupted; settings restored");
        }
        let look = judge_look(
            &reps,
            &design,
            k,
            opts.min_change_pct,
            opts.seed,
            opts.decide_on,
        );
        on_look(&look, &design);
        let stop = look.stop.is_some();
        last = Some(look);
        if stop {
            break;
        }
    }
    let look = last.ok_or_else(|| anyhow::anyhow!("the design has no looks"))?;
    let mut result = result(opts, target, reps, design, look);
    result.notes.extend(placement);
    result
        .notes
        .extend(disturbed_note(&disturbed, &result.reps));
    result.disturbed = disturbed;
    Ok(result)
}

/// One repetition of `arm` (the knob applied around it for B), with the
/// checks before it: interrupted, target gone.
fn measure(
    opts: &ExperimentOptions,
    load: &LoadOptions,
    arm: Arm,
    target: &Target,
    i: usize,
) -> Result<Rep> {
    if INTERRUPTED.load(Ordering::Relaxed) {
        bail!("interrupted after {i} repetitions; settings restored");
    }
    if !target.is_alive() {
        bail!("the target exited after {i} repetitions; settings restored");
    }
    let rep = if arm == Arm::B {
        let mut applied = apply_knob(opts, target)?;
        let rep = one_rep(opts, load, arm, target);
        applied.restore()?;
        rep
    } else {
        one_rep(opts, load, arm, target)
    };
    // A target that dies mid-repetition shows up first as the load's
    // error (connection refused or reset): name the cause, not the symptom.
    rep.map_err(|e| {
        if target.is_alive() {
            e
        } else {
            anyhow::anyhow!(
                "the target exited during repetition {}; settings restored ({e:#})",
                i + 1
            )
        }
    })
}

/// What the host's bursts did to the experiment, if anything.
fn disturbed_note(disturbed: &[Rep], kept: &[Rep]) -> Option<String> {
    let kept_disturbed = kept.iter().filter(|r| r.host_disturbed()).count();
    if disturbed.is_empty() && kept_disturbed == 0 {
        return None;
    }
    let count = |arm: Arm| disturbed.iter().filter(|r| r.arm == arm).count();
    let mut note = format!(
        "{} repetitions ({} A, {} B) were run again: the host took ≥ {:.0}% of a CPU's wanted time during them (steal ÷ (busy + steal), /proc/stat), so they measured the host, not the knob (listed in `disturbed`)",
        disturbed.len(),
        count(Arm::A),
        count(Arm::B),
        HOST_DISTURBED * 100.0
    );
    if kept_disturbed > 0 {
        note.push_str(&format!(
            "; {kept_disturbed} more were kept once the repeats ran out: the result includes the host's noise"
        ));
    }
    Some(note)
}

type Pick = fn(&Rep) -> Option<u64>;

/// The change of a percentile between the arms: the Hodges-Lehmann ratio
/// of B's repetitions to A's, the effect the U test tests (see
/// [`stats::Estimate`]).
const CHANGE: stats::Estimate = stats::Estimate::HodgesLehmann;

const PICKS: [(f64, Pick); PERCENTILES] = [
    (50.0, |r| r.p50_ns),
    (99.0, |r| r.p99_ns),
    (99.9, |r| r.p999_ns),
];

/// The tests at look `k` of `design` over the repetitions so far, and
/// whether to stop: a meaningful significant change, every CI within ±
/// the minimum meaningful change, or the last look. Pure, so simulations
/// of the whole procedure run this very code.
pub fn judge_look(
    reps: &[Rep],
    design: &Design,
    k: usize,
    min_change_pct: Option<f64>,
    seed: u64,
    decide_on: Option<f64>,
) -> Look {
    let n = reps.len() / 2;
    let mut notes = Vec::new();
    let values = |arm: Arm, pick: Pick| -> Vec<f64> {
        reps.iter()
            .filter(|r| r.arm == arm)
            .filter_map(pick)
            .map(|v| v as f64)
            .collect()
    };
    let alpha = design.nominal_p[k];
    let mut tests = Vec::new();
    for (p, pick) in PICKS {
        let (a, b) = (values(Arm::A, pick), values(Arm::B, pick));
        if a.len() < 4 || a.len() != n || b.len() != n {
            notes.push(format!(
                "p{p} not tested: some repetitions had fewer than 10 samples above it (lengthen --rep-duration or raise --rate)"
            ));
            continue;
        }
        let mw = stats::mann_whitney(&a, &b);
        let ci = stats::bootstrap_change_of(&a, &b, 10_000, seed, CHANGE);
        // A/A: the A repetitions in two interleaved halves.
        let a1: Vec<f64> = a.iter().copied().step_by(2).collect();
        let a2: Vec<f64> = a.iter().copied().skip(1).step_by(2).collect();
        let aa = stats::bootstrap_change_of(&a1, &a2, 10_000, seed ^ 0xaa, CHANGE);
        // The noise floor, as the measurement rules define it: measure the
        // same thing twice (the two halves of A) and take the difference.
        // The widest end of that difference's CI, used before, is a bound
        // far above it on a heavy-tailed baseline: a CPU hog's p99 swings
        // so much between repetitions that it read 115% and hid a −54%
        // change with p = 7e-8.
        let floor = aa.change_pct.abs();
        let min_change = min_change_pct.unwrap_or(floor);
        let spread = stats::sequential::relative_spread(&a);
        let finding = stats::Finding::of(mw.p_value, alpha, &ci, min_change);
        tests.push(Test {
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
            detectable_change_pct: design.detectable_change_pct(spread),
            bootstrap_non_finite: ci.non_finite + aa.non_finite,
            finding,
            verdict: finding.describe(&ci),
        });
    }
    // Stop once every percentile has its answer: a claimed change, or a
    // CI inside ± the minimum meaningful change. Stopping at the first
    // percentile to cross (p50 is the least noisy) would cut the tail's
    // percentiles short of the power the design promises them.
    let deciding: Vec<&Test> = tests
        .iter()
        .filter(|t| decide_on.is_none_or(|p| t.percentile == p))
        .collect();
    let answered = !deciding.is_empty() && deciding.iter().all(|t| is_significant(t) || settled(t));
    let stop = if design.looks.len() == 1 {
        Some(Stop::Fixed)
    } else if answered && deciding.iter().any(|t| is_significant(t)) {
        Some(Stop::Significant)
    } else if answered {
        Some(Stop::NoMeaningfulChange)
    } else if k + 1 == design.looks.len() {
        Some(Stop::MaxReps)
    } else {
        None
    };
    Look {
        reps_per_arm: n,
        tests,
        stop,
        notes,
    }
}

/// A claimed change: below the look's boundary, meaningful, CI excluding 0.
pub fn is_significant(t: &Test) -> bool {
    t.finding.is_claim()
}

/// Settled: neither end of the CI is a meaningful change (judged as
/// ratios, like every minimum-change comparison: with a noisy A/A floor of
/// 400%, a CI of −99%..−20% is not "within ± the floor").
pub fn settled(t: &Test) -> bool {
    !stats::meaningful(t.ci_low_pct, t.min_change_pct)
        && !stats::meaningful(t.ci_high_pct, t.min_change_pct)
}

fn result(
    opts: &ExperimentOptions,
    target: Target,
    reps: Vec<Rep>,
    design: Design,
    look: Look,
) -> ExperimentResult {
    let mut notes = look.notes;
    let n = look.reps_per_arm;
    if n < 9 {
        notes.push(format!(
            "{n} repetitions per arm: below 9 the U test has little power"
        ));
    }
    notes.push("change = the Hodges-Lehmann ratio of B's repetitions to A's (the median of every B/A pair of repetitions), with a bootstrap 95% CI".into());
    if opts.min_change_pct.is_none() {
        notes.push("minimum meaningful change = the A/A floor (the change between the two halves of the A repetitions: the same thing measured twice), per percentile".into());
    }
    let split = match opts.decide_on {
        Some(p) => format!(
            "for p{p} alone (the percentile that decides; the others are shown, not judged)"
        ),
        None => format!("split over {PERCENTILES} percentiles (Bonferroni)"),
    };
    notes.push(format!(
        "α {} {split}{}",
        opts.alpha,
        if design.looks.len() > 1 {
            " and spent over the looks (O'Brien-Fleming-type): each look's boundary is its nominal p"
        } else {
            ""
        }
    ));
    let knob = match (&opts.knob, &opts.probes.passive) {
        (Knob::ProbesOff, Some(source)) => {
            format!("{} (with {})", opts.knob.describe(), source.describe())
        }
        _ => opts.knob.describe(),
    };
    let kind = if design.looks.len() > 1 {
        "group-sequential (O'Brien-Fleming-type α spending)"
    } else {
        "fixed"
    };
    ExperimentResult {
        schema: SCHEMA,
        target,
        knob,
        load: opts.load.url.clone(),
        rate: opts.load.rates.first().copied().unwrap_or(0.0),
        rep_duration_s: opts.load.duration.as_secs_f64(),
        reps,
        tests: look.tests,
        design: DesignReport {
            kind: kind.into(),
            design,
            stopped_after: n,
            stop: look.stop.unwrap_or(Stop::MaxReps),
        },
        environment: crate::runfile::Environment::current(),
        notes,
        disturbed: Vec::new(),
    }
}

/// One line per look of `--reps auto`: where the tests stand.
pub fn look_line(look: &Look) -> String {
    let tests: Vec<String> = look
        .tests
        .iter()
        .map(|t| {
            format!(
                "p{} {:+.1}% [{:+.1}%, {:+.1}%] p = {:.1e} (bound {:.1e}), detects ≥ {:.0}%",
                t.percentile,
                t.change_pct,
                t.ci_low_pct,
                t.ci_high_pct,
                t.p_value,
                t.alpha,
                t.detectable_change_pct
            )
        })
        .collect();
    let next = match look.stop {
        None => "continuing".to_string(),
        Some(s) => format!("stop: {}", stop_words(s)),
    };
    format!(
        "  look at {} per arm: {}; {next}",
        look.reps_per_arm,
        tests.join("; ")
    )
}

fn stop_words(s: Stop) -> &'static str {
    match s {
        Stop::Fixed => "the fixed repetitions ran",
        Stop::Significant => {
            "every percentile answered, with a meaningful change across its boundary"
        }
        Stop::NoMeaningfulChange => "no CI reaches the minimum meaningful change either way",
        Stop::MaxReps => "the maximum repetitions ran",
    }
}

/// Terminal summary.
pub fn text(r: &ExperimentResult) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "experiment on PID {} ({}): B = {}; {} repetitions per arm of {:.1} s at {:.0} req/s ({} design; {})",
        r.target.pid,
        r.target.comm,
        r.knob,
        r.design.stopped_after,
        r.rep_duration_s,
        r.rate,
        r.design.kind,
        stop_words(r.design.stop)
    );
    for t in &r.tests {
        let _ = writeln!(
            out,
            "  p{:<5} A median {:>10}  B median {:>10}  U {:>6.1}  p = {:.2e} (α {:.4})  change {:+.1}% [{:+.1}%, {:+.1}%]  A/A [{:+.1}%, {:+.1}%]\n         → {}\n         power: this design detects a change of ≥ {:.1}% with {:.0}% power (smaller changes may go unseen)",
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
            t.verdict,
            t.detectable_change_pct,
            r.design.design.power * 100.0
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

/// Synthetic repetitions: per-rep p50/p99/p99.9 normal around 100 µs,
/// 1 ms, 3 ms with a 10/15/20% spread; B scaled by `factor`; judged by
/// [`judge_look`] at each of the design's looks until one stops. For the
/// simulations of the tests here and in `confirm`.
#[cfg(test)]
pub(crate) fn simulate_with(
    design: &Design,
    factor: f64,
    seed: u64,
    min_change_pct: Option<f64>,
    decide_on: Option<f64>,
) -> (Look, usize) {
    let mut rng = stats::Rng::new(seed);
    let mut normal = move |mean: f64, cv: f64| {
        let u1 = rng.unit().max(1e-300);
        let u2 = rng.unit();
        let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
        (mean * (1.0 + cv * z)).max(1.0) as u64
    };
    let mut reps = Vec::new();
    for k in 0..design.looks.len() {
        while reps.len() / 2 < design.looks[k] {
            for (arm, f) in [(Arm::A, 1.0), (Arm::B, factor)] {
                reps.push(Rep {
                    arm,
                    count: 10_000,
                    p50_ns: Some((normal(100_000.0, 0.10) as f64 * f) as u64),
                    p99_ns: Some((normal(1_000_000.0, 0.15) as f64 * f) as u64),
                    p999_ns: Some((normal(3_000_000.0, 0.20) as f64 * f) as u64),
                    host_share: None,
                    repeated: false,
                });
            }
        }
        let look = judge_look(&reps, design, k, min_change_pct, seed, decide_on);
        if look.stop.is_some() {
            return (look, k);
        }
    }
    unreachable!("the last look always stops")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleaved_pairs_alternate_their_order_across_looks() {
        use Arm::{A, B};
        assert_eq!(order(3, 0, None), [A, B, B, A, A, B]);
        // The second look goes on where the first stopped (pair 3: BA).
        assert_eq!(order(2, 3, None), [B, A, A, B]);
        // Shuffled, each arm still gets its repetitions.
        let r = order(5, 0, Some(7));
        assert_eq!(r.iter().filter(|&&a| a == A).count(), 5);
    }
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
            reps: Reps::Fixed(2),
            random_order: None,
            alpha: 0.05,
            min_change_pct: None,
            state_file,
            seed: 1,
            probes: ProbeConfig::default(),
            decide_on: None,
        }
    }

    /// A repetition is disturbed from [`HOST_DISTURBED`] on, and not
    /// without a share to judge.
    #[test]
    fn a_repetition_is_disturbed_from_the_threshold_on() {
        let rep = |host_share| Rep {
            arm: Arm::A,
            count: 1,
            p50_ns: None,
            p99_ns: None,
            p999_ns: None,
            host_share,
            repeated: false,
        };
        assert!(rep(Some(HOST_DISTURBED)).host_disturbed());
        assert!(!rep(Some(HOST_DISTURBED / 2.0)).host_disturbed());
        assert!(!rep(None).host_disturbed());
    }

    /// The note counts what was run again, per arm, and what was kept
    /// once the repeats ran out.
    #[test]
    fn disturbed_repetitions_are_said() {
        let rep = |arm, h: f64| Rep {
            arm,
            count: 1,
            p50_ns: None,
            p99_ns: None,
            p999_ns: None,
            host_share: Some(h),
            repeated: h >= HOST_DISTURBED,
        };
        assert_eq!(disturbed_note(&[], &[rep(Arm::A, 0.01)]), None);
        let note = disturbed_note(
            &[rep(Arm::A, 0.4), rep(Arm::A, 0.3), rep(Arm::B, 0.5)],
            &[rep(Arm::A, 0.01), rep(Arm::B, 0.2)],
        )
        .expect("note");
        assert!(
            note.starts_with("3 repetitions (2 A, 1 B) were run again"),
            "{note}"
        );
        assert!(note.contains("1 more were kept"), "{note}");
    }

    /// One deciding percentile keeps the whole α; three split it.
    #[test]
    fn alpha_is_split_over_the_deciding_percentiles_only() {
        let reps = Reps::Auto { max: 20 };
        let (one, three) = (reps.design_for(0.05, 1), reps.design(0.05));
        let last = |d: &Design| *d.nominal_p.last().expect("looks");
        assert!(
            (last(&one) / last(&three) - 3.0).abs() < 0.3,
            "{one:?} {three:?}"
        );
        assert!(last(&one) < 0.05 && last(&one) > 0.04, "{one:?}");
    }

    #[test]
    fn the_load_keeps_off_the_cpus_a_knob_moves_work_to() {
        let opts = options(Knob::parse("rps=lo:0").expect("rps"), PathBuf::new());
        let (load, note) = place_load(&opts.knob, &opts.load, 2);
        assert_eq!(load.cpus, Some(vec![1]));
        assert!(note.expect("note").contains("[1]"));
        let irq = Knob::parse("irq-affinity=24:0-2").expect("irq");
        assert_eq!(place_load(&irq, &opts.load, 4).0.cpus, Some(vec![3]));
        // Nowhere else to go: left where it is, and said so.
        let (load, note) = place_load(&irq, &opts.load, 3);
        assert_eq!(load.cpus, None);
        assert!(note.expect("note").contains("includes it"));
        // A placement is kept where it can be, narrowed, or moved off.
        let mut placed = opts.load.clone();
        placed.cpus = Some(vec![0, 2]);
        assert_eq!(place_load(&irq, &placed, 4).0.cpus, Some(vec![3]));
        placed.cpus = Some(vec![2, 3]);
        assert_eq!(place_load(&irq, &placed, 4).0.cpus, Some(vec![3]));
        placed.cpus = Some(vec![0]);
        assert_eq!(place_load(&opts.knob, &placed, 2).0.cpus, Some(vec![1]));
        // Knobs that move no work leave it alone.
        let (load, note) = place_load(&Knob::Stop(1), &opts.load, 2);
        assert_eq!((load.cpus, note), (None, None));
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

    fn simulate(design: &Design, factor: f64, seed: u64) -> (Look, usize) {
        simulate_with(design, factor, seed, Some(0.0), None)
    }

    /// 200 simulated A/A experiments with `--reps auto` (looks at 5, 10,
    /// 15, 20 per arm, stopping at the first significant look): the
    /// false-positive rate stays at α = 5%, where testing at α at every
    /// look would reach about 13% (Armitage's classic result for 4 looks).
    #[test]
    fn sequential_aa_experiments_keep_the_false_positive_rate() {
        let design = Reps::Auto { max: 20 }.design(0.05);
        let runs = 200;
        let false_positives = (0..runs)
            .filter(|&i| {
                let (look, _) = simulate(&design, 1.0, 1000 + i);
                look.tests.iter().any(is_significant)
            })
            .count();
        let rate = false_positives as f64 / runs as f64;
        eprintln!("A/A false positives with --reps auto: {false_positives}/{runs}");
        assert!(rate <= 0.06, "false-positive rate {rate}");
    }

    /// The power line tells the truth: at the change it says the design
    /// detects with 80% power (for the spread the repetitions have), 200
    /// simulated experiments detect it 80% ± 10 points of the time, and
    /// the line each experiment prints (from its own A repetitions) is
    /// near that change.
    #[test]
    fn the_stated_detectable_change_is_detected_at_the_stated_power() {
        for reps in [Reps::Fixed(12), Reps::Auto { max: 20 }] {
            let design = reps.design(0.05);
            // p99's spread is 15%: the change the design claims to see.
            let change = design.detectable_change_pct(0.15);
            let runs = 200;
            let mut stated = Vec::new();
            let detected = (0..runs)
                .filter(|&i| {
                    let (look, _) = simulate(&design, 1.0 - change / 100.0, 5000 + i);
                    let Some(t) = look.tests.iter().find(|t| t.percentile == 99.0) else {
                        return false;
                    };
                    stated.push(t.detectable_change_pct);
                    is_significant(t)
                })
                .count();
            let power = detected as f64 / runs as f64;
            let typical = stats::median(&stated);
            eprintln!(
                "{reps:?}: change {change:.1}%: detected {detected}/{runs}; stated median {typical:.1}%"
            );
            assert!(
                (power - 0.8).abs() <= 0.10,
                "{reps:?}: power {power} at {change:.1}%"
            );
            assert!(
                (typical / change - 1.0).abs() < 0.2,
                "{reps:?}: stated {typical:.1}% vs {change:.1}%"
            );
        }
    }
}
