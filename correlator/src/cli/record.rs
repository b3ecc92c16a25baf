//! `correlator record`: attach, record, write the run file.

use std::{io::IsTerminal as _, process::ExitCode};

use anyhow::Result;

use super::args::RecordArgs;
use crate::{
    probes::ProbeConfig,
    record::{self, RecordOptions},
    summary,
};

pub fn run(a: &RecordArgs) -> Result<ExitCode> {
    let opts = RecordOptions {
        pid: a.pid,
        duration: a.duration,
        out: a.out.clone(),
        probes: ProbeConfig {
            bucket: a.bucket,
            ring_bytes: a.ring_bytes,
            ..a.probes.config()?
        },
        progress: !a.quiet && std::io::stderr().is_terminal(),
    };
    let run = record::record(&opts)?;
    print!("{}", summary::text(&run));
    eprintln!("correlator: run file written to {}", a.out.display());
    Ok(ExitCode::SUCCESS)
}
