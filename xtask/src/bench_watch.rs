//! `cargo xtask bench watch`: what `correlator watch` and `record` (the
//! probes `run` attaches) cost a real server at saturation. Debian's
//! redis-server pinned to CPU 1, driven as fast as it goes by
//! `redis-benchmark` (GET, 50 connections) pinned to CPU 0, with nothing
//! attached, with `watch --syscalls` and `record` as they run by default
//! (no syscall hooks), and with each of them given `--syscall-time exact`.
//! The cost is the throughput redis-benchmark reports, as a ratio to a run
//! with nothing attached beside it (interleaved pairs, see `run`).
//!
//! The client is the bottleneck here (CPU 0 ~99% busy, the server's CPU
//! ~84%), so what the probes cost in the client's context counts as much
//! as the server's: its socket transfers and the softirqs of its sends,
//! where the programs run for every event on the machine and keep only
//! the target's.

use std::{
    process::{Command, Stdio},
    time::Duration,
};

use anyhow::{Context as _, Result};

use crate::build_release;

const REQUESTS: &str = "300000";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Variant {
    Bare,
    Watch,
    WatchExact,
    Record,
    RecordExact,
}

impl Variant {
    const ALL: [Variant; 5] = [
        Variant::Bare,
        Variant::Watch,
        Variant::Record,
        Variant::WatchExact,
        Variant::RecordExact,
    ];

    fn name(self) -> &'static str {
        match self {
            Variant::Bare => "not attached",
            Variant::Watch => "watch --syscalls",
            Variant::WatchExact => "watch --syscalls --syscall-time exact",
            Variant::Record => "record (run's probes)",
            Variant::RecordExact => "record --syscall-time exact",
        }
    }

    /// The correlator command line, without the target.
    fn args(self) -> &'static [&'static str] {
        match self {
            Variant::Bare => &[],
            Variant::Watch => &["watch", "--syscalls"],
            Variant::WatchExact => &["watch", "--syscalls", "--syscall-time", "exact"],
            Variant::Record => &["record", "--duration", "600s"],
            Variant::RecordExact => &["record", "--duration", "600s", "--syscall-time", "exact"],
        }
    }
}

/// A child killed (SIGTERM, then reaped) when dropped.
struct Stopped(std::process::Child);

impl Drop for Stopped {
    fn drop(&mut self) {
        // SAFETY: our own child's pid.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let _ = self.0.wait();
    }
}

/// GET requests per second from one `redis-benchmark` run.
fn throughput(port: u16) -> Result<f64> {
    let out = Command::new("taskset")
        .args(["-c", "0", "redis-benchmark", "-p", &port.to_string()])
        .args(["-t", "get", "-n", REQUESTS, "-c", "50", "-q"])
        .output()
        .context("running redis-benchmark")?;
    let text = String::from_utf8_lossy(&out.stdout).replace('\r', "\n");
    // The last progress line holds the final figure: "GET: 153925.09 requests per second".
    text.lines()
        .filter_map(|l| l.split_once("GET:"))
        .filter_map(|(_, rest)| rest.split_whitespace().next()?.parse::<f64>().ok())
        .next_back()
        .with_context(|| format!("no GET figure in redis-benchmark's output: {text}"))
}

pub fn run(reps: usize) -> Result<()> {
    let bin = build_release()?;
    let port = 6392;
    let server = crate::bench_redis::start_redis(1, port)?;
    let pid = server.0.id();
    // Each variant is measured as pairs with a run of nothing attached
    // right before or after it (the order alternating by repetition), and
    // judged by the ratio within each pair: this host's speed drifts by
    // 10-20% over minutes, far more than the probes cost, and a pair's two
    // runs share the drift.
    let mut pairs: Vec<(Variant, f64, f64)> = Vec::new();
    for rep in 0..reps {
        for v in Variant::ALL.into_iter().filter(|&v| v != Variant::Bare) {
            let (first, second) = if rep % 2 == 0 {
                (Variant::Bare, v)
            } else {
                (v, Variant::Bare)
            };
            let a = measure(&bin, pid, port, first)?;
            let b = measure(&bin, pid, port, second)?;
            let (bare, with) = if first == Variant::Bare {
                (a, b)
            } else {
                (b, a)
            };
            eprintln!(
                "bench watch: rep {rep} {:<40} {with:>8.0} GET/s, not attached {bare:>8.0}: {:.1}%",
                v.name(),
                with / bare * 100.0
            );
            pairs.push((v, bare, with));
        }
    }
    drop(server);
    let sorted = |mut x: Vec<f64>| {
        x.sort_by(f64::total_cmp);
        x
    };
    let bare = sorted(pairs.iter().map(|p| p.1).collect());
    println!(
        "\nredis-server (CPU 1) at saturation, redis-benchmark GET -c 50 (CPU 0), {reps} interleaved pairs per variant"
    );
    println!(
        "  not attached: {:.0} GET/s median [{:.0}, {:.0}] over {} runs",
        bare[bare.len() / 2],
        bare[0],
        bare[bare.len() - 1],
        bare.len()
    );
    println!("  throughput with the probes as % of its pair's run without: median [min, max]");
    for v in Variant::ALL.into_iter().filter(|&v| v != Variant::Bare) {
        let r = sorted(
            pairs
                .iter()
                .filter(|p| p.0 == v)
                .map(|p| p.2 / p.1 * 100.0)
                .collect(),
        );
        println!(
            "  {:<40} {:>5.1}% [{:.1}, {:.1}]",
            v.name(),
            r[r.len() / 2],
            r[0],
            r[r.len() - 1]
        );
    }
    Ok(())
}

/// One redis-benchmark run's throughput with variant `v` attached to the
/// server (attached 3 s before the load starts, detached after).
fn measure(bin: &std::path::Path, pid: u32, port: u16, v: Variant) -> Result<f64> {
    let out = std::path::Path::new("target/bench/watch-bench");
    let run_file = std::path::Path::new("target/bench/record-bench.run");
    let watcher = match v {
        Variant::Bare => None,
        _ => {
            let _ = std::fs::remove_dir_all(out);
            let _ = std::fs::remove_file(run_file);
            let mut c = Command::new(bin);
            c.args(v.args())
                .arg("--pid")
                .arg(pid.to_string())
                .arg("--out")
                .arg(if v.args()[0] == "watch" {
                    out
                } else {
                    run_file
                })
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let child = Stopped(c.spawn()?);
            std::thread::sleep(Duration::from_secs(3));
            Some(child)
        }
    };
    let rps = throughput(port)?;
    drop(watcher);
    Ok(rps)
}
