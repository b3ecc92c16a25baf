//! The evaluation (`correlator-testkit eval`; `cargo xtask eval`, in the
//! test command): synthetic runs with a known truth and realistic noise,
//! analysed as any run is, scored against the truth.
//!
//! Fourteen scenarios, `--runs` / 14 runs each, every parameter drawn per
//! run:
//! - `null`: an ordinary server and the VM's noise only (a few unmeasured
//!   2-5 ms host stalls, short preemptions by a kernel worker);
//! - `noisy-null`: an ordinary server on this VM in a bad hour, nothing
//!   wrong with it: host stalls of 10-100 ms (steal booked, or not
//!   measured at all), a steal burst of 30-50% for 2-5 s, kworker
//!   preemptions of 2-8 ms, and late sends (the server idle while the
//!   client falls behind). Strong enough that most runs pass the classify
//!   gate, so the cause tests are what keeps them from false claims;
//! - `periodic`: a fault job (10-25 ms of fault handling every 200-600 ms,
//!   ±2% jitter, up to a third of its cycles skipped), half of the runs
//!   with a smaller sporadic neighbour beside it;
//! - `load`: a three-step rate sweep whose slow requests grow with the rate;
//! - one scenario per other server cause kind, 10-20 stalls of 8-20 ms at
//!   Poisson times: `preemption` (a neighbour takes the CPU), `blocking`
//!   (a lock held), `major-faults` (blocked in faults, major faults
//!   counted), `migrations` (moved between CPUs in sched_setaffinity),
//!   `syscall` (on the CPU in a long clone), `hardirq` and `softirq` (the
//!   interrupt's time on the thread's CPU), `on-cpu` (its own code);
//! - two with several causes: `hog+lock` (preemption and blocking, apart
//!   in time) and `three` (a periodic fault job with 4-5 stalls each of a
//!   hog and of long clones beside it: the job holds most of the tail),
//!   whose top claim must be one of their causes and whose recall counts
//!   each.
//!
//! All with the noise of `null` on top. Half of the runs of every scenario
//! are passive recordings of a client raising its rate in three steps
//! (2,000, 4,000, 8,000 req/s): one latency phase without an offered rate,
//! so load correlation is tested on the arrivals (rank correlation), and
//! the sporadic and null runs show whether rising traffic alone is taken
//! for load correlation. Scores: signature accuracy and top
//! (server) cause accuracy over the non-null runs, recall of their causes
//! and the claims beside them, and the share of null runs with any server
//! cause claimed. Exits non-zero below the acceptance (95%, 95%, at most
//! 5%). `--fresh-runs N` adds N runs from a new seed, printed, judged by a
//! binomial test against the same rates (chance alone fails 1 in 1,000).

use anyhow::{Result, bail};
use correlator_common::{Account, Counter};

use crate::{
    analysis::{self, AnalysisOptions, Signature, causes::CauseKind},
    harness::corpus,
    harness::timelines::{MS, SERVER, Synth, T0},
    stats::Rng,
    timeline::syscalls::Site,
};

#[derive(Clone, Debug, clap::Args)]
pub struct EvalArgs {
    /// Synthetic runs in all (a fifth per scenario).
    #[arg(long, default_value_t = 200)]
    pub runs: usize,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Also score this many freshly seeded runs (a new seed every time,
    /// printed: `--runs N --seed S` reproduces them), judged by a binomial
    /// test against the acceptance so that chance alone fails 1 run in 1,000.
    #[arg(long, default_value_t = 0)]
    pub fresh_runs: usize,
    /// The fresh runs' seed (default: from the clock).
    #[arg(long, requires = "fresh_runs")]
    pub fresh_seed: Option<u64>,
    /// Print every run scored wrong and every false claim, with the analysis's evidence.
    #[arg(long)]
    pub verbose: bool,
    /// Also score the labelled corpus in DIR (manifest.json, runs/), and
    /// compare with DIR/scores.json.
    #[arg(long, value_name = "DIR")]
    pub corpus: Option<std::path::PathBuf>,
    /// Write the corpus's scores to DIR/scores.json (after a change to the
    /// analysis, whose commit states the difference printed).
    #[arg(long, requires = "corpus")]
    pub write_scores: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scenario {
    Null,
    NoisyNull,
    Periodic,
    Preemption,
    Blocking,
    Load,
    MajorFaults,
    Migrations,
    Syscall,
    Hardirq,
    Softirq,
    OnCpu,
    /// A CPU hog and a lock holder, apart in time: two causes.
    HogAndLock,
    /// A periodic fault job, a hog and a long syscall: three causes.
    ThreeCauses,
}

impl Scenario {
    const ALL: [Scenario; 14] = [
        Scenario::Null,
        Scenario::NoisyNull,
        Scenario::Periodic,
        Scenario::Preemption,
        Scenario::Blocking,
        Scenario::Load,
        Scenario::MajorFaults,
        Scenario::Migrations,
        Scenario::Syscall,
        Scenario::Hardirq,
        Scenario::Softirq,
        Scenario::OnCpu,
        Scenario::HogAndLock,
        Scenario::ThreeCauses,
    ];

    fn name(self) -> &'static str {
        match self {
            Scenario::Null => "null",
            Scenario::NoisyNull => "noisy-null",
            Scenario::Periodic => "periodic",
            Scenario::Preemption => "preemption",
            Scenario::Blocking => "blocking",
            Scenario::Load => "load",
            Scenario::MajorFaults => "major-faults",
            Scenario::Migrations => "migrations",
            Scenario::Syscall => "syscall",
            Scenario::Hardirq => "hardirq",
            Scenario::Softirq => "softirq",
            Scenario::OnCpu => "on-cpu",
            Scenario::HogAndLock => "hog+lock",
            Scenario::ThreeCauses => "three",
        }
    }

    /// The expected signature and server causes (`None`: nothing; the top
    /// claim must be one of them, and every one should be claimed).
    fn truth(self) -> Option<(Signature, &'static [CauseKind])> {
        use CauseKind as K;
        fn sporadic(causes: &'static [CauseKind]) -> Option<(Signature, &'static [CauseKind])> {
            Some((Signature::Sporadic, causes))
        }
        match self {
            Scenario::Null | Scenario::NoisyNull => None,
            Scenario::Periodic => Some((Signature::Periodic, &[K::PageFaults][..])),
            Scenario::Preemption => sporadic(&[K::Preemption]),
            Scenario::Blocking => sporadic(&[K::Blocking]),
            Scenario::Load => Some((Signature::LoadCorrelated, &[K::Queueing][..])),
            Scenario::MajorFaults => sporadic(&[K::MajorFaults]),
            Scenario::Migrations => sporadic(&[K::Migrations]),
            Scenario::Syscall => sporadic(&[K::Syscall]),
            Scenario::Hardirq => sporadic(&[K::Hardirq]),
            Scenario::Softirq => sporadic(&[K::Softirq]),
            Scenario::OnCpu => sporadic(&[K::OnCpu]),
            Scenario::HogAndLock => sporadic(&[K::Preemption, K::Blocking]),
            Scenario::ThreeCauses => Some((
                Signature::Periodic,
                &[K::PageFaults, K::Preemption, K::Syscall][..],
            )),
        }
    }
}

/// Times of a Poisson process with `n` events over `seconds` (exponential
/// gaps above a 50 ms floor, so events stay apart).
fn poisson_times(rng: &mut Rng, n: usize, seconds: u64) -> Vec<u64> {
    let mean = (seconds * 1_000 * MS) as f64 / (n as f64 + 1.0);
    let floor = 50.0 * MS as f64;
    let mut t = T0 as f64 + 100.0 * MS as f64;
    let end = (T0 + seconds * 1_000 * MS) as f64 - 100.0 * MS as f64;
    let mut out = Vec::new();
    while out.len() < n {
        t += floor + -((1.0 - rng.unit()).ln()) * (mean - floor).max(MS as f64);
        if t >= end {
            break;
        }
        out.push(t as u64);
    }
    out
}

/// The VM's own noise: unmeasured host stalls and short preemptions by a
/// kernel worker, at random times.
fn noise(s: &mut Synth, rng: &mut Rng, seconds: u64) {
    let n = rng.below(6);
    for at in poisson_times(rng, n, seconds) {
        s.stall(at, rng.range(2, 5) * MS);
    }
    let n = rng.below(3);
    for at in poisson_times(rng, n, seconds) {
        let len = rng.range(2, 4) * MS;
        s.stall(at, len);
        s.preempted(SERVER, at, len, "kworker/1:1");
    }
}

/// This VM in a bad hour: what the host and the client do to a server
/// with nothing wrong with it.
fn strong_noise(s: &mut Synth, rng: &mut Rng, seconds: u64) {
    // Host stalls of 10-100 ms: half booked as steal, half not measured.
    let n = rng.range(2, 6) as usize;
    for at in poisson_times(rng, n, seconds) {
        let len = rng.range(10, 100) * MS;
        s.stall(at, len);
        if rng.unit() < 0.5 {
            s.on_cpu(SERVER, at, len, &[(Account::Steal, len)], 0.0);
        }
    }
    // A steal burst: for 2-5 s, the host takes 30-50% of every 10 ms.
    let burst_len = rng.range(2_000, 5_000).min(seconds * 1_000 / 2) * MS;
    let burst_at = T0 + rng.range(0, seconds * 1_000 * MS - burst_len);
    let share = rng.range(30, 50);
    let mut t = burst_at;
    while t < burst_at + burst_len {
        let len = 10 * MS * share / 100;
        s.stall(t, len);
        s.on_cpu(SERVER, t, len, &[(Account::Steal, len)], 0.0);
        t += 10 * MS;
    }
    // Kernel workers preempting the server for 2-8 ms.
    let n = rng.range(3, 8) as usize;
    for at in poisson_times(rng, n, seconds) {
        let len = rng.range(2, 8) * MS;
        s.stall(at, len);
        s.preempted(SERVER, at, len, "kworker/1:2");
    }
    // Late sends: the client falls behind for 5-40 ms while the server
    // waits for requests in epoll_wait.
    let n = rng.range(3, 8) as usize;
    for at in poisson_times(rng, n, seconds) {
        let len = rng.range(5, 40) * MS;
        s.stall(at, len);
        s.blocked(SERVER, at, len, Site::Idle, Some(232));
    }
}

fn periodic(s: &mut Synth, rng: &mut Rng, seconds: u64) {
    let period = rng.range(200, 600) * MS;
    let burst = rng.range(10, 25) * MS;
    let skip = rng.unit() * 0.33;
    let mut at = T0 + rng.range(50, 150) * MS;
    while at + burst < T0 + seconds * 1_000 * MS {
        if rng.unit() >= skip {
            let jitter = ((rng.unit() - 0.5) * 0.04 * period as f64) as i64;
            let t = at.saturating_add_signed(jitter);
            s.stall(t, burst);
            s.on_cpu(SERVER, t, burst, &[], 0.75);
            s.events(t, Counter::PageFaultsMinor, burst / 2_000);
        }
        at += period;
    }
}

fn preemption(s: &mut Synth, rng: &mut Rng, seconds: u64, n: usize, by: &str) {
    for at in poisson_times(rng, n, seconds) {
        let len = rng.range(8, 20) * MS;
        s.stall(at, len);
        s.preempted(SERVER, at, len, by);
    }
}

fn blocking(s: &mut Synth, rng: &mut Rng, seconds: u64, n: usize) {
    for at in poisson_times(rng, n, seconds) {
        let len = rng.range(8, 20) * MS;
        s.stall(at, len);
        s.blocked(SERVER, at, len, Site::Lock, Some(202));
    }
}

/// Stalls of 8-20 ms at Poisson times, each made by `one`.
fn sporadic(
    s: &mut Synth,
    rng: &mut Rng,
    seconds: u64,
    n: usize,
    mut one: impl FnMut(&mut Synth, u64, u64),
) {
    for at in poisson_times(rng, n, seconds) {
        let len = rng.range(8, 20) * MS;
        s.stall(at, len);
        one(s, at, len);
    }
}

/// Blocked in a fault on a page's read, with the major faults counted.
fn major_fault(s: &mut Synth, at: u64, len: u64) {
    s.blocked(SERVER, at, len, Site::Fault, None);
    s.events(
        at,
        Counter::PageFaultsMajor,
        len / (100 * crate::harness::timelines::US),
    );
}

/// Moved between CPUs in sched_setaffinity, waiting for the migration.
fn migration(s: &mut Synth, at: u64, len: u64) {
    let third = len / 3;
    // The sampling timer sees it in the syscall, on the CPU.
    s.on_cpu_sampled(
        SERVER,
        at,
        2 * third,
        &[
            (Account::SyscallCpu, 2 * third),
            (Account::MigrationCpu, 2 * third),
        ],
        &[(Account::SamplesSyscall, 1.0)],
    );
    s.acct(
        SERVER,
        at,
        len,
        Account::Blocked as usize + Site::Migration as usize,
        len - 2 * third,
    );
    s.events(at, Counter::Migrations, 4);
}

/// On the CPU in the kernel in one clone (a fork of a big process), the
/// sampling timer seeing every period of it.
fn long_clone(s: &mut Synth, at: u64, len: u64) {
    s.on_cpu(SERVER, at, len, &[], 0.0);
    let samples = u32::try_from(len / MS).unwrap_or(u32::MAX);
    s.long_syscall(SERVER, 56, at, len - MS, samples.saturating_sub(1));
}

/// One synthetic run of `scenario`, and the server causes it holds
/// beside the scenario's own (a neighbour some periodic runs have).
pub(crate) fn build(scenario: Scenario, rng: &mut Rng) -> (Synth, Vec<CauseKind>) {
    let mut also = Vec::new();
    let seconds = rng.range(6, 10);
    // Half of the runs are passive recordings of a client that raises its
    // rate in steps: no sweep phases, only the arrivals tell the rate.
    let passive = rng.unit() < 0.5;
    let stepped = passive || scenario == Scenario::Load;
    // Three steps, each a third of the run rounded up.
    let step = seconds / 3 + 1;
    let seconds = if stepped { 3 * step } else { seconds };
    let mut s = if stepped {
        let slow_every: &[u64] = if scenario == Scenario::Load {
            &[1_000, 100, 20]
        } else {
            &[0, 0, 0]
        };
        let s = Synth::sweep(&[2_000.0, 4_000.0, 8_000.0], step, slow_every);
        if passive { s.passive() } else { s }
    } else {
        Synth::new(10_000.0, seconds)
    };
    if scenario == Scenario::Load {
        s.on_cpu(SERVER, T0, seconds * 1_000 * MS, &[], 0.0);
        noise(&mut s, rng, seconds);
        return (s, also);
    }
    match scenario {
        Scenario::Periodic => {
            periodic(&mut s, rng, seconds);
            if rng.unit() < 0.5 {
                let n = rng.range(3, 6) as usize;
                preemption(&mut s, rng, seconds, n, "neighbour");
                also.push(CauseKind::Preemption);
            }
        }
        Scenario::Preemption => {
            let n = rng.range(10, 20) as usize;
            preemption(&mut s, rng, seconds, n, "hog")
        }
        Scenario::Blocking => {
            let n = rng.range(10, 20) as usize;
            blocking(&mut s, rng, seconds, n)
        }
        Scenario::MajorFaults => {
            let n = rng.range(10, 20) as usize;
            sporadic(&mut s, rng, seconds, n, major_fault)
        }
        Scenario::Migrations => {
            let n = rng.range(10, 20) as usize;
            sporadic(&mut s, rng, seconds, n, migration)
        }
        Scenario::Syscall => {
            let n = rng.range(10, 20) as usize;
            sporadic(&mut s, rng, seconds, n, long_clone)
        }
        Scenario::Hardirq | Scenario::Softirq => {
            let slot = if scenario == Scenario::Hardirq {
                Account::HardIrq
            } else {
                Account::SoftIrq
            };
            let n = rng.range(10, 20) as usize;
            sporadic(&mut s, rng, seconds, n, |s, at, len| {
                // The whole stall in the interrupt, where the sampling
                // timer finds it.
                s.on_cpu_sampled(
                    SERVER,
                    at,
                    len,
                    &[(slot, len)],
                    &[(Account::SamplesIrq, 1.0)],
                );
                let c = if slot == Account::HardIrq {
                    Counter::HardIrqNs
                } else {
                    Counter::SoftIrqNs
                };
                s.events(at, c, len);
                // By source: a device's interrupts (a run's table then
                // names the device by number), the softirqs' NET_RX.
                let source = if slot == Account::HardIrq {
                    Counter::HardIrqDeviceNs
                } else {
                    Counter::SoftIrqNetRxNs
                };
                s.events(at, source, len);
            })
        }
        Scenario::OnCpu => {
            let n = rng.range(10, 20) as usize;
            sporadic(&mut s, rng, seconds, n, |s, at, len| {
                s.on_cpu(SERVER, at, len, &[], 0.0);
            })
        }
        Scenario::HogAndLock => {
            let n = rng.range(8, 14) as usize;
            preemption(&mut s, rng, seconds, n, "hog");
            let n = rng.range(8, 14) as usize;
            blocking(&mut s, rng, seconds, n);
        }
        Scenario::ThreeCauses => {
            // The periodic job holds most of the tail by construction (two
            // or three times the others' stalls), so the run is periodic.
            periodic(&mut s, rng, seconds);
            let n = rng.range(4, 6) as usize;
            preemption(&mut s, rng, seconds, n, "hog");
            let n = rng.range(4, 6) as usize;
            sporadic(&mut s, rng, seconds, n, long_clone);
        }
        Scenario::NoisyNull => strong_noise(&mut s, rng, seconds),
        Scenario::Null | Scenario::Load => {}
    }
    noise(&mut s, rng, seconds);
    s.ordinary_sleeps(SERVER);
    (s, also)
}

#[derive(Default)]
struct Score {
    runs: usize,
    signature_ok: usize,
    cause_ok: usize,
    false_claims: usize,
    /// Null runs that passed the classify gate (a signature or causes):
    /// only those can make a false claim.
    reached: usize,
    /// Periodic calls on runs whose truth is not periodic.
    false_periodic: usize,
    /// The truth's causes claimed, over all its causes (runs with a cause).
    recalled: usize,
    to_recall: usize,
}

pub fn run(args: &EvalArgs) -> Result<()> {
    let corpus_differs = match &args.corpus {
        Some(dir) => score_corpus(dir, args)?,
        None => false,
    };
    synthetic(args)?;
    if corpus_differs {
        bail!(
            "the corpus's scores differ from corpus/scores.json: if the change is meant, run `cargo xtask eval --write-scores` and state the difference in the commit message"
        );
    }
    Ok(())
}

/// Scores the corpus, prints it and its difference from the committed
/// scores; true when they differ (and were not written).
fn score_corpus(dir: &std::path::Path, args: &EvalArgs) -> Result<bool> {
    let started = std::time::Instant::now();
    let scores = corpus::score(dir, args.verbose)?;
    println!(
        "correlator-testkit eval: the labelled corpus in {} ({:.1} s)",
        dir.display(),
        started.elapsed().as_secs_f64()
    );
    corpus::print(&scores);
    let committed_path = dir.join("scores.json");
    let committed: corpus::Scores = match std::fs::read_to_string(&committed_path) {
        Ok(text) => serde_json::from_str(&text)?,
        Err(_) => corpus::Scores::default(),
    };
    let diff = corpus::diff(&committed, &scores);
    if diff.is_empty() {
        println!("  same scores as {}", committed_path.display());
    } else {
        println!("  difference from {}:", committed_path.display());
        for line in &diff {
            println!("    {line}");
        }
    }
    if args.write_scores {
        std::fs::write(
            &committed_path,
            serde_json::to_string_pretty(&scores)? + "\n",
        )?;
        println!("  wrote {}", committed_path.display());
        return Ok(false);
    }
    Ok(!diff.is_empty())
}

/// The synthetic set: scored against its acceptance; then the fresh runs,
/// if asked for.
fn synthetic(args: &EvalArgs) -> Result<()> {
    let fixed = synthetic_set(args.seed, args.runs, args.verbose);
    let fixed_ok = print_synthetic(&fixed, args.seed).meets_acceptance();
    let mut fresh_ok = true;
    if args.fresh_runs > 0 {
        let seed = args.fresh_seed.unwrap_or_else(clock_seed);
        let fresh = synthetic_set(seed, args.fresh_runs, args.verbose);
        let totals = print_synthetic(&fresh, seed);
        fresh_ok = totals.consistent_with_acceptance();
        println!(
            "  fresh runs {} with the acceptance (binomial, one-sided p < 0.001); reproduce: correlator-testkit eval --runs {} --seed {seed} --verbose",
            if fresh_ok {
                "consistent"
            } else {
                "NOT consistent"
            },
            args.fresh_runs
        );
    }
    if !fixed_ok || !fresh_ok {
        bail!("the evaluation is below its acceptance");
    }
    Ok(())
}

/// A seed from the clock's nanoseconds.
fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64 % 1_000_000_007)
        .unwrap_or(7)
}

/// `runs` synthetic runs from `seed`, scored per scenario.
fn synthetic_set(seed: u64, runs: usize, verbose: bool) -> Vec<(Scenario, Score)> {
    let mut rng = Rng::new(seed);
    let per = (runs / Scenario::ALL.len()).max(1);
    let mut scores: Vec<(Scenario, Score)> = Vec::new();
    for scenario in Scenario::ALL {
        let mut score = Score::default();
        for _ in 0..per {
            let (synth, also) = build(scenario, &mut rng);
            let (run, latency) = synth.build();
            let a = analysis::analyze(&run, &latency, &AnalysisOptions::default());
            let c = &a.classification;
            let top = c
                .causes
                .iter()
                .find(|x| x.cause.is_server())
                .map(|x| x.cause);
            score.runs += 1;
            let not_periodic = scenario
                .truth()
                .is_none_or(|(sig, _)| sig != Signature::Periodic);
            score.false_periodic += usize::from(not_periodic && c.signature == Signature::Periodic);
            let wrong = match scenario.truth() {
                None => {
                    score.reached +=
                        usize::from(c.signature != Signature::None || !c.causes.is_empty());
                    score.false_claims += usize::from(top.is_some());
                    top.is_some()
                }
                Some((sig, causes)) => {
                    let top_ok = top.is_some_and(|t| causes.contains(&t));
                    let claimed: Vec<CauseKind> = c
                        .causes
                        .iter()
                        .filter(|x| x.cause.is_server())
                        .map(|x| x.cause)
                        .collect();
                    score.signature_ok += usize::from(c.signature == sig);
                    score.cause_ok += usize::from(top_ok);
                    score.to_recall += causes.len();
                    score.recalled += causes.iter().filter(|k| claimed.contains(k)).count();
                    let beside: Vec<CauseKind> = claimed
                        .iter()
                        .copied()
                        .filter(|k| !causes.contains(k) && !also.contains(k))
                        .collect();
                    score.false_claims += beside.len();
                    if verbose && !beside.is_empty() {
                        println!(
                            "  claimed beside the truth: {} → {beside:?}",
                            scenario.name()
                        );
                    }
                    c.signature != sig || !top_ok
                }
            };
            if wrong && verbose {
                println!(
                    "  wrong: {} → {:?} / {top:?}: {}",
                    scenario.name(),
                    c.signature,
                    c.evidence
                );
            }
        }
        scores.push((scenario, score));
    }
    scores
}

/// A synthetic set's totals, against the acceptance: signature and top
/// cause right on ≥ 95% of the runs with a cause, a false server claim on
/// ≤ 5% of the null runs, ≥ 50% of the noisy nulls reaching the cause
/// tests.
#[derive(Default)]
struct Totals {
    with_cause: usize,
    signature_ok: usize,
    cause_ok: usize,
    nulls: usize,
    null_false: usize,
    noisy: usize,
    noisy_reached: usize,
    recalled: usize,
    to_recall: usize,
    /// Server causes claimed beside the truth in runs with a cause.
    extra_claims: usize,
}

/// The acceptance's rates.
const MIN_RIGHT: f64 = 0.95;
const MAX_FALSE: f64 = 0.05;
const MIN_REACHED: f64 = 0.5;

impl Totals {
    fn meets_acceptance(&self) -> bool {
        let rate = |a: usize, b: usize| a as f64 / b.max(1) as f64;
        rate(self.signature_ok, self.with_cause) >= MIN_RIGHT
            && rate(self.cause_ok, self.with_cause) >= MIN_RIGHT
            && rate(self.null_false, self.nulls) <= MAX_FALSE
            && rate(self.noisy_reached, self.noisy) >= MIN_REACHED
    }

    /// False when a count is too far from the acceptance for chance: its
    /// one-sided binomial p-value at the acceptance's rate is under 0.001
    /// (four tests, 0.00025 each).
    fn consistent_with_acceptance(&self) -> bool {
        const ALPHA: f64 = 0.001 / 4.0;
        let wrong_sig = self.with_cause - self.signature_ok;
        let wrong_cause = self.with_cause - self.cause_ok;
        let unreached = self.noisy - self.noisy_reached;
        binomial_at_least(wrong_sig, self.with_cause, 1.0 - MIN_RIGHT) >= ALPHA
            && binomial_at_least(wrong_cause, self.with_cause, 1.0 - MIN_RIGHT) >= ALPHA
            && binomial_at_least(self.null_false, self.nulls, MAX_FALSE) >= ALPHA
            && binomial_at_least(unreached, self.noisy, 1.0 - MIN_REACHED) >= ALPHA
    }
}

/// P(X ≥ k) for X ~ Binomial(n, p), summed in logs (n is a few hundred).
fn binomial_at_least(k: usize, n: usize, p: f64) -> f64 {
    if k == 0 {
        return 1.0;
    }
    let mut ln_fact = vec![0.0_f64; n + 1];
    for i in 1..=n {
        ln_fact[i] = ln_fact[i - 1] + (i as f64).ln();
    }
    (k..=n)
        .map(|i| {
            (ln_fact[n] - ln_fact[i] - ln_fact[n - i]
                + i as f64 * p.ln()
                + (n - i) as f64 * (1.0 - p).ln())
            .exp()
        })
        .sum::<f64>()
        .min(1.0)
}

/// Prints a synthetic set's table; returns its totals.
fn print_synthetic(scores: &[(Scenario, Score)], seed: u64) -> Totals {
    let per = scores.first().map_or(0, |(_, s)| s.runs);
    println!(
        "correlator-testkit eval: {} synthetic runs (seed {})",
        per * Scenario::ALL.len(),
        seed
    );
    println!(
        "  {:<12} {:>5} {:>10} {:>10} {:>8} {:>13} {:>9} {:>14}",
        "scenario",
        "runs",
        "signature",
        "top cause",
        "recall",
        "false claims",
        "reached",
        "false periodic"
    );
    let pct = |a: usize, b: usize| 100.0 * a as f64 / b.max(1) as f64;
    let mut t = Totals::default();
    for (s, sc) in scores {
        if s.truth().is_some() {
            // False claims here: server causes claimed beside the truth.
            println!(
                "  {:<12} {:>5} {:>9.1}% {:>9.1}% {:>7.1}% {:>13} {:>9} {:>14}",
                s.name(),
                sc.runs,
                pct(sc.signature_ok, sc.runs),
                pct(sc.cause_ok, sc.runs),
                pct(sc.recalled, sc.to_recall),
                sc.false_claims,
                "-",
                sc.false_periodic
            );
            t.recalled += sc.recalled;
            t.to_recall += sc.to_recall;
            t.extra_claims += sc.false_claims;
            t.signature_ok += sc.signature_ok;
            t.cause_ok += sc.cause_ok;
            t.with_cause += sc.runs;
        } else {
            // False claims here: runs with any server cause claimed.
            println!(
                "  {:<12} {:>5} {:>10} {:>10} {:>8} {:>12.1}% {:>8.0}% {:>14}",
                s.name(),
                sc.runs,
                "-",
                "-",
                "-",
                pct(sc.false_claims, sc.runs),
                pct(sc.reached, sc.runs),
                sc.false_periodic
            );
            t.null_false += sc.false_claims;
            t.nulls += sc.runs;
            if *s == Scenario::NoisyNull {
                t.noisy += sc.runs;
                t.noisy_reached += sc.reached;
            }
        }
    }
    println!(
        "  overall: signature {:.1}% (≥ 95%), top cause {:.1}% (≥ 95%), recall {:.1}%, {} claims beside the truth; false claims on null runs {:.1}% (≤ 5%); noisy nulls reaching the cause tests {:.0}% (≥ 50%)",
        pct(t.signature_ok, t.with_cause),
        pct(t.cause_ok, t.with_cause),
        pct(t.recalled, t.to_recall),
        t.extra_claims,
        pct(t.null_false, t.nulls),
        pct(t.noisy_reached, t.noisy),
    );
    t
}

#[cfg(test)]
mod tests {
    use super::binomial_at_least;

    /// A hard-IRQ cause whose episodes' IRQ time was a device's is named
    /// by the run's device IRQ with most time, and confirmation plans to
    /// move that IRQ to the CPUs the server does not use.
    #[test]
    fn a_device_irq_is_named_and_moved_by_number() {
        use crate::{
            analysis::CauseKind,
            confirm::{knob_for, movable_device_irq},
            report::{Report, confirmation::Plan},
        };
        let mut rng = crate::stats::Rng::new(7);
        let (synth, _) = super::build(super::Scenario::Hardirq, &mut rng);
        let (mut run, latency) = synth.build();
        run.device_irqs = vec![
            crate::timeline::irqs::DeviceIrq {
                irq: 36,
                name: "virtio1-req.0".into(),
                affinity: Some("1".into()),
                count: 50_000,
                ns: 40_000_000,
                ..Default::default()
            },
            crate::timeline::irqs::DeviceIrq {
                irq: 38,
                name: "virtio2-input.0".into(),
                affinity: Some("0-1".into()),
                count: 10,
                ns: 20_000,
                ..Default::default()
            },
        ];
        let report = Report::build(&run, &latency, &Default::default());
        let cause = report
            .classification
            .causes
            .iter()
            .find(|c| c.cause == CauseKind::Hardirq)
            .expect("the hard-IRQ cause");
        assert!(
            cause.evidence.contains("IRQ 36 (virtio1-req.0)"),
            "{}",
            cause.evidence
        );
        assert!(
            report
                .families
                .iter()
                .any(|f| f.detail.as_deref() == Some("IRQ 36 (virtio1-req.0)")),
            "{:?}",
            report
                .families
                .iter()
                .map(|f| &f.detail)
                .collect::<Vec<_>>()
        );
        assert_eq!(movable_device_irq(&report), Some(36));
        let plan = knob_for(
            CauseKind::Hardirq,
            &report,
            &cause.evidence,
            Some(&(vec![1], vec![0])),
            true,
            cause,
        );
        assert!(
            matches!(&plan, Plan::Knob { knob, .. } if knob == "irq-affinity=36:0"),
            "{plan:?}"
        );
        // Without the device table (timer ticks, IPIs, older runs): the
        // server is moved instead.
        run.device_irqs.clear();
        let report = Report::build(&run, &latency, &Default::default());
        assert_eq!(movable_device_irq(&report), None);
    }

    #[test]
    fn binomial_tail_matches_scipy() {
        // Exact sums in rationals (Python's fractions and math.comb).
        for (k, n, p, want) in [
            (3, 10, 0.05, 0.011_503_557_379_296_874),
            (1, 1, 0.5, 0.5),
            (7, 80, 0.05, 0.105_285_250_949_078_2),
            (0, 40, 0.05, 1.0),
        ] {
            let got = binomial_at_least(k, n, p);
            assert!(
                (got - want).abs() < 1e-9,
                "P(X ≥ {k} | {n}, {p}) = {got}, scipy {want}"
            );
        }
    }
}
