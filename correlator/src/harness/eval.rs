//! The evaluation (`correlator-testkit eval`; `cargo xtask eval`, in the
//! test command): synthetic runs with a known truth and realistic noise,
//! analysed as any run is, scored against the truth.
//!
//! Six scenarios, `--runs` / 6 runs each, every parameter drawn per run:
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
//! - `preemption`: a neighbour taking the CPU for 8-20 ms at Poisson times;
//! - `blocking`: a lock held 8-20 ms at Poisson times;
//! - `load`: a three-step rate sweep whose slow requests grow with the rate.
//!
//! All with the noise of `null` on top. Half of the runs of every scenario
//! are passive recordings of a client raising its rate in three steps
//! (2,000, 4,000, 8,000 req/s): one latency phase without an offered rate,
//! so load correlation is tested on the arrivals (rank correlation), and
//! the sporadic and null runs show whether rising traffic alone is taken
//! for load correlation. Scores: signature accuracy and top
//! (server) cause accuracy over the non-null runs, and the share of null
//! runs with any server cause claimed. Exits non-zero below the acceptance
//! (95%, 95%, at most 5%).

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
    /// Print every run scored wrong, with the analysis's evidence.
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
enum Scenario {
    Null,
    NoisyNull,
    Periodic,
    Preemption,
    Blocking,
    Load,
}

impl Scenario {
    const ALL: [Scenario; 6] = [
        Scenario::Null,
        Scenario::NoisyNull,
        Scenario::Periodic,
        Scenario::Preemption,
        Scenario::Blocking,
        Scenario::Load,
    ];

    fn name(self) -> &'static str {
        match self {
            Scenario::Null => "null",
            Scenario::NoisyNull => "noisy-null",
            Scenario::Periodic => "periodic",
            Scenario::Preemption => "preemption",
            Scenario::Blocking => "blocking",
            Scenario::Load => "load",
        }
    }

    /// The expected signature and top server cause (`None`: nothing).
    fn truth(self) -> Option<(Signature, CauseKind)> {
        match self {
            Scenario::Null | Scenario::NoisyNull => None,
            Scenario::Periodic => Some((Signature::Periodic, CauseKind::PageFaults)),
            Scenario::Preemption => Some((Signature::Sporadic, CauseKind::Preemption)),
            Scenario::Blocking => Some((Signature::Sporadic, CauseKind::Blocking)),
            Scenario::Load => Some((Signature::LoadCorrelated, CauseKind::Queueing)),
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

fn blocking(s: &mut Synth, rng: &mut Rng, seconds: u64) {
    let n = rng.range(10, 20) as usize;
    for at in poisson_times(rng, n, seconds) {
        let len = rng.range(8, 20) * MS;
        s.stall(at, len);
        s.blocked(SERVER, at, len, Site::Lock, Some(202));
    }
}

/// One synthetic run of `scenario`.
fn build(scenario: Scenario, rng: &mut Rng) -> Synth {
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
        return s;
    }
    match scenario {
        Scenario::Periodic => {
            periodic(&mut s, rng, seconds);
            if rng.unit() < 0.5 {
                let n = rng.range(3, 6) as usize;
                preemption(&mut s, rng, seconds, n, "neighbour");
            }
        }
        Scenario::Preemption => {
            let n = rng.range(10, 20) as usize;
            preemption(&mut s, rng, seconds, n, "hog")
        }
        Scenario::Blocking => blocking(&mut s, rng, seconds),
        Scenario::NoisyNull => strong_noise(&mut s, rng, seconds),
        Scenario::Null | Scenario::Load => {}
    }
    noise(&mut s, rng, seconds);
    s.ordinary_sleeps(SERVER);
    s
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

/// The synthetic set: scored against its acceptance.
fn synthetic(args: &EvalArgs) -> Result<()> {
    let mut rng = Rng::new(args.seed);
    let per = (args.runs / Scenario::ALL.len()).max(1);
    let mut scores: Vec<(Scenario, Score)> = Vec::new();
    for scenario in Scenario::ALL {
        let mut score = Score::default();
        for _ in 0..per {
            let (run, latency) = build(scenario, &mut rng).build();
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
                Some((sig, cause)) => {
                    score.signature_ok += usize::from(c.signature == sig);
                    score.cause_ok += usize::from(top == Some(cause));
                    c.signature != sig || top != Some(cause)
                }
            };
            if wrong && args.verbose {
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
    println!(
        "correlator-testkit eval: {} synthetic runs (seed {})",
        per * Scenario::ALL.len(),
        args.seed
    );
    println!(
        "  {:<11} {:>5} {:>10} {:>10} {:>13} {:>9} {:>14}",
        "scenario", "runs", "signature", "top cause", "false claims", "reached", "false periodic"
    );
    let pct = |a: usize, b: usize| 100.0 * a as f64 / b.max(1) as f64;
    let (mut sig, mut cause, mut n, mut null_false, mut null_n) = (0, 0, 0, 0, 0);
    let mut noisy_reached = 0.0;
    for (s, sc) in &scores {
        if s.truth().is_some() {
            println!(
                "  {:<11} {:>5} {:>9.1}% {:>9.1}% {:>13} {:>9} {:>14}",
                s.name(),
                sc.runs,
                pct(sc.signature_ok, sc.runs),
                pct(sc.cause_ok, sc.runs),
                "-",
                "-",
                sc.false_periodic
            );
            sig += sc.signature_ok;
            cause += sc.cause_ok;
            n += sc.runs;
        } else {
            println!(
                "  {:<11} {:>5} {:>10} {:>10} {:>12.1}% {:>8.0}% {:>14}",
                s.name(),
                sc.runs,
                "-",
                "-",
                pct(sc.false_claims, sc.runs),
                pct(sc.reached, sc.runs),
                sc.false_periodic
            );
            null_false += sc.false_claims;
            null_n += sc.runs;
            if *s == Scenario::NoisyNull {
                noisy_reached = pct(sc.reached, sc.runs);
            }
        }
    }
    let (sig_pct, cause_pct, false_pct) = (pct(sig, n), pct(cause, n), pct(null_false, null_n));
    println!(
        "  overall: signature {sig_pct:.1}% (≥ 95%), top cause {cause_pct:.1}% (≥ 95%), false claims on null runs {false_pct:.1}% (≤ 5%); noisy nulls reaching the cause tests {noisy_reached:.0}% (≥ 50%)"
    );
    if sig_pct < 95.0 || cause_pct < 95.0 || false_pct > 5.0 || noisy_reached < 50.0 {
        bail!("the evaluation is below its acceptance");
    }
    Ok(())
}
