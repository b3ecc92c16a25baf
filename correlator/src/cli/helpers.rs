//! Hidden subcommands: the helper targets of tests and benchmarks (the
//! harness, which only this dispatch imports).

use std::process::ExitCode;

use anyhow::Result;

use super::args::{MemcheckArgs, SynthRunArgs};
use crate::{
    demo::{hog::HogArgs, server::DemoServerArgs},
    harness::{
        memcheck, synthetic,
        testserver::{self, TestServerArgs},
        workload::{self, WorkloadArgs},
    },
};

pub fn workload(a: &WorkloadArgs) -> Result<ExitCode> {
    workload::run(a)?;
    Ok(ExitCode::SUCCESS)
}

pub fn testserver(a: &TestServerArgs) -> Result<ExitCode> {
    testserver::run(a)?;
    Ok(ExitCode::SUCCESS)
}

pub fn pathserver(a: &crate::harness::pathserver::PathServerArgs) -> Result<ExitCode> {
    crate::harness::pathserver::run(a)?;
    Ok(ExitCode::SUCCESS)
}

pub fn demo_server(a: &DemoServerArgs) -> Result<ExitCode> {
    crate::demo::server::run(a)?;
    Ok(ExitCode::SUCCESS)
}

pub fn demo_hog(a: &HogArgs) -> Result<ExitCode> {
    crate::demo::hog::run(a)?;
    Ok(ExitCode::SUCCESS)
}

pub fn synth_run(a: &SynthRunArgs) -> Result<ExitCode> {
    synthetic::run(a.seconds, a.requests, a.events).save(&a.out)?;
    Ok(ExitCode::SUCCESS)
}

pub fn memcheck(a: &MemcheckArgs) -> Result<ExitCode> {
    let rec = memcheck::synthetic_run(a.rate, a.seconds);
    println!(
        "{} requests: peak RSS {} MiB ({} kept with exact timestamps, {} over the cap, {} time buckets)",
        rec.phases[0].completed,
        memcheck::peak_rss_kib().unwrap_or(0) / 1024,
        rec.kept.len(),
        rec.kept_over_cap,
        rec.buckets.len()
    );
    Ok(ExitCode::SUCCESS)
}

pub fn watch_memcheck(a: &crate::harness::watchbench::WatchBenchArgs) -> Result<ExitCode> {
    crate::harness::watchbench::run(a)?;
    Ok(ExitCode::SUCCESS)
}

pub fn symbench(a: &crate::harness::symbench::SymbenchArgs) -> Result<ExitCode> {
    crate::harness::symbench::run(a)?;
    Ok(ExitCode::SUCCESS)
}

pub fn eval(a: &crate::harness::eval::EvalArgs) -> Result<ExitCode> {
    crate::harness::eval::run(a)?;
    Ok(ExitCode::SUCCESS)
}
