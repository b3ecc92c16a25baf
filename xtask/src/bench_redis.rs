//! `cargo xtask bench redis`: what recording costs a real server at a fixed
//! rate. Debian's redis-server pinned to CPU 0, driven at a fixed rate by
//! `correlator load` from CPU 1, with nothing attached, with `correlator
//! record`, and with `correlator record --stacks`, interleaved. The cost is
//! redis-server's own CPU time per request (utime + stime from
//! /proc/PID/stat, the kernel's account, so probe time spent in its
//! context counts), as a ratio against nothing attached.

use std::{
    process::{Child, Command, Stdio},
    time::Duration,
};

use anyhow::{Context as _, Result, bail};
use serde_json::Value;

use crate::build_release;

const RATE: u64 = 20_000;
const SECONDS: u64 = 5;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Variant {
    Bare,
    Record,
    Stacks,
}

impl Variant {
    const ALL: [Variant; 3] = [Variant::Bare, Variant::Record, Variant::Stacks];

    fn name(self) -> &'static str {
        match self {
            Variant::Bare => "not attached",
            Variant::Record => "correlator",
            Variant::Stacks => "corr. --stacks",
        }
    }
}

/// CPU time of a process so far (utime + stime), in clock ticks.
fn cpu_ticks(pid: u32) -> Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (which may hold spaces) in parentheses.
    let rest = stat.rsplit_once(')').context("malformed stat")?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    Ok(f.get(11).context("utime")?.parse::<u64>()? + f.get(12).context("stime")?.parse::<u64>()?)
}

/// A child killed (and reaped) when dropped.
pub(crate) struct Killed(pub(crate) Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Debian's redis-server pinned to `cpu`, on 127.0.0.1:`port`, without
/// persistence, given half a second to listen.
pub(crate) fn start_redis(cpu: u32, port: u16) -> Result<Killed> {
    let redis = "/usr/bin/redis-server";
    if !std::path::Path::new(redis).exists() {
        bail!("{redis} not found; run xtask/setup.sh");
    }
    let server = Killed(
        Command::new("taskset")
            .args(["-c", &cpu.to_string(), redis, "--port", &port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .spawn()
            .context("starting redis-server")?,
    );
    std::thread::sleep(Duration::from_millis(500));
    Ok(server)
}

pub fn run(reps: usize) -> Result<()> {
    let bin = build_release()?;
    let port = 6391;
    let server = start_redis(0, port)?;
    let pid = server.0.id();
    let ticks_per_s = 100.0; // USER_HZ on Linux
    let mut rows: Vec<(Variant, f64, f64)> = Vec::new();
    for rep in 0..reps {
        for i in 0..Variant::ALL.len() {
            let v = Variant::ALL[(rep + i) % Variant::ALL.len()];
            let recorder = match v {
                Variant::Bare => None,
                Variant::Record | Variant::Stacks => {
                    let mut c = Command::new(&bin);
                    c.args(["record", "--quiet", "--duration", "600s", "--pid"])
                        .arg(pid.to_string())
                        .arg("--out")
                        .arg("target/bench/redis-bench.run")
                        .stdout(Stdio::null())
                        .stderr(Stdio::null());
                    if v == Variant::Stacks {
                        c.arg("--stacks");
                    }
                    let child = Killed(c.spawn()?);
                    // Attached well before the load starts.
                    std::thread::sleep(Duration::from_secs(2));
                    Some(child)
                }
            };
            let before = cpu_ticks(pid)?;
            let out = Command::new("taskset")
                .args(["-c", "1"])
                .arg(&bin)
                .args(["load", "--quiet", "--json", "--rate", &RATE.to_string()])
                .args(["--duration", &format!("{SECONDS}s"), "--warmup", "0s"])
                .arg(format!("redis://127.0.0.1:{port}"))
                .output()?;
            let cpu_s = (cpu_ticks(pid)? - before) as f64 / ticks_per_s;
            drop(recorder);
            let load: Value = serde_json::from_slice(&out.stdout).context("load JSON")?;
            let done = load["phases"][0]["completed"].as_f64().unwrap_or(0.0);
            if done == 0.0 {
                bail!(
                    "no requests completed: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            let us_per_req = cpu_s * 1e6 / done;
            eprintln!(
                "bench redis: rep {rep} {:<15} {us_per_req:.2} µs CPU per request",
                v.name()
            );
            rows.push((v, us_per_req, done));
        }
    }
    let median = |v: Variant| {
        let mut x: Vec<f64> = rows.iter().filter(|r| r.0 == v).map(|r| r.1).collect();
        x.sort_by(f64::total_cmp);
        x[x.len() / 2]
    };
    let bare = median(Variant::Bare);
    println!(
        "\nredis-server (CPU 0) at {RATE} req/s for {SECONDS} s, {reps} reps: its CPU time per request (median)"
    );
    for v in Variant::ALL {
        let m = median(v);
        println!(
            "  {:<15} {m:>6.2} µs   {:+.1}% vs not attached",
            v.name(),
            (m / bare - 1.0) * 100.0
        );
    }
    Ok(())
}
