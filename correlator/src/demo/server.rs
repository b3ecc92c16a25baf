//! The demo server: a single-threaded server (tokio current-thread runtime,
//! so the serving thread is one known thread) speaking the line protocol
//! and HTTP/1.1 GET, with latency causes that can be switched on one at a
//! time. Each cause is a real mechanism, not a sleep on the request path.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::{Context as _, Result};
use tokio::{
    io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader},
    net::{TcpListener, TcpStream},
};

use super::Scenario;
use crate::workload::{pin, set_name};

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
    /// Fixed service cost per request (busy work) for the load scenario.
    #[arg(long, default_value = "0us", value_parser = humantime::parse_duration)]
    pub service: Duration,
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096)
}

/// A GC-like sweep: map fresh memory, touch every page (one minor fault
/// each), unmap. Runs on the serving thread, so requests wait for it.
pub fn sweep(mib: usize) {
    let len = mib << 20;
    // SAFETY: anonymous private mapping, checked, unmapped below.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return;
    }
    // SAFETY: ptr/len from mmap; 4 KiB faults, not huge pages.
    unsafe { libc::madvise(ptr, len, libc::MADV_NOHUGEPAGE) };
    let page = page_size();
    for off in (0..len).step_by(page) {
        // SAFETY: within the mapping.
        unsafe { ptr.cast::<u8>().add(off).write_volatile(1) };
    }
    // SAFETY: ptr/len from mmap above.
    unsafe { libc::munmap(ptr, len) };
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
    set_name("demo-server");
    pin(args.cpu)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    rt.block_on(serve(args.clone()))
}

async fn serve(args: DemoServerArgs) -> Result<()> {
    let listener = TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    println!("listening on {}", listener.local_addr()?);
    // Lets the caller know the server is ready (and where) before load starts.
    use std::io::Write as _;
    std::io::stdout().flush()?;
    let lock = Arc::new(Mutex::new(()));
    if args.scenario == Scenario::Periodic {
        let (period, mib) = (args.period, args.sweep_mib);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            tick.tick().await;
            loop {
                tick.tick().await;
                sweep(mib);
            }
        });
    }
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let (lock, service) = (Arc::clone(&lock), args.service);
        tokio::spawn(async move {
            let _ = connection(stream, &lock, service).await;
        });
    }
}

async fn connection(stream: TcpStream, lock: &Mutex<()>, service: Duration) -> std::io::Result<()> {
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
            // other thread holds it at times).
            let _held = lock
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
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
