//! `run --confirm` against a known cause: the demo server on CPU 1 with a
//! CPU hog bursting on the same CPU. With the hog allowed to be stopped,
//! preemption is confirmed with the hog named, and the whole command
//! (run + experiments) ends within 3 minutes; without --allow-stop the hog
//! is never stopped. Needs root + BPF (fails, not skips, with CI=true).

use std::{
    process::Command,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use serde_json::Value;

use crate::util::{BIN, Proc, demo_server, scratch};

fn run_confirm(extra: &[&str], dir: &std::path::Path) -> (Value, u32, bool, Duration) {
    let (server, addr) = demo_server(&["--scenario", "none", "--cpu", "1"]);
    let hog = Proc(
        Command::new(BIN)
            .args(["demo-hog", "--cpu", "1"])
            .spawn()
            .expect("hog"),
    );
    let hog_pid = hog.0.id();
    // Watch the hog the whole time: was it ever stopped (state T)?
    let (done, stopped) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let watcher = {
        let (done, stopped) = (Arc::clone(&done), Arc::clone(&stopped));
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                let status =
                    std::fs::read_to_string(format!("/proc/{hog_pid}/status")).unwrap_or_default();
                if status.contains("State:\tT") {
                    stopped.store(true, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let out = dir.join("report.json");
    let start = Instant::now();
    let status = Command::new(BIN)
        .args(["run", "--quiet", "--pid", &server.0.id().to_string()])
        .args([
            "--load",
            &format!("tcp://{addr}"),
            "--rate",
            "2000",
            "--duration",
            "10s",
        ])
        .args(["--warmup", "1s", "--confirm", "1", "--state-file"])
        .arg(dir.join("state"))
        .arg("--out")
        .arg(&out)
        .args(extra)
        .status()
        .expect("run");
    let took = start.elapsed();
    done.store(true, Ordering::Relaxed);
    let _ = watcher.join();
    assert!(status.success());
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(&out).expect("report")).expect("json");
    (report, hog_pid, stopped.load(Ordering::Relaxed), took)
}

fn confirmation<'a>(report: &'a Value, cause: &str) -> &'a Value {
    report["confirmation"]
        .as_array()
        .expect("confirmation[]")
        .iter()
        .find(|c| c["cause"] == cause)
        .unwrap_or_else(|| panic!("no {cause} in {}", report["confirmation"]))
}

live_test! {
    fn preemption_by_a_hog_is_confirmed_when_stopping_it_is_allowed() {
        let dir = scratch("confirm-allowed");
        let (report, hog_pid, stopped, took) = run_confirm(&["--allow-stop", "demo-hog"], &dir);
        let c = confirmation(&report, "preemption");
        eprintln!("{c}\ntook {took:?}");
        assert_eq!(c["outcome"], "confirmed", "{c}");
        assert_eq!(c["plan"]["knob"], format!("stop={hog_pid}"), "the hog is named: {c}");
        assert!(c["change_pct"].as_f64().expect("change") < 0.0, "{c}");
        assert!(stopped, "the treatment arm stopped the hog");
        assert!(took < Duration::from_secs(180), "run --confirm took {took:?}");
    }
}

live_test! {
    fn without_allow_stop_no_process_is_stopped() {
        let dir = scratch("confirm-denied");
        let (report, _, stopped, _) = run_confirm(&[], &dir);
        assert!(!stopped, "the hog was stopped without --allow-stop");
        let c = confirmation(&report, "preemption");
        assert_eq!(c["outcome"], "not_allowed", "{c}");
        assert!(c["verdict"].as_str().expect("verdict").contains("--allow-stop"), "{c}");
    }
}
