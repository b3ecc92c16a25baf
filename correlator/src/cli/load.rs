//! `correlator load`: open-loop load with honest latency.

use std::{
    io::IsTerminal as _,
    process::ExitCode,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use anyhow::{Context as _, Result};

use super::args::LoadArgs;
use crate::loadgen;

pub fn run(args: &LoadArgs) -> Result<ExitCode> {
    let opts = args.spec.options(&args.url)?;
    // Ctrl-C or SIGTERM end the run early and keep what was measured: the
    // signal only sets the cancel flag the generator's threads watch.
    let interrupted = interrupt_flags(&opts.cancel)?;
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
    // Interrupted runs exit 128 + the signal, as shells expect, after the
    // results are out.
    Ok(interrupted
        .iter()
        .find(|(_, flag)| flag.load(Ordering::Relaxed))
        .map_or(ExitCode::SUCCESS, |(sig, _)| {
            ExitCode::from(128 + *sig as u8)
        }))
}

/// Registers SIGINT and SIGTERM to set `cancel` and their own flag.
fn interrupt_flags(cancel: &Arc<AtomicBool>) -> Result<Vec<(i32, Arc<AtomicBool>)>> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    [SIGINT, SIGTERM]
        .into_iter()
        .map(|sig| {
            let seen = Arc::new(AtomicBool::new(false));
            signal_hook::flag::register(sig, Arc::clone(cancel))
                .and_then(|_| signal_hook::flag::register(sig, Arc::clone(&seen)))
                .with_context(|| format!("cannot watch signal {sig}"))?;
            Ok((sig, seen))
        })
        .collect()
}
