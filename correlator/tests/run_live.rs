//! End to end: `correlator run` against the demo server with a known
//! injected cause names the right signature and top cause. Needs root + BPF
//! (fails, not skips, with CI=true).

use std::{
    path::Path,
    process::{Command, Stdio},
};

use crate::util::{BIN, Proc, demo_server, run_report, scratch};
use serde_json::Value;

fn run(pid: u32, addr: &str, out: &Path, extra: &[&str]) -> Value {
    let status = Command::new(BIN)
        .args([
            "run",
            "--quiet",
            "--pid",
            &pid.to_string(),
            "--load",
            &format!("tcp://{addr}"),
        ])
        .args(["--rate", "5000", "--duration", "8s", "--warmup", "1s"])
        .arg("--out")
        .arg(out)
        .args(extra)
        .status()
        .expect("run");
    assert!(status.success());
    serde_json::from_str(&std::fs::read_to_string(out).expect("report")).expect("report json")
}

fn causes(r: &Value) -> Vec<String> {
    r["classification"]["causes"]
        .as_array()
        .expect("causes")
        .iter()
        .map(|c| c["cause"].as_str().expect("cause").to_string())
        .collect()
}

live_test! {
    fn periodic_page_fault_bursts_are_named() {
        let dir = scratch("run-periodic");
        let (server, addr) =
            demo_server(&["--scenario", "periodic", "--period", "300ms", "--cpu", "1"]);
        let out = dir.join("report.json");
        let r = run(
            server.0.id(),
            &addr,
            &out,
            &["--html", dir.join("r.html").to_str().expect("utf8")],
        );
        eprintln!("{}", r["classification"]);
        assert_eq!(r["schema"], "correlator.report/v2");
        assert_eq!(r["classification"]["signature"], "periodic");
        let period = r["classification"]["period_ms"].as_f64().expect("period");
        assert!((285.0..=315.0).contains(&period), "period {period}");
        assert_eq!(causes(&r)[0], "page_faults", "{}", r["classification"]);
        // The report's required fields.
        assert!(
            r["latency"]["percentiles"]
                .as_array()
                .is_some_and(|p| p.len() == 5)
        );
        assert!(r["latency"]["max_ns"].as_u64().is_some());
        assert!(
            r["events"]["page_faults_minor"]
                .as_u64()
                .is_some_and(|n| n > 10_000)
        );
        assert!(r["events"]["lost"].as_u64().is_some());
        assert!(r["episodes"].as_array().is_some_and(|e| e.len() >= 15));
        assert!(
            r["overhead"]["programs"]
                .as_array()
                .is_some_and(|p| !p.is_empty())
        );
        // The hooks' dispatch, calibrated at attach on the socket hooks and
        // applied to every program's runs.
        let d = &r["overhead"]["hook_dispatch"];
        assert!(
            d["runs"].as_u64().is_some_and(|n| n > 10_000)
                && d["measured"]["programs_ns"].as_f64().is_some_and(|p| p > 0.0)
                && d["measured"]["unhooked_ns"].as_f64().is_some_and(|u| u > 0.0),
            "{d:#}"
        );
        let html = std::fs::read_to_string(dir.join("r.html")).expect("html");
        assert!(html.contains("<svg") && html.contains("PERIODIC"));

        // The saved run re-analysed gives the same classification.
        let again = dir.join("again.json");
        let status = Command::new(BIN)
            .arg("report")
            .arg(dir.join("report.run"))
            .arg("--out")
            .arg(&again)
            .stdout(Stdio::null())
            .status()
            .expect("report");
        assert!(status.success());
        let r2: Value =
            serde_json::from_str(&std::fs::read_to_string(&again).expect("again")).expect("json");
        assert_eq!(r2["classification"], r["classification"]);

        // Two runs merged: counts add up (histograms merged, not averaged).
        let out = Command::new(BIN)
            .arg("merge")
            .arg(dir.join("report.run"))
            .arg(dir.join("report.run"))
            .arg("--json")
            .output()
            .expect("merge");
        assert!(out.status.success());
        let m: Value = serde_json::from_slice(&out.stdout).expect("merge json");
        assert_eq!(
            m["latency"]["count"].as_u64(),
            r["latency"]["count"].as_u64().map(|c| 2 * c)
        );
    }
}

live_test! {
    full fn cpu_hog_on_the_servers_cpu_is_named() {
        let dir = scratch("run-hog");
        let (server, addr) = demo_server(&["--scenario", "none", "--cpu", "1"]);
        let _hog = Proc(
            Command::new(BIN)
                .args(["demo-hog", "--cpu", "1"])
                .spawn()
                .expect("hog"),
        );
        let r = run(server.0.id(), &addr, &dir.join("report.json"), &[]);
        eprintln!("{}", r["classification"]);
        assert_eq!(r["classification"]["signature"], "sporadic");
        let c = &r["classification"]["causes"][0];
        assert_eq!(c["cause"], "preemption", "{}", r["classification"]);
        assert!(
            c["evidence"]
                .as_str()
                .expect("evidence")
                .contains("demo-hog"),
            "{c}"
        );
    }
}

live_test! {
    /// The clean baseline with a late-sending client: the demo server (no
    /// scenario) alone on CPU 1, the load generator on CPU 0 beside a CPU
    /// hog at nice -20 in bursts of 20-60 ms (pauses of 150-700 ms), so its
    /// pacer sends late. The delay came before the server: the report
    /// counts the late sends and claims no server cause.
    fn a_late_sending_client_is_not_blamed_on_the_server() {
        let (server, addr) = demo_server(&["--scenario", "none", "--cpu", "1"]);
        let hog = Proc(
            Command::new(BIN)
                .args(["demo-hog", "--cpu", "0", "--nice", "-20"])
                .stdout(Stdio::null())
                .spawn()
                .expect("hog"),
        );
        let dir = scratch("late-client");
        let report = run_report(
            server.0.id(),
            &format!("tcp://{addr}"),
            2000,
            "10s",
            &dir,
            &["--load-cpus".as_ref(), "0".as_ref()],
        );
        drop(hog);
        drop(server);
        let late = report["latency"]["late_sends"].as_u64().expect("late_sends");
        assert!(late >= 20, "only {late} late sends: the hog did not starve the generator");
        let c = &report["classification"];
        for cause in c["causes"].as_array().expect("causes") {
            assert_eq!(cause["environment"], true, "a server cause claimed: {c:#}");
        }
    }
}
