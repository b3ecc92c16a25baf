//! Bad input gets one clear line on stderr and a non-zero exit. These paths
//! are checked before anything is loaded, so they need no privileges.

use std::process::Command;

use crate::util::{BIN, scratch};

fn fails_with(args: &[&str], needle: &str) {
    let out = Command::new(BIN)
        .args(args)
        .output()
        .expect("run correlator");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} should fail");
    assert!(
        err.contains(needle),
        "{args:?}: stderr lacks {needle:?}:\n{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "one line, got:\n{err}");
}

#[test]
fn nonexistent_pid() {
    fails_with(
        &["record", "--pid", "999999999", "--duration", "1s"],
        "no process with PID",
    );
}

#[test]
fn kernel_thread() {
    fails_with(
        &["record", "--pid", "2", "--duration", "1s"],
        "kernel thread",
    );
}

#[test]
fn dead_target() {
    let mut child = Command::new("true").spawn().expect("spawn");
    let pid = child.id();
    // Zombie until reaped: recording it must be refused.
    std::thread::sleep(std::time::Duration::from_millis(200));
    fails_with(
        &["record", "--pid", &pid.to_string(), "--duration", "1s"],
        "exited",
    );
    let _ = child.wait();
}

#[test]
fn malformed_run_file() {
    let dir = scratch("malformed");
    let bad = dir.join("bad.run");
    std::fs::write(&bad, "{not json").expect("write");
    fails_with(
        &["summary", bad.to_str().expect("utf8")],
        "not a correlator run file",
    );
    std::fs::write(&bad, r#"{"schema":"correlator.run/v999"}"#).expect("write");
    fails_with(&["summary", bad.to_str().expect("utf8")], "schema");
    fails_with(&["summary", "/nonexistent/x.run"], "cannot read run file");
}

#[test]
fn bad_uprobe_specs() {
    fails_with(
        &["record", "--pid", "1", "--uprobe", "foo"],
        "expected BINARY:SYMBOL",
    );
    fails_with(
        &["record", "--pid", "1", "--uprobe", "/no/such/binary:main"],
        "no such binary",
    );
}

/// `run` checks its load options and the server before it attaches a probe
/// (it printed "attached to PID" first, then failed on --warmup).
#[test]
fn run_validates_before_attaching() {
    let me = std::process::id().to_string();
    let run = [
        "run",
        "--pid",
        &me,
        "--load",
        "tcp://127.0.0.1:1",
        "--rate",
        "100",
        "--duration",
        "2s",
    ];
    fails_with(
        &[&run[..], &["--warmup", "3s"]].concat(),
        "--warmup must be shorter than --duration",
    );
    fails_with(&run, "is the server listening?");
    // Outputs are checked too: a report is never lost to a typo at the end.
    fails_with(
        &[&run[..], &["--out", "/nonexistent-dir/report.json"]].concat(),
        "cannot write /nonexistent-dir/report.json",
    );
    fails_with(
        &[&run[..], &["--out", "/tmp/report.run"]].concat(),
        "--out /tmp/report.run is also the run file's path",
    );
    fails_with(
        &["record", "--pid", &me, "--out", "/nonexistent-dir/x.run"],
        "cannot write /nonexistent-dir/x.run",
    );
}

/// `watch` validates everything before attaching: the server, the latency
/// source, the windows, the report directory and the metrics port.
#[test]
fn watch_validates_before_attaching() {
    let me = std::process::id().to_string();
    let dir = scratch("watch-errors");
    let out = dir.join("reports");
    let out = out.to_str().expect("utf8");
    fails_with(
        &["watch", "--pid", "999999999", "--syscalls", "--out", out],
        "no process with PID",
    );
    fails_with(
        &[
            "watch",
            "--comm",
            "no-such-server-x",
            "--syscalls",
            "--out",
            out,
        ],
        "no process matches comm",
    );
    fails_with(
        &["watch", "--pid", &me, "--out", out],
        "watch needs server-side latency",
    );
    // A plain directory holding a file named cgroup.procs is not a cgroup.
    let fake = dir.join("not-a-cgroup");
    std::fs::create_dir_all(&fake).expect("mkdir");
    std::fs::write(fake.join("cgroup.procs"), format!("{me}\n")).expect("write");
    fails_with(
        &[
            "watch",
            "--cgroup",
            fake.to_str().expect("utf8"),
            "--syscalls",
            "--out",
            out,
        ],
        "is not a cgroup directory",
    );
    fails_with(
        &[
            "watch",
            "--pid",
            &me,
            "--syscalls",
            "--after",
            "2m",
            "--out",
            out,
        ],
        "must be shorter than --keep",
    );
    // A clap value error (clap adds its usage hint): refused before anything runs.
    let bad = Command::new(BIN)
        .args([
            "watch",
            "--pid",
            &me,
            "--syscalls",
            "--max-disk",
            "12 parsecs",
        ])
        .output()
        .expect("run correlator");
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown unit \"parsecs\""));
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port().to_string();
    fails_with(
        &[
            "watch",
            "--pid",
            &me,
            "--syscalls",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--out",
            out,
        ],
        "cannot listen on",
    );
    let file = dir.join("a-file");
    std::fs::write(&file, "").expect("write");
    fails_with(
        &[
            "watch",
            "--pid",
            &me,
            "--syscalls",
            "--out",
            file.to_str().expect("utf8"),
        ],
        "cannot create the report directory",
    );
}
