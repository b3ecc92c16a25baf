//! `cargo xtask corpus`: records the labelled corpus's runs
//! (corpus/manifest.json says what each case is and why its truth is known).
//!
//! Each recipe makes the situation its case describes and records it with
//! the release `correlator`: the demo's scenarios through `correlator demo`
//! (optionally with the machine disturbed), Debian's redis-server and
//! memcached through `correlator run` with what the case injects beside
//! them. A run lands in corpus/runs/CASE/NN.run with NN.facts.json: the
//! command, the host's steal over the run, and the case's outside truth
//! (e.g. redis's own fork times).

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use serde_json::{Value, json};

use crate::{build_release, workspace_root};

#[derive(clap::Subcommand)]
pub enum Corpus {
    /// Record more runs of a case (appended after the existing ones).
    Record {
        /// The case's name in corpus/manifest.json.
        case: String,
        /// How many runs to add.
        #[arg(long, default_value_t = 1)]
        runs: usize,
    },
    /// The cases and how many runs each has.
    List,
}

pub fn run(which: Corpus) -> Result<()> {
    match which {
        Corpus::Record { case, runs } => record(&case, runs),
        Corpus::List => list(),
    }
}

fn corpus_dir() -> PathBuf {
    workspace_root().join("corpus")
}

fn manifest() -> Result<Value> {
    let path = corpus_dir().join("manifest.json");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))
}

/// The run files of a case, in order.
fn runs_of(case: &str) -> Result<Vec<PathBuf>> {
    let dir = corpus_dir().join("runs").join(case);
    let mut runs: Vec<PathBuf> = match std::fs::read_dir(&dir) {
        Ok(entries) => entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "run"))
            .collect(),
        Err(_) => Vec::new(),
    };
    runs.sort();
    Ok(runs)
}

fn list() -> Result<()> {
    let m = manifest()?;
    let mut total = 0;
    for case in m["cases"].as_array().context("no cases")? {
        let name = case["name"].as_str().unwrap_or("?");
        let n = runs_of(name)?.len();
        total += n;
        println!("{name:<28} {n:>3} run(s)  {}", case["signature"]);
    }
    println!("{total} runs in all");
    Ok(())
}

fn record(name: &str, runs: usize) -> Result<()> {
    let m = manifest()?;
    let case = m["cases"]
        .as_array()
        .context("no cases")?
        .iter()
        .find(|c| c["name"] == name)
        .with_context(|| format!("no case {name} in corpus/manifest.json"))?
        .clone();
    let bin = build_release()?;
    let dir = corpus_dir().join("runs").join(name);
    std::fs::create_dir_all(&dir)?;
    let first = runs_of(name)?.len() + 1;
    let recipe = &case["recipe"];
    let disturbed = case["host"] == "disturbed";
    for n in first..first + runs {
        let out = dir.join(format!("{n:02}.run"));
        eprintln!("xtask corpus: {name} run {n} → {}", out.display());
        let steal_before = steal_ticks()?;
        let started = Instant::now();
        let disturbance = disturbed.then(disturb).transpose()?;
        let facts = match recipe["kind"].as_str() {
            Some("demo") => demo(&bin, recipe, &out),
            Some("redis") => redis(&bin, recipe, &out),
            Some("memcached") => memcached(&bin, recipe, &out),
            Some("jvm") => jvm(&bin, recipe, &out),
            Some("cpython-gc") => cpython_gc(&bin, recipe, &out),
            Some("nginx-proxy") => nginx_proxy(&bin, recipe, &out),
            Some("helper") => helper(&bin, recipe, &out),
            other => bail!("unknown recipe kind {other:?}"),
        };
        if let Some(d) = disturbance {
            stop(d);
        }
        let mut facts = match facts {
            Ok(f) => f,
            Err(e) => {
                let _ = std::fs::remove_file(&out);
                return Err(e.context(format!("{name} run {n} was not recorded")));
            }
        };
        if let Err(e) = check_requests(&bin, &out, &mut facts) {
            let _ = std::fs::remove_file(&out);
            return Err(e.context(format!("{name} run {n} is not what its case describes")));
        }
        let seconds = started.elapsed().as_secs_f64();
        let steal = (steal_ticks()? - steal_before) as f64 / ticks_per_second() / seconds;
        facts["host_steal_cpus"] = json!((steal * 1000.0).round() / 1000.0);
        facts["recorded"] = json!(iso_now());
        std::fs::write(
            out.with_extension("facts.json"),
            serde_json::to_string_pretty(&facts)? + "\n",
        )?;
    }
    Ok(())
}

/// The client's view of the run, into the facts; an error in more than
/// 1% of the requests means the server was not serving as the case says
/// (e.g. redis-server answering LOADING while it read a stale dump).
fn check_requests(bin: &Path, run: &Path, facts: &mut Value) -> Result<()> {
    let json = workspace_root().join("target/corpus-check.json");
    crate::run(Command::new(bin).arg("convert").arg(run).arg(&json))?;
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&json)?)?;
    let _ = std::fs::remove_file(&json);
    let phases = r["latency"]["phases"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let sum = |k: &str| phases.iter().filter_map(|p| p[k].as_u64()).sum::<u64>();
    let (completed, errors, timeouts) = (sum("completed"), sum("errors"), sum("timeouts"));
    facts["requests_completed"] = json!(completed);
    facts["requests_errors"] = json!(errors);
    facts["requests_timeouts"] = json!(timeouts);
    if completed == 0 || (errors + timeouts) * 100 > completed {
        bail!("{completed} requests completed, {errors} errors, {timeouts} timeouts");
    }
    Ok(())
}

/// stress-ng keeping CPU 0 (the load generator's, everything else's) 70%
/// busy: late sends and a noisy machine, nothing done to the server.
fn disturb() -> Result<Child> {
    Command::new("stress-ng")
        .args(["--cpu", "1", "--taskset", "0", "--cpu-load", "70"])
        .args(["--timeout", "600s", "--quiet"])
        .spawn()
        .context("stress-ng (xtask/setup.sh installs it)")
}

fn stop(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

fn demo(bin: &Path, recipe: &Value, out: &Path) -> Result<Value> {
    let scenario = recipe["scenario"]
        .as_str()
        .context("demo recipe: scenario")?;
    let tmp = workspace_root().join("target/corpus-demo");
    std::fs::create_dir_all(&tmp)?;
    let args = ["demo", "--scenario", scenario, "--duration", "5s", "--out"];
    let run_file = tmp.join(format!("{scenario}.run"));
    let _ = std::fs::remove_file(&run_file);
    // The demo exits non-zero when it misattributes its scenario: such a
    // run stays in the corpus, labelled with the truth, like any other.
    let status = Command::new(bin).args(args).arg(&tmp).status()?;
    std::fs::copy(&run_file, out)
        .with_context(|| format!("the demo wrote no {scenario}.run (it exited with {status})"))?;
    Ok(json!({ "command": format!("correlator {} DIR", args.join(" ")) }))
}

/// A server pinned to CPU 1, stopped when dropped: SIGTERM first, so
/// redis-server takes its BGSAVE child with it, then SIGKILL after 10 s.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.0.id()) {
            // SAFETY: plain kill(2) on our own child.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if matches!(self.0.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn wait_listening(port: u16) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            bail!("nothing listens on {port}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// `correlator run` against `url` for `seconds` at `rate`, its run file
/// at `out`; returns the command as the facts give it.
fn correlator_run(
    bin: &Path,
    pid: u32,
    url: &str,
    out: &Path,
    seconds: u32,
    extra: &[&str],
) -> Result<String> {
    correlator_run_at(bin, pid, url, out, seconds, 3000, extra)
}

/// [`correlator_run`] at `rate` requests per second.
fn correlator_run_at(
    bin: &Path,
    pid: u32,
    url: &str,
    out: &Path,
    seconds: u32,
    rate: u64,
    extra: &[&str],
) -> Result<String> {
    let duration = format!("{seconds}s");
    let rate = rate.to_string();
    let args = [
        "run",
        "--quiet",
        "--pid",
        &pid.to_string(),
        "--load",
        url,
        "--rate",
        &rate,
        "--duration",
        &duration,
    ];
    crate::run(
        Command::new(bin)
            .args(args)
            .args(extra)
            .arg("--run-file")
            .arg(out)
            .stdout(Stdio::null()),
    )?;
    Ok(format!(
        "correlator {} {} --run-file OUT",
        args.join(" "),
        extra.join(" ")
    ))
}

/// `correlator demo-hog` on the server's CPU.
fn hog(bin: &Path) -> Result<Child> {
    Command::new(bin)
        .args(["demo-hog", "--cpu", "1"])
        .stdout(Stdio::null())
        .spawn()
        .context("demo-hog")
}

fn redis_cli(port: u16, args: &[&str]) -> Result<String> {
    let out = Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .context("redis-cli")?;
    if !out.status.success() {
        bail!("redis-cli {args:?} failed");
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A field of redis's INFO output.
fn info_field(info: &str, key: &str) -> Option<u64> {
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}:")))
        .and_then(|v| v.trim().parse().ok())
}

/// How often the bgsave case sends BGSAVE (a save must end before the
/// next, or redis refuses it and the period breaks: the facts give
/// `total_forks`).
const BGSAVE_EVERY_MS: u64 = 2000;

fn redis(bin: &Path, recipe: &Value, out: &Path) -> Result<Value> {
    let mode = recipe["mode"].as_str().context("redis recipe: mode")?;
    let port = free_port()?;
    // An empty directory of its own in memory: nothing to load at start,
    // and a dump written fast enough that every BGSAVE forks on time.
    let dump = PathBuf::from(format!("/dev/shm/correlator-corpus-redis-{port}"));
    std::fs::create_dir_all(&dump)?;
    let server = Server(
        Command::new("taskset")
            .args([
                "-c",
                "1",
                "/usr/bin/redis-server",
                "--port",
                &port.to_string(),
            ])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args([
                "--enable-debug-command",
                "yes",
                "--rdbcompression",
                "no",
                "--dir",
            ])
            .arg(&dump)
            .stdout(Stdio::null())
            .spawn()
            .context("redis-server (xtask/setup.sh installs it)")?,
    );
    wait_listening(port)?;
    let url = format!("redis://127.0.0.1:{port}");
    let mut facts = json!({});
    let command = match mode {
        "clean" => correlator_run(bin, server.0.id(), &url, out, 10, &[])?,
        "hog" => {
            let h = hog(bin)?;
            let c = correlator_run(bin, server.0.id(), &url, out, 10, &[]);
            stop(h);
            c?
        }
        "bgsave" => {
            // ~250 MB in 800,000 keys: a fork copies its page tables
            // (several ms), and the dump is written well within a period.
            redis_cli(port, &["DEBUG", "POPULATE", "800000", "key", "200"])?;
            let stop_saving = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let saver = {
                let stop_saving = std::sync::Arc::clone(&stop_saving);
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(1000));
                    while !stop_saving.load(std::sync::atomic::Ordering::Relaxed) {
                        let _ = redis_cli(port, &["BGSAVE"]);
                        std::thread::sleep(Duration::from_millis(BGSAVE_EVERY_MS));
                    }
                })
            };
            let c = correlator_run(bin, server.0.id(), &url, out, 16, &[]);
            stop_saving.store(true, std::sync::atomic::Ordering::Relaxed);
            let _ = saver.join();
            let info = redis_cli(port, &["INFO"])?;
            facts["latest_fork_usec"] = json!(info_field(&info, "latest_fork_usec"));
            facts["total_forks"] = json!(info_field(&info, "total_forks"));
            facts["bgsave_every_ms"] = json!(BGSAVE_EVERY_MS);
            let forks = info_field(&info, "total_forks").unwrap_or(0);
            let command = c?;
            // Six forks at least, or no reader could see the period.
            if forks < 6 {
                bail!("only {forks} BGSAVE forks in the run (a save outlasted the period?)");
            }
            command
        }
        "rare-stall" => {
            let (c, stalls) = with_rare_stalls(port, || {
                correlator_run(bin, server.0.id(), &url, out, RARE_STALL_SECONDS, &[])
            });
            let info = redis_cli(port, &["INFO", "commandstats"])?;
            let debug_calls = info
                .lines()
                .find_map(|l| l.strip_prefix("cmdstat_debug:calls="))
                .and_then(|v| v.split(',').next())
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
            facts["stalls_sent"] = json!(stalls.len());
            facts["stall_ms"] = json!(RARE_STALL_MS);
            facts["stall_offsets_ms"] = json!(stalls);
            facts["cmdstat_debug_calls"] = json!(debug_calls);
            let command = c?;
            // Redis's own count: the stalls happened, or no reader could
            // see them.
            if debug_calls < 3 || debug_calls != stalls.len() as u64 {
                bail!(
                    "{debug_calls} DEBUG SLEEPs counted by redis, {} sent",
                    stalls.len()
                );
            }
            command
        }
        other => bail!("unknown redis mode {other}"),
    };
    facts["command"] = json!(command);
    drop(server);
    let _ = std::fs::remove_dir_all(&dump);
    Ok(facts)
}

/// The rare-stall case: `DEBUG SLEEP` of 3 ms (redis's one thread
/// sleeps, every request behind it waits) at Poisson times, one per
/// 10,000 requests of the 3,000 req/s load on average.
const RARE_STALL_MS: u64 = 3;
const RARE_STALL_SECONDS: u32 = 24;

/// Runs `f` while a side client stalls redis at random; returns what `f`
/// returned and the stalls' offsets (ms from the start).
fn with_rare_stalls<T>(port: u16, f: impl FnOnce() -> T) -> (T, Vec<u64>) {
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stalls = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let side = {
        let (done, stalls) = (std::sync::Arc::clone(&done), std::sync::Arc::clone(&stalls));
        std::thread::spawn(move || {
            let started = Instant::now();
            // Mean gap: 10,000 requests at 3,000 req/s.
            let mean_ms = 10_000.0 / 3_000.0 * 1000.0;
            let mut state = u64::from(port) | 1;
            // Stay clear of the first and last second of the run.
            std::thread::sleep(Duration::from_millis(1500));
            loop {
                // xorshift: no dependency for one exponential draw.
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let u = (state >> 11) as f64 / (1u64 << 53) as f64;
                let gap = (-(1.0 - u).ln() * mean_ms).clamp(200.0, 4.0 * mean_ms);
                std::thread::sleep(Duration::from_millis(gap as u64));
                let at = started.elapsed().as_millis() as u64;
                if done.load(std::sync::atomic::Ordering::Relaxed)
                    || at > u64::from(RARE_STALL_SECONDS) * 1000 - 1500
                {
                    return;
                }
                let secs = format!("{:.3}", RARE_STALL_MS as f64 / 1000.0);
                if redis_cli(port, &["DEBUG", "SLEEP", &secs]).is_ok()
                    && let Ok(mut s) = stalls.lock()
                {
                    s.push(at);
                }
            }
        })
    };
    let out = f();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = side.join();
    let stalls = stalls.lock().map(|s| s.clone()).unwrap_or_default();
    (out, stalls)
}

fn memcached(bin: &Path, recipe: &Value, out: &Path) -> Result<Value> {
    let mode = recipe["mode"].as_str().context("memcached recipe: mode")?;
    let port = free_port()?;
    let server = Server(
        Command::new("taskset")
            .args([
                "-c",
                "1",
                "/usr/bin/memcached",
                "-u",
                "root",
                "-l",
                "127.0.0.1",
            ])
            .args(["-p", &port.to_string(), "-U", "0", "-t", "1"])
            .spawn()
            .context("memcached (xtask/setup.sh installs it)")?,
    );
    wait_listening(port)?;
    let url = format!("memcache://127.0.0.1:{port}");
    let extra = ["--op", "get"];
    let command = match mode {
        "clean" => correlator_run(bin, server.0.id(), &url, out, 10, &extra)?,
        "hog" => {
            let h = hog(bin)?;
            let c = correlator_run(bin, server.0.id(), &url, out, 10, &extra);
            stop(h);
            c?
        }
        other => bail!("unknown memcached mode {other}"),
    };
    Ok(json!({ "command": command }))
}

/// A server of our own (`correlator-testkit`), pinned to CPU 1: the
/// recipe's `helper` and `args`; with `backend_args`, a testkit test
/// server on CPU 0 first, whose address is appended as `--backend ADDR`.
/// For the cases whose truth only a helper that times itself can give
/// (Debian's software has no mmap_lock stall or connection pool to turn
/// on). A pathserver's own event log is summed into the facts.
fn helper(bin: &Path, recipe: &Value, out: &Path) -> Result<Value> {
    let testkit = crate::build_testkit()?;
    let strings = |k: &str| -> Vec<String> {
        recipe[k]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    let name = recipe["helper"].as_str().context("helper recipe: helper")?;
    let tmp = workspace_root().join(format!("target/corpus-helper-{}", std::process::id()));
    std::fs::create_dir_all(&tmp)?;
    let events = tmp.join("events.jsonl");
    let spawn = |cpu: &str, helper: &str, args: &[String]| -> Result<(Server, String)> {
        let mut child = Command::new("taskset")
            .args(["-c", cpu])
            .arg(&testkit)
            .arg(helper)
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("correlator-testkit {helper}"))?;
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().context("stdout")?),
            &mut line,
        )?;
        let addr = line
            .trim()
            .rsplit(' ')
            .next()
            .unwrap_or_default()
            .to_string();
        Ok((Server(child), addr))
    };
    let backend_args = strings("backend_args");
    let backend = (!backend_args.is_empty())
        .then(|| spawn("0", "testserver", &backend_args))
        .transpose()?;
    let mut args = strings("args");
    if let Some((_, addr)) = &backend {
        args.extend(["--backend".to_string(), addr.clone()]);
    }
    if name == "pathserver" {
        args.extend(["--events".to_string(), events.display().to_string()]);
    }
    let (server, addr) = spawn("1", name, &args)?;
    let rate = recipe["rate"].as_u64().unwrap_or(2000);
    let command = correlator_run_at(
        bin,
        server.0.id(),
        &format!("tcp://{addr}"),
        out,
        10,
        rate,
        &[],
    );
    drop(server);
    drop(backend);
    let command = command?;
    let mut facts = json!({
        "command": command,
        "helper": format!("correlator-testkit {name} {}", args.join(" ")),
    });
    if name == "pathserver" {
        // The helper's own timings, by function: how many calls, and their
        // total and longest time.
        let mut by: std::collections::BTreeMap<String, (u64, u64, u64)> = Default::default();
        for line in std::fs::read_to_string(&events)?.lines() {
            let v: Value = serde_json::from_str(line)?;
            let len = v["end_ns"]
                .as_u64()
                .unwrap_or(0)
                .saturating_sub(v["start_ns"].as_u64().unwrap_or(0));
            let e = by
                .entry(v["function"].as_str().unwrap_or("?").to_string())
                .or_default();
            *e = (e.0 + 1, e.1 + len, e.2.max(len));
        }
        facts["helper_calls"] = json!(by
            .iter()
            .map(|(f, (n, total, max))| (f.clone(), json!({"calls": n, "total_ms": *total as f64 / 1e6, "longest_ms": *max as f64 / 1e6})))
            .collect::<serde_json::Map<_, _>>());
    }
    let _ = std::fs::remove_dir_all(&tmp);
    Ok(facts)
}

fn recipes_dir() -> PathBuf {
    corpus_dir().join("recipes")
}

/// The JVM case: corpus/recipes/GcServer.java on Debian's OpenJDK 17 with
/// the serial collector (stop-the-world young collections), its pauses
/// timed by the JVM's own gc log, into the facts.
fn jvm(bin: &Path, recipe: &Value, out: &Path) -> Result<Value> {
    let num = |k: &str| {
        recipe[k]
            .as_u64()
            .with_context(|| format!("jvm recipe: {k}"))
            .map(|v| v.to_string())
    };
    let (garbage_kb, kept_kb, kept) = (num("garbage_kb")?, num("kept_kb")?, num("kept_requests")?);
    let port = free_port()?;
    let tmp = workspace_root().join(format!("target/corpus-jvm-{port}"));
    std::fs::create_dir_all(&tmp)?;
    let gc_log = tmp.join("gc.log");
    let heap = recipe["heap"].as_str().unwrap_or("-Xmx512m");
    let young = recipe["young"].as_str().unwrap_or("-Xmn64m");
    let server = Server(
        Command::new("taskset")
            .args(["-c", "1", "java", "-XX:+UseSerialGC", heap, young])
            .arg(format!("-Xlog:gc:file={}:uptimenanos", gc_log.display()))
            .arg(recipes_dir().join("GcServer.java"))
            .args([port.to_string(), garbage_kb, kept_kb, kept])
            .stdout(Stdio::null())
            .spawn()
            .context(
                "java (Debian's openjdk-17-jdk-headless: ./xtask/setup.sh --corpus installs it)",
            )?,
    );
    wait_listening(port)?;
    let url = format!("http://127.0.0.1:{port}/");
    // Warm up: the JIT compiles the handler before the recording starts.
    let warm = correlator_run(bin, server.0.id(), &url, &tmp.join("warm.run"), 3, &[]);
    let log_start = std::fs::metadata(&gc_log).map(|m| m.len()).unwrap_or(0);
    let command = correlator_run(bin, server.0.id(), &url, out, 12, &[]);
    drop(server);
    warm?;
    let command = command?;
    let log = std::fs::read(&gc_log).context("the JVM wrote no gc log")?;
    let log = String::from_utf8_lossy(&log[log_start as usize..]);
    let pauses = gc_pauses(&log);
    let _ = std::fs::remove_dir_all(&tmp);
    if pauses.len() < 6 {
        bail!("only {} collections in the run", pauses.len());
    }
    let ms: Vec<f64> = pauses.iter().map(|p| p.1).collect();
    let gaps: Vec<f64> = pauses.windows(2).map(|w| (w[1].0 - w[0].0) * 1e3).collect();
    Ok(json!({
        "command": command,
        "gc_pauses": pauses.len(),
        "gc_pause_total_ms": (ms.iter().sum::<f64>() * 1000.0).round() / 1000.0,
        "gc_pause_max_ms": ms.iter().copied().fold(0.0, f64::max),
        "gc_pause_ms": ms,
        "gc_interval_ms": gaps.iter().map(|g| g.round()).collect::<Vec<_>>(),
    }))
}

/// The CPython case: corpus/recipes/gc_server.py on Debian's python3.11,
/// pinned to CPU 1, running a full collection of a large graph on its
/// serving thread every `period_ms`; every collection timed by the
/// interpreter's own gc.callbacks, into the facts.
fn cpython_gc(bin: &Path, recipe: &Value, out: &Path) -> Result<Value> {
    let num = |k: &str| {
        recipe[k]
            .as_u64()
            .with_context(|| format!("cpython-gc recipe: {k}"))
    };
    let (objects, period_ms, rate, seconds) = (
        num("objects")?,
        num("period_ms")?,
        num("rate")?,
        num("seconds")?,
    );
    let port = free_port()?;
    let tmp = workspace_root().join(format!("target/corpus-cpython-{port}"));
    std::fs::create_dir_all(&tmp)?;
    let facts_file = tmp.join("gc.json");
    let server = Server(
        Command::new("taskset")
            .args(["-c", "1", "/usr/bin/python3.11"])
            .arg(recipes_dir().join("gc_server.py"))
            .args([port.to_string(), objects.to_string(), period_ms.to_string()])
            .arg(&facts_file)
            .stdout(Stdio::null())
            .spawn()
            .context("/usr/bin/python3.11 (Debian's python3.11)")?,
    );
    wait_listening(port)?;
    let url = format!("http://127.0.0.1:{port}/");
    let command = correlator_run_at(
        bin,
        server.0.id(),
        &url,
        out,
        u32::try_from(seconds)?,
        rate,
        &[],
    );
    // Dropped: SIGTERM, on which the server writes its collections.
    drop(server);
    let command = command?;
    let truth: Value = serde_json::from_str(
        &std::fs::read_to_string(&facts_file).context("the server wrote no facts")?,
    )?;
    let _ = std::fs::remove_dir_all(&tmp);
    let full: Vec<(f64, f64)> = truth["collections"]
        .as_array()
        .context("collections")?
        .iter()
        .filter_map(|c| {
            Some((
                c[0].as_f64()? / 1e6,
                (c[1].as_f64()? - c[0].as_f64()?) / 1e6,
            ))
        })
        .filter(|&(_, ms)| ms >= 10.0)
        .collect();
    if full.len() < 6 {
        bail!("only {} full collections in the run", full.len());
    }
    let gaps: Vec<f64> = full.windows(2).map(|w| (w[1].0 - w[0].0).round()).collect();
    Ok(json!({
        "command": command,
        "gc_full_collections": full.len(),
        "gc_ms": full.iter().map(|c| (c.1 * 1000.0).round() / 1000.0).collect::<Vec<_>>(),
        "gc_interval_ms": gaps,
        "served": truth["served"],
    }))
}

/// The JVM's pauses in its gc log: (uptime in s, pause in ms), from lines
/// such as `[12345678ns] GC(3) Pause Young (Allocation Failure) 60M->9M(500M) 4.321ms`.
fn gc_pauses(log: &str) -> Vec<(f64, f64)> {
    log.lines()
        .filter(|l| l.contains(" Pause "))
        .filter_map(|l| {
            let ns: f64 = l.strip_prefix('[')?.split("ns]").next()?.parse().ok()?;
            let ms: f64 = l
                .trim_end()
                .strip_suffix("ms")?
                .rsplit(' ')
                .next()?
                .parse()
                .ok()?;
            Some((ns / 1e9, ms))
        })
        .collect()
}

/// The proxy case: Debian's nginx (one process, pinned to CPU 1) in front
/// of corpus/recipes/stalling_backend.py (CPython, on CPU 0), whose one
/// thread stalls on one request in `one_in`: the backend's own list of
/// its stalls goes into the facts.
fn nginx_proxy(bin: &Path, recipe: &Value, out: &Path) -> Result<Value> {
    let num = |k: &str| {
        recipe[k]
            .as_u64()
            .with_context(|| format!("nginx-proxy recipe: {k}"))
    };
    let (stall_ms, one_in) = (num("stall_ms")?, num("one_in")?);
    let (port, backend_port) = (free_port()?, free_port()?);
    let tmp = workspace_root().join(format!("target/corpus-nginx-{port}"));
    std::fs::create_dir_all(&tmp)?;
    let backend_facts = tmp.join("backend.json");
    let backend = Server(
        Command::new("taskset")
            .args(["-c", "0", "/usr/bin/python3"])
            .arg(recipes_dir().join("stalling_backend.py"))
            .args([
                backend_port.to_string(),
                stall_ms.to_string(),
                one_in.to_string(),
                port.to_string(),
            ])
            .arg(&backend_facts)
            .spawn()
            .context("python3 (Debian's)")?,
    );
    wait_listening(backend_port)?;
    let t = tmp.display();
    let conf = format!(
        "daemon off;\nmaster_process off;\nworker_processes 1;\npid {t}/nginx.pid;\nerror_log {t}/error.log error;\n\
         events {{ worker_connections 4096; }}\n\
         http {{\n  access_log off;\n  keepalive_requests 1000000;\n  keepalive_timeout 600s;\n  client_body_temp_path {t}/body;\n  proxy_temp_path {t}/proxy;\n\
           fastcgi_temp_path {t}/fastcgi;\n  uwsgi_temp_path {t}/uwsgi;\n  scgi_temp_path {t}/scgi;\n\
           upstream backend {{ server 127.0.0.1:{backend_port}; keepalive 64; }}\n\
           server {{\n    listen 127.0.0.1:{port};\n    location / {{\n      proxy_pass http://backend;\n\
               proxy_http_version 1.1;\n      proxy_set_header Connection \"\";\n    }}\n  }}\n}}\n"
    );
    std::fs::write(tmp.join("nginx.conf"), conf)?;
    let nginx = Server(
        Command::new("taskset")
            .args(["-c", "1", "/usr/sbin/nginx", "-p"])
            .arg(&tmp)
            .arg("-c")
            .arg(tmp.join("nginx.conf"))
            .spawn()
            .context("nginx (Debian's nginx-light)")?,
    );
    wait_listening(port)?;
    let url = format!("http://127.0.0.1:{port}/");
    let rate = recipe["rate"].as_u64().unwrap_or(2000);
    let command = correlator_run_at(bin, nginx.0.id(), &url, out, 12, rate, &[]);
    drop(nginx);
    drop(backend);
    let command = command?;
    let truth: Value = serde_json::from_str(
        &std::fs::read_to_string(&backend_facts).context("the backend wrote no facts")?,
    )?;
    let _ = std::fs::remove_dir_all(&tmp);
    let stalls = truth["stalls"].as_u64().unwrap_or(0);
    if one_in > 0 && stalls < 5 {
        bail!("the backend stalled only {stalls} times");
    }
    Ok(json!({
        "command": command,
        "backend": "python3 corpus/recipes/stalling_backend.py (on CPU 0)",
        "backend_served": truth["served"],
        "backend_stalls": stalls,
        "backend_stall_ms": stall_ms,
        "backend_one_in": one_in,
    }))
}

/// Steal ticks of all CPUs so far (/proc/stat).
fn steal_ticks() -> Result<u64> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    let cpu = stat.lines().next().context("empty /proc/stat")?;
    cpu.split_whitespace()
        .nth(8)
        .and_then(|s| s.parse().ok())
        .context("no steal column in /proc/stat")
}

fn ticks_per_second() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 { hz as f64 } else { 100.0 }
}

/// The current UTC time, to the second (RFC 3339).
fn iso_now() -> String {
    let out = Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%SZ"])
        .output();
    out.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}
