//! The demo server: a single-threaded server (tokio current-thread runtime,
//! so the serving thread is one known thread) speaking the line protocol
//! and HTTP/1.1 GET, with latency causes that can be switched on one at a
//! time. Each cause is a real mechanism, not a sleep on the request path.
//!
//! One piece on purpose (over 450 lines): each scenario's injector sits
//! beside the request path it disturbs.

use std::{
    os::fd::AsRawFd as _,
    path::PathBuf,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use anyhow::{Context as _, Result};
use tokio::{
    io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader},
    net::{TcpListener, TcpStream},
};

use super::Scenario;
use crate::{
    clock::monotonic_ns,
    cpu::{pin, set_name},
    memory::Region,
    stats::Rng,
};

#[derive(Clone, Debug, clap::Args)]
pub struct DemoServerArgs {
    #[arg(long, value_enum, default_value = "none")]
    pub scenario: Scenario,
    /// Address to listen on (port 0: any free port, printed on stdout).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: String,
    /// CPU the serving thread is pinned to.
    #[arg(long, default_value_t = 1)]
    pub cpu: usize,
    /// Period of the periodic job.
    #[arg(long, default_value = "300ms", value_parser = humantime::parse_duration)]
    pub period: Duration,
    /// Memory the periodic sweep maps and touches, MiB.
    #[arg(long, default_value_t = 48)]
    pub sweep_mib: usize,
    /// Fixed service cost per request (busy work); the load scenario
    /// defaults to 150 µs.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub service: Option<Duration>,
    /// Mean time between injected events of the sporadic scenarios.
    #[arg(long, default_value = "500ms", value_parser = humantime::parse_duration)]
    pub every: Duration,
    /// CPU for the injector thread (must not be the serving CPU).
    #[arg(long, default_value_t = 0)]
    pub injector_cpu: usize,
    /// Directory for the major-fault scenario's file (on a disk, not tmpfs).
    #[arg(long, default_value = "/var/tmp")]
    pub file_dir: PathBuf,
    /// Write each event the server injects itself (the sporadic scenarios'
    /// events, the periodic sweep) as a JSON line `{"kind", "start_ns",
    /// "end_ns"}` (CLOCK_MONOTONIC, the clock of correlator's timeline):
    /// ground truth for checking what the analysis found.
    #[arg(long)]
    pub events: Option<PathBuf>,
    /// Process name (comm) to take, for tests that find the server by name.
    #[arg(long, default_value = "demo-server")]
    pub name: String,
    /// Serve cleanly this long before injecting anything (a cause that
    /// switches on while correlator watch is already attached).
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    pub start_after: Duration,
}

/// The injected events as they happen, one JSON line each, written
/// unbuffered so a killed server leaves every event it injected. Shared by
/// the injector thread and the periodic job.
struct EventLog(Option<Mutex<std::fs::File>>);

impl EventLog {
    fn create(path: Option<&std::path::Path>) -> Result<Self> {
        path.map(|p| {
            std::fs::File::create(p)
                .map(Mutex::new)
                .with_context(|| format!("cannot create the event log {}", p.display()))
        })
        .transpose()
        .map(Self)
    }

    fn record(&self, kind: &str, start_ns: u64, end_ns: u64) {
        use std::io::Write as _;
        if let Some(f) = &self.0 {
            let line = serde_json::json!({"kind": kind, "start_ns": start_ns, "end_ns": end_ns});
            let mut f = f.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let _ = writeln!(f, "{line}");
        }
    }
}

/// Datagrams per softirq burst: each costs the receiving CPU one delivery
/// per sink (~50 µs for 256 sinks on this VM), so a burst is ~20 ms of
/// receive work, while staying under the per-CPU backlog limit
/// (net.core.netdev_max_backlog, 1000) so nothing is dropped there.
const BURST_DATAGRAMS: usize = 400;
/// Sockets the bursts are delivered to.
const BROADCAST_SINKS: usize = 256;
/// Page cache the memory-limit scenario's request path writes per event,
/// MiB: four times the suite's cgroup limit
/// (`demo::suite::DEMO_MEMORY_LIMIT`), so most of it must be reclaimed,
/// and so written back, while the request waits. Measured beforehand on
/// this VM (a v1 cgroup, 64 MiB written under a 16 MiB limit): 30-50 ms
/// per burst, 70% of it in the cgroup's reclaim.
pub const WRITE_BURST_MIB: usize = 32;

/// Loopback broadcast: datagrams to 127.255.255.255:port reach every socket
/// bound to that address and port, so the receive work (in NET_RX softirq)
/// is many times the send work: a sender on another CPU can load the
/// receiving CPU the way a busy NIC queue would. The sinks are never read;
/// once their buffers are full the kernel drops what they are delivered,
/// after doing the work.
struct Broadcast {
    tx: socket2::Socket,
    dest: socket2::SockAddr,
    _sinks: Vec<socket2::Socket>,
}

impl Broadcast {
    fn new() -> std::io::Result<Self> {
        use socket2::{Domain, Socket, Type};
        let udp = || Socket::new(Domain::IPV4, Type::DGRAM, None);
        let mut addr = std::net::SocketAddr::from(([127, 255, 255, 255], 0));
        let mut sinks = Vec::with_capacity(BROADCAST_SINKS);
        for _ in 0..BROADCAST_SINKS {
            let s = udp()?;
            s.set_reuse_address(true)?;
            // Small buffers: full after a few datagrams, then drops.
            s.set_recv_buffer_size(4096)?;
            s.bind(&addr.into())?;
            if addr.port() == 0 {
                // The first bind picked the port; the others share it.
                addr = s
                    .local_addr()?
                    .as_socket()
                    .ok_or_else(|| std::io::Error::other("not an IP socket"))?;
            }
            sinks.push(s);
        }
        let tx = udp()?;
        tx.set_broadcast(true)?;
        Ok(Self {
            tx,
            dest: addr.into(),
            _sinks: sinks,
        })
    }
}

/// What the injector asks the request path to do next.
#[derive(Default)]
struct Pending {
    refault: AtomicBool,
    reread: AtomicBool,
    hop: AtomicBool,
    write: AtomicBool,
}

/// Memory, files and sockets the scenarios work on.
struct Injected {
    scenario: Scenario,
    pending: Pending,
    /// Anonymous working set (page-faults).
    working_set: Option<Region>,
    /// File mapping (major-faults).
    file: Option<(std::fs::File, Region, PathBuf)>,
    /// Loopback traffic (softirq).
    broadcast: Option<Broadcast>,
    /// The file the request path writes (memory-limit), and a chunk of
    /// what it writes; the lock is held by a burst and by the injector
    /// emptying the file, so neither runs into the other.
    scratch: Option<(Mutex<std::fs::File>, Vec<u8>)>,
    cpu: usize,
    other_cpu: usize,
}

impl Injected {
    fn new(args: &DemoServerArgs) -> Result<Self> {
        let mut me = Self {
            scenario: args.scenario,
            pending: Pending::default(),
            working_set: None,
            file: None,
            broadcast: None,
            scratch: None,
            cpu: args.cpu,
            other_cpu: args.injector_cpu,
        };
        match args.scenario {
            Scenario::PageFaults => {
                let ws = Region::anonymous(48 << 20).context("cannot map the working set")?;
                ws.touch(true);
                me.working_set = Some(ws);
            }
            Scenario::MajorFaults => me.file = Some(mapped_file(&args.file_dir)?),
            Scenario::Softirq => {
                me.broadcast = Some(Broadcast::new().context("cannot set up loopback broadcast")?)
            }
            Scenario::MemoryLimit => {
                let (file, _) = crate::memory::disk_file(&args.file_dir, "demo-writes", 0, 0)?;
                me.scratch = Some((Mutex::new(file), vec![0x5a; 1 << 20]));
            }
            _ => {}
        }
        Ok(me)
    }

    /// Called on the request path before each request.
    fn on_request(&self) {
        let p = &self.pending;
        if p.refault.swap(false, Ordering::Relaxed)
            && let Some(ws) = &self.working_set
        {
            ws.touch(true);
        }
        if p.reread.swap(false, Ordering::Relaxed)
            && let Some((_, region, _)) = &self.file
        {
            std::hint::black_box(region.touch(false));
        }
        if p.write.swap(false, Ordering::Relaxed)
            && let Some((file, chunk)) = &self.scratch
        {
            let file = file
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            write_burst(&file, chunk);
        }
        if p.hop.swap(false, Ordering::Relaxed) {
            for i in 0..1_000 {
                let _ = pin(if i % 2 == 0 { self.other_cpu } else { self.cpu });
            }
            let _ = pin(self.cpu);
        }
    }

    /// Empties the memory-limit scenario's file before the next burst, on
    /// the injector's thread: the request path then only writes (fresh
    /// pages, all charged to the cgroup). Truncating on the request path
    /// made it wait for more than the cgroup: the blocks the reclaim's
    /// writeback had allocated are freed by the truncation, which on a
    /// filesystem mounted with `discard` (this VM's ext4) waits for the
    /// disk's discard (`ext4_free_blocks` → `blkdev_issue_discard`):
    /// 212 ms in 20 truncations of one 10 s run, 174 ms in one of another, a
    /// blocked `ftruncate` a report rightly named beside the memory stall.
    /// Returns false (the event is skipped) while the last burst is still
    /// pending or the file cannot be emptied.
    fn empty_scratch(&self) -> bool {
        let Some((file, _)) = &self.scratch else {
            return false;
        };
        if self.pending.write.load(Ordering::Relaxed) {
            return false;
        }
        // Waits for a burst under way.
        let file = file
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        file.set_len(0).is_ok()
    }

    /// A burst of loopback UDP datagrams, sent from the injector's CPU. Where
    /// the kernel does their receive work (NET_RX softirq) is decided by the
    /// loopback device's RPS mask: the suite steers it to the serving CPU
    /// (`rps=lo:CPU`), as a NIC's interrupt affinity or RPS would in
    /// production; without steering the work stays on the sender's CPU.
    fn burst(&self) {
        if let Some(b) = &self.broadcast {
            for _ in 0..BURST_DATAGRAMS {
                let _ = b.tx.send_to(&[0x5a; 64], &b.dest);
            }
        }
    }

    /// The injector: at random times (mean `every`), prepares the next event.
    fn inject(&self, start_after: Duration, every: Duration, lock: &Mutex<()>, log: &EventLog) {
        std::thread::sleep(start_after);
        let mut rng = Rng::new(u64::from(std::process::id()) ^ 0x5eed);
        let mean = u64::try_from(every.as_millis()).unwrap_or(500).max(10);
        loop {
            std::thread::sleep(Duration::from_millis(sporadic_gap(&mut rng, mean)));
            if self.scenario == Scenario::MemoryLimit && !self.empty_scratch() {
                continue;
            }
            let start = monotonic_ns();
            let p = &self.pending;
            match self.scenario {
                Scenario::PageFaults => {
                    if let Some(ws) = &self.working_set {
                        ws.drop_pages();
                    }
                    p.refault.store(true, Ordering::Relaxed);
                }
                Scenario::MajorFaults => {
                    if let Some((f, region, _)) = &self.file {
                        region.drop_pages();
                        // SAFETY: valid fd; drops the file's clean pages from the page cache.
                        unsafe {
                            libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED)
                        };
                    }
                    p.reread.store(true, Ordering::Relaxed);
                }
                Scenario::Migrations => p.hop.store(true, Ordering::Relaxed),
                Scenario::MemoryLimit => p.write.store(true, Ordering::Relaxed),
                Scenario::Softirq => self.burst(),
                Scenario::Blocking => {
                    let _held = lock
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    std::thread::sleep(Duration::from_millis(rng.range(10, 20)));
                }
                _ => return,
            }
            log.record(self.scenario.name(), start, monotonic_ns());
        }
    }
}

impl Drop for Injected {
    fn drop(&mut self) {
        if let Some((_, _, path)) = &self.file {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// A 6 MiB file on disk, mapped shared and read-only, without readahead
/// (every page is its own major fault once evicted).
fn mapped_file(dir: &std::path::Path) -> Result<(std::fs::File, Region, PathBuf)> {
    let len = 6 << 20;
    let (file, path) = crate::memory::disk_file(dir, "demo", len, 0xa5)?;
    let region =
        Region::file(&file, len).with_context(|| format!("cannot map {}", path.display()))?;
    region.touch(false);
    Ok((file, region, path))
}

/// The memory-limit scenario's burst, into the file the injector emptied
/// (`Injected::empty_scratch`): `WRITE_BURST_MIB` written through the
/// page cache. Every page is new, so charged to the server's memory
/// cgroup now; past the limit the cgroup reclaims its own pages, the
/// oldest of this burst, dirty, and waits for their writeback.
fn write_burst(file: &std::fs::File, chunk: &[u8]) {
    use std::os::unix::fs::FileExt as _;
    for i in 0..WRITE_BURST_MIB {
        if file.write_all_at(chunk, (i * chunk.len()) as u64).is_err() {
            return;
        }
    }
}

/// A GC-like sweep: map fresh memory, touch every page (one minor fault
/// each), unmap. Runs on the serving thread, so requests wait for it.
pub fn sweep(mib: usize) {
    if let Ok(region) = Region::anonymous(mib << 20) {
        region.touch(true);
    }
}

/// Time to the next sporadic event, ms: a Poisson process (exponential
/// gaps) with a floor of 30% of the mean so events stay separate. Gaps of
/// bounded jitter (uniform ±40%, as before) are regular enough that about
/// one run in twelve passed the periodicity test, which is right: such a
/// process is nearly periodic. Real sporadic causes are not.
fn sporadic_gap(rng: &mut Rng, mean_ms: u64) -> u64 {
    let floor = mean_ms * 3 / 10;
    let exp = -((1.0 - rng.unit()).ln()) * (mean_ms - floor) as f64;
    floor + exp.min(10.0 * mean_ms as f64) as u64
}

/// Lowest scheduling class for the calling thread: runs only when its CPU
/// has nothing else to do.
fn sched_idle() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: valid policy and parameter for the calling thread.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
}

/// Busy work for `d` (the load scenario's fixed service cost).
fn spin(d: Duration) {
    if d.is_zero() {
        return;
    }
    let end = std::time::Instant::now() + d;
    while std::time::Instant::now() < end {
        std::hint::spin_loop();
    }
}

pub fn run(args: &DemoServerArgs) -> Result<()> {
    set_name(&args.name);
    let injected = Arc::new(Injected::new(args)?);
    let log = Arc::new(EventLog::create(args.events.as_deref())?);
    let lock = Arc::new(Mutex::new(()));
    {
        let (injected, lock, log, every, cpu, start_after) = (
            Arc::clone(&injected),
            Arc::clone(&lock),
            Arc::clone(&log),
            args.every,
            args.injector_cpu,
            args.start_after,
        );
        std::thread::Builder::new()
            .name("demo-injector".into())
            .spawn(move || {
                let _ = pin(cpu);
                if injected.scenario == Scenario::Softirq {
                    // The bursts' send side must not delay the load
                    // generator's readers on the same CPU (that would be
                    // client-side latency, not the server's).
                    sched_idle();
                }
                injected.inject(start_after, every, &lock, &log);
            })?;
    }
    pin(args.cpu)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    rt.block_on(serve(args.clone(), injected, lock, log))
}

async fn serve(
    args: DemoServerArgs,
    injected: Arc<Injected>,
    lock: Arc<Mutex<()>>,
    log: Arc<EventLog>,
) -> Result<()> {
    let listener = TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    println!("listening on {}", listener.local_addr()?);
    // Lets the caller know the server is ready (and where) before load starts.
    use std::io::Write as _;
    std::io::stdout().flush()?;
    if args.scenario == Scenario::Periodic {
        let (period, mib, start_after) = (args.period, args.sweep_mib, args.start_after);
        tokio::spawn(async move {
            tokio::time::sleep(start_after).await;
            let mut tick = tokio::time::interval(period);
            tick.tick().await;
            loop {
                tick.tick().await;
                let start = monotonic_ns();
                sweep(mib);
                log.record("periodic", start, monotonic_ns());
            }
        });
    }
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let service = args.service.unwrap_or(if args.scenario == Scenario::Load {
            Duration::from_micros(150)
        } else {
            Duration::ZERO
        });
        let (lock, injected) = (Arc::clone(&lock), Arc::clone(&injected));
        tokio::spawn(async move {
            let _ = connection(stream, &lock, &injected, service).await;
        });
    }
}

async fn connection(
    stream: TcpStream,
    lock: &Mutex<()>,
    injected: &Injected,
    service: Duration,
) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    let mut line = String::new();
    let mut out = Vec::with_capacity(4096);
    loop {
        line.clear();
        if reader.read_line(&mut line).await? == 0 {
            return Ok(());
        }
        let http = line.starts_with("GET ");
        if http {
            loop {
                let mut header = String::new();
                if reader.read_line(&mut header).await? == 0 {
                    return Ok(());
                }
                if header == "\r\n" || header == "\n" {
                    break;
                }
            }
        }
        {
            // The request path needs this lock (the blocking scenario's
            // injector holds it at times).
            let _held = lock
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            injected.on_request();
            spin(service);
        }
        out.extend_from_slice(if http {
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n"
        } else {
            b"ok\n"
        });
        // Pipelined requests already buffered are answered in one write.
        if !reader.buffer().contains(&b'\n') {
            write.write_all(&out).await?;
            out.clear();
        }
    }
}
