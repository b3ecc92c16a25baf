//! Passive server-side latency against ground truth: `--syscalls` on real
//! Debian servers under the load generator (the client's request count and
//! latency), on the demo server with an injected lock stall (the client's
//! episodes), and `--uprobe` on a function of known duration (its calls as
//! counted and timed by the caller). Needs root + BPF (fails, not skips,
//! with CI=true) and redis-server / memcached from xtask/setup.sh.

use std::process::{Command, Stdio};

use crate::util::{
    BIN, Proc, TESTKIT, debian_binary, demo_server, free_port, redis_server, scratch,
    wait_listening,
};
use serde_json::Value;

/// `correlator run --syscalls` against `url`; returns the report JSON.
fn run_with_syscalls(pid: u32, url: &str, name: &str, extra: &[&str]) -> Value {
    let dir = scratch(name);
    let out = dir.join("report.json");
    let status = Command::new(BIN)
        .args(["run", "--quiet", "--syscalls", "--pid"])
        .arg(pid.to_string())
        .args(["--load", url, "--rate", "4000", "--duration", "4s"])
        .args(["--connections", "4"])
        .args(extra)
        .arg("--out")
        .arg(&out)
        .stdout(Stdio::null())
        .status()
        .expect("run");
    assert!(status.success(), "{name}: correlator run failed");
    serde_json::from_str(&std::fs::read_to_string(&out).expect("report")).expect("json")
}

/// The client's p99 from each request's actual send (`done - sent`),
/// nearest rank over the run's `count` measured requests, from the run
/// file's kept requests (every request above the recorder's running
/// threshold, far below a p99 of milliseconds) in the measured phase.
fn client_p99_from_send(run_file: &std::path::Path, count: u64) -> u64 {
    let run = serde_json::to_value(correlator::runfile::RunFile::load(run_file).expect("run file"))
        .expect("json");
    let latency = &run["latency"];
    let phase = &latency["phases"][0];
    let (start, end) = (
        phase["start_ns"].as_u64().expect("start"),
        phase["end_ns"].as_u64().expect("end"),
    );
    let ns = |r: &Value, k: &str| r[k].as_u64().expect("request time");
    let mut from_send: Vec<u64> = latency["requests"]
        .as_array()
        .expect("requests")
        .iter()
        .filter(|r| (start..end).contains(&ns(r, "intended_ns")))
        .map(|r| ns(r, "done_ns") - ns(r, "sent_ns"))
        .collect();
    from_send.sort_unstable_by(|a, b| b.cmp(a));
    let rank = usize::try_from(count / 100).expect("rank");
    from_send[rank.min(from_send.len() - 1)]
}

fn percentile(summary: &Value, q: f64) -> u64 {
    summary["percentiles"]
        .as_array()
        .expect("percentiles")
        .iter()
        .find(|p| p["p"] == q)
        .and_then(|p| p["value_ns"].as_u64())
        .unwrap_or_else(|| panic!("p{q} missing"))
}

fn p50(summary: &Value) -> u64 {
    percentile(summary, 50.0)
}

/// The server-side count matches the client's within 1%, and the server's
/// own p50 is below the client's (which adds the network stack and the
/// client's scheduling). A hiccup that queues requests in the socket makes
/// the server read several at once and answer them together: the raw pair
/// count then falls short, which must be flagged, and the count estimated
/// from the bytes read must still match.
fn check_counts_and_p50(report: &Value, name: &str) {
    let s = &report["server_side"];
    let raw = s["server_requests"].as_f64().expect("server_requests");
    let estimated = s["server_requests_estimated"]
        .as_f64()
        .expect("server_requests_estimated");
    let client = s["client_requests"].as_f64().expect("client_requests");
    let off = |n: f64| (n - client).abs() / client;
    eprintln!(
        "{name}: server {raw} (estimated {estimated}) vs client {client} ({:.3}%, estimated {:.3}%), server p50 {} vs client p50 {}; warnings {}",
        off(raw) * 100.0,
        off(estimated) * 100.0,
        p50(s),
        p50(&report["latency"]),
        s["warnings"]
    );
    // 4,000 req/s for 4 s less the 1 s warm-up.
    assert!(
        client >= 0.95 * 12_000.0,
        "{name}: client completed {client}"
    );
    assert!(
        off(estimated) <= 0.01,
        "{name}: estimated {estimated} vs client {client}"
    );
    assert!(
        raw <= estimated,
        "{name}: raw {raw} above the estimate {estimated}"
    );
    if off(raw) > 0.01 {
        assert!(
            s["warnings"].to_string().contains("several requests"),
            "{name}: raw count {raw} off by more than 1% without a warning"
        );
    }
    assert!(
        p50(s) < p50(&report["latency"]),
        "{name}: server p50 not below client p50"
    );
    assert_eq!(s["stats"]["lost"], 0, "{name}");
}

/// Counts redis-server's requests server-side, with `extra` for `run`.
fn count_redis_requests(test: &str, name: &str, extra: &[&str]) {
    let Some((server, port)) = redis_server(test, "1", &[]) else {
        return;
    };
    let url = format!("redis://127.0.0.1:{port}");
    let report = run_with_syscalls(server.0.id(), &url, name, extra);
    check_counts_and_p50(&report, name);
}

live_test! {
    /// With the opt-in syscall hooks: requests paired at `sys_exit`.
    full fn syscalls_count_redis_requests() {
        count_redis_requests(
            "syscalls_count_redis_requests",
            "passive-redis",
            &["--syscall-time", "exact"],
        );
    }
}

live_test! {
    /// By default (no syscall hooks): requests paired at the socket
    /// layer's tracepoints.
    fn socket_tracepoints_count_redis_requests() {
        count_redis_requests(
            "socket_tracepoints_count_redis_requests",
            "passive-redis-sockets",
            &[],
        );
    }
}

live_test! {
    /// The wait in the socket behind a stall, measured server-side: redis
    /// sleeps 30 ms (`DEBUG SLEEP`, on a side connection) every 500 ms
    /// while the load generator sends 4,000 req/s open-loop. The requests
    /// that arrive meanwhile queue in their sockets and are read, several
    /// at once, when the sleep ends: timed from the read they would look
    /// fast. Timed from their arrival (`sk_data_ready`) and counted one by
    /// one, the server-side p99 must match the client's (which times each
    /// from its intended send) within 20%, and never exceed it by more than
    /// 5% (the server cannot see more delay than the client had). Each
    /// sleep comes on a new connection, as from redis-cli: closed sockets'
    /// addresses are reused by later ones, whose requests must not inherit
    /// the old connection's state (that once gave a 1.6 s "request"), so the
    /// server-side maximum stays within twice the client's.
    fn server_side_latency_includes_the_wait_in_the_socket() {
        let Some((server, port)) = redis_server(
            "server_side_latency_includes_the_wait_in_the_socket",
            "1",
            &["--enable-debug-command", "yes"],
        ) else {
            return;
        };
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let sleeper = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                use std::io::{Read, Write};
                let mut reply = [0u8; 64];
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::thread::sleep(std::time::Duration::from_millis(500));
                    let mut c =
                        std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
                    c.write_all(b"*3\r\n$5\r\nDEBUG\r\n$5\r\nSLEEP\r\n$4\r\n0.03\r\n")
                        .expect("DEBUG SLEEP");
                    let n = c.read(&mut reply).expect("reply");
                    assert!(reply[..n].starts_with(b"+OK"), "DEBUG SLEEP refused");
                }
            })
        };
        let url = format!("redis://127.0.0.1:{port}");
        let report = run_with_syscalls(
            server.0.id(),
            &url,
            "passive-socket-wait",
            &["--from-arrival"],
        );
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        sleeper.join().expect("sleeper");
        let s = &report["server_side"];
        let (server_p99, client_p99) = (percentile(s, 99.0), percentile(&report["latency"], 99.0));
        // The server cannot see time before a request was sent: compare
        // with the client's p99 from the actual send (in one CI run here the
        // pacer's vCPU was held 31 ms, sends up to 31 ms late put the
        // client's p99 at 32.2 ms, from the send 27.9 ms, server 24.6 ms).
        let sent_p99 = client_p99_from_send(
            &std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("passive-socket-wait/report.run"),
            report["latency"]["count"].as_u64().expect("count"),
        );
        let (server_max, client_max) = (
            s["max_ns"].as_u64().expect("server max"),
            report["latency"]["max_ns"].as_u64().expect("client max"),
        );
        let requests = s["stats"]["requests"].as_u64().expect("requests");
        let from_arrival = s["stats"]["from_arrival"].as_u64().expect("from_arrival");
        eprintln!(
            "socket wait: client p99 {client_p99} ns ({sent_p99} ns from the send), server-side p99 {server_p99} ns; max {client_max} / {server_max} ns; {from_arrival} of {requests} records timed from arrival; server {} vs client {} requests",
            s["server_requests"], s["client_requests"]
        );
        assert!(
            client_p99 >= 10_000_000,
            "the stalls did not reach the client's p99 ({client_p99} ns): no test"
        );
        assert!(
            from_arrival as f64 >= 0.95 * requests as f64,
            "{from_arrival} of {requests} timed from arrival"
        );
        assert!(
            server_p99 as f64 >= 0.8 * sent_p99 as f64,
            "server-side p99 {server_p99} ns misses the client's {sent_p99} ns"
        );
        assert!(
            server_p99 as f64 <= 1.05 * sent_p99 as f64,
            "server-side p99 {server_p99} ns above the client's {sent_p99} ns"
        );
        assert!(
            server_max <= 2 * client_max,
            "server-side maximum {server_max} ns, the client's {client_max} ns: a request inherited an old connection's state"
        );
        check_counts_and_p50(&report, "passive-socket-wait");
    }
}

live_test! {
    full fn syscalls_count_memcached_requests() {
        let Some(memcached) = debian_binary("/usr/bin/memcached", "syscalls_count_memcached_requests")
        else {
            return;
        };
        let port = free_port();
        let server = Proc(
            Command::new("taskset")
                .args([
                    "-c",
                    "1",
                    &memcached,
                    "-l",
                    "127.0.0.1",
                    "-p",
                    &port.to_string(),
                ])
                .args(["-U", "0", "-u", "root", "-t", "1"])
                .spawn()
                .expect("memcached"),
        );
        wait_listening(port);
        let url = format!("memcache://127.0.0.1:{port}");
        let report = run_with_syscalls(
            server.0.id(),
            &url,
            "passive-memcached",
            &["--op", "get", "--keys", "100"],
        );
        check_counts_and_p50(&report, "memcached");
    }
}

live_test! {
    /// A lock held 10-20 ms on the request path, with the demo server's own
    /// log of when it held it as ground truth: every hold inside the measured
    /// window delays requests at the client past the 8 ms SLO (a client
    /// episode), and every client episode a hold produced is also an episode of
    /// the server-side latency. Client episodes without a hold (a VM hiccup
    /// while the server sat idle) are invisible server-side by construction,
    /// so they are not counted.
    full fn syscalls_see_the_injected_stalls() {
        let dir = scratch("passive-stall-events");
        let log = dir.join("events.jsonl");
        let (server, addr) = demo_server(&[
            "--scenario",
            "blocking",
            "--cpu",
            "1",
            "--every",
            "300ms",
            "--events",
            log.to_str().expect("utf-8 path"),
        ]);
        let report = run_with_syscalls(
            server.0.id(),
            &format!("tcp://{addr}"),
            "passive-stall",
            &["--slo", "8ms"],
        );
        drop(server);
        let holds: Vec<(u64, u64)> = std::fs::read_to_string(&log)
            .expect("event log")
            .lines()
            .map(|l| {
                let e: Value = serde_json::from_str(l).expect("event line");
                (
                    e["start_ns"].as_u64().expect("start"),
                    e["end_ns"].as_u64().expect("end"),
                )
            })
            .collect();
        let phases = report["latency"]["phases"].as_array().expect("phases");
        let measured = |(a, b): (u64, u64)| {
            phases.iter().any(|p| {
                a >= p["start_ns"].as_u64().expect("phase start")
                    && b <= p["end_ns"].as_u64().expect("phase end")
            })
        };
        let episodes = report["episodes"].as_array().expect("episodes");
        let seen = report["server_side"]["episodes_seen"]
            .as_array()
            .expect("episodes_seen");
        let window = |e: &Value| {
            (
                e["start_ns"].as_u64().expect("episode start"),
                e["end_ns"].as_u64().expect("episode end"),
            )
        };
        let overlaps = |(a, b): (u64, u64), (c, d): (u64, u64)| a <= d && c <= b;
        let holds: Vec<(u64, u64)> = holds.into_iter().filter(|&h| measured(h)).collect();
        let unnoticed: Vec<_> = holds
            .iter()
            .filter(|&&h| !episodes.iter().any(|e| overlaps(h, window(e))))
            .collect();
        let unseen: Vec<_> = episodes
            .iter()
            .zip(seen)
            .filter(|(e, _)| holds.iter().any(|&h| overlaps(h, window(e))))
            .filter(|(_, s)| !s.as_bool().expect("bool"))
            .map(|(e, _)| e)
            .collect();
        eprintln!(
            "stall: {} lock holds in the measured window, {} client episodes ({} without a client episode), {} of the holds' episodes not seen server-side; {} server-side episodes",
            holds.len(),
            episodes.len(),
            unnoticed.len(),
            unseen.len(),
            report["server_side"]["server_episodes"]
        );
        assert!(holds.len() >= 4, "only {} lock holds", holds.len());
        assert!(
            unnoticed.is_empty(),
            "lock holds without a client episode: {unnoticed:?}"
        );
        assert!(
            unseen.is_empty(),
            "lock episodes missing server-side: {unseen:#?}"
        );
    }
}

fn workload_calls(extra: &[&str], name: &str) -> (Value, Value) {
    let dir = scratch(name);
    let mut w = crate::util::Workload::spawn(&["--calls", "2000", "--call-us", "200"]);
    let rec = crate::util::Recorder::start(
        w.pid(),
        dir.join("u.run"),
        &[
            &["--uprobe", &format!("{TESTKIT}:correlator_known_work")],
            extra,
        ]
        .concat(),
    );
    w.go();
    let out = w.child.wait_with_output().expect("workload");
    assert!(out.status.success());
    let work: Value = serde_json::from_slice(&out.stdout).expect("workload json");
    let _ = rec.wait();
    let summary = Command::new(BIN)
        .args(["summary", "--json"])
        .arg(dir.join("u.run"))
        .output()
        .expect("summary");
    let summary: Value = serde_json::from_slice(&summary.stdout).expect("summary json");
    (work["calls"].clone(), summary["server_latency"].clone())
}

live_test! {
    /// Every call counted; each timed between the function's own body time and
    /// the caller's time around the call, whose difference is the probe's
    /// measured cost per call.
    full fn uprobe_counts_and_times_calls() {
        let (calls, server) = workload_calls(&[], "uprobe");
        let body = calls["body_p50_ns"].as_u64().expect("body");
        let around = calls["around_p50_ns"].as_u64().expect("around");
        let measured = p50(&server);
        eprintln!(
            "uprobe: {} requests, {} calls; p50 body {body} ≤ probe {measured} ≤ around {around} (probe cost {} ns/call)",
            server["requests"],
            server["calls"],
            around - body
        );
        assert_eq!(server["requests"], 2000);
        assert_eq!(server["calls"], 2000);
        // HdrHistogram keeps 3 significant digits: ±0.1%.
        assert!(
            measured as f64 >= body as f64 * 0.999,
            "{measured} < body {body}"
        );
        assert!(
            measured as f64 <= around as f64 * 1.001,
            "{measured} > around {around}"
        );

        // Sampling: one call in 10 timed, all counted.
        let (_, sampled) = workload_calls(&["--uprobe-every", "10"], "uprobe-every");
        assert_eq!(sampled["requests"], 200);
        assert_eq!(sampled["calls"], 2000);
    }
}
