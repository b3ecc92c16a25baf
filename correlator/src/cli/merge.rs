//! `correlator merge`: histograms merged, never percentiles averaged.
//!
//! A fleet is compared by merging: each host's watch writes report
//! directories, and merging their run files gives the fleet's latency
//! distribution. Client-side latency (from the intended send time, `run`)
//! and server-side latency (arrival or first read to last write, `watch` and
//! `record --syscalls`) time different spans, so one merge takes one kind.

use std::{path::Path, process::ExitCode};

use anyhow::{Context as _, Result, bail};

use super::args::MergeArgs;
use crate::{
    latency::{Distribution, capture::LatencyCapture, table},
    runfile::RunFile,
    watch::outdir,
};

/// Which span a run's latency times.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// From the intended send time to the response (`correlator run`).
    Client,
    /// From the request's arrival in the socket (or its first read) to the
    /// response's write (passive).
    Server,
}

impl Kind {
    fn title(self) -> &'static str {
        match self {
            Kind::Client => "latency from the intended send time",
            Kind::Server => "server-side latency (arrival or first read to response write)",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Client => "client-side",
            Kind::Server => "server-side",
        }
    }
}

/// A run file, or a watch report directory's run file.
fn run_file(path: &Path) -> std::path::PathBuf {
    if path.is_dir() {
        path.join(outdir::RUN_FILE)
    } else {
        path.to_path_buf()
    }
}

/// The latency a report of the run analyses, and its kind.
fn latency_of(run: &RunFile) -> Option<(&LatencyCapture, Kind)> {
    let kind = if run.latency.is_some() {
        Kind::Client
    } else {
        Kind::Server
    };
    run.analysed_latency().map(|l| (l, kind))
}

pub fn run(a: &MergeArgs) -> Result<ExitCode> {
    let (runs, json) = (&a.runs, a.json);
    let mut merged = Distribution::new();
    let mut sources = Vec::new();
    let mut kind: Option<Kind> = None;
    for path in runs {
        let file = run_file(path);
        let run = RunFile::load(&file).with_context(|| format!("reading {}", file.display()))?;
        let Some((latency, k)) = latency_of(&run) else {
            bail!(
                "{} has no latency to merge (written by `correlator run`, or `watch` / `record --syscalls`?)",
                file.display()
            );
        };
        match kind {
            Some(first) if first != k => bail!(
                "{} holds {} latency and the runs before it {}: they time different spans and are not merged together",
                file.display(),
                k.name(),
                first.name()
            ),
            _ => kind = Some(k),
        }
        merged.merge(&latency.merged());
        sources.push(format!(
            "{} (PID {} {})",
            file.display(),
            run.target.pid,
            run.target.comm
        ));
    }
    let kind = kind.unwrap_or(Kind::Client);
    let summary = merged.summary();
    if json {
        let v = serde_json::json!({
            "schema": "correlator.merge/v1",
            "runs": sources,
            "kind": kind.name(),
            "latency": summary,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "merged {} latency of {} runs (histograms merged, not percentiles averaged):",
            kind.name(),
            runs.len()
        );
        for s in &sources {
            println!("  {s}");
        }
        print!("{}", table(kind.title(), &summary));
    }
    Ok(ExitCode::SUCCESS)
}
