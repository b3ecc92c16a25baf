//! The wait-for chain against a holder that times itself: the pathserver
//! helper's trigger thread (`path-trigger`) takes a lock word, sleeps
//! 15 ms holding it, and releases it, writing each hold to its event log;
//! the serving thread's next request blocks in a futex wait until then.
//! `correlator run` must name the holder as the server's waker, say that
//! it slept (clock_nanosleep), and give the time it slept while the server
//! waited, per episode, within 5% + 1 ms of the helper's own clocks. Needs
//! root + BPF (fails, not skips, with CI=true).

use serde_json::Value;

use crate::util::{helper_server, run_report, scratch, top_server_cause};

/// One interval of the helper's event log (CLOCK_MONOTONIC, the clock of
/// the report's episode windows), with the thread's own time on the CPU
/// and waiting for it inside it (its schedstat).
#[derive(Clone, Copy)]
struct Span {
    start_ns: u64,
    end_ns: u64,
    awake_ns: u64,
}

impl Span {
    fn overlap(self, other: Span) -> Span {
        Span {
            awake_ns: 0,
            start_ns: self.start_ns.max(other.start_ns),
            end_ns: self
                .end_ns
                .min(other.end_ns)
                .max(self.start_ns.max(other.start_ns)),
        }
    }

    fn len(self) -> u64 {
        self.end_ns - self.start_ns
    }
}

/// The helper's spans of `function`.
fn spans(log: &str, function: &str) -> Vec<Span> {
    log.lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("event json"))
        .filter(|v| v["function"] == function)
        .map(|v| Span {
            start_ns: v["start_ns"].as_u64().expect("start_ns"),
            end_ns: v["end_ns"].as_u64().expect("end_ns"),
            awake_ns: v["cpu_ns"].as_u64().expect("cpu_ns")
                + v["run_delay_ns"].as_u64().expect("run_delay_ns"),
        })
        .collect()
}

live_test! {
    fn lock_holder_is_named_with_the_time_it_slept() {
        let dir = scratch("chain-holder");
        let events = dir.join("events.jsonl");
        let (server, addr) = helper_server(
            "pathserver",
            &["--path", "lock", "--every", "500ms", "--hold", "15ms",
              "--events", events.to_str().expect("path")],
        );
        // Server and holder on one CPU, the load generator on the other:
        // the holder wakes to an idle CPU, so its hold is its sleep.
        server.pin_all("0");
        // With stacks: the release site (the holder's unlock) is named too.
        let report = run_report(
            server.0.id(), &format!("tcp://{addr}"), 2000, "10s", &dir, &["--stacks".as_ref()],
        );
        drop(server);
        let log = std::fs::read_to_string(&events).expect("events");
        let (holds, waits) = (spans(&log, "hold_lock"), spans(&log, "wait_for_lock"));
        assert!(holds.len() >= 10, "{} holds in 10 s", holds.len());

        let c = &report["classification"];
        let top = top_server_cause(c);
        assert_eq!(top["cause"], "blocking", "{c:#}");
        let evidence = top["evidence"].as_str().expect("evidence");
        assert!(
            evidence.contains("until path-trigger (tid") && evidence.contains("clock_nanosleep"),
            "the holder and its sleep are not named: {evidence}"
        );
        // The unlock woke the server: the holder's futex wake, its kernel
        // side of releasing the mutex.
        assert!(
            evidence.contains("released at") && evidence.contains("futex_wake"),
            "the release site is not named: {evidence}"
        );

        // Per episode: the holder's sleep while the server waited for it,
        // by the report and by the helper's own clocks.
        let mut checked = 0;
        for e in report["episodes"].as_array().expect("episodes") {
            let window = Span {
                start_ns: e["start_ns"].as_u64().expect("start"),
                end_ns: e["end_ns"].as_u64().expect("end"),
                awake_ns: 0,
            };
            // The holder's sleep is its hold less its own time on the CPU
            // and waiting for it (schedstat): after its timer fired it
            // can wait for the CPU, still holding the lock (7.2 ms once in
            // CI, beside a host stall), which the report rightly does not
            // call sleep. That time falls inside the server's wait.
            let truth: u64 = holds
                .iter()
                .flat_map(|&h| {
                    waits.iter().map(move |&w| {
                        let both = h.overlap(w).overlap(window).len();
                        if both == 0 { 0 } else { both.saturating_sub(h.awake_ns) }
                    })
                })
                .sum();
            if truth < 2_000_000 {
                continue;
            }
            let a = &e["account"];
            assert!(
                a["woken_by"].as_str().is_some_and(|w| w.starts_with("path-trigger (tid")),
                "episode at {}: the holder slept {:.1} ms while the server waited, \
                 but the waker named is {}",
                window.start_ns, truth as f64 / 1e6, a["woken_by"]
            );
            assert_eq!(a["waker_meanwhile"], "blocked in clock_nanosleep", "{a:#}");
            assert!(
                a["released_at"].as_str().is_some_and(|r| r.ends_with("futex_wake")),
                "episode at {}: release site {}",
                window.start_ns, a["released_at"]
            );
            let ours = a["waker_meanwhile_ns"].as_u64().expect("waker_meanwhile_ns");
            let bound = 0.05 * truth as f64 + 1e6;
            assert!(
                (ours as f64 - truth as f64).abs() <= bound,
                "episode at {}: holder slept {:.2} ms by the report, {:.2} ms by its own clocks",
                window.start_ns, ours as f64 / 1e6, truth as f64 / 1e6
            );
            checked += 1;
        }
        eprintln!("holder time checked in {checked} episodes ({} holds)", holds.len());
        assert!(checked >= 8, "only {checked} episodes held a hold of 2 ms or more");
    }
}
