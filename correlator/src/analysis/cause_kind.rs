//! What delayed the requests: the kinds of cause, the categories of the
//! measured account they are tested in, the experiment that would confirm
//! each, and the IRQ source that names an IRQ cause. One floor below
//! `causes`, `families` and `paths`, which all name causes, so that none
//! of them imports another to do it.

use serde::{Deserialize, Serialize};

use super::{Episode, account::TimeAccount, signature::Signature};

/// What delayed the requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CauseKind {
    /// On-CPU fault handling (minor faults).
    PageFaults,
    /// Blocked in a fault, waiting for the page's I/O.
    MajorFaults,
    /// Moving between CPUs.
    Migrations,
    /// Waiting for a CPU another task held.
    Preemption,
    /// Blocked on a lock, I/O, a sleep or another wait (named).
    Blocking,
    /// Stopped by a managed runtime's pause: blocked until the runtime's
    /// collector thread (the JVM's VM Thread) woke it (see `runtimes`).
    GarbageCollection,
    Hardirq,
    Softirq,
    /// On-CPU kernel time in one syscall (named).
    Syscall,
    /// Stalled in memory management: direct reclaim, reclaim in the memory
    /// cgroup at its limit, compaction, memory.high handling, mmap_lock
    /// waits (named by the kind, with the cgroup's limits).
    MemoryStall,
    /// Waiting for input while a request to an upstream (a connection the
    /// server opened: backend, database, cache) was in flight: the
    /// upstream's reply was late (named by its address).
    Upstream,
    /// Running its own code.
    OnCpu,
    /// Busy serving under load that grows the spikes.
    Queueing,
    /// The hypervisor took the CPU (environment).
    Steal,
    /// Runnable while its CPU ran only the idle task: the CPU was slow to
    /// start running it (the host scheduling an idle vCPU back, a deep
    /// C-state's exit). Nobody to stop or pin away from (environment).
    CpuWakeup,
    /// The server waited for work: the delay happened before the requests
    /// reached it (environment).
    Idle,
}

impl CauseKind {
    /// Whether this is something the server did or suffered, as opposed to
    /// the environment it ran in.
    pub fn is_server(self) -> bool {
        !ENVIRONMENT_CAUSES.contains(&self)
    }

    pub fn name(self) -> &'static str {
        match self {
            CauseKind::PageFaults => "page_faults",
            CauseKind::MajorFaults => "major_faults",
            CauseKind::Migrations => "migrations",
            CauseKind::Preemption => "preemption",
            CauseKind::Blocking => "blocking",
            CauseKind::GarbageCollection => "garbage_collection",
            CauseKind::Hardirq => "hardirq",
            CauseKind::Softirq => "softirq",
            CauseKind::Syscall => "syscall",
            CauseKind::Upstream => "upstream",
            CauseKind::MemoryStall => "memory_stall",
            CauseKind::OnCpu => "on_cpu",
            CauseKind::Queueing => "queueing",
            CauseKind::Steal => "steal",
            CauseKind::Idle => "idle",
            CauseKind::CpuWakeup => "cpu_wakeup",
        }
    }

    /// The category this cause is measured and grouped in (queueing is
    /// on-CPU time under a load-correlated signature).
    pub(crate) fn tested_as(self) -> CauseKind {
        match self {
            CauseKind::Queueing => CauseKind::OnCpu,
            c => c,
        }
    }

    /// The name a category takes under a signature: busy serving while
    /// the spikes grow with the rate is queueing.
    pub(crate) fn under(self, signature: Signature) -> CauseKind {
        match (self, signature) {
            (CauseKind::OnCpu, Signature::LoadCorrelated) => CauseKind::Queueing,
            (c, _) => c,
        }
    }

    /// IRQ time: booked to the thread only while it ran or waited for its
    /// CPU, so tested as a share of that time (see `shares`).
    pub(crate) fn booked_only_on_or_waiting_for_cpu(self) -> bool {
        matches!(self, CauseKind::Hardirq | CauseKind::Softirq)
    }

    /// Measured time of this cause in one account.
    pub(crate) fn time(self, a: &TimeAccount) -> u64 {
        match self {
            CauseKind::PageFaults => a.fault_ns.saturating_sub(a.fault_major_ns),
            CauseKind::MajorFaults => a.blocked_fault_ns + a.fault_major_ns,
            CauseKind::Migrations => a.migration_ns,
            // Waiting while the idle task had the CPU is not a neighbour's.
            CauseKind::Preemption => a.runnable_ns.saturating_sub(a.runnable_idle_ns),
            CauseKind::Blocking => {
                a.lock_spin_ns
                    + a.blocked_lock_ns
                    + a.blocked_io_ns
                    + a.blocked_sleep_ns
                    + a.blocked_other_ns
            }
            CauseKind::GarbageCollection => a.runtime_pause_ns,
            CauseKind::Hardirq => a.hardirq_ns,
            CauseKind::Softirq => a.softirq_ns,
            CauseKind::Syscall => a.syscall_ns,
            CauseKind::OnCpu | CauseKind::Queueing => a.on_cpu_user_ns,
            CauseKind::Steal => a.steal_ns,
            CauseKind::Upstream => a.upstream_ns,
            CauseKind::MemoryStall => a.memory_stall_ns,
            CauseKind::Idle => a.idle_ns,
            CauseKind::CpuWakeup => a.runnable_idle_ns,
        }
    }

    /// The isolate-and-remeasure experiment that would confirm it.
    pub(super) fn experiment(self, detail: Option<&str>) -> String {
        match self {
            CauseKind::PageFaults => "pre-fault or reuse the memory (MAP_POPULATE, a pool), or change THP (knob thp=never|always), and re-measure the tail".into(),
            CauseKind::MajorFaults => "keep the file resident (mlock / vmtouch, more page cache) and re-measure the tail".into(),
            CauseKind::Migrations => "pin the serving threads to fixed CPUs (knob pin=CPULIST) and re-measure the tail".into(),
            CauseKind::Preemption => match detail {
                Some(who) => format!("pin the server away from {who} (knob pin=CPULIST) or stop it (knob stop=PID), and re-measure"),
                None => "pin the server to less busy CPUs (knob pin=CPULIST) and re-measure".into(),
            },
            CauseKind::Blocking => format!(
                "find what the thread waits on{} (lock holder, I/O) and shorten or remove it; re-measure",
                detail.map_or(String::new(), |d| format!(" in {d}"))
            ),
            CauseKind::GarbageCollection if detail.is_some_and(|d| d.starts_with("CPython")) => "shorten or spread the collections: gc.freeze() after start-up (long-lived objects leave the collector's scans), a higher gc.set_threshold, fewer reference cycles per request; re-measure (gc.callbacks time each collection)".into(),
            CauseKind::GarbageCollection if detail.is_some_and(|d| d.starts_with("Go:")) => "find what kept the world from stopping or restarting quickly: a goroutine in a loop without calls (asynchronous preemption off, GODEBUG=asyncpreemptoff=1) or in a long copy or assembly routine delays every stop; then fewer collections (a higher GOGC or GOMEMLIMIT, less allocation per request); re-measure (GODEBUG=gctrace=1 prints each collection's stop-the-world wall time)".into(),
            CauseKind::GarbageCollection => "shorten or spread the pauses: a larger young generation or heap, a concurrent collector (G1, ZGC), less allocation per request; re-measure (the JVM's own -Xlog:gc shows each pause)".into(),
            CauseKind::Hardirq => "move IRQ affinity away from the server's CPUs (knob irq-affinity=IRQ:CPULIST) and re-measure".into(),
            CauseKind::Softirq => "steer softirq work (RPS / IRQ affinity, knob rps=DEV:CPULIST) away from the server's CPUs, or pin the server elsewhere; re-measure".into(),
            CauseKind::Syscall => format!(
                "make the server call {} less often or off the request path, and re-measure",
                detail.unwrap_or("that syscall")
            ),
            CauseKind::MemoryStall => "give the server the memory it touches (raise its cgroup's memory.high / memory.max for a run, or cut what it maps and reads: page cache of files, its heap); for compaction, THP defrag off (knob thp=never); for mmap_lock, move the thread that maps and unmaps off the request path; re-measure".into(),
            CauseKind::Upstream => format!(
                "look at the upstream{}: its own latency at those times (its load, its stalls); bound the wait (timeouts, hedged requests, more connections); re-measure",
                detail.map_or(String::new(), |d| format!(" {d}"))
            ),
            CauseKind::OnCpu => "profile the server's threads during episodes (perf record -t TID) and re-measure after changing what runs there".into(),
            CauseKind::Queueing => "re-measure at a lower rate or with more capacity (workers, cores); the tail should shrink if it is queueing".into(),
            CauseKind::Steal => "not the server's doing: move to dedicated vCPUs or a less contended host, and re-measure".into(),
            CauseKind::CpuWakeup => "not the server's doing: on a VM, dedicated vCPUs or a less contended host; on bare metal, keep the server's CPUs out of deep C-states (e.g. a cpu_dma_latency / PM QoS request); re-measure".into(),
            CauseKind::Idle => "look before the server: the client or load generator (late sends), the network, the host; measure server-side latency (--syscalls) beside client-side".into(),
        }
    }
}

impl std::fmt::Display for CauseKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Categories tested against the baseline (`Queueing` is `OnCpu` under a
/// load-correlated signature, decided by the sweep, not by this test).
pub(crate) const SERVER_CAUSES: [CauseKind; 12] = [
    CauseKind::PageFaults,
    CauseKind::MajorFaults,
    CauseKind::Migrations,
    CauseKind::Preemption,
    CauseKind::Blocking,
    CauseKind::GarbageCollection,
    CauseKind::Hardirq,
    CauseKind::Softirq,
    CauseKind::Syscall,
    CauseKind::MemoryStall,
    CauseKind::Upstream,
    CauseKind::OnCpu,
];

/// The environment's categories: measured and listed with their share,
/// never claims about the server.
pub(crate) const ENVIRONMENT_CAUSES: [CauseKind; 3] =
    [CauseKind::Idle, CauseKind::Steal, CauseKind::CpuWakeup];

/// What the kernel counted of `family` in an episode (0 when absent).
pub(super) fn observed(e: &Episode, family: &str) -> f64 {
    e.excess.get(family).map_or(0.0, |x| x.observed)
}

/// How [`super::IRQ_SOURCES`] names device IRQs as a source (a report
/// then names the device by number from the run's table).
pub(crate) const DEVICE_IRQS: &str = "device IRQs";

/// The source that took most of a hard-IRQ or softirq cause's time in
/// the episodes, by the kernel side's time per source (softirq vector,
/// hard-IRQ kind), and its share of that IRQ time. None in runs recorded
/// before the time was kept by source.
pub(super) fn irq_source<'e>(
    episodes: impl Iterator<Item = &'e Episode> + Clone,
    kind: CauseKind,
) -> Option<(&'static str, f64)> {
    let softirq = kind == CauseKind::Softirq;
    let mut by: Vec<(&'static str, f64)> = super::IRQ_SOURCES
        .iter()
        .filter(|(name, _, _)| name.starts_with("softirq") == softirq)
        .map(|&(name, _, label)| (label, episodes.clone().map(|e| observed(e, name)).sum()))
        .collect();
    let total: f64 = by.iter().map(|b| b.1).sum();
    by.sort_by(|a, b| b.1.total_cmp(&a.1));
    by.first()
        .filter(|b| b.1 > 0.0)
        .map(|&(label, t)| (label, t / total))
}
