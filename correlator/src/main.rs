use std::{io::IsTerminal as _, process::ExitCode};

use anyhow::Result;
use clap::Parser as _;
use correlator::{
    cli::{Cli, Command, LatencyArgs, LoadArgs, LoadSpec, Op, ReportArgs, ReportOutputs, RunArgs},
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
            sample_hz,
            quiet,
            ring_bytes,
            passive,
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
                    passive: passive.source()?,
                    sample_hz,
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
        Command::DemoServer(args) => correlator::demo::server::run(&args)?,
        Command::DemoHog(args) => correlator::demo::hog::run(&args)?,
        Command::Load(args) => load(&args)?,
        Command::Latency(args) => latency(&args)?,
        Command::Run(args) => run_cmd(&args)?,
        Command::Report(args) => report_cmd(&args)?,
        Command::Merge { runs, json } => merge_cmd(&runs, json)?,
        Command::Experiment(args) => experiment_cmd(&args)?,
        Command::Compare {
            a,
            b,
            metric,
            alpha,
            min_change,
            seed,
            json,
        } => {
            use correlator::stats;
            let (sa, sb) = (
                stats::inputs::read(&a, metric)?,
                stats::inputs::read(&b, metric)?,
            );
            let mut c = stats::compare(&sa.values, &sb.values, alpha, min_change, seed);
            c.notes
                .insert(0, format!("A: {}; B: {}", sa.source, sb.source));
            if json {
                println!("{}", serde_json::to_string_pretty(&c)?);
            } else {
                println!("{:<4} {:>5} {:>14}", "", "n", "median");
                println!("{:<4} {:>5} {:>14.6}", "A", c.n_a, c.median_a);
                println!("{:<4} {:>5} {:>14.6}", "B", c.n_b, c.median_b);
                println!(
                    "Mann-Whitney U = {}, two-sided p = {:.6} ({:?}); change of the median {:+.1}% (bootstrap 95% CI {:+.1}%..{:+.1}%)",
                    c.u, c.p_value, c.method, c.change_pct, c.ci_low_pct, c.ci_high_pct
                );
                println!(
                    "verdict (α = {}, minimum change {}%): {}",
                    c.alpha, c.min_change_pct, c.verdict
                );
                for n in &c.notes {
                    println!("  note: {n}");
                }
            }
        }
        Command::Demo {
            scenario,
            out,
            duration,
            rate,
            json,
        } => return demo_cmd(&scenario, out, duration, rate, json.as_deref()),
        Command::SynthRun {
            out,
            seconds,
            requests,
            events,
        } => correlator::analysis::synthetic::run(seconds, requests, events).save(&out)?,
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

fn load_options(url: &str, spec: &LoadSpec) -> Result<loadgen::LoadOptions> {
    use loadgen::protocol::{KvOp, Target};
    let op = match spec.op {
        Op::Ping => KvOp::Ping,
        Op::Get => KvOp::Get { keys: spec.keys },
        Op::Set => KvOp::Set {
            keys: spec.keys,
            value_size: spec.value_size,
        },
    };
    Ok(loadgen::LoadOptions {
        url: url.to_string(),
        target: Target::parse(url, &op)?,
        rates: spec.rate.clone(),
        duration: spec.duration,
        warmup: spec.warmup,
        connections: spec.connections,
        timeout: spec.timeout,
        closed_loop: spec.closed_loop,
        rt_pacer: spec.rt_pacer,
        cancel: std::sync::Arc::default(),
        cpus: match &spec.load_cpus {
            Some(list) => Some(correlator::workload::parse_cpu_list(list).ok_or_else(|| {
                anyhow::anyhow!("--load-cpus {list:?}: expected a CPU list like 0 or 0-3,6")
            })?),
            None => None,
        },
    })
}

fn load(args: &LoadArgs) -> Result<()> {
    let opts = load_options(&args.url, &args.spec)?;
    let bar = (!args.quiet && !args.json && std::io::stderr().is_terminal()).then(|| {
        correlator::record::progress_bar(args.spec.duration * args.spec.rate.len() as u32)
    });
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

fn outputs(o: &ReportOutputs, run_file: Option<std::path::PathBuf>) -> correlator::run::Outputs {
    correlator::run::Outputs {
        json: o.out.clone(),
        html: o.html.clone(),
        perfetto: o.perfetto.clone(),
        run_file,
    }
}

fn analysis_options(o: &ReportOutputs) -> correlator::analysis::AnalysisOptions {
    correlator::analysis::AnalysisOptions {
        slo_ns: o
            .slo
            .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
    }
}

fn run_cmd(args: &RunArgs) -> Result<()> {
    let run_file = args.run_file.clone().or_else(|| {
        Some(
            args.outputs
                .out
                .as_ref()
                .map_or_else(|| "correlator.run".into(), |o| o.with_extension("run")),
        )
    });
    let out = outputs(&args.outputs, run_file);
    let mut load = load_options(&args.load, &args.spec)?;
    if load.cpus.is_none() {
        load.cpus = correlator::run::cpus_away_from(args.pid);
    }
    let opts = correlator::run::RunOptions {
        pid: args.pid,
        load,
        probes: ProbeConfig {
            follow_children: args.follow_children,
            min_offcpu_record: args.min_offcpu,
            passive: args.passive.source()?,
            sample_hz: args.sample_hz,
            ..ProbeConfig::default()
        },
        analysis: analysis_options(&args.outputs),
        outputs: out.clone(),
        progress: !args.quiet && std::io::stderr().is_terminal(),
    };
    let (_, report) = correlator::run::run(opts)?;
    correlator::run::print_summary(&report, &out);
    Ok(())
}

fn report_cmd(args: &ReportArgs) -> Result<()> {
    use correlator::latency::{capture::LatencyCapture, import};
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
        })?;
        let (start, end) = (run.started_ns, run.ended_ns);
        run.latency = Some(LatencyCapture::from_recorder(
            format!("imported {}", log.display()),
            &imported.recorder,
            &[(start, end, None)],
        ));
    }
    let latency = match (&run.latency, &run.server_latency) {
        (Some(client), _) => client.clone(),
        // A passive recording: the server-side latency is the one to analyse.
        (None, Some(server)) => server.latency.clone(),
        (None, None) => anyhow::bail!(
            "{} has no latency (recorded with `correlator record` without --syscalls/--uprobe?); pass --latency-log FILE captured at the same time",
            args.run_file.display()
        ),
    };
    let report =
        correlator::report::Report::build(&run, &latency, &analysis_options(&args.outputs));
    let out = outputs(&args.outputs, None);
    correlator::run::write_outputs(&run, &report, &out)?;
    correlator::run::print_summary(&report, &out);
    Ok(())
}

fn merge_cmd(runs: &[std::path::PathBuf], json: bool) -> Result<()> {
    use correlator::latency::{Distribution, table};
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
    Ok(())
}

fn demo_cmd(
    scenario: &str,
    out: std::path::PathBuf,
    duration: std::time::Duration,
    rate: f64,
    json: Option<&std::path::Path>,
) -> Result<ExitCode> {
    use correlator::demo::{Scenario, suite};
    let scenarios = if scenario == "all" {
        Scenario::ALL.to_vec()
    } else {
        vec![
            Scenario::ALL
                .into_iter()
                .find(|s| s.name() == scenario)
                .ok_or_else(|| {
                    let names: Vec<&str> = Scenario::ALL.iter().map(|s| s.name()).collect();
                    anyhow::anyhow!(
                        "unknown scenario {scenario:?}; one of: all, {}",
                        names.join(", ")
                    )
                })?,
        ]
    };
    let online = correlator::workload::online_cpu_count().unwrap_or(1);
    if online < 2 {
        anyhow::bail!(
            "the demo needs 2 CPUs (server on CPU 1, load on CPU 0); this machine has {online}"
        );
    }
    let opts = suite::SuiteOptions {
        scenarios,
        out_dir: out.clone(),
        duration,
        rate,
    };
    println!("{}", suite::header());
    let outcomes = suite::run_suite(&opts, |o| println!("{}", suite::row(o)))?;
    let bad = outcomes.iter().filter(|o| !o.correct).count();
    if let Some(path) = json {
        std::fs::write(path, serde_json::to_string_pretty(&outcomes)?)?;
    }
    println!(
        "\n{} of {} scenarios attributed correctly; HTML reports in {}/ (e.g. {})",
        outcomes.len() - bad,
        outcomes.len(),
        out.display(),
        outcomes
            .first()
            .map(|o| o.html.display().to_string())
            .unwrap_or_default()
    );
    Ok(if bad == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn experiment_cmd(args: &correlator::cli::ExperimentArgs) -> Result<()> {
    use correlator::experiment::{self, knobs::Knob};
    if args.restore {
        println!("{}", experiment::restore_from(&args.state_file)?);
        return Ok(());
    }
    let (Some(pid), Some(url)) = (args.pid, args.load.as_deref()) else {
        anyhow::bail!("--pid and --load are required");
    };
    let knob = match (&args.knob, &args.apply, &args.revert) {
        (Some(k), _, _) => Knob::parse(k)?,
        (None, Some(apply), Some(revert)) => Knob::Command {
            apply: apply.clone(),
            revert: revert.clone(),
        },
        _ => anyhow::bail!("give --knob NAME=VALUE, or --apply CMD --revert CMD"),
    };
    let spec = LoadSpec {
        rate: vec![args.rate],
        duration: args.rep_duration,
        warmup: args.warmup,
        connections: args.connections,
        timeout: std::time::Duration::from_secs(2),
        closed_loop: false,
        rt_pacer: false,
        load_cpus: None,
        op: Op::Ping,
        keys: 10_000,
        value_size: 64,
    };
    let mut load = load_options(url, &spec)?;
    load.cpus = correlator::run::cpus_away_from(pid);
    let opts = experiment::ExperimentOptions {
        pid,
        load,
        knob,
        reps: args.reps,
        random_order: matches!(args.order, correlator::cli::RepOrder::Random).then_some(args.seed),
        alpha: args.alpha,
        min_change_pct: args.min_change,
        state_file: args.state_file.clone(),
        seed: args.seed,
        probes: correlator::probes::ProbeConfig {
            passive: args.passive.source()?,
            ..correlator::probes::ProbeConfig::default()
        },
    };
    let result = experiment::run(&opts, |i, rep| {
        eprintln!(
            "  rep {:>2} {:?}: {} samples, p50 {}, p99 {}, p99.9 {}",
            i + 1,
            rep.arm,
            rep.count,
            rep.p50_ns.map_or("-".into(), correlator::latency::fmt_ns),
            rep.p99_ns.map_or("-".into(), correlator::latency::fmt_ns),
            rep.p999_ns.map_or("-".into(), correlator::latency::fmt_ns)
        );
    })?;
    print!("{}", experiment::text(&result));
    if let Some(p) = &args.out {
        std::fs::write(p, serde_json::to_string_pretty(&result)?)?;
    }
    if let Some(p) = &args.html {
        std::fs::write(p, experiment::html(&result))?;
    }
    Ok(())
}
