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
mod layers;

#[derive(Parser)]
#[command(name = "xtask")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Format check, layers, clippy (-D warnings), every test (live ones
    /// need root + BPF), then the evaluation.
    Test,
    /// Build, check the machine, and run the demo scenario suite end to end.
    Demo,
    /// Check correlator's one-way layering (the list in correlator/src/lib.rs).
    Layers,
    /// Score the analysis on synthetic runs with a known truth (signature
    /// and top-cause accuracy, false claims on null runs); fails below the
    /// acceptance.
    Eval,
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
    run(cargo().args(["build", "--release", "-p", "correlator"]))?;
    Ok(workspace_root().join("target/release/correlator"))
}

fn test() -> Result<()> {
    run(cargo().args(["fmt", "--all", "--", "--check"]))?;
    layers::run()?;
    run(cargo().args([
        // The default members: the eBPF crate only builds for the BPF
        // target (through correlator/build.rs), never for the host.
        "clippy",
        "--all-targets",
        "--release",
        "--",
        "-D",
        "warnings",
    ]))?;
    // One test at a time: live tests measure a shared 2-core machine and
    // must not perturb each other.
    let remeasured = workspace_root().join("target/tmp/host-remeasured.txt");
    let _ = std::fs::remove_file(&remeasured);
    let tests = run(cargo().args(["test", "--release", "--", "--test-threads=1"]));
    // A passing test's output is captured: say here which live tests were
    // measured again because the host disturbed an attempt (tests/host.rs).
    if let Ok(text) = std::fs::read_to_string(&remeasured) {
        eprintln!(
            "xtask: attempts of live tests discarded because the host disturbed them ({}):\n{text}",
            remeasured.display()
        );
    }
    tests?;
    eval()
}

/// `correlator eval` on 200 synthetic runs (see harness/eval.rs).
fn eval() -> Result<()> {
    let bin = build_release()?;
    run(Command::new(bin).args(["eval", "--runs", "200"]))
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
        Task::Test => test(),
        Task::Demo => demo(),
        Task::Layers => layers::run(),
        Task::Eval => eval(),
        Task::Bench { which } => bench::run(which),
    }
}
