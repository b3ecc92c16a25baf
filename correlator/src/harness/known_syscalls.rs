//! Known syscall work for ground-truth tests of the syscall and wait-site
//! accounting, done by the `correlator-testkit workload` helper, which times each
//! phase itself: CLOCK_MONOTONIC around it (wall) and
//! CLOCK_THREAD_CPUTIME_ID (its thread's CPU time).
//!
//! Phases, each optional:
//! - `zero_reads`: reads of 1 MiB from /dev/zero, work the kernel does on
//!   the CPU inside the syscall (clearing the buffer), so that the entry and
//!   exit paths, which no syscall tracepoint covers, are a small part of it
//!   (a cheap call like getppid is mostly entry and exit path);
//! - `nanosleeps`: 1 ms sleeps, off the CPU inside the syscall;
//! - `fork`: one fork() of the process after touching `fork_mib` MiB, timed
//!   around the call (copying the page tables is the kernel's work);
//! - wait sites: a futex held by another thread (`lock`), a pread of a
//!   file dropped from the page cache (`io`), an epoll_wait with nothing to
//!   wait for (`idle`);
//! - `contend`: this thread and a second one, on different CPUs, set the
//!   flags of one open file in a loop (`fcntl(F_SETFL)` takes the file's
//!   `f_lock` spinlock): a kernel spinlock the two fight over.

use std::{
    io::Write as _,
    os::{fd::AsRawFd as _, unix::fs::FileExt as _},
    path::Path,
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::{Context as _, Result, bail};
use serde::{Deserialize, Serialize};

use crate::clock::monotonic_ns;

#[derive(Clone, Debug, Default, clap::Args)]
pub struct SyscallWork {
    /// Reads of 1 MiB from /dev/zero.
    #[arg(long, default_value_t = 0)]
    pub zero_reads: usize,
    /// nanosleep(1 ms) calls.
    #[arg(long, default_value_t = 0)]
    pub nanosleeps: usize,
    /// Fork once after touching this many MiB (0: no fork).
    #[arg(long, default_value_t = 0)]
    pub fork_mib: usize,
    /// Wait this long for a mutex another thread holds, ms.
    #[arg(long, default_value_t = 0)]
    pub lock_wait_ms: u64,
    /// pread this many MiB of a file dropped from the page cache (in the
    /// --fault-dir directory).
    #[arg(long, default_value_t = 0)]
    pub cold_read_mib: usize,
    /// epoll_wait on nothing for this long, ms.
    #[arg(long, default_value_t = 0)]
    pub idle_ms: u64,
    /// Fight another thread for a kernel spinlock this long, ms.
    #[arg(long, default_value_t = 0)]
    pub contend_ms: u64,
}

/// One phase as the helper timed it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Phase {
    pub name: String,
    /// CLOCK_MONOTONIC, the recorder's clock.
    pub start_ns: u64,
    pub end_ns: u64,
    /// The thread's CPU time in the phase.
    pub cpu_ns: u64,
    pub calls: usize,
}

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid clock id and pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

/// Runs `f` `calls` times, timed as one phase.
fn phase(name: &str, calls: usize, mut f: impl FnMut() -> Result<()>) -> Result<Phase> {
    let (start_ns, cpu0) = (monotonic_ns(), thread_cpu_ns());
    for _ in 0..calls {
        f()?;
    }
    let (cpu1, end_ns) = (thread_cpu_ns(), monotonic_ns());
    Ok(Phase {
        name: name.into(),
        start_ns,
        end_ns,
        cpu_ns: cpu1 - cpu0,
        calls,
    })
}

impl SyscallWork {
    pub fn is_empty(&self) -> bool {
        self.zero_reads == 0
            && self.nanosleeps == 0
            && self.fork_mib == 0
            && self.lock_wait_ms == 0
            && self.cold_read_mib == 0
            && self.idle_ms == 0
            && self.contend_ms == 0
    }

    /// Prepared before "go": the cold file (its writes are not the work).
    pub fn prepare(&self, dir: &Path) -> Result<Option<ColdFile>> {
        if self.cold_read_mib == 0 {
            return Ok(None);
        }
        let (file, path) = crate::memory::disk_file(dir, "cold", self.cold_read_mib << 20, 0x5a)?;
        Ok(Some(ColdFile { file, path }))
    }

    pub fn run(&self, cold: Option<&ColdFile>) -> Result<Vec<Phase>> {
        let mut phases = Vec::new();
        if self.zero_reads > 0 {
            let mut zero = std::fs::File::open("/dev/zero").context("opening /dev/zero")?;
            let mut buf = vec![1u8; 1 << 20];
            phases.push(phase("zero_reads", self.zero_reads, || {
                // read(2), not pread: the cold reads below are the preads.
                std::io::Read::read(&mut zero, &mut buf).context("reading /dev/zero")?;
                Ok(())
            })?);
        }
        if self.nanosleeps > 0 {
            let ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 1_000_000,
            };
            phases.push(phase("nanosleeps", self.nanosleeps, || {
                // The nanosleep syscall itself (glibc's nanosleep() calls
                // clock_nanosleep), so the test knows which total to read.
                // SAFETY: valid timespec; no remainder wanted.
                unsafe {
                    libc::syscall(
                        libc::SYS_nanosleep,
                        &raw const ts,
                        std::ptr::null_mut::<libc::timespec>(),
                    )
                };
                Ok(())
            })?);
        }
        if self.fork_mib > 0 {
            let region = crate::memory::Region::anonymous(self.fork_mib << 20)
                .context("cannot map the memory to fork with")?;
            // Timed too: page faults from user mode, kernel work outside
            // any syscall (what a sampled syscall context must not call a
            // syscall).
            phases.push(phase("touch", 1, || {
                region.touch(true);
                Ok(())
            })?);
            let mut child = 0;
            phases.push(phase("fork", 1, || {
                child = fork()?;
                Ok(())
            })?);
            let mut status = 0;
            // SAFETY: our own child, killed and reaped outside the timed
            // phase (tearing down its copy of 512 MiB of page tables takes
            // milliseconds: if it exited at once and ran on the parent's
            // CPU, that would land inside the parent's timing).
            unsafe {
                libc::kill(child, libc::SIGKILL);
                libc::waitpid(child, &mut status, 0);
            }
            drop(region);
        }
        if self.lock_wait_ms > 0 {
            phases.push(lock_wait(Duration::from_millis(self.lock_wait_ms))?);
        }
        if let Some(cold) = cold {
            // SAFETY: valid fd; drops the file's clean pages from the page cache.
            unsafe { libc::posix_fadvise(cold.file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
            let mut buf = vec![0u8; 64 << 10];
            let mut offset = 0u64;
            phases.push(phase("cold_reads", self.cold_read_mib * 16, || {
                cold.file.read_at(&mut buf, offset).context("pread")?;
                offset += buf.len() as u64;
                Ok(())
            })?);
        }
        if self.idle_ms > 0 {
            phases.push(idle(self.idle_ms)?);
        }
        if self.contend_ms > 0 {
            phases.push(contend(Duration::from_millis(self.contend_ms))?);
        }
        Ok(phases)
    }
}

/// A file on disk whose pages are dropped before it is read.
pub struct ColdFile {
    file: std::fs::File,
    path: std::path::PathBuf,
}

impl Drop for ColdFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Forks; the child waits, doing nothing, until it is killed. Returns the
/// child's pid.
fn fork() -> Result<libc::pid_t> {
    // SAFETY: the child only calls pause and _exit.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        bail!("fork: {}", std::io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: async-signal-safe calls only.
        unsafe {
            libc::pause();
            libc::_exit(0)
        };
    }
    Ok(pid)
}

/// Another thread takes a mutex and holds it for `hold`; this thread then
/// blocks on it (a futex wait).
fn lock_wait(hold: Duration) -> Result<Phase> {
    let lock = Arc::new(Mutex::new(()));
    let (taken_tx, taken_rx) = std::sync::mpsc::channel();
    let holder = {
        let lock = Arc::clone(&lock);
        std::thread::spawn(move || {
            let _held = lock
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let _ = taken_tx.send(());
            std::thread::sleep(hold);
        })
    };
    taken_rx.recv().context("lock holder did not start")?;
    let p = phase("lock_wait", 1, || {
        drop(
            lock.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        Ok(())
    })?;
    holder
        .join()
        .map_err(|_| anyhow::anyhow!("lock holder panicked"))?;
    Ok(p)
}

/// Pins the calling thread to `cpu` (best effort: on one CPU the two
/// threads contend less, and the test says so).
fn pin(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET within its bounds.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &raw const set);
    }
}

/// Sets the flags of `fd` twice (on, off): `f_lock` taken twice.
fn set_flags(fd: i32) {
    // SAFETY: fcntl on an open fd; a failure only means no lock was taken.
    unsafe {
        libc::fcntl(fd, libc::F_SETFL, libc::O_NONBLOCK);
        libc::fcntl(fd, libc::F_SETFL, 0);
    }
}

/// This thread (on CPU 0) and another (on CPU 1) set one file's flags in a
/// loop for `d`; the phase's calls are this thread's fcntl calls.
fn contend(d: Duration) -> Result<Phase> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .context("opening /dev/null")?;
    let fd = file.as_raw_fd();
    let stop = Arc::new(AtomicBool::new(false));
    let start = Arc::new(std::sync::Barrier::new(2));
    let other = {
        let (stop, start) = (Arc::clone(&stop), Arc::clone(&start));
        std::thread::spawn(move || {
            pin(1);
            start.wait();
            while !stop.load(Ordering::Relaxed) {
                set_flags(fd);
            }
        })
    };
    pin(0);
    start.wait();
    let end = std::time::Instant::now() + d;
    let (start_ns, cpu0) = (monotonic_ns(), thread_cpu_ns());
    let mut calls = 0;
    while std::time::Instant::now() < end {
        set_flags(fd);
        calls += 2;
    }
    let (end_ns, cpu1) = (monotonic_ns(), thread_cpu_ns());
    stop.store(true, Ordering::Relaxed);
    other
        .join()
        .map_err(|_| anyhow::anyhow!("contending thread panicked"))?;
    drop(file);
    Ok(Phase {
        name: "contend".into(),
        start_ns,
        end_ns,
        cpu_ns: cpu1 - cpu0,
        calls,
    })
}

/// epoll_wait on an empty epoll set until its timeout: waiting for input
/// that does not come.
fn idle(ms: u64) -> Result<Phase> {
    // SAFETY: plain syscall.
    let epfd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if epfd < 0 {
        bail!("epoll_create1: {}", std::io::Error::last_os_error());
    }
    let mut events = [libc::epoll_event { events: 0, u64: 0 }; 1];
    let timeout = i32::try_from(ms).unwrap_or(i32::MAX);
    let p = phase("idle", 1, || {
        // SAFETY: valid epoll fd and buffer.
        unsafe { libc::epoll_wait(epfd, events.as_mut_ptr(), 1, timeout) };
        Ok(())
    });
    // SAFETY: our own fd.
    unsafe { libc::close(epfd) };
    let _ = std::io::stdout().flush();
    p
}
