//! Cross-CPU function calls (IPIs) sent to the CPU a target thread ran
//! on, by sender thread: who made the server's CPU take call-function
//! interrupts, and how many of them were TLB shootdowns.

use serde::{Deserialize, Serialize};

/// One thread that queued cross-CPU calls to a CPU while a target thread
/// ran there, over the whole run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpiSender {
    pub tid: u32,
    pub tgid: u32,
    pub comm: String,
    pub calls: u64,
    /// Of them, TLB shootdowns (`flush_tlb_func`).
    pub tlb_shootdowns: u64,
    /// The syscall it was in at its first call (None: not in one, or a
    /// run recorded before it was kept), and how many of its calls it
    /// made inside that syscall.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub syscall: Option<String>,
    #[serde(default)]
    pub in_syscall: u64,
}

impl IpiSender {
    pub fn from_kernel(tid: u32, s: &correlator_common::IpiSender) -> Self {
        let len = s.comm.iter().position(|&b| b == 0).unwrap_or(s.comm.len());
        Self {
            tid,
            tgid: s.tgid,
            comm: String::from_utf8_lossy(&s.comm[..len]).into_owned(),
            calls: s.calls,
            tlb_shootdowns: s.tlb_shootdowns,
            syscall: (s.syscall != 0).then(|| crate::timeline::syscalls::name(s.syscall - 1)),
            in_syscall: s.in_syscall,
        }
    }

    /// Where it sent them from: `in munmap (98% of its calls)`, or "".
    pub fn syscall_note(&self) -> String {
        self.syscall.as_ref().map_or(String::new(), |sc| {
            format!(
                " in {sc} ({:.0}% of its calls)",
                100.0 * self.in_syscall as f64 / self.calls.max(1) as f64
            )
        })
    }

    /// How a report names it: `comm (tid N, pid P)`.
    pub fn name(&self) -> String {
        if self.tid == self.tgid {
            format!("{} (pid {})", self.comm, self.tid)
        } else {
            format!("{} (tid {}, pid {})", self.comm, self.tid, self.tgid)
        }
    }
}

/// The kernel's `flush_tlb_func`, from /proc/kallsyms (0: not found, or
/// addresses hidden): a cross-CPU call of it is a TLB shootdown. One symbol
/// by exact name: a line scan, no symbolizer needed.
pub fn tlb_flush_func() -> u64 {
    std::fs::read_to_string("/proc/kallsyms")
        .ok()
        .and_then(|text| {
            text.lines().find_map(|l| {
                let mut f = l.split_whitespace();
                let (addr, _kind, name) = (f.next()?, f.next()?, f.next()?);
                (name == "flush_tlb_func" && f.next().is_none())
                    .then(|| u64::from_str_radix(addr, 16).ok())
                    .flatten()
            })
        })
        .unwrap_or(0)
}
