//! `correlator load`: an open-loop, constant-throughput load generator
//! (wrk2's method). Every request has an intended send time on a fixed
//! schedule; latency is measured from it, so a server stall is charged to
//! every request that waited for it (no coordinated omission). When the
//! server stalls the schedule keeps going: requests are pipelined on the
//! connections. `--closed-loop` does what most tools do (one request at a
//! time per connection, latency from the actual send) for comparison.
//!
//! Threads, not tokio tasks, carry the requests: the pacer must wake within
//! microseconds of each intended time (tokio's timer has 1 ms granularity),
//! and a blocking reader per connection is the cheapest way to timestamp a
//! response the moment it arrives. The pacer sleeps with clock_nanosleep
//! and a 1 ns timer slack rather than spinning: on a 2-core machine a
//! spinning generator would steal a core from the server it measures.

mod closed_loop;
mod open_loop;
pub mod output;
pub mod protocol;

use std::{
    collections::VecDeque,
    net::{SocketAddr, TcpStream, ToSocketAddrs as _},
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use anyhow::{Context as _, Result, bail};

use crate::clock;
use crate::latency::{
    capture::LatencyCapture,
    recorder::{Recorder, RequestTimes},
};
use closed_loop::run_closed_loop;
use open_loop::run_open_loop;
use protocol::Target;

#[derive(Clone, Debug)]
pub struct LoadOptions {
    pub url: String,
    pub target: Target,
    /// One phase per rate, back to back (a rate sweep).
    pub rates: Vec<f64>,
    /// Length of each phase, warm-up included.
    pub duration: Duration,
    /// Start of each phase discarded from the distributions.
    pub warmup: Duration,
    pub connections: usize,
    pub timeout: Duration,
    pub closed_loop: bool,
    /// Run the pacer thread SCHED_FIFO so it wakes on time on a busy machine
    /// (needs root or CAP_SYS_NICE).
    pub rt_pacer: bool,
    /// Set from outside (Ctrl-C, target exit) to end the run early; what was
    /// measured until then is kept.
    pub cancel: Arc<AtomicBool>,
    /// CPUs the generator's threads run on (None: anywhere). Keeping them
    /// off the server's CPUs keeps the generator out of what it measures.
    pub cpus: Option<Vec<usize>>,
}

/// One request in flight on a connection.
#[derive(Clone, Copy, Debug)]
struct InFlight {
    times: RequestTimes,
    measured: bool,
}

/// A connection: the pacer writes, its reader thread reads and matches
/// responses to requests in order.
struct Conn {
    id: u32,
    writer: Mutex<Option<TcpStream>>,
    inflight: Mutex<VecDeque<InFlight>>,
}

/// State shared by the pacer and the readers.
struct Shared {
    opts: LoadOptions,
    addr: SocketAddr,
    recorder: Mutex<Recorder>,
    stop: AtomicBool,
    /// Completed requests so far, and those slower than [`SLOW_NS`]
    /// (for the progress display).
    completed: AtomicU64,
    slow: AtomicU64,
    rt_refused: AtomicBool,
}

/// "Slow so far" in progress displays: 1 ms from the intended send time.
pub const SLOW_NS: u64 = 1_000_000;

/// Progress callback: (elapsed ns, completed requests, slow requests).
pub type Progress<'a> = &'a (dyn Fn(u64, u64, u64) + Sync);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicked reader thread must not take the run's results with it.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The outcome of a load run.
pub struct LoadResult {
    pub opts: LoadOptions,
    pub start_ns: u64,
    pub end_ns: u64,
    pub phase_windows: Vec<(u64, u64)>,
    pub recorder: Recorder,
    pub clock_read_ns: u64,
    /// Process CPU time of the generator over the run, in ns.
    pub cpu_ns: u64,
    /// --rt-pacer was asked for but refused.
    pub rt_refused: bool,
    /// Cancelled (Ctrl-C, SIGTERM, a caller): sending stopped here, and
    /// `end_ns` and the phase windows end here too.
    pub interrupted_ns: Option<u64>,
    /// The run as planned (phases × duration), for "stopped after X of Y".
    pub planned_ns: u64,
}

/// A load run as the latency the analysis reads: the measured windows
/// (after warm-up) of each offered rate.
impl From<&LoadResult> for LatencyCapture {
    fn from(r: &LoadResult) -> Self {
        let warmup = u64::try_from(r.opts.warmup.as_nanos()).unwrap_or(0);
        let windows: Vec<(u64, u64, Option<f64>)> = r
            .phase_windows
            .iter()
            .zip(&r.opts.rates)
            // An interrupted run's last windows can end inside the warm-up.
            .map(|(&(s, e), &rate)| ((s + warmup).min(e), e, Some(rate)))
            .collect();
        let mode = if r.opts.closed_loop {
            "closed-loop"
        } else {
            "open-loop"
        };
        Self::from_recorder(format!("{mode} load {}", r.opts.url), &r.recorder, &windows)
    }
}

fn connect(addr: SocketAddr, timeout: Duration) -> std::io::Result<TcpStream> {
    let s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_nodelay(true)?;
    s.set_write_timeout(Some(timeout))?;
    // Short read timeout: readers wake to check for timeouts and stop.
    s.set_read_timeout(Some(Duration::from_millis(5)))?;
    Ok(s)
}

/// p50 of the difference of two back-to-back clock reads: the harness's
/// own cost per timestamp.
pub fn clock_read_cost() -> u64 {
    let mut d: Vec<u64> = (0..20_000)
        .map(|_| {
            let a = clock::monotonic_ns();
            let b = clock::monotonic_ns();
            b - a
        })
        .collect();
    d.sort_unstable();
    d[d.len() / 2]
}

/// Makes the calling thread SCHED_FIFO priority 10; false if not allowed.
fn make_realtime() -> bool {
    let param = libc::sched_param { sched_priority: 10 };
    // SAFETY: pid 0 = the calling thread; valid param.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) == 0 }
}

/// Per-thread set-up of every generator thread.
fn generator_thread(opts: &LoadOptions) {
    set_timer_slack_1ns();
    if let Some(cpus) = &opts.cpus
        && let Err(e) = crate::cpu::pin_set(cpus)
    {
        log::warn!("cannot keep the load generator on CPUs {cpus:?}: {e:#}");
    }
}

fn set_timer_slack_1ns() {
    // SAFETY: prctl with PR_SET_TIMERSLACK and an integer argument.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1u64, 0, 0, 0) };
}

/// Sleeps until CLOCK_MONOTONIC reaches `deadline_ns`.
fn sleep_until(deadline_ns: u64) {
    let ts = libc::timespec {
        tv_sec: (deadline_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (deadline_ns % 1_000_000_000) as libc::c_long,
    };
    loop {
        // SAFETY: valid timespec; absolute sleep on CLOCK_MONOTONIC.
        let rc = unsafe {
            libc::clock_nanosleep(
                libc::CLOCK_MONOTONIC,
                libc::TIMER_ABSTIME,
                &ts,
                std::ptr::null_mut(),
            )
        };
        if rc != libc::EINTR {
            return;
        }
    }
}

fn process_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Resolves the target and checks it accepts connections, so a dead
/// server is one clear error before anything runs.
fn resolve(opts: &LoadOptions) -> Result<SocketAddr> {
    let addr = opts
        .target
        .addr
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve {}", opts.target.addr))?
        .next()
        .with_context(|| format!("{} resolves to no address", opts.target.addr))?;
    connect(addr, opts.timeout).with_context(|| {
        format!(
            "cannot connect to {} ({addr}); is the server listening?",
            opts.url
        )
    })?;
    Ok(addr)
}

/// Checks the options and that the server accepts a connection; returns
/// its address. Commands that attach probes or change settings call it
/// first, so a typo or a dead server is one line before anything happens.
pub fn check(opts: &LoadOptions) -> Result<SocketAddr> {
    if opts.rates.iter().any(|&r| !(r > 0.0 && r.is_finite())) {
        bail!("--rate must be positive requests per second");
    }
    if opts.connections == 0 {
        bail!("--connections must be at least 1");
    }
    if opts.warmup >= opts.duration {
        bail!("--warmup must be shorter than --duration");
    }
    resolve(opts)
}

/// Runs the load and returns everything measured.
pub fn run(opts: LoadOptions, progress: Option<Progress>) -> Result<LoadResult> {
    let addr = check(&opts)?;
    let clock_read_ns = clock_read_cost();
    // Give connections and threads time to set up before the first send.
    let start_ns = clock::monotonic_ns() + 50_000_000;
    let phase_ns = u64::try_from(opts.duration.as_nanos()).unwrap_or(u64::MAX);
    let phase_windows: Vec<(u64, u64)> = (0..opts.rates.len() as u64)
        .map(|i| (start_ns + i * phase_ns, start_ns + (i + 1) * phase_ns))
        .collect();
    let end_ns = phase_windows.last().map_or(start_ns, |w| w.1);
    let shared = Arc::new(Shared {
        recorder: Mutex::new(Recorder::new(opts.rates.len(), start_ns)),
        addr,
        opts,
        stop: AtomicBool::new(false),
        completed: AtomicU64::new(0),
        slow: AtomicU64::new(0),
        rt_refused: AtomicBool::new(false),
    });
    let cpu_start = process_cpu_ns();
    if shared.opts.closed_loop {
        run_closed_loop(&shared, &phase_windows, progress)?;
    } else {
        run_open_loop(&shared, &phase_windows, progress)?;
    }
    let cpu_ns = process_cpu_ns() - cpu_start;
    let shared =
        Arc::try_unwrap(shared).map_err(|_| anyhow::anyhow!("load threads still running"))?;
    let planned_ns = end_ns - start_ns;
    let (mut end_ns, mut phase_windows) = (end_ns, phase_windows);
    let interrupted_ns = shared.opts.cancel.load(Ordering::Relaxed).then(|| {
        // Sending stopped just after the last send: the windows end there,
        // so rates and durations describe the time that was measured.
        let recorder = lock(&shared.recorder);
        let last = recorder
            .phases
            .iter()
            .map(|p| p.last_sent_ns)
            .max()
            .unwrap_or(0);
        last.max(start_ns) + 1
    });
    if let Some(stop) = interrupted_ns.filter(|&s| s < end_ns) {
        end_ns = stop;
        for w in &mut phase_windows {
            *w = (w.0.min(stop), w.1.min(stop));
        }
    }
    let rt_refused = shared.rt_refused.load(Ordering::Relaxed);
    let recorder = shared
        .recorder
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    Ok(LoadResult {
        opts: shared.opts,
        start_ns,
        end_ns,
        phase_windows,
        recorder,
        clock_read_ns,
        cpu_ns,
        rt_refused,
        interrupted_ns,
        planned_ns,
    })
}

fn open_connections(shared: &Shared) -> Result<Vec<Arc<Conn>>> {
    (0..shared.opts.connections)
        .map(|i| {
            let stream = connect(shared.addr, shared.opts.timeout)
                .with_context(|| format!("cannot connect to {}", shared.opts.url))?;
            Ok(Arc::new(Conn {
                id: i as u32,
                writer: Mutex::new(Some(stream)),
                inflight: Mutex::new(VecDeque::new()),
            }))
        })
        .collect()
}
