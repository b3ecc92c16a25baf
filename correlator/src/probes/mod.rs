//! Kernel probes: load the eBPF object, attach every program, drain the
//! per-CPU buckets and the ring buffer into a [`Timeline`], and account for
//! every event the kernel side could not deliver.

mod attach;
pub mod btf;
pub mod calibrate;
pub mod goruntime;
pub mod stats_windows;
mod totals;
pub mod tracefs;
pub mod usdt;

pub use attach::{PERF_EVENTS, SYSCALL_HOOKS, TRACEPOINTS};
use attach::{
    SocketHooks, SocketUse, ThreadTable, attach_all, attach_memory, attach_passive,
    attach_runtime_gc, attach_sockets, bpf_stats_sysctl_on, load_error,
};
pub use totals::{IRQ_KIND_NAMES, KernelTotals};

use std::{os::fd::OwnedFd, time::Duration};

use anyhow::{Context as _, Result, bail};
use aya::{
    Ebpf, EbpfLoader,
    maps::{Array, HashMap, MapData, PerCpuArray, RingBuf, StackTraceMap},
    sys::{Stats, enable_stats},
};
use correlator_common::{
    BUCKET_SLOTS, Bucket, Config, CpuState, MemStallRecord, NUM_COUNTERS, NUM_IRQ_KINDS,
    NUM_SOFTIRQ_VECTORS, NUM_TOTALS, OffCpuRecord, RequestRecord, RuntimePauseRecord,
    STACK_OVERFLOW_SLOTS, STACK_SLOTS, SYSCALL_SLOTS, SampleRecord, SyscallRecord, SyscallTotal,
    TOTAL_IRQ_KIND_BASE, ThreadBucket, Total, UpstreamRecord,
};
use serde::{Deserialize, Serialize};

use crate::{
    clock,
    latency::passive::{PassiveSource, PassiveStats},
    target::Target,
    timeline::{
        OffCpu, SyscallSpan, ThreadAccount, Timeline,
        memory::MemStall,
        pauses::RuntimePause,
        stacks::{RawStacks, Sample},
        syscalls,
        upstreams::UpstreamExchange,
    },
};

/// The compiled kernel programs, built by build.rs through aya-build.
static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/correlator"));

/// What to watch and how finely.
#[derive(Clone, Debug)]
pub struct ProbeConfig {
    pub follow_children: bool,
    pub bucket: Duration,
    pub min_offcpu_record: Duration,
    /// Off-CPU records kept in memory at most; more are counted as lost.
    pub max_records: usize,
    /// Ring-buffer size in bytes (a power-of-two number of pages).
    pub ring_bytes: u32,
    /// Server-side request latency without load: `--syscalls` or `--uprobe`.
    pub passive: Option<PassiveSource>,
    /// On-CPU samples of target threads per second (each CPU).
    pub sample_hz: u32,
    /// Kernel and user stacks of samples and off-CPU records.
    pub stacks: bool,
    /// Keep the kernel's BPF run-time statistics on while attached (each
    /// program run then pays two clock reads); `watch` turns them on one
    /// second in sixty instead ([`Probes::set_stats`]).
    pub bpf_stats: bool,
    pub syscall_time: SyscallTime,
    /// Where `--syscalls` requests start: their bytes' arrival in the
    /// socket (`sk_data_ready`) by default, or the server's first read.
    pub request_start: RequestStart,
    /// Time the target's exchanges with its upstreams (connections it
    /// opened): what its waits were for, when they were not for work.
    pub upstreams: bool,
}

/// Where a server-side request (`--syscalls`) starts.
///
/// From its bytes' arrival in the socket by default: from the server's
/// first read, a request that waited in the socket behind a stall (the
/// coordinated omission a load generator must avoid) looks fast, and a
/// server-side p99 then says nothing about what its clients saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RequestStart {
    /// From arrival where the kernel has `sk_data_ready` and
    /// `sock_recv_length` (Linux 6.10+), else from the first read (the
    /// report says which).
    #[default]
    ArrivalWhereAvailable,
    /// From arrival, or refuse to attach (`--from-arrival`).
    Arrival,
    /// From the server's first read of the request (`--from-read`).
    FirstRead,
}

impl ProbeConfig {
    /// Time one on-CPU sample stands for: the period of the CPU-clock event.
    pub fn sample_period_ns(&self) -> u64 {
        1_000_000_000 / u64::from(self.sample_hz.max(1))
    }
}

impl Default for ProbeConfig {
    fn default() -> Self {
        Self {
            follow_children: false,
            // 2^20 ns would be 1.05 ms; the default must be 1 ms or finer.
            bucket: Duration::from_millis(1),
            min_offcpu_record: Duration::from_micros(50),
            max_records: 2_000_000,
            ring_bytes: 8 << 20,
            passive: None,
            // Not 1000: off the 250 Hz tick's multiples, so samples do not
            // fall in step with timer work.
            sample_hz: 997,
            stacks: false,
            bpf_stats: true,
            syscall_time: SyscallTime::Sampled,
            request_start: RequestStart::default(),
            upstreams: true,
        }
    }
}

/// The largest power-of-two bucket width (in ns) not wider than `asked`:
/// the kernel side then finds a bucket with a shift instead of a division.
pub fn bucket_shift(asked: Duration) -> u32 {
    let ns = u64::try_from(asked.as_nanos()).unwrap_or(u64::MAX).max(1);
    63 - ns.leading_zeros()
}

/// Cost of one kernel program over the run, from the kernel's BPF run-time
/// statistics.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProgramCost {
    pub name: String,
    pub run_count: u64,
    pub run_time_ns: u64,
    pub ns_per_run: f64,
}

impl ProgramCost {
    pub fn new(name: String, run_count: u64, run_time_ns: u64) -> Self {
        Self {
            name,
            run_count,
            run_time_ns,
            ns_per_run: if run_count == 0 {
                0.0
            } else {
                run_time_ns as f64 / run_count as f64
            },
        }
    }

    /// A loaded program's cost so far, from the kernel's BPF statistics
    /// (None when its info cannot be read).
    pub fn of_program(name: &str, prog: &aya::programs::Program) -> Option<Self> {
        let info = prog.info().ok()?;
        let run_time_ns = u64::try_from(info.run_time().as_nanos()).unwrap_or(u64::MAX);
        Some(Self::new(name.to_string(), info.run_count(), run_time_ns))
    }

    /// This program's runs and run time since `before` (statistics read
    /// earlier; a program missing there counts from zero).
    pub fn since(&self, before: &[ProgramCost]) -> Self {
        let b = before.iter().find(|b| b.name == self.name);
        let runs = self.run_count - b.map_or(0, |b| b.run_count.min(self.run_count));
        let ns = self.run_time_ns - b.map_or(0, |b| b.run_time_ns.min(self.run_time_ns));
        Self::new(self.name.clone(), runs, ns)
    }
}

/// How the kernel time of a target thread's syscalls is measured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum SyscallTime {
    /// Hooks on every syscall's entry and exit (`sys_enter`/`sys_exit`):
    /// each call's time in the kernel, exactly. Attaching them sends every
    /// syscall of every task on the machine through the kernel's slower
    /// syscall path (about 10% of a syscall-bound server's throughput, 40
    /// points of the bench's pipe load: docs/overhead.md), so it is opt-in.
    Exact,
    /// No syscall hooks (the default): the syscall a thread sleeps in is
    /// read from its saved registers at each switch-out, syscall time on
    /// the CPU comes from the on-CPU samples (with its sampling error), and
    /// `--syscalls` pairs requests at the socket layer's tracepoints.
    #[default]
    Sampled,
}

impl SyscallTime {
    /// What a report made this way should tell its reader.
    pub fn note(self) -> Option<&'static str> {
        match self {
            Self::Exact => None,
            Self::Sampled => Some(
                "syscall time was sampled (--syscall-time sampled): wait sites were read from the registers threads saved entering the kernel, syscall time on the CPU is the on-CPU samples' share (with their sampling error), and no single call was timed",
            ),
        }
    }
}

/// Attached probes for one target.
pub struct Probes {
    /// Holds the programs; dropping it detaches them.
    ebpf: Option<Ebpf>,
    buckets: PerCpuArray<MapData, Bucket>,
    cpus: PerCpuArray<MapData, CpuState>,
    records: RingBuf<MapData>,
    requests: RingBuf<MapData>,
    accounts: RingBuf<MapData>,
    syscall_records: RingBuf<MapData>,
    syscall_totals: PerCpuArray<MapData, SyscallTotal>,
    samples: RingBuf<MapData>,
    upstreams: RingBuf<MapData>,
    mem_stalls: RingBuf<MapData>,
    runtime_pauses: RingBuf<MapData>,
    ipi_senders: aya::maps::HashMap<MapData, u32, correlator_common::IpiSender>,
    device_irqs: PerCpuArray<MapData, correlator_common::DeviceIrqTime>,
    /// Memory-stall events this kernel would not let the programs time.
    memory_missing: Vec<String>,
    /// What the syscall hooks cost every syscall beyond their programs'
    /// run time, measured when they attached (None without them).
    syscall_path: Option<calibrate::SyscallPathCost>,
    /// The dispatch cost per hook run beyond the programs' time, measured
    /// when the socket transfer hooks attached.
    hook_dispatch: Option<calibrate::HookDispatchCost>,
    stacks: StackTraceMap<MapData>,
    /// Stacks whose slot in `stacks` held another one; their ids are
    /// offset by `STACK_SLOTS`.
    stacks_overflow: StackTraceMap<MapData>,
    /// Names of tasks that ran while a target waited, by pid, for records
    /// the kernel side left unnamed (see `note_runner`).
    names: std::collections::HashMap<u32, String>,
    bucket_ns: u64,
    /// First bucket not drained yet.
    next_epoch: u64,
    /// Keeps BPF run-time statistics on while the probes run.
    _stats: Option<OwnedFd>,
    stats_enabled: bool,
    /// Whether this kernel lets the programs read the run queue's steal clock.
    steal_measured: bool,
    /// Whether `--syscalls` requests are timed from their arrival in the
    /// socket (`sk_data_ready` attached).
    arrival_timed: bool,
    /// The runtime gc probes found in the target, and what became of them.
    runtime_gc: RuntimeGc,
    /// Whether the socket transfer hooks wait for the target's first
    /// upstream.
    upstream_hooks: UpstreamHooks,
}

/// When the socket transfer hooks went on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum UpstreamHooks {
    /// With the other probes (for `--syscalls`, for an upstream the
    /// target had then, or not at all).
    FromStart,
    /// Held back until the target connects out (`sk_data_ready` too when
    /// `arrival`). `udp_seen`: whether a UDP socket's connect is seen
    /// too (the cgroup connect programs attached), not only TCP's.
    Waiting { arrival: bool, udp_seen: bool },
    /// Attached at this monotonic time, at the target's first outbound
    /// connection.
    Since(u64),
}

/// A managed runtime's gc probes as a run records them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuntimeGcRun {
    /// The runtime ("CPython", "Go").
    pub runtime: String,
    /// The binary holding the probes, as the target maps it.
    pub binary: String,
    /// Collections the target's threads ran while recorded (USDT), or the
    /// worlds they stopped (Go).
    pub collections: u64,
    /// What timed them (absent in older files: USDT).
    #[serde(default)]
    pub timed_by: GcTiming,
}

/// What timed a runtime's pauses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GcTiming {
    /// The runtime's own gc start/done USDT probes, on the collecting thread.
    #[default]
    Usdt,
    /// Entry uprobes on Go's functions that stop and restart the world.
    GoWorld,
}

impl RuntimeGcRun {
    /// The run note that says what timed the runtime's pauses.
    pub fn note(&self) -> String {
        match self.timed_by {
            GcTiming::Usdt => format!(
                "{}'s garbage collections were timed by its own gc probes (USDT) in {}: {} collections on the target's threads",
                self.runtime, self.binary, self.collections
            ),
            GcTiming::GoWorld => format!(
                "Go's stopped worlds (garbage collection phases and other stop-the-world operations) were timed by uprobes on {} and {} in {}: {} stopped worlds",
                goruntime::WORLD_STOP,
                goruntime::WORLD_START,
                self.binary,
                self.collections
            ),
        }
    }
}

/// The gc probes of a managed runtime the target runs (see `usdt`).
pub enum RuntimeGc {
    /// None in the target's binaries.
    Absent,
    /// Attached: the perf events hold the probes (and their semaphores)
    /// until dropped with the probes.
    Attached {
        probes: usdt::RuntimeGcProbes,
        _events: Vec<OwnedFd>,
    },
    /// Found, but the kernel refused them: why.
    Refused {
        probes: usdt::RuntimeGcProbes,
        why: String,
    },
    /// A Go executable: its stopped worlds are timed by uprobes on the
    /// runtime's functions (held by the loaded programs' links).
    GoWorld { binary: String },
    /// A Go executable whose uprobes the kernel refused: why.
    GoRefused { binary: String, why: String },
}

fn take_map<T: TryFrom<aya::maps::Map, Error = aya::maps::MapError>>(
    ebpf: &mut Ebpf,
    name: &str,
) -> Result<T> {
    let map = ebpf
        .take_map(name)
        .with_context(|| format!("map {name} missing from the eBPF object"))?;
    T::try_from(map).with_context(|| format!("map {name} has an unexpected type"))
}

/// Where the programs read a CPU's cumulative steal, as an offset from its
/// run queue (wrapping: it may point below it).
///
/// On KVM the host writes the vCPU's steal into the per-CPU `steal_time`
/// page at every VM entry, so reading it there is exact at any instant.
/// The run queue's copy (`rq->prev_steal_time_rq`) moves only when the
/// scheduler updates its clock (switches, ticks, wake-ups): a host stall
/// while a thread ran was reported at its next switch-out, often inside its
/// next syscall. On this VM a clean server's `epoll_wait` calls then showed
/// 0.5-2 ms of "own work" after each wake-up (300 such calls in 8 s, 148 ms,
/// against 10 µs per call on average) and the stall's steal was booked to
/// the following call, where the clamp to that call's length dropped it.
/// Both live in per-CPU areas at fixed offsets, so the steal page is at
/// `rq - runqueues + steal_time` on every CPU. Elsewhere (not a KVM guest,
/// or no steal page in the kernel's BTF) the run queue's copy stands.
fn steal_offset_from_rq(btf: &btf::Btf) -> Result<u64> {
    if let (Ok(runqueues), Ok(steal_time), Ok(steal)) = (
        btf.percpu_offset("runqueues"),
        btf.percpu_offset("steal_time"),
        btf.member_offset("kvm_steal_time", "steal"),
    ) && kvm_steal_clock_in_use()
    {
        return Ok((u64::from(steal_time) + u64::from(steal)).wrapping_sub(u64::from(runqueues)));
    }
    Ok(btf.member_offset("rq", "prev_steal_time_rq")?.into())
}

/// Whether the kernel runs as a KVM guest (the only case its `steal_time`
/// page is written; other hypervisors report steal through their own
/// clocks, which the run queue's copy follows): KVM's clock source is
/// registered only then.
fn kvm_steal_clock_in_use() -> bool {
    std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/available_clocksource")
        .is_ok_and(|c| c.split_whitespace().any(|s| s == "kvm-clock"))
}

impl Probes {
    /// Loads and attaches every program for `target`.
    pub fn attach(target: &Target, cfg: &ProbeConfig) -> Result<Self> {
        let kernel_btf = btf::Btf::from_sys_fs()?;
        let bucket_shift = bucket_shift(cfg.bucket);
        let bucket_ns = 1u64 << bucket_shift;
        let config = Config {
            target_tgid: target.pid,
            follow_children: u32::from(cfg.follow_children),
            bucket_shift: u64::from(bucket_shift),
            min_offcpu_record_ns: u64::try_from(cfg.min_offcpu_record.as_nanos())
                .unwrap_or(u64::MAX),
            task_pid_offset: kernel_btf.member_offset("task_struct", "pid")?.into(),
            task_tgid_offset: kernel_btf.member_offset("task_struct", "tgid")?.into(),
            task_cpu_offset: (kernel_btf.member_offset("task_struct", "thread_info")?
                + kernel_btf.member_offset("thread_info", "cpu")?)
            .into(),
            task_on_rq_offset: kernel_btf.member_offset("task_struct", "on_rq")?.into(),
            regs_arg0_offset: kernel_btf.member_offset("pt_regs", "di")?.into(),
            regs_nr_offset: kernel_btf.member_offset("pt_regs", "orig_ax")?.into(),
            regs_ax_offset: kernel_btf.member_offset("pt_regs", "ax")?.into(),
            syscall_hooks: u64::from(cfg.syscall_time == SyscallTime::Exact),
            sample_period_ns: cfg.sample_period_ns(),
            uprobe_every: 1,
            // Measurement only (the bench's floor variant), never a product mode.
            floor_only: u64::from(floor_only_requested()),
            passive_syscalls: 0,
            task_cfs_rq_offset: 0,
            cfs_rq_rq_offset: 0,
            rq_steal_offset: 0,
            rq_steal_copy_offset: 0,
            stacks: u64::from(cfg.stacks),
            spin_cpus: aya::util::nr_cpus()
                .map_or(0, |n| u64::from(n.get().min(correlator_common::SPIN_CPUS))),
            pair_at_sockets: 0,
            requests_from_arrival: 0,
            upstreams: 0,
            skc_family_offset: kernel_btf
                .member_offset("sock_common", "skc_family")?
                .into(),
            skc_num_offset: kernel_btf.member_offset("sock_common", "skc_num")?.into(),
            skc_dport_offset: kernel_btf.member_offset("sock_common", "skc_dport")?.into(),
            skc_daddr_offset: kernel_btf.member_offset("sock_common", "skc_daddr")?.into(),
            skc_v6_daddr_offset: kernel_btf
                .member_offset("sock_common", "skc_v6_daddr")?
                .into(),
            tlb_flush_func: crate::timeline::ipis::tlb_flush_func(),
            task_last_arrival_offset: 0,
            rq_clock_offset: 0,
        };
        let mut config = config;
        // Steal at ns resolution, reached from the task's run queue; kernels
        // without paravirt steal accounting (no prev_steal_time_rq) or
        // without group scheduling (no cfs_rq->rq) measure none, and say so.
        if let (Ok(se), Ok(cfs_rq), Ok(rq), Ok(steal), Ok(copy)) = (
            kernel_btf.member_offset("task_struct", "se"),
            kernel_btf.member_offset("sched_entity", "cfs_rq"),
            kernel_btf.member_offset("cfs_rq", "rq"),
            steal_offset_from_rq(&kernel_btf),
            kernel_btf.member_offset("rq", "prev_steal_time_rq"),
        ) {
            config.task_cfs_rq_offset = (se + cfs_rq).into();
            config.cfs_rq_rq_offset = rq.into();
            config.rq_steal_offset = steal;
            config.rq_steal_copy_offset = copy.into();
        }
        // The scheduler's own stamp of a task's last switch-in, and the run
        // queue clock it is in (reached through the task's run queue, as
        // steal is): they date a switch-in the kernel did not trace.
        if let (true, Ok(info), Ok(arrival), Ok(clock)) = (
            config.task_cfs_rq_offset != 0,
            kernel_btf.member_offset("task_struct", "sched_info"),
            kernel_btf.member_offset("sched_info", "last_arrival"),
            kernel_btf.member_offset("rq", "clock"),
        ) {
            config.task_last_arrival_offset = (info + arrival).into();
            config.rq_clock_offset = clock.into();
        }
        if !cfg!(target_arch = "x86_64") {
            bail!("correlator knows the x86-64 syscall numbers only");
        }
        let sockets = SocketHooks::of(&kernel_btf);
        let can_time_arrival = sockets.arrival && sockets.transfers;
        let from_arrival = match cfg.request_start {
            RequestStart::Arrival if !can_time_arrival => bail!(
                "--from-arrival needs the sk_data_ready and sock_recv_length tracepoints (Linux 6.10 or later)"
            ),
            RequestStart::Arrival => true,
            RequestStart::ArrivalWhereAvailable => can_time_arrival,
            RequestStart::FirstRead => false,
        };
        config.requests_from_arrival = u64::from(from_arrival);
        // Upstream exchanges are timed at the socket tracepoints, from the
        // reply's arrival where the kernel has sk_data_ready.
        let upstreams = cfg.upstreams && sockets.transfers && sockets.lifecycle;
        config.upstreams = u64::from(upstreams);
        match &cfg.passive {
            Some(PassiveSource::Syscalls) if sockets.transfers => config.pair_at_sockets = 1,
            // Kernels before 6.3 have no socket tracepoints: sys_exit pairs
            // the requests there (when the syscall hooks are on).
            Some(PassiveSource::Syscalls) => config.passive_syscalls = 1,
            Some(PassiveSource::Uprobe { every, .. }) => config.uprobe_every = (*every).max(1),
            None => {}
        }
        // Reference-counted: stays on while we hold the fd and does not
        // fight other tools (unlike flipping the kernel.bpf_stats_enabled sysctl).
        let mut stats = if std::env::var_os("CORRELATOR_NO_BPF_STATS").is_some() || !cfg.bpf_stats {
            None
        } else {
            enable_stats(Stats::RunTime).ok()
        };
        let stats_enabled = stats.is_some() || bpf_stats_sysctl_on();
        // The calibrations turn our hold on the statistics off and on again
        // around their batches without them (see `calibrate`).
        let mut stats_switch = |on: bool| {
            if !on {
                stats = None;
            } else if stats.is_none() && std::env::var_os("CORRELATOR_NO_BPF_STATS").is_none() {
                stats = enable_stats(Stats::RunTime).ok();
            }
        };
        // Without --stacks nothing is stored in the stack maps: one slot
        // each, not 18 MiB of preallocated kernel memory for the whole run.
        let stack_slots = |n: usize| if cfg.stacks { n as u32 } else { 1 };
        let mut ebpf = EbpfLoader::new()
            .override_global("CONFIG", &config, true)
            .map_max_entries("RECORDS", cfg.ring_bytes)
            .map_max_entries("STACKS", stack_slots(STACK_SLOTS))
            .map_max_entries("STACKS_OVERFLOW", stack_slots(STACK_OVERFLOW_SLOTS))
            .load(EBPF_OBJECT)
            .map_err(|e| load_error(&e))?;
        let next_epoch = clock::monotonic_ns() / bucket_ns;
        let mut table = ThreadTable {
            slots: take_map(&mut ebpf, "THREADS")?,
            spill: take_map(&mut ebpf, "SPILL")?,
        };
        let mut children: HashMap<MapData, u32, u32> = take_map(&mut ebpf, "CHILD_TGIDS")?;
        let mut sites: Array<MapData, u32> = take_map(&mut ebpf, "SYSCALL_SITES")?;
        for (nr, site) in syscalls::site_table().into_iter().enumerate() {
            sites
                .set(u32::try_from(nr).unwrap_or(0), &site, 0)
                .context("writing SYSCALL_SITES")?;
        }
        let hooks = cfg.syscall_time == SyscallTime::Exact;
        // Parsed by aya for the BTF programs (the offsets above come from
        // our own reader): once for every program attached.
        let aya_btf = attach::kernel_btf()?;
        attach_all(&mut ebpf, &aya_btf, cfg.sample_period_ns())?;
        let syscall_path = if hooks {
            attach::attach_syscall_hooks(&mut ebpf, &aya_btf, &mut stats_switch, stats_enabled)?
        } else {
            None
        };
        let memory_missing = attach_memory(&mut ebpf, &aya_btf);
        attach::attach_ipi_senders(&mut ebpf);
        // The target's listening ports tell the connections it accepted
        // from the ones it opened (its upstreams).
        let listening = if upstreams {
            target.listening_ports()
        } else {
            Vec::new()
        };
        if upstreams {
            // Borrowed, not taken: the programs load after this and need
            // the map's descriptor.
            let mut ports: aya::maps::Array<&mut MapData, u32> = aya::maps::Array::try_from(
                ebpf.map_mut("LISTEN_PORTS")
                    .context("map LISTEN_PORTS missing from the eBPF object")?,
            )?;
            for &port in &listening {
                ports
                    .set(u32::from(port), &1, 0)
                    .context("writing LISTEN_PORTS")?;
            }
        }
        // Only for upstreams, the transfer hooks wait for the target's
        // first: every socket transfer on the machine (a loopback client's
        // included) pays for their dispatch.
        let pairing = config.pair_at_sockets != 0;
        let mut upstream_hooks =
            if !upstreams || pairing || target.has_upstream(&listening, cfg.follow_children) {
                UpstreamHooks::FromStart
            } else {
                UpstreamHooks::Waiting {
                    arrival: sockets.arrival,
                    udp_seen: false,
                }
            };
        let hook_dispatch = attach_sockets(
            &mut ebpf,
            &aya_btf,
            sockets,
            SocketUse {
                pairing,
                arrival: from_arrival,
                upstreams,
                deferred: matches!(upstream_hooks, UpstreamHooks::Waiting { .. }),
                stats: stats_enabled,
            },
            &mut stats_switch,
        )?;
        // As the calibration left them (turning them back on can fail).
        let stats_enabled = stats.is_some() || bpf_stats_sysctl_on();
        if let UpstreamHooks::Waiting { udp_seen, .. } = &mut upstream_hooks {
            match target.cgroup2_dir() {
                Some(dir) => match attach::attach_udp_connect_watch(&mut ebpf, &dir) {
                    Ok(()) => *udp_seen = true,
                    Err(e) => log::info!("a UDP upstream connected later is not seen: {e:#}"),
                },
                None => log::info!(
                    "a UDP upstream connected later is not seen: the target has no cgroup v2 directory"
                ),
            }
        }
        if let Some(source) = &cfg.passive {
            attach_passive(&mut ebpf, source, target.pid, hooks, sockets)?;
        }
        let runtime_gc = attach_runtime_gc(&mut ebpf, target.pid);
        // After attaching, so a thread created meanwhile is seen by
        // task_newtask or by this scan.
        for (tgid, tid) in target.threads(cfg.follow_children) {
            let asleep = crate::target::asleep(tgid, tid);
            table.track(tid, tgid, asleep, clock::monotonic_ns())?;
            if tgid != target.pid {
                let _ = children.insert(&tgid, &target.pid, 0);
            }
        }
        Ok(Self {
            buckets: take_map(&mut ebpf, "BUCKETS")?,
            cpus: take_map(&mut ebpf, "CPUS")?,
            records: take_map(&mut ebpf, "RECORDS")?,
            requests: take_map(&mut ebpf, "REQUESTS")?,
            accounts: take_map(&mut ebpf, "ACCOUNTS")?,
            syscall_records: take_map(&mut ebpf, "SYSCALL_RECORDS")?,
            syscall_totals: take_map(&mut ebpf, "SYSCALL_TOTALS")?,
            samples: take_map(&mut ebpf, "SAMPLES")?,
            upstreams: take_map(&mut ebpf, "UPSTREAMS")?,
            mem_stalls: take_map(&mut ebpf, "MEM_STALLS")?,
            runtime_pauses: take_map(&mut ebpf, "RUNTIME_PAUSES")?,
            ipi_senders: take_map(&mut ebpf, "IPI_SENDERS")?,
            device_irqs: take_map(&mut ebpf, "DEVICE_IRQS")?,
            memory_missing,
            syscall_path,
            hook_dispatch,
            upstream_hooks,
            stacks: take_map(&mut ebpf, "STACKS")?,
            stacks_overflow: take_map(&mut ebpf, "STACKS_OVERFLOW")?,
            names: std::collections::HashMap::new(),
            ebpf: Some(ebpf),
            bucket_ns,
            next_epoch,
            _stats: stats,
            stats_enabled,
            steal_measured: config.task_cfs_rq_offset != 0,
            arrival_timed: config.pair_at_sockets != 0 && from_arrival,
            runtime_gc,
        })
    }

    /// The attached runtime gc probes as a run records them, with the
    /// collections counted (`KernelTotals::runtime_gcs`).
    pub fn runtime_gc_run(&self, collections: u64) -> Option<RuntimeGcRun> {
        match &self.runtime_gc {
            RuntimeGc::Attached { probes, .. } => Some(RuntimeGcRun {
                runtime: probes.runtime.to_string(),
                binary: probes.shown_binary(),
                collections,
                timed_by: GcTiming::Usdt,
            }),
            RuntimeGc::GoWorld { binary } => Some(RuntimeGcRun {
                runtime: "Go".into(),
                binary: binary.clone(),
                collections,
                timed_by: GcTiming::GoWorld,
            }),
            _ => None,
        }
    }

    /// A run note when gc probes were found but refused.
    pub fn runtime_gc_note(&self) -> Option<String> {
        match &self.runtime_gc {
            RuntimeGc::Refused { probes, why } => Some(format!(
                "{}'s gc probes in {} were found but not attached ({why}): its garbage collections are not named",
                probes.runtime,
                probes.shown_binary()
            )),
            RuntimeGc::GoRefused { binary, why } => Some(format!(
                "{binary} is a Go program, but the uprobes on its runtime's stop-the-world functions were not attached ({why}): its stopped worlds are not named"
            )),
            _ => None,
        }
    }

    /// Actual bucket width: the asked width rounded down to a power of two ns.
    pub fn bucket_ns(&self) -> u64 {
        self.bucket_ns
    }

    /// Whether `--syscalls` requests are timed from their bytes' arrival in
    /// the socket rather than from the server's first read of them.
    pub fn arrival_timed(&self) -> bool {
        self.arrival_timed
    }

    /// Memory-stall events this kernel did not let the probes time.
    pub fn memory_missing(&self) -> &[String] {
        &self.memory_missing
    }

    /// Whether hypervisor steal is measured per thread (see `Config`).
    pub fn steal_measured(&self) -> bool {
        self.steal_measured
    }

    /// Whether BPF run-time statistics were on (program costs are known).
    /// Turns the BPF run-time statistics on or off (reference-counted:
    /// off here leaves them on if another tool holds them); returns whether
    /// they are on now.
    pub fn set_stats(&mut self, on: bool) -> bool {
        if !on {
            self._stats = None;
        } else if self._stats.is_none() && std::env::var_os("CORRELATOR_NO_BPF_STATS").is_none() {
            self._stats = enable_stats(Stats::RunTime).ok();
        }
        self.stats_enabled = self._stats.is_some() || bpf_stats_sysctl_on();
        self.stats_enabled
    }

    /// What the syscall hooks cost every syscall on the machine beyond
    /// their programs' run time, measured when they attached.
    pub fn syscall_path(&self) -> Option<calibrate::SyscallPathCost> {
        self.syscall_path
    }

    pub fn hook_dispatch(&self) -> Option<calibrate::HookDispatchCost> {
        self.hook_dispatch
    }

    pub fn stats_enabled(&self) -> bool {
        self.stats_enabled
    }

    /// Attaches the upstream hooks held back at attach once the target has
    /// connected out (`Total::UpstreamConnects`, counted in `connect()`;
    /// exchanges in the drain interval before are not timed).
    fn attach_upstream_hooks_once_connected(&mut self) -> Result<()> {
        let UpstreamHooks::Waiting { arrival, .. } = self.upstream_hooks else {
            return Ok(());
        };
        let per_cpu = self.cpus.get(&0, 0).context("reading CPUS")?;
        let connects: u64 = per_cpu
            .iter()
            .map(|c| c.totals[Total::UpstreamConnects as usize])
            .sum();
        if connects == 0 {
            return Ok(());
        }
        if let Some(ebpf) = self.ebpf.as_mut() {
            attach::attach_transfer_hooks(ebpf, arrival)?;
            attach::detach_udp_connect_watch(ebpf);
        }
        self.upstream_hooks = UpstreamHooks::Since(clock::monotonic_ns());
        Ok(())
    }

    /// What a run (or a watch window) from `started_ns` says about when
    /// upstream exchanges were timed, when not from its start.
    pub fn upstream_note(&self, started_ns: u64) -> Option<String> {
        match self.upstream_hooks {
            UpstreamHooks::FromStart => None,
            UpstreamHooks::Since(at) if at <= started_ns => None,
            UpstreamHooks::Waiting { udp_seen: true, .. } => Some(
                "upstreams: the target opened no outbound TCP connection and connected no UDP socket, so the socket transfer hooks (for upstream exchanges) were never attached".into(),
            ),
            UpstreamHooks::Waiting { udp_seen: false, .. } => Some(
                "upstreams: the target opened no outbound TCP connection, so the socket transfer hooks (for upstream exchanges) were never attached; a UDP socket it connected after the start was not watched for (no cgroup v2 directory, or the cgroup connect programs were refused)".into(),
            ),
            UpstreamHooks::Since(at) => Some(format!(
                "upstreams: exchanges timed from {:.2} s, when the target first connected out (the socket transfer hooks wait for that: every socket transfer on the machine pays for them)",
                at.saturating_sub(started_ns) as f64 / 1e9
            )),
        }
    }

    /// Moves finished buckets and all pending records into `timeline`.
    pub fn drain(&mut self, timeline: &mut Timeline) -> Result<()> {
        self.attach_upstream_hooks_once_connected()?;
        // A bucket is finished once the clock is past it; one more of margin
        // for a program that read the clock just before the boundary.
        let now_epoch = clock::monotonic_ns() / self.bucket_ns;
        self.drain_buckets(now_epoch.saturating_sub(1), timeline)?;
        self.drain_records(timeline);
        Ok(())
    }

    fn drain_buckets(&mut self, upto: u64, timeline: &mut Timeline) -> Result<()> {
        // Slots older than the ring are gone; their events show up as the
        // difference between totals and drained buckets.
        let first = self
            .next_epoch
            .max(upto.saturating_sub(u64::from(BUCKET_SLOTS)));
        for epoch in first..upto {
            let slot = u32::try_from(epoch % u64::from(BUCKET_SLOTS)).unwrap_or(0);
            let per_cpu = self.buckets.get(&slot, 0).context("reading BUCKETS")?;
            for bucket in per_cpu.iter().filter(|b| b.epoch == epoch) {
                timeline.add_bucket(epoch, &bucket.counts);
            }
        }
        self.next_epoch = self.next_epoch.max(upto);
        Ok(())
    }

    fn drain_records(&mut self, timeline: &mut Timeline) {
        while let Some(item) = self.records.next() {
            if item.len() >= size_of::<OffCpuRecord>() {
                // SAFETY: the kernel wrote a whole OffCpuRecord (plain data);
                // read_unaligned because the ring only guarantees 8-byte alignment.
                let rec = unsafe { item.as_ptr().cast::<OffCpuRecord>().read_unaligned() };
                let mut off = OffCpu::from(&rec);
                if off.next_comm.is_empty() && off.next_pid != 0 {
                    off.next_comm =
                        crate::timeline::Comm::new(&task_name(&mut self.names, off.next_pid));
                }
                if let Some(w) = off.waker.as_mut() {
                    w.comm = if w.tid == 0 {
                        crate::timeline::Comm::new("swapper")
                    } else {
                        crate::timeline::Comm::new(&task_name(&mut self.names, w.tid))
                    };
                }
                timeline.push_offcpu(off);
            }
        }
        while let Some(item) = self.accounts.next() {
            if item.len() >= size_of::<ThreadBucket>() {
                // SAFETY: as above, a whole ThreadBucket.
                let rec = unsafe { item.as_ptr().cast::<ThreadBucket>().read_unaligned() };
                timeline.push_account(ThreadAccount::from(&rec));
            }
        }
        while let Some(item) = self.syscall_records.next() {
            if item.len() >= size_of::<SyscallRecord>() {
                // SAFETY: as above, a whole SyscallRecord.
                let rec = unsafe { item.as_ptr().cast::<SyscallRecord>().read_unaligned() };
                timeline.push_syscall(SyscallSpan::from(&rec));
            }
        }
        while let Some(item) = self.samples.next() {
            if item.len() >= size_of::<SampleRecord>() {
                // SAFETY: as above, a whole SampleRecord.
                let rec = unsafe { item.as_ptr().cast::<SampleRecord>().read_unaligned() };
                timeline.push_sample(Sample::from(&rec));
            }
        }
        while let Some(item) = self.upstreams.next() {
            if item.len() >= size_of::<UpstreamRecord>() {
                // SAFETY: as above, a whole UpstreamRecord.
                let rec = unsafe { item.as_ptr().cast::<UpstreamRecord>().read_unaligned() };
                timeline.push_upstream(UpstreamExchange::from(&rec));
            }
        }
        while let Some(item) = self.mem_stalls.next() {
            if item.len() >= size_of::<MemStallRecord>() {
                // SAFETY: as above, a whole MemStallRecord.
                let rec = unsafe { item.as_ptr().cast::<MemStallRecord>().read_unaligned() };
                if let Some(stall) = MemStall::from_record(&rec) {
                    timeline.push_mem_stall(stall);
                }
            }
        }
        while let Some(item) = self.runtime_pauses.next() {
            if item.len() >= size_of::<RuntimePauseRecord>() {
                // SAFETY: as above, a whole RuntimePauseRecord.
                let rec = unsafe { item.as_ptr().cast::<RuntimePauseRecord>().read_unaligned() };
                timeline.push_runtime_pause(RuntimePause::from(&rec));
            }
        }
    }

    /// The stacks the timeline's samples and off-CPU records reference, as
    /// the kernel's stack maps hold them (read once, at the end: the maps
    /// keep every stack for the whole run).
    pub fn raw_stacks(&self, timeline: &Timeline) -> RawStacks {
        let (kernel, user) = RawStacks::wanted(timeline.samples().iter(), timeline.offcpu().iter());
        let mut raw = RawStacks::default();
        let read = |ids: Vec<u32>, missing: &mut u64| {
            let mut out = std::collections::BTreeMap::new();
            for id in ids {
                let found = match id.checked_sub(STACK_SLOTS as u32) {
                    Some(overflow) => self.stacks_overflow.get(&overflow, 0),
                    None => self.stacks.get(&id, 0),
                };
                match found {
                    Ok(st) => {
                        out.insert(id, st.frames().iter().map(|f| f.ip).collect());
                    }
                    Err(_) => *missing += 1,
                }
            }
            out
        };
        raw.kernel = read(kernel, &mut raw.missing);
        raw.user = read(user, &mut raw.missing);
        raw
    }

    /// Hands every pending passive request record to `f`.
    pub fn drain_requests(&mut self, mut f: impl FnMut(&RequestRecord)) {
        while let Some(item) = self.requests.next() {
            if item.len() >= size_of::<RequestRecord>() {
                // SAFETY: the kernel wrote a whole RequestRecord (plain data).
                let rec = unsafe { item.as_ptr().cast::<RequestRecord>().read_unaligned() };
                f(&rec);
            }
        }
    }

    /// Program costs so far (kernel BPF statistics).
    pub fn costs(&self) -> Vec<ProgramCost> {
        let Some(ebpf) = &self.ebpf else {
            return Vec::new();
        };
        let mut costs: Vec<ProgramCost> = ebpf
            .programs()
            .filter_map(|(name, prog)| ProgramCost::of_program(name, prog))
            .collect();
        costs.sort_by(|a, b| a.name.cmp(&b.name));
        costs
    }

    /// Detaches every program, then drains everything that is left.
    pub fn finish(
        mut self,
        timeline: &mut Timeline,
        on_request: impl FnMut(&RequestRecord),
    ) -> Result<Finished> {
        let programs = self.costs();
        drop(self.ebpf.take());
        let end = clock::monotonic_ns() / self.bucket_ns + 1;
        self.drain_buckets(end, timeline)?;
        self.drain_records(timeline);
        self.drain_requests(on_request);
        timeline.set_ipi_senders(self.read_ipi_senders());
        timeline.set_device_irqs(crate::timeline::irqs::named(&self.read_device_irqs()?));
        Ok(Finished {
            programs,
            kernel: self.read_totals()?,
            stacks: self.raw_stacks(timeline),
        })
    }

    /// Device IRQ time taken from target threads, by IRQ number, summed
    /// over CPUs (numbers with none left out).
    fn read_device_irqs(&self) -> Result<Vec<(u32, correlator_common::DeviceIrqTime)>> {
        let mut table = Vec::new();
        for irq in 0..correlator_common::DEVICE_IRQ_SLOTS {
            let per_cpu = self
                .device_irqs
                .get(&irq, 0)
                .context("reading DEVICE_IRQS")?;
            let mut t = correlator_common::DeviceIrqTime::default();
            for c in per_cpu.iter() {
                t.count += c.count;
                t.ns += c.ns;
                t.wait_count += c.wait_count;
                t.wait_ns += c.wait_ns;
            }
            if t.count + t.wait_count > 0 {
                table.push((irq, t));
            }
        }
        Ok(table)
    }

    /// Who sent cross-CPU calls to the target's CPUs, most first.
    fn read_ipi_senders(&self) -> Vec<crate::timeline::ipis::IpiSender> {
        let mut senders: Vec<_> = self
            .ipi_senders
            .iter()
            .flatten()
            .map(|(tid, s)| crate::timeline::ipis::IpiSender::from_kernel(tid, &s))
            .collect();
        senders.sort_by_key(|s| (std::cmp::Reverse(s.calls), s.tid));
        senders
    }

    /// The kernel side's totals so far (never reset), summed over CPUs.
    pub fn read_totals(&self) -> Result<KernelTotals> {
        let per_cpu = self.cpus.get(&0, 0).context("reading CPUS")?;
        let mut sum = [0u64; NUM_TOTALS as usize];
        let mut softirqs = [0u64; NUM_SOFTIRQ_VECTORS];
        for cpu in per_cpu.iter() {
            for (s, v) in sum.iter_mut().zip(cpu.totals.iter()) {
                *s += v;
            }
            for (s, v) in softirqs.iter_mut().zip(cpu.softirqs.iter()) {
                *s += v;
            }
        }
        let mut totals = KernelTotals::default();
        totals.counters.copy_from_slice(&sum[..NUM_COUNTERS]);
        totals.ring_reserve_failed = sum[Total::RingReserveFailed as usize];
        totals.thread_map_full = sum[Total::ThreadMapFull as usize];
        totals.passive = PassiveStats {
            lost: sum[Total::RequestsLost as usize],
            unpaired_writes: sum[Total::UnpairedWrites as usize],
            calls: sum[Total::UprobeCalls as usize],
            from_arrival: sum[Total::RequestsFromArrival as usize],
            ..PassiveStats::default()
        };
        let irq = TOTAL_IRQ_KIND_BASE as usize;
        totals
            .irq_kinds
            .copy_from_slice(&sum[irq..irq + NUM_IRQ_KINDS]);
        totals.softirq_vectors = softirqs;
        totals.accounts_lost = sum[Total::AccountsLost as usize];
        totals.syscall_records_lost = sum[Total::SyscallRecordsLost as usize];
        totals.upstreams_lost = sum[Total::UpstreamsLost as usize];
        totals.mem_stalls_lost = sum[Total::MemStallsLost as usize];
        totals.runtime_pauses_lost = sum[Total::RuntimePausesLost as usize];
        totals.ipi_senders_lost = sum[Total::IpiSendersLost as usize];
        totals.untraced_switches = sum[Total::UntracedSwitches as usize];
        totals.unseen_switch_ins_dated = sum[Total::UnseenSwitchInsDated as usize];
        totals.runtime_gcs = sum[Total::RuntimeGcs as usize];
        totals.samples = sum[Total::Samples as usize];
        totals.stack_collisions = sum[Total::StackCollisions as usize];
        totals.stack_errors = sum[Total::StackErrors as usize];
        totals.sample_records_lost = sum[Total::SampleRecordsLost as usize];
        totals.timer_silences = sum[Total::TimerSilences as usize];
        totals.timer_silence_ns = sum[Total::TimerSilenceNs as usize];
        for nr in 0..SYSCALL_SLOTS {
            let per_cpu = self
                .syscall_totals
                .get(&nr, 0)
                .context("reading SYSCALL_TOTALS")?;
            let mut t = SyscallTotal::default();
            for c in per_cpu.iter() {
                t.calls += c.calls;
                t.total_ns += c.total_ns;
                t.offcpu_ns += c.offcpu_ns;
                t.irq_ns += c.irq_ns;
                t.steal_ns += c.steal_ns;
                t.spin_ns += c.spin_ns;
            }
            if t.calls > 0 {
                totals.syscalls.push((nr, t));
            }
        }
        Ok(totals)
    }
}

/// What [`Probes::finish`] hands back besides the timeline.
pub struct Finished {
    pub programs: Vec<ProgramCost>,
    pub kernel: KernelTotals,
    /// Stacks referenced by the timeline, unsymbolized.
    pub stacks: RawStacks,
}

/// `CORRELATOR_FLOOR_ONLY` set: every program returns at once (see
/// `Config::floor_only`; for `cargo xtask bench probes`).
pub fn floor_only_requested() -> bool {
    std::env::var_os("CORRELATOR_FLOOR_ONLY").is_some()
}

/// A task's name from /proc (the kernel side names only long runners);
/// a task gone by the drain keeps its pid only. Cached, with a bound.
fn task_name(names: &mut std::collections::HashMap<u32, String>, pid: u32) -> String {
    if names.len() > 65_536 {
        names.clear();
    }
    names
        .entry(pid)
        .or_insert_with(|| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .map(|s| s.trim_end().to_string())
                .unwrap_or_else(|_| format!("pid {pid}"))
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_width_rounds_down_to_a_power_of_two() {
        assert_eq!(1u64 << bucket_shift(Duration::from_millis(1)), 524_288);
        assert_eq!(bucket_shift(Duration::from_nanos(1 << 20)), 20);
        assert_eq!(bucket_shift(Duration::from_nanos(0)), 0);
    }
}
