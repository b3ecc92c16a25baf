//! `correlator run`: attach the probes, drive the load, analyse, report, in
//! one command. The raw run (kernel timeline + latency) is saved too, so
//! `correlator report` can redo the analysis later.

use std::{
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use anyhow::{Context as _, Result, anyhow};

use crate::{
    analysis::AnalysisOptions,
    latency::capture::LatencyCapture,
    loadgen::{self, LoadOptions, LoadResult},
    probes::ProbeConfig,
    record::{self, Session},
    report::{Report, flame, html, perfetto, terminal},
    runfile::RunFile,
    target::Target,
};

#[derive(Clone, Debug, Default)]
pub struct Outputs {
    /// Report JSON.
    pub json: Option<PathBuf>,
    pub html: Option<PathBuf>,
    pub perfetto: Option<PathBuf>,
    /// Folded stacks of episodes (and beside it, of the baseline).
    pub folded: Option<PathBuf>,
    /// pprof profile of the run's code paths.
    pub pprof: Option<PathBuf>,
    /// The raw run (kernel timeline and latency), for `correlator report`.
    pub run_file: Option<PathBuf>,
}

pub struct RunOptions {
    pub pid: u32,
    pub load: LoadOptions,
    pub probes: ProbeConfig,
    pub analysis: AnalysisOptions,
    pub outputs: Outputs,
    pub progress: bool,
}

/// Runs everything and returns the run and its report.
pub fn run(opts: RunOptions) -> Result<(RunFile, Report)> {
    let target = Target::from_pid(opts.pid)?;
    // Before attaching: a bad option or a dead server fails here, not
    // after the probes are in.
    for p in [
        &opts.outputs.json,
        &opts.outputs.html,
        &opts.outputs.perfetto,
        &opts.outputs.folded,
        &opts.outputs.pprof,
        &opts.outputs.run_file,
    ]
    .into_iter()
    .flatten()
    {
        record::check_writable(p)?;
    }
    loadgen::check(&opts.load)?;
    let phases = opts.load.rates.len() as u32;
    // Probes stay attached until the load is done (the load signals it);
    // the session length is only a backstop.
    let session_len = opts.load.duration * phases + opts.load.timeout + Duration::from_secs(2);
    let done = Arc::new(AtomicBool::new(false));
    let completed = Arc::new(AtomicU64::new(0));
    let slow = Arc::new(AtomicU64::new(0));
    let result: Arc<Mutex<Option<Result<LoadResult>>>> = Arc::default();
    let mut worker = None;
    // The recorder is harness too: it runs where the load generator runs,
    // so it neither competes with the server nor shows up as its preemptor.
    let _pinned = match &opts.load.cpus {
        Some(cpus) => match crate::cpu::PinnedThread::to(cpus) {
            Ok(p) => Some(p),
            Err(e) => {
                log::warn!("cannot keep the recorder on CPUs {cpus:?}: {e:#}");
                None
            }
        },
        None => None,
    };
    let message = {
        let (completed, slow) = (Arc::clone(&completed), Arc::clone(&slow));
        move |t: &crate::timeline::Timeline| {
            format!(
                "{} requests, {} slower than 1 ms | {}",
                completed.load(Ordering::Relaxed),
                slow.load(Ordering::Relaxed),
                record::event_message(t)
            )
        }
    };
    let capture = record::block_on(record::capture(
        target,
        &opts.probes,
        Session {
            duration: session_len,
            done: Some(Arc::clone(&done)),
            bar: opts
                .progress
                .then(|| record::progress_bar(opts.load.duration * phases)),
            message: &message,
            journal_to: opts.outputs.run_file.as_deref(),
        },
        || {
            let (load, done, result) = (opts.load.clone(), Arc::clone(&done), Arc::clone(&result));
            let (completed, slow) = (Arc::clone(&completed), Arc::clone(&slow));
            worker = Some(std::thread::spawn(move || {
                let progress = move |_: u64, c: u64, s: u64| {
                    completed.store(c, Ordering::Relaxed);
                    slow.store(s, Ordering::Relaxed);
                };
                let r = loadgen::run(load, Some(&progress));
                *result
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(r);
                done.store(true, Ordering::Relaxed);
            }));
        },
    ))??;
    // Interrupted or the target exited: stop the load, keep what it measured.
    opts.load.cancel.store(true, Ordering::Relaxed);
    if let Some(w) = worker {
        w.join()
            .map_err(|_| anyhow!("the load generator panicked"))?;
    }
    let load = result
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take()
        .ok_or_else(|| anyhow!("the load generator did not start"))??;
    let mut run = RunFile::from_capture(capture);
    let latency = LatencyCapture::from(&load);
    let report = Report::build(&run, &latency, &opts.analysis);
    run.latency = Some(latency);
    write_outputs(&run, &report, &opts.outputs)?;
    Ok((run, report))
}

/// The online CPUs the target may not run on: where the load generator
/// should run so it does not compete with (and get measured in) the server.
/// None when the target may use every CPU.
pub fn cpus_away_from(pid: u32) -> Option<Vec<usize>> {
    let allowed = Target::from_pid(pid).ok()?.allowed_cpus()?;
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").ok()?;
    let others: Vec<usize> = crate::cpu::parse_cpu_list(&online)?
        .into_iter()
        .filter(|c| !allowed.contains(c))
        .collect();
    (!others.is_empty()).then_some(others)
}

/// Writes the requested views of a report.
pub fn write_outputs(run: &RunFile, report: &Report, out: &Outputs) -> Result<()> {
    let write = |path: &Path, text: String| {
        std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
    };
    if let Some(p) = &out.run_file {
        run.save(p)?;
    }
    if let Some(p) = &out.json {
        write(p, serde_json::to_string_pretty(report)?)?;
    }
    if let Some(p) = &out.html {
        write(p, html::render(report))?;
    }
    if let Some(p) = &out.folded {
        let cp = report.code_paths.as_ref().ok_or_else(|| {
            anyhow!("no code paths in this run: record it with --stacks for --folded")
        })?;
        write(p, flame::folded(&cp.episodes))?;
        write(&baseline_sibling(p), flame::folded(&cp.baseline))?;
    }
    if let Some(p) = &out.pprof {
        if run.stacks.is_empty() {
            anyhow::bail!("no stacks in this run: record it with --stacks for --pprof");
        }
        super::report::pprof::write(report, run, p)?;
    }
    if let Some(p) = &out.perfetto {
        let trace = perfetto::write(report, run, p)?;
        for note in &trace.notes {
            eprintln!("note: Perfetto trace: {note}");
        }
    }
    Ok(())
}

/// Where the baseline's folded stacks go beside `p`: `x.folded` →
/// `x.baseline.folded` (`x` → `x.baseline`).
pub fn baseline_sibling(p: &Path) -> PathBuf {
    let stem = p
        .file_stem()
        .map_or_else(Default::default, |s| s.to_os_string());
    let mut name = stem;
    name.push(".baseline");
    if let Some(ext) = p.extension() {
        name.push(".");
        name.push(ext);
    }
    p.with_file_name(name)
}

/// Prints the terminal summary and where the other views went.
pub fn print_summary(report: &Report, out: &Outputs) {
    print!("{}", terminal::render(report));
    for (what, p) in [
        ("report JSON", &out.json),
        ("HTML report", &out.html),
        ("Perfetto trace", &out.perfetto),
        ("folded stacks (episodes)", &out.folded),
        ("pprof profile", &out.pprof),
        ("run file", &out.run_file),
    ] {
        if let Some(p) = p {
            println!("{what}: {}", p.display());
        }
    }
}
