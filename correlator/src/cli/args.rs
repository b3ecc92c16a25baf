//! The command line's types (clap): every subcommand and its arguments.
//! What each command does lives in its own file beside this one. One piece
//! (over 450 lines) on purpose: `--help` text is read as a whole, and
//! shared groups (`LoadSpec`, `ReportOutputs`, `PassiveArgs`) sit beside
//! the commands that flatten them.

use std::{path::PathBuf, time::Duration};

use clap::{Parser, Subcommand};

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
    Record(RecordArgs),
    /// Print the event totals of a run file.
    Summary(SummaryArgs),
    /// Rewrite a run file: compact (the default format) or the JSON export.
    #[command(
        long_about = "Reads a run file (compact, an unfinished journal, or JSON from any version) and \
                      writes it to OUT: as JSON when OUT ends in .json (for jq, pandas, other tools), \
                      compact otherwise (zstd over MessagePack; see docs/run-file.md)."
    )]
    Convert(ConvertArgs),
    /// Drive a server with open-loop constant-rate load and measure latency honestly.
    #[command(
        long_about = "Open-loop, constant-throughput load (wrk2's method): every request has an \
                      intended send time on a fixed schedule and latency is measured from it, so a \
                      server stall is charged to every request that waited behind it (no \
                      coordinated omission). Requests are pipelined when the server stalls.\n\n\
                      URL schemes: http://host:port/path (HTTP/1.1 GET), redis://host:port (RESP), \
                      memcache://host:port (text protocol), tcp://host:port (one line out, one back)."
    )]
    Load(LoadArgs),
    /// Attach, drive the load, and report why the tail spikes: all in one.
    #[command(
        long_about = "Attaches the probes to --pid, drives open-loop load at --load, lines the \
                      request latencies up with the kernel events on one clock, classifies the \
                      spikes (periodic / load-correlated / sporadic) and ranks their likely causes \
                      with evidence and the experiment that would confirm each. Prints a summary; \
                      --out/--html/--perfetto write the report views. Needs root (or CAP_BPF + CAP_PERFMON)."
    )]
    Run(RunArgs),
    /// See it work: a demo server with injected causes, analysed one by one.
    #[command(
        long_about = "Starts correlator's demo server with one injected latency cause at a time \
                      (GC-like periodic sweep, queueing under a rate sweep, page faults, major \
                      faults, a CPU hog, CPU migrations, lock blocking, softirq bursts, or \
                      nothing), runs the whole pipeline against it, and prints the injected cause \
                      next to what correlator detected. Exits non-zero if any scenario is \
                      misattributed. Needs root and 2+ CPUs (the server runs on CPU 1)."
    )]
    Demo(DemoArgs),
    /// Isolate and re-measure: change one candidate cause (a knob) and judge whether the tail moved.
    #[command(
        long_about = "Runs --reps repetitions of A (baseline) and B (the knob applied), interleaved \
                      in pairs of alternating order, AB BA AB… (or --order random), each a short open-loop load run whose warm-up is \
                      discarded; compares p50/p99/p99.9 with Mann-Whitney U (Bonferroni), a \
                      bootstrap 95% CI of the change, and an A/A floor from the baseline runs.\n\n\
                      Knobs: thp=never|madvise|always, pin=CPULIST, irq-affinity=IRQ:CPULIST, \
                      stop=PID, probes=off; or --apply CMD --revert CMD. Every change is restored on \
                      success, error, Ctrl-C, SIGTERM and panic, and recorded in --state-file first: \
                      after a SIGKILL, `correlator experiment --restore` undoes it."
    )]
    Experiment(ExperimentArgs),
    /// Compare two sets of measurements: U test, bootstrap CI, verdict.
    #[command(
        long_about = "Compares two sample sets with the experiment procedure: Mann-Whitney U \
                      (two-sided), a bootstrap 95% CI of the change of the median, and a verdict \
                      against --min-change.\n\n\
                      Each side is one of:\n  \
                      FILE                 numbers, one per line (# comments allowed)\n  \
                      EXPERIMENT.json[#A|#B]  an experiment's per-repetition --metric values of \
                      arm A (baseline, the default) or B (treatment)\n  \
                      DIR                  a directory of report JSONs / run files: one value \
                      (--metric of the whole run) per run\n\n\
                      One run is one value: requests inside a run are not independent samples."
    )]
    Compare(CompareArgs),
    /// Redo the analysis of a saved run (optionally with an imported latency log).
    Report(ReportArgs),
    /// Merge the latency of several runs (histograms merged, never percentiles averaged).
    Merge(MergeArgs),
    /// Summarise latency captured elsewhere: per-request CSV / JSON lines, or an .hlog.
    #[command(
        long_about = "Reads a per-request latency log (CSV or JSON lines with start_ns and end_ns, \
                      optional status; CLOCK_MONOTONIC or CLOCK_REALTIME) or an HdrHistogram \
                      interval log, and prints its distribution under the percentile rules. \
                      --expected-interval applies HdrHistogram's closed-loop correction, a \
                      model labelled as such."
    )]
    Latency(LatencyArgs),
    /// Always-on flight recorder: stays attached and writes a report when the tail spikes.
    #[command(
        long_about = "Stays attached to a server (--pid, or --comm / --cgroup, re-attached when it \
                      restarts) with passive server-side latency (--syscalls or --uprobe), keeps \
                      the last --keep of kernel timeline and latency in bounded memory, and when \
                      the tail spikes (the --percentile of the last --window over --slo, or the \
                      analysis of the kept window naming a server cause, checked every \
                      --check-every) waits --after and writes the window as a run file and a \
                      report (JSON, HTML, optionally a Perfetto trace) into --out, one directory \
                      per report named by its UTC time. --listen serves OpenMetrics for \
                      Prometheus. Stops on SIGTERM / Ctrl-C, writing a pending report first.\n\n\
                      Needs root, or CAP_BPF + CAP_PERFMON (+ CAP_SYS_PTRACE to read another \
                      user's server): see `correlator doctor` and dist/correlator-watch.service."
    )]
    Watch(WatchArgs),
    /// Check that this machine can record: kernel, BTF, tracefs, privileges, attach.
    Doctor,
    /// The demo server with a switchable latency cause.
    #[command(hide = true)]
    DemoServer(crate::demo::server::DemoServerArgs),
    /// A CPU-bound neighbour in random bursts, pinned to one CPU.
    #[command(hide = true)]
    DemoHog(crate::demo::hog::HogArgs),
}

/// Key-value operation for redis:// and memcache:// targets.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Op {
    Ping,
    Get,
    Set,
}

/// How to drive the load (shared by `load` and `run`).
#[derive(Clone, Debug, clap::Args)]
pub struct LoadSpec {
    /// Requests per second; a list (2000,4000,8000) runs a sweep of phases back to back.
    #[arg(long, short, value_delimiter = ',', required = true)]
    pub rate: Vec<f64>,
    /// Length of each phase.
    #[arg(long, short, default_value = "10s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Start of each phase discarded from the distributions.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub warmup: Duration,
    /// Connections (requests are spread round-robin).
    #[arg(long, short, default_value_t = 8)]
    pub connections: usize,
    /// A request unanswered this long is a timeout (recorded as ≥ this).
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// One request at a time per connection, latency from the actual send
    /// (what most tools do; shown for comparison).
    #[arg(long)]
    pub closed_loop: bool,
    /// Run the pacer thread SCHED_FIFO (root or CAP_SYS_NICE) so it keeps
    /// the schedule on a busy machine; the readers stay at normal priority.
    #[arg(long)]
    pub rt_pacer: bool,
    /// CPUs for the generator's threads, e.g. 0 or 0-3 (`run` default: the
    /// CPUs the server may not use, when there are any).
    #[arg(long)]
    pub load_cpus: Option<String>,
    /// redis/memcache operation.
    #[arg(long, value_enum, default_value = "ping")]
    pub op: Op,
    /// Key space for get/set.
    #[arg(long, default_value_t = 10_000)]
    pub keys: u64,
    /// Value size for set, in bytes.
    #[arg(long, default_value_t = 64)]
    pub value_size: usize,
}

#[derive(Debug, clap::Args)]
pub struct LoadArgs {
    /// Target URL: http://, redis://, memcache:// or tcp:// (loopback or your own namespaces).
    pub url: String,
    #[command(flatten)]
    pub spec: LoadSpec,
    /// Print JSON (schema correlator.load/v1) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Also write an HdrHistogram interval log (1 s intervals).
    #[arg(long)]
    pub hlog: Option<PathBuf>,
    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
}

/// Where the report goes (shared by `run` and `report`).
#[derive(Clone, Debug, clap::Args)]
pub struct ReportOutputs {
    /// Report JSON (schema correlator.report/v2).
    #[arg(long, short)]
    pub out: Option<PathBuf>,
    /// Self-contained HTML report with plots.
    #[arg(long)]
    pub html: Option<PathBuf>,
    /// Native Perfetto trace (protobuf; open in ui.perfetto.dev or
    /// trace_processor): threads, requests, episodes, counters, flows.
    #[arg(long)]
    pub perfetto: Option<PathBuf>,
    /// Folded stacks of episode time (runs recorded with --stacks), for
    /// inferno or flamegraph.pl: FILE holds the episodes' stacks and
    /// FILE's `.baseline` sibling (x.folded → x.baseline.folded) the
    /// baseline windows'; counts are µs.
    #[arg(long)]
    pub folded: Option<PathBuf>,
    /// pprof profile (gzip'd profile.proto, runs recorded with --stacks)
    /// for go tool pprof, Pyroscope, Parca or speedscope: on-CPU samples
    /// (sample type cpu) and off-CPU intervals (off_cpu), in ns, labelled
    /// by cause, family, episode, thread and context; e.g. `go tool pprof
    /// -top -tagfocus cause=blocking -sample_index=off_cpu FILE`.
    #[arg(long)]
    pub pprof: Option<PathBuf>,
    /// Spike threshold (default: max(5 × p50, p50 + 1 ms)).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub slo: Option<Duration>,
    /// The tail the report leads with: episode families are ranked by what
    /// they do to this percentile (e.g. 99, 99.9, 99.99).
    #[arg(long, default_value_t = 99.0, value_parser = percentile)]
    pub percentile: f64,
}

/// `--reps`: a number per arm, or `auto`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RepsArg {
    Fixed(usize),
    Auto,
}

fn reps(s: &str) -> Result<RepsArg, String> {
    if s == "auto" {
        return Ok(RepsArg::Auto);
    }
    s.parse()
        .map(RepsArg::Fixed)
        .map_err(|_| format!("{s}: a number of repetitions per arm, or `auto`"))
}

fn percentile(s: &str) -> Result<f64, String> {
    let p: f64 = s.parse().map_err(|_| format!("{s}: not a number"))?;
    if p > 0.0 && p < 100.0 {
        Ok(p)
    } else {
        Err(format!("{s}: a percentile is between 0 and 100, e.g. 99.9"))
    }
}

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Server process to watch.
    #[arg(long, short)]
    pub pid: u32,
    /// Load target URL (http://, redis://, memcache://, tcp://).
    #[arg(long)]
    pub load: String,
    #[command(flatten)]
    pub spec: LoadSpec,
    #[command(flatten)]
    pub outputs: ReportOutputs,
    /// Save the raw run (kernel timeline + latency) for `correlator report`
    /// (default: next to --out as .run, or correlator.run).
    #[arg(long)]
    pub run_file: Option<PathBuf>,
    #[command(flatten)]
    pub probes: ProbeArgs,
    /// After the analysis, test the top N confirmable causes by experiment
    /// against the same load (knob on/off, repetitions until clear) and
    /// report each confirmed / refuted / inconclusive. Default N: 2.
    #[arg(long, num_args = 0..=1, default_missing_value = "2", value_name = "N")]
    pub confirm: Option<usize>,
    /// With --confirm: also test this knob (e.g. stop=PID of a suspect the
    /// analysis did not name). A stopped process is confirmed only if the
    /// account saw it run while the server waited; other knobs by the
    /// experiment alone. Repeatable.
    #[arg(long, value_name = "KNOB", requires = "confirm")]
    pub candidate: Vec<String>,
    /// Let --confirm stop this process (PID or comm) for its treatment
    /// arm; without it, no process is ever stopped. Repeatable.
    #[arg(long, value_name = "PID|COMM")]
    pub allow_stop: Vec<String>,
    /// Where --confirm records a setting before changing it.
    #[arg(long, default_value = "/tmp/correlator-confirm.state")]
    pub state_file: PathBuf,
    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
}

/// What the probes watch and how finely (shared by `record` and `run`).
#[derive(Clone, Debug, clap::Args)]
pub struct ProbeArgs {
    /// Also watch processes the target forks.
    #[arg(long)]
    pub follow_children: bool,
    /// Off-CPU intervals at least this long get their own record.
    #[arg(long, default_value = "50us", value_parser = humantime::parse_duration)]
    pub min_offcpu: Duration,
    /// On-CPU samples per second and CPU (they split on-CPU time between
    /// user code and fault handling).
    #[arg(long, default_value_t = 997, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub sample_hz: u32,
    /// Capture kernel and user stacks with every on-CPU sample and every
    /// recorded off-CPU interval, so the report names the code paths
    /// (functions) behind each cause. User stacks are walked by frame
    /// pointers: binaries built without them yield their leaf function.
    #[arg(long)]
    pub stacks: bool,
    /// How syscall time is measured. `sampled` (the default) hooks no
    /// syscall: wait sites come from the registers a thread saved entering
    /// the kernel, syscall time on the CPU from the on-CPU samples (± one
    /// sample period per sample), and --syscalls latency from the socket
    /// tracepoints. `exact` hooks every syscall's entry and exit: each
    /// call's kernel time to the ns and a record of each long call, but
    /// every syscall on the machine then takes the kernel's slower path
    /// (~10% of a syscall-bound server's throughput; the report says what
    /// it cost).
    #[arg(long, value_enum, value_name = "HOW")]
    pub syscall_time: Option<crate::probes::SyscallTime>,
    #[command(flatten)]
    pub passive: PassiveArgs,
}

impl ProbeArgs {
    /// The probe settings.
    pub fn config(&self) -> anyhow::Result<crate::probes::ProbeConfig> {
        Ok(crate::probes::ProbeConfig {
            follow_children: self.follow_children,
            min_offcpu_record: self.min_offcpu,
            passive: self.passive.source()?,
            sample_hz: self.sample_hz,
            stacks: self.stacks,
            syscall_time: self.syscall_time.unwrap_or_default(),
            request_start: self.passive.request_start(),
            ..crate::probes::ProbeConfig::default()
        })
    }
}

/// Server-side request latency seen by the probes, without adding load.
#[derive(Clone, Debug, clap::Args)]
pub struct PassiveArgs {
    /// Server-side latency from the target's socket syscalls: a read/recv
    /// that returns data starts a request on that socket, the next
    /// write/send on it ends it. For one-request-one-response protocols
    /// (Redis, memcached, line protocols, HTTP/1.1 keep-alive without
    /// pipelining); the output says when the pattern does not hold.
    #[arg(long, conflicts_with = "uprobe")]
    pub syscalls: bool,
    /// With --syscalls: time each request from its bytes' arrival in the
    /// socket (the sk_data_ready tracepoint, Linux 6.10+), and refuse to
    /// attach where the kernel cannot. This is the default wherever the
    /// kernel can (elsewhere requests are timed from the first read, and
    /// the report says so): the wait of requests queued in the socket
    /// behind a stall is part of what the clients saw.
    #[arg(long, requires = "syscalls", conflicts_with = "from_read")]
    pub from_arrival: bool,
    /// With --syscalls: time each request from the server's first read of
    /// it instead (the server's own service time, without the wait in the
    /// socket).
    #[arg(long, requires = "syscalls")]
    pub from_read: bool,
    /// Server-side latency of a function: BINARY:SYMBOL, each call timed
    /// from entry to return on its thread. A uprobe hit costs microseconds
    /// (about 10 µs on a VM): see the overhead section of the docs.
    #[arg(long, value_name = "BINARY:SYMBOL")]
    pub uprobe: Option<String>,
    /// With --uprobe: time one call in N (the probe still traps on every
    /// call; this cuts the records and the per-call program work, not the
    /// trap). correlator does not detach and re-attach to sample in time:
    /// attaching a uprobe blocked the target ~8 ms each time here.
    #[arg(long, default_value_t = 1, requires = "uprobe", value_parser = clap::value_parser!(u64).range(1..))]
    pub uprobe_every: u64,
}

impl PassiveArgs {
    /// Where requests start: `--from-arrival` insists on arrival,
    /// `--from-read` asks for the first read, neither takes arrival where
    /// the kernel has it.
    pub fn request_start(&self) -> crate::probes::RequestStart {
        use crate::probes::RequestStart;
        if self.from_arrival {
            RequestStart::Arrival
        } else if self.from_read {
            RequestStart::FirstRead
        } else {
            RequestStart::ArrivalWhereAvailable
        }
    }

    pub fn source(&self) -> anyhow::Result<Option<crate::latency::passive::PassiveSource>> {
        use crate::latency::passive::PassiveSource;
        if self.syscalls {
            return Ok(Some(PassiveSource::Syscalls));
        }
        let Some(spec) = &self.uprobe else {
            return Ok(None);
        };
        let (binary, symbol) = spec
            .rsplit_once(':')
            .filter(|(b, s)| !b.is_empty() && !s.is_empty())
            .ok_or_else(|| anyhow::anyhow!("--uprobe {spec:?}: expected BINARY:SYMBOL"))?;
        if !std::path::Path::new(binary).is_file() {
            anyhow::bail!("--uprobe: no such binary {binary:?} (give the path the target runs)");
        }
        Ok(Some(PassiveSource::Uprobe {
            binary: binary.into(),
            symbol: symbol.into(),
            every: self.uprobe_every,
        }))
    }
}

#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// Run file written by `correlator run` (or `record`, with --latency-log),
    /// or a `correlator watch` directory (lists its reports).
    pub run_file: PathBuf,
    /// Latency captured at the same time elsewhere (.csv, .jsonl, .hlog).
    #[arg(long)]
    pub latency_log: Option<PathBuf>,
    /// Clock of the timestamps in --latency-log.
    #[arg(long, value_enum, default_value = "monotonic")]
    pub clock: crate::latency::import::Clock,
    /// Print the experiments that would confirm each cause, as commands
    /// to run by hand (what `run --confirm` would run).
    #[arg(long)]
    pub plan: bool,
    #[command(flatten)]
    pub outputs: ReportOutputs,
}

#[derive(Debug, clap::Args)]
pub struct LatencyArgs {
    /// Log file (.csv, .jsonl or .hlog).
    pub file: PathBuf,
    /// Format (default: from the file extension).
    #[arg(long, value_enum)]
    pub format: Option<crate::latency::import::Format>,
    /// Clock of the timestamps in a per-request log.
    #[arg(long, value_enum, default_value = "monotonic")]
    pub clock: crate::latency::import::Clock,
    /// Closed-loop correction: the interval requests were meant to be sent at.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub expected_interval: Option<Duration>,
    /// .hlog: read only the intervals with this tag (required when the
    /// log holds several).
    #[arg(long)]
    pub tag: Option<String>,
    /// .hlog: unit of the histograms' values (wrk2 and Java tools often
    /// log µs).
    #[arg(long, value_enum, default_value = "ns")]
    pub hlog_unit: crate::latency::import::HlogUnit,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum RepOrder {
    /// Pairs of alternating order (AB BA AB …), so a drift over the run
    /// favours neither arm.
    Interleaved,
    /// Seeded random order.
    Random,
}

#[derive(Debug, clap::Args)]
pub struct ExperimentArgs {
    /// Undo a killed experiment from its state file, and exit.
    #[arg(long)]
    pub restore: bool,
    /// Server process.
    #[arg(long, short, required_unless_present = "restore")]
    pub pid: Option<u32>,
    /// Load target URL (http://, redis://, memcache://, tcp://).
    #[arg(long, required_unless_present = "restore")]
    pub load: Option<String>,
    /// Offered rate, requests per second.
    #[arg(long, short, default_value_t = 5000.0)]
    pub rate: f64,
    /// The one variable changed for B: thp=…, pin=CPUS, cpuset=CPUS (a cpuset cgroup: even the
    /// server's own affinity calls cannot leave it), irq-affinity=IRQ:CPUS, rps=DEV:CPUS,
    /// stop=PID, memory-limit=SIZE|max|Nx (the target's memory cgroup limit, e.g. 512M, max,
    /// 2x), probes=off.
    #[arg(long, conflicts_with_all = ["apply", "revert"])]
    pub knob: Option<String>,
    /// A user command that applies the change (with --revert).
    #[arg(long, requires = "revert")]
    pub apply: Option<String>,
    /// The user command that undoes --apply.
    #[arg(long, requires = "apply")]
    pub revert: Option<String>,
    /// Repetitions per arm (≥ 9 for the U test; 20 is better), or `auto`:
    /// look every 5 per arm and stop once the answer is clear (a
    /// group-sequential design keeps the false-positive rate at α), at
    /// most --max-reps.
    #[arg(long, default_value = "10", value_parser = reps)]
    pub reps: RepsArg,
    /// With --reps auto: the most repetitions per arm.
    #[arg(long, default_value_t = 20)]
    pub max_reps: usize,
    /// Length of one repetition's load run.
    #[arg(long, default_value = "3s", value_parser = humantime::parse_duration)]
    pub rep_duration: Duration,
    /// Start of each repetition discarded.
    #[arg(long, default_value = "500ms", value_parser = humantime::parse_duration)]
    pub warmup: Duration,
    #[arg(long, default_value_t = 4)]
    pub connections: usize,
    #[arg(long, value_enum, default_value = "interleaved")]
    pub order: RepOrder,
    /// Seed for the random order and the bootstrap.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    #[arg(long, default_value_t = 0.05)]
    pub alpha: f64,
    /// Minimum meaningful change in percent (default: the A/A floor).
    #[arg(long)]
    pub min_change: Option<f64>,
    /// Result JSON (schema correlator.experiment/v2).
    #[arg(long, short)]
    pub out: Option<PathBuf>,
    /// HTML with a per-repetition dot plot.
    #[arg(long)]
    pub html: Option<PathBuf>,
    /// Where the original settings are recorded while a knob is applied.
    #[arg(long, default_value = "/tmp/correlator-experiment.state")]
    pub state_file: PathBuf,
    /// With probes=off: the passive latency source whose cost to measure
    /// along with the event probes.
    #[command(flatten)]
    pub passive: PassiveArgs,
}

/// Arguments of `correlator record`.
#[derive(Debug, clap::Args)]
pub struct RecordArgs {
    /// Process to watch (all its threads, including threads created later).
    #[arg(long, short)]
    pub pid: u32,
    /// How long to record (e.g. 30s, 2m).
    #[arg(long, short, default_value = "30s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Run file to write.
    #[arg(long, short, default_value = "correlator.run")]
    pub out: PathBuf,
    /// Width of a time bucket, rounded down to a power of two ns (the
    /// default 1ms gives 524.288 µs buckets).
    #[arg(long, default_value = "1ms", value_parser = humantime::parse_duration)]
    pub bucket: Duration,
    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
    /// Kernel ring-buffer size in bytes (power-of-two pages); tests use a
    /// tiny one to force and check loss accounting.
    #[arg(long, default_value_t = 8 << 20, hide = true)]
    pub ring_bytes: u32,
    #[command(flatten)]
    pub probes: ProbeArgs,
}

/// Arguments of `correlator summary`.
#[derive(Debug, clap::Args)]
pub struct SummaryArgs {
    /// Run file written by `correlator record`.
    pub run_file: PathBuf,
    /// Print JSON (schema correlator.summary/v1) instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `correlator convert`.
#[derive(Debug, clap::Args)]
pub struct ConvertArgs {
    /// Run file to read.
    pub run_file: PathBuf,
    /// Where to write it (`.json`: the JSON export; otherwise compact).
    pub out: PathBuf,
}

/// Arguments of `correlator demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// One scenario (none, periodic, load, page-faults, major-faults,
    /// preemption, migrations, blocking, softirq, memory-limit), or all.
    #[arg(long, default_value = "all")]
    pub scenario: String,
    /// Where reports go.
    #[arg(long, default_value = "correlator-demo")]
    pub out: PathBuf,
    /// Length of each scenario's run (the load scenario runs a 3-step sweep).
    #[arg(long, default_value = "8s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Offered rate.
    #[arg(long, default_value_t = 5000.0)]
    pub rate: f64,
    /// Also write the outcomes as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// Arguments of `correlator compare`.
#[derive(Debug, clap::Args)]
pub struct CompareArgs {
    /// Baseline side (FILE, EXPERIMENT.json[#A|#B] or DIR).
    pub a: String,
    /// Treatment side.
    pub b: String,
    /// Percentile taken from experiment and run inputs.
    #[arg(long, value_enum, default_value = "p99")]
    pub metric: super::compare_inputs::Metric,
    /// Significance level (two-sided).
    #[arg(long, default_value_t = 0.05)]
    pub alpha: f64,
    /// Smallest change worth adopting, in percent (measure an A/A floor to choose it).
    #[arg(long, default_value_t = 0.0)]
    pub min_change: f64,
    /// Bootstrap seed (results reproduce for a given seed).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print JSON (schema correlator.compare/v1).
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `correlator merge`.
#[derive(Debug, clap::Args)]
pub struct MergeArgs {
    /// Run files with latency (`correlator run`: client-side; `correlator
    /// watch`: server-side), or watch report directories (their capture.run),
    /// e.g. one per host. Client-side and server-side latency measure
    /// different spans and are not merged together.
    #[arg(required = true, num_args = 2..)]
    pub runs: Vec<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

impl LoadSpec {
    /// The load generator's options for `url`.
    pub fn options(&self, url: &str) -> anyhow::Result<crate::loadgen::LoadOptions> {
        use crate::loadgen::protocol::{KvOp, Target};
        let op = match self.op {
            Op::Ping => KvOp::Ping,
            Op::Get => KvOp::Get { keys: self.keys },
            Op::Set => KvOp::Set {
                keys: self.keys,
                value_size: self.value_size,
            },
        };
        Ok(crate::loadgen::LoadOptions {
            url: url.to_string(),
            target: Target::parse(url, &op)?,
            rates: self.rate.clone(),
            duration: self.duration,
            warmup: self.warmup,
            connections: self.connections,
            timeout: self.timeout,
            closed_loop: self.closed_loop,
            rt_pacer: self.rt_pacer,
            cancel: std::sync::Arc::default(),
            cpus: match &self.load_cpus {
                Some(list) => Some(crate::cpu::parse_cpu_list(list).ok_or_else(|| {
                    anyhow::anyhow!("--load-cpus {list:?}: expected a CPU list like 0 or 0-3,6")
                })?),
                None => None,
            },
        })
    }
}

impl ReportOutputs {
    /// Where the report views go (and the run file, for `run`).
    pub fn outputs(&self, run_file: Option<PathBuf>) -> crate::run::Outputs {
        crate::run::Outputs {
            json: self.out.clone(),
            html: self.html.clone(),
            perfetto: self.perfetto.clone(),
            folded: self.folded.clone(),
            pprof: self.pprof.clone(),
            run_file,
        }
    }

    pub fn analysis(&self) -> crate::analysis::AnalysisOptions {
        crate::analysis::AnalysisOptions {
            slo_ns: self
                .slo
                .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
            percentile: Some(self.percentile),
        }
    }
}

/// `watch --scheduling`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Scheduling {
    Idle,
    Normal,
}

/// Arguments of `correlator watch`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("server").required(true).args(["pid", "comm", "cgroup"])))]
pub struct WatchArgs {
    /// Server to watch, until it exits.
    #[arg(long, short)]
    pub pid: Option<u32>,
    /// Server to watch by its comm (e.g. redis-server); re-attached when a
    /// new process of that name replaces it.
    #[arg(long)]
    pub comm: Option<String>,
    /// Server to watch by its cgroup directory (v2, e.g.
    /// /sys/fs/cgroup/system.slice/redis.service); re-attached on restart.
    #[arg(long)]
    pub cgroup: Option<PathBuf>,
    /// How much of the past the flight recorder keeps (and a report covers).
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub keep: Duration,
    /// After a trigger, wait this long before writing (the spike's aftermath).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub after: Duration,
    /// Sliding window of the --slo trigger.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub window: Duration,
    /// Write a report when the --percentile of the last --window of
    /// requests exceeds this (e.g. 5ms). Without it, only the analysis
    /// trigger writes reports.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub slo: Option<Duration>,
    /// The percentile the triggers watch and reports lead with: 99.9 by
    /// default, a production server's tail. (With --from-read the wait
    /// of requests queued in the socket behind a stall is invisible
    /// server-side, so a stall shows further out in the tail.)
    #[arg(long, default_value_t = 99.9)]
    pub percentile: f64,
    /// How often the kept window is analysed for a server cause.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub check_every: Duration,
    /// watch's own CPU scheduling. idle (SCHED_IDLE): any thread of the
    /// server that wakes takes the CPU from watch at once, so watch's
    /// draining and analysis never delay a request (at normal priority they
    /// held a server's requests for ~3 ms here, which server-side latency
    /// timed from arrival sees); on a saturated machine watch then lags and
    /// its rings may overflow (counted as lost). normal: as started.
    #[arg(long, value_enum, default_value_t = Scheduling::Idle)]
    pub scheduling: Scheduling,
    /// Directory of reports (one subdirectory per report).
    #[arg(long, short, default_value = "correlator-watch")]
    pub out: PathBuf,
    /// Reports written in any hour at most; further triggers are counted.
    #[arg(long, default_value_t = 6)]
    pub max_reports_per_hour: u32,
    /// Disk the report directory may use (e.g. 500MiB, 2GiB); the oldest
    /// reports are removed first.
    #[arg(long, default_value = "1GiB", value_parser = crate::memory::parse_bytes)]
    pub max_disk: u64,
    /// Serve OpenMetrics (Prometheus) on this address, e.g. 127.0.0.1:9464.
    #[arg(long)]
    pub listen: Option<std::net::SocketAddr>,
    /// Requests the flight recorder holds at most (40 bytes each); older
    /// ones past it are dropped and counted.
    #[arg(long, default_value_t = 2_000_000)]
    pub max_requests: usize,
    /// Also write a Perfetto trace with each report.
    #[arg(long)]
    pub perfetto: bool,
    /// Stop after this long (default: until SIGTERM / Ctrl-C).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub duration: Option<Duration>,
    #[command(flatten)]
    pub probes: ProbeArgs,
}
