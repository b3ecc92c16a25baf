//! Managed runtimes' pauses of the whole process: Go's stopped worlds,
//! timed in the kernel between the entries of `runtime.stopTheWorldWithSema`
//! and `runtime.startTheWorldWithSema` (see the eBPF crate's `runtimes`).
//! While the world is stopped no goroutine runs: every wait of a thread of
//! that process inside one is the runtime's pause, whoever ends it.

use correlator_common::RuntimePauseRecord;
use serde::{Deserialize, Serialize};

/// One stopped world of a target process, stopped by thread `tid`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuntimePause {
    pub tid: u32,
    pub tgid: u32,
    pub start_ns: u64,
    pub end_ns: u64,
}

impl From<&RuntimePauseRecord> for RuntimePause {
    fn from(r: &RuntimePauseRecord) -> Self {
        Self {
            tid: r.tid,
            tgid: r.tgid,
            start_ns: r.start_ns,
            end_ns: r.end_ns,
        }
    }
}

impl RuntimePause {
    /// Its overlap with [start, end], ns.
    pub fn overlap(&self, start: u64, end: u64) -> u64 {
        self.end_ns
            .min(end)
            .saturating_sub(self.start_ns.max(start))
    }
}
