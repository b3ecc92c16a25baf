//! Native Perfetto traces against the official schema: a 60 s run at
//! 10,000 req/s against a server that stalls 10 ms every ~300 ms, its
//! trace decoded by `perfetto_trace_pb2` (PyPI's `perfetto` package, in
//! the venv xtask/setup.sh makes). Every request above the spike threshold
//! is a slice, every track referenced is defined, every slice ends, and
//! writing the trace (`correlator report RUN --perfetto`) peaks under
//! 150 MiB. Needs root + BPF (fails, not skips, with CI=true).

use std::process::{Command, Stdio};

use serde_json::Value;

use crate::util::{BIN, VENV_PYTHON, helper_server, run_report, scratch, succeed_json};

/// Peak RSS (KiB) and success of a child, from wait4's rusage.
fn wait_rusage(child: std::process::Child) -> (bool, i64) {
    let mut status = 0;
    // SAFETY: zeroed rusage is a valid value for wait4 to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers; the child is ours and not yet waited for.
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as i32, "wait4");
    (
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        usage.ru_maxrss,
    )
}

live_test! {
    full fn trace_of_a_long_fast_run_decodes_with_the_official_schema() {
        let Some(python) = crate::util::debian_binary(VENV_PYTHON, "perfetto trace test") else {
            return;
        };
        let dir = scratch("perfetto");
        let events = dir.join("events.jsonl");
        let (server, addr) = helper_server(
            "pathserver",
            &["--path", "stall", "--every", "300ms", "--hold", "10ms",
              "--events", events.to_str().expect("path")],
        );
        let _ = Command::new("taskset")
            .args(["-pc", "0", &server.0.id().to_string()])
            .output();
        // The generator on both CPUs: `run` keeps it off the server's CPU
        // by default, and one vCPU does not carry 10,000 req/s here (each
        // send does the server side's TCP receive work inline): p50 6 ms,
        // schedule not kept, with no stall to find at 5 x that median.
        let report: Value = run_report(
            server.0.id(),
            &format!("tcp://{addr}"),
            10_000,
            "60s",
            &dir,
            &["--load-cpus".as_ref(), "0-1".as_ref()],
        );
        drop(server);
        assert!(report["latency"]["threshold_ns"].is_u64(), "no spike threshold");
        let run_file = dir.join("report.run");
        assert!(run_file.exists(), "run file next to the report");

        let trace = dir.join("run.pftrace");
        let child = Command::new(BIN)
            .arg("report")
            .arg(&run_file)
            .arg("--perfetto")
            .arg(&trace)
            .stdout(Stdio::null())
            .spawn()
            .expect("report");
        let (ok, peak_kib) = wait_rusage(child);
        assert!(ok, "correlator report --perfetto failed");
        eprintln!("writing the trace: peak RSS {} MiB, {} bytes", peak_kib / 1024,
                  std::fs::metadata(&trace).expect("trace").len());
        assert!(peak_kib < 150 * 1024, "peak RSS {} MiB", peak_kib / 1024);

        let facts = succeed_json(
            Command::new(&python)
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/perfetto_check.py"))
            .arg(&trace)
            .arg(crate::util::json_export(&run_file))
            .arg(dir.join("report.json"))
        );
        eprintln!("{facts}");
        assert_eq!(facts["undefined_tracks"], 0, "{facts}");
        assert_eq!(facts["unclosed_slices"], 0, "{facts}");
        assert_eq!(facts["unmatched_ends"], 0, "{facts}");
        let expected = facts["slow_expected"].as_u64().expect("n");
        // ~200 stalls of 10 ms at 10,000 req/s: thousands of slow requests.
        // (A run the generator could not keep up with has none: its
        // latency only grows, and nothing is 5 x its median. Say so.)
        assert!(expected >= 1_000, "{facts}\nlatency: {}", report["latency"]);
        assert!(expected >= facts["slow_spikes_reported"].as_u64().expect("n"), "{facts}");
        assert_eq!(facts["slow_found"], expected, "{facts}");
        // The stalls are sleeps on the serving thread: slow requests flow
        // to the intervals that delayed them, and every flow ends somewhere.
        assert!(facts["flows"].as_u64().expect("n") * 2 >= expected, "{facts}");
        assert_eq!(facts["flows_dangling"], 0, "{facts}");
        // Events on CLOCK_MONOTONIC (3), tied to BOOTTIME (6) and wall time.
        assert_eq!(facts["event_clock_ids"], serde_json::json!([3]), "{facts}");
        assert_eq!(facts["clock_ids"], serde_json::json!([1, 3, 6]), "{facts}");
        assert!(facts["thread_names"].as_array().expect("names").iter()
            .any(|n| n.as_str().is_some_and(|n| n.starts_with("correlator"))), "{facts}");
        assert!(facts["counters_with_values"].as_u64().expect("n") >= 3, "{facts}");
        for name in ["slow request", "episode", "Blocked", "Running"] {
            assert!(facts["slice_names"].as_array().expect("names")
                .iter().any(|n| n == name), "no {name} slice: {facts}");
        }
    }
}
