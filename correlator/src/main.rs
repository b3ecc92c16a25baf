use std::{io::IsTerminal as _, process::ExitCode};

use anyhow::Result;
use clap::Parser as _;
use correlator::{
    cli::{Cli, Command, LatencyArgs, LoadArgs, Op},
    doctor, loadgen,
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
        Command::Testserver(args) => loadgen::testserver::run(&args)?,
        Command::Load(args) => load(&args)?,
        Command::Latency(args) => latency(&args)?,
        Command::Memcheck { rate, seconds } => {
            let rec = loadgen::recorder::synthetic_run(rate, seconds);
            println!(
                "{} requests: peak RSS {} MiB ({} kept with exact timestamps, {} over the cap, {} time buckets)",
                rec.phases[0].completed,
                loadgen::recorder::peak_rss_kib().unwrap_or(0) / 1024,
                rec.kept.len(),
                rec.kept_over_cap,
                rec.buckets.len()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn load(args: &LoadArgs) -> Result<()> {
    use loadgen::protocol::{KvOp, Target};
    let op = match args.op {
        Op::Ping => KvOp::Ping,
        Op::Get => KvOp::Get { keys: args.keys },
        Op::Set => KvOp::Set {
            keys: args.keys,
            value_size: args.value_size,
        },
    };
    let opts = loadgen::LoadOptions {
        url: args.url.clone(),
        target: Target::parse(&args.url, &op)?,
        rates: args.rate.clone(),
        duration: args.duration,
        warmup: args.warmup,
        connections: args.connections,
        timeout: args.timeout,
        closed_loop: args.closed_loop,
        rt_pacer: args.rt_pacer,
    };
    let total_ms = args.duration.as_millis() as u64 * args.rate.len() as u64;
    let bar = (!args.quiet && !args.json && std::io::stderr().is_terminal()).then(|| {
        let bar = indicatif::ProgressBar::new(total_ms);
        if let Ok(style) =
            indicatif::ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {msg}")
        {
            bar.set_style(style);
        }
        bar
    });
    let report = |elapsed_ns: u64, completed: u64| {
        if let Some(bar) = &bar {
            bar.set_position(elapsed_ns / 1_000_000);
            bar.set_message(format!("{completed} requests completed"));
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
    Ok(())
}

fn latency(args: &LatencyArgs) -> Result<()> {
    use correlator::latency::{import, table};
    let format = match args
        .format
        .or_else(|| import::Format::from_path(&args.file))
    {
        Some(f) => f,
        None => anyhow::bail!(
            "{}: cannot tell the format from the name; pass --format csv|jsonl|hlog",
            args.file.display()
        ),
    };
    let imported = import::import(&import::ImportOptions {
        path: args.file.clone(),
        format,
        clock: args.clock,
        expected_interval_ns: args
            .expected_interval
            .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
    })?;
    let observed = imported.recorder.phases[0].corrected.summary();
    let modelled = imported.modelled.as_ref().map(|m| m.summary());
    if args.json {
        let v = serde_json::json!({
            "schema": "correlator.latency/v1",
            "file": args.file,
            "format": format,
            "requests": imported.requests,
            "errors": imported.errors,
            "observed": observed,
            "modelled": modelled,
            "clock_offset": imported.clock_offset,
            "notes": imported.notes,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "{}: {} requests, {} errors",
            args.file.display(),
            imported.requests,
            imported.errors
        );
        print!("{}", table("observed latency", &observed));
        if let Some(m) = &modelled {
            print!(
                "{}",
                table("closed-loop corrected (MODEL, not observations)", m)
            );
        }
        for n in &imported.notes {
            println!("  note: {n}");
        }
    }
    Ok(())
}
