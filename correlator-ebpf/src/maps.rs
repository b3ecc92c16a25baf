//! Every map and the load-time configuration, in one place: userspace
//! finds them by name (`probes/mod.rs`).

use aya_ebpf::{
    Global,
    btf_maps::StackTrace,
    macros::{btf_map, map},
    maps::{Array, HashMap, LruHashMap, PerCpuArray, RingBuf},
};
use correlator_common::{
    BUCKET_SLOTS, Bucket, CallState, Config, ConnState, CpuState, DEVICE_IRQ_SLOTS, DeviceIrqTime,
    IPI_SENDER_SLOTS, IpiSender, SPIN_CPUS, STACK_DEPTH, STACK_OVERFLOW_SLOTS, STACK_SLOTS,
    SYSCALL_SLOTS, SyscallTotal, THREAD_SLOTS, ThreadState, UpstreamState,
};

#[unsafe(no_mangle)]
pub(crate) static CONFIG: Global<Config> = Global::new(Config {
    target_tgid: 0,
    follow_children: 0,
    bucket_shift: 19,
    min_offcpu_record_ns: 50_000,
    task_pid_offset: 0,
    task_tgid_offset: 0,
    task_cpu_offset: 0,
    task_on_rq_offset: 0,
    regs_arg0_offset: 112,
    regs_nr_offset: 120,
    regs_ax_offset: 80,
    uprobe_every: 1,
    floor_only: 0,
    passive_syscalls: 0,
    syscall_hooks: 1,
    sample_period_ns: 1_000_000,
    task_cfs_rq_offset: 0,
    cfs_rq_rq_offset: 0,
    rq_steal_offset: 0,
    rq_steal_copy_offset: 0,
    stacks: 0,
    spin_cpus: 0,
    pair_at_sockets: 0,
    requests_from_arrival: 0,
    upstreams: 0,
    skc_family_offset: 16,
    skc_num_offset: 14,
    skc_dport_offset: 12,
    skc_daddr_offset: 0,
    skc_v6_daddr_offset: 56,
    tlb_flush_func: 0,
    task_last_arrival_offset: 0,
    rq_clock_offset: 0,
});

/// Ring of time buckets, per CPU.
#[map]
pub(crate) static BUCKETS: PerCpuArray<Bucket> = PerCpuArray::with_max_entries(BUCKET_SLOTS, 0);

/// Per-CPU IRQ attribution state and totals.
#[map]
pub(crate) static CPUS: PerCpuArray<CpuState> = PerCpuArray::with_max_entries(1, 0);

/// Each CPU's run queue address, by CPU number (0: not seen yet), for
/// the steal clocks a kernel spin compares (`locks`).
#[map]
pub(crate) static CPU_RQS: Array<u64> = Array::with_max_entries(SPIN_CPUS, 0);

/// Direct-mapped table of target threads (see `THREAD_SLOTS`).
#[map]
pub(crate) static THREADS: Array<ThreadState> = Array::with_max_entries(THREAD_SLOTS, 0);

/// Target threads whose slot in THREADS was taken by another target thread.
#[map]
pub(crate) static SPILL: HashMap<u32, ThreadState> = HashMap::with_max_entries(4096, 0);

/// Processes forked by the target (only with follow_children), by tgid.
#[map]
pub(crate) static CHILD_TGIDS: HashMap<u32, u32> = HashMap::with_max_entries(4096, 0);

/// Off-CPU interval records.
#[map]
pub(crate) static RECORDS: RingBuf = RingBuf::with_byte_size(8 << 20, 0);

/// Passive request records (`--syscalls`, `--uprobe`).
#[map]
pub(crate) static REQUESTS: RingBuf = RingBuf::with_byte_size(4 << 20, 0);

/// `--syscalls` pairing state by (tgid << 32 | fd). LRU: connections that
/// close are forgotten without a close probe.
#[map]
pub(crate) static CONNS: LruHashMap<u64, ConnState> = LruHashMap::with_max_entries(16384, 0);

/// Local ports the target listens on, indexed by port (non-zero: listens;
/// written by userspace before attaching, from /proc; set by
/// `inet_sock_set_state` when the target starts listening): a socket on
/// one of them is an accepted connection, any other TCP socket of the
/// target is an upstream. An array, not a hash: every socket transfer of
/// the target asks, and an array lookup is inlined where a hash lookup is
/// a call (256 KiB).
#[map]
pub(crate) static LISTEN_PORTS: Array<u32> = Array::with_max_entries(65536, 0);

/// Which sockets may have an entry in `CONNS` (bit `SEEN_CONN`) or
/// `UPSTREAM_CONNS` (bit `SEEN_UPSTREAM`), by a hash of the socket's
/// ports (`passive::seen_slot`): set before an entry is inserted, never
/// cleared (a stale or shared slot only costs the lookup it would have cost
/// anyway).
/// `sk_data_ready` runs for every arrival on the machine (a loopback
/// client's replies included) and asked both hashes each time; the
/// inlined array lookup answers "no entry" for nearly all of them.
#[map]
pub(crate) static SOCKETS_SEEN: Array<u32> = Array::with_max_entries(SOCKETS_SEEN_SLOTS, 0);

pub(crate) const SOCKETS_SEEN_SLOTS: u32 = 16384;

/// The target's upstream connections with an exchange in flight or done,
/// by socket address. LRU: connections that close without being seen to
/// are forgotten.
#[map]
pub(crate) static UPSTREAM_CONNS: LruHashMap<u64, UpstreamState> =
    LruHashMap::with_max_entries(16384, 0);

/// Cross-CPU calls queued to a target thread's CPU, by sender tid
/// ([`correlator_common::IpiSender`]).
#[map]
pub(crate) static IPI_SENDERS: HashMap<u32, IpiSender> =
    HashMap::with_max_entries(IPI_SENDER_SLOTS, 0);

/// Device IRQ time taken from target threads, by IRQ number
/// ([`correlator_common::DeviceIrqTime`]).
#[map]
pub(crate) static DEVICE_IRQS: PerCpuArray<DeviceIrqTime> =
    PerCpuArray::with_max_entries(DEVICE_IRQ_SLOTS, 0);

/// Memory stall records ([`correlator_common::MemStallRecord`]).
#[map]
pub(crate) static MEM_STALLS: RingBuf = RingBuf::with_byte_size(1 << 20, 0);

/// Runtime pause records ([`correlator_common::RuntimePauseRecord`]): a
/// few per garbage collection at most.
#[map]
pub(crate) static RUNTIME_PAUSES: RingBuf = RingBuf::with_byte_size(64 << 10, 0);

/// Upstream exchange records ([`correlator_common::UpstreamRecord`]).
#[map]
pub(crate) static UPSTREAMS: RingBuf = RingBuf::with_byte_size(2 << 20, 0);

/// [`WaitSite`] of a blocked wait inside each syscall (index = number),
/// written by userspace before attaching (the table lives in one place,
/// `timeline::syscalls`); `SITE_BY_STATE` for read-like calls.
#[map]
pub(crate) static SYSCALL_SITES: Array<u32> = Array::with_max_entries(SYSCALL_SLOTS, 0);

/// Per-syscall totals of the target's threads.
#[map]
pub(crate) static SYSCALL_TOTALS: PerCpuArray<SyscallTotal> =
    PerCpuArray::with_max_entries(SYSCALL_SLOTS, 0);

/// Per-thread bucket accounts ([`ThreadBucket`]).
#[map]
pub(crate) static ACCOUNTS: RingBuf = RingBuf::with_byte_size(8 << 20, 0);

/// Syscalls at least `min_offcpu_record_ns` long ([`SyscallRecord`]).
#[map]
pub(crate) static SYSCALL_RECORDS: RingBuf = RingBuf::with_byte_size(2 << 20, 0);

/// `--uprobe` state of threads inside a sampled call, by tid.
#[map]
pub(crate) static CALLS: LruHashMap<u32, CallState> = LruHashMap::with_max_entries(16384, 0);

/// Per-CPU scratch space for a fresh thread state (too large for the
/// 512-byte BPF stack).
#[map]
pub(crate) static SCRATCH: PerCpuArray<ThreadState> = PerCpuArray::with_max_entries(1, 0);

/// `--stacks`: kernel and user stacks of samples and switch-outs, by id.
/// Preallocated by the kernel (`STACK_SLOTS` × `STACK_DEPTH` × 8 bytes);
/// a stack whose hash slot holds another stack goes to `STACKS_OVERFLOW`.
#[btf_map]
pub(crate) static STACKS: StackTrace<STACK_SLOTS, 0, STACK_DEPTH> = StackTrace::new();

/// `--stacks`: the stacks that collided in `STACKS` (see
/// [`correlator_common::STACK_OVERFLOW_SLOTS`]); one that collides here
/// too is counted, not stored.
#[btf_map]
pub(crate) static STACKS_OVERFLOW: StackTrace<STACK_OVERFLOW_SLOTS, 0, STACK_DEPTH> =
    StackTrace::new();

/// `--stacks`: one record per on-CPU sample ([`correlator_common::SampleRecord`]).
#[map]
pub(crate) static SAMPLES: RingBuf = RingBuf::with_byte_size(1 << 20, 0);
