//! Types shared by the kernel programs (`correlator-ebpf`) and userspace.
//!
//! Everything here is `#[repr(C)]` plain data: it crosses the kernel/user
//! boundary as raw bytes through BPF maps and the ring buffer, so the layout
//! is the contract. Change a layout and bump [`ABI_VERSION`].
#![no_std]

/// Bumped whenever a shared layout below changes.
pub const ABI_VERSION: u32 = 3;

/// What each per-bucket counter slot counts.
///
/// Counts are events of the *target* (its threads) only; `*Ns` slots are sums
/// of durations in nanoseconds, attributed to the bucket in which the interval
/// ended.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    PageFaultsMinor = 0,
    PageFaultsMajor = 1,
    SwitchesVoluntary = 2,
    SwitchesInvoluntary = 3,
    Migrations = 4,
    HardIrqs = 5,
    SoftIrqs = 6,
    /// Time hard IRQs ran on a CPU while a target thread was on it.
    HardIrqNs = 7,
    /// Time softirqs ran on a CPU while a target thread was on it, hard IRQs
    /// that interrupted the softirq excluded (they are in `HardIrqNs`).
    SoftIrqNs = 8,
    /// Time target threads waited runnable (preempted, or woken but not yet running).
    RunnableNs = 9,
    /// Time target threads were blocked (sleeping, waiting for I/O or a lock).
    BlockedNs = 10,
    /// Time hard IRQs ran on a CPU while a target thread waited runnable
    /// for it (part of `RunnableNs`: the CPU was busy, but not with a task);
    /// IRQs that started before the thread was woken are not counted.
    HardIrqWaitNs = 11,
    /// Time softirqs ran on a CPU while a target thread waited runnable for
    /// it, including the rest of a softirq that woke the thread (part of
    /// `RunnableNs`; also what ksoftirqd spends while the thread waits).
    SoftIrqWaitNs = 12,
    /// Softirq time by vector (kernel numbering, [`SOFTIRQ_NAMES`]): the
    /// time `SoftIrqNs` and `SoftIrqWaitNs` count, told apart by source.
    SoftIrqHiNs = 13,
    SoftIrqTimerNs = 14,
    SoftIrqNetTxNs = 15,
    SoftIrqNetRxNs = 16,
    SoftIrqBlockNs = 17,
    SoftIrqIrqPollNs = 18,
    SoftIrqTaskletNs = 19,
    SoftIrqSchedNs = 20,
    SoftIrqHrtimerNs = 21,
    SoftIrqRcuNs = 22,
    /// Hard-IRQ time by [`IrqKind`]: the time `HardIrqNs` and
    /// `HardIrqWaitNs` count, told apart by source.
    HardIrqDeviceNs = 23,
    HardIrqLocalTimerNs = 24,
    HardIrqRescheduleNs = 25,
    HardIrqCallFunctionNs = 26,
    HardIrqCallFunctionSingleNs = 27,
    HardIrqIrqWorkNs = 28,
}

/// Number of [`Counter`] slots.
pub const NUM_COUNTERS: usize = 29;

/// First of the per-vector softirq time counters (vector `v` at
/// `SOFTIRQ_NS_BASE + v`), and of the per-kind hard-IRQ ones.
pub const SOFTIRQ_NS_BASE: usize = Counter::SoftIrqHiNs as usize;
pub const HARDIRQ_KIND_NS_BASE: usize = Counter::HardIrqDeviceNs as usize;

impl Counter {
    /// All counters, in slot order.
    pub const ALL: [Counter; NUM_COUNTERS] = [
        Counter::PageFaultsMinor,
        Counter::PageFaultsMajor,
        Counter::SwitchesVoluntary,
        Counter::SwitchesInvoluntary,
        Counter::Migrations,
        Counter::HardIrqs,
        Counter::SoftIrqs,
        Counter::HardIrqNs,
        Counter::SoftIrqNs,
        Counter::RunnableNs,
        Counter::BlockedNs,
        Counter::HardIrqWaitNs,
        Counter::SoftIrqWaitNs,
        Counter::SoftIrqHiNs,
        Counter::SoftIrqTimerNs,
        Counter::SoftIrqNetTxNs,
        Counter::SoftIrqNetRxNs,
        Counter::SoftIrqBlockNs,
        Counter::SoftIrqIrqPollNs,
        Counter::SoftIrqTaskletNs,
        Counter::SoftIrqSchedNs,
        Counter::SoftIrqHrtimerNs,
        Counter::SoftIrqRcuNs,
        Counter::HardIrqDeviceNs,
        Counter::HardIrqLocalTimerNs,
        Counter::HardIrqRescheduleNs,
        Counter::HardIrqCallFunctionNs,
        Counter::HardIrqCallFunctionSingleNs,
        Counter::HardIrqIrqWorkNs,
    ];
}

/// Hard-interrupt kinds counted separately in the totals. Device IRQs come
/// from `irq:irq_handler_entry`; the local APIC timer and IPIs are only
/// visible through `irq_vectors:*`.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IrqKind {
    Device = 0,
    LocalTimer = 1,
    Reschedule = 2,
    CallFunction = 3,
    CallFunctionSingle = 4,
    IrqWork = 5,
}

/// Number of [`IrqKind`]s.
pub const NUM_IRQ_KINDS: usize = 6;

const _: () = assert!(SOFTIRQ_NS_BASE + NUM_SOFTIRQ_VECTORS == HARDIRQ_KIND_NS_BASE);
const _: () = assert!(HARDIRQ_KIND_NS_BASE + NUM_IRQ_KINDS == NUM_COUNTERS);

/// Softirq vectors as numbered by the kernel (`enum` in `linux/interrupt.h`).
pub const NUM_SOFTIRQ_VECTORS: usize = 10;

/// Names of the softirq vectors, index = vector number.
pub const SOFTIRQ_NAMES: [&str; NUM_SOFTIRQ_VECTORS] = [
    "HI", "TIMER", "NET_TX", "NET_RX", "BLOCK", "IRQ_POLL", "TASKLET", "SCHED", "HRTIMER", "RCU",
];

/// One time bucket of counters on one CPU, a slot in a per-CPU ring.
///
/// The kernel side resets a slot when the first event of a new bucket lands
/// in it (`epoch` != bucket number); userspace reads slots whose bucket has
/// ended and has not been read yet.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Bucket {
    /// Bucket number (`ktime >> bucket_shift`) whose counts the slot holds.
    pub epoch: u64,
    pub counts: [u64; NUM_COUNTERS],
}

/// Slots in the per-CPU bucket ring. With 1 ms buckets this is 4 s of
/// history: the drain (every 100 ms) has ample margin.
pub const BUCKET_SLOTS: u32 = 4096;

/// Slots of the per-CPU totals. Totals are never reset; they are the check
/// that every bucket was drained (sum of drained buckets == totals).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Total {
    /// `NUM_COUNTERS` slots mirroring [`Counter`] come first.
    RingReserveFailed = NUM_COUNTERS as u32,
    /// Thread-map insertions that failed (map full): those threads go unseen.
    ThreadMapFull = NUM_COUNTERS as u32 + 1,
    /// Request records the kernel could not put in the full requests ring.
    RequestsLost = NUM_COUNTERS as u32 + 2,
    /// `--syscalls`: writes on a connection with no request pending (a
    /// response split over several writes, or data the server pushes).
    UnpairedWrites = NUM_COUNTERS as u32 + 3,
    /// `--uprobe`: calls of the function (sampled or not).
    UprobeCalls = NUM_COUNTERS as u32 + 4,
    /// Thread-bucket accounts and syscall records the kernel could not put
    /// in their full ring buffer.
    AccountsLost = NUM_COUNTERS as u32 + 5,
    SyscallRecordsLost = NUM_COUNTERS as u32 + 6,
    /// On-CPU samples of target threads (whatever became of them).
    Samples = NUM_COUNTERS as u32 + 7,
    /// `--stacks`: stacks not captured because another stack held their
    /// slot of the stack map (hash collision, or the map full).
    StackCollisions = NUM_COUNTERS as u32 + 8,
    /// `--stacks`: stacks the kernel could not walk (e.g. no user stack).
    StackErrors = NUM_COUNTERS as u32 + 9,
    /// `--stacks`: sample records the kernel could not put in their full ring.
    SampleRecordsLost = NUM_COUNTERS as u32 + 10,
    /// `--syscalls` at the socket tracepoints: requests timed from their
    /// bytes' arrival in the socket (the rest from the first read).
    RequestsFromArrival = NUM_COUNTERS as u32 + 11,
    /// Samples that found the CPU's sampling timer silent while a target
    /// thread ran (a host stall or interrupts off), and the silent time
    /// booked as steal, ns.
    TimerSilences = NUM_COUNTERS as u32 + 12,
    TimerSilenceNs = NUM_COUNTERS as u32 + 13,
    /// Upstream exchanges the kernel could not record: their ring was full
    /// or their connection table was.
    UpstreamsLost = NUM_COUNTERS as u32 + 14,
    /// Memory stall records lost to their full ring buffer.
    MemStallsLost = NUM_COUNTERS as u32 + 15,
    /// Cross-CPU calls to a target thread's CPU whose sender found the
    /// sender table ([`IPI_SENDER_SLOTS`]) full.
    IpiSendersLost = NUM_COUNTERS as u32 + 16,
    /// Context switches of a target thread that the kernel made without
    /// firing sched_switch. Seen on this machine's kernel: no tracepoint
    /// fires while a thread of the VM's agent (PID 1) is current, so its
    /// switch-outs are never traced (bpftrace over 10 s: 24 switches into
    /// its threads, none out of them), nor the wakeups made in its context
    /// or in IRQs that hit it. Found when the next IRQ or traced switch on
    /// the CPU finds another task current than the last traced switch put
    /// there; the switch-in is then dated by the kernel's own stamp
    /// (`sched_info.last_arrival`, see [`Config::task_last_arrival_offset`]).
    UntracedSwitches = NUM_COUNTERS as u32 + 17,
    /// Collections of the runtime's garbage collector that target threads
    /// ran (gc done probes that ended a start seen).
    RuntimeGcs = NUM_COUNTERS as u32 + 18,
    /// Runtime pause records (Go's stopped worlds) lost to their full ring.
    RuntimePausesLost = NUM_COUNTERS as u32 + 19,
    /// Of the [`Total::UntracedSwitches`], the target threads' switch-ins
    /// dated by the kernel's stamp, whose off-CPU interval was recorded to
    /// there (the others' stayed unexplained).
    UnseenSwitchInsDated = NUM_COUNTERS as u32 + 20,
    /// A target thread opened an outbound TCP connection (moved a socket
    /// to SYN_SENT in `connect()`) or connected a UDP socket (the cgroup
    /// connect programs): userspace attaches the upstream hooks, held back
    /// until the target has an upstream (see `Probes::drain`).
    UpstreamConnects = NUM_COUNTERS as u32 + 21,
}

/// First slot of the per-[`IrqKind`] counts in the totals array.
pub const TOTAL_IRQ_KIND_BASE: u32 = NUM_COUNTERS as u32 + 22;
/// Number of slots in the totals array.
pub const NUM_TOTALS: u32 = TOTAL_IRQ_KIND_BASE + NUM_IRQ_KINDS as u32;

/// Why a target thread left the CPU.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OffCpuKind {
    /// Preempted (or yielded) while runnable: the whole interval is run-queue wait.
    Preempted = 1,
    /// Went to sleep: blocked until woken, then runnable until it ran.
    Blocked = 2,
}

/// An off-CPU interval of a target thread, emitted when the thread is
/// switched back in and the interval is at least the configured minimum.
/// Shorter intervals are only summed into the bucket counters.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct OffCpuRecord {
    pub tid: u32,
    pub tgid: u32,
    /// [`OffCpuKind`] as u32.
    pub kind: u32,
    /// CPU the thread left.
    pub cpu_out: u32,
    /// CPU the thread came back on.
    pub cpu_in: u32,
    /// Pid of the task that ran instead right after the switch-out.
    pub next_pid: u32,
    pub start_ns: u64,
    pub end_ns: u64,
    /// Part of the interval spent waiting runnable.
    pub runnable_ns: u64,
    /// Part of the interval spent blocked (0 when preempted).
    pub blocked_ns: u64,
    /// Comm of the task that ran instead (NUL padded).
    pub next_comm: [u8; 16],
    /// Syscall the thread was in when it left the CPU, as number + 1
    /// (0: not in a syscall: in user mode, or in a fault or other exception).
    pub syscall: u32,
    /// [`WaitSite`] of the blocked part, as u32 (see `ThreadState::off_site`).
    pub site: u32,
    /// `--stacks`: kernel and user stack ids (in the `STACKS` map) at the
    /// switch-out; negative: none (see [`NO_STACK`]) or the kernel's error.
    pub kstack: i32,
    pub ustack: i32,
    /// The blocked part's waker (see `ThreadState::waker_tid`); context 0
    /// when none was seen (preempted, or woken before the probes saw it).
    pub waker_tid: u32,
    pub waker_tgid: u32,
    pub waker_context: u32,
    /// `--stacks`: the waker's kernel stack at the wakeup (the release
    /// site: the unlock, the signal, the I/O completion) and, when it is a
    /// target thread waking in its own context, its user stack; negative:
    /// none (as `kstack`).
    pub waker_kstack: i32,
    pub waker_ustack: i32,
    /// The part of `runnable_ns` after the thread, queued, was moved to
    /// another CPU (the last move's wait; saturates at u32::MAX ns).
    pub moved_ns: u32,
}

/// The context a wakeup ran in, as the kernel side encodes it: a task
/// (the waker is the current task: an unlock, a condvar signal, a write to
/// a pipe), a hard IRQ or a softirq (then the current task is only whoever
/// was interrupted: an I/O completion or a packet's receive woke it).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WakeContext {
    None = 0,
    Task = 1,
    HardIrq = 2,
    /// `Softirq as u32 + vec` for softirq vector `vec` (0..10).
    Softirq = 3,
}

/// A stack id that was not asked for (`--stacks` off, or a user-mode
/// sample's kernel stack).
pub const NO_STACK: i32 = i32::MIN;

/// Stacks the `STACKS` map holds (a power of two: buckets are hashed, so
/// a larger map means fewer collisions) and frames kept per stack.
pub const STACK_SLOTS: usize = 32768;
pub const STACK_DEPTH: usize = 64;
/// Stacks the `STACKS_OVERFLOW` map holds: those whose slot in `STACKS`
/// held another stack. The kernel hashes a stack with a fixed seed, so it
/// lands in the same slot of a second map; that slot is free unless
/// another colliding stack took it (a redis run lost all 27 of its
/// `clock_nanosleep` kernel stacks to one collision in `STACKS`). Their
/// ids are offset by [`STACK_SLOTS`].
pub const STACK_OVERFLOW_SLOTS: usize = 4096;

/// `--stacks`: one on-CPU sample of a target thread.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SampleRecord {
    pub tid: u32,
    /// What the thread was doing: an [`Account`] `Samples*` slot.
    pub context: u32,
    /// Syscall in progress, number + 1 (0: none).
    pub syscall: u32,
    pub kstack: i32,
    pub ustack: i32,
    pub _pad: u32,
    pub ts: u64,
}

/// Where a blocked thread waited, decided at switch-out from the syscall it
/// was in (a table userspace fills, `SYSCALL_SITES`) and the sleep state.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitSite {
    /// Waiting for input: epoll/poll/select/accept, or a socket read in an
    /// interruptible sleep. Not a cause: the server had nothing to do.
    Idle = 0,
    /// futex and other lock waits.
    Lock = 1,
    /// Disk reads and writes, fsync; reads in an uninterruptible sleep.
    Io = 2,
    /// A major fault's I/O: blocked uninterruptibly outside any syscall.
    Fault = 3,
    /// nanosleep, clock_nanosleep and other timed sleeps.
    Sleep = 4,
    /// Waiting for the thread's own migration (sched_setaffinity).
    Migration = 5,
    /// Anything else (named by the syscall in records).
    Other = 6,
}

/// Number of [`WaitSite`]s.
pub const NUM_WAIT_SITES: usize = 7;

/// Entries in `SYSCALL_SITES` as written by userspace: a [`WaitSite`], or
/// this value for read-like calls whose site depends on the sleep state
/// (uninterruptible: `Io`, interruptible: `Idle`).
pub const SITE_BY_STATE: u32 = 15;

/// The [`WaitSite`] of a sleep, as u32: `by_syscall` is the sleeping
/// syscall's entry in `SYSCALL_SITES` (None: not in a syscall). One rule
/// for the kernel side's switches and for userspace's threads found
/// asleep when the probes start.
#[inline(always)]
pub fn wait_site_of(by_syscall: Option<u32>, uninterruptible: bool) -> u32 {
    match by_syscall {
        // Only a fault or another exception sleeps outside a syscall; an
        // uninterruptible one is a major fault waiting for its page.
        None if uninterruptible => WaitSite::Fault as u32,
        None => WaitSite::Other as u32,
        Some(SITE_BY_STATE) if uninterruptible => WaitSite::Io as u32,
        Some(SITE_BY_STATE) => WaitSite::Idle as u32,
        Some(site) => site,
    }
}

/// Syscall numbers covered by the `SYSCALL_SITES` table and the per-syscall
/// totals (a power of two: the index is masked, which the verifier follows).
/// Larger numbers wrap, which on x86-64 (under 470 syscalls) never happens.
pub const SYSCALL_SLOTS: u32 = 512;

/// Per-syscall totals of the target's threads, one per syscall number and CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct SyscallTotal {
    pub calls: u64,
    /// Enter to exit, summed.
    pub total_ns: u64,
    /// Time off the CPU inside the calls (blocked or waiting for a CPU).
    pub offcpu_ns: u64,
    /// Hard-IRQ and softirq time on the CPU inside the calls (not the
    /// call's own work; counted as IRQ time).
    pub irq_ns: u64,
    /// Time the hypervisor took the CPU inside the calls (not the call's
    /// own work; counted as steal).
    pub steal_ns: u64,
    /// Time spinning on a contended kernel spinlock inside the calls (a
    /// lock wait, counted as such: see [`Account::LockSpin`]).
    pub spin_ns: u64,
}

/// A syscall of a target thread whose own work on the CPU took at least
/// the off-CPU record minimum; shorter ones are only summed. (Its time off
/// the CPU is in the off-CPU records already.)
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct SyscallRecord {
    pub tid: u32,
    pub tgid: u32,
    pub nr: u32,
    /// On-CPU samples of the thread taken inside the call: fewer than its
    /// on-CPU time holds sample periods means the sampling timer was
    /// silent (see `SyscallSpan::silent_ns`).
    pub samples: u32,
    pub start_ns: u64,
    pub end_ns: u64,
    /// Time off the CPU inside the call, IRQ time and steal (with timer
    /// silence) inside it; the rest is the call's own work in the kernel.
    pub offcpu_ns: u64,
    pub irq_ns: u64,
    pub steal_ns: u64,
    /// Time spinning on contended kernel spinlocks inside the call.
    pub spin_ns: u64,
}

/// Slots of a thread's per-bucket account ([`ThreadBucket::ns`]): where one
/// target thread's time went in one time bucket. Off-CPU intervals long
/// enough for a record are in the records, not here (no double counting):
/// these slots hold the short ones, plus everything measured on the CPU.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Account {
    /// On a CPU (switch-in to switch-out, flushed at every sample), IRQs
    /// and steal while running included.
    OnCpu = 0,
    /// On-CPU kernel time of syscalls that ended here and were shorter
    /// than the record minimum.
    SyscallCpu = 1,
    /// Part of `SyscallCpu` in syscalls that migrate the thread.
    MigrationCpu = 2,
    /// Stolen by the hypervisor while the thread was on the CPU, as the
    /// run queue's steal clock (`prev_steal_time_rq`) reports it, ns.
    Steal = 3,
    /// Hard-IRQ and softirq time on the thread's CPU while it ran.
    HardIrq = 4,
    SoftIrq = 5,
    /// Hard-IRQ and softirq time on the CPU the thread waited runnable for
    /// (part of the runnable wait).
    HardIrqWait = 6,
    SoftIrqWait = 7,
    /// Short off-CPU intervals: the runnable part (not in a migration).
    Runnable = 8,
    /// Short off-CPU intervals: the blocked part, by [`WaitSite`]
    /// (`Blocked + site`); a migration's interval goes whole to `Migration`.
    Blocked = 9,
    /// On-CPU samples by what the thread was doing: user mode, a syscall,
    /// kernel mode outside syscalls and IRQs (fault handling), an IRQ.
    SamplesUser = 9 + NUM_WAIT_SITES as u32,
    SamplesSyscall = 10 + NUM_WAIT_SITES as u32,
    SamplesFault = 11 + NUM_WAIT_SITES as u32,
    SamplesIrq = 12 + NUM_WAIT_SITES as u32,
    /// Time the thread's CPU's sampling timer was silent while the thread
    /// was on it, beyond what the steal clock, IRQs and time off the CPU
    /// explain: a vCPU the host held without reporting steal, or a host
    /// that delivered the guest's timer late while the vCPU ran (measured
    /// here: both happen, and a guest cannot tell them apart), so not
    /// booked as steal. Last, so run files from before it still load.
    TimerSilence = 13 + NUM_WAIT_SITES as u32,
    /// On the CPU spinning on a contended kernel spinlock (the kernel's
    /// `contention_begin`/`end` tracepoints), less IRQs, the thread's own
    /// steal and `LockHolderSteal`: a lock wait done on the CPU.
    LockSpin = 14 + NUM_WAIT_SITES as u32,
    /// The part of a spin that the other CPUs' steal clocks cover (the
    /// most any one of them moved during the spin, up to the spin): a
    /// spinlock held across a host stall of its holder's vCPU (lock-holder
    /// preemption), the environment's time.
    LockHolderSteal = 15 + NUM_WAIT_SITES as u32,
    /// On the CPU inside the runtime's garbage collector, run by the
    /// thread itself (CPython collects on the allocating thread): between
    /// the runtime's own gc start and done probes (USDT), the thread's
    /// time on the CPU (part of `OnCpu`; its time off the CPU meanwhile
    /// stays in the off-CPU slots and records).
    RuntimeGc = 16 + NUM_WAIT_SITES as u32,
    /// Short off-CPU intervals: the runnable part after the queued thread
    /// was moved to another CPU (load balancing), not in `Runnable`.
    RunnableMoved = 17 + NUM_WAIT_SITES as u32,
}

/// Number of [`Account`] slots.
pub const NUM_ACCOUNT: usize = 18 + NUM_WAIT_SITES;

/// CPUs whose steal clocks a kernel spin compares (`CPU_RQS`); a larger
/// machine's CPUs beyond this are not looked at for lock-holder steal.
pub const SPIN_CPUS: u32 = 64;

/// One target thread's account of one time bucket, emitted when the thread
/// first does something in a later bucket (so at most one per thread per
/// bucket in which it did anything).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ThreadBucket {
    pub tid: u32,
    pub tgid: u32,
    pub epoch: u64,
    /// Short syscall with the most on-CPU kernel time here, number + 1 (0: none).
    pub top_syscall: u32,
    pub _pad: u32,
    pub top_syscall_ns: u64,
    pub ns: [u64; NUM_ACCOUNT],
}

/// One server-side request seen passively: by `--syscalls` (data read from
/// a socket, then the response written on it) or by `--uprobe` (one call of
/// the function, entry to return).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct RequestRecord {
    pub tgid: u32,
    pub tid: u32,
    /// Socket file descriptor (`--syscalls`), or `UPROBE_FD` for a call.
    pub fd: u32,
    /// Reads that returned data before the response (1: the simple
    /// one-read-one-write pattern; more: partial reads or pipelining).
    pub reads: u32,
    /// Bytes those reads returned, and the response write sent: a read of
    /// several typical requests' bytes answered at once is pipelining.
    pub bytes_in: u32,
    pub bytes_out: u32,
    /// When the request began: the arrival of its first bytes in the
    /// socket (`sk_data_ready`) where that was seen, otherwise its first read.
    pub start_ns: u64,
    pub end_ns: u64,
    /// The last arrival in the socket of bytes read before the response
    /// (`start_ns` when one arrival, or none seen): a read that carried
    /// several requests carried ones that arrived from `start_ns` to here.
    pub last_start_ns: u64,
}

/// One exchange of the target with an upstream: a TCP (or connected UDP)
/// socket of the target that is not one of its accepted connections (its
/// local port is not a port the target listens on), on which the target
/// sent, then read a reply. Paired at the socket layer's tracepoints.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct UpstreamRecord {
    pub tgid: u32,
    /// The thread that sent the request, and the one that read the reply
    /// (the same in a thread-per-request or event-loop server).
    pub tid: u32,
    pub reader_tid: u32,
    /// `AF_INET` (2) or `AF_INET6` (10).
    pub family: u16,
    /// The peer's port, host order.
    pub port: u16,
    /// The peer's address: 4 bytes for IPv4, 16 for IPv6, network order.
    pub addr: [u8; 16],
    /// The connection, numbered by the socket's address (as
    /// `SOCKET_CONN`): exchanges on one connection share it.
    pub conn: u32,
    pub bytes_out: u32,
    /// When the request's first bytes were sent.
    pub sent_ns: u64,
    /// When the reply's first bytes arrived in the socket (`sk_data_ready`;
    /// 0: not seen), and when the target first read them.
    pub arrived_ns: u64,
    pub read_ns: u64,
}

/// What held a target thread up in memory management, on its own path.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemStallKind {
    /// Direct reclaim: the allocation found the machine short of memory
    /// (`vmscan:mm_vmscan_direct_reclaim_begin`/`end`).
    DirectReclaim = 1,
    /// Reclaim in the thread's memory cgroup at its limit
    /// (`vmscan:mm_vmscan_memcg_reclaim_begin`/`end`).
    CgroupReclaim = 2,
    /// Direct compaction for a higher-order allocation (THP)
    /// (`compaction:mm_compaction_begin`/`end`).
    Compaction = 3,
    /// Over its cgroup's memory.high on return to user space: reclaim,
    /// then a penalty sleep (`__mem_cgroup_handle_over_high`).
    MemoryHigh = 4,
    /// Waiting for the process's mmap_lock (another thread's mmap, munmap,
    /// mprotect or fault holds it) (`mmap_lock:mmap_lock_start_locking` to
    /// `mmap_lock_acquire_returned`).
    MmapLock = 5,
    /// A fault that did not go through the page cache
    /// (`filemap:mm_filemap_fault` not hit), so for an anonymous (or
    /// shmem) page, not a file's, and that was major (read its page back
    /// from swap) or slept for a read already under way (swap readahead):
    /// from the fault's entry (`exceptions:page_fault_user` / `_kernel`) to
    /// the kernel counting it, less the stalls timed inside it.
    SwapIn = 6,
}

/// One memory stall of a target thread at least `min_offcpu_record_ns` long.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct MemStallRecord {
    pub tid: u32,
    pub tgid: u32,
    /// [`MemStallKind`] as u32.
    pub kind: u32,
    pub _pad: u32,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// One pause of a managed runtime that stopped every thread of the target
/// process at once, run by thread `tid`: Go's stopped world, from the entry
/// of `runtime.stopTheWorldWithSema` to the entry of
/// `runtime.startTheWorldWithSema` (the world restarts inside the latter,
/// microseconds later).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct RuntimePauseRecord {
    pub tid: u32,
    pub tgid: u32,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// In-kernel state of one upstream connection (by socket address).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct UpstreamState {
    /// First send since the last reply was read (0: nothing in flight).
    pub sent_ns: u64,
    /// First arrival since that send (0: none yet).
    pub arrived_ns: u64,
    pub tid: u32,
    pub bytes_out: u32,
}

/// `RequestRecord::fd` of a function call.
pub const UPROBE_FD: u32 = u32::MAX;

/// `RequestRecord::fd` bit of a request seen at the socket tracepoints
/// (`--syscall-time sampled`): the rest is a connection number taken from
/// the kernel socket's address, not a descriptor. Descriptors stay below
/// 2^30 (the kernel's `nr_open` ceiling), and the number is kept below
/// 2^31 + 2^30, so neither a descriptor nor `UPROBE_FD` can take this form.
pub const SOCKET_CONN: u32 = 1 << 31;

/// `--syscalls` pairing state of one connection (tgid, fd).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ConnState {
    /// When the pending request began (see `RequestRecord::start_ns`).
    pub start_ns: u64,
    /// See `RequestRecord::last_start_ns`.
    pub last_start_ns: u64,
    /// First and last arrival of data in the socket since its last read
    /// (0: none seen): the next read consumes them.
    pub arrived_ns: u64,
    pub last_arrived_ns: u64,
    pub reads: u32,
    /// Non-zero: the response was written; the next read starts a request.
    pub responded: u32,
    pub bytes_in: u64,
}

/// `--uprobe` state of one thread that called the function.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CallState {
    /// Start of the call being timed; 0 while none is (CLOCK_MONOTONIC is
    /// never 0 once the system runs).
    pub start_ns: u64,
    /// Nested calls of the function inside the timed one (recursion):
    /// their returns do not end it.
    pub depth: u64,
    /// The thread's calls so far (outermost ones): every `uprobe_every`-th
    /// is timed. Per thread, so exactly one in N of a thread's calls is
    /// timed wherever it runs (a per-CPU count falls short when the thread
    /// migrates), without an atomic shared by all CPUs.
    pub seq: u64,
}

/// Load-time configuration of the kernel side (one global).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Config {
    /// Process whose threads are watched.
    pub target_tgid: u32,
    /// Non-zero: processes forked by a watched process are watched too.
    pub follow_children: u32,
    /// A time bucket is `1 << bucket_shift` ns wide: a shift, not a 64-bit
    /// division, on every event.
    pub bucket_shift: u64,
    /// Off-CPU intervals at least this long get a ring-buffer record.
    pub min_offcpu_record_ns: u64,
    /// Byte offsets in `struct task_struct` of `pid` and `tgid`, read from the
    /// running kernel's BTF at load time (the programs get task pointers from
    /// BTF tracepoints and read these fields directly).
    pub task_pid_offset: u64,
    pub task_tgid_offset: u64,
    /// `task->thread_info.cpu`: the CPU a woken task was queued on.
    pub task_cpu_offset: u64,
    /// `task->on_rq`: `TASK_ON_RQ_MIGRATING` (2) when a queued task is
    /// being moved (load balancing, an affinity change), 0 at a wakeup's
    /// placement.
    pub task_on_rq_offset: u64,
    /// `struct pt_regs` offsets of the first syscall argument and of the
    /// syscall number (`--syscalls` reads both at syscall exit), and of
    /// `ax` (the sampled syscall context reads `orig_ax` and `ax` of the
    /// registers a task saved when it entered the kernel).
    pub regs_arg0_offset: u64,
    pub regs_nr_offset: u64,
    pub regs_ax_offset: u64,
    /// `--uprobe`: time one call in this many (1 = every call).
    pub uprobe_every: u64,
    /// Non-zero: every program returns at once (the cost of the attach
    /// points themselves, for `cargo xtask bench probes`). CONFIG is frozen
    /// read-only data, so the verifier prunes this branch when it is 0.
    pub floor_only: u64,
    /// Non-zero: `sys_exit` also pairs socket reads and writes (`--syscalls`).
    pub passive_syscalls: u64,
    /// Non-zero: `sys_enter`/`sys_exit` are attached and keep each thread's
    /// current syscall (exact syscall time). Zero (`--syscall-time
    /// sampled`): the syscall is read from the task's saved registers at
    /// switch-out and at each sample, and `--syscalls` pairs requests at the
    /// socket tracepoints instead.
    pub syscall_hooks: u64,
    /// The on-CPU sampler's period: what one sample stands for.
    pub sample_period_ns: u64,
    /// Offsets for the CPU's cumulative steal, reached through the task:
    /// `task->se.cfs_rq`, `cfs_rq->rq`, then `rq_steal_offset` from the run
    /// queue (added wrapping: on KVM it points below it, at the per-CPU
    /// `steal_time` page; elsewhere at `rq->prev_steal_time_rq`).
    /// `task_cfs_rq_offset` 0: steal is not measured (kernel without it).
    pub task_cfs_rq_offset: u64,
    pub cfs_rq_rq_offset: u64,
    pub rq_steal_offset: u64,
    /// `rq->prev_steal_time_rq`: the run queue's own copy of the steal
    /// clock, which `__schedule` brings up to date (`update_rq_clock`) just
    /// before sched_switch fires. Read there by a direct load instead of
    /// the live clock's helper call (a probe read cost ~45 ns per switch
    /// here); every other reader (samples, syscall boundaries, IRQs) reads
    /// the live clock, which the copy never runs ahead of.
    pub rq_steal_copy_offset: u64,
    /// Non-zero (`--stacks`): stack ids at switch-outs, and a record per
    /// on-CPU sample with its stacks.
    pub stacks: u64,
    /// CPUs a kernel spin compares steal clocks of: min(possible CPUs,
    /// [`SPIN_CPUS`]).
    pub spin_cpus: u64,
    /// Non-zero: the socket tracepoints pair `--syscalls` requests.
    pub pair_at_sockets: u64,
    /// Non-zero: `sk_data_ready` starts `--syscalls` requests at their
    /// bytes' arrival (`--from-arrival`).
    pub requests_from_arrival: u64,
    /// Non-zero: the socket tracepoints time the target's upstream
    /// exchanges ([`UpstreamRecord`]).
    pub upstreams: u64,
    /// `struct sock_common` offsets (the start of `struct sock`), from the
    /// kernel's BTF: the family, the local port (host order), the peer's
    /// port (network order) and IPv4 and IPv6 addresses.
    pub skc_family_offset: u64,
    pub skc_num_offset: u64,
    pub skc_dport_offset: u64,
    pub skc_daddr_offset: u64,
    pub skc_v6_daddr_offset: u64,
    /// The kernel's `flush_tlb_func` (from /proc/kallsyms; 0: unknown): a
    /// cross-CPU call of it is a TLB shootdown.
    pub tlb_flush_func: u64,
    /// `task->sched_info.last_arrival` and `rq->clock`: when the kernel
    /// last put a task on a CPU, stamped by the scheduler itself at every
    /// switch-in (traced or not), in the run queue's clock. They date a
    /// switch-in the kernel did not trace ([`Total::UntracedSwitches`]).
    /// 0: not available (kernel without sched_info), such a switch-in
    /// stays undated.
    pub task_last_arrival_offset: u64,
    pub rq_clock_offset: u64,
}

/// Cross-CPU function calls (IPIs) one thread queued to a CPU while a
/// target thread ran there (`csd:csd_queue_cpu`), by sender tid.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct IpiSender {
    pub tgid: u32,
    /// The syscall the sender was in at its first call (number + 1; 0:
    /// not in a syscall, e.g. a page fault or a kernel thread).
    pub syscall: u32,
    pub comm: [u8; 16],
    pub calls: u64,
    /// Of them, TLB shootdowns (the function is `flush_tlb_func`).
    pub tlb_shootdowns: u64,
    /// Of them, calls made inside that same syscall.
    pub in_syscall: u64,
}

/// Senders the kernel side keeps (more are counted in `Total::IpiSendersLost`).
pub const IPI_SENDER_SLOTS: u32 = 1024;

/// Device hard IRQs (`irq_handler_entry/exit`) that took a CPU from a
/// target thread, per IRQ number and CPU: the source a report names and
/// an `irq-affinity=` experiment moves.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct DeviceIrqTime {
    /// Handlers run while a target thread ran on the CPU.
    pub count: u64,
    /// Their time (host steal inside them excluded), ns.
    pub ns: u64,
    /// Handlers run while a target thread waited runnable for the CPU,
    /// and their time, ns.
    pub wait_count: u64,
    pub wait_ns: u64,
}

/// IRQ numbers the device table keeps by number; higher ones share the
/// last slot (userspace reports it as such). Per CPU: 1,024 × 32 bytes.
pub const DEVICE_IRQ_SLOTS: u32 = 1024;

/// Slots of the direct-mapped thread table (`tid % THREAD_SLOTS`).
///
/// An array lookup is inlined by the verifier and costs a few ns, against
/// tens of ns for a hash lookup; every sched_switch and sched_wakeup on the
/// machine asks "is this a target thread?". Two target threads whose tids
/// share a slot: the second goes to a spill hash map, and the slot's `spill`
/// flag tells lookups to look there too.
pub const THREAD_SLOTS: u32 = 1 << 16;

/// `ThreadState::fault_flags`: the fault went through the page cache
/// (`mm_filemap_fault`), so its page is a file's, not one from swap.
pub const FAULT_FILE: u32 = 1;
/// `ThreadState::fault_flags`: the fault slept uninterruptibly outside any
/// other memory stall (for its page's read, or for a read already under
/// way: a minor fault on a page that swap readahead is still reading).
pub const FAULT_SLEPT: u32 = 2;

/// Per-thread state kept by the kernel side for every target thread.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ThreadState {
    /// Thread id owning this slot, 0 = empty.
    pub tid: u32,
    /// Non-zero: some target thread mapping to this slot lives in the spill map.
    pub spill: u32,
    pub tgid: u32,
    /// [`OffCpuKind`] of the current off-CPU interval, 0 when on CPU / unknown.
    pub off_kind: u32,
    pub off_ts: u64,
    /// When the blocked thread was woken (0 = not yet).
    pub wakeup_ts: u64,
    pub cpu_out: u32,
    /// While preempted: the task that has run longest on `cpu_out` since
    /// (the one that really took the CPU, not just the first to run).
    pub next_pid: u32,
    pub next_comm: [u8; 16],
    /// How long `next_pid` ran in one go.
    pub next_ran_ns: u64,
    /// CPU whose run queue the thread waits on while runnable (where it was
    /// preempted, or where its wakeup put it).
    pub wait_cpu: u32,
    /// [`WaitSite`] of the current off-CPU interval, decided at switch-out.
    pub off_site: u32,
    /// Syscall in progress, number + 1 (0: none), since `sys_enter_ts`.
    pub syscall: u32,
    /// `--stacks`: kernel stack id at the switch-out (user: `off_ustack`).
    pub off_kstack: i32,
    pub off_ustack: i32,
    /// On-CPU samples of the thread since `sys_enter_ts`.
    pub sys_samples: u32,
    pub sys_enter_ts: u64,
    /// Time off the CPU, in IRQs on it, and stolen, since `sys_enter_ts`.
    pub sys_offcpu_ns: u64,
    pub sys_irq_ns: u64,
    pub sys_steal_ns: u64,
    /// Kernel spinlock spin (with its lock-holder steal) inside the
    /// current syscall.
    pub sys_spin_ns: u64,
    /// Since the thread's last on-CPU sample, or its switch-in when another
    /// task was sampled on that CPU meanwhile or it changed CPUs
    /// (`window_start_ts`): hard-IRQ time while it ran, steal-clock steal,
    /// and time off the CPU. What the gap to its next sample holds beyond
    /// these is timer silence.
    pub window_start_ts: u64,
    pub window_hardirq_ns: u64,
    pub window_steal_ns: u64,
    pub window_away_ns: u64,
    /// Timer silence booked as steal that the steal clock may still
    /// report (the run queue's copy of it moves at ticks, after the
    /// sample), and when it was booked.
    pub silence_credit_ns: u64,
    pub silence_credit_ts: u64,
    /// On the CPU since this time (switch-in, or the last sample).
    pub run_ts: u64,
    /// Run queue the thread runs on (kernel address) and its cumulative
    /// steal at `run_ts`.
    pub rq: u64,
    pub steal_mark: u64,
    /// Bucket the account below belongs to.
    pub acct_epoch: u64,
    pub top_syscall: u32,
    /// Who woke the thread from its current blocked interval, seen by
    /// `sched_waking` in the waker's own context: its tid and tgid, and
    /// [`WakeContext`] as u32 (0: no waking seen yet).
    pub waker_tid: u32,
    pub waker_tgid: u32,
    pub waker_context: u32,
    /// `--stacks`: the waker's stacks at that wakeup (see
    /// [`OffCpuRecord::waker_kstack`]).
    pub waker_kstack: i32,
    pub waker_ustack: i32,
    pub top_syscall_ns: u64,
    /// The memory stall in progress ([`MemStallKind`] as u32, 0: none)
    /// and when it began: the outermost one (memory.high handling
    /// reclaims inside it).
    pub mem_stall: u32,
    /// What the page fault in progress did ([`FAULT_FILE`],
    /// [`FAULT_SLEPT`]); cleared when the kernel counts the fault (minor
    /// or major).
    pub fault_flags: u32,
    pub mem_stall_ts: u64,
    /// When the page fault in progress began (exceptions:page_fault_user
    /// or page_fault_kernel; 0: none in progress, or its start unseen);
    /// cleared with `fault_flags`.
    pub fault_ts: u64,
    /// When the runtime's garbage collection in progress on this thread
    /// began (its gc start probe; 0: none): its time on the CPU goes to
    /// [`Account::RuntimeGc`] too.
    pub gc_ts: u64,
    /// When the thread, queued runnable, was last moved to another CPU's
    /// queue (load balancing, another thread's affinity change; 0: not
    /// moved in this interval): its wait from then on is the move's.
    pub moved_ts: u64,
    /// When this thread began stopping the runtime's world (Go's
    /// `runtime.stopTheWorldWithSema`; 0: not stopping it).
    pub stw_ts: u64,
    pub acct: [u64; NUM_ACCOUNT],
}

/// Per-CPU state for IRQ attribution and duration measurement.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CpuState {
    /// Target thread running on this CPU now, 0 if none.
    pub target_tid: u32,
    /// Target thread preempted on this CPU and still waiting, 0 if none.
    pub waiting_tid: u32,
    /// The last on-CPU sample on this CPU, whichever task it found.
    pub last_sample_ts: u64,
    /// Last context switch on this CPU while `waiting_tid` waits.
    pub last_switch_ts: u64,
    /// Entry time of the hard IRQ in progress (0 = none or not attributed).
    pub hardirq_start: u64,
    /// Entry time of the softirq in progress (0 = none or not attributed).
    pub softirq_start: u64,
    /// Hard-IRQ time nested inside the softirq in progress.
    pub softirq_nested_ns: u64,
    /// Whether the IRQ in progress started while a target thread was
    /// waiting for this CPU rather than running on it: bit 0 hard IRQ,
    /// bit 1 softirq.
    pub irq_while_waiting: u64,
    /// This CPU's run queue (set when a target thread switches in here; 0
    /// until then), for its steal clock.
    pub rq: u64,
    /// The steal clock at the entry of the timed hard IRQ / softirq in
    /// progress: a host stall inside an IRQ is steal, not IRQ work.
    pub hardirq_steal_mark: u64,
    pub softirq_steal_mark: u64,
    /// Timed IRQ time on this CPU while a target ran, summed (never reset):
    /// marks let a kernel spin take its IRQs out.
    pub irq_ns_sum: u64,
    /// The kernel spin of the running target thread in progress: the
    /// lock's address (0: none), its start, the mark of `irq_ns_sum` and
    /// every CPU's steal clock (by CPU number, this one's included) at its
    /// start. A spinning thread cannot leave its CPU (spinlocks disable
    /// preemption), so per-CPU is enough.
    pub spin_lock: u64,
    pub spin_start: u64,
    pub spin_irq_mark: u64,
    pub spin_steal_marks: [u64; SPIN_CPUS as usize],
    /// Never-reset totals (layout: [`Total`], [`TOTAL_IRQ_KIND_BASE`], ...),
    /// kept here so one lookup per program run serves both.
    pub totals: [u64; NUM_TOTALS as usize],
    /// Softirqs by vector number; 16 slots (10 used) so that the index is
    /// bounded by a mask the verifier can follow (LLVM drops the `< 10`
    /// check in favour of `& 15`).
    pub softirqs: [u64; 16],
    /// Whether a hard IRQ runs on this CPU now (1) and which softirq (its
    /// vector plus one, 0: none), kept for every IRQ, timed or not, so that
    /// a wakeup can tell an interrupt's wakeup from the interrupted task's.
    pub in_hardirq: u32,
    pub in_softirq: u32,
    /// The task the last context switch seen on this CPU made current
    /// (sched_switch's next, or the current task an IRQ found), and
    /// whether one was seen yet (1): an IRQ that finds another task
    /// current found a switch the kernel did not trace.
    pub cur_pid: u32,
    pub cur_known: u32,
    /// CLOCK_MONOTONIC minus this CPU's run-queue clock (wrapping), taken
    /// at the last target switch here (where `__schedule` has just brought
    /// the run-queue clock up to date); 0 until then. Converts a task's
    /// `sched_info.last_arrival` to the probes' clock; the two clocks drift
    /// apart by parts per million (measured here: ~12 µs a second).
    pub clock_offset: u64,
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: all of these are #[repr(C)] structs of integers and byte
    // arrays, valid for any bit pattern.
    unsafe impl aya::Pod for super::Bucket {}
    unsafe impl aya::Pod for super::OffCpuRecord {}
    unsafe impl aya::Pod for super::Config {}
    unsafe impl aya::Pod for super::ThreadState {}
    unsafe impl aya::Pod for super::CpuState {}
    unsafe impl aya::Pod for super::RequestRecord {}
    unsafe impl aya::Pod for super::UpstreamRecord {}
    unsafe impl aya::Pod for super::MemStallRecord {}
    unsafe impl aya::Pod for super::RuntimePauseRecord {}
    unsafe impl aya::Pod for super::UpstreamState {}
    unsafe impl aya::Pod for super::ConnState {}
    unsafe impl aya::Pod for super::IpiSender {}
    unsafe impl aya::Pod for super::DeviceIrqTime {}
    unsafe impl aya::Pod for super::CallState {}
    unsafe impl aya::Pod for super::SyscallTotal {}
    unsafe impl aya::Pod for super::SyscallRecord {}
    unsafe impl aya::Pod for super::ThreadBucket {}
}
