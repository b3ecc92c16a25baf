//! tracefs: where it is mounted. The probes attach to BTF tracepoints and do
//! not need it; `doctor` reports it because tools used beside correlator
//! (perf, bpftrace) and the classic tracepoint ids do.

use std::path::PathBuf;

use anyhow::{Context as _, Result};

/// Candidate tracefs mount points, newest convention first.
const MOUNTS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// The tracefs directory that has `events/`, if any.
pub fn root() -> Option<PathBuf> {
    MOUNTS
        .iter()
        .map(PathBuf::from)
        .find(|p| p.join("events").is_dir())
}

/// The tracefs root, or an error that says how to mount it.
pub fn require_root() -> Result<PathBuf> {
    root().context(
        "tracefs is not mounted; mount it with `mount -t tracefs nodev /sys/kernel/tracing`",
    )
}
