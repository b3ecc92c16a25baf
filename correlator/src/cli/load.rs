//! `correlator load`: open-loop load with honest latency.

use std::{io::IsTerminal as _, process::ExitCode};

use anyhow::Result;

use super::args::LoadArgs;
use crate::loadgen;

pub fn run(args: &LoadArgs) -> Result<ExitCode> {
    let opts = args.spec.options(&args.url)?;
    let bar = (!args.quiet && !args.json && std::io::stderr().is_terminal())
        .then(|| crate::record::progress_bar(args.spec.duration * args.spec.rate.len() as u32));
    let report = |elapsed_ns: u64, completed: u64, slow: u64| {
        if let Some(bar) = &bar {
            bar.set_position(elapsed_ns / 1_000_000);
            bar.set_message(format!(
                "{completed} requests completed, {slow} slower than 1 ms"
            ));
        }
    };
    let mut result = loadgen::run(opts, Some(&report))?;
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    if let Some(path) = &args.hlog {
        loadgen::output::write_hlog(&mut result, path)?;
    }
    let json = loadgen::output::json(&result);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&json)?);
    } else {
        print!("{}", loadgen::output::text(&json));
    }
    Ok(ExitCode::SUCCESS)
}
