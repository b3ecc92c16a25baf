//! Command-line interface (clap). Thin: parse, call, print.

use std::{path::PathBuf, time::Duration};

use clap::{Parser, Subcommand};

use crate::workload::WorkloadArgs;

#[derive(Debug, Parser)]
#[command(
    name = "correlator",
    version,
    about = "Tells you why a server's latency tail spikes",
    long_about = "correlator attaches to a running server, counts the kernel events that hit it \
                  (page faults, context switches, migrations, IRQs, softirqs) on a timeline \
                  with eBPF, and lines them up with its request latency.\n\n\
                  Start with `correlator doctor` to check this machine."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Record the kernel events of a process into a run file.
    #[command(
        long_about = "Attaches eBPF probes to a process and records its kernel events (per-CPU \
                      counts in time buckets, plus off-CPU intervals) until the duration ends, \
                      Ctrl-C, or the process exits. What was captured is always written.\n\n\
                      Needs root, or CAP_BPF + CAP_PERFMON."
    )]
    Record {
        /// Process to watch (all its threads, including threads created later).
        #[arg(long, short)]
        pid: u32,
        /// How long to record (e.g. 30s, 2m).
        #[arg(long, short, default_value = "30s", value_parser = humantime::parse_duration)]
        duration: Duration,
        /// Run file to write.
        #[arg(long, short, default_value = "correlator.run")]
        out: PathBuf,
        /// Also watch processes the target forks.
        #[arg(long)]
        follow_children: bool,
        /// Width of a time bucket, rounded down to a power of two ns (the
        /// default 1ms gives 524.288 µs buckets).
        #[arg(long, default_value = "1ms", value_parser = humantime::parse_duration)]
        bucket: Duration,
        /// Off-CPU intervals at least this long get their own record.
        #[arg(long, default_value = "50us", value_parser = humantime::parse_duration)]
        min_offcpu: Duration,
        /// No progress bar.
        #[arg(long, short)]
        quiet: bool,
        /// Kernel ring-buffer size in bytes (power-of-two pages); tests use a
        /// tiny one to force and check loss accounting.
        #[arg(long, default_value_t = 8 << 20, hide = true)]
        ring_bytes: u32,
    },
    /// Print the event totals of a run file.
    Summary {
        /// Run file written by `correlator record`.
        run_file: PathBuf,
        /// Print JSON (schema correlator.summary/v1) instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Check that this machine can record: kernel, BTF, tracefs, privileges, attach.
    Doctor,
    /// Test helper: do known work after a line on stdin (for ground-truth tests).
    #[command(hide = true)]
    Workload(WorkloadArgs),
}
