//! Benchmarks. Every figure is a ratio against a baseline measured in the
//! same run, because these machines are noisy.

use anyhow::Result;
use clap::Subcommand;

#[derive(Subcommand)]
pub enum Bench {
    /// Probe cost: ns per program run, and the slowdown of a context-switch
    /// heavy load with correlator attached vs not vs bpftrace.
    Probes,
}

pub fn run(which: Bench) -> Result<()> {
    match which {
        Bench::Probes => probes(),
    }
}

fn probes() -> Result<()> {
    anyhow::bail!("not implemented yet")
}
