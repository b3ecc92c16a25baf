//! The run file: what `correlator record` captured (schema
//! `correlator.run/v1`, documented in docs/run-file.md), stored compact
//! (zstd over MessagePack, [`compact`]) and written while recording
//! ([`journal`]); JSON is an export (a path ending in `.json`) and older
//! JSON run files still load.
//!
//! Its size is bounded by the run's length, not by event count: buckets are
//! per time slot, and off-CPU records are capped (see [`crate::timeline::Timeline`]).
//!
//! One piece on purpose (over 450 lines): the format, its construction from
//! a capture and its tolerant reader are together the contract that
//! docs/run-file.md describes.

mod buckets;
pub mod compact;
pub mod journal;

use std::{collections::BTreeMap, fs, io::BufWriter, path::Path};

use anyhow::{Context as _, Result, bail};
use correlator_common::{Counter, NUM_COUNTERS};

use crate::latency::passive::ServerLatency;
use crate::timeline::stacks::StackTable;
use crate::timeline::steal::StealSample;
use serde::{Deserialize, Serialize};

use crate::timeline::{Counts, OffCpu, SyscallSpan, ThreadAccount, Timeline};
use crate::{
    probes::{KernelTotals, ProgramCost},
    target::Target,
};

pub const SCHEMA: &str = "correlator.run/v1";

/// Why recording stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    Duration,
    Interrupted,
    TargetExited,
    /// `correlator watch` cut this window out of its flight recorder when
    /// the tail spiked.
    Triggered,
    /// The recorder never finished the file (killed): the run is what its
    /// journal held ([`journal::recover`]).
    Unfinished,
}

/// Event totals per family, under the names every output uses.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventTotals {
    pub page_faults_minor: u64,
    pub page_faults_major: u64,
    pub context_switches_voluntary: u64,
    pub context_switches_involuntary: u64,
    pub migrations: u64,
    pub hardirqs: u64,
    pub softirqs: u64,
    /// Every kernel event or record that did not reach the run file.
    pub lost: u64,
}

impl EventTotals {
    /// The event counters of `counts` (`lost` zero).
    pub fn from_counters(counts: &[u64; NUM_COUNTERS]) -> Self {
        let at = |c: Counter| counts[c as usize];
        Self {
            page_faults_minor: at(Counter::PageFaultsMinor),
            page_faults_major: at(Counter::PageFaultsMajor),
            context_switches_voluntary: at(Counter::SwitchesVoluntary),
            context_switches_involuntary: at(Counter::SwitchesInvoluntary),
            migrations: at(Counter::Migrations),
            hardirqs: at(Counter::HardIrqs),
            softirqs: at(Counter::SoftIrqs),
            lost: 0,
        }
    }
}

/// Summed durations, in ns.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Durations {
    pub hardirq_ns: u64,
    pub softirq_ns: u64,
    pub runnable_ns: u64,
    pub blocked_ns: u64,
    /// IRQ time on a CPU while a target thread waited runnable for it
    /// (included in `runnable_ns`). Absent in files from before 0.1.1.
    #[serde(default)]
    pub hardirq_wait_ns: u64,
    #[serde(default)]
    pub softirq_wait_ns: u64,
    /// Samples that found the CPU's sampling timer silent while a target
    /// thread ran, and the silent time beyond the steal clock and hard
    /// IRQs: the host held the vCPU without accounting steal, or the guest
    /// ran with interrupts off. Part of the threads' steal. Absent in older
    /// run files.
    #[serde(default)]
    pub timer_silences: u64,
    #[serde(default)]
    pub timer_silence_ns: u64,
}

impl Durations {
    /// The duration counters of `counts` (timer silences zero: they are
    /// not bucket counters).
    pub fn from_counters(counts: &[u64; NUM_COUNTERS]) -> Self {
        let at = |c: Counter| counts[c as usize];
        Self {
            hardirq_ns: at(Counter::HardIrqNs),
            softirq_ns: at(Counter::SoftIrqNs),
            runnable_ns: at(Counter::RunnableNs),
            blocked_ns: at(Counter::BlockedNs),
            hardirq_wait_ns: at(Counter::HardIrqWaitNs),
            softirq_wait_ns: at(Counter::SoftIrqWaitNs),
            ..Self::default()
        }
    }
}

/// Where losses came from; `EventTotals::lost` is their sum.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Losses {
    /// Off-CPU records the kernel could not put in the full ring buffer.
    pub ring_reserve_failed: u64,
    /// Threads the kernel could not track (thread map full).
    pub thread_map_full: u64,
    /// Off-CPU records not kept because of the in-memory cap.
    pub records_over_cap: u64,
    /// Events counted in the kernel totals but missing from the drained
    /// buckets (the drain fell more than the bucket ring behind).
    pub bucket_events_undrained: u64,
    /// Per-thread bucket accounts and syscall records the kernel could not
    /// put in their full ring buffers.
    #[serde(default)]
    pub accounts_lost: u64,
    #[serde(default)]
    pub syscall_records_lost: u64,
    /// Upstream exchanges the kernel could not record.
    #[serde(default)]
    pub upstreams_lost: u64,
    /// Memory stall records the kernel could not record.
    #[serde(default)]
    pub mem_stalls_lost: u64,
    /// Runtime pause records (Go's stopped worlds) the kernel could not record.
    #[serde(default)]
    pub runtime_pauses_lost: u64,
    /// Cross-CPU calls whose sender the kernel could not keep.
    #[serde(default)]
    pub ipi_senders_lost: u64,
    /// `--stacks`: sample records lost to their full ring buffer; stacks
    /// not stored because other stacks held their slot in both stack maps;
    /// stacks referenced but gone from the map when read.
    #[serde(default)]
    pub sample_records_lost: u64,
    #[serde(default)]
    pub stack_collisions: u64,
    #[serde(default)]
    pub stacks_missing: u64,
    /// `--stacks`: stacks the kernel could not walk (not a loss of data it
    /// had: e.g. a user stack unreadable at that moment). Not in `total`.
    #[serde(default)]
    pub stack_errors: u64,
    /// Context switches of target threads the kernel made without firing
    /// sched_switch, found by the next IRQ or switch on the CPU: unless
    /// the switch-in is dated (below), the thread's time between the last
    /// traced switch and that moment is unexplained. Not in `total` (no
    /// record was dropped).
    #[serde(default)]
    pub untraced_switches: u64,
    /// Of those, target switch-ins dated by the scheduler's own stamp
    /// (`sched_info.last_arrival`): the off-CPU interval before them was
    /// recorded up to it, not left unexplained.
    #[serde(default)]
    pub unseen_switch_ins_dated: u64,
}

impl Losses {
    pub fn total(&self) -> u64 {
        self.ring_reserve_failed
            + self.thread_map_full
            + self.records_over_cap
            + self.bucket_events_undrained
            + self.accounts_lost
            + self.syscall_records_lost
            + self.upstreams_lost
            + self.mem_stalls_lost
            + self.runtime_pauses_lost
            + self.ipi_senders_lost
            + self.sample_records_lost
            + self.stack_collisions
            + self.stacks_missing
    }
}

/// One syscall's totals over the run, for the target's threads.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyscallTotals {
    pub calls: u64,
    /// Enter to exit.
    pub total_ns: u64,
    /// Off the CPU inside the calls (blocked or waiting for a CPU).
    pub offcpu_ns: u64,
    /// In hard IRQs and softirqs on the CPU inside the calls.
    #[serde(default)]
    pub irq_ns: u64,
    /// Taken by the hypervisor inside the calls (steal clock and timer
    /// silence; see `Durations::timer_silence_ns`).
    #[serde(default)]
    pub steal_ns: u64,
    /// Spinning on contended kernel spinlocks inside the calls (a lock
    /// wait; absent in older files).
    #[serde(default)]
    pub spin_ns: u64,
    /// The calls' own work in the kernel: `total_ns - offcpu_ns - irq_ns -
    /// steal_ns - spin_ns`.
    pub on_cpu_ns: u64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Overhead {
    /// Whether the kernel's BPF run-time statistics were on during the run.
    pub stats_enabled: bool,
    pub programs: Vec<ProgramCost>,
    /// With the syscall hooks: what they cost every syscall on the machine
    /// beyond their programs' run time, measured when they attached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub syscall_path: Option<crate::probes::calibrate::SyscallPathCost>,
    /// What a hook run costs beyond its program's run time (its dispatch),
    /// measured when the socket transfer hooks attached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook_dispatch: Option<crate::probes::calibrate::HookDispatchCost>,
    /// How long the BPF statistics were sampled (`programs` covers those
    /// windows: see `probes::stats_windows`); None: the whole run (runs
    /// written before the statistics were sampled, watch's windows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampled_ns: Option<u64>,
}

/// Machine facts recorded with every result.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Environment {
    pub kernel: String,
    pub cpus: usize,
    pub transparent_hugepage: String,
    /// Cost of one minor page fault on this machine (touching fresh
    /// anonymous pages, measured at record time): a machine fact recorded
    /// with the result; the analysis measures fault time, it does not
    /// multiply counts by this.
    #[serde(default)]
    pub minor_fault_ns: u64,
}

impl Environment {
    pub fn current() -> Self {
        let read = |p: &str| fs::read_to_string(p).unwrap_or_default().trim().to_string();
        Self {
            kernel: read("/proc/sys/kernel/osrelease"),
            cpus: crate::cpu::online_cpu_count().unwrap_or(0),
            transparent_hugepage: read("/sys/kernel/mm/transparent_hugepage/enabled"),
            minor_fault_ns: measure_minor_fault_ns(),
        }
    }
}

/// Median cost of a minor fault: map 1024 fresh pages, time touching them,
/// three rounds. Includes page zeroing, as the target's faults do.
fn measure_minor_fault_ns() -> u64 {
    const PAGES: usize = 1024;
    let mut rounds: Vec<u64> = (0..3)
        .filter_map(|_| {
            let region =
                crate::memory::Region::anonymous(PAGES * crate::memory::page_size()).ok()?;
            let start = crate::clock::monotonic_ns();
            region.touch(true);
            Some((crate::clock::monotonic_ns() - start) / region.pages() as u64)
        })
        .collect();
    rounds.sort_unstable();
    rounds.get(rounds.len() / 2).copied().unwrap_or(0)
}

/// A bucket row: (bucket number, counts in `counter_names` order).
pub type BucketRow = (u64, Counts);

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunFile {
    pub schema: String,
    pub correlator_version: String,
    pub target: Target,
    pub follow_children: bool,
    /// CLOCK_MONOTONIC ns of the first and last instant recorded.
    pub started_ns: u64,
    pub ended_ns: u64,
    pub stop_reason: StopReason,
    pub bucket_ns: u64,
    pub counter_names: Vec<String>,
    /// Rows written with fewer columns (counters added since) read as zeros.
    #[serde(with = "buckets")]
    pub buckets: Vec<BucketRow>,
    #[serde(with = "crate::timeline::columns::offcpu")]
    pub offcpu: Vec<OffCpu>,
    /// Off-CPU intervals shorter than this are only in the bucket sums.
    pub min_offcpu_record_ns: u64,
    pub totals: EventTotals,
    pub durations: Durations,
    pub irq_kinds: BTreeMap<String, u64>,
    pub softirq_vectors: BTreeMap<String, u64>,
    pub losses: Losses,
    pub overhead: Overhead,
    pub environment: Environment,
    pub notes: Vec<String>,
    /// Request latency captured with the run (by `correlator run`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<crate::latency::capture::LatencyCapture>,
    /// Server-side request latency seen by the probes (`--syscalls`,
    /// `--uprobe`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_latency: Option<ServerLatency>,
    /// Hypervisor steal time per CPU (intervals with some steal only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steal: Vec<StealSample>,
    /// Per target thread and bucket: where its time went (slots named by
    /// `account_names`). Off-CPU intervals with a record are not in it.
    #[serde(default)]
    pub account_names: Vec<String>,
    #[serde(default, with = "crate::timeline::columns::accounts")]
    pub thread_accounts: Vec<ThreadAccount>,
    /// Syscalls at least `min_offcpu_record_ns` long.
    #[serde(default)]
    pub syscalls: Vec<SyscallSpan>,
    /// Per syscall name, over the run.
    #[serde(default)]
    pub syscall_totals: BTreeMap<String, SyscallTotals>,
    /// Time one on-CPU sample stands for (0: no samples).
    #[serde(default)]
    pub sample_period_ns: u64,
    /// How syscall time was measured (`exact` in run files from before
    /// `--syscall-time`): with `sampled`, `syscalls` and `syscall_totals`
    /// are empty and syscall time on the CPU comes from the samples.
    /// Runs written before the field existed hooked every syscall.
    #[serde(default = "exact_syscall_time")]
    pub syscall_time: crate::probes::SyscallTime,
    /// On-CPU samples taken of target threads.
    #[serde(default)]
    pub samples: u64,
    /// Target thread names by tid (as of the end of the run).
    #[serde(default)]
    pub thread_names: BTreeMap<u32, String>,
    /// `--stacks`: every on-CPU sample with its context and stacks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stack_samples: Vec<crate::timeline::stacks::Sample>,
    /// `--stacks`: the stacks samples and off-CPU records reference.
    #[serde(default, skip_serializing_if = "StackTable::is_empty")]
    pub stacks: StackTable,
    /// The target's exchanges with its upstreams (connections it opened),
    /// in the order their replies were read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upstreams: Vec<crate::timeline::upstreams::UpstreamExchange>,
    /// Memory stalls of target threads (at least `min_offcpu_record_ns`
    /// long), in the order they ended.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub memory_stalls: Vec<crate::timeline::memory::MemStall>,
    /// The target's memory cgroup, its limits and usage at the end of the
    /// run (None: not found).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_cgroup: Option<crate::timeline::memory::MemoryCgroup>,
    /// Threads that sent cross-CPU calls (IPIs) to a CPU while a target
    /// thread ran there, over the run, most first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ipi_senders: Vec<crate::timeline::ipis::IpiSender>,
    /// Device hard IRQs that took time from target threads (running or
    /// waiting for their CPU), by IRQ number, over the run, most first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub device_irqs: Vec<crate::timeline::irqs::DeviceIrq>,
    /// Pauses of a managed runtime that stopped a whole target process
    /// (Go's stopped worlds), in order of their end.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runtime_pauses: Vec<crate::timeline::pauses::RuntimePause>,
    /// The run's clock (CLOCK_MONOTONIC) against BOOTTIME and wall time,
    /// read at the end of recording (absent in older files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clocks: Option<crate::clock::ClockSnapshot>,
    /// A managed runtime's own gc probes attached for the run (CPython's
    /// USDT): its collections on target threads are measured, in the
    /// `runtime_gc` account slot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_gc: Option<crate::probes::RuntimeGcRun>,
}

/// Name of each account slot in run files, in `correlator_common::Account`
/// order (blocked slots in `WaitSite` order).
pub const ACCOUNT_NAMES: [&str; correlator_common::NUM_ACCOUNT] = [
    "on_cpu",
    "syscall_cpu",
    "migration_cpu",
    "steal",
    "hardirq",
    "softirq",
    "hardirq_wait",
    "softirq_wait",
    "runnable",
    "blocked_idle",
    "blocked_lock",
    "blocked_io",
    "blocked_fault",
    "blocked_sleep",
    "blocked_migration",
    "blocked_other",
    "samples_user",
    "samples_syscall",
    "samples_fault",
    "samples_irq",
    "timer_silence",
    "lock_spin",
    "lock_holder_steal",
    "runtime_gc",
    "runnable_moved",
];

const _: () =
    assert!(correlator_common::Account::RunnableMoved as usize == ACCOUNT_NAMES.len() - 1);

/// Name of each counter slot in run files.
pub fn counter_name(c: Counter) -> &'static str {
    match c {
        Counter::PageFaultsMinor => "page_faults_minor",
        Counter::PageFaultsMajor => "page_faults_major",
        Counter::SwitchesVoluntary => "context_switches_voluntary",
        Counter::SwitchesInvoluntary => "context_switches_involuntary",
        Counter::Migrations => "migrations",
        Counter::HardIrqs => "hardirqs",
        Counter::SoftIrqs => "softirqs",
        Counter::HardIrqNs => "hardirq_ns",
        Counter::SoftIrqNs => "softirq_ns",
        Counter::RunnableNs => "runnable_ns",
        Counter::BlockedNs => "blocked_ns",
        Counter::HardIrqWaitNs => "hardirq_wait_ns",
        Counter::SoftIrqWaitNs => "softirq_wait_ns",
        Counter::SoftIrqHiNs => "softirq_hi_ns",
        Counter::SoftIrqTimerNs => "softirq_timer_ns",
        Counter::SoftIrqNetTxNs => "softirq_net_tx_ns",
        Counter::SoftIrqNetRxNs => "softirq_net_rx_ns",
        Counter::SoftIrqBlockNs => "softirq_block_ns",
        Counter::SoftIrqIrqPollNs => "softirq_irq_poll_ns",
        Counter::SoftIrqTaskletNs => "softirq_tasklet_ns",
        Counter::SoftIrqSchedNs => "softirq_sched_ns",
        Counter::SoftIrqHrtimerNs => "softirq_hrtimer_ns",
        Counter::SoftIrqRcuNs => "softirq_rcu_ns",
        Counter::HardIrqDeviceNs => "hardirq_device_ns",
        Counter::HardIrqLocalTimerNs => "hardirq_local_timer_ns",
        Counter::HardIrqRescheduleNs => "hardirq_reschedule_ns",
        Counter::HardIrqCallFunctionNs => "hardirq_call_function_ns",
        Counter::HardIrqCallFunctionSingleNs => "hardirq_call_function_single_ns",
        Counter::HardIrqIrqWorkNs => "hardirq_irq_work_ns",
    }
}

/// Counters that count events (the others sum durations).
const EVENT_COUNTERS: [Counter; 7] = [
    Counter::PageFaultsMinor,
    Counter::PageFaultsMajor,
    Counter::SwitchesVoluntary,
    Counter::SwitchesInvoluntary,
    Counter::Migrations,
    Counter::HardIrqs,
    Counter::SoftIrqs,
];

/// What a recording produced, before it becomes a run file.
pub struct Capture {
    pub target: Target,
    pub follow_children: bool,
    pub started_ns: u64,
    pub ended_ns: u64,
    pub stop_reason: StopReason,
    pub min_offcpu_record_ns: u64,
    pub timeline: Timeline,
    pub kernel: KernelTotals,
    pub overhead: Overhead,
    pub notes: Vec<String>,
    pub server_latency: Option<ServerLatency>,
    pub steal: Vec<StealSample>,
    pub sample_period_ns: u64,
    pub syscall_time: crate::probes::SyscallTime,
    pub thread_names: BTreeMap<u32, String>,
    /// A managed runtime's gc probes attached for the run.
    pub runtime_gc: Option<crate::probes::RuntimeGcRun>,
    /// Symbolized stacks (empty without `--stacks`).
    pub stacks: StackTable,
    /// The memory pressure totals at attach (None: no PSI, or not read).
    pub memory_pressure_from: Option<crate::timeline::memory::PsiReading>,
}

impl RunFile {
    /// Builds the run file; totals are the kernel's (never reset) totals,
    /// and any shortfall of the drained buckets against them is a loss.
    pub fn from_capture(c: Capture) -> Self {
        let mut memory_cgroup = crate::timeline::memory::MemoryCgroup::of(c.target.pid);
        if let Some(cg) = &mut memory_cgroup {
            cg.pressure = c
                .memory_pressure_from
                .as_ref()
                .and_then(|r| r.since(crate::clock::monotonic_ns()));
        }
        let drained = c.timeline.sum();
        let k = &c.kernel.counters;
        let undrained: u64 = EVENT_COUNTERS
            .iter()
            .map(|&ctr| k[ctr as usize].saturating_sub(drained[ctr as usize]))
            .sum();
        let losses = Losses {
            ring_reserve_failed: c.kernel.ring_reserve_failed,
            thread_map_full: c.kernel.thread_map_full,
            records_over_cap: c.timeline.records_over_cap(),
            bucket_events_undrained: undrained,
            accounts_lost: c.kernel.accounts_lost,
            syscall_records_lost: c.kernel.syscall_records_lost,
            upstreams_lost: c.kernel.upstreams_lost,
            mem_stalls_lost: c.kernel.mem_stalls_lost,
            runtime_pauses_lost: c.kernel.runtime_pauses_lost,
            ipi_senders_lost: c.kernel.ipi_senders_lost,
            sample_records_lost: c.kernel.sample_records_lost,
            stack_collisions: c.kernel.stack_collisions,
            stacks_missing: c.stacks.missing,
            stack_errors: c.kernel.stack_errors,
            untraced_switches: c.kernel.untraced_switches,
            unseen_switch_ins_dated: c.kernel.unseen_switch_ins_dated,
        };
        let syscall_totals = c
            .kernel
            .syscalls
            .iter()
            .map(|(nr, t)| {
                (
                    crate::timeline::syscalls::name(*nr),
                    SyscallTotals {
                        calls: t.calls,
                        total_ns: t.total_ns,
                        offcpu_ns: t.offcpu_ns,
                        irq_ns: t.irq_ns,
                        steal_ns: t.steal_ns,
                        spin_ns: t.spin_ns,
                        on_cpu_ns: t
                            .total_ns
                            .saturating_sub(t.offcpu_ns + t.irq_ns + t.steal_ns + t.spin_ns),
                    },
                )
            })
            .collect();
        let totals = EventTotals {
            lost: losses.total(),
            ..EventTotals::from_counters(k)
        };
        let durations = Durations {
            timer_silences: c.kernel.timer_silences,
            timer_silence_ns: c.kernel.timer_silence_ns,
            ..Durations::from_counters(k)
        };
        let named = |v: Vec<(&str, u64)>| v.into_iter().map(|(n, c)| (n.to_string(), c)).collect();
        let mut notes = c.notes;
        if totals.lost > 0 {
            notes.push(format!(
                "{} kernel events or records were lost (see losses); counts are incomplete",
                totals.lost
            ));
        }
        Self {
            schema: SCHEMA.to_string(),
            correlator_version: env!("CARGO_PKG_VERSION").to_string(),
            irq_kinds: named(c.kernel.irq_kinds_named()),
            softirq_vectors: named(c.kernel.softirqs_named()),
            target: c.target,
            follow_children: c.follow_children,
            started_ns: c.started_ns,
            ended_ns: c.ended_ns,
            stop_reason: c.stop_reason,
            bucket_ns: c.timeline.bucket_ns(),
            counter_names: Counter::ALL
                .iter()
                .map(|&c| counter_name(c).to_string())
                .collect(),
            buckets: c.timeline.buckets().map(|(e, c)| (e, *c)).collect(),
            offcpu: c.timeline.offcpu().to_vec(),
            min_offcpu_record_ns: c.min_offcpu_record_ns,
            totals,
            durations,
            losses,
            overhead: c.overhead,
            environment: Environment::current(),
            notes,
            latency: None,
            server_latency: c.server_latency,
            steal: c.steal,
            account_names: ACCOUNT_NAMES.map(String::from).to_vec(),
            thread_accounts: c.timeline.accounts().to_vec(),
            syscalls: c.timeline.syscalls().to_vec(),
            syscall_totals,
            sample_period_ns: c.sample_period_ns,
            syscall_time: c.syscall_time,
            samples: c.kernel.samples,
            thread_names: c.thread_names,
            stack_samples: c.timeline.samples().to_vec(),
            stacks: c.stacks,
            upstreams: c.timeline.upstreams().to_vec(),
            memory_stalls: c.timeline.mem_stalls().to_vec(),
            memory_cgroup,
            ipi_senders: c.timeline.ipi_senders().to_vec(),
            device_irqs: c.timeline.device_irqs().to_vec(),
            runtime_pauses: c.timeline.runtime_pauses().to_vec(),
            clocks: Some(crate::clock::ClockSnapshot::now()),
            runtime_gc: c.runtime_gc,
        }
    }

    pub fn duration_ns(&self) -> u64 {
        self.ended_ns.saturating_sub(self.started_ns)
    }

    /// The latency a report analyses: the client-side capture when the run
    /// has one (from the intended send time), else the server-side one of
    /// a passive recording (`record --syscalls`, `watch`).
    pub fn analysed_latency(&self) -> Option<&crate::latency::capture::LatencyCapture> {
        self.latency
            .as_ref()
            .or(self.server_latency.as_ref().map(|s| &s.latency))
    }

    /// Writes the run: compact, or JSON (the export) when `path` ends in
    /// `.json`. Through a temporary file, so a reader never sees half of
    /// it, and a journal at `path` is replaced only by the whole run.
    pub fn save(&self, path: &Path) -> Result<()> {
        let tmp = path.with_extension("tmp");
        let file = fs::File::create(&tmp)
            .with_context(|| format!("cannot create run file {}", tmp.display()))?;
        let mut w = BufWriter::new(file);
        if is_json_export(path) {
            serde_json::to_writer(&mut w, self).map_err(anyhow::Error::from)
        } else {
            compact::write_complete(&mut w, self)
        }
        .with_context(|| format!("cannot write run file {}", tmp.display()))?;
        fs::rename(&tmp, path)
            .with_context(|| format!("cannot move run file into place at {}", path.display()))
    }

    /// Reads a run file. Parsed straight from the file (no copy of the
    /// text, no intermediate JSON tree): run files of long fast runs are
    /// 100+ MB and a second copy of them was the report's peak memory.
    pub fn load(path: &Path) -> Result<Self> {
        let mut head = [0u8; compact::MAGIC.len()];
        let is_compact = fs::File::open(path)
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head))
            .is_ok()
            && head == *compact::MAGIC;
        if is_compact {
            return Self::load_compact(path);
        }
        let open = || {
            fs::File::open(path)
                .map(std::io::BufReader::new)
                .with_context(|| format!("cannot read run file {}", path.display()))
        };
        match serde_json::from_reader::<_, Self>(open()?) {
            Ok(run) if run.schema == SCHEMA => Ok(run),
            Ok(run) => bail!(
                "{} has schema {}; this correlator reads {SCHEMA}",
                path.display(),
                run.schema
            ),
            Err(parse) => {
                // Read the schema alone (a small struct: serde skips the
                // rest) so a wrong file gets a precise message.
                #[derive(Deserialize)]
                struct Probe {
                    schema: Option<String>,
                }
                let probe: Probe = serde_json::from_reader(open()?).with_context(|| {
                    format!("{} is not a correlator run file (not JSON)", path.display())
                })?;
                match probe.schema.as_deref() {
                    Some(SCHEMA) => Err(anyhow::Error::new(parse).context(format!(
                        "{} is a malformed {SCHEMA} run file",
                        path.display()
                    ))),
                    Some(other) => bail!(
                        "{} has schema {other}; this correlator reads {SCHEMA}",
                        path.display()
                    ),
                    None => bail!(
                        "{} is not a correlator run file (no \"schema\" field)",
                        path.display()
                    ),
                }
            }
        }
    }

    /// Reads a compact run file: its complete frame, or the run its
    /// journal holds when the recorder did not finish it.
    fn load_compact(path: &Path) -> Result<Self> {
        let bytes =
            fs::read(path).with_context(|| format!("cannot read run file {}", path.display()))?;
        let compact::Frames { frames, torn_bytes } = compact::read(&bytes)
            .with_context(|| format!("{} is a malformed {SCHEMA} run file", path.display()))?;
        let mut start = None;
        let mut deltas = Vec::new();
        for frame in frames {
            match frame {
                compact::Frame::Complete(run) => return Self::checked(*run, path),
                compact::Frame::Start(s) => start = Some(*s),
                compact::Frame::Delta(d) => deltas.push(*d),
            }
        }
        let start = start.with_context(|| {
            format!(
                "{} holds no whole frame: its recorder stopped before writing one",
                path.display()
            )
        })?;
        Self::checked(journal::recover(start, deltas, torn_bytes), path)
    }

    fn checked(run: Self, path: &Path) -> Result<Self> {
        if run.schema != SCHEMA {
            bail!(
                "{} has schema {}; this correlator reads {SCHEMA}",
                path.display(),
                run.schema
            );
        }
        Ok(run)
    }
}

/// A run-file path that asks for the JSON export rather than the compact
/// file.
pub fn is_json_export(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"))
}

const _: () = assert!(NUM_COUNTERS == Counter::ALL.len());

/// Reads bucket rows of up to `NUM_COUNTERS` columns: counters are only
/// ever appended, so a shorter row is a file from before the newer ones
/// and its missing columns are zeros. Hand-written because serde's array
/// support wants exactly N elements.
fn rows_padded<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<BucketRow>, D::Error> {
    struct Row(BucketRow);
    impl<'de> Deserialize<'de> for Row {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let (n, counts): (u64, Vec<u64>) = Deserialize::deserialize(d)?;
            if counts.len() > NUM_COUNTERS {
                return Err(serde::de::Error::custom(format!(
                    "bucket row with {} columns; this correlator knows {NUM_COUNTERS}",
                    counts.len()
                )));
            }
            let mut row = [0; NUM_COUNTERS];
            row[..counts.len()].copy_from_slice(&counts);
            Ok(Row((n, row)))
        }
    }
    let rows: Vec<Row> = Deserialize::deserialize(d)?;
    Ok(rows.into_iter().map(|r| r.0).collect())
}

#[cfg(test)]
mod tests;

/// How runs written before `syscall_time` was stored measured syscalls.
fn exact_syscall_time() -> crate::probes::SyscallTime {
    crate::probes::SyscallTime::Exact
}
