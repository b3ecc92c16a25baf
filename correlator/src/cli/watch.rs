//! `correlator watch`: the always-on flight recorder.

use std::process::ExitCode;

use anyhow::Result;

use super::args::WatchArgs;
use crate::{
    target::TargetSpec,
    watch::{self, WatchOptions},
};

pub fn run(a: &WatchArgs) -> Result<ExitCode> {
    let target = match (&a.pid, &a.comm, &a.cgroup) {
        (Some(pid), _, _) => TargetSpec::Pid(*pid),
        (_, Some(comm), _) => TargetSpec::Comm(comm.clone()),
        (_, _, Some(dir)) => TargetSpec::Cgroup(dir.clone()),
        // clap's group requires one of them.
        (None, None, None) => anyhow::bail!("give --pid, --comm or --cgroup"),
    };
    if !(50.0..100.0).contains(&a.percentile) {
        anyhow::bail!(
            "--percentile {}: give a tail percentile in [50, 100)",
            a.percentile
        );
    }
    let summary = watch::watch(WatchOptions {
        target,
        probes: a.probes.config()?,
        keep: a.keep,
        after: a.after,
        window: a.window,
        slo: a.slo,
        percentile: a.percentile,
        check_every: a.check_every,
        idle_priority: a.scheduling == crate::cli::args::Scheduling::Idle,
        out: a.out.clone(),
        max_reports_per_hour: a.max_reports_per_hour,
        max_disk: a.max_disk,
        listen: a.listen,
        max_requests: a.max_requests,
        perfetto: a.perfetto,
        duration: a.duration,
    })?;
    eprintln!(
        "correlator watch: stopped; {} report(s) written, {} over the hourly budget, {} restart(s) followed",
        summary.reports.len(),
        summary.suppressed,
        summary.restarts
    );
    Ok(ExitCode::SUCCESS)
}
