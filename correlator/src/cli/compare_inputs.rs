//! The sample sets `correlator compare` reads: plain numbers, the
//! repetitions of an experiment, or a directory of runs (one value per run).
//!
//! The measurement rules ask for one value per repetition, so a single run
//! (report JSON or run file) is one value, never its thousands of requests:
//! requests within a run are not independent, and a U test over them would
//! claim significance for drift.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use serde::Deserialize;

use crate::{
    experiment::{self, Arm},
    latency::Distribution,
    report,
    runfile::{self, RunFile},
};

/// One side of a comparison, and where its values came from.
#[derive(Clone, Debug)]
pub struct SampleSet {
    pub values: Vec<f64>,
    /// e.g. "exp.json arm B: p99 per repetition (ns)".
    pub source: String,
}

/// Which tail percentile a JSON input contributes.
#[derive(Clone, Copy, Debug, PartialEq, clap::ValueEnum)]
pub enum Metric {
    P50,
    P99,
    #[value(name = "p99.9")]
    P999,
}

impl Metric {
    pub fn percent(self) -> f64 {
        match self {
            Metric::P50 => 50.0,
            Metric::P99 => 99.0,
            Metric::P999 => 99.9,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Metric::P50 => "p50",
            Metric::P99 => "p99",
            Metric::P999 => "p99.9",
        }
    }
}

/// Reads one side: `FILE` (numbers, one per line), `EXPERIMENT.json[#A|#B]`
/// (per-repetition values of one arm; A, the baseline, if not given), or
/// `DIR` (every report JSON and run file in it, one value each).
pub fn read(spec: &str, metric: Metric) -> Result<SampleSet> {
    let (path, arm) = split_arm(spec)?;
    let set = if path.is_dir() {
        if arm.is_some() {
            bail!("{spec}: #A / #B selects an experiment's arm; {path:?} is a directory");
        }
        from_dir(&path, metric)?
    } else {
        from_file(&path, arm, metric)?
    };
    if set.values.len() < 2 {
        bail!(
            "{spec}: need at least 2 values, found {} ({})",
            set.values.len(),
            set.source
        );
    }
    Ok(set)
}

fn split_arm(spec: &str) -> Result<(PathBuf, Option<Arm>)> {
    match spec.rsplit_once('#') {
        Some((path, "A" | "a")) => Ok((path.into(), Some(Arm::A))),
        Some((path, "B" | "b")) => Ok((path.into(), Some(Arm::B))),
        Some((_, other)) if !Path::new(spec).exists() => {
            bail!("{spec}: unknown arm {other:?} (use #A for the baseline, #B for the treatment)")
        }
        _ => Ok((spec.into(), None)),
    }
}

/// The schema of a JSON document, if it is one of ours.
fn schema(text: &str) -> Option<String> {
    #[derive(Deserialize)]
    struct Probe {
        schema: Option<String>,
    }
    if !text.trim_start().starts_with('{') {
        return None;
    }
    serde_json::from_str::<Probe>(text).ok()?.schema
}

fn from_file(path: &Path, arm: Option<Arm>, metric: Metric) -> Result<SampleSet> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    match schema(&text).as_deref() {
        // v1 (before the design was recorded) has the same repetitions.
        Some(experiment::SCHEMA | experiment::SCHEMA_V1) => {
            from_experiment(path, &text, arm.unwrap_or(Arm::A), metric)
        }
        Some(report::SCHEMA | runfile::SCHEMA) => bail!(
            "{}: one run is one value; put each side's runs in a directory and pass the directories",
            path.display()
        ),
        Some(other) => bail!(
            "{}: schema {other:?} is not something compare reads (numbers, {}, or a directory of runs)",
            path.display(),
            experiment::SCHEMA
        ),
        None if arm.is_some() => bail!(
            "{}: #A / #B selects an experiment's arm; this is not an experiment JSON",
            path.display()
        ),
        None => Ok(SampleSet {
            values: crate::stats::parse_samples(path, &text)?,
            source: format!("{}: one value per line", path.display()),
        }),
    }
}

fn from_experiment(path: &Path, text: &str, arm: Arm, metric: Metric) -> Result<SampleSet> {
    #[derive(Deserialize)]
    struct Experiment {
        reps: Vec<experiment::Rep>,
    }
    let e: Experiment = serde_json::from_str(text)
        .with_context(|| format!("{} is a malformed experiment JSON", path.display()))?;
    let mut values = Vec::new();
    for (i, r) in e.reps.iter().enumerate().filter(|(_, r)| r.arm == arm) {
        let v = match metric {
            Metric::P50 => r.p50_ns,
            Metric::P99 => r.p99_ns,
            Metric::P999 => r.p999_ns,
        };
        let v = v.with_context(|| {
            format!(
                "{}: repetition {} has no {} (fewer than 10 samples above it); compare a lower percentile",
                path.display(),
                i + 1,
                metric.name()
            )
        })?;
        values.push(v as f64);
    }
    Ok(SampleSet {
        values,
        source: format!(
            "{} arm {arm:?}: {} per repetition (ns)",
            path.display(),
            metric.name()
        ),
    })
}

/// One value per run: the metric of the run's whole latency distribution.
fn from_dir(dir: &Path, metric: Metric) -> Result<SampleSet> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read directory {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    let mut values: Vec<f64> = Vec::new();
    for f in &files {
        let text =
            std::fs::read_to_string(f).with_context(|| format!("cannot read {}", f.display()))?;
        let value = match schema(&text).as_deref() {
            Some(report::SCHEMA) => report_value(f, &text, metric)?,
            Some(runfile::SCHEMA) => run_value(f, metric)?,
            // Other files (HTML views, notes) are not runs.
            _ => continue,
        };
        values.push(value);
    }
    let source = format!(
        "{}: {} of each run (ns), {} runs",
        dir.display(),
        metric.name(),
        values.len()
    );
    Ok(SampleSet { values, source })
}

fn not_quoted(path: &Path, metric: Metric) -> anyhow::Error {
    anyhow::anyhow!(
        "{}: {} rests on fewer than 10 samples (not quoted); compare a lower percentile or longer runs",
        path.display(),
        metric.name()
    )
}

fn report_value(path: &Path, text: &str, metric: Metric) -> Result<f64> {
    #[derive(Deserialize)]
    struct Report {
        latency: Latency,
    }
    #[derive(Deserialize)]
    struct Latency {
        percentiles: Vec<crate::latency::Percentile>,
    }
    let r: Report = serde_json::from_str(text)
        .with_context(|| format!("{} is a malformed report JSON", path.display()))?;
    r.latency
        .percentiles
        .iter()
        .find(|p| p.p == metric.percent())
        .and_then(|p| p.value_ns)
        .map(|v| v as f64)
        .ok_or_else(|| not_quoted(path, metric))
}

fn run_value(path: &Path, metric: Metric) -> Result<f64> {
    let run = RunFile::load(path)?;
    let latency = run.latency.with_context(|| {
        format!(
            "{}: a recording without latency (use runs from `correlator run`)",
            path.display()
        )
    })?;
    let d: Distribution = latency.merged();
    d.percentile(metric.percent())
        .value_ns
        .map(|v| v as f64)
        .ok_or_else(|| not_quoted(path, metric))
}
