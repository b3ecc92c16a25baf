//! `cargo xtask bench loadgen`.

use std::{
    io::{BufRead as _, BufReader},
    path::Path,
    process::{Child, Command, Stdio},
};

use anyhow::{Context as _, Result, bail};
use serde_json::Value;

use crate::{build_release, build_testkit};

/// Send-slip p99 bound for "sustained".
const SLIP_BOUND_NS: u64 = 50_000;

struct Server(Child, String);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn test_server(testkit: &Path, stall_every: u64) -> Result<Server> {
    let mut child = Command::new(testkit)
        .args([
            "testserver",
            "--stall-every",
            &stall_every.to_string(),
            "--stall",
            "20ms",
        ])
        .stdout(Stdio::piped())
        .spawn()?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().context("stdout")?).read_line(&mut line)?;
    let addr = line
        .trim()
        .rsplit(' ')
        .next()
        .context("address")?
        .to_string();
    Ok(Server(child, addr))
}

fn load(bin: &Path, args: &[&str]) -> Result<Value> {
    let out = Command::new(bin)
        .arg("load")
        .args(args)
        .args(["--json", "--quiet"])
        .output()?;
    if !out.status.success() {
        bail!("load failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(serde_json::from_slice(&out.stdout)?)
}

fn pct(d: &Value, p: f64) -> Option<u64> {
    d["percentiles"]
        .as_array()?
        .iter()
        .find(|x| x["p"].as_f64() == Some(p))?["value_ns"]
        .as_u64()
}

fn ms(ns: Option<u64>) -> String {
    ns.map_or("n/a".into(), |v| format!("{:.3} ms", v as f64 / 1e6))
}

pub fn run() -> Result<()> {
    let bin = build_release()?;
    let testkit = build_testkit()?;
    highest_rate(&bin, &testkit)?;
    versus_wrk(&bin, &testkit)?;
    memory(&testkit)?;
    Ok(())
}

fn highest_rate(bin: &Path, testkit: &Path) -> Result<()> {
    let server = test_server(testkit, 0)?;
    let url = format!("tcp://{}", server.1);
    println!(
        "\nhighest rate with send-slip p99 ≤ {} µs (trivial local server on the same 2 cores, 8 connections, 4 s phases, --rt-pacer):",
        SLIP_BOUND_NS / 1000
    );
    let mut best = None;
    for rate in [
        5_000u64, 10_000, 15_000, 20_000, 25_000, 30_000, 40_000, 50_000,
    ] {
        let v = load(
            bin,
            &[
                &url,
                "--rate",
                &rate.to_string(),
                "--duration",
                "4s",
                "--warmup",
                "1s",
                "--rt-pacer",
            ],
        )?;
        let p = &v["phases"][0];
        let slip = pct(&p["send_slip"], 99.0);
        let achieved = p["rate_achieved"].as_f64().unwrap_or(0.0);
        let ok = slip.is_some_and(|s| s <= SLIP_BOUND_NS) && achieved >= rate as f64 * 0.99;
        println!(
            "  {rate:>6} req/s: achieved {achieved:>8.0}, slip p99 {}, corrected p99 {}, generator CPU {:.0}% of a core → {}",
            ms(slip),
            ms(pct(&p["corrected"], 99.0)),
            v["generator_cpu_share"].as_f64().unwrap_or(0.0) * 100.0,
            if ok { "kept" } else { "NOT kept" }
        );
        if ok {
            best = Some(rate);
        }
    }
    println!(
        "  → highest sustained: {}",
        best.map_or("none".into(), |r| format!("{r} req/s"))
    );
    Ok(())
}

fn versus_wrk(bin: &Path, testkit: &Path) -> Result<()> {
    let server = test_server(testkit, 1000)?;
    println!("\nstalling server (20 ms every 1,000th request), 10,000 req/s offered, 6 s:");
    let open = load(
        bin,
        &[
            &format!("tcp://{}", server.1),
            "--rate",
            "10000",
            "--duration",
            "6s",
            "--warmup",
            "1s",
        ],
    )?;
    let p = &open["phases"][0];
    println!(
        "  correlator open loop:   p50 {}  p99 {}  p99.9 {}  max {}",
        ms(pct(&p["corrected"], 50.0)),
        ms(pct(&p["corrected"], 99.0)),
        ms(pct(&p["corrected"], 99.9)),
        ms(p["corrected"]["max_ns"].as_u64())
    );
    let closed = load(
        bin,
        &[
            &format!("tcp://{}", server.1),
            "--rate",
            "10000",
            "--duration",
            "6s",
            "--warmup",
            "1s",
            "--closed-loop",
            "--connections",
            "1",
        ],
    )?;
    let p = &closed["phases"][0];
    println!(
        "  correlator closed loop: p50 {}  p99 {}  p99.9 {}  max {}",
        ms(pct(&p["service"], 50.0)),
        ms(pct(&p["service"], 99.0)),
        ms(pct(&p["service"], 99.9)),
        ms(p["service"]["max_ns"].as_u64())
    );
    let wrk = Command::new("wrk")
        .args([
            "-t1",
            "-c1",
            "-d6s",
            "--latency",
            &format!("http://{}/", server.1),
        ])
        .output()
        .context("running wrk (run xtask/setup.sh)")?;
    let text = String::from_utf8_lossy(&wrk.stdout);
    let line = |k: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(k))
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or_else(|| "?".into())
    };
    println!(
        "  wrk 4 (closed loop, 1 connection, as fast as it can; applies its own post-hoc CO correction): {} | {} | {} | Requests/sec {}",
        line("50%"),
        line("99%"),
        line("Latency"),
        line("Requests/sec").replace("Requests/sec: ", "")
    );
    Ok(())
}

fn memory(testkit: &Path) -> Result<()> {
    let out = Command::new(testkit)
        .args(["memcheck", "--rate", "50000", "--seconds", "600"])
        .output()
        .context("memcheck")?;
    if !out.status.success() {
        bail!("memcheck failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    println!("\nrecorder memory, 10 minutes at 50,000 req/s (30 M synthetic requests, 1% spikes):");
    print!("  {}", String::from_utf8_lossy(&out.stdout));
    Ok(())
}
