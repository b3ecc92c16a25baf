//! `correlator merge`: histograms merged, never percentiles averaged.

use std::process::ExitCode;

use anyhow::Result;

use super::args::MergeArgs;
use crate::{
    latency::{Distribution, table},
    runfile::RunFile,
};

pub fn run(a: &MergeArgs) -> Result<ExitCode> {
    let (runs, json) = (&a.runs, a.json);
    let mut merged = Distribution::new();
    let mut sources = Vec::new();
    for path in runs {
        let run = RunFile::load(path)?;
        let Some(latency) = &run.latency else {
            anyhow::bail!(
                "{} has no latency to merge (written by `correlator run`?)",
                path.display()
            );
        };
        merged.merge(&latency.merged());
        sources.push(format!(
            "{} (PID {} {})",
            path.display(),
            run.target.pid,
            run.target.comm
        ));
    }
    let summary = merged.summary();
    if json {
        let v = serde_json::json!({"schema": "correlator.merge/v1", "runs": sources, "latency": summary});
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "merged latency of {} runs (histograms merged, not percentiles averaged):",
            runs.len()
        );
        for s in &sources {
            println!("  {s}");
        }
        print!("{}", table("latency from the intended send time", &summary));
    }
    Ok(ExitCode::SUCCESS)
}
