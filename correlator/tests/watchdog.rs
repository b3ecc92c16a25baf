//! A hung live test fails, with what hung, instead of hanging the suite.
//!
//! A CI run stopped at its 90-minute limit inside
//! `probes_live::timer_interrupts_match_proc_interrupts`, a test that takes
//! 8 s (the fast tier's live tests take about 12 minutes in all): the run
//! printed nothing more, so nobody could tell which of its children
//! (workload, bpftrace, `correlator record`) or which wait of the test hung.
//! The helpers' waits on a child (`wait`, reading its pipe) have no
//! deadline of their own; a child that never exits or never writes again
//! would hold the suite until CI's limit.
//!
//! So every attempt of a live test runs under a [`Watchdog`]: past
//! [`ATTEMPT_LIMIT`] it prints, for every descendant process of the test
//! binary and for the test binary's own threads, the state, the kernel
//! wait channel and the kernel stack (ground truth from /proc, read as
//! root), then kills the descendants, which ends any wait on them, and the
//! attempt fails as hung whatever its body does afterwards. If the body
//! still does not return within [`GRACE`], the test binary exits with a
//! failure: the suite ends red rather than at CI's limit.

use std::{
    sync::{Arc, Condvar, Mutex},
    time::{Duration, Instant},
};

/// The longest one attempt of a live test may take. The slowest attempts
/// measured take 140 s (the demo, which itself re-runs a disturbed
/// scenario up to 4 times, so up to about 560 s on a noisy host); a hang
/// is anything well beyond.
pub const ATTEMPT_LIMIT: Duration = Duration::from_secs(15 * 60);
/// How long the body has to return once its children were killed.
const GRACE: Duration = Duration::from_secs(60);

/// Whether the watchdog fired, shared with its thread.
struct State {
    done: bool,
    fired: bool,
}

/// Watches one attempt of a live test; see the module docs.
pub struct Watchdog {
    state: Arc<(Mutex<State>, Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watchdog {
    /// Starts watching an attempt of `test` that may take `limit`.
    pub fn arm(test: &str, limit: Duration) -> Self {
        let state = Arc::new((
            Mutex::new(State {
                done: false,
                fired: false,
            }),
            Condvar::new(),
        ));
        let shared = Arc::clone(&state);
        let test = test.to_string();
        let thread = std::thread::spawn(move || watch(&test, limit, &shared));
        Self {
            state,
            thread: Some(thread),
        }
    }

    /// Stops watching; true when the attempt hung (the watchdog fired).
    pub fn disarm(mut self) -> bool {
        let (lock, cvar) = &*self.state;
        let fired = {
            let mut s = lock.lock().unwrap_or_else(|e| e.into_inner());
            s.done = true;
            s.fired
        };
        cvar.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        fired
    }
}

/// The watchdog thread: waits for the attempt to end or `limit` to pass.
fn watch(test: &str, limit: Duration, state: &(Mutex<State>, Condvar)) {
    let (lock, cvar) = state;
    let deadline = Instant::now() + limit;
    let mut s = lock.lock().unwrap_or_else(|e| e.into_inner());
    while !s.done {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        s = cvar
            .wait_timeout(s, deadline - now)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
    if s.done {
        return;
    }
    s.fired = true;
    drop(s);
    eprintln!(
        "WATCHDOG {test}: the attempt is still running after {:.0} s: it hung. What each process was doing:",
        limit.as_secs_f64()
    );
    let me = std::process::id();
    eprint!("{}", describe_threads(me, "the test binary"));
    let children = correlator::target::descendants(me);
    for &pid in &children {
        eprint!("{}", describe_threads(pid, "a child"));
    }
    for &pid in &children {
        // SAFETY: kill(2) on a process this test started (or its child).
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    }
    eprintln!(
        "WATCHDOG {test}: killed {} child process(es); the attempt fails as hung",
        children.len()
    );
    let deadline = Instant::now() + GRACE;
    let mut s = lock.lock().unwrap_or_else(|e| e.into_inner());
    while !s.done {
        let now = Instant::now();
        if now >= deadline {
            eprintln!(
                "WATCHDOG {test}: still no return {:.0} s after its children were killed: the test binary exits",
                GRACE.as_secs_f64()
            );
            eprint!("{}", describe_threads(me, "the test binary"));
            std::process::exit(101);
        }
        s = cvar
            .wait_timeout(s, deadline - now)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}

/// One block per thread of `pid`: its name, state, wait channel and kernel
/// stack, under the process's command line.
fn describe_threads(pid: u32, what: &str) -> String {
    let read = |p: String| std::fs::read_to_string(p).unwrap_or_default();
    let cmdline = read(format!("/proc/{pid}/cmdline")).replace('\0', " ");
    let mut out = format!("  {what}: pid {pid}: {}\n", cmdline.trim());
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok());
    for tid in tasks {
        let base = format!("/proc/{pid}/task/{tid}");
        let stat = read(format!("{base}/stat"));
        let state = stat
            .rsplit(')')
            .next()
            .and_then(|r| r.split_whitespace().next())
            .unwrap_or("?");
        out.push_str(&format!(
            "    tid {tid} ({}) state {state}, waiting in {}\n",
            read(format!("{base}/comm")).trim(),
            read(format!("{base}/wchan")).trim(),
        ));
        for frame in read(format!("{base}/stack")).lines() {
            out.push_str(&format!("      {frame}\n"));
        }
    }
    out
}

#[test]
fn a_child_that_never_exits_is_killed_and_the_attempt_fails() {
    let mut child = std::process::Command::new("sleep")
        .arg("600")
        .spawn()
        .expect("sleep");
    let dog = Watchdog::arm("watchdog_self_test", Duration::from_millis(200));
    // Without the watchdog this wait lasts 600 s.
    let status = child.wait().expect("wait");
    assert!(!status.success(), "sleep was killed: {status:?}");
    assert!(dog.disarm(), "the watchdog fired");
}

#[test]
fn an_attempt_that_ends_in_time_is_left_alone() {
    let dog = Watchdog::arm("watchdog_self_test", Duration::from_secs(60));
    std::thread::sleep(Duration::from_millis(10));
    assert!(!dog.disarm());
}
