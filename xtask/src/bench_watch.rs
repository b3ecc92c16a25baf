//! `cargo xtask bench watch`: what `correlator watch` and `record` (the
//! probes `run` attaches) cost a real server at saturation. Debian's
//! redis-server pinned to CPU 1, driven as fast as it goes by
//! `redis-benchmark` (GET, 50 connections) pinned to CPU 0, with nothing
//! attached, with `watch --syscalls` and `record` as they run by default
//! (no syscall hooks), and with each of them given `--syscall-time exact`,
//! interleaved.
//! The cost is the throughput redis-benchmark reports, as a ratio of the
//! median against nothing attached.

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
    let out = std::path::Path::new("target/bench/watch-bench");
    let run_file = std::path::PathBuf::from("target/bench/record-bench.run");
    let mut rows: Vec<(Variant, f64)> = Vec::new();
    for rep in 0..reps {
        for v in Variant::ALL {
            let watcher = match v {
                Variant::Bare => None,
                _ => {
                    let _ = std::fs::remove_dir_all(out);
                    let _ = std::fs::remove_file(&run_file);
                    let mut c = Command::new(&bin);
                    c.args(v.args())
                        .arg("--pid")
                        .arg(pid.to_string())
                        .arg("--out")
                        .arg(if v.args()[0] == "watch" {
                            out
                        } else {
                            run_file.as_path()
                        })
                        .stdout(Stdio::null())
                        .stderr(Stdio::null());
                    let child = Stopped(c.spawn()?);
                    // Attached well before the load starts.
                    std::thread::sleep(Duration::from_secs(3));
                    Some(child)
                }
            };
            let rps = throughput(port)?;
            drop(watcher);
            eprintln!("bench watch: rep {rep} {:<40} {rps:>10.0} GET/s", v.name());
            rows.push((v, rps));
        }
    }
    let median = |v: Variant| {
        let mut x: Vec<f64> = rows.iter().filter(|r| r.0 == v).map(|r| r.1).collect();
        x.sort_by(f64::total_cmp);
        (x[x.len() / 2], x[0], x[x.len() - 1])
    };
    let (bare, _, _) = median(Variant::Bare);
    println!(
        "\nredis-server (CPU 1) at saturation, redis-benchmark GET -c 50 (CPU 0), {reps} reps: GET/s, median [min, max]"
    );
    for v in Variant::ALL {
        let (m, lo, hi) = median(v);
        println!(
            "  {:<40} {m:>9.0} [{lo:.0}, {hi:.0}]   {:.1}% of not attached",
            v.name(),
            m / bare * 100.0
        );
    }
    Ok(())
}
