//! `correlator experiment`: change one knob, interleaved repetitions (AB BA …), a verdict.

use std::process::ExitCode;

use anyhow::Result;

use super::args::{ExperimentArgs, LoadSpec, Op, RepOrder, RepsArg};
use crate::experiment::{self, knobs::Knob};

pub fn run(args: &ExperimentArgs) -> Result<ExitCode> {
    if args.restore {
        println!("{}", experiment::restore_from(&args.state_file)?);
        return Ok(ExitCode::SUCCESS);
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
    let mut load = spec.options(url)?;
    load.cpus = crate::run::cpus_away_from(pid);
    let opts = experiment::ExperimentOptions {
        pid,
        load,
        knob,
        reps: match args.reps {
            RepsArg::Fixed(n) => experiment::Reps::Fixed(n),
            RepsArg::Auto => experiment::Reps::Auto { max: args.max_reps },
        },
        random_order: matches!(args.order, RepOrder::Random).then_some(args.seed),
        alpha: args.alpha,
        min_change_pct: args.min_change,
        state_file: args.state_file.clone(),
        seed: args.seed,
        probes: crate::probes::ProbeConfig {
            passive: args.passive.source()?,
            ..crate::probes::ProbeConfig::default()
        },
        decide_on: None,
    };
    // A long experiment's result is never lost to an output path that
    // cannot be written at its end.
    for p in [&args.out, &args.html].into_iter().flatten() {
        crate::record::check_writable(p)?;
    }
    print_plan(&opts);
    let result = experiment::run(
        &opts,
        |i, rep| {
            eprintln!(
                "  rep {:>2} {:?}: {} samples, p50 {}, p99 {}, p99.9 {}{}",
                i + 1,
                rep.arm,
                rep.count,
                rep.p50_ns.map_or("-".into(), crate::latency::fmt_ns),
                rep.p99_ns.map_or("-".into(), crate::latency::fmt_ns),
                rep.p999_ns.map_or("-".into(), crate::latency::fmt_ns),
                match rep.host_share {
                    Some(h) if rep.repeated => format!(
                        "; the host took {:.0}% of the CPU: measured the host, run again",
                        h * 100.0
                    ),
                    Some(h) if h >= 0.01 => format!("; host {:.0}%", h * 100.0),
                    _ => String::new(),
                }
            );
        },
        |look, design| {
            if design.looks.len() > 1 {
                eprintln!("{}", experiment::look_line(look));
            }
        },
    )?;
    print!("{}", experiment::text(&result));
    if let Some(p) = &args.out {
        std::fs::write(p, serde_json::to_string_pretty(&result)?)?;
    }
    if let Some(p) = &args.html {
        std::fs::write(p, experiment::html(&result))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// What the experiment will do and how long it can take, before it starts.
fn print_plan(opts: &experiment::ExperimentOptions) {
    let per_rep = opts.load.duration + opts.load.warmup;
    let (what, most) = match opts.reps {
        experiment::Reps::Fixed(n) => (format!("{n} repetitions per arm"), n),
        experiment::Reps::Auto { max } => (
            format!(
                "repetitions added {} per arm at a time until the answer is clear, at most {max} per arm (group-sequential design, α spent over the looks)",
                experiment::LOOK_EVERY
            ),
            max,
        ),
    };
    let (most, with_reruns) = experiment::time_bound(per_rep, most);
    eprintln!(
        "plan: {what}; each {:.1} s; at most {:.0} s in all ({:.0} s if the host disturbs repetitions, which run again)",
        per_rep.as_secs_f64(),
        most.as_secs_f64(),
        with_reruns.as_secs_f64()
    );
}
