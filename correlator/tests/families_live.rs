//! Families live: two independent problems in one run (the demo server's
//! periodic 48 MiB sweep every 300 ms, and the demo hog's CPU bursts at
//! random times on the server's CPU) come out as two families, each
//! classified on its own; a periodic job skipping cycles; a stall rare
//! enough for p99.9 only; and a passive recording of a client that raises
//! its rate past the server's capacity. Needs root + BPF (fails, not
//! skips, with CI=true).

use std::process::Command;

use crate::util::{
    BIN, Proc, Recorder, demo_server, run_report, scratch, succeed, top_server_cause,
};

live_test! {
    full fn periodic_job_and_sporadic_hog_are_two_families() {
        let dir = scratch("families-mix");
        let (server, addr) =
            demo_server(&["--scenario", "periodic", "--cpu", "1", "--injector-cpu", "0"]);
        let _hog = Proc(
            Command::new(BIN)
                .args(["demo-hog", "--cpu", "1"])
                .spawn()
                .expect("hog"),
        );
        let report = run_report(server.0.id(), &format!("tcp://{addr}"), 2000, "12s", &dir, &[]);
        let families = report["families"].as_array().expect("families");
        let find = |cause: &str| {
            families
                .iter()
                .find(|f| f["cause"] == cause && f["environment"] == false)
                .unwrap_or_else(|| panic!("no {cause} family: {families:#?}"))
        };
        let faults = find("page_faults");
        assert_eq!(faults["signature"], "periodic", "{}", faults["evidence"]);
        let period = faults["periodicity"]["period_ms"].as_f64().expect("period");
        assert!((period - 300.0).abs() <= 15.0, "{}", faults["evidence"]);
        let hog = find("preemption");
        assert_eq!(hog["signature"], "sporadic", "{}", hog["evidence"]);
        assert_eq!(hog["detail"], "demo-hog", "{}", hog["evidence"]);
    }
}

live_test! {
    /// A periodic job that skips a third of its cycles, among the VM's own
    /// small stalls: periodic, at its period.
    full fn periodic_job_skipping_cycles_is_periodic() {
        let dir = scratch("families-skip");
        let events = dir.join("events.jsonl");
        let (server, addr) = crate::util::helper_server(
            "pathserver",
            &[
                "--path",
                "fault",
                "--every",
                "300ms",
                "--skip-every",
                "3",
                "--mib",
                "32",
                "--events",
                events.to_str().expect("path"),
            ],
        );
        let _ = Command::new("taskset")
            .args(["-pc", "0", &server.0.id().to_string()])
            .output();
        let report = run_report(server.0.id(), &format!("tcp://{addr}"), 2000, "15s", &dir, &[]);
        let c = &report["classification"];
        assert_eq!(c["signature"], "periodic", "{}", c["evidence"]);
        let period = c["period_ms"].as_f64().expect("period");
        assert!((period - 300.0).abs() <= 15.0, "{}", c["evidence"]);
    }
}

live_test! {
    /// A rare stall on a µs-scale server, found and named at
    /// `--percentile 99.9`: 25 ms every 20,000 requests at 5,000 req/s
    /// (ten stalls, a few tenths of a percent of the requests). Sized to
    /// the host: the 3 ms every 10,000 at 10,000 req/s assumed a
    /// p99 under 1 ms, but this VM's host stalls made p99 2.3-20 ms and
    /// p99.9 11-51 ms at that rate (four fresh-clone CI runs on this VM), so
    /// the host, not a 3 ms stall, set the p99.9 and the run said so
    /// (signature none: "the tail is the environment's").
    fn rare_stall_is_found_at_p999() {
        let dir = scratch("families-p999");
        let (server, addr) = crate::util::helper_server(
            "testserver",
            &["--stall-every", "20000", "--stall", "25ms"],
        );
        server.pin_all("0");
        let report = run_report(
            server.0.id(),
            &format!("tcp://{addr}"),
            5_000,
            "40s",
            &dir,
            &["--percentile".as_ref(), "99.9".as_ref()],
        );
        let c = &report["classification"];
        assert_ne!(c["signature"], "none", "{}", c["evidence"]);
        let top = top_server_cause(c);
        assert_eq!(top["cause"], "blocking", "{c:#}");
        let families = report["families"].as_array().expect("families");
        assert!(
            families
                .iter()
                .any(|f| f["detail"] == "clock_nanosleep" && f["impact"]["percentile"] == 99.9),
            "{families:#?}"
        );
    }
}

live_test! {
    /// A passive recording (`record --syscalls`, no load of ours) while an
    /// external client raises its rate in steps, 2,000 → 4,500 → 7,000
    /// req/s for 8 s each, the last past the demo server's capacity
    /// (150 µs per request: about 6,600 req/s): queueing, load-correlated
    /// by the spike share's rank correlation with the arrival rate, second
    /// by second, although the overload is one or two long episodes.
    full fn passive_recording_of_a_rising_client_is_load_correlated_queueing() {
        let dir = scratch("families-passive-steps");
        let (server, addr) = demo_server(&["--scenario", "load", "--cpu", "1"]);
        let run = dir.join("steps.run");
        let recorder = Recorder::start(server.0.id(), run.clone(), &["--syscalls", "--from-arrival"]);
        succeed(
            Command::new(BIN)
                .args(["load", "--rate", "2000,4500,7000", "--duration", "8s"])
                .args(["--connections", "4", "--load-cpus", "0"])
                .arg(format!("tcp://{addr}")),
        );
        succeed(Command::new("kill").args(["-INT", &recorder.child.id().to_string()]));
        recorder.wait();
        let out = dir.join("report.json");
        succeed(Command::new(BIN).arg("report").arg(&run).arg("--out").arg(&out));
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&out).expect("report")).expect("json");
        let families = report["families"].as_array().expect("families");
        let queueing = families
            .iter()
            .find(|f| f["cause"] == "queueing" && f["environment"] == false)
            .unwrap_or_else(|| panic!("no queueing family: {families:#?}"));
        eprintln!("{}", queueing["evidence"]);
        assert_eq!(queueing["signature"], "load-correlated", "{}", queueing["evidence"]);
        assert_eq!(queueing["trend"]["method"], "spearman", "{queueing:#}");
        let c = &report["classification"];
        assert_eq!(c["signature"], "load-correlated", "{}", c["evidence"]);
        let top = top_server_cause(c);
        assert_eq!(top["cause"], "queueing", "{c:#}");
    }
}
