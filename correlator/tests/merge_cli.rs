//! `correlator merge` of watch report directories (one per host, say):
//! the merged count is the sum of the runs' own counts (histograms merged,
//! not percentiles averaged), and server-side latency is never merged with
//! client-side. The reports come from watch's flight recorder on a
//! synthetic feed (`watch-memcheck`), so no privileges are needed.

use std::{path::Path, process::Command};

use crate::util::{BIN, TESTKIT, scratch, succeed, succeed_json};

/// Two report directories written by watch's recorder at `rate` req/s.
fn watch_reports(dir: &Path, rate: u32) -> Vec<std::path::PathBuf> {
    succeed(
        Command::new(TESTKIT)
            .args(["watch-memcheck", "--duration", "20s"])
            .args(["--report-every", "10s", "--rate", &rate.to_string()])
            .arg("--out")
            .arg(dir),
    );
    let mut dirs: Vec<_> = std::fs::read_dir(dir)
        .expect("report dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.join("capture.run").is_file())
        .collect();
    dirs.sort();
    assert!(dirs.len() >= 2, "{dirs:?}");
    dirs
}

/// Requests in a watch run file, counted from its own phases.
fn completed(dir: &Path) -> u64 {
    let run = serde_json::to_value(
        correlator::runfile::RunFile::load(&dir.join("capture.run")).expect("run file"),
    )
    .expect("json");
    run["server_latency"]["latency"]["phases"]
        .as_array()
        .expect("phases")
        .iter()
        .map(|p| p["completed"].as_u64().expect("completed"))
        .sum()
}

#[test]
fn merging_watch_reports_adds_their_histograms() {
    let dir = scratch("merge-watch");
    let a = watch_reports(&dir.join("host-a"), 3_000);
    let b = watch_reports(&dir.join("host-b"), 5_000);
    let m = succeed_json(
        Command::new(BIN)
            .arg("merge")
            .arg(&a[0])
            .arg(&b[0])
            .arg("--json"),
    );
    assert_eq!(m["kind"], "server-side");
    let expected = completed(&a[0]) + completed(&b[0]);
    assert!(expected > 0);
    assert_eq!(m["latency"]["count"], expected, "{m}");

    // A client-side run (from the intended send time) is not merged with
    // them: one line, non-zero exit.
    let client = dir.join("client.run");
    succeed(
        Command::new(TESTKIT)
            .args(["synth-run", "--seconds", "2", "--requests", "1000"])
            .args(["--events", "1000", "--out"])
            .arg(&client),
    );
    let mixed = Command::new(BIN)
        .arg("merge")
        .arg(&a[0])
        .arg(&client)
        .output()
        .expect("merge");
    assert!(!mixed.status.success());
    let err = String::from_utf8_lossy(&mixed.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("not merged together"), "{err}");
}
