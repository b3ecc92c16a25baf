//! Loading and attaching: which programs go where (BTF tracepoints,
//! per-CPU software perf events, the passive sources' probes), the thread
//! table userspace fills before the programs run, and the kernel's
//! refusals turned into one readable line.

use anyhow::{Context as _, Result, bail};
use aya::{
    Ebpf,
    maps::{Array, HashMap, MapData},
    programs::{
        BtfTracePoint, CgroupAttachMode, CgroupSockAddr, FEntry, FExit, PerfEvent, UProbe,
        perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent},
        uprobe::UProbeScope,
    },
    util::online_cpus,
};
use correlator_common::{NO_STACK, OffCpuKind, THREAD_SLOTS, ThreadState, wait_site_of};
use std::os::fd::{AsFd as _, OwnedFd};

use super::btf::Btf;
use crate::{latency::passive::PassiveSource, target::Asleep, timeline::syscalls};

/// BTF tracepoints attached (program name = tracepoint name). BTF
/// tracepoints skip the classic tracepoints' formatting of every event into
/// a perf buffer, which alone slowed a context-switch heavy load by ~10%.
pub const TRACEPOINTS: [&str; 23] = [
    "sys_enter",
    "sys_exit",
    "sched_switch",
    "sched_waking",
    "sched_migrate_task",
    "task_newtask",
    "sched_process_exit",
    "irq_handler_entry",
    "irq_handler_exit",
    "softirq_entry",
    "softirq_exit",
    "local_timer_entry",
    "local_timer_exit",
    "reschedule_entry",
    "reschedule_exit",
    "call_function_entry",
    "call_function_exit",
    "call_function_single_entry",
    "call_function_single_exit",
    "irq_work_entry",
    "irq_work_exit",
    "contention_begin",
    "contention_end",
];

/// Software perf events with a program on every sample (period 1), one per CPU.
pub const PERF_EVENTS: [(&str, SoftwareEvent); 2] = [
    ("page_fault_minor", SoftwareEvent::PageFaultsMin),
    ("page_fault_major", SoftwareEvent::PageFaultsMaj),
];

/// Userspace side of the kernel's direct-mapped thread table: the same
/// placement rule as `track` in the eBPF programs.
pub(super) struct ThreadTable {
    pub(super) slots: Array<MapData, ThreadState>,
    pub(super) spill: HashMap<MapData, u32, ThreadState>,
}

impl ThreadTable {
    /// Starts tracking a thread found after the programs attached; one
    /// `asleep` at `now_ns` (CLOCK_MONOTONIC) is off the CPU from then, so
    /// its first wakeup is timed (from then: its sleep began unseen).
    pub(super) fn track(
        &mut self,
        tid: u32,
        tgid: u32,
        asleep: Option<Asleep>,
        now_ns: u64,
    ) -> Result<()> {
        let index = tid & (THREAD_SLOTS - 1);
        let slot = self.slots.get(&index, 0).context("reading THREADS")?;
        if slot.tid == tid {
            return Ok(());
        }
        let mut fresh = ThreadState {
            tid,
            tgid,
            spill: slot.spill,
            ..ThreadState::default()
        };
        if let Some(a) = asleep {
            fresh.off_kind = OffCpuKind::Blocked as u32;
            fresh.off_ts = now_ns;
            fresh.cpu_out = a.cpu;
            fresh.wait_cpu = a.cpu;
            // Number + 1; the syscall's exit clears it (untimed: its
            // entry was not seen).
            fresh.syscall = a.syscall.map_or(0, |nr| nr + 1);
            fresh.off_site = wait_site_of(a.syscall.map(syscalls::site_raw), a.uninterruptible);
            fresh.off_kstack = NO_STACK;
            fresh.off_ustack = NO_STACK;
        }
        if slot.tid == 0 {
            self.slots
                .set(index, &fresh, 0)
                .context("writing THREADS")?;
            return Ok(());
        }
        let flagged = ThreadState { spill: 1, ..slot };
        self.slots
            .set(index, &flagged, 0)
            .context("writing THREADS")?;
        // NOEXIST: keep state the kernel side may already have written.
        let _ = self
            .spill
            .insert(&tid, &ThreadState { spill: 0, ..fresh }, 1);
        Ok(())
    }
}

/// The syscall hooks (`--syscall-time exact`), attached on their own by
/// [`attach_syscall_hooks`].
pub const SYSCALL_HOOKS: [&str; 2] = ["sys_enter", "sys_exit"];

/// Attaches every program but the syscall hooks.
pub(super) fn attach_all(ebpf: &mut Ebpf, btf: &aya::Btf, sample_period_ns: u64) -> Result<()> {
    for prog in TRACEPOINTS {
        if SYSCALL_HOOKS.contains(&prog) {
            continue;
        }
        attach_tracepoint(ebpf, prog, btf)?;
    }
    let cpus = online_cpus().map_err(|(path, e)| anyhow::anyhow!("reading {path}: {e}"))?;
    for (prog, event) in PERF_EVENTS {
        let program: &mut PerfEvent = ebpf
            .program_mut(prog)
            .with_context(|| format!("program {prog} missing from the eBPF object"))?
            .try_into()?;
        program.load().map_err(|e| refused(prog, &e))?;
        for &cpu in &cpus {
            program
                .attach(
                    PerfEventConfig::Software(event),
                    PerfEventScope::AllProcessesOneCpu { cpu },
                    SamplePolicy::Period(1),
                    false,
                )
                .with_context(|| format!("cannot open software perf event {prog} on CPU {cpu}"))?;
        }
    }
    let program: &mut PerfEvent = ebpf
        .program_mut("cpu_sample")
        .context("program cpu_sample missing from the eBPF object")?
        .try_into()?;
    program.load().map_err(|e| refused("cpu_sample", &e))?;
    for &cpu in &cpus {
        program
            .attach(
                PerfEventConfig::Software(SoftwareEvent::CpuClock),
                PerfEventScope::AllProcessesOneCpu { cpu },
                SamplePolicy::Period(sample_period_ns),
                false,
            )
            .with_context(|| format!("cannot open a cpu-clock perf event on CPU {cpu}"))?;
    }
    Ok(())
}

/// The memory-stall tracepoints (each program is named after its
/// tracepoint). Each is optional, as is the memory.high function: a kernel
/// without one times the others, and the run says which were missing.
const MEMORY_TRACEPOINTS: [&str; 9] = [
    "mm_vmscan_direct_reclaim_begin",
    "mm_vmscan_direct_reclaim_end",
    "mm_vmscan_memcg_reclaim_begin",
    "mm_vmscan_memcg_reclaim_end",
    "mm_compaction_begin",
    "mm_compaction_end",
    "mmap_lock_start_locking",
    "mmap_lock_acquire_returned",
    // Not a stall: marks a fault that reads a file, so that a major fault
    // without it is timed as a swap-in.
    "mm_filemap_fault",
];

/// Where a page fault begins, so a swap-in is timed from there: run on
/// every fault of the machine (60–145 ns each here), so attached only while
/// swap is on (without it no anonymous page ever comes back from swap).
const FAULT_ENTRY_TRACEPOINTS: [&str; 2] = ["page_fault_user", "page_fault_kernel"];

/// Whether any swap area is active (/proc/swaps lists one past its header).
fn swap_on() -> bool {
    std::fs::read_to_string("/proc/swaps").is_ok_and(|s| s.lines().count() > 1)
}

/// Attaches the memory-stall programs this kernel allows; returns the
/// names of those it does not.
pub(super) fn attach_memory(ebpf: &mut Ebpf, btf: &aya::Btf) -> Vec<String> {
    let mut missing = Vec::new();
    let fault_entry = if swap_on() {
        &FAULT_ENTRY_TRACEPOINTS[..]
    } else {
        &[]
    };
    for &tracepoint in MEMORY_TRACEPOINTS.iter().chain(fault_entry) {
        if let Err(e) = attach_tracepoint(ebpf, tracepoint, btf) {
            log::info!("memory stalls: {tracepoint} not attached: {e:#}");
            missing.push(tracepoint.to_string());
        }
    }
    let high = (|| -> Result<()> {
        let entry: &mut FEntry = ebpf
            .program_mut("memory_high_entry")
            .context("program memory_high_entry missing")?
            .try_into()?;
        entry.load("__mem_cgroup_handle_over_high", btf)?;
        entry.attach()?;
        let exit: &mut FExit = ebpf
            .program_mut("memory_high_exit")
            .context("program memory_high_exit missing")?
            .try_into()?;
        exit.load("__mem_cgroup_handle_over_high", btf)?;
        exit.attach()?;
        Ok(())
    })();
    if let Err(e) = high {
        log::info!("memory stalls: memory.high handling not timed: {e:#}");
        missing.push("__mem_cgroup_handle_over_high".to_string());
    }
    missing
}

/// Counts who queues cross-CPU calls to the target's CPUs; a kernel
/// without the `csd` tracepoints only loses the senders' names.
pub(super) fn attach_ipi_senders(ebpf: &mut Ebpf) {
    let attached = (|| -> Result<()> {
        let program: &mut aya::programs::TracePoint = ebpf
            .program_mut("csd_queue_cpu")
            .context("program csd_queue_cpu missing from the eBPF object")?
            .try_into()?;
        program.load().map_err(|e| refused("csd_queue_cpu", &e))?;
        program.attach("csd", "csd_queue_cpu")?;
        Ok(())
    })();
    if let Err(e) = attached {
        log::info!("IPI senders not counted: {e:#}");
    }
}

/// The kernel's BTF as aya parses it (several MB: read once per attach).
pub(super) fn kernel_btf() -> Result<aya::Btf> {
    aya::Btf::from_sys_fs().context("cannot read kernel BTF (/sys/kernel/btf/vmlinux)")
}

/// Attaches `sys_enter` and `sys_exit`, and measures what they cost every
/// syscall on the machine beyond their programs' run time (see
/// `calibrate`). None when that could not be measured (BPF statistics off).
pub(super) fn attach_syscall_hooks(
    ebpf: &mut Ebpf,
    btf: &aya::Btf,
    stats: super::calibrate::StatsSwitch<'_>,
    stats_held: bool,
) -> Result<Option<super::calibrate::SyscallPathCost>> {
    let unhooked_ns = super::calibrate::time_syscalls();
    for prog in SYSCALL_HOOKS {
        attach_tracepoint(ebpf, prog, btf)?;
    }
    // Without the statistics held, `watch`'s reports could not say what
    // the slow path costs every syscall on the machine.
    Ok(super::calibrate::with_stats_held(
        stats,
        stats_held,
        |stats| {
            super::calibrate::with_hooks(
                ebpf,
                &SYSCALL_HOOKS,
                unhooked_ns,
                super::calibrate::time_syscalls,
                stats,
            )
        },
    ))
}

fn btf_program<'a>(ebpf: &'a mut Ebpf, prog: &str) -> Result<&'a mut BtfTracePoint> {
    Ok(ebpf
        .program_mut(prog)
        .with_context(|| format!("program {prog} missing from the eBPF object"))?
        .try_into()?)
}

fn load_tracepoint(ebpf: &mut Ebpf, prog: &str, btf: &aya::Btf) -> Result<()> {
    btf_program(ebpf, prog)?
        .load(prog, btf)
        .map_err(|e| refused(prog, &e))
}

fn attach_tracepoint(ebpf: &mut Ebpf, prog: &str, btf: &aya::Btf) -> Result<()> {
    load_tracepoint(ebpf, prog, btf)?;
    btf_program(ebpf, prog)?
        .attach()
        .with_context(|| format!("cannot attach to BTF tracepoint {prog}"))?;
    Ok(())
}

/// The socket layer's tracepoints this kernel has.
#[derive(Clone, Copy, Debug)]
pub(super) struct SocketHooks {
    /// `sock_recv_length` and `sock_send_length` (Linux 6.3+): requests
    /// are paired there, for sockets only and at no cost to other syscalls.
    pub transfers: bool,
    /// `sk_data_ready` (Linux 6.10+): requests are timed from their bytes'
    /// arrival in the socket, so the wait behind a stall is seen.
    pub arrival: bool,
    /// `inet_sock_set_state` (Linux 4.16+): a TCP connection's state is
    /// dropped when it begins or ends (socket addresses are reused).
    pub lifecycle: bool,
}

impl SocketHooks {
    pub fn of(btf: &Btf) -> Self {
        Self {
            transfers: btf.has_tracepoint("sock_recv_length")
                && btf.has_tracepoint("sock_send_length"),
            arrival: btf.has_tracepoint("sk_data_ready"),
            lifecycle: btf.has_tracepoint("inet_sock_set_state"),
        }
    }
}

/// What the socket tracepoints are attached for.
#[derive(Clone, Copy, Debug)]
pub(super) struct SocketUse {
    /// `--syscalls` requests paired at the socket layer.
    pub pairing: bool,
    /// `--from-arrival`: those requests timed from their bytes' arrival.
    pub arrival: bool,
    /// The target's upstream exchanges timed.
    pub upstreams: bool,
    /// Hold the transfer and arrival hooks back (attached by
    /// `attach_transfer_hooks` once the target connects out): they are
    /// only there for upstreams and the target has none yet.
    pub deferred: bool,
    /// The BPF run-time statistics are on. The dispatch calibration needs
    /// them (its programs' own time comes from them): without them
    /// (`watch`) they are held for the calibration only, which runs once
    /// per process (not in a restarted server's unwatched gap).
    pub stats: bool,
}

/// The socket transfer hooks: the ones the dispatch calibration fires.
const SOCKET_TRANSFERS: [&str; 2] = ["sock_recv_length", "sock_send_length"];

/// Attaches the socket layer's tracepoints for what `used` asks (the
/// caller checked the kernel has them). Returns the dispatch cost per hook
/// run measured around the transfer hooks (see `calibrate`), when they
/// were attached and it could be measured.
pub(super) fn attach_sockets(
    ebpf: &mut Ebpf,
    btf: &aya::Btf,
    sockets: SocketHooks,
    used: SocketUse,
    stats: super::calibrate::StatsSwitch<'_>,
) -> Result<Option<super::calibrate::HookDispatchCost>> {
    if !(used.pairing || used.upstreams) {
        return Ok(None);
    }
    for prog in SOCKET_TRANSFERS {
        load_tracepoint(ebpf, prog, btf)?;
    }
    // Once per process, whatever came of it: the dispatch is the kernel's
    // and the host's, not the target's, and `watch` re-attaching to a
    // restarted server spent ~0.4 s of its unwatched gap measuring it
    // again. A run without the statistics (`watch`) holds them for the
    // calibration only: it needs them for the programs' own time, and
    // without it `watch`'s reports could not say what its hooks cost.
    let dispatch = match DISPATCH_MEASURED.get() {
        Some(&measured) => measured,
        None => {
            let measured = super::calibrate::with_stats_held(stats, used.stats, |stats| {
                measure_dispatch(ebpf, stats)
            })?;
            let _ = DISPATCH_MEASURED.set(measured);
            measured
        }
    };
    let arrival = sockets.arrival && (used.arrival || used.upstreams);
    if arrival {
        load_tracepoint(ebpf, "sk_data_ready", btf)?;
    }
    if sockets.lifecycle {
        attach_tracepoint(ebpf, "inet_sock_set_state", btf)?;
    }
    if !used.deferred {
        attach_transfer_hooks(ebpf, arrival)?;
    }
    if used.pairing && !used.arrival {
        log::info!("server-side latency starts at the first read of each request");
    }
    Ok(dispatch)
}

/// The first dispatch measurement of this process (see `attach_sockets`).
static DISPATCH_MEASURED: std::sync::OnceLock<Option<super::calibrate::HookDispatchCost>> =
    std::sync::OnceLock::new();

/// Measures the socket transfer hooks' dispatch (loaded, not attached):
/// attached and detached in turns while round trips are timed, as the
/// difference is a few percent of a round trip and this host's speed
/// drifts by more between two blocks of batches. Leaves them detached.
fn measure_dispatch(
    ebpf: &mut Ebpf,
    stats: super::calibrate::StatsSwitch<'_>,
) -> Result<Option<super::calibrate::HookDispatchCost>> {
    let pair = match super::calibrate::SocketPair::new() {
        Ok(pair) => pair,
        Err(e) => {
            log::info!("hook dispatch not measured (socketpair: {e})");
            return Ok(None);
        }
    };
    let mut links = Vec::new();
    super::calibrate::interleaved(
        ebpf,
        &SOCKET_TRANSFERS,
        |ebpf, on| {
            for prog in SOCKET_TRANSFERS {
                let program = btf_program(ebpf, prog)?;
                if on {
                    links.push((prog, program.attach()?));
                } else if let Some(i) = links.iter().position(|(p, _)| *p == prog) {
                    program.detach(links.swap_remove(i).1)?;
                }
            }
            Ok(())
        },
        stats,
        || pair.round_trip(),
    )
}

/// Attaches the loaded socket transfer hooks, and `sk_data_ready` when
/// `arrival`: every socket transfer and arrival on the machine runs them.
pub(super) fn attach_transfer_hooks(ebpf: &mut Ebpf, arrival: bool) -> Result<()> {
    let arrival = arrival.then_some("sk_data_ready");
    for prog in SOCKET_TRANSFERS.into_iter().chain(arrival) {
        btf_program(ebpf, prog)?
            .attach()
            .with_context(|| format!("cannot attach to BTF tracepoint {prog}"))?;
    }
    Ok(())
}

/// The programs that see the target connect a UDP socket (see
/// `udp_connect4` in the eBPF crate).
const UDP_CONNECT_WATCH: [&str; 2] = ["udp_connect4", "udp_connect6"];

/// While the transfer hooks wait for an upstream: attaches the cgroup
/// connect programs to the target's cgroup v2 directory `cgroup`, so that
/// a UDP socket the target connects later also attaches them (TCP's
/// connect is seen by `inet_sock_set_state`). They run at every
/// `connect()` in that cgroup, never at a transfer. Attached as BPF links,
/// which the kernel always adds beside the programs already there (a link
/// takes no attach flags: `AllowMultiple` is refused with EINVAL, so the
/// mode given is `Single`'s 0); detached when the probes are dropped.
pub(super) fn attach_udp_connect_watch(ebpf: &mut Ebpf, cgroup: &std::path::Path) -> Result<()> {
    let dir = std::fs::File::open(cgroup)
        .with_context(|| format!("cannot open cgroup {}", cgroup.display()))?;
    for prog in UDP_CONNECT_WATCH {
        let program: &mut CgroupSockAddr = ebpf
            .program_mut(prog)
            .with_context(|| format!("program {prog} missing from the eBPF object"))?
            .try_into()?;
        program.load().map_err(|e| refused(prog, &e))?;
        program
            .attach(&dir, CgroupAttachMode::Single)
            .with_context(|| format!("cannot attach {prog} to cgroup {}", cgroup.display()))?;
    }
    Ok(())
}

/// Detaches and unloads the connect programs of `attach_udp_connect_watch`
/// once the transfer hooks are on: from then on they would only add their
/// ~300 ns to every `connect()` in the target's cgroup (all of the machine's
/// when the target is in the root) for nothing. A program never loaded
/// (no cgroup v2 directory, or refused) is skipped.
pub(super) fn detach_udp_connect_watch(ebpf: &mut Ebpf) {
    for prog in UDP_CONNECT_WATCH {
        let Some(program) = ebpf.program_mut(prog) else {
            continue;
        };
        let program: Result<&mut CgroupSockAddr, _> = program.try_into();
        if let Ok(program) = program
            && program.fd().is_ok()
            && let Err(e) = program.unload()
        {
            log::info!("{prog} stays attached ({e}): it costs only at connect()");
        }
    }
}

/// Attaches the passive request-latency programs (the socket tracepoints
/// are `attach_sockets`'s).
pub(super) fn attach_passive(
    ebpf: &mut Ebpf,
    source: &PassiveSource,
    pid: u32,
    hooks: bool,
    sockets: SocketHooks,
) -> Result<()> {
    match source {
        PassiveSource::Syscalls if sockets.transfers => {}
        // Older kernels: sys_exit (attached for syscall time) pairs the
        // requests; the flag in CONFIG turns that on.
        PassiveSource::Syscalls if hooks => {}
        PassiveSource::Syscalls => bail!(
            "--syscalls with --syscall-time sampled needs the sock_recv_length and sock_send_length tracepoints (Linux 6.3 or later)"
        ),
        PassiveSource::Uprobe { binary, symbol, .. } => {
            let scope = UProbeScope::OneProcess(
                std::num::NonZeroU32::new(pid).context("PID 0 cannot be probed")?,
            );
            for prog in ["call_entry", "call_return"] {
                let program: &mut UProbe = ebpf
                    .program_mut(prog)
                    .with_context(|| format!("program {prog} missing from the eBPF object"))?
                    .try_into()?;
                program.load().map_err(|e| refused(prog, &e))?;
                program
                    .attach([symbol.as_str()], binary, scope)
                    .map_err(|e| {
                        if format!("{e:#}").contains("resolving symbol") {
                            anyhow::anyhow!(
                                "symbol {symbol} not found in {binary} (`nm -D {binary}` lists the exported ones; a stripped binary has no others)"
                            )
                        } else {
                            anyhow::anyhow!("cannot attach a uprobe to {symbol} in {binary}: {e:#}")
                        }
                    })?;
            }
        }
    }
    Ok(())
}

/// Attaches the gc probes of a managed runtime the target runs (CPython's
/// USDT `gc__start`/`gc__done`), when one of its binaries has them. Not
/// fatal: a kernel that refuses them leaves the run without the runtime's
/// collections named, which the run's notes say.
pub(super) fn attach_runtime_gc(ebpf: &mut Ebpf, pid: u32) -> super::RuntimeGc {
    let probes = match super::usdt::find_runtime_gc(pid) {
        Ok(Some(p)) => p,
        Ok(None) => return attach_go_world(ebpf, pid),
        Err(e) => {
            log::debug!("looking for runtime gc probes: {e:#}");
            return super::RuntimeGc::Absent;
        }
    };
    let mut attach = |prog: &str, probe: &super::usdt::Usdt| -> Result<OwnedFd> {
        let program: &mut UProbe = ebpf
            .program_mut(prog)
            .with_context(|| format!("program {prog} missing from the eBPF object"))?
            .try_into()?;
        program.load().map_err(|e| refused(prog, &e))?;
        let fd = program.fd()?.as_fd();
        super::usdt::attach(fd, &probes.binary, probe, pid)
    };
    let events = match (
        attach("gc_start", &probes.start),
        attach("gc_done", &probes.done),
    ) {
        (Ok(start), Ok(done)) => vec![start, done],
        (Err(e), _) | (_, Err(e)) => {
            return super::RuntimeGc::Refused {
                why: format!("{e:#}"),
                probes,
            };
        }
    };
    log::info!(
        "{}'s garbage collections timed by its USDT probes in {}",
        probes.runtime,
        probes.binary.display()
    );
    super::RuntimeGc::Attached {
        probes,
        _events: events,
    }
}

/// Attaches the uprobes on Go's stop-the-world functions when the target's
/// executable is a Go binary with its symbols (see `goruntime`).
fn attach_go_world(ebpf: &mut Ebpf, pid: u32) -> super::RuntimeGc {
    let Some(binary) = super::goruntime::find(pid) else {
        return super::RuntimeGc::Absent;
    };
    let shown = std::fs::read_link(format!("/proc/{pid}/exe")).map_or_else(
        |_| binary.display().to_string(),
        |p| p.display().to_string(),
    );
    let mut attach = |prog: &str, symbol: &str| -> Result<()> {
        let scope = UProbeScope::OneProcess(
            std::num::NonZeroU32::new(pid).context("PID 0 cannot be probed")?,
        );
        let program: &mut UProbe = ebpf
            .program_mut(prog)
            .with_context(|| format!("program {prog} missing from the eBPF object"))?
            .try_into()?;
        program.load().map_err(|e| refused(prog, &e))?;
        program
            .attach([symbol], &binary, scope)
            .map_err(|e| anyhow::anyhow!("cannot attach a uprobe to {symbol}: {e:#}"))?;
        Ok(())
    };
    let attached = attach("go_world_stop", super::goruntime::WORLD_STOP)
        .and_then(|()| attach("go_world_start", super::goruntime::WORLD_START));
    match attached {
        Ok(()) => {
            log::info!("Go's stopped worlds timed by uprobes in {shown}");
            super::RuntimeGc::GoWorld { binary: shown }
        }
        Err(e) => super::RuntimeGc::GoRefused {
            binary: shown,
            why: format!("{e:#}"),
        },
    }
}

/// The kernel's refusal, without the verifier's full log (hundreds of lines):
/// its first line and the verifier's verdict (the last lines).
pub(super) fn refused(prog: &str, e: &aya::programs::ProgramError) -> anyhow::Error {
    let text = format!("{e:#}");
    log::debug!("{prog}: {text}");
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let short = if lines.len() > 6 {
        let tail = lines
            .iter()
            .rev()
            .take(4)
            .rev()
            .copied()
            .collect::<Vec<_>>()
            .join(" | ");
        format!("{} ... {tail}", lines[0])
    } else {
        lines.join(" | ")
    };
    anyhow::anyhow!(
        "the kernel refused to load program {prog}: {short} (run with RUST_LOG=debug for the full verifier log)"
    )
}

pub(super) fn load_error(e: &aya::EbpfError) -> anyhow::Error {
    let text = format!("{e:#}");
    if text.contains("EPERM") || text.contains("Operation not permitted") {
        anyhow::anyhow!(
            "not permitted to load eBPF programs ({text}): run as root or grant CAP_BPF and CAP_PERFMON"
        )
    } else {
        anyhow::anyhow!("loading the eBPF programs failed: {text}")
    }
}

pub(super) fn bpf_stats_sysctl_on() -> bool {
    std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled")
        .map(|s| s.trim() == "1")
        .unwrap_or(false)
}
