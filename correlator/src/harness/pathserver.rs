//! The code-path helper (`correlator-testkit pathserver`, hidden): a line-protocol
//! server whose latency spikes come from named, never-inlined functions,
//! each timed by the server itself, so a test can check that the report
//! names the function and gives it the share of episode time it really
//! took. Built with frame pointers (the workspace's rustflags), so its user
//! stacks are walked through these functions.
//!
//! One thread serves every connection, so requests queue behind whatever
//! it does. On a trigger (every `--every`, exactly for `fault`, at random
//! times of that mean otherwise) the next request runs:
//! - `fault`: `fault_burst()`, writing memory whose pages the trigger
//!   dropped (one minor fault per page), a periodic job;
//! - `stall`: `rare_stall()`, busy in user code;
//! - `lock`: `wait_for_lock()`, blocked in a futex wait on a word another
//!   thread holds;
//! - `mmap-lock`: `map_page()`, an mmap and munmap of one page, which
//!   waits for the process's mmap_lock while the trigger thread maps
//!   `--mib` MiB with MAP_POPULATE and unmaps them (a memory stall);
//! - `swap-in`: `swap_in_burst()`, writing every page of `--mib` MiB of
//!   anonymous memory. Run in a memory cgroup whose limit is below that
//!   (the test sets it) with swap on, each burst reads back from swap the
//!   pages the previous one pushed out (a memory stall: swap-ins, and the
//!   reclaim that makes room for them);
//! - `tlb-storm`: `interrupted_work()`, a fixed amount of computing, while
//!   the trigger thread (pin it to another CPU) maps, writes and unmaps one
//!   page in a loop for `--hold` (`tlb_storm` in the event log): each unmap
//!   sends a TLB shootdown to the serving thread's CPU, whose call-function
//!   interrupts stretch the work.
//!
//! Each function does its kernel work itself (the faults, or the futex
//! syscall by inline assembly): a libc wrapper built without frame pointers
//! between it and the kernel would hide it from a frame-pointer walk
//! (the walk would go from the wrapper straight to its caller's caller).
//!
//! Each call is written to `--events` as a JSON line
//! `{"function", "start_ns", "end_ns", "cpu_ns", "run_delay_ns"}`: its
//! start and end (CLOCK_MONOTONIC), and what the kernel's scheduler
//! counted for the thread during it: CPU time (CLOCK_THREAD_CPUTIME_ID,
//! which on a VM with paravirt steal accounting leaves out the time the
//! host took) and time waiting runnable for a CPU (`run_delay` of
//! /proc/thread-self/schedstat). A call that never sleeps spent its wall
//! time in those two or stolen by the host: the first two are what a code
//! path can be seen doing (samples, runnable intervals), the steal is not.
//! In `lock` mode the trigger (thread `path-trigger`) also writes each of
//! its holds, from taking the lock word to releasing it, as function
//! `hold_lock`: what the wait-for chain's holder time is checked against.
//! In `mmap-lock` mode it writes each map-populate-unmap as
//! `hold_mmap_lock`.

use std::{
    io::Write as _,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU32, Ordering},
    },
    time::Duration,
};

use anyhow::{Context as _, Result};
use tokio::{
    io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader},
    net::{TcpListener, TcpStream},
};

use crate::{clock::monotonic_ns, memory::Region};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PathKind {
    Fault,
    Stall,
    Lock,
    MmapLock,
    SwapIn,
    TlbStorm,
}

#[derive(Clone, Debug, clap::Args)]
pub struct PathServerArgs {
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: String,
    #[arg(long, value_enum)]
    pub path: PathKind,
    /// Period (fault) or mean gap (stall, lock) between events.
    #[arg(long, default_value = "300ms", value_parser = humantime::parse_duration)]
    pub every: Duration,
    /// How long a stall or a lock hold lasts; the fault burst's size is
    /// `--mib` instead.
    #[arg(long, default_value = "15ms", value_parser = humantime::parse_duration)]
    pub hold: Duration,
    #[arg(long, default_value_t = 64)]
    pub mib: usize,
    /// Skip every Nth cycle (0: none): a periodic job that misses cycles.
    #[arg(long, default_value_t = 0)]
    pub skip_every: u64,
    /// JSON lines of every timed call.
    #[arg(long)]
    pub events: std::path::PathBuf,
    /// Serve cleanly this long before the first trigger (a cause that
    /// switches on while correlator watch is already attached).
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    pub start_after: Duration,
}

struct State {
    args: PathServerArgs,
    pending: AtomicBool,
    /// `lock`: 1 while the trigger holds it.
    lock: AtomicU32,
    /// `fault`, `swap-in`: the memory the burst writes.
    region: Option<Region>,
    events: Mutex<std::fs::File>,
}

/// The calling thread's CPU time and run delay so far, ns (see the
/// module docs).
fn thread_times() -> (u64, u64) {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid clock id and pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    let cpu = u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000
        + u64::try_from(ts.tv_nsec).unwrap_or(0);
    // "sum_exec_runtime run_delay timeslices"; the first is only as fresh
    // as the last tick, hence the clock above.
    let run_delay = std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        .unwrap_or(0);
    (cpu, run_delay)
}

/// One timed call: wall clock and the thread's scheduler times at its
/// start.
struct CallStart {
    at_ns: u64,
    cpu_ns: u64,
    run_delay_ns: u64,
}

impl CallStart {
    fn now() -> Self {
        let (cpu_ns, run_delay_ns) = thread_times();
        Self {
            at_ns: monotonic_ns(),
            cpu_ns,
            run_delay_ns,
        }
    }
}

impl State {
    fn log(&self, function: &str, start: &CallStart) {
        let end_ns = monotonic_ns();
        let (cpu, run_delay) = thread_times();
        let line = format!(
            "{{\"function\":\"{function}\",\"start_ns\":{},\"end_ns\":{end_ns},\"cpu_ns\":{},\"run_delay_ns\":{}}}\n",
            start.at_ns,
            cpu.saturating_sub(start.cpu_ns),
            run_delay.saturating_sub(start.run_delay_ns)
        );
        let mut f = self
            .events
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let _ = f.write_all(line.as_bytes());
    }
}

/// Writes every page of `region`, whose pages were dropped: one minor
/// fault per page, on the request path.
#[inline(never)]
fn fault_burst(region: &Region) {
    std::hint::black_box(region.touch(true));
}

/// Writes every page of memory the cgroup's limit keeps partly in swap.
#[inline(never)]
fn swap_in_burst(region: &Region) {
    std::hint::black_box(region.touch(true));
}

/// Busy in user code for `d`.
#[inline(never)]
fn rare_stall(d: Duration) {
    let end = std::time::Instant::now() + d;
    let mut x = 0u64;
    while std::time::Instant::now() < end {
        for _ in 0..1_000 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }
}

/// Waits until the trigger releases the lock word, in FUTEX_WAIT.
#[inline(never)]
fn wait_for_lock(lock: &AtomicU32) {
    while lock.load(Ordering::Acquire) == 1 {
        futex(lock, libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG, 1);
    }
}

/// Maps one anonymous page and unmaps it: both take the process's
/// mmap_lock for writing.
#[inline(never)]
fn map_page() {
    one_page(false);
}

/// Maps one anonymous page, writes it if `touch` (so that the unmap has a
/// page table entry to shoot down on the other CPUs), and unmaps it.
fn one_page(touch: bool) {
    // SAFETY: a fresh private anonymous page, written within its bounds
    // and unmapped before return.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if p != libc::MAP_FAILED {
            if touch {
                p.cast::<u8>().write_volatile(1);
            }
            libc::munmap(p, 4096);
        }
    }
}

/// The trigger's side of `mmap-lock`: maps `mib` MiB populated (the
/// mmap_lock held for reading while the pages are faulted in), then
/// unmaps them (held for writing, then reading, while they are freed).
fn map_populate_unmap(mib: usize) {
    let len = mib << 20;
    // SAFETY: a fresh private anonymous mapping, unmapped here and never
    // dereferenced.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
            -1,
            0,
        );
        if p != libc::MAP_FAILED {
            libc::munmap(p, len);
        }
    }
}

/// A fixed amount of computing (about 5 ms on this machine's CPUs when
/// nothing interrupts it): time taken from it stretches it.
#[inline(never)]
fn interrupted_work() {
    let mut x = 0u64;
    for _ in 0..5_000_000u64 {
        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
    std::hint::black_box(x);
}

/// The event log's name for the trigger's storms (`tlb-storm` mode).
pub const TLB_STORM: &str = "tlb_storm";

/// The event log's name for the trigger's map-populate-unmap
/// (`mmap-lock` mode).
pub const HOLD_MMAP: &str = "hold_mmap_lock";

/// The futex syscall, made here rather than through libc (see the module
/// docs).
#[inline(always)]
fn futex(word: &AtomicU32, op: i32, val: u32) {
    let ret: i64;
    // SAFETY: futex(2) on a valid, aligned u32 with a null timeout; it
    // only reads the word, and clobbers rcx and r11 as every syscall does.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") libc::SYS_futex => ret,
            in("rdi") word.as_ptr(),
            in("rsi") i64::from(op),
            in("rdx") u64::from(val),
            in("r10") 0u64,
            in("r8") 0u64,
            in("r9") 0u64,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    std::hint::black_box(ret);
}

/// The request path: the triggered work, timed, then nothing.
#[inline(never)]
fn handle_request(state: &State) {
    if !state.pending.swap(false, Ordering::Relaxed) {
        return;
    }
    let start = CallStart::now();
    let name = match state.args.path {
        PathKind::Fault => {
            if let Some(region) = &state.region {
                fault_burst(region);
            }
            "fault_burst"
        }
        PathKind::Stall => {
            rare_stall(state.args.hold);
            "rare_stall"
        }
        PathKind::Lock => {
            wait_for_lock(&state.lock);
            "wait_for_lock"
        }
        PathKind::MmapLock => {
            map_page();
            "map_page"
        }
        PathKind::SwapIn => {
            if let Some(region) = &state.region {
                swap_in_burst(region);
            }
            "swap_in_burst"
        }
        PathKind::TlbStorm => {
            interrupted_work();
            "interrupted_work"
        }
    };
    state.log(name, &start);
}

/// The event log's name for the trigger's own lock holds (`lock` mode).
pub const HOLD: &str = "hold_lock";

/// Sets the trigger: exactly periodic for `fault`, random gaps of the
/// same mean otherwise; for `lock`, holds the lock across the trigger so
/// the next request waits for it.
fn trigger(state: &State) {
    let mut rng = crate::stats::Rng::new(u64::from(std::process::id()));
    let every = state.args.every;
    let mut next = std::time::Instant::now() + state.args.start_after + every;
    let mut cycle = 0u64;
    loop {
        cycle += 1;
        let gap = if state.args.path == PathKind::Fault {
            every
        } else {
            every.mul_f64(0.3 + 1.4 * rng.unit())
        };
        next += gap;
        std::thread::sleep(next.saturating_duration_since(std::time::Instant::now()));
        let skip = state.args.skip_every;
        if skip > 0 && cycle.is_multiple_of(skip) {
            continue;
        }
        match state.args.path {
            PathKind::Lock => {
                // The holder times its own holds (`hold_lock` lines): the
                // ground truth for the wait-for chain's holder time.
                let held = CallStart::now();
                state.lock.store(1, Ordering::Release);
                state.pending.store(true, Ordering::Relaxed);
                std::thread::sleep(state.args.hold);
                state.lock.store(0, Ordering::Release);
                state.log(HOLD, &held);
                futex(
                    &state.lock,
                    libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                    u32::MAX >> 1,
                );
            }
            PathKind::Fault => {
                if let Some(region) = &state.region {
                    region.drop_pages();
                }
                state.pending.store(true, Ordering::Relaxed);
            }
            PathKind::Stall | PathKind::SwapIn => state.pending.store(true, Ordering::Relaxed),
            PathKind::MmapLock => {
                let held = CallStart::now();
                state.pending.store(true, Ordering::Relaxed);
                map_populate_unmap(state.args.mib);
                state.log(HOLD_MMAP, &held);
            }
            PathKind::TlbStorm => {
                let storm = CallStart::now();
                state.pending.store(true, Ordering::Relaxed);
                let end = std::time::Instant::now() + state.args.hold;
                while std::time::Instant::now() < end {
                    for _ in 0..64 {
                        one_page(true);
                    }
                }
                state.log(TLB_STORM, &storm);
            }
        }
    }
}

pub fn run(args: &PathServerArgs) -> Result<()> {
    let events = std::fs::File::create(&args.events)
        .with_context(|| format!("cannot create {}", args.events.display()))?;
    let state = Arc::new(State {
        args: args.clone(),
        pending: AtomicBool::new(false),
        lock: AtomicU32::new(0),
        region: match args.path {
            PathKind::Fault => {
                let region = Region::anonymous(args.mib << 20).context("cannot map memory")?;
                region.touch(true);
                Some(region)
            }
            // Touched first by the first burst: in the cgroup the test has
            // moved it to by then (`--start-after`), which is charged for
            // it (a move does not carry charges along).
            PathKind::SwapIn => {
                Some(Region::anonymous(args.mib << 20).context("cannot map memory")?)
            }
            _ => None,
        },
        events: Mutex::new(events),
    });
    {
        let state = Arc::clone(&state);
        std::thread::Builder::new()
            .name("path-trigger".into())
            .spawn(move || trigger(&state))?;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    rt.block_on(async move {
        let listener = TcpListener::bind(&state.args.listen)
            .await
            .with_context(|| format!("cannot listen on {}", state.args.listen))?;
        println!("listening on {}", listener.local_addr()?);
        std::io::stdout().flush()?;
        loop {
            let (stream, _) = listener.accept().await?;
            let _ = stream.set_nodelay(true);
            let state = Arc::clone(&state);
            tokio::spawn(async move {
                let _ = connection(stream, &state).await;
            });
        }
    })
}

async fn connection(stream: TcpStream, state: &State) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).await? == 0 {
            return Ok(());
        }
        handle_request(state);
        write.write_all(b"ok\n").await?;
    }
}
