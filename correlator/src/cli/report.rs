//! `correlator report`: redo the analysis of a saved run.

use std::process::ExitCode;

use anyhow::Result;

use super::args::ReportArgs;
use crate::{
    latency::{capture::LatencyCapture, import},
    runfile::RunFile,
};

pub fn run(args: &ReportArgs) -> Result<ExitCode> {
    if args.run_file.is_dir() {
        // A `correlator watch` directory: list its reports.
        print!("{}", crate::watch::outdir::list_text(&args.run_file)?);
        return Ok(ExitCode::SUCCESS);
    }
    let mut run = RunFile::load(&args.run_file)?;
    if let Some(log) = &args.latency_log {
        let Some(format) = import::Format::from_path(log) else {
            anyhow::bail!(
                "{}: cannot tell the format from the name (.csv, .jsonl, .hlog)",
                log.display()
            );
        };
        if format == import::Format::Hlog {
            anyhow::bail!(
                "{}: an .hlog has no per-request timestamps to line up with kernel events; use a CSV or JSON-lines log",
                log.display()
            );
        }
        let imported = import::import(&import::ImportOptions {
            path: log.clone(),
            format,
            clock: args.clock,
            expected_interval_ns: None,
            tag: None,
            hlog_unit: import::HlogUnit::Ns,
        })?;
        let (start, end) = (run.started_ns, run.ended_ns);
        run.latency = Some(LatencyCapture::from_recorder(
            format!("imported {}", log.display()),
            &imported.recorder,
            &[(start, end, None)],
        ));
    }
    // Borrowed, not cloned: a long fast run's requests are tens of MB.
    let Some(latency) = run.analysed_latency() else {
        anyhow::bail!(
            "{} has no latency (recorded with `correlator record` without --syscalls/--uprobe?); pass --latency-log FILE captured at the same time",
            args.run_file.display()
        );
    };
    let report = crate::report::Report::build(&run, latency, &args.outputs.analysis());
    if args.plan {
        let url = latency
            .source
            .rsplit(' ')
            .next()
            .filter(|u| u.contains("://"))
            .unwrap_or("URL");
        let rate = latency
            .phases
            .first()
            .and_then(|p| p.rate)
            .unwrap_or(1000.0);
        let plans = crate::confirm::plan(&report, run.target.pid, url);
        print!(
            "{}",
            crate::confirm::plan_text(&plans, run.target.pid, url, rate)
        );
        return Ok(ExitCode::SUCCESS);
    }
    let out = args.outputs.outputs(None);
    crate::run::write_outputs(&run, &report, &out)?;
    crate::run::print_summary(&report, &out);
    Ok(ExitCode::SUCCESS)
}
