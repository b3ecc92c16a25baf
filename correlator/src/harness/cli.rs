//! The `correlator-testkit` command line: the helper programs of the tests,
//! the benchmarks and the evaluation. They are not the product, so they
//! are not in `correlator`'s own command line: this binary is built only
//! with the `testkit` feature (`cargo xtask` and the integration tests
//! enable it), and is never installed.

use std::{path::PathBuf, process::ExitCode};

use anyhow::Result;
use clap::{Parser, Subcommand};

use super::{
    eval::{self, EvalArgs},
    memcheck,
    pathserver::{self, PathServerArgs},
    proxy::{self, ProxyArgs},
    symbench::{self, SymbenchArgs},
    synthetic,
    testserver::{self, TestServerArgs},
    watchbench::{self, WatchBenchArgs},
    workload::{self, WorkloadArgs},
};

#[derive(Debug, Parser)]
#[command(
    name = "correlator-testkit",
    about = "Helper programs of correlator's tests, benchmarks and evaluation (not the product)"
)]
pub struct TestkitCli {
    #[command(subcommand)]
    pub command: Helper,
}

#[derive(Debug, Subcommand)]
pub enum Helper {
    /// Do known work after a line on stdin (for ground-truth tests).
    Workload(WorkloadArgs),
    /// Test server: line protocol and HTTP, with periodic stalls.
    Testserver(TestServerArgs),
    /// Thread-per-connection server calling a backend for every request
    /// (optionally through a small connection pool).
    Proxy(ProxyArgs),
    /// Test server whose spikes come from named functions (code paths).
    Pathserver(PathServerArgs),
    /// Write a large synthetic run file (with latency).
    SynthRun(SynthRunArgs),
    /// Peak memory of the latency recorder over a long synthetic run.
    Memcheck(MemcheckArgs),
    /// watch's flight recorder on a synthetic feed, RSS over a long simulated run.
    WatchMemcheck(WatchBenchArgs),
    /// Synthetic runs with a known truth, scored (exits non-zero below the
    /// acceptance).
    Eval(EvalArgs),
    /// Time to symbolize many unique stacks.
    Symbench(SymbenchArgs),
}

/// Arguments of `correlator-testkit synth-run`.
#[derive(Debug, clap::Args)]
pub struct SynthRunArgs {
    #[arg(long)]
    pub out: PathBuf,
    #[arg(long, default_value_t = 60)]
    pub seconds: u64,
    #[arg(long, default_value_t = 3_000_000)]
    pub requests: u64,
    #[arg(long, default_value_t = 10_000_000)]
    pub events: u64,
}

/// Arguments of `correlator-testkit memcheck`.
#[derive(Debug, clap::Args)]
pub struct MemcheckArgs {
    #[arg(long, default_value_t = 50_000)]
    pub rate: u64,
    #[arg(long, default_value_t = 600)]
    pub seconds: u64,
}

/// Runs one helper.
pub fn execute(cli: TestkitCli) -> Result<ExitCode> {
    match cli.command {
        Helper::Workload(a) => workload::run(&a)?,
        Helper::Testserver(a) => testserver::run(&a)?,
        Helper::Pathserver(a) => pathserver::run(&a)?,
        Helper::Proxy(a) => proxy::run(&a)?,
        Helper::SynthRun(a) => synthetic::run(a.seconds, a.requests, a.events).save(&a.out)?,
        Helper::Memcheck(a) => {
            let rec = memcheck::synthetic_run(a.rate, a.seconds);
            println!(
                "{} requests: peak RSS {} MiB ({} kept with exact timestamps, {} over the cap, {} time buckets)",
                rec.phases[0].completed,
                memcheck::peak_rss_kib().unwrap_or(0) / 1024,
                rec.kept.len(),
                rec.kept_over_cap,
                rec.buckets.len()
            );
        }
        Helper::WatchMemcheck(a) => watchbench::run(&a)?,
        Helper::Symbench(a) => symbench::run(&a)?,
        Helper::Eval(a) => eval::run(&a)?,
    }
    Ok(ExitCode::SUCCESS)
}
