//! `correlator compare` reads the same values the same way whatever the
//! input: numbers, an experiment's arm, or a directory of runs. The ground
//! truth is the values written here; the statistics themselves are checked
//! against scipy in the unit tests.

use std::{path::Path, process::Command};

use crate::util::{BIN, scratch, succeed_json};
use serde_json::{Value, json};

fn compare(a: &Path, b: &str, extra: &[&str]) -> Value {
    succeed_json(
        Command::new(BIN)
            .arg("compare")
            .arg(a)
            .arg(b)
            .args(extra)
            .arg("--json"),
    )
}

fn numbers(dir: &Path, name: &str, v: &[u64]) -> std::path::PathBuf {
    let p = dir.join(name);
    let text: Vec<String> = v.iter().map(u64::to_string).collect();
    std::fs::write(&p, text.join("\n")).expect("write");
    p
}

/// The statistics that must not depend on how the values were read.
fn stats(v: &Value) -> Vec<Value> {
    [
        "n_a",
        "n_b",
        "u",
        "p_value",
        "median_a",
        "median_b",
        "change_pct",
        "ci_low_pct",
        "ci_high_pct",
        "verdict",
    ]
    .iter()
    .map(|k| v[*k].clone())
    .collect()
}

const A: [u64; 10] = [510, 530, 490, 505, 520, 515, 498, 502, 525, 511];
const B: [u64; 10] = [410, 430, 395, 405, 420, 415, 398, 402, 425, 411];

#[test]
fn experiment_arms_read_as_their_per_repetition_values() {
    let dir = scratch("compare-exp");
    let a = numbers(&dir, "a.txt", &A);
    let b = numbers(&dir, "b.txt", &B);
    let reps: Vec<Value> = A
        .iter()
        .zip(B)
        .flat_map(|(&x, y)| {
            [
                json!({"arm": "A", "count": 1000, "p50_ns": 1, "p99_ns": x, "p999_ns": null}),
                json!({"arm": "B", "count": 1000, "p50_ns": 1, "p99_ns": y, "p999_ns": null}),
            ]
        })
        .collect();
    let exp = dir.join("exp.json");
    std::fs::write(
        &exp,
        json!({"schema": "correlator.experiment/v1", "reps": reps}).to_string(),
    )
    .expect("write");
    let plain = compare(&a, b.to_str().expect("utf8"), &[]);
    let from_exp = compare(&exp, &format!("{}#B", exp.display()), &[]);
    assert_eq!(stats(&plain), stats(&from_exp));
    // A 20% drop with no overlap: an improvement whatever the route.
    assert!(
        plain["verdict"]
            .as_str()
            .expect("verdict")
            .starts_with("improvement")
    );
    // Against its own arm (the default is A): no difference.
    let same = compare(&exp, &format!("{}#A", exp.display()), &[]);
    assert_eq!(same["verdict"], "no significant difference");
    // p99.9 was never quoted in these repetitions: a clear error, not a zero.
    let out = Command::new(BIN)
        .args(["compare", "--metric", "p99.9"])
        .arg(&exp)
        .arg(format!("{}#B", exp.display()))
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("fewer than 10 samples"), "{err}");
}

#[test]
fn a_directory_of_reports_is_one_value_per_run() {
    let dir = scratch("compare-dir");
    let report = |p99: u64| {
        json!({
            "schema": "correlator.report/v2",
            "latency": {"percentiles": [
                {"p": 50.0, "value_ns": 100, "samples_above": 5000},
                {"p": 99.0, "value_ns": p99, "samples_above": 100},
            ]}
        })
        .to_string()
    };
    for (side, values) in [("a", &A), ("b", &B)] {
        let d = dir.join(side);
        std::fs::create_dir_all(&d).expect("mkdir");
        for (i, v) in values.iter().enumerate() {
            std::fs::write(d.join(format!("run{i}.json")), report(*v)).expect("write");
        }
        // Other files in the directory (HTML views) are not runs.
        std::fs::write(d.join("run0.html"), "<html>").expect("write");
    }
    let a = numbers(&dir, "a.txt", &A);
    let b = numbers(&dir, "b.txt", &B);
    let plain = compare(&a, b.to_str().expect("utf8"), &[]);
    let runs = compare(&dir.join("a"), dir.join("b").to_str().expect("utf8"), &[]);
    assert_eq!(stats(&plain), stats(&runs));
    // One run alone is one value: refused with the way out.
    let out = Command::new(BIN)
        .arg("compare")
        .arg(dir.join("a/run0.json"))
        .arg(&b)
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("one run is one value"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}
