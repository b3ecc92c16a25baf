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

pub mod output;
pub mod protocol;

use std::{
    collections::VecDeque,
    io::{Read as _, Write as _},
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
use protocol::{Protocol, Target};

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
            .map(|(&(s, e), &rate)| (s + warmup, e, Some(rate)))
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

/// Runs the load and returns everything measured.
pub fn run(opts: LoadOptions, progress: Option<Progress>) -> Result<LoadResult> {
    if opts.rates.iter().any(|&r| !(r > 0.0 && r.is_finite())) {
        bail!("--rate must be positive requests per second");
    }
    if opts.connections == 0 {
        bail!("--connections must be at least 1");
    }
    if opts.warmup >= opts.duration {
        bail!("--warmup must be shorter than --duration");
    }
    let addr = resolve(&opts)?;
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

fn run_open_loop(
    shared: &Arc<Shared>,
    windows: &[(u64, u64)],
    progress: Option<Progress>,
) -> Result<()> {
    let conns = open_connections(shared)?;
    let readers: Vec<_> = conns
        .iter()
        .map(|c| {
            let (shared, conn) = (Arc::clone(shared), Arc::clone(c));
            std::thread::Builder::new()
                .name(format!("load-read-{}", c.id))
                .spawn(move || reader(&shared, &conn))
        })
        .collect::<std::io::Result<_>>()
        .context("cannot start reader threads")?;
    let pacer = {
        let (shared, conns, windows) = (Arc::clone(shared), conns.clone(), windows.to_vec());
        std::thread::Builder::new()
            .name("load-pacer".into())
            .spawn(move || pacer(&shared, &conns, &windows))
            .context("cannot start the pacer")?
    };
    watch(shared, windows, progress);
    let _ = pacer.join();
    // Let in-flight requests finish or time out, then stop the readers.
    let deadline = clock::monotonic_ns()
        + u64::try_from(shared.opts.timeout.as_nanos()).unwrap_or(0)
        + 20_000_000;
    while clock::monotonic_ns() < deadline && conns.iter().any(|c| !lock(&c.inflight).is_empty()) {
        std::thread::sleep(Duration::from_millis(5));
    }
    shared.stop.store(true, Ordering::Relaxed);
    for r in readers {
        let _ = r.join();
    }
    Ok(())
}

/// Reports progress until the last phase ends.
fn watch(shared: &Shared, windows: &[(u64, u64)], progress: Option<Progress>) {
    let (start, end) = (windows[0].0, windows[windows.len() - 1].1);
    while clock::monotonic_ns() < end && !shared.opts.cancel.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(200));
        if let Some(report) = progress {
            report(
                clock::monotonic_ns().saturating_sub(start),
                shared.completed.load(Ordering::Relaxed),
                shared.slow.load(Ordering::Relaxed),
            );
        }
    }
}

/// Sends every request at its intended time, round-robin over connections.
/// Send counts and slips are kept locally and merged at the end, so the
/// pacer never waits for the recorder lock the readers use.
fn pacer(shared: &Shared, conns: &[Arc<Conn>], windows: &[(u64, u64)]) {
    generator_thread(&shared.opts);
    if shared.opts.rt_pacer && !make_realtime() {
        log::warn!(
            "--rt-pacer: cannot make the pacer SCHED_FIFO (needs root or CAP_SYS_NICE); running it at normal priority"
        );
        shared.rt_refused.store(true, Ordering::Relaxed);
    }
    let mut local = Recorder::new(shared.opts.rates.len(), windows[0].0);
    let warmup = u64::try_from(shared.opts.warmup.as_nanos()).unwrap_or(0);
    let mut buf = Vec::with_capacity(256);
    let mut seq = 0u64;
    for (phase, (&rate, &(start, end))) in shared.opts.rates.iter().zip(windows).enumerate() {
        let interval = 1e9 / rate;
        for i in 0u64.. {
            let intended = start + (i as f64 * interval) as u64;
            if intended >= end || shared.opts.cancel.load(Ordering::Relaxed) {
                break;
            }
            sleep_until(intended);
            let conn = &conns[(seq % conns.len() as u64) as usize];
            buf.clear();
            shared.opts.target.protocol.encode(seq, &mut buf);
            send(
                &mut local,
                conn,
                &buf,
                intended,
                phase as u32,
                intended >= start + warmup,
            );
            seq += 1;
        }
    }
    lock(&shared.recorder).merge_sends(&local);
}

fn send(
    local: &mut Recorder,
    conn: &Conn,
    request: &[u8],
    intended: u64,
    phase: u32,
    measured: bool,
) {
    let mut writer = lock(&conn.writer);
    let sent = clock::monotonic_ns();
    local.sent(phase, sent, sent.saturating_sub(intended), measured);
    let Some(stream) = writer.as_mut() else {
        local.failed(phase);
        return;
    };
    let times = RequestTimes {
        intended_ns: intended,
        sent_ns: sent,
        done_ns: 0,
        connection: conn.id,
        phase,
    };
    // Queue before writing: the response cannot overtake its entry.
    lock(&conn.inflight).push_back(InFlight { times, measured });
    if stream.write_all(request).is_err() {
        // Unqueue it (only the pacer pushes, so it is the last entry) and
        // let the reader see the broken connection and reconnect.
        lock(&conn.inflight).pop_back();
        local.failed(phase);
        let _ = stream.shutdown(std::net::Shutdown::Both);
        *writer = None;
    }
}

/// Reads responses of one connection, matches them to requests in order,
/// times out stuck requests, and reconnects after failures.
fn reader(shared: &Shared, conn: &Conn) {
    generator_thread(&shared.opts);
    let timeout = u64::try_from(shared.opts.timeout.as_nanos()).unwrap_or(u64::MAX);
    let protocol = &shared.opts.target.protocol;
    let mut stream = lock(&conn.writer).as_ref().and_then(|s| s.try_clone().ok());
    let mut buf = vec![0u8; 64 * 1024];
    let mut len = 0usize;
    while !shared.stop.load(Ordering::Relaxed) {
        let Some(s) = stream.as_mut() else {
            std::thread::sleep(Duration::from_millis(50));
            stream = reconnect(shared, conn);
            len = 0;
            continue;
        };
        if len == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
        let broken = match s.read(&mut buf[len..]) {
            Ok(0) => true,
            Ok(n) => {
                len += n;
                let done = clock::monotonic_ns();
                match consume(shared, conn, protocol, &buf[..len], done) {
                    Ok(used) => {
                        buf.copy_within(used..len, 0);
                        len -= used;
                        false
                    }
                    Err(()) => true,
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                expire(shared, conn, timeout)
            }
            Err(_) => true,
        };
        if broken {
            fail_inflight(shared, conn);
            if let Some(s) = stream.take() {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
            *lock(&conn.writer) = None;
        }
    }
}

/// Parses complete responses from `buf`; returns the bytes used, or Err if
/// the connection must be dropped (garbage or an unrequested response).
fn consume(
    shared: &Shared,
    conn: &Conn,
    protocol: &Protocol,
    buf: &[u8],
    done: u64,
) -> Result<usize, ()> {
    let mut used = 0;
    loop {
        match protocol.parse(&buf[used..]) {
            Ok(Some(resp)) => {
                let Some(mut req) = lock(&conn.inflight).pop_front() else {
                    // A response nobody asked for: the stream is out of step.
                    lock(&shared.recorder).failed(0);
                    return Err(());
                };
                req.times.done_ns = done;
                if req.times.corrected() >= SLOW_NS {
                    shared.slow.fetch_add(1, Ordering::Relaxed);
                }
                lock(&shared.recorder).answered(req.times, req.measured, resp.ok);
                shared.completed.fetch_add(1, Ordering::Relaxed);
                used += resp.len;
            }
            Ok(None) => return Ok(used),
            Err(reason) => {
                log::warn!(
                    "{}: unparseable response ({reason}); reconnecting",
                    shared.opts.url
                );
                return Err(());
            }
        }
    }
}

/// Times out the oldest request if it waited longer than the timeout;
/// returns true when the connection must be dropped (its stream is then
/// out of step: later responses cannot be matched).
fn expire(shared: &Shared, conn: &Conn, timeout: u64) -> bool {
    let now = clock::monotonic_ns();
    let stuck = lock(&conn.inflight)
        .front()
        .is_some_and(|r| now.saturating_sub(r.times.sent_ns) > timeout);
    if !stuck {
        return false;
    }
    let drained: Vec<InFlight> = lock(&conn.inflight).drain(..).collect();
    let mut rec = lock(&shared.recorder);
    for mut r in drained {
        r.times.done_ns = now.max(r.times.sent_ns + timeout);
        rec.timed_out(r.times, r.measured);
    }
    true
}

/// Everything still queued on a broken connection is an error.
fn fail_inflight(shared: &Shared, conn: &Conn) {
    let drained: Vec<InFlight> = lock(&conn.inflight).drain(..).collect();
    let mut rec = lock(&shared.recorder);
    for r in drained {
        rec.failed(r.times.phase);
    }
}

fn reconnect(shared: &Shared, conn: &Conn) -> Option<TcpStream> {
    let fresh = connect(shared.addr, shared.opts.timeout).ok()?;
    let reader = fresh.try_clone().ok()?;
    *lock(&conn.writer) = Some(fresh);
    Some(reader)
}

/// Closed loop: one request at a time per connection. Each connection
/// takes every C-th slot of the schedule but waits for the previous
/// response before sending, and the primary latency is from the actual
/// send: what most load tools measure, and how they hide stalls.
fn run_closed_loop(
    shared: &Arc<Shared>,
    windows: &[(u64, u64)],
    progress: Option<Progress>,
) -> Result<()> {
    let conns = open_connections(shared)?;
    let workers: Vec<_> = conns
        .iter()
        .map(|c| {
            let (shared, conn, windows) = (Arc::clone(shared), Arc::clone(c), windows.to_vec());
            std::thread::Builder::new()
                .name(format!("load-closed-{}", c.id))
                .spawn(move || closed_loop_worker(&shared, &conn, &windows))
        })
        .collect::<std::io::Result<_>>()
        .context("cannot start load threads")?;
    watch(shared, windows, progress);
    for w in workers {
        let _ = w.join();
    }
    Ok(())
}

fn closed_loop_worker(shared: &Shared, conn: &Conn, windows: &[(u64, u64)]) {
    generator_thread(&shared.opts);
    let opts = &shared.opts;
    let timeout = u64::try_from(opts.timeout.as_nanos()).unwrap_or(u64::MAX);
    let warmup = u64::try_from(opts.warmup.as_nanos()).unwrap_or(0);
    let c = opts.connections as u64;
    let mut stream = lock(&conn.writer).take();
    let mut request = Vec::with_capacity(256);
    let mut buf = vec![0u8; 64 * 1024];
    for (phase, (&rate, &(start, end))) in opts.rates.iter().zip(windows).enumerate() {
        let interval = 1e9 / rate;
        for j in 0u64.. {
            let seq = j * c + u64::from(conn.id);
            let intended = start + (seq as f64 * interval) as u64;
            if intended >= end || opts.cancel.load(Ordering::Relaxed) {
                break;
            }
            sleep_until(intended);
            let sent = clock::monotonic_ns();
            let measured = intended >= start + warmup;
            lock(&shared.recorder).sent(
                phase as u32,
                sent,
                sent.saturating_sub(intended),
                measured,
            );
            if stream.is_none() {
                stream = connect(shared.addr, opts.timeout).ok();
            }
            let Some(s) = stream.as_mut() else {
                lock(&shared.recorder).failed(phase as u32);
                continue;
            };
            request.clear();
            opts.target.protocol.encode(seq, &mut request);
            let mut times = RequestTimes {
                intended_ns: intended,
                sent_ns: sent,
                done_ns: 0,
                connection: conn.id,
                phase: phase as u32,
            };
            match exchange(s, &opts.target.protocol, &request, &mut buf, sent, timeout) {
                Exchange::Answered { ok, done } => {
                    times.done_ns = done;
                    if times.service() >= SLOW_NS {
                        shared.slow.fetch_add(1, Ordering::Relaxed);
                    }
                    lock(&shared.recorder).answered(times, measured, ok);
                    shared.completed.fetch_add(1, Ordering::Relaxed);
                }
                Exchange::TimedOut => {
                    times.done_ns = clock::monotonic_ns().max(sent + timeout);
                    lock(&shared.recorder).timed_out(times, measured);
                    stream = None;
                }
                Exchange::Failed => {
                    lock(&shared.recorder).failed(phase as u32);
                    stream = None;
                }
            }
        }
    }
}

enum Exchange {
    Answered { ok: bool, done: u64 },
    TimedOut,
    Failed,
}

fn exchange(
    s: &mut TcpStream,
    protocol: &Protocol,
    request: &[u8],
    buf: &mut Vec<u8>,
    sent: u64,
    timeout: u64,
) -> Exchange {
    if s.write_all(request).is_err() {
        return Exchange::Failed;
    }
    let mut len = 0;
    loop {
        if len == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
        match s.read(&mut buf[len..]) {
            Ok(0) => return Exchange::Failed,
            Ok(n) => {
                len += n;
                let done = clock::monotonic_ns();
                match protocol.parse(&buf[..len]) {
                    Ok(Some(r)) => return Exchange::Answered { ok: r.ok, done },
                    Ok(None) => {}
                    Err(_) => return Exchange::Failed,
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                if clock::monotonic_ns().saturating_sub(sent) > timeout {
                    return Exchange::TimedOut;
                }
            }
            Err(_) => return Exchange::Failed,
        }
    }
}
