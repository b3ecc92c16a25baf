//! The run file written while recording: a recorder killed with SIGKILL
//! (or a machine that stops) cannot write its run at the end, so it
//! appends what it drained about once a second, and a reader rebuilds a
//! run from those frames up to the last whole one.
//!
//! Finishing normally replaces the journal with the complete run
//! ([`super::RunFile::save`]), which also holds what only the end knows:
//! the kernel's totals and losses, the programs' costs, syscall totals,
//! passive latency, symbolized stacks.

use std::{
    collections::BTreeMap,
    fs,
    io::Write as _,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result};
use correlator_common::{Account, NUM_COUNTERS};

use super::compact::{self, Delta, Frame, Request, Start};
use super::{Durations, EventTotals, Overhead, RunFile, StopReason};
use crate::timeline::{Timeline, steal::StealSample};

/// Appends frames to the run file while a recording runs.
pub struct Journal {
    path: PathBuf,
    file: fs::File,
    /// How many of each record kind earlier frames held.
    written: Written,
}

#[derive(Default)]
struct Written {
    offcpu: usize,
    accounts: usize,
    syscalls: usize,
    samples: usize,
    steal: usize,
}

impl Journal {
    /// Creates the file at `path` (replacing what was there) and writes
    /// the start frame.
    pub fn create(path: &Path, start: Start) -> Result<Self> {
        let mut file = fs::File::create(path)
            .with_context(|| format!("cannot create run file {}", path.display()))?;
        file.write_all(compact::MAGIC)?;
        file.write_all(&compact::encode(&Frame::Start(Box::new(start)))?)?;
        Ok(Self {
            path: path.to_path_buf(),
            file,
            written: Written::default(),
        })
    }

    /// Appends what `timeline` and `steal` gained since the last call, and
    /// the server-side `requests` kept since (taken).
    /// One `write` per frame: a kill tears at most the frame being written.
    pub fn append(
        &mut self,
        timeline: &mut Timeline,
        steal: &[StealSample],
        requests: &mut Vec<Request>,
        at_ns: u64,
    ) -> Result<()> {
        fn new<T: Clone>(all: &[T], done: &mut usize) -> Vec<T> {
            let from = (*done).min(all.len());
            *done = all.len();
            all[from..].to_vec()
        }
        let w = &mut self.written;
        let delta = Delta {
            at_ns,
            buckets: timeline.take_touched(),
            offcpu: new(timeline.offcpu(), &mut w.offcpu),
            thread_accounts: new(timeline.accounts(), &mut w.accounts),
            syscalls: new(timeline.syscalls(), &mut w.syscalls),
            stack_samples: new(timeline.samples(), &mut w.samples),
            steal: new(steal, &mut w.steal),
            requests: std::mem::take(requests),
        };
        let bytes = compact::encode(&Frame::Delta(Box::new(delta)))?;
        self.file
            .write_all(&bytes)
            .with_context(|| format!("cannot append to run file {}", self.path.display()))
    }
}

/// The run a journal without its complete frame holds: everything up to
/// its last whole frame; what only the end of a recording knows is absent
/// and the notes say so.
pub fn recover(start: Start, deltas: Vec<Delta>, torn_bytes: usize) -> RunFile {
    let mut buckets = BTreeMap::new();
    let mut run = RunFile {
        schema: start.schema,
        correlator_version: start.correlator_version,
        target: start.target,
        follow_children: start.follow_children,
        started_ns: start.started_ns,
        ended_ns: start.started_ns,
        stop_reason: StopReason::Unfinished,
        bucket_ns: start.bucket_ns,
        counter_names: start.counter_names,
        buckets: Vec::new(),
        offcpu: Vec::new(),
        min_offcpu_record_ns: start.min_offcpu_record_ns,
        totals: EventTotals::default(),
        durations: Durations::default(),
        irq_kinds: BTreeMap::new(),
        softirq_vectors: BTreeMap::new(),
        losses: Default::default(),
        overhead: Overhead::default(),
        environment: start.environment,
        notes: Vec::new(),
        latency: None,
        server_latency: None,
        steal: Vec::new(),
        account_names: start.account_names,
        thread_accounts: Vec::new(),
        syscalls: Vec::new(),
        syscall_totals: BTreeMap::new(),
        sample_period_ns: start.sample_period_ns,
        syscall_time: start.syscall_time,
        samples: 0,
        thread_names: start.thread_names,
        stack_samples: Vec::new(),
        stacks: Default::default(),
        // Not journaled: a recovered run has no upstream exchanges.
        upstreams: Vec::new(),
        memory_stalls: Vec::new(),
        memory_cgroup: None,
        clocks: None,
    };
    let frames = deltas.len();
    let mut passive = start
        .passive
        .map(|source| crate::latency::passive::Passive::new(source, run.started_ns));
    for d in deltas {
        if let Some(p) = &mut passive {
            for r in d.requests {
                p.push_checked(&r.into());
            }
        }
        run.ended_ns = run.ended_ns.max(d.at_ns);
        buckets.extend(d.buckets);
        run.offcpu.extend(d.offcpu);
        run.thread_accounts.extend(d.thread_accounts);
        run.syscalls.extend(d.syscalls);
        run.stack_samples.extend(d.stack_samples);
        run.steal.extend(d.steal);
    }
    run.buckets = buckets.into_iter().collect();
    // The kernel's side of the passive statistics (losses, unpaired
    // writes) is written at the end: unknown here, zero.
    run.server_latency = passive.map(|p| p.finish(run.ended_ns, &Default::default()));
    let mut sum = [0u64; NUM_COUNTERS];
    for (_, counts) in &run.buckets {
        for (s, c) in sum.iter_mut().zip(counts) {
            *s += c;
        }
    }
    run.totals = EventTotals::from_counters(&sum);
    run.durations = Durations::from_counters(&sum);
    // The kernel's sample total is written at the end; the accounts count
    // every sample of a target thread by what it found the thread doing.
    run.samples = run
        .thread_accounts
        .iter()
        .map(|a| {
            a.ns[Account::SamplesUser as usize..=Account::SamplesIrq as usize]
                .iter()
                .sum::<u64>()
        })
        .sum();
    let secs = run.duration_ns() as f64 / 1e9;
    run.notes.push(format!(
        "the recorder did not finish this run file (killed, or the machine stopped): \
         it holds the first {secs:.1} s, up to its last whole frame ({frames} written about once a second{}); \
         what came after, and what only the end of a recording writes (losses, program costs, \
         syscall totals, the kernel's passive-latency statistics, symbolized stacks), is missing; totals are the drained buckets' sums",
        if torn_bytes > 0 {
            format!(", and {torn_bytes} bytes of a torn frame after them")
        } else {
            String::new()
        }
    ));
    run
}
