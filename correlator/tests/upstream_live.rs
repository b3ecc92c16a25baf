//! "Idle" that isn't: Debian's haproxy in front of a backend that stalls.
//! The backend (the testkit's test server) sleeps 20 ms on every 500th
//! request while holding its one lock, so every request in flight behind
//! it waits too; haproxy's one thread meanwhile waits in `epoll_wait`
//! with the stalled request out to its upstream. `correlator run` against
//! haproxy must lead with an upstream wait named by the backend's
//! address:port, never with `idle` (a delay before the requests reached
//! the server), and time the backend's replies: the longest in flight in
//! the episodes at least the stall, the others fast. Needs root + BPF and
//! haproxy (fails, not skips, with CI=true).

use std::process::Command;

use crate::util::{Proc, Recorder, debian_binary, free_port, helper_server, run_report, scratch};

live_test! {
    fn a_proxy_waiting_on_its_backend_names_the_upstream() {
        let Some(haproxy) = debian_binary("/usr/sbin/haproxy", "upstream") else {
            return;
        };
        let dir = scratch("upstream-haproxy");
        let (backend, backend_addr) = helper_server(
            "testserver",
            &["--stall-every", "500", "--stall", "20ms"],
        );
        backend.pin_all("0");
        let port = free_port();
        let config = dir.join("haproxy.cfg");
        std::fs::write(
            &config,
            format!(
                "global\n  nbthread 1\n  maxconn 4096\n\
                 defaults\n  mode http\n  timeout connect 1s\n  timeout client 30s\n  timeout server 30s\n  http-reuse always\n\
                 frontend fe\n  bind 127.0.0.1:{port}\n  default_backend be\n\
                 backend be\n  server b1 {backend_addr}\n"
            ),
        )
        .expect("haproxy.cfg");
        let proxy = Proc(
            Command::new("taskset")
                .args(["-c", "1", &haproxy, "-db", "-f"])
                .arg(&config)
                .spawn()
                .expect("haproxy"),
        );
        crate::util::wait_listening(port);
        let report = run_report(
            proxy.0.id(),
            &format!("http://127.0.0.1:{port}/"),
            2000,
            "10s",
            &dir,
            &[],
        );
        drop(proxy);
        drop(backend);

        let c = &report["classification"];
        let first = &c["causes"][0];
        assert_eq!(first["cause"], "upstream", "the first cause: {c:#}");
        let evidence = first["evidence"].as_str().expect("evidence");
        assert!(
            evidence.contains(&format!("upstream {backend_addr}")),
            "the backend {backend_addr} is not named: {evidence}"
        );
        // Idle is what is left of the waits with nothing out upstream.
        let share = |name: &str| {
            c["causes"]
                .as_array()
                .expect("causes")
                .iter()
                .find(|x| x["cause"] == name)
                .map_or(0.0, |x| x["score"].as_f64().expect("score"))
        };
        assert!(
            share("idle") < 0.2 * share("upstream"),
            "idle {:.3} beside upstream {:.3}",
            share("idle"),
            share("upstream")
        );
        let u = &report["upstreams"][0];
        assert_eq!(u["peer"], backend_addr.as_str(), "{:#}", report["upstreams"]);
        let ms = |v: &serde_json::Value| v.as_u64().expect("ns") as f64 / 1e6;
        assert!(
            ms(&u["in_episodes_max_ns"]) >= 20.0,
            "the longest reply in flight in the episodes took {:.2} ms (the backend stalls 20 ms)",
            ms(&u["in_episodes_max_ns"])
        );
        assert!(
            ms(&u["outside_p99_ns"]) < 5.0,
            "replies outside the episodes: p99 {:.2} ms",
            ms(&u["outside_p99_ns"])
        );
    }
}

/// The testkit's thread-per-connection proxy (a worker per client
/// connection, each request sent to the backend on a connected socket,
/// through a pool of `pool` connections when not 0) in front of the test
/// server stalling 20 ms on every 500th request; `correlator run` against
/// the proxy. Returns the report and the backend's address.
fn thread_per_request(pool: &str, name: &str) -> (serde_json::Value, String) {
    let dir = scratch(name);
    let (backend, backend_addr) =
        helper_server("testserver", &["--stall-every", "500", "--stall", "20ms"]);
    backend.pin_all("0");
    let report = proxy_report(&["--backend", &backend_addr, "--pool", pool], &dir);
    drop(backend);
    (report, backend_addr)
}

/// The testkit's proxy with `args`, pinned to CPU 1, under `correlator
/// run` at 2,000 req/s for 10 s; its report.
fn proxy_report(args: &[&str], dir: &std::path::Path) -> serde_json::Value {
    let (proxy, addr) = helper_server("proxy", args);
    proxy.pin_all("1");
    run_report(
        proxy.0.id(),
        &format!("tcp://{addr}"),
        2000,
        "10s",
        dir,
        &[],
    )
}

live_test! {
    /// Workers calling the backend on their own connections, blocked in
    /// recvfrom for its reply: an upstream wait, periodic at the backend's
    /// stall period (every 500th request at 2,000 req/s: 250 ms).
    full fn a_worker_blocked_on_its_backend_names_the_upstream() {
        let (report, backend_addr) = thread_per_request("0", "upstream-workers");
        let c = &report["classification"];
        assert_eq!(c["causes"][0]["cause"], "upstream", "{c:#}");
        let evidence = c["causes"][0]["evidence"].as_str().expect("evidence");
        assert!(evidence.contains(&format!("upstream {backend_addr}")), "{evidence}");
        assert_eq!(c["signature"], "periodic", "{c:#}");
        let period = c["period_ms"].as_f64().expect("period_ms");
        assert!((period - 250.0).abs() < 10.0, "period {period} ms, the backend's is 250 ms");
    }
}

live_test! {
    /// Eight workers sharing two backend connections: a worker waiting for
    /// a free connection blocks in a futex until a worker that held one
    /// returns it; that worker was waiting for the backend meanwhile. The
    /// pool wait is named as blocking with the chain through the
    /// releasing worker to the upstream; the upstream wait is named too.
    ///
    /// The waiters and the holders are each busy the whole episode: an
    /// account that followed only the busiest thread made each episode
    /// either a pool wait or an upstream wait by a near tie (this test
    /// failed 7 of 11 runs on 2026-12-05). The account is now the mean
    /// over the delayed threads (`TimeAccount::mean_of_delayed`).
    full fn a_pool_wait_is_followed_to_the_backend() {
        let (report, backend_addr) = thread_per_request("2", "upstream-pool");
        let c = &report["classification"];
        let causes = c["causes"].as_array().expect("causes");
        let named = |kind: &str| causes.iter().find(|x| x["cause"] == kind);
        let upstream = named("upstream").unwrap_or_else(|| panic!("no upstream cause: {c:#}"));
        assert!(
            upstream["evidence"]
                .as_str()
                .is_some_and(|e| e.contains(&format!("upstream {backend_addr}"))),
            "{upstream:#}"
        );
        let pool = named("blocking").unwrap_or_else(|| panic!("the pool wait is not named: {c:#}"));
        let evidence = pool["evidence"].as_str().expect("evidence");
        assert!(
            evidence.contains("in futex until proxy-worker (tid")
                && evidence.contains(&format!("itself waiting for its upstream {backend_addr}")),
            "the pool wait is not followed to the backend: {evidence}"
        );
        assert!(
            causes.iter().take(2).all(|x| x["environment"] == false),
            "the environment leads: {c:#}"
        );
    }
}

/// A UDP echo on 127.0.0.1 that holds every `every`-th datagram for
/// `stall` before answering (and, being one thread, every datagram queued
/// behind it): the backend of `--udp`. Runs until the test process ends.
fn udp_echo(every: u64, stall: std::time::Duration) -> String {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("udp bind");
    let addr = socket.local_addr().expect("udp addr").to_string();
    std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        for n in 1u64.. {
            let Ok((len, from)) = socket.recv_from(&mut buf) else {
                return;
            };
            if n % every == 0 {
                std::thread::sleep(stall);
            }
            let _ = socket.send_to(&buf[..len], from);
        }
    });
    addr
}

live_test! {
    /// Workers calling a UDP backend, each on a UDP socket it connects
    /// when its client connects (after `run` attached): UDP's connect
    /// fires no TCP state change, so the upstream hooks, held back until
    /// the target has an upstream, are attached by the cgroup connect
    /// programs' count. The backend holds every 500th datagram 20 ms
    /// (every 250 ms at 2,000 req/s); the upstream is named and its
    /// exchanges timed.
    fn a_udp_backend_connected_after_attach_names_the_upstream() {
        let dir = scratch("upstream-udp");
        let backend_addr = udp_echo(500, std::time::Duration::from_millis(20));
        let report = proxy_report(&["--backend", &backend_addr, "--udp"], &dir);
        let notes = report["notes"].to_string();
        assert!(
            notes.contains("exchanges timed from"),
            "the upstream hooks were not attached at the UDP connect: {notes}"
        );
        let c = &report["classification"];
        assert_eq!(c["causes"][0]["cause"], "upstream", "{c:#}");
        let evidence = c["causes"][0]["evidence"].as_str().expect("evidence");
        assert!(evidence.contains(&format!("upstream {backend_addr}")), "{evidence}");
        let u = &report["upstreams"][0];
        assert_eq!(u["peer"], backend_addr.as_str(), "{:#}", report["upstreams"]);
        let ms = |v: &serde_json::Value| v.as_u64().expect("ns") as f64 / 1e6;
        assert!(
            ms(&u["in_episodes_max_ns"]) >= 20.0,
            "the longest reply in flight in the episodes took {:.2} ms (the backend holds 20 ms)",
            ms(&u["in_episodes_max_ns"])
        );
    }
}

/// The BPF links of process `pid` attached to a cgroup, from its
/// descriptors' fdinfo (`link_type:\tcgroup`): the kernel's view, not the
/// tool's.
fn cgroup_links(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fdinfo"))
        .expect("fdinfo")
        .flatten()
        .filter_map(|f| std::fs::read_to_string(f.path()).ok())
        .filter(|info| {
            info.lines()
                .any(|l| l.split_whitespace().eq(["link_type:", "cgroup"]))
        })
        .count()
}

live_test! {
    /// The cgroup connect programs watch only for the target's first UDP
    /// connect: once that has attached the upstream hooks they are
    /// detached, as they would go on costing every `connect()` in the
    /// target's cgroup (here the whole machine's). Two cgroup links in the
    /// recorder while it waits, none a few drains after the proxy connects
    /// its UDP socket (when a client connects to it).
    fn the_udp_connect_watch_is_detached_once_the_hooks_are_on() {
        let dir = scratch("upstream-udp-detach");
        let backend_addr = udp_echo(u64::MAX, std::time::Duration::ZERO);
        let (proxy, addr) = helper_server("proxy", &["--backend", &backend_addr, "--udp"]);
        let recorder = Recorder::start(proxy.0.id(), dir.join("run.run"), &[]);
        let pid = recorder.child.id();
        assert_eq!(cgroup_links(pid), 2, "waiting for a UDP connect, the connect programs are attached");
        let _client = std::net::TcpStream::connect(&addr).expect("connect to the proxy");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while cgroup_links(pid) != 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        assert_eq!(cgroup_links(pid), 0, "the connect programs are still attached 5 s after the UDP connect");
        let run = recorder.interrupt();
        let notes = run.notes.join("\n");
        assert!(notes.contains("exchanges timed from"), "the upstream hooks were not attached: {notes}");
    }
}
