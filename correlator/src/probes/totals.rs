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
    /// Upstream exchanges not recorded (ring or connection table full).
    pub upstreams_lost: u64,
    /// Memory stall records lost to their full ring.
    pub mem_stalls_lost: u64,
    /// Runtime pause records (Go's stopped worlds) lost to their full ring.
    pub runtime_pauses_lost: u64,
    /// Cross-CPU calls whose sender the full sender table could not keep.
    pub ipi_senders_lost: u64,
    /// Context switches of target threads the kernel made without tracing
    /// them (see `Total::UntracedSwitches`).
    pub untraced_switches: u64,
    /// Of those, target switch-ins dated by the kernel's stamp (see
    /// `Total::UnseenSwitchInsDated`).
    pub unseen_switch_ins_dated: u64,
    /// Runtime garbage collections that target threads ran (USDT).
    pub runtime_gcs: u64,
    /// On-CPU samples taken of target threads.
    pub samples: u64,
    /// `--stacks`: stacks not stored (their slot held another stack),
    /// stacks the kernel could not walk, sample records lost to a full ring.
    pub stack_collisions: u64,
    pub stack_errors: u64,
    pub sample_records_lost: u64,
    /// Samples that found the sampling timer silent while a target thread
    /// ran, and the silent time (booked as the thread's steal), ns.
    pub timer_silences: u64,
    pub timer_silence_ns: u64,
    /// Per syscall number: calls, total and off-CPU time.
    pub syscalls: Vec<(u32, SyscallTotal)>,
}

impl KernelTotals {
    /// What was counted since `earlier` (the totals are never reset, so a
    /// window's counts are a difference of two readings).
    pub fn since(&self, earlier: &Self) -> Self {
        let sub = |a: &mut [u64], b: &[u64]| {
            for (x, y) in a.iter_mut().zip(b) {
                *x = x.saturating_sub(*y);
            }
        };
        let mut d = self.clone();
        sub(&mut d.counters, &earlier.counters);
        sub(&mut d.irq_kinds, &earlier.irq_kinds);
        sub(&mut d.softirq_vectors, &earlier.softirq_vectors);
        d.ring_reserve_failed = d
            .ring_reserve_failed
            .saturating_sub(earlier.ring_reserve_failed);
        d.thread_map_full = d.thread_map_full.saturating_sub(earlier.thread_map_full);
        d.passive.lost = d.passive.lost.saturating_sub(earlier.passive.lost);
        d.passive.unpaired_writes = d
            .passive
            .unpaired_writes
            .saturating_sub(earlier.passive.unpaired_writes);
        d.passive.calls = d.passive.calls.saturating_sub(earlier.passive.calls);
        d.passive.from_arrival = d
            .passive
            .from_arrival
            .saturating_sub(earlier.passive.from_arrival);
        d.accounts_lost = d.accounts_lost.saturating_sub(earlier.accounts_lost);
        d.upstreams_lost = d.upstreams_lost.saturating_sub(earlier.upstreams_lost);
        d.mem_stalls_lost = d.mem_stalls_lost.saturating_sub(earlier.mem_stalls_lost);
        d.runtime_pauses_lost = d
            .runtime_pauses_lost
            .saturating_sub(earlier.runtime_pauses_lost);
        d.ipi_senders_lost = d.ipi_senders_lost.saturating_sub(earlier.ipi_senders_lost);
        d.untraced_switches = d
            .untraced_switches
            .saturating_sub(earlier.untraced_switches);
        d.unseen_switch_ins_dated = d
            .unseen_switch_ins_dated
            .saturating_sub(earlier.unseen_switch_ins_dated);
        d.runtime_gcs = d.runtime_gcs.saturating_sub(earlier.runtime_gcs);
        d.syscall_records_lost = d
            .syscall_records_lost
            .saturating_sub(earlier.syscall_records_lost);
        d.samples = d.samples.saturating_sub(earlier.samples);
        d.stack_collisions = d.stack_collisions.saturating_sub(earlier.stack_collisions);
        d.stack_errors = d.stack_errors.saturating_sub(earlier.stack_errors);
        d.sample_records_lost = d
            .sample_records_lost
            .saturating_sub(earlier.sample_records_lost);
        d.timer_silences = d.timer_silences.saturating_sub(earlier.timer_silences);
        d.timer_silence_ns = d.timer_silence_ns.saturating_sub(earlier.timer_silence_ns);
        for (nr, t) in &mut d.syscalls {
            if let Some((_, e)) = earlier.syscalls.iter().find(|(n, _)| n == nr) {
                t.calls = t.calls.saturating_sub(e.calls);
                t.total_ns = t.total_ns.saturating_sub(e.total_ns);
                t.offcpu_ns = t.offcpu_ns.saturating_sub(e.offcpu_ns);
                t.irq_ns = t.irq_ns.saturating_sub(e.irq_ns);
                t.steal_ns = t.steal_ns.saturating_sub(e.steal_ns);
            }
        }
        d.syscalls.retain(|(_, t)| t.calls > 0);
        d
    }

    /// Every kind of record or event the kernel side could not keep.
    pub fn lost(&self) -> u64 {
        self.ring_reserve_failed
            + self.thread_map_full
            + self.passive.lost
            + self.accounts_lost
            + self.syscall_records_lost
            + self.sample_records_lost
            + self.upstreams_lost
            + self.mem_stalls_lost
            + self.runtime_pauses_lost
            + self.ipi_senders_lost
    }

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
