//! A helper target that does known work, for ground-truth tests of the
//! probes (`correlator-testkit workload`).
//!
//! It says `ready` on stderr and waits for a line on stdin (so a recorder
//! can attach first), does the work it was asked for, prints its own
//! getrusage before/after as JSON on stdout, and exits.

use std::{
    fs,
    io::{BufRead as _, Write as _},
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use serde::Serialize;

use crate::cpu::pin;

#[derive(Clone, Debug, Default, clap::Args)]
pub struct WorkloadArgs {
    /// Anonymous pages to touch (minor faults).
    #[arg(long, default_value_t = 0)]
    pub minor_faults: usize,
    /// File-backed pages evicted from the page cache, then read (major faults).
    #[arg(long, default_value_t = 0)]
    pub major_faults: usize,
    /// Directory for the major-fault file (must be on a disk, not tmpfs).
    #[arg(long)]
    pub fault_dir: Option<PathBuf>,
    /// 1 ms sleeps (voluntary context switches).
    #[arg(long, default_value_t = 0)]
    pub sleeps: usize,
    /// Affinity hops between CPU 0 and CPU 1 (migrations).
    #[arg(long, default_value_t = 0)]
    pub hops: usize,
    /// Busy spin for this many ms, pinned to --spin-cpu (takes timer interrupts).
    #[arg(long, default_value_t = 0)]
    pub spin_ms: u64,
    #[arg(long, default_value_t = 1)]
    pub spin_cpu: usize,
    /// Spin where the scheduler puts it (--spin-cpu ignored): the load
    /// balancer may move it.
    #[arg(long)]
    pub spin_unpinned: bool,
    /// Calls of `correlator_known_work` (a uprobe target of known duration).
    #[arg(long, default_value_t = 0)]
    pub calls: usize,
    /// How long each call spins, µs.
    #[arg(long, default_value_t = 200)]
    pub call_us: u64,
    /// Do the work in a thread created after the go signal.
    #[arg(long)]
    pub in_new_thread: bool,
    /// Do the work in a child process forked after the go signal (for
    /// --follow-children).
    #[arg(long)]
    pub in_child_process: bool,
    /// After printing the report, wait for a second line (or EOF) on stdin
    /// before exiting: a test can read the kernel's counters and stop the
    /// recorder while the process sits blocked, so both count up to the
    /// same moment (at exit the kernel's perf counters detach before the
    /// last switches, which the recorder still sees).
    #[arg(long)]
    pub hold: bool,
    #[command(flatten)]
    pub syscalls: crate::harness::known_syscalls::SyscallWork,
}

/// The process's own resource usage, from getrusage(RUSAGE_SELF).
#[derive(Clone, Copy, Debug, Default, Serialize, serde::Deserialize)]
pub struct Usage {
    pub minflt: i64,
    pub majflt: i64,
    pub nvcsw: i64,
    pub nivcsw: i64,
    /// User + system CPU time, µs.
    #[serde(default)]
    pub cpu_us: i64,
    /// Time the process's threads waited on a runqueue, ns: the kernel's
    /// own account (`run_delay`, 2nd field of /proc/self/task/*/schedstat).
    #[serde(default)]
    pub run_delay_ns: u64,
}

fn run_delay_ns() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum()
}

pub fn usage() -> Usage {
    // SAFETY: zeroed rusage is valid; getrusage fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    Usage {
        minflt: ru.ru_minflt,
        majflt: ru.ru_majflt,
        nvcsw: ru.ru_nvcsw,
        nivcsw: ru.ru_nivcsw,
        cpu_us: (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1_000_000
            + ru.ru_utime.tv_usec
            + ru.ru_stime.tv_usec,
        run_delay_ns: run_delay_ns(),
    }
}

#[derive(Serialize)]
struct Report {
    before: Usage,
    after: Usage,
    /// Wall time of the work, ns.
    work_ns: u64,
    /// `--calls`: medians of each call's duration as the function saw its
    /// own body, and as the caller saw it (body + call + any probe traps).
    #[serde(skip_serializing_if = "Option::is_none")]
    calls: Option<CallTimes>,
    /// Known syscall work, each phase timed by the helper.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    phases: Vec<crate::harness::known_syscalls::Phase>,
    /// `--spin-ms` (in this process): where the spin did not run.
    #[serde(skip_serializing_if = "Option::is_none")]
    spin: Option<SpinGaps>,
}

/// The spin's own view of the time it lost: consecutive clock reads of
/// the loop normally lie tens of ns apart, so a larger step is time the
/// loop did not run (an interrupt, a preemption, the hypervisor holding
/// the vCPU). Ground truth for the probes' account of the spinning thread.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SpinGaps {
    /// Steps of at least [`SpinGaps::MIN_GAP_NS`], and their summed length.
    pub gaps: u64,
    pub gap_ns: u64,
    /// Steps of at least [`SpinGaps::LONG_GAP_NS`], and their summed length.
    pub long_gaps: u64,
    pub long_gap_ns: u64,
    /// The longest step.
    pub max_gap_ns: u64,
    /// The long steps as (start, end), CLOCK_MONOTONIC ns (the probes'
    /// clock), the first [`SpinGaps::MAX_LISTED`].
    pub long: Vec<(u64, u64)>,
    /// Every step of at least [`SpinGaps::MIN_GAP_NS`], the first
    /// [`SpinGaps::MAX_STEPS`]: where steal shorter than a long step
    /// (10-60 µs of the steal clock, here) can be checked against.
    pub steps: Vec<(u64, u64)>,
    /// The loop's first and last clock reads: outside them (pinning,
    /// writing this report) the thread did other work, unwatched.
    pub start_ns: u64,
    pub end_ns: u64,
}

impl SpinGaps {
    /// Above the loop's own step (a clock read, ~30-60 ns here) and below
    /// a timer interrupt (a few µs).
    pub const MIN_GAP_NS: u64 = 1_000;
    pub const LONG_GAP_NS: u64 = 200_000;
    pub const MAX_LISTED: usize = 10_000;
    /// A timer interrupt a millisecond for 20 s and the scheduler's ticks.
    pub const MAX_STEPS: usize = 100_000;

    fn add(&mut self, from: u64, to: u64) {
        let step = to.saturating_sub(from);
        if step < Self::MIN_GAP_NS {
            return;
        }
        self.gaps += 1;
        self.gap_ns += step;
        if self.steps.len() < Self::MAX_STEPS {
            self.steps.push((from, to));
        }
        if step >= Self::LONG_GAP_NS {
            self.long_gaps += 1;
            self.long_gap_ns += step;
            if self.long.len() < Self::MAX_LISTED {
                self.long.push((from, to));
            }
        }
        self.max_gap_ns = self.max_gap_ns.max(step);
    }
}

#[derive(Clone, Copy, Serialize)]
struct CallTimes {
    n: usize,
    body_p50_ns: u64,
    around_p50_ns: u64,
}

/// A function of known duration for uprobe tests: spins `us` µs and
/// returns how long its body took, by its own clock. Unmangled and never
/// inlined, so `--uprobe correlator:correlator_known_work` finds it.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn correlator_known_work(us: u64) -> u64 {
    let start = Instant::now();
    let end = start + Duration::from_micros(us);
    while Instant::now() < end {
        std::hint::spin_loop();
    }
    u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

fn timed_calls(n: usize, us: u64) -> CallTimes {
    let mut body = Vec::with_capacity(n);
    let mut around = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        body.push(std::hint::black_box(correlator_known_work(
            std::hint::black_box(us),
        )));
        around.push(u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX));
    }
    let median = |v: &mut Vec<u64>| {
        v.sort_unstable();
        v.get(v.len() / 2).copied().unwrap_or(0)
    };
    CallTimes {
        n,
        body_p50_ns: median(&mut body),
        around_p50_ns: median(&mut around),
    }
}

pub fn run(args: &WorkloadArgs) -> Result<()> {
    let page = crate::memory::page_size();
    // Prepare the major-fault file before "go": its writes are not the work.
    let major = if args.major_faults > 0 {
        Some(prepare_major_file(args, page)?)
    } else {
        None
    };
    let cold = args
        .syscalls
        .prepare(&args.fault_dir.clone().unwrap_or_else(std::env::temp_dir))?;
    // Said once everything before the work is done (the binary loaded, the
    // files written): a test opening the kernel's counters on this process
    // waits for it, or they count the start-up's faults and switches too.
    eprintln!("ready");
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    let before = usage();
    let started = Instant::now();
    let calls = (args.calls > 0).then(|| timed_calls(args.calls, args.call_us));
    let mut spin = None;
    // The major-fault file is removed before the last sample: unlinking can
    // sleep on the filesystem, and that switch belongs inside the window
    // both getrusage and the recorder see.
    if args.in_child_process {
        // SAFETY: fork in a single-threaded helper; the child only does the
        // work and _exits, the parent waits for it.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            bail!("fork: {}", std::io::Error::last_os_error());
        }
        if pid == 0 {
            let code = i32::from(work(args, major.as_ref(), page).is_err());
            // SAFETY: leave the child without running the parent's destructors.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        drop(major);
    } else if args.in_new_thread {
        let args = args.clone();
        spin = std::thread::spawn(move || {
            let r = work(&args, major.as_ref(), page);
            drop(major);
            r
        })
        .join()
        .map_err(|_| anyhow::anyhow!("worker thread panicked"))??;
    } else {
        let r = work(args, major.as_ref(), page);
        drop(major);
        spin = r?;
    }
    let phases = args.syscalls.run(cold.as_ref())?;
    drop(cold);
    let after = usage();
    let work_ns = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(
        &mut out,
        &Report {
            before,
            after,
            work_ns,
            calls,
            phases,
            spin,
        },
    )?;
    writeln!(out)?;
    out.flush()?;
    drop(out);
    if args.hold {
        std::io::stdin().lock().read_line(&mut line)?;
    }
    Ok(())
}

struct MajorFile {
    file: fs::File,
    path: PathBuf,
    len: usize,
}

impl Drop for MajorFile {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

fn prepare_major_file(args: &WorkloadArgs, page: usize) -> Result<MajorFile> {
    let dir = args.fault_dir.clone().unwrap_or_else(std::env::temp_dir);
    let len = args.major_faults * page;
    let (file, path) = crate::memory::disk_file(&dir, "workload", len, 0xa5)?;
    Ok(MajorFile { file, path, len })
}

fn work(args: &WorkloadArgs, major: Option<&MajorFile>, page: usize) -> Result<Option<SpinGaps>> {
    if args.minor_faults > 0 {
        touch_anonymous(args.minor_faults, page)?;
    }
    if let Some(m) = major {
        read_evicted(m)?;
    }
    for _ in 0..args.sleeps {
        std::thread::sleep(Duration::from_millis(1));
    }
    for i in 0..args.hops {
        pin(i % 2)?;
    }
    if args.spin_ms > 0 {
        if !args.spin_unpinned {
            pin(args.spin_cpu)?;
        }
        let end = crate::clock::monotonic_ns() + args.spin_ms * 1_000_000;
        let mut last = crate::clock::monotonic_ns();
        let mut gaps = SpinGaps {
            steps: Vec::with_capacity(SpinGaps::MAX_STEPS),
            start_ns: last,
            ..SpinGaps::default()
        };
        while last < end {
            let now = crate::clock::monotonic_ns();
            gaps.add(last, now);
            last = now;
        }
        gaps.end_ns = last;
        return Ok(Some(gaps));
    }
    Ok(None)
}

fn touch_anonymous(pages: usize, page: usize) -> Result<()> {
    let region = crate::memory::Region::anonymous(pages * page).context("mmap failed")?;
    region.touch(true);
    Ok(())
}

fn read_evicted(m: &MajorFile) -> Result<()> {
    use std::os::fd::AsRawFd as _;
    // SAFETY: valid fd; drops the file's clean pages from the page cache.
    unsafe { libc::posix_fadvise(m.file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    let region = crate::memory::Region::file(&m.file, m.len).context("mmap failed")?;
    std::hint::black_box(region.touch(false));
    Ok(())
}
