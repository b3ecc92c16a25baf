//! The pprof export read by the tool users run: `go tool pprof` (Debian's
//! golang) on the profile of a `run --stacks` of the pathserver helper in
//! lock mode (its serving thread blocks in `wait_for_lock` while the
//! trigger thread holds the lock). Filtered to the blocked lock waits, the
//! top function must be `wait_for_lock`; the `cpu` values must sum to the
//! run's sampled time (its samples × the sampling period) within 1%.
//! Needs root + BPF and go (fails, not skips, with CI=true).

use std::process::Command;

use serde_json::Value;

use crate::util::{BIN, debian_binary, helper_server, run_report, scratch};

/// `go tool pprof ARGS FILE`'s output.
fn pprof(go: &str, args: &[&str], file: &std::path::Path) -> String {
    let out = Command::new(go)
        .args(["tool", "pprof"])
        .args(args)
        .arg(file)
        .output()
        .expect("go tool pprof");
    assert!(
        out.status.success(),
        "go tool pprof {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A duration as pprof prints it (`404.21ms`, `18.34s`, `12us`), in ns.
fn duration_ns(text: &str) -> f64 {
    let split = text
        .find(|c: char| c.is_ascii_alphabetic())
        .unwrap_or(text.len());
    let (n, unit) = text.split_at(split);
    let n: f64 = n.parse().unwrap_or_else(|_| panic!("a duration: {text}"));
    n * match unit {
        "ns" => 1.0,
        "us" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        "mins" => 60e9,
        _ => panic!("unit of {text}"),
    }
}

live_test! {
    fn a_pprof_profile_reads_in_go_tool_pprof() {
        let Some(go) = debian_binary("/usr/bin/go", "pprof") else {
            return;
        };
        let dir = scratch("pprof");
        let events = dir.join("events.jsonl");
        let (server, addr) = helper_server(
            "pathserver",
            &["--path", "lock", "--every", "500ms", "--hold", "15ms",
              "--events", events.to_str().expect("path")],
        );
        server.pin_all("0");
        let profile = dir.join("run.pb.gz");
        run_report(
            server.0.id(),
            &format!("tcp://{addr}"),
            2000,
            "10s",
            &dir,
            &["--stacks".as_ref(), "--pprof".as_ref(), profile.as_os_str()],
        );
        drop(server);

        // The blocked lock waits' code: wait_for_lock on top once the
        // kernel frames below it are hidden.
        let top = pprof(
            &go,
            &["-top", "-sample_index=off_cpu", "-tagfocus=context=lock", "-hide=_\\[k\\]$"],
            &profile,
        );
        let first = top
            .lines()
            .skip_while(|l| !l.trim_start().starts_with("flat"))
            .nth(1)
            .unwrap_or_else(|| panic!("no rows: {top}"));
        assert!(first.ends_with("pathserver::wait_for_lock"), "{top}");

        // The cpu values against the run's sampled time.
        let run_json = dir.join("run.json");
        let status = Command::new(BIN)
            .arg("convert")
            .arg(dir.join("report.run"))
            .arg(&run_json)
            .status()
            .expect("convert");
        assert!(status.success());
        let run: Value =
            serde_json::from_str(&std::fs::read_to_string(&run_json).expect("run")).expect("json");
        let sampled = run["samples"].as_u64().expect("samples") as f64
            * run["sample_period_ns"].as_u64().expect("period") as f64;
        let cpu = pprof(&go, &["-top", "-sample_index=cpu"], &profile);
        let total = cpu
            .lines()
            .find_map(|l| l.split("Total samples = ").nth(1))
            .and_then(|t| t.split_whitespace().next())
            .unwrap_or_else(|| panic!("no total: {cpu}"));
        let total = duration_ns(total);
        assert!(
            (total - sampled).abs() <= 0.01 * sampled,
            "pprof's cpu total {total:.0} ns, the run's sampled time {sampled:.0} ns"
        );
    }
}
