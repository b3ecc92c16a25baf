//! `correlator run`: attach, drive the load, explain the tail.

use std::{io::IsTerminal as _, process::ExitCode};

use anyhow::Result;

use super::args::RunArgs;

pub fn run(args: &RunArgs) -> Result<ExitCode> {
    let run_file = args.run_file.clone().or_else(|| {
        Some(
            args.outputs
                .out
                .as_ref()
                .map_or_else(|| "correlator.run".into(), |o| o.with_extension("run")),
        )
    });
    // `--out x.run` once wrote the report over the run file it names by
    // default (both x.run): refused before attaching, in one line.
    if let (Some(o), Some(r)) = (&args.outputs.out, &run_file)
        && o == r
    {
        anyhow::bail!(
            "--out {} is also the run file's path: name the report .json, or give --run-file",
            o.display()
        );
    }
    let out = args.outputs.outputs(run_file);
    let mut load = args.spec.options(&args.load)?;
    if load.cpus.is_none() {
        load.cpus = crate::run::cpus_away_from(args.pid);
    }
    // Before attaching: a bad --candidate is one line, not a failure after
    // the run.
    for c in &args.candidate {
        crate::experiment::knobs::Knob::parse(c)?;
    }
    let confirm_load = load.clone();
    let opts = crate::run::RunOptions {
        pid: args.pid,
        load,
        probes: args.probes.config()?,
        analysis: args.outputs.analysis(),
        outputs: out.clone(),
        progress: !args.quiet && std::io::stderr().is_terminal(),
    };
    let (run, mut report) = crate::run::run(opts)?;
    if let Some(n) = args.confirm {
        crate::run::print_summary(&report, &out);
        println!();
        report.confirmation = crate::confirm::run(
            &report,
            args.pid,
            &confirm_load,
            &crate::confirm::Request {
                count: n,
                candidates: &args.candidate,
                allow_stop: &args.allow_stop,
                state_file: &args.state_file,
            },
            |line| eprintln!("{line}"),
        )?;
        // The report's views again, now with the confirmations.
        let views = crate::run::Outputs {
            json: out.json.clone(),
            html: out.html.clone(),
            ..Default::default()
        };
        crate::run::write_outputs(&run, &report, &views)?;
        println!("CONFIRMATION");
        print!("{}", crate::confirm::text(&report.confirmation));
        if let Some(h) = report.confirmation.iter().find_map(|c| c.headline()) {
            println!("{h}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    crate::run::print_summary(&report, &out);
    Ok(ExitCode::SUCCESS)
}
