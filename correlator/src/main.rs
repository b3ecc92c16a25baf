use std::{io::IsTerminal as _, process::ExitCode};

use anyhow::Result;
use clap::Parser as _;
use correlator::{
    cli::{Cli, Command},
    doctor,
    probes::ProbeConfig,
    record::{self, RecordOptions},
    summary,
    timeline::runfile::RunFile,
    workload,
};

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(e) => {
            // One line: what is wrong and what to do.
            eprintln!("correlator: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Record {
            pid,
            duration,
            out,
            follow_children,
            bucket,
            min_offcpu,
            quiet,
            ring_bytes,
        } => {
            let opts = RecordOptions {
                pid,
                duration,
                out: out.clone(),
                probes: ProbeConfig {
                    follow_children,
                    bucket,
                    min_offcpu_record: min_offcpu,
                    ring_bytes,
                    ..ProbeConfig::default()
                },
                progress: !quiet && std::io::stderr().is_terminal(),
            };
            let run = record::record(&opts)?;
            print!("{}", summary::text(&run));
            eprintln!("correlator: run file written to {}", out.display());
        }
        Command::Summary { run_file, json } => {
            let run = RunFile::load(&run_file)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&summary::json(&run))?);
            } else {
                print!("{}", summary::text(&run));
            }
        }
        Command::Doctor => {
            let checks = doctor::run_checks();
            if !doctor::print(&checks) {
                return Ok(ExitCode::FAILURE);
            }
        }
        Command::Workload(args) => workload::run(&args)?,
    }
    Ok(ExitCode::SUCCESS)
}
