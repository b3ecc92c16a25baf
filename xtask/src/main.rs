//! Developer tasks. `cargo xtask test` is what CI runs (through .ci/run and
//! the README); `cargo xtask demo` is the README's first command after set-up;
//! `cargo xtask bench ...` measures overheads as ratios within one run.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail};
use clap::{Parser, Subcommand};

mod bench;
mod bench_loadgen;
mod bench_redis;
mod bench_watch;
mod corpus;
mod layers;

#[derive(Parser)]
#[command(name = "xtask")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Format check, layers, clippy (-D warnings), the unit tests, the
    /// fast live tier (live tests need root + BPF), then the evaluation;
    /// each live test's time at the end. `--full` also runs the full tier
    /// (every live variant, repeated runs, long soaks).
    Test {
        /// Run the full tier too (the tests marked `#[ignore = "full tier..."]`).
        #[arg(long)]
        full: bool,
    },
    /// Build, check the machine, and run the demo scenario suite end to end.
    Demo,
    /// Check correlator's one-way layering (the list in correlator/src/lib.rs).
    Layers,
    /// Score the analysis on the labelled corpus (corpus/, against its
    /// committed scores) and on synthetic runs with a known truth; fails
    /// below the synthetic acceptance or when the corpus's scores changed.
    Eval {
        /// Write the corpus's new scores to corpus/scores.json.
        #[arg(long)]
        write_scores: bool,
    },
    /// The labelled corpus (corpus/manifest.json): record runs of a case.
    Corpus {
        #[command(subcommand)]
        which: corpus::Corpus,
    },
    /// Benchmarks (ratios against a baseline measured in the same run).
    Bench {
        #[command(subcommand)]
        which: bench::Bench,
    },
}

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

pub fn run(cmd: &mut Command) -> Result<()> {
    eprintln!("xtask: {cmd:?}");
    let status = cmd
        .current_dir(workspace_root())
        .status()
        .with_context(|| format!("cannot start {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed: {status}");
    }
    Ok(())
}

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

pub fn build_release() -> Result<PathBuf> {
    run(cargo().args([
        "build",
        "--release",
        "-p",
        "correlator",
        "--bin",
        "correlator",
    ]))?;
    Ok(workspace_root().join("target/release/correlator"))
}

/// The helper programs of the tests, benchmarks and evaluation
/// (`correlator-testkit`, not the product: built with the `testkit`
/// feature, so the release `correlator` holds none of it).
pub fn build_testkit() -> Result<PathBuf> {
    run(cargo().args([
        "build",
        "--release",
        "-p",
        "correlator",
        "--features",
        "testkit",
        "--bin",
        "correlator-testkit",
    ]))?;
    Ok(testkit_path())
}

/// Where cargo puts `correlator-testkit` in a release build.
fn testkit_path() -> PathBuf {
    workspace_root().join("target/release/correlator-testkit")
}

fn test(full: bool) -> Result<()> {
    let started = std::time::Instant::now();
    let tier = if full { "full" } else { "fast" };
    // Each phase's time, printed at the end.
    let mut phases: Vec<(&str, f64)> = Vec::new();
    let mut phase_start = std::time::Instant::now();
    let mut lap = |name: &'static str, phases: &mut Vec<(&str, f64)>| {
        phases.push((name, phase_start.elapsed().as_secs_f64()));
        phase_start = std::time::Instant::now();
    };
    run(cargo().args(["fmt", "--all", "--", "--check"]))?;
    layers::run()?;
    run(cargo().args([
        // The default members: the eBPF crate only builds for the BPF
        // target (through correlator/build.rs), never for the host. The
        // testkit feature builds the helpers the tests drive.
        "clippy",
        "--all-targets",
        "--release",
        "--features",
        "correlator/testkit",
        "--",
        "-D",
        "warnings",
    ]))?;
    lap(
        "fmt, layers, clippy (with the build of dependencies)",
        &mut phases,
    );
    // Unit tests (the library's, the binaries', xtask's) measure nothing
    // live: both CPUs.
    run(cargo().args([
        "test",
        "--release",
        "--features",
        "correlator/testkit",
        "--lib",
        "--bins",
    ]))?;
    lap("unit tests (with their build)", &mut phases);
    // The integration tests one at a time: live tests measure a shared
    // 2-core machine and must not perturb each other.
    let remeasured = workspace_root().join("target/tmp/host-remeasured.txt");
    let times = workspace_root().join("target/tmp/live-times.txt");
    let _ = std::fs::remove_file(&remeasured);
    let _ = std::fs::remove_file(&times);
    let mut args = vec![
        "test",
        "--release",
        "--features",
        "correlator/testkit",
        "--test",
        "tests",
        "--",
        "--test-threads=1",
    ];
    if full {
        args.push("--include-ignored");
    }
    let tests = run(cargo().args(&args));
    lap("integration and live tests (with their build)", &mut phases);
    print_times(&times, tier);
    // A passing test's output is captured: say here which live tests were
    // measured again because the host disturbed an attempt (tests/host.rs).
    if let Ok(text) = std::fs::read_to_string(&remeasured) {
        eprintln!(
            "xtask: attempts of live tests discarded because the host disturbed them ({}):\n{text}",
            remeasured.display()
        );
    }
    tests?;
    // The testkit the integration tests just built (a `cargo build -p
    // correlator` of it would unify features differently and rebuild).
    let evaluated = eval_with(&testkit_path(), false);
    lap("eval", &mut phases);
    for (name, secs) in &phases {
        eprintln!("xtask: {secs:>7.1} s  {name}");
    }
    evaluated?;
    eprintln!(
        "xtask: test ({tier} tier) took {:.1} min in all",
        started.elapsed().as_secs_f64() / 60.0
    );
    Ok(())
}

/// Each live test's time (from `live-times.txt`, written by the tests'
/// `host::attempts`: waits for a quiet host and re-measured attempts
/// included), the tier's total, and the slowest ten.
fn print_times(path: &Path, tier: &str) {
    let Ok(text) = std::fs::read_to_string(path) else {
        eprintln!("xtask: no live test times ({} missing)", path.display());
        return;
    };
    let mut rows: Vec<(String, f64, String, String)> = text
        .lines()
        .filter_map(|l| {
            let mut f = l.split('\t');
            let name = f.next()?.to_string();
            let secs = f.next()?.parse().ok()?;
            Some((name, secs, f.next()?.to_string(), f.next()?.to_string()))
        })
        .collect();
    eprintln!("xtask: live tests ({tier} tier), in the order they ran:");
    for (name, secs, attempts, outcome) in &rows {
        eprintln!("  {secs:>7.1} s  {name} ({attempts} attempt(s), {outcome})");
    }
    let total: f64 = rows.iter().map(|r| r.1).sum();
    eprintln!(
        "xtask: {} live tests took {:.1} min in all",
        rows.len(),
        total / 60.0
    );
    rows.sort_by(|a, b| b.1.total_cmp(&a.1));
    eprintln!("xtask: the slowest ten:");
    for (name, secs, _, _) in rows.iter().take(10) {
        eprintln!("  {secs:>7.1} s  {name}");
    }
}

/// `correlator-testkit eval`: the labelled corpus, then 420 + 140 synthetic runs (see
/// harness/eval.rs and harness/corpus.rs).
fn eval(write_scores: bool) -> Result<()> {
    eval_with(&build_testkit()?, write_scores)
}

fn eval_with(testkit: &Path, write_scores: bool) -> Result<()> {
    let mut cmd = Command::new(testkit);
    // The fixed set (seed 1) against the committed acceptance, and a
    // freshly seeded set each time, its seed printed.
    cmd.args(["eval", "--runs", "420", "--fresh-runs", "140", "--corpus"])
        .arg(workspace_root().join("corpus"));
    if write_scores {
        cmd.arg("--write-scores");
    }
    run(&mut cmd)
}

fn demo() -> Result<()> {
    let bin = build_release()?;
    run(Command::new(&bin).arg("doctor"))?;
    // Every injected cause, one after the other, with the report of each.
    let out = workspace_root().join("target/demo");
    run(Command::new(&bin).arg("demo").arg("--out").arg(&out))
}

fn main() -> Result<()> {
    match Cli::parse().task {
        Task::Test { full } => test(full),
        Task::Demo => demo(),
        Task::Layers => layers::run(),
        Task::Eval { write_scores } => eval(write_scores),
        Task::Bench { which } => bench::run(which),
        Task::Corpus { which } => corpus::run(which),
    }
}
