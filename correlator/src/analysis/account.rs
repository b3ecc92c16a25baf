//! Where a target thread's time went in a window, built only from
//! measurements:
//!
//! - off the CPU: the off-CPU records (blocked, by wait site, then
//!   runnable), exact, plus the short intervals summed per bucket by the
//!   kernel side (also by wait site);
//! - on the CPU: time from switch-in to switch-out (booked at every
//!   sample), syscall time in the kernel (enter to exit minus the time off
//!   the CPU inside), IRQ time while the thread ran, and hypervisor steal
//!   from its run queue, all exact; what remains is user code or kernel
//!   work outside syscalls (fault handling), split between the two by the
//!   on-CPU samples, with the sampling error stated.
//!
//! Bucket rows (one per thread per bucket) count into a window in
//! proportion to their overlap with it, the one approximation: it is at
//! most a bucket's worth at each edge.

use std::collections::{BTreeMap, HashMap, HashSet};

use correlator_common::{Account, NUM_ACCOUNT};
use serde::{Deserialize, Serialize};

use super::kernel::{OffKind, Threads};
use crate::probes::SyscallTime;
use crate::runfile::RunFile;
use crate::timeline::{
    SyscallSpan, ThreadAccount, WakeContext,
    memory::{MemStall, StallKind},
    pauses::RuntimePause,
    syscalls::{self, Site},
    upstreams::UpstreamExchange,
};

/// Where one thread's time went in an episode (or any window).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TimeAccount {
    pub duration_ns: u64,
    /// The thread accounted for ("name (tid N)"): the serving thread that
    /// was busiest or most delayed in the window. With several delayed
    /// threads, the busiest of them; the times below are then their mean.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tid: Option<u32>,
    /// How many serving threads the account is the mean of: those delayed
    /// in the window (see [`Accounts::window`]); absent when one.
    #[serde(default, skip_serializing_if = "is_one_or_less")]
    pub threads_delayed: u32,
    /// Each delayed thread's own account, when there are several: who had
    /// which part of the time (a cause's evidence names the thread with
    /// most of it). Not written: the mean above is the account.
    #[serde(skip)]
    pub delayed: Vec<TimeAccount>,
    /// Running user code.
    pub on_cpu_user_ns: u64,
    /// In the kernel on behalf of the thread: syscalls plus fault handling.
    pub on_cpu_kernel_ns: u64,
    /// The syscall part of `on_cpu_kernel_ns`, and the syscall with the
    /// most of it.
    pub syscall_ns: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_syscall: Option<String>,
    #[serde(default)]
    pub top_syscall_ns: u64,
    /// The part of `syscall_ns` estimated from the on-CPU samples (the
    /// default `--syscall-time sampled`: the on-CPU time outside IRQs and
    /// the measured parts, split by the share of samples taken in a
    /// syscall), and that estimate's binomial standard error; 0 when the
    /// syscall hooks timed every call.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub syscall_sampled_ns: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub syscall_error_ns: u64,
    /// The fault-handling part of `on_cpu_kernel_ns` (sampled: on-CPU time
    /// outside syscalls and IRQs, split by the share of samples taken in
    /// the kernel), and that estimate's standard error.
    pub fault_ns: u64,
    pub fault_error_ns: u64,
    /// The part of `fault_ns` that was major faults' own work: all of it
    /// in a window where the kernel counted at least as many major faults
    /// as minor ones, else none (a file read back page by page took
    /// 21,504 major faults and no minor one, 70 ms of each 130 ms stall
    /// on the CPU in them: that is the major faults' time, not minor).
    #[serde(default)]
    pub fault_major_ns: u64,
    /// Moving between CPUs: in migrating syscalls (sched_setaffinity), on
    /// the CPU and waiting for the migration and the new CPU.
    pub migration_ns: u64,
    /// Waiting for a CPU (minus IRQ time on that CPU, which is IRQ time).
    pub runnable_ns: u64,
    /// Who ran instead, most of that time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempted_by: Option<String>,
    /// The part of `runnable_ns` in which the CPU went to its idle task
    /// (pid 0): no neighbour took the CPU; the thread waited on the
    /// machine (waking the CPU, the hypervisor scheduling the vCPU, the
    /// balancer moving it), which is the environment's, not a cause to
    /// stop or pin away from.
    #[serde(default)]
    pub runnable_idle_ns: u64,
    /// Blocked, by wait site (idle is apart: see `idle_ns`).
    pub blocked_lock_ns: u64,
    pub blocked_io_ns: u64,
    /// A major fault waiting for its page: an uninterruptible sleep
    /// outside a syscall in a window where the kernel counted a major fault.
    pub blocked_fault_ns: u64,
    /// The same sleep in a window with no major fault counted: a kernel
    /// wait the probes do not name yet (memory.high throttling, mmap_lock,
    /// page migration, reclaim throttling). Not measured time of any
    /// cause: part of `unexplained_ns`.
    #[serde(default)]
    pub unnamed_kernel_sleep_ns: u64,
    pub blocked_sleep_ns: u64,
    pub blocked_other_ns: u64,
    /// On the CPU spinning on a contended kernel spinlock (exact, from the
    /// kernel's lock contention tracepoints), less the part the holder's
    /// vCPU lost to the host (`lock_holder_steal_ns`): a lock wait.
    #[serde(default)]
    pub lock_spin_ns: u64,
    /// The syscall the thread blocked in most (e.g. "futex").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_site: Option<String>,
    /// Blocked until a managed runtime's collector thread woke it (the
    /// JVM's VM Thread ending a safepoint, see `runtimes`): the runtime's
    /// pause, apart from the blocked sites above; and which thread.
    #[serde(default)]
    pub runtime_pause_ns: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collector: Option<String>,
    /// Who woke the thread from those waits (the lock's releaser, the
    /// condvar's signaller, the I/O's completion), most of the blocked
    /// time, and how much of it that waker ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub woken_by: Option<String>,
    #[serde(default)]
    pub woken_by_ns: u64,
    /// What that waker did most while the thread waited for it, when it
    /// is a thread the probes follow (e.g. "blocked in clock_nanosleep":
    /// the holder slept), and for how long within the thread's waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waker_meanwhile: Option<String>,
    #[serde(default)]
    pub waker_meanwhile_ns: u64,
    /// `--stacks`: where that waker woke the thread, most of that time
    /// (the release site: its user frames when it is a target thread, else
    /// its kernel frames past the wake-up machinery), leaf first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub released_at: Option<String>,
    /// Stalled in memory management (direct reclaim, reclaim in the memory
    /// cgroup, compaction, memory.high handling, mmap_lock waits,
    /// swap-ins), on or off the CPU, from the kernel's own events: taken
    /// out of the categories that time would otherwise be in. The kind
    /// with most of it, and the time of each kind, most first.
    #[serde(default)]
    pub memory_stall_ns: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_stall: Option<StallKind>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub memory_stall_kinds: Vec<(StallKind, u64)>,
    /// Waiting for work or input (epoll, accept, a socket read) while an
    /// exchange with an upstream was in flight (sent, its reply not yet
    /// there): waiting for the upstream, not idle. The upstream most of
    /// that time (`address:port`), and the longest reply in flight in the
    /// window.
    #[serde(default)]
    pub upstream_ns: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<String>,
    #[serde(default)]
    pub upstream_reply_ns: u64,
    /// Waiting for work (epoll, accept, a socket read) with nothing in
    /// flight upstream: not a delay the server caused.
    pub idle_ns: u64,
    pub hardirq_ns: u64,
    pub softirq_ns: u64,
    /// The environment's time while the thread was on the CPU: steal the
    /// run queue's steal clock reported, and `timer_silence_ns`.
    pub steal_ns: u64,
    /// The part of `steal_ns` in which the thread's sampling timer was
    /// silent (between samples, and inside long syscalls): the vCPU held
    /// by the host without steal reported, or the guest's timer delivered
    /// late while it ran; a guest cannot tell which.
    #[serde(default)]
    pub timer_silence_ns: u64,
    /// The part of `steal_ns` in which the thread spun on a kernel
    /// spinlock while another CPU's steal clock moved: the lock's holder
    /// held off its vCPU by the host (lock-holder preemption). The most
    /// any one other CPU lost during each spin stands for the holder's
    /// (a guest cannot see which CPU holds a spinlock): exact on two
    /// CPUs, an upper bound on more.
    #[serde(default)]
    pub lock_holder_steal_ns: u64,
    /// Window time the measurements above do not cover.
    pub unexplained_ns: u64,
    /// Measured share of the window (everything but `unexplained_ns`).
    pub explained_share: f64,
}

impl TimeAccount {
    /// Waiting off the CPU (wait sites other than idle) and spinning on
    /// kernel locks on it: the lock, I/O, sleep and other waits.
    pub fn blocked_ns(&self) -> u64 {
        self.runtime_pause_ns
            + self.lock_spin_ns
            + self.blocked_lock_ns
            + self.blocked_io_ns
            + self.blocked_fault_ns
            + self.blocked_sleep_ns
            + self.blocked_other_ns
    }

    /// Everything measured.
    pub fn measured_ns(&self) -> u64 {
        self.on_cpu_user_ns
            + self.on_cpu_kernel_ns
            + self.migration_ns
            + self.runnable_ns
            + self.blocked_ns()
            + self.memory_stall_ns
            + self.upstream_ns
            + self.idle_ns
            + self.hardirq_ns
            + self.softirq_ns
            + self.steal_ns
    }

    /// Time the thread ran or waited for its CPU: the only time an IRQ on
    /// that CPU is booked to it (an IRQ while it slept delayed nobody).
    pub fn on_or_waiting_for_cpu_ns(&self) -> u64 {
        self.on_cpu_user_ns
            + self.on_cpu_kernel_ns
            + self.migration_ns
            + self.runnable_ns
            + self.lock_spin_ns
            + self.hardirq_ns
            + self.softirq_ns
            + self.steal_ns
    }

    /// The window time the measurements do not cover, and the measured
    /// share, from what is measured. Bucket rows reach a little past the
    /// window's edges: never more than the window is explained.
    fn settle_unexplained(&mut self) {
        let (measured, d) = (self.measured_ns(), self.duration_ns.max(1));
        self.unexplained_ns = d.saturating_sub(measured);
        self.explained_share = measured.min(d) as f64 / d as f64;
    }

    /// Time the server itself spent delayed or busy (all but idle).
    fn busy_ns(&self) -> u64 {
        self.measured_ns().saturating_sub(self.idle_ns)
    }
}

/// A serving thread is delayed in a window when it was busy (anything but
/// idle) for at least this share of the busiest serving thread's busy
/// time. Following only the busiest one, a pool's waiters and the worker
/// holding the connection they wait for (each busy the whole episode)
/// were a tie that decided which of the two waits an episode was: the
/// pool wait test failed 7 of 11 runs on it.
const DELAYED_SHARE: f64 = 0.5;

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_one_or_less(n: &u32) -> bool {
    *n <= 1
}

impl TimeAccount {
    /// The account of a window over its delayed threads (see
    /// [`DELAYED_SHARE`]), from each serving thread's own account.
    ///
    /// Each time is the mean over the delayed threads, so shares are of
    /// the delayed threads' time: eight workers of which two wait for a
    /// stalled backend and six for the connections those two hold are 25%
    /// upstream and 75% pool wait, where the slow requests' time went. A
    /// name (who preempted, the wait site, the waker, the upstream) is the
    /// one with most of its time summed over them; the thread named is the
    /// busiest. One delayed thread: its own account, unchanged.
    fn mean_of_delayed(mut accounts: Vec<TimeAccount>) -> Option<TimeAccount> {
        let top = accounts.iter().map(TimeAccount::busy_ns).max()?;
        accounts.retain(|a| a.busy_ns() as f64 >= DELAYED_SHARE * top as f64);
        // The busiest, the most measured of equals, and the last of those
        // (as the single-thread account always chose).
        let busiest = accounts
            .iter()
            .enumerate()
            .max_by_key(|(_, a)| (a.busy_ns(), a.measured_ns()))
            .map(|(i, _)| i)?;
        if accounts.len() == 1 {
            return accounts.pop();
        }
        let n = accounts.len() as u64;
        let mean = |f: fn(&TimeAccount) -> u64| accounts.iter().map(f).sum::<u64>() / n;
        // The standard error of a mean of independent estimates.
        let mean_error = |f: fn(&TimeAccount) -> u64| {
            (accounts
                .iter()
                .map(|a| (f(a) as f64).powi(2))
                .sum::<f64>()
                .sqrt()
                / n as f64) as u64
        };
        let named = |name: fn(&TimeAccount) -> Option<&String>, ns: fn(&TimeAccount) -> u64| {
            most_time(accounts.iter(), name, ns).map(|(who, t)| (who, t / n))
        };
        let (woken_by, woken_by_ns) = named(|a| a.woken_by.as_ref(), |a| a.woken_by_ns).unzip();
        let (waker_meanwhile, waker_meanwhile_ns) = most_time(
            accounts
                .iter()
                .filter(|a| a.woken_by.is_some() && a.woken_by == woken_by),
            |a| a.waker_meanwhile.as_ref(),
            |a| a.waker_meanwhile_ns,
        )
        .map(|(what, t)| (what, t / n))
        .unzip();
        let released_at = most_time(
            accounts
                .iter()
                .filter(|a| a.woken_by.is_some() && a.woken_by == woken_by),
            |a| a.released_at.as_ref(),
            |a| a.woken_by_ns,
        )
        .map(|(site, _)| site);
        let (top_syscall, top_syscall_ns) =
            named(|a| a.top_syscall.as_ref(), |a| a.top_syscall_ns).unzip();
        let mut kinds: BTreeMap<StallKind, u64> = BTreeMap::new();
        for a in &accounts {
            for &(k, t) in &a.memory_stall_kinds {
                *kinds.entry(k).or_default() += t;
            }
        }
        let mut kinds: Vec<(StallKind, u64)> = kinds.into_iter().map(|(k, t)| (k, t / n)).collect();
        kinds.sort_by_key(|&(k, t)| (std::cmp::Reverse(t), k));
        let first = &accounts[busiest];
        let mut account = TimeAccount {
            duration_ns: first.duration_ns,
            thread: first.thread.clone(),
            tid: first.tid,
            threads_delayed: u32::try_from(n).unwrap_or(u32::MAX),
            on_cpu_user_ns: mean(|a| a.on_cpu_user_ns),
            on_cpu_kernel_ns: mean(|a| a.on_cpu_kernel_ns),
            syscall_ns: mean(|a| a.syscall_ns),
            top_syscall,
            top_syscall_ns: top_syscall_ns.unwrap_or(0),
            fault_ns: mean(|a| a.fault_ns),
            fault_error_ns: mean_error(|a| a.fault_error_ns),
            syscall_sampled_ns: mean(|a| a.syscall_sampled_ns),
            syscall_error_ns: mean_error(|a| a.syscall_error_ns),
            fault_major_ns: mean(|a| a.fault_major_ns),
            migration_ns: mean(|a| a.migration_ns),
            runnable_ns: mean(|a| a.runnable_ns),
            preempted_by: named(|a| a.preempted_by.as_ref(), |a| a.runnable_ns).map(|(w, _)| w),
            runnable_idle_ns: mean(|a| a.runnable_idle_ns),
            blocked_lock_ns: mean(|a| a.blocked_lock_ns),
            blocked_io_ns: mean(|a| a.blocked_io_ns),
            blocked_fault_ns: mean(|a| a.blocked_fault_ns),
            unnamed_kernel_sleep_ns: mean(|a| a.unnamed_kernel_sleep_ns),
            blocked_sleep_ns: mean(|a| a.blocked_sleep_ns),
            blocked_other_ns: mean(|a| a.blocked_other_ns),
            lock_spin_ns: mean(|a| a.lock_spin_ns),
            wait_site: named(|a| a.wait_site.as_ref(), TimeAccount::blocked_ns).map(|(w, _)| w),
            runtime_pause_ns: mean(|a| a.runtime_pause_ns),
            collector: named(|a| a.collector.as_ref(), |a| a.runtime_pause_ns).map(|(w, _)| w),
            woken_by,
            woken_by_ns: woken_by_ns.unwrap_or(0),
            waker_meanwhile,
            waker_meanwhile_ns: waker_meanwhile_ns.unwrap_or(0),
            released_at,
            memory_stall_ns: mean(|a| a.memory_stall_ns),
            memory_stall: kinds.first().map(|&(k, _)| k),
            memory_stall_kinds: kinds,
            upstream_ns: mean(|a| a.upstream_ns),
            upstream: named(|a| a.upstream.as_ref(), |a| a.upstream_ns).map(|(u, _)| u),
            // The longest reply in flight is the longest of any thread's.
            upstream_reply_ns: accounts
                .iter()
                .map(|a| a.upstream_reply_ns)
                .max()
                .unwrap_or(0),
            idle_ns: mean(|a| a.idle_ns),
            hardirq_ns: mean(|a| a.hardirq_ns),
            softirq_ns: mean(|a| a.softirq_ns),
            steal_ns: mean(|a| a.steal_ns),
            timer_silence_ns: mean(|a| a.timer_silence_ns),
            lock_holder_steal_ns: mean(|a| a.lock_holder_steal_ns),
            unexplained_ns: 0,
            explained_share: 0.0,
            delayed: Vec::new(),
        };
        account.settle_unexplained();
        account.delayed = accounts;
        Some(account)
    }

    /// The threads this account is over: the delayed threads' own
    /// accounts, or itself when it is one thread's.
    pub fn threads(&self) -> &[TimeAccount] {
        if self.delayed.is_empty() {
            std::slice::from_ref(self)
        } else {
            &self.delayed
        }
    }
}

/// The name with the most time summed over `accounts` (the last of equals,
/// in name order), and that time; none when no account has time under a
/// name.
pub(super) fn most_time<'a>(
    accounts: impl Iterator<Item = &'a TimeAccount>,
    name: impl Fn(&TimeAccount) -> Option<&String>,
    ns: impl Fn(&TimeAccount) -> u64,
) -> Option<(String, u64)> {
    let mut by: BTreeMap<&str, u64> = BTreeMap::new();
    for a in accounts {
        if let Some(n) = name(a) {
            *by.entry(n.as_str()).or_default() += ns(a);
        }
    }
    by.into_iter()
        .filter(|&(_, t)| t > 0)
        .max_by_key(|&(_, t)| t)
        .map(|(n, t)| (n.to_string(), t))
}

/// Raw sums for one thread and window, before they become an account.
#[derive(Default)]
struct Sums {
    slots: [f64; NUM_ACCOUNT],
    /// From records: blocked by site, runnable, migration.
    blocked: BTreeMap<Site, f64>,
    runnable: f64,
    /// Runnable while the idle task had the CPU.
    runnable_idle: f64,
    /// Of `runnable`, the wait after a move to another CPU's queue.
    moved: f64,
    migration_off: f64,
    /// Long syscalls' on-CPU time in the window, less `syscall_silent`.
    syscall_on: f64,
    /// Long syscalls' time on the CPU in which its sampling timer was
    /// silent (`SyscallSpan::silent_ns`): the environment's, as steal.
    syscall_silent: f64,
    migration_on: f64,
    by_syscall: HashMap<String, f64>,
    by_wait: HashMap<String, f64>,
    by_runner: HashMap<String, f64>,
    /// Blocked until a runtime's collector woke it, by which (their sum is
    /// the runtime's pause).
    by_collector: HashMap<String, f64>,
    /// Memory stalls in the window by kind, and the part of them spent off
    /// the CPU (taken out of the off-CPU categories as it was met).
    mem_by_kind: HashMap<StallKind, f64>,
    mem_off: f64,
    /// Waits for input while an upstream exchange was in flight, by
    /// upstream (their sum is `upstream`), and the longest reply.
    upstream: f64,
    by_upstream: HashMap<String, f64>,
    upstream_reply: u64,
    /// Blocked time (idle waits aside) by who woke it.
    by_waker: HashMap<String, f64>,
    /// The same time by waker and release site (`--stacks`).
    by_release: HashMap<String, HashMap<String, f64>>,
    /// Within those waits, by waker, what the waker itself did (its own
    /// off-CPU records): the second link of the wait-for chain.
    waker_did: HashMap<String, HashMap<String, f64>>,
}

/// Every thread's records, indexed for window queries.
pub struct Accounts<'a> {
    run: &'a RunFile,
    threads: &'a Threads<'a>,
    /// Per thread: bucket rows sorted by epoch.
    rows: HashMap<u32, Vec<&'a ThreadAccount>>,
    /// Per thread: long syscalls sorted by start.
    syscalls: HashMap<u32, Vec<&'a SyscallSpan>>,
    longest_syscall: u64,
    /// Per thread: memory stalls sorted by start.
    stalls: HashMap<u32, Vec<&'a MemStall>>,
    longest_stall: u64,
    /// Per thread (sender and reader): upstream exchanges sorted by send.
    upstreams: HashMap<u32, Vec<&'a UpstreamExchange>>,
    /// Per process: its runtime's stopped worlds (Go), sorted by start.
    pauses: HashMap<u32, Vec<&'a RuntimePause>>,
    longest_exchange: u64,
    /// Threads accounted for in every window: those that waited for input
    /// at some time (the serving threads), or every thread seen if none
    /// did (a busy-polling server).
    candidates: Vec<u32>,
    shift: u32,
}

impl<'a> Accounts<'a> {
    pub fn new(run: &'a RunFile, threads: &'a Threads<'a>) -> Self {
        let mut rows: HashMap<u32, Vec<&ThreadAccount>> = HashMap::new();
        for r in &run.thread_accounts {
            rows.entry(r.tid).or_default().push(r);
        }
        for v in rows.values_mut() {
            v.sort_by_key(|r| r.epoch);
        }
        let mut syscalls: HashMap<u32, Vec<&SyscallSpan>> = HashMap::new();
        for s in &run.syscalls {
            syscalls.entry(s.tid).or_default().push(s);
        }
        for v in syscalls.values_mut() {
            v.sort_by_key(|s| s.start_ns);
        }
        let mut stalls: HashMap<u32, Vec<&MemStall>> = HashMap::new();
        for m in &run.memory_stalls {
            stalls.entry(m.tid).or_default().push(m);
        }
        for v in stalls.values_mut() {
            v.sort_by_key(|m| m.start_ns);
        }
        let mut upstreams: HashMap<u32, Vec<&UpstreamExchange>> = HashMap::new();
        for u in &run.upstreams {
            upstreams.entry(u.tid).or_default().push(u);
            if u.reader_tid != u.tid {
                upstreams.entry(u.reader_tid).or_default().push(u);
            }
        }
        for v in upstreams.values_mut() {
            v.sort_by_key(|u| u.sent_ns);
        }
        let mut pauses: HashMap<u32, Vec<&RuntimePause>> = HashMap::new();
        for p in &run.runtime_pauses {
            pauses.entry(p.tgid).or_default().push(p);
        }
        for v in pauses.values_mut() {
            v.sort_by_key(|p| p.start_ns);
        }
        let idle_slot = Account::Blocked as usize + Site::Idle as usize;
        let mut serving: HashSet<u32> = run
            .thread_accounts
            .iter()
            .filter(|r| r.ns[idle_slot] > 0)
            .map(|r| r.tid)
            .collect();
        serving.extend(
            run.offcpu
                .iter()
                .filter(|o| o.site == Site::Idle && o.blocked_ns > 0)
                .map(|o| o.tid),
        );
        let mut all: Vec<u32> = rows
            .keys()
            .copied()
            .chain(run.offcpu.iter().map(|o| o.tid))
            .collect::<HashSet<u32>>()
            .into_iter()
            .collect();
        all.sort_unstable();
        let serving: Vec<u32> = all
            .iter()
            .copied()
            .filter(|t| serving.contains(t))
            .collect();
        let candidates = if serving.is_empty() { all } else { serving };
        Self {
            run,
            threads,
            rows,
            longest_syscall: run
                .syscalls
                .iter()
                .map(|s| s.end_ns.saturating_sub(s.start_ns))
                .max()
                .unwrap_or(0),
            syscalls,
            longest_stall: run
                .memory_stalls
                .iter()
                .map(|m| m.end_ns.saturating_sub(m.start_ns))
                .max()
                .unwrap_or(0),
            stalls,
            longest_exchange: run
                .upstreams
                .iter()
                .map(|u| u.reply_ns())
                .max()
                .unwrap_or(0),
            upstreams,
            pauses,
            candidates,
            shift: run.bucket_ns.max(1).trailing_zeros(),
        }
    }

    /// The account of the window over the serving threads delayed in it
    /// (the ones whose requests were slow): those busy, anything but idle,
    /// for at least [`DELAYED_SHARE`] of the busiest one's busy time; the
    /// mean of their accounts (see [`TimeAccount::mean_of_delayed`]).
    pub fn window(&self, start: u64, end: u64) -> TimeAccount {
        let accounts: Vec<TimeAccount> = self
            .candidates
            .iter()
            .map(|&tid| self.thread_window(tid, start, end))
            .collect();
        let mut account = TimeAccount::mean_of_delayed(accounts).unwrap_or_else(|| TimeAccount {
            duration_ns: end.saturating_sub(start).max(1),
            unexplained_ns: end.saturating_sub(start).max(1),
            ..TimeAccount::default()
        });
        if account.fault_ns == 0 && account.blocked_fault_ns == 0 {
            return account;
        }
        let (minor, major) = self.faults_counted(start, end);
        if account.fault_ns > 0 && major > 0 && major >= minor {
            account.fault_major_ns = account.fault_ns;
        }
        if account.blocked_fault_ns > 0 && major == 0 {
            // An uninterruptible sleep outside a syscall with no major fault
            // counted is not a major fault waiting for its page: memory.high
            // throttling, an mmap_lock wait behind another thread's munmap,
            // a page migration, reclaim throttling. Not named yet, so not
            // booked to a cause: unexplained, and shown as such.
            account.unnamed_kernel_sleep_ns = account.blocked_fault_ns;
            account.blocked_fault_ns = 0;
            account.settle_unexplained();
        }
        account
    }

    /// The time in [from, to] inside the stopped worlds of process `tgid`'s
    /// runtime, booked to `s.by_collector` by the thread that stopped each.
    fn stopped_world(&self, tgid: u32, from: u64, to: u64, s: &mut Sums) -> f64 {
        let Some(pauses) = self.pauses.get(&tgid) else {
            return 0.0;
        };
        let mut total = 0.0;
        let first = pauses.partition_point(|p| p.end_ns < from);
        for p in pauses[first..].iter().take_while(|p| p.start_ns <= to) {
            let o = p.overlap(from, to) as f64;
            if o <= 0.0 {
                continue;
            }
            let by = self.run.thread_names.get(&p.tid).map_or_else(
                || format!("tid {}", p.tid),
                |n| format!("{n} (tid {})", p.tid),
            );
            *s.by_collector
                .entry(super::runtimes::stopped_world("Go", &by))
                .or_default() += o;
            total += o;
        }
        total
    }

    /// The minor and major faults the kernel counted in [start, end] (by
    /// the buckets the window touches).
    fn faults_counted(&self, start: u64, end: u64) -> (u64, u64) {
        let kt = super::kernel::KernelTimeline::new(self.run);
        let (first, last) = kt.bucket_range(start, end);
        let sums = kt.sums(first, last);
        (
            super::kernel::get(&sums, correlator_common::Counter::PageFaultsMinor),
            super::kernel::get(&sums, correlator_common::Counter::PageFaultsMajor),
        )
    }

    fn sums(&self, tid: u32, start: u64, end: u64) -> Sums {
        let mut s = Sums::default();
        let bucket = 1u64 << self.shift;
        // Bucket rows, by overlap.
        if let Some(rows) = self.rows.get(&tid) {
            let first = start >> self.shift;
            let from = rows.partition_point(|r| r.epoch < first);
            for r in rows[from..]
                .iter()
                .take_while(|r| r.epoch <= end >> self.shift)
            {
                let b0 = r.epoch << self.shift;
                let w = (end.min(b0 + bucket).saturating_sub(start.max(b0))) as f64 / bucket as f64;
                for (acc, v) in s.slots.iter_mut().zip(r.ns) {
                    *acc += w * v as f64;
                }
                if let Some((nr, ns)) = r.top_syscall {
                    *s.by_syscall.entry(syscalls::name(nr)).or_default() += w * ns as f64;
                }
                for site in Site::ALL {
                    let v = r.ns[Account::Blocked as usize + site as usize];
                    if v > 0 && site != Site::Idle {
                        *s.by_wait
                            .entry(format!("{} (short waits)", site.name()))
                            .or_default() += w * v as f64;
                    }
                }
            }
        }
        // Memory stalls, by kind.
        for (kind, o) in self.stalls_in(tid, start, end) {
            *s.mem_by_kind.entry(kind).or_default() += o as f64;
        }
        // Off-CPU records.
        for span in self.threads.overlapping(tid, start, end) {
            let o = span.overlap(start, end) as f64;
            let r = span.record;
            // Off the CPU inside a memory stall (a reclaim's writeback wait,
            // memory.high's penalty sleep, an mmap_lock wait): the stall's.
            let in_stall = self.stalled(tid, span.start_ns.max(start), span.end_ns.min(end));
            s.mem_off += in_stall;
            let o = o - in_stall;
            if o <= 0.0 {
                continue;
            }
            // Off the CPU while its runtime had stopped the whole process
            // (Go's stopped world): nothing of it could run, whoever ends
            // the wait; the runtime's pause.
            let stopped = self.stopped_world(
                r.tgid,
                span.start_ns.max(start),
                span.end_ns.min(end),
                &mut s,
            );
            let o = o - stopped;
            if o <= 0.0 {
                continue;
            }
            let migrating = r.site == Site::Migration && !r.preempted;
            if migrating {
                s.migration_off += o;
                continue;
            }
            match span.kind {
                OffKind::Blocked => {
                    if let Some(w) = &r.waker
                        && w.context == WakeContext::Task
                        && w.tgid == r.tgid
                        && let Some(runtime) = super::runtimes::collector(w.comm.as_str())
                    {
                        *s.by_collector
                            .entry(format!("{runtime}: {}", w.describe()))
                            .or_default() += o;
                        continue;
                    }
                    if r.site == Site::Idle {
                        // Waiting for input with a request out to an
                        // upstream: that part waited on the upstream.
                        let from = span.start_ns.max(start);
                        let to = span.end_ns.min(end);
                        let upstream = self.upstream_during(tid, from, to, &mut s);
                        *s.blocked.entry(r.site).or_default() += (o - upstream).max(0.0);
                        continue;
                    }
                    *s.blocked.entry(r.site).or_default() += o;
                    let what = r
                        .syscall
                        .map_or_else(|| "page fault".to_string(), syscalls::name);
                    *s.by_wait.entry(what).or_default() += o;
                    if let Some(w) = &r.waker {
                        let who = w.describe();
                        *s.by_waker.entry(who.clone()).or_default() += o;
                        if let Some(site) = super::release::site(&self.run.stacks, w) {
                            *s.by_release
                                .entry(who.clone())
                                .or_default()
                                .entry(site)
                                .or_default() += o;
                        }
                        if w.context == WakeContext::Task && w.tid != tid {
                            let from = span.start_ns.max(start);
                            let to = span.end_ns.min(end);
                            self.waker_during(w.tid, from, to, s.waker_did.entry(who).or_default());
                        }
                    }
                }
                OffKind::Runnable => {
                    // Its last `moved_ns` waited on the CPU it was moved to.
                    let moved_from = span.end_ns.saturating_sub(u64::from(r.moved_ns));
                    let moved = span.end_ns.min(end).saturating_sub(moved_from.max(start));
                    s.moved += (moved as f64).min(o);
                    s.runnable += o;
                    if r.next_pid == 0 {
                        // The idle task is nobody to name as a neighbour:
                        // this is the CPU's wake-up (`runnable_idle_ns`).
                        s.runnable_idle += o;
                    } else if !r.next_comm.is_empty() {
                        let who = format!("{} (pid {})", r.next_comm, r.next_pid);
                        *s.by_runner.entry(who).or_default() += o;
                    }
                }
            }
        }
        // Long syscalls: their on-CPU time, spread over the call.
        if let Some(calls) = self.syscalls.get(&tid) {
            let from =
                calls.partition_point(|c| c.start_ns < start.saturating_sub(self.longest_syscall));
            for c in calls[from..].iter().take_while(|c| c.start_ns < end) {
                let len = c.end_ns.saturating_sub(c.start_ns).max(1);
                let o = end.min(c.end_ns).saturating_sub(start.max(c.start_ns));
                if o == 0 {
                    continue;
                }
                let part = o as f64 / len as f64;
                let silent = c.silent_ns(self.run.sample_period_ns) as f64 * part;
                s.syscall_silent += silent;
                let on = c.on_cpu_ns() as f64 * part - silent;
                if syscalls::migrates(c.nr) {
                    s.migration_on += on;
                } else {
                    s.syscall_on += on;
                }
                *s.by_syscall.entry(syscalls::name(c.nr)).or_default() += on;
            }
        }
        s
    }

    /// Thread `tid`'s memory stalls in [from, to]: each one's kind and
    /// its overlap with the window (stalls never overlap one another: one
    /// at a time per thread).
    fn stalls_in(&self, tid: u32, from: u64, to: u64) -> impl Iterator<Item = (StallKind, u64)> {
        let list = self.stalls.get(&tid).map_or(&[][..], Vec::as_slice);
        let first = list.partition_point(|m| m.start_ns < from.saturating_sub(self.longest_stall));
        list[first..]
            .iter()
            .take_while(move |m| m.start_ns < to)
            .map(move |m| {
                (
                    m.kind,
                    m.end_ns.min(to).saturating_sub(m.start_ns.max(from)),
                )
            })
            .filter(|&(_, o)| o > 0)
    }

    /// The part of [from, to] inside thread `tid`'s memory stalls.
    fn stalled(&self, tid: u32, from: u64, to: u64) -> f64 {
        self.stalls_in(tid, from, to).map(|(_, o)| o as f64).sum()
    }

    /// The part of [from, to] in which thread `tid` had an exchange with
    /// an upstream in flight (sent, reply not yet arrived), booked into
    /// `s` by upstream; returns it.
    fn upstream_during(&self, tid: u32, from: u64, to: u64, s: &mut Sums) -> f64 {
        let Some(w) = self.upstream_overlap(tid, from, to) else {
            return 0.0;
        };
        for (peer, v) in w.by_peer {
            *s.by_upstream.entry(peer.to_string()).or_default() += v;
        }
        s.upstream_reply = s.upstream_reply.max(w.longest_reply);
        s.upstream += w.union;
        w.union
    }

    /// Thread `tid`'s upstream exchanges in flight in [from, to] (None:
    /// none). Several in flight at once count once, shared among their
    /// upstreams by their own overlap.
    fn upstream_overlap(&self, tid: u32, from: u64, to: u64) -> Option<UpstreamWait<'a>> {
        let list = self.upstreams.get(&tid)?;
        let first =
            list.partition_point(|u| u.sent_ns < from.saturating_sub(self.longest_exchange));
        let mut clipped: Vec<(u64, u64, &str)> = Vec::new();
        let mut longest_reply = 0;
        for u in list[first..].iter().take_while(|u| u.sent_ns < to) {
            let (a, b) = (u.sent_ns.max(from), u.replied_ns().min(to));
            if b > a {
                clipped.push((a, b, u.peer.as_str()));
                longest_reply = longest_reply.max(u.reply_ns());
            }
        }
        let (&(a0, b0, _), rest) = clipped.split_first()?;
        // The union of the clipped intervals (sorted by start already).
        let (mut union, mut cur) = (0u64, (a0, b0));
        for &(a, b, _) in rest {
            if a > cur.1 {
                union += cur.1 - cur.0;
                cur = (a, b);
            } else {
                cur.1 = cur.1.max(b);
            }
        }
        union += cur.1 - cur.0;
        let all: u64 = clipped.iter().map(|&(a, b, _)| b - a).sum();
        let mut by_peer: Vec<(&'a str, f64)> = Vec::new();
        for &(a, b, peer) in &clipped {
            let v = union as f64 * (b - a) as f64 / all as f64;
            match by_peer.iter_mut().find(|(p, _)| *p == peer) {
                Some((_, t)) => *t += v,
                None => by_peer.push((peer, v)),
            }
        }
        Some(UpstreamWait {
            union: union as f64,
            by_peer,
            longest_reply,
        })
    }

    /// What thread `tid` did in [from, to], by its own off-CPU records:
    /// blocked (in which syscall) or waiting for a CPU (behind whom). The
    /// rest of the span it was on the CPU or not followed by the probes
    /// (a thread of another process): left out, not guessed.
    fn waker_during(&self, tid: u32, from: u64, to: u64, did: &mut HashMap<String, f64>) {
        for span in self.threads.overlapping(tid, from, to) {
            let o = span.overlap(from, to) as f64;
            let r = span.record;
            let what = match span.kind {
                OffKind::Blocked if r.site == Site::Idle => {
                    // Waiting for input with a request out upstream: the
                    // chain's next link is the upstream.
                    let (a, b) = (span.start_ns.max(from), span.end_ns.min(to));
                    if let Some(w) = self.upstream_overlap(tid, a, b)
                        && let Some((peer, _)) = w.by_peer.iter().max_by(|x, y| x.1.total_cmp(&y.1))
                    {
                        *did.entry(format!("waiting for its upstream {peer}"))
                            .or_default() += w.union;
                        *did.entry(blocked_in(r.syscall)).or_default() += (o - w.union).max(0.0);
                        continue;
                    }
                    blocked_in(r.syscall)
                }
                OffKind::Blocked => blocked_in(r.syscall),
                OffKind::Runnable if r.next_comm.is_empty() => "waiting for a CPU".to_string(),
                OffKind::Runnable => format!("waiting for a CPU while {} ran", r.next_comm),
            };
            *did.entry(what).or_default() += o;
        }
    }

    fn thread_window(&self, tid: u32, start: u64, end: u64) -> TimeAccount {
        let d = end.saturating_sub(start).max(1);
        let s = self.sums(tid, start, end);
        let slot = |a: Account| s.slots[a as usize];
        let blocked_slot = |site: Site| s.slots[Account::Blocked as usize + site as usize];
        let blocked =
            |site: Site| s.blocked.get(&site).copied().unwrap_or(0.0) + blocked_slot(site);
        let hardirq_wait = slot(Account::HardIrqWait);
        let softirq_wait = slot(Account::SoftIrqWait);
        // IRQ work on the CPU the thread waited for is IRQ time, not a
        // neighbour's; the kernel side measured it inside the wait.
        // The kernel side books a short interval's wait after a move to
        // another CPU's queue apart from the rest of its runnable wait.
        let runnable_all = s.runnable + slot(Account::Runnable) + slot(Account::RunnableMoved);
        let irq_wait = (hardirq_wait + softirq_wait).min(runnable_all);
        // The wait after a load balancer's move is the move's (as the
        // server's own sched_setaffinity moves are), not the neighbour's
        // on the CPU it left.
        let moved = (s.moved + slot(Account::RunnableMoved)).min(runnable_all - irq_wait);
        let runnable = runnable_all - irq_wait - moved;
        let (hardirq, softirq) = (
            slot(Account::HardIrq) + hardirq_wait.min(irq_wait),
            slot(Account::SoftIrq) + (irq_wait - hardirq_wait.min(irq_wait)),
        );
        // The buckets book a stretch on the CPU where it ends (the switch
        // or sample that closes it), so a window inside a long syscall
        // holds little of it there; the long syscalls' own records place
        // their time exactly. The window's time on the CPU is at least
        // what those records put in it.
        let on_cpu = slot(Account::OnCpu).max(s.syscall_on + s.migration_on + s.syscall_silent);
        let holder_steal = slot(Account::LockHolderSteal);
        // One stall can be seen twice: by a long syscall's missing samples
        // (placed in the call) and by the sample that found the timer
        // silent (booked where it fired, maybe after the call). The larger
        // stands: summed, a clean server's 2.4 ms `epoll_wait` explained
        // more than its window; capped by the buckets' on-CPU time alone,
        // 1.4 ms of its silence was left unexplained.
        let timer_silence = slot(Account::TimerSilence).max(s.syscall_silent);
        let steal = (slot(Account::Steal) + timer_silence + holder_steal).min(on_cpu);
        let timer_silence = timer_silence.min(steal);
        let holder_steal = holder_steal.min(steal - timer_silence);
        // Spins are on the CPU, outside the syscalls' own work (the kernel
        // side takes them out of it).
        let lock_spin = slot(Account::LockSpin).min((on_cpu - steal).max(0.0));
        let migration_on = slot(Account::MigrationCpu) + s.migration_on;
        let syscall =
            (slot(Account::SyscallCpu) - slot(Account::MigrationCpu)).max(0.0) + s.syscall_on;
        // On the CPU outside measured syscalls, IRQs and steal: user code
        // or fault handling (and, without the syscall hooks, syscalls),
        // split by where the samples found the thread.
        let rest = (on_cpu
            - steal
            - lock_spin
            - syscall
            - migration_on
            - slot(Account::HardIrq)
            - slot(Account::SoftIrq))
        .max(0.0);
        // The runtime's collections run by the thread itself (measured
        // between the runtime's own gc probes): the runtime's pause, not the
        // server's code.
        let own_gc = slot(Account::RuntimeGc).min(rest);
        let rest = rest - own_gc;
        let mut by_collector = s.by_collector;
        if own_gc > 0.0 {
            let runtime = self
                .run
                .runtime_gc
                .as_ref()
                .map_or("the runtime", |r| r.runtime.as_str());
            *by_collector
                .entry(super::runtimes::own_collections(runtime))
                .or_default() += own_gc;
        }
        let syscall_samples = if self.run.syscall_time == SyscallTime::Sampled {
            slot(Account::SamplesSyscall)
        } else {
            0.0
        };
        let (user_samples, fault_samples) =
            (slot(Account::SamplesUser), slot(Account::SamplesFault));
        let sampled = user_samples + fault_samples + syscall_samples;
        // A share of `rest` by samples, with the binomial standard error of
        // the split, in time.
        let share = |n: f64| {
            if sampled > 0.0 {
                let p = n / sampled;
                (rest * p, rest * (p * (1.0 - p) / sampled).sqrt())
            } else {
                (0.0, 0.0)
            }
        };
        let (fault, fault_error) = share(fault_samples);
        let (sampled_syscall, syscall_error) = share(syscall_samples);
        let syscall = syscall + sampled_syscall;
        let user = rest - fault - sampled_syscall;
        // A memory stall's time on the CPU (its reclaim or compaction work)
        // is in the kernel: fault handling when it came from a fault, the
        // syscall's own work when from a syscall; taken from those first,
        // then from user time (a stall the samples placed there).
        let memory: f64 = s.mem_by_kind.values().sum();
        let mut kinds: Vec<(StallKind, u64)> =
            s.mem_by_kind.iter().map(|(&k, &t)| (k, t as u64)).collect();
        kinds.sort_by_key(|&(k, t)| (std::cmp::Reverse(t), k));
        let mut stall_on = (memory - s.mem_off).max(0.0);
        let mut take = |v: f64| {
            let t = v.min(stall_on);
            stall_on -= t;
            v - t
        };
        let (fault, syscall, user) = (take(fault), take(syscall), take(user));
        // What a memory stall took from the syscall time came off its
        // exact part first.
        let sampled_syscall = sampled_syscall.min(syscall);
        let migration = migration_on + s.migration_off + blocked_slot(Site::Migration) + moved;
        let mut by_wait = s.by_wait;
        if lock_spin > 0.0 {
            *by_wait
                .entry("kernel spinlock (spinning)".to_string())
                .or_default() += lock_spin;
        }
        let mut account = TimeAccount {
            duration_ns: d,
            thread: Some(format!(
                "{} (tid {tid})",
                self.run
                    .thread_names
                    .get(&tid)
                    .map_or("thread", String::as_str)
            )),
            tid: Some(tid),
            threads_delayed: 1,
            delayed: Vec::new(),
            on_cpu_user_ns: user as u64,
            on_cpu_kernel_ns: (syscall + fault) as u64,
            syscall_ns: syscall as u64,
            top_syscall: None,
            top_syscall_ns: 0,
            fault_ns: fault as u64,
            fault_major_ns: 0,
            fault_error_ns: fault_error as u64,
            syscall_sampled_ns: sampled_syscall as u64,
            syscall_error_ns: syscall_error as u64,
            migration_ns: migration as u64,
            runnable_ns: runnable as u64,
            preempted_by: top(&s.by_runner).filter(|_| runnable >= 1.0),
            // Less its share of the IRQ time taken out of `runnable`.
            runnable_idle_ns: (s.runnable_idle * runnable / runnable_all.max(1.0)) as u64,
            lock_spin_ns: lock_spin as u64,
            blocked_lock_ns: blocked(Site::Lock) as u64,
            blocked_io_ns: blocked(Site::Io) as u64,
            blocked_fault_ns: blocked(Site::Fault) as u64,
            unnamed_kernel_sleep_ns: 0,
            blocked_sleep_ns: blocked(Site::Sleep) as u64,
            blocked_other_ns: blocked(Site::Other) as u64,
            wait_site: top(&by_wait),
            runtime_pause_ns: by_collector.values().sum::<f64>() as u64,
            collector: top(&by_collector),
            woken_by: None,
            woken_by_ns: 0,
            waker_meanwhile: None,
            waker_meanwhile_ns: 0,
            released_at: None,
            memory_stall_ns: memory as u64,
            memory_stall: kinds.first().map(|&(k, _)| k),
            memory_stall_kinds: kinds,
            upstream_ns: s.upstream as u64,
            upstream: top(&s.by_upstream),
            upstream_reply_ns: s.upstream_reply,
            idle_ns: blocked(Site::Idle) as u64,
            hardirq_ns: hardirq as u64,
            softirq_ns: softirq as u64,
            steal_ns: steal as u64,
            timer_silence_ns: timer_silence as u64,
            lock_holder_steal_ns: holder_steal as u64,
            unexplained_ns: 0,
            explained_share: 0.0,
        };
        if let Some(who) = top(&s.by_waker) {
            account.woken_by_ns = s.by_waker.get(&who).copied().unwrap_or(0.0) as u64;
            if let Some(did) = s.waker_did.get(&who)
                && let Some(what) = top(did)
            {
                account.waker_meanwhile_ns = did.get(&what).copied().unwrap_or(0.0) as u64;
                account.waker_meanwhile = Some(what);
            }
            account.released_at = s.by_release.get(&who).and_then(top);
            account.woken_by = Some(who);
        }
        if let Some(name) = top(&s.by_syscall) {
            account.top_syscall_ns = s.by_syscall.get(&name).copied().unwrap_or(0.0) as u64;
            account.top_syscall = Some(name);
        }
        account.settle_unexplained();
        account
    }
}

/// What a blocked interval was, by its syscall.
fn blocked_in(syscall: Option<u32>) -> String {
    format!(
        "blocked in {}",
        syscall.map_or_else(|| "a page fault".to_string(), syscalls::name)
    )
}

/// A thread's upstream exchanges in flight over a window.
struct UpstreamWait<'a> {
    /// Time with at least one in flight.
    union: f64,
    /// That time shared among the upstreams.
    by_peer: Vec<(&'a str, f64)>,
    /// The longest of their replies.
    longest_reply: u64,
}

/// The name with the most time; a tie goes to the first name in byte
/// order, so the same run gives the same report (a HashMap's order is
/// random per process).
fn top(m: &HashMap<String, f64>) -> Option<String> {
    m.iter()
        .filter(|(_, v)| **v > 0.0)
        .max_by(|a, b| a.1.total_cmp(b.1).then_with(|| b.0.cmp(a.0)))
        .map(|(k, _)| k.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread(name: &str, f: impl FnOnce(&mut TimeAccount)) -> TimeAccount {
        let mut a = TimeAccount {
            duration_ns: 20_000_000,
            thread: Some(name.to_string()),
            threads_delayed: 1,
            ..TimeAccount::default()
        };
        f(&mut a);
        a.settle_unexplained();
        a
    }

    /// A pool: the holder waits for its upstream, two waiters for the
    /// holder's connection, a fourth worker idles. The account is the mean
    /// over the three delayed threads; the idle one is not among them.
    #[test]
    fn the_account_is_the_mean_over_the_delayed_threads() {
        let holder = thread("worker (tid 1)", |a| {
            a.upstream_ns = 18_000_000;
            a.upstream = Some("10.0.0.1:5432".into());
            a.on_cpu_user_ns = 2_000_000;
        });
        let waiter = |tid: u32| {
            thread(&format!("worker (tid {tid})"), |a| {
                a.blocked_lock_ns = 19_000_000;
                a.wait_site = Some("futex".into());
                a.woken_by = Some("worker (tid 1)".into());
                a.woken_by_ns = 19_000_000;
                a.waker_meanwhile = Some("waiting for its upstream 10.0.0.1:5432".into());
                a.waker_meanwhile_ns = 18_000_000;
                a.idle_ns = 1_000_000;
            })
        };
        let idle = thread("worker (tid 4)", |a| {
            a.idle_ns = 19_000_000;
            a.on_cpu_user_ns = 1_000_000;
        });
        let m = TimeAccount::mean_of_delayed(vec![holder, waiter(2), waiter(3), idle])
            .expect("an account");
        assert_eq!(m.threads_delayed, 3);
        assert_eq!(m.threads().len(), 3);
        assert_eq!(m.upstream_ns, 6_000_000);
        assert_eq!(m.blocked_lock_ns, 38_000_000 / 3);
        assert_eq!(m.woken_by.as_deref(), Some("worker (tid 1)"));
        assert_eq!(m.woken_by_ns, 38_000_000 / 3);
        assert_eq!(m.waker_meanwhile_ns, 36_000_000 / 3);
        assert_eq!(m.upstream.as_deref(), Some("10.0.0.1:5432"));
        assert_eq!(m.wait_site.as_deref(), Some("futex"));
        assert!(m.explained_share > 0.99, "{m:?}");
    }

    /// One delayed thread: its own account, as before there were several.
    #[test]
    fn one_delayed_thread_is_its_own_account() {
        let busy = thread("server (tid 7)", |a| a.runnable_ns = 15_000_000);
        let idle = thread("server (tid 8)", |a| a.idle_ns = 20_000_000);
        let m = TimeAccount::mean_of_delayed(vec![busy.clone(), idle]).expect("an account");
        assert_eq!(m, busy);
        assert!(m.delayed.is_empty());
    }
}
