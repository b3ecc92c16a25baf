//! Shared helpers of the integration tests: privilege gating, spawning the
//! workload helper, the recorder and servers.

use std::{
    io::{BufRead, BufReader, Write as _},
    path::PathBuf,
    process::{Child, ChildStdin, Command, Stdio},
    time::{Duration, Instant},
};

use correlator::{harness::workload::Usage, runfile::RunFile};

pub const BIN: &str = env!("CARGO_BIN_EXE_correlator");
/// The helper programs (workload, test servers, synthetic runs): not the
/// product, built with the `testkit` feature.
pub const TESTKIT: &str = env!("CARGO_BIN_EXE_correlator-testkit");

/// Live tests need root and BPF. In CI (`CI=true`) their absence is a
/// failure; elsewhere the test is skipped with the reason printed.
pub fn live_or_skip(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let reason = if !root {
        Some("needs root (BPF, perf events)")
    } else if std::fs::metadata("/sys/kernel/tracing/events/sched").is_err() {
        Some("needs tracefs at /sys/kernel/tracing (run xtask/setup.sh)")
    } else {
        None
    };
    match reason {
        None => true,
        Some(why) if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("{test}: {why}, and CI=true forbids skipping")
        }
        Some(why) => {
            eprintln!("SKIPPED {test}: {why}");
            false
        }
    }
}

pub fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// A workload process waiting for its go line.
pub struct Workload {
    pub child: Child,
    stdin: Option<ChildStdin>,
}

impl Workload {
    pub fn spawn(args: &[&str]) -> Self {
        let mut child = Command::new(TESTKIT)
            .arg("workload")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn workload");
        let stdin = child.stdin.take();
        // Wait until it is set up and at its blocking read: counters opened
        // earlier would count its start-up (a CI run failed on a slow start:
        // 300 loader faults in the kernel's count and not in the window).
        let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let ready = wait_for_line(&mut lines, |l| l == "ready", Some("workload"), LONG_START);
        assert!(ready, "workload did not get ready: {:?}", child.try_wait());
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                eprintln!("workload: {line}");
            }
        });
        Self { child, stdin }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends the go line. Stdin stays open (a `--hold` workload waits on
    /// it after its report) until `finish*` or `release`.
    pub fn go(&mut self) {
        let stdin = self.stdin.as_mut().expect("stdin");
        stdin.write_all(b"go\n").expect("write go");
    }

    /// Waits until the workload sleeps (state S: blocked on its stdin), so
    /// that its switch out of the CPU has happened before whatever comes
    /// next starts or stops counting.
    pub fn wait_blocked(&self) {
        let stat = format!("/proc/{}/stat", self.pid());
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let text = std::fs::read_to_string(&stat).expect("stat");
            // The state follows the parenthesised comm.
            let state = text
                .rsplit(')')
                .next()
                .and_then(|r| r.split_whitespace().next());
            if state == Some("S") {
                return;
            }
            assert!(Instant::now() < deadline, "workload never blocked: {text}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// A `--hold` workload's report, read while it waits, blocked, to be
    /// released.
    pub fn held_report(&mut self) -> serde_json::Value {
        let mut line = String::new();
        BufReader::new(self.child.stdout.as_mut().expect("stdout"))
            .read_line(&mut line)
            .expect("report line");
        serde_json::from_str(&line).expect("workload json")
    }

    /// Lets a `--hold` workload exit and waits for it.
    pub fn release(mut self) {
        drop(self.stdin.take());
        let status = self.child.wait().expect("workload exit");
        assert!(status.success(), "workload failed: {status:?}");
    }

    /// Waits for exit; returns (rusage before, rusage after) it reported.
    pub fn finish(self) -> (Usage, Usage) {
        let (before, after, _) = self.finish_timed();
        (before, after)
    }

    /// As `finish`, plus the wall time of the work in ns.
    pub fn finish_timed(self) -> (Usage, Usage, u64) {
        let v = self.finish_json();
        let get = |k: &str| serde_json::from_value(v[k].clone()).expect("usage");
        (
            get("before"),
            get("after"),
            v["work_ns"].as_u64().expect("work_ns"),
        )
    }
}

impl Workload {
    /// Waits for exit; returns the whole report it printed.
    pub fn finish_json(mut self) -> serde_json::Value {
        drop(self.stdin.take());
        let out = self.child.wait_with_output().expect("workload output");
        assert!(out.status.success(), "workload failed: {:?}", out.status);
        serde_json::from_slice(&out.stdout).expect("workload json")
    }
}

/// A running `correlator record`.
pub struct Recorder {
    pub child: Child,
    pub out: PathBuf,
}

impl Recorder {
    /// Starts recording `pid` and waits until the probes are attached.
    pub fn start(pid: u32, out: PathBuf, extra: &[&str]) -> Self {
        let mut child = Command::new(BIN)
            .args(["record", "--quiet", "--duration", "60s", "--pid"])
            .arg(pid.to_string())
            .arg("--out")
            .arg(&out)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn recorder");
        let stderr = child.stderr.take().expect("stderr");
        let mut lines = BufReader::new(stderr).lines();
        let attached = wait_for_line(
            &mut lines,
            |l| l.contains("attached to PID"),
            None,
            Duration::from_secs(30),
        );
        assert!(attached, "recorder did not attach: {:?}", child.try_wait());
        // Keep draining stderr so the recorder never blocks on it.
        std::thread::spawn(move || for _ in lines {});
        Self { child, out }
    }

    /// Stops the recording as Ctrl-C would, and returns what it wrote.
    pub fn interrupt(self) -> RunFile {
        // SAFETY: plain kill(2) on our own child.
        unsafe { libc::kill(i32::try_from(self.child.id()).expect("pid"), libc::SIGINT) };
        self.wait()
    }

    pub fn wait(mut self) -> RunFile {
        let status = self.child.wait().expect("recorder exit");
        assert!(status.success(), "recorder failed: {status:?}");
        RunFile::load(&self.out).expect("run file")
    }
}

/// How long a helper may take to get ready (bpftrace compiles and attaches
/// its probes; a workload maps its memory) on a host that steals CPU.
const LONG_START: Duration = Duration::from_secs(120);

/// Reads a child's `lines` until one that `marker` accepts, echoing the
/// others to stderr after `echo` when given. False when the stream ended
/// first (the child exited) or `within` ran out (checked as lines arrive).
pub fn wait_for_line<R: BufRead>(
    lines: &mut std::io::Lines<R>,
    marker: impl Fn(&str) -> bool,
    echo: Option<&str>,
    within: Duration,
) -> bool {
    let deadline = Instant::now() + within;
    for line in lines.by_ref().map_while(Result::ok) {
        if marker(&line) {
            return true;
        }
        if let Some(who) = echo {
            eprintln!("{who}: {line}");
        }
        if Instant::now() >= deadline {
            return false;
        }
    }
    false
}

/// Per-CPU values of one row of /proc/interrupts or /proc/softirqs.
pub fn proc_row(file: &str, row: &str) -> Vec<u64> {
    let text = std::fs::read_to_string(file).expect("proc file");
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{row}:")))
        .unwrap_or_else(|| panic!("{row} not in {file}"));
    line.split_whitespace()
        .skip(1)
        .map_while(|v| v.parse().ok())
        .collect()
}

/// A child process killed when dropped.
pub struct Proc(pub std::process::Child);

impl Proc {
    /// Pins every thread of the process to `cpus` (`taskset -apc`), best
    /// effort, as the live tests place servers away from the generator.
    pub fn pin_all(&self, cpus: &str) {
        let _ = Command::new("taskset")
            .args(["-apc", cpus, &self.0.id().to_string()])
            .output();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts correlator's demo server; returns it and its address.
pub fn demo_server(args: &[&str]) -> (Proc, String) {
    start_server(BIN, "demo-server", args)
}

/// Starts one of the testkit's helper servers (it prints "listening on
/// ADDR" when ready); returns it and its address.
pub fn helper_server(command: &str, args: &[&str]) -> (Proc, String) {
    start_server(TESTKIT, command, args)
}

/// Starts `program command args...`, a server that prints "listening on
/// ADDR" when ready; returns it and its address.
fn start_server(program: &str, command: &str, args: &[&str]) -> (Proc, String) {
    let mut child = Command::new(program)
        .arg(command)
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .expect(command);
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("listening line");
    let addr = line.trim().rsplit(' ').next().expect("addr").to_string();
    (Proc(child), addr)
}

/// A free TCP port on 127.0.0.1 (free when asked; a server binds it next).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// Waits until something accepts connections on 127.0.0.1:`port`.
pub fn wait_listening(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "server on {port} did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs `cmd`, asserts it succeeded (showing its stderr otherwise), and
/// returns its stdout.
pub fn succeed(cmd: &mut std::process::Command) -> Vec<u8> {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The JSON export of a (compact) run file, beside it, for tools outside
/// Rust (`correlator convert`).
pub fn json_export(run_file: &std::path::Path) -> std::path::PathBuf {
    let json = run_file.with_extension("export.json");
    succeed(
        std::process::Command::new(BIN)
            .arg("convert")
            .arg(run_file)
            .arg(&json),
    );
    json
}

/// `succeed`, with stdout parsed as JSON.
pub fn succeed_json(cmd: &mut std::process::Command) -> serde_json::Value {
    serde_json::from_slice(&succeed(cmd))
        .unwrap_or_else(|e| panic!("{cmd:?}: stdout not JSON: {e}"))
}

/// The test venv's Python (xtask/setup.sh), with PyPI's `perfetto`.
pub const VENV_PYTHON: &str = "/var/lib/correlator-tests/venv/bin/python";

/// A Debian server binary, or None (skip) outside CI.
pub fn debian_binary(path: &str, test: &str) -> Option<String> {
    if std::path::Path::new(path).exists() {
        return Some(path.to_string());
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{test}: {path} missing (run xtask/setup.sh); CI=true forbids skipping"
    );
    eprintln!("SKIPPED {test}: {path} missing (run xtask/setup.sh)");
    None
}

/// `correlator run --quiet --pid PID --load URL --rate RATE --duration
/// SECONDS --warmup 1s --out DIR/report.json EXTRA...`; asserts success and
/// returns the report JSON.
pub fn run_report(
    pid: u32,
    url: &str,
    rate: u32,
    duration: &str,
    dir: &std::path::Path,
    extra: &[&std::ffi::OsStr],
) -> serde_json::Value {
    let out = dir.join("report.json");
    let status = Command::new(BIN)
        .args(["run", "--quiet", "--pid", &pid.to_string(), "--load", url])
        .args(["--rate", &rate.to_string(), "--duration", duration])
        .args(["--warmup", "1s", "--out"])
        .arg(&out)
        .args(extra)
        .status()
        .expect("run");
    assert!(status.success());
    serde_json::from_str(&std::fs::read_to_string(&out).expect("report")).expect("report json")
}

/// Debian's redis-server on `127.0.0.1`, pinned to `cpu`, no persistence,
/// with `extra` arguments, once it listens; None (the test skipped) when it
/// is not installed outside CI.
pub fn redis_server(test: &str, cpu: &str, extra: &[&str]) -> Option<(Proc, u16)> {
    let redis = debian_binary("/usr/bin/redis-server", test)?;
    let port = free_port();
    let server = Proc(
        Command::new("taskset")
            .args(["-c", cpu, &redis, "--port", &port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(extra)
            .stdout(Stdio::null())
            .spawn()
            .expect("redis"),
    );
    wait_listening(port);
    Some((server, port))
}

/// The first cause of a report's classification that is the server's
/// (not one the report flags as the environment's: idle, steal, CPU
/// wake-up).
pub fn top_server_cause(c: &serde_json::Value) -> &serde_json::Value {
    c["causes"]
        .as_array()
        .expect("causes")
        .iter()
        .find(|x| x["environment"] == false)
        .unwrap_or_else(|| panic!("no server cause: {c:#}"))
}

/// bpftrace running a script, its probes attached when `start` returns: an
/// outside measure of what correlator's probes count.
pub struct Bpftrace {
    child: Child,
    output: std::sync::mpsc::Receiver<Vec<String>>,
}

impl Bpftrace {
    /// Starts `script` with `args` and waits until its probes are attached.
    /// "Attaching N probes..." comes before the attaching, and bpftrace
    /// attaches in the script's order, so the line printed by an interval
    /// probe appended last says the script's own probes are on. Started
    /// before correlator, its programs run before correlator's at each
    /// shared tracepoint in every run.
    pub fn start(script: &str, args: &[String], dir: &std::path::Path) -> Self {
        let path = dir.join("probe.bt");
        let script = format!(
            "{script}\ninterval:ms:20 /@ready == 0/ {{ @ready = 1; printf(\"ready\\n\"); }}\n"
        );
        std::fs::write(&path, script).expect("write bpftrace script");
        let mut child = Command::new("bpftrace")
            .arg(&path)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("bpftrace (installed by xtask/setup.sh)");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let ready = wait_for_line(&mut lines, |l| l == "ready", None, LONG_START);
        assert!(ready, "bpftrace did not attach: {:?}", child.try_wait());
        // Keep reading in a thread so the pipe never fills.
        let (tx, output) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rest: Vec<String> = lines.map_while(Result::ok).collect();
            let _ = tx.send(rest);
        });
        Self { child, output }
    }

    /// Stops bpftrace (SIGINT prints its maps) and returns its scalar maps
    /// by name (`@name: value`); a map never written is absent.
    ///
    /// bpftrace 0.17 (Debian's) can lose a SIGINT: its handler only sets a
    /// flag, and one that lands between the main loop's check of the flag
    /// and its `epoll_wait` (no timeout) leaves it waiting for output that
    /// never comes. Seen here: 1 of 10 runs of the timer test, bpftrace in
    /// `epoll_wait` with the signal handled and nothing pending, a CI run
    /// held until its limit; a second SIGINT ended it and the test passed.
    /// So SIGINT is sent again every [`SIGINT_AGAIN`] until it exits.
    pub fn stop(mut self) -> std::collections::HashMap<String, u64> {
        let pid = i32::try_from(self.child.id()).expect("pid");
        let exited = (0..30).any(|_| {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(pid, libc::SIGINT) };
            let sent = Instant::now();
            while sent.elapsed() < SIGINT_AGAIN {
                if self.child.try_wait().expect("bpftrace status").is_some() {
                    return true;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            false
        });
        if !exited {
            let _ = self.child.kill();
            panic!("bpftrace did not exit on SIGINT within 60 s");
        }
        let lines = self.output.recv().expect("bpftrace output");
        lines
            .iter()
            .filter_map(|l| {
                let (name, value) = l.strip_prefix('@')?.split_once(": ")?;
                Some((name.to_string(), value.trim().parse().ok()?))
            })
            .collect()
    }
}

/// How long [`Bpftrace::stop`] waits for bpftrace to exit before it sends
/// SIGINT again (its maps here print in milliseconds).
const SIGINT_AGAIN: Duration = Duration::from_secs(2);

/// A swap file of `mib` MiB switched on for a test, switched off and
/// removed on drop (the machine has no swap otherwise).
pub struct SwapFile(PathBuf);

impl SwapFile {
    pub fn on(mib: u64) -> Self {
        let path = PathBuf::from(format!(
            "/var/tmp/correlator-test-swap-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&path);
        succeed(
            Command::new("fallocate")
                .args(["-l", &format!("{mib}M")])
                .arg(&path),
        );
        succeed(Command::new("chmod").arg("600").arg(&path));
        succeed(Command::new("mkswap").arg(&path));
        let swap = Self(path);
        succeed(Command::new("swapon").arg(&swap.0));
        swap
    }
}

impl Drop for SwapFile {
    fn drop(&mut self) {
        let _ = Command::new("swapoff").arg(&self.0).status();
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A memory cgroup with a hard limit, for a test (see
/// `correlator::memory::LimitedCgroup`: v1's `memory.limit_in_bytes` on
/// this machine, v2's `memory.max` elsewhere), named for the test's pid;
/// removed on drop.
pub fn memory_limit(name: &str, bytes: u64) -> correlator::memory::LimitedCgroup {
    correlator::memory::LimitedCgroup::new(&format!("{name}-{}", std::process::id()), bytes)
        .expect("a memory cgroup with a limit")
}
