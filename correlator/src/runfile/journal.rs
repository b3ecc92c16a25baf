//! The run file written while recording: a recorder killed with SIGKILL
//! (or a machine that stops) cannot write its run at the end, so it
//! appends what it drained about once a second, and a reader rebuilds a
//! run from those frames up to the last whole one.
//!
//! Finishing normally replaces the journal with the complete run
//! ([`super::RunFile::save`]), which also holds what only the end knows:
//! the kernel's totals and losses, the programs' costs, syscall totals,
//! passive latency, symbolized stacks.

use std::{collections::BTreeMap, fs, io::Write as _, path::Path};

use anyhow::{Context as _, Result};
use correlator_common::{Account, NUM_COUNTERS};

use super::compact::{self, Delta, Frame, Request, Start};
use super::{Durations, EventTotals, Overhead, RunFile, StopReason};
use crate::timeline::{Timeline, steal::StealSample};

/// Appends frames to the run file while a recording runs.
///
/// Encoding and writing a second's frame takes milliseconds of CPU (4 ms
/// on a loaded redis here). Done on the recorder's thread, that stalled
/// whatever shared its CPU once a second — in `run`, the load generator,
/// whose late replies then read as "idle" spikes with a 1 s period. So a
/// writer thread does it at SCHED_IDLE priority: it runs when the CPU has
/// nothing else to run, and any other task that wakes takes the CPU from
/// it at once.
pub struct Journal {
    frames: Option<std::sync::mpsc::Sender<Message>>,
    writer: Option<std::thread::JoinHandle<()>>,
    /// The writer's first error, reported by the next call.
    failed: std::sync::Arc<std::sync::Mutex<Option<anyhow::Error>>>,
    /// How many of each record kind earlier frames held.
    written: Written,
}

enum Message {
    Frame(Box<Delta>),
    /// Answered once every earlier frame is written.
    Flush(std::sync::mpsc::Sender<()>),
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
        let (frames, inbox) = std::sync::mpsc::channel();
        let failed = std::sync::Arc::new(std::sync::Mutex::new(None));
        let writer = {
            let failed = std::sync::Arc::clone(&failed);
            let path = path.to_path_buf();
            std::thread::Builder::new()
                .name("correlator-journal".into())
                .spawn(move || write_frames(&inbox, file, &path, &failed))
                .context("cannot start the run file's writer thread")?
        };
        Ok(Self {
            frames: Some(frames),
            writer: Some(writer),
            failed,
            written: Written::default(),
        })
    }

    /// Waits until every frame appended so far is in the file.
    pub fn flush(&mut self) -> Result<()> {
        let (done, wait) = std::sync::mpsc::channel();
        if let Some(frames) = &self.frames {
            // A writer gone has recorded why in `failed`.
            let _ = frames.send(Message::Flush(done));
            let _ = wait.recv();
        }
        self.check()
    }

    fn check(&self) -> Result<()> {
        match self.failed.lock().map(|mut f| f.take()) {
            Ok(Some(e)) => Err(e),
            Ok(None) => Ok(()),
            Err(_) => anyhow::bail!("the run file's writer thread panicked"),
        }
    }

    /// Appends what `timeline` and `steal` gained since the last call, and
    /// the server-side `requests` kept since (taken).
    /// The writer thread writes the frame (one `write` per frame: a kill
    /// tears at most the frame being written).
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
        self.check()?;
        if let Some(frames) = &self.frames {
            let _ = frames.send(Message::Frame(Box::new(delta)));
        }
        Ok(())
    }
}

impl Drop for Journal {
    /// Writes what is queued before the run file is replaced or read.
    fn drop(&mut self) {
        self.frames = None;
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

/// The writer thread: each frame in one `write` (a kill tears at most the
/// frame being written), at SCHED_IDLE (see [`Journal`]).
fn write_frames(
    inbox: &std::sync::mpsc::Receiver<Message>,
    mut file: fs::File,
    path: &Path,
    failed: &std::sync::Mutex<Option<anyhow::Error>>,
) {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is this thread; a valid policy and parameter. Failing
    // leaves it at normal priority, which only costs what it did before.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
    while let Ok(message) = inbox.recv() {
        match message {
            Message::Frame(delta) => {
                let written = compact::encode(&Frame::Delta(delta)).and_then(|bytes| {
                    file.write_all(&bytes)
                        .with_context(|| format!("cannot append to run file {}", path.display()))
                });
                if let Err(e) = written {
                    if let Ok(mut f) = failed.lock() {
                        f.get_or_insert(e);
                    }
                    return;
                }
            }
            Message::Flush(done) => {
                let _ = done.send(());
            }
        }
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
        ipi_senders: Vec::new(),
        device_irqs: Vec::new(),
        runtime_pauses: Vec::new(),
        clocks: None,
        runtime_gc: None,
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
