//! What the kernel side counted over a run, summed over CPUs, with the
//! names every output uses.

use correlator_common::{
    IrqKind, NUM_COUNTERS, NUM_IRQ_KINDS, NUM_SOFTIRQ_VECTORS, SOFTIRQ_NAMES, SyscallTotal,
};

use crate::latency::passive::PassiveStats;

/// Names of the [`IrqKind`]s, index = kind.
pub const IRQ_KIND_NAMES: [&str; NUM_IRQ_KINDS] = [
    "device",
    "local_timer",
    "reschedule",
    "call_function",
    "call_function_single",
    "irq_work",
];

/// Everything the kernel side counted, summed over CPUs.
#[derive(Clone, Debug, Default)]
pub struct KernelTotals {
    pub counters: [u64; NUM_COUNTERS],
    pub ring_reserve_failed: u64,
    pub thread_map_full: u64,
    pub irq_kinds: [u64; NUM_IRQ_KINDS],
    pub softirq_vectors: [u64; NUM_SOFTIRQ_VECTORS],
    /// The kernel side's passive-latency counts (lost, unpaired, calls).
    pub passive: PassiveStats,
    /// Thread accounts and syscall records lost to a full ring buffer.
    pub accounts_lost: u64,
    pub syscall_records_lost: u64,
    /// On-CPU samples taken of target threads.
    pub samples: u64,
    /// `--stacks`: stacks not stored (their slot held another stack),
    /// stacks the kernel could not walk, sample records lost to a full ring.
    pub stack_collisions: u64,
    pub stack_errors: u64,
    pub sample_records_lost: u64,
    /// Per syscall number: calls, total and off-CPU time.
    pub syscalls: Vec<(u32, SyscallTotal)>,
}

impl KernelTotals {
    /// Per-IRQ-kind counts with their names.
    pub fn irq_kinds_named(&self) -> Vec<(&'static str, u64)> {
        IRQ_KIND_NAMES.iter().copied().zip(self.irq_kinds).collect()
    }

    /// Per-softirq-vector counts with their names.
    pub fn softirqs_named(&self) -> Vec<(&'static str, u64)> {
        SOFTIRQ_NAMES
            .iter()
            .copied()
            .zip(self.softirq_vectors)
            .collect()
    }
}

const _: () = assert!(IRQ_KIND_NAMES.len() == IrqKind::IrqWork as usize + 1);
