//! correlator's kernel programs.
//!
//! Cheap by design:
//! - every event of the target is counted into a per-CPU ring of time
//!   buckets and into never-reset per-CPU totals (the drain check);
//! - each program run does at most one bucket lookup, one per-CPU state
//!   lookup and one clock read, and programs that fire for every task on the
//!   machine (sched_switch, sched_wakeup) decide "not a target" with inlined
//!   array lookups only, before reading the clock;
//! - only off-CPU intervals long enough to matter produce a ring-buffer
//!   record, submitted without waking the reader (userspace drains on a timer).
//!
//! - every target thread keeps an account of the current bucket (on-CPU
//!   time, syscall time in the kernel, steal, IRQ time, short off-CPU
//!   intervals by wait site, on-CPU samples by context) and emits it as one
//!   ring-buffer record when it first does something in a later bucket.
//!
//! Counters are plain (non-atomic) adds: the maps are per-CPU, tracepoint
//! and perf-event programs are not preempted, and each counter has one
//! writer context (hard IRQ fields only in hard IRQ, switch and migration
//! fields only with IRQs off, fault fields only in the faulting task), so
//! no two writes of one field interleave. Two races are left: a bucket
//! reset interrupted by an IRQ program can only lose counts from buckets,
//! never from totals, and userspace reports any such shortfall as lost; a
//! thread's account updated by its syscall exit can be interrupted by an
//! IRQ or sample program adding to the same account (BTF tracepoints nest
//! across programs), which can lose that one addition or emit one bucket's
//! account twice: at most one IRQ's or sample's worth, rarely.
#![no_std]
#![no_main]

use aya_ebpf::{
    EbpfContext as _, Global,
    bindings::BPF_RB_NO_WAKEUP,
    helpers::{
        bpf_get_current_pid_tgid, bpf_get_smp_processor_id, bpf_ktime_get_ns, bpf_probe_read_kernel,
    },
    macros::{btf_tracepoint, map, perf_event, uprobe, uretprobe},
    maps::{Array, HashMap, LruHashMap, PerCpuArray, RingBuf},
    programs::{BtfTracePointContext, PerfEventContext, ProbeContext, RetProbeContext},
};
use correlator_common::{
    Account, BUCKET_SLOTS, Bucket, CallState, Config, ConnState, Counter, CpuState, IrqKind,
    NUM_ACCOUNT, NUM_COUNTERS, NUM_TOTALS, OffCpuKind, OffCpuRecord, RequestRecord, SITE_BY_STATE,
    SYSCALL_SLOTS, SyscallRecord, SyscallTotal, THREAD_SLOTS, TOTAL_IRQ_KIND_BASE, ThreadBucket,
    ThreadState, Total, UPROBE_FD, WaitSite,
};

#[unsafe(no_mangle)]
static CONFIG: Global<Config> = Global::new(Config {
    target_tgid: 0,
    follow_children: 0,
    bucket_shift: 19,
    min_offcpu_record_ns: 50_000,
    task_pid_offset: 0,
    task_tgid_offset: 0,
    task_cpu_offset: 0,
    regs_arg0_offset: 112,
    regs_nr_offset: 120,
    uprobe_every: 1,
    floor_only: 0,
    passive_syscalls: 0,
    task_cfs_rq_offset: 0,
    cfs_rq_rq_offset: 0,
    rq_steal_offset: 0,
});

/// One field of CONFIG, as a single volatile load: `CONFIG.load()` copies
/// the whole struct (a dozen loads) wherever it is called.
macro_rules! config {
    ($field:ident) => {{
        // Used inside unsafe blocks too.
        #[allow(unused_unsafe)]
        // SAFETY: Global<T> is repr(transparent) over T, which the
        // loader initialised; the field is plain data.
        let value = unsafe {
            core::ptr::read_volatile(&raw const (*(&raw const CONFIG).cast::<Config>()).$field)
        };
        value
    }};
}

/// Ring of time buckets, per CPU.
#[map]
static BUCKETS: PerCpuArray<Bucket> = PerCpuArray::with_max_entries(BUCKET_SLOTS, 0);

/// Per-CPU IRQ attribution state and totals.
#[map]
static CPUS: PerCpuArray<CpuState> = PerCpuArray::with_max_entries(1, 0);

/// Direct-mapped table of target threads (see `THREAD_SLOTS`).
#[map]
static THREADS: Array<ThreadState> = Array::with_max_entries(THREAD_SLOTS, 0);

/// Target threads whose slot in THREADS was taken by another target thread.
#[map]
static SPILL: HashMap<u32, ThreadState> = HashMap::with_max_entries(4096, 0);

/// Processes forked by the target (only with follow_children), by tgid.
#[map]
static CHILD_TGIDS: HashMap<u32, u32> = HashMap::with_max_entries(4096, 0);

/// Off-CPU interval records.
#[map]
static RECORDS: RingBuf = RingBuf::with_byte_size(8 << 20, 0);

/// Passive request records (`--syscalls`, `--uprobe`).
#[map]
static REQUESTS: RingBuf = RingBuf::with_byte_size(4 << 20, 0);

/// `--syscalls` pairing state by (tgid << 32 | fd). LRU: connections that
/// close are forgotten without a close probe.
#[map]
static CONNS: LruHashMap<u64, ConnState> = LruHashMap::with_max_entries(16384, 0);

/// [`WaitSite`] of a blocked wait inside each syscall (index = number),
/// written by userspace before attaching (the table lives in one place,
/// `timeline::syscalls`); `SITE_BY_STATE` for read-like calls.
#[map]
static SYSCALL_SITES: Array<u32> = Array::with_max_entries(SYSCALL_SLOTS, 0);

/// Per-syscall totals of the target's threads.
#[map]
static SYSCALL_TOTALS: PerCpuArray<SyscallTotal> = PerCpuArray::with_max_entries(SYSCALL_SLOTS, 0);

/// Per-thread bucket accounts ([`ThreadBucket`]).
#[map]
static ACCOUNTS: RingBuf = RingBuf::with_byte_size(8 << 20, 0);

/// Syscalls at least `min_offcpu_record_ns` long ([`SyscallRecord`]).
#[map]
static SYSCALL_RECORDS: RingBuf = RingBuf::with_byte_size(2 << 20, 0);

/// `--uprobe` state of threads inside a sampled call, by tid.
#[map]
static CALLS: LruHashMap<u32, CallState> = LruHashMap::with_max_entries(16384, 0);

const CLONE_THREAD: u64 = 0x0001_0000;
/// `TASK_DEAD`: the state of a task's final switch.
const TASK_DEAD: u32 = 0x80;

#[inline(always)]
fn now() -> u64 {
    // SAFETY: helper without preconditions.
    unsafe { bpf_ktime_get_ns() }
}

#[inline(always)]
fn cpu_id() -> u32 {
    // SAFETY: helper without preconditions.
    unsafe { bpf_get_smp_processor_id() }
}

#[inline(always)]
fn current_tgid() -> u32 {
    (bpf_get_current_pid_tgid() >> 32) as u32
}

#[inline(always)]
fn is_target_tgid(tgid: u32) -> bool {
    tgid == config!(target_tgid)
        || (config!(follow_children) != 0 && CHILD_TGIDS.get_ptr(&tgid).is_some())
}

/// Argument `n` of a BTF tracepoint.
#[inline(always)]
fn arg<T: aya_ebpf::Argument>(ctx: &BtfTracePointContext, n: usize) -> T {
    ctx.arg(n)
}

/// `task->pid`, a direct load through the BTF-typed task pointer (the
/// offset is a frozen load-time constant, so the verifier checks it against
/// the kernel's struct layout).
#[inline(always)]
fn task_pid(task: *const u8) -> u32 {
    let offset = config!(task_pid_offset) as usize;
    // SAFETY: `task` is a task_struct pointer from the tracepoint's
    // arguments; the verifier checks the access.
    unsafe { *task.add(offset).cast::<u32>() }
}

/// `task->tgid`, a direct load like `task_pid`.
#[inline(always)]
fn task_tgid(task: *const u8) -> u32 {
    let offset = config!(task_tgid_offset) as usize;
    // SAFETY: as for `task_pid`.
    unsafe { *task.add(offset).cast::<u32>() }
}

/// `task->thread_info.cpu`, a direct load like `task_pid`.
#[inline(always)]
fn task_cpu(task: *const u8) -> u32 {
    let offset = config!(task_cpu_offset) as usize;
    // SAFETY: as for `task_pid`.
    unsafe { *task.add(offset).cast::<u32>() }
}

// ----------------------------------------------------------------- threads

/// The state of target thread `tid`, if it is one.
#[inline(always)]
fn thread(tid: u32) -> Option<*mut ThreadState> {
    if tid == 0 {
        return None;
    }
    let slot = THREADS.get_ptr_mut(tid & (THREAD_SLOTS - 1))?;
    // SAFETY: array map value; see the module docs for concurrency.
    unsafe {
        if (*slot).tid == tid {
            Some(slot)
        } else if (*slot).spill != 0 {
            SPILL.get_ptr_mut(&tid)
        } else {
            None
        }
    }
}

/// Per-CPU scratch space for a fresh thread state (too large for the
/// 512-byte BPF stack).
#[map]
static SCRATCH: PerCpuArray<ThreadState> = PerCpuArray::with_max_entries(1, 0);

/// Zeroes a thread state in place, eight bytes at a time (volatile: a plain
/// assignment becomes a stack copy or a byte-wise loop).
#[inline(always)]
fn zero_state(p: *mut ThreadState) {
    let words = p.cast::<u64>();
    for i in 0..size_of::<ThreadState>() / 8 {
        // SAFETY: in bounds of the map value; ThreadState is 8-byte sized.
        unsafe { core::ptr::write_volatile(words.add(i), 0) };
    }
}

const _: () = assert!(size_of::<ThreadState>() % 8 == 0);

/// Starts tracking `tid` (idempotent).
#[inline(always)]
fn track(tid: u32, tgid: u32, cpu: *mut CpuState) -> Option<*mut ThreadState> {
    if let Some(existing) = thread(tid) {
        return Some(existing);
    }
    let slot = THREADS.get_ptr_mut(tid & (THREAD_SLOTS - 1))?;
    // SAFETY: array map value.
    unsafe {
        if (*slot).tid == 0 {
            let spill = (*slot).spill;
            zero_state(slot);
            (*slot).tid = tid;
            (*slot).tgid = tgid;
            (*slot).spill = spill;
            return Some(slot);
        }
        (*slot).spill = 1;
    }
    let fresh = SCRATCH.get_ptr_mut(0)?;
    zero_state(fresh);
    // SAFETY: per-CPU map value.
    let inserted = unsafe {
        (*fresh).tid = tid;
        (*fresh).tgid = tgid;
        SPILL.insert(&tid, &*fresh, 0)
    };
    if inserted.is_err() {
        // SAFETY: per-CPU map value.
        unsafe { (*cpu).totals[Total::ThreadMapFull as usize] += 1 };
        return None;
    }
    SPILL.get_ptr_mut(&tid)
}

#[inline(always)]
fn untrack(tid: u32) {
    if let Some(slot) = THREADS.get_ptr_mut(tid & (THREAD_SLOTS - 1)) {
        // SAFETY: array map value.
        unsafe {
            if (*slot).tid == tid {
                (*slot).tid = 0;
                (*slot).off_kind = 0;
                return;
            }
        }
    }
    let _ = SPILL.remove(&tid);
}

// ------------------------------------------------------------------ counts

/// Where one program run counts: the bucket of its timestamp and the CPU's
/// state (totals), each looked up once.
struct Sink {
    bucket: *mut Bucket,
    cpu: *mut CpuState,
}

impl Sink {
    #[inline(always)]
    fn at(ts: u64, cpu: *mut CpuState) -> Option<Self> {
        let epoch = ts >> (config!(bucket_shift) & 63);
        let bucket = BUCKETS.get_ptr_mut((epoch & (BUCKET_SLOTS as u64 - 1)) as u32)?;
        // SAFETY: per-CPU map value; see the module docs for concurrency.
        unsafe {
            if (*bucket).epoch != epoch {
                // Volatile stores: a plain `= [0; N]` becomes a byte-wise memset loop.
                let counts = (&raw mut (*bucket).counts).cast::<u64>();
                for i in 0..NUM_COUNTERS {
                    core::ptr::write_volatile(counts.add(i), 0);
                }
                (*bucket).epoch = epoch;
            }
        }
        Some(Self { bucket, cpu })
    }

    #[inline(always)]
    fn add(&self, counter: Counter, value: u64) {
        // SAFETY: pointers from map lookups in `at`.
        unsafe {
            (*self.bucket).counts[counter as usize] += value;
            (*self.cpu).totals[counter as usize] += value;
        }
    }
}

#[inline(always)]
fn cpu_state() -> Option<*mut CpuState> {
    CPUS.get_ptr_mut(0)
}

/// Counts one event of `counter` now.
#[inline(always)]
fn count_one(counter: Counter) {
    let Some(cpu) = cpu_state() else { return };
    if let Some(sink) = Sink::at(now(), cpu) {
        sink.add(counter, 1);
    }
}

// ---------------------------------------------------------------- faults

/// Software perf event PAGE_FAULTS_MIN, period 1, one per CPU.
#[perf_event]
pub fn page_fault_minor(_ctx: PerfEventContext) -> u32 {
    if config!(floor_only) != 0 {
        return 0;
    }
    if is_target_tgid(current_tgid()) {
        count_one(Counter::PageFaultsMinor);
    }
    0
}

/// Software perf event PAGE_FAULTS_MAJ, period 1, one per CPU.
#[perf_event]
pub fn page_fault_major(_ctx: PerfEventContext) -> u32 {
    if config!(floor_only) != 0 {
        return 0;
    }
    if is_target_tgid(current_tgid()) {
        count_one(Counter::PageFaultsMajor);
    }
    0
}

// -------------------------------------------------------------- scheduler

/// sched_switch(bool preempt, task *prev, task *next, unsigned int prev_state)
#[btf_tracepoint(function = "sched_switch")]
pub fn sched_switch(ctx: BtfTracePointContext) -> i32 {
    if config!(floor_only) != 0 {
        return 0;
    }
    let Some(cpu) = cpu_state() else { return 0 };
    let preempt: u64 = arg(&ctx, 0);
    let prev_task: *const u8 = arg(&ctx, 1);
    let next_task: *const u8 = arg(&ctx, 2);
    let prev_state: u64 = arg(&ctx, 3);
    // Direct loads through the BTF task pointers: a helper call
    // (bpf_get_current_pid_tgid) costs more with return thunks.
    let prev_pid = task_pid(prev_task);
    let tgid = task_tgid(prev_task);
    let next_pid = task_pid(next_task);
    let prev_is_target = prev_pid != 0 && is_target_tgid(tgid);
    let next = thread(next_pid);
    // SAFETY: per-CPU value; sched_switch runs with IRQs off.
    let waiting = unsafe {
        (*cpu).target_tid = if next.is_some() { next_pid } else { 0 };
        (*cpu).waiting_tid
    };
    if !prev_is_target && next.is_none() && waiting == 0 {
        return 0;
    }
    let ts = now();
    if waiting != 0 {
        note_runner(cpu, waiting, prev_pid, ts);
    }
    if !prev_is_target && next.is_none() {
        return 0;
    }
    let Some(sink) = Sink::at(ts, cpu) else {
        return 0;
    };
    if prev_is_target {
        let out = SwitchOut {
            tid: prev_pid,
            tgid,
            // Bool argument: only the low byte is defined.
            preempted: preempt & 0xff != 0,
            state: prev_state as u32,
            next_pid,
        };
        switch_out(&sink, cpu, ts, &out);
    }
    if let Some(next) = next {
        // SAFETY: map value; a thread's state is only written by its own
        // switches (serialised by the scheduler) and its wakeup.
        let st = unsafe { &mut *next };
        switch_in(&sink, st, ts);
        st.run_ts = ts;
        st.rq = task_rq(next_task);
        st.steal_mark = if st.rq != 0 { rq_steal(st.rq) } else { 0 };
    }
    0
}

/// A target thread waits runnable on this CPU: `prev` just ended a slice
/// there. Remember the task that ran longest in one go, which is the one
/// that took the CPU (the first to run after the preemption is often only a
/// short wakeup).
#[inline(always)]
fn note_runner(cpu: *mut CpuState, waiting: u32, prev_pid: u32, ts: u64) {
    // SAFETY: per-CPU value and map values; IRQs are off in sched_switch.
    unsafe {
        let Some(w) = thread(waiting) else {
            (*cpu).waiting_tid = 0;
            return;
        };
        // Runnable: preempted, or blocked and since woken. Back on a CPU, or
        // waiting on another one now: stop watching here.
        let runnable = (*w).off_kind == OffCpuKind::Preempted as u32
            || ((*w).off_kind == OffCpuKind::Blocked as u32 && (*w).wakeup_ts != 0);
        if !runnable || (*w).wait_cpu != cpu_id() {
            (*cpu).waiting_tid = 0;
            return;
        }
        let ran = ts.saturating_sub((*cpu).last_switch_ts);
        if prev_pid != waiting && ran > (*w).next_ran_ns {
            (*w).next_ran_ns = ran;
            (*w).next_pid = prev_pid;
            // The comm is a helper call (costly with this kernel's return
            // thunks) on nearly every switch of a busy target; only a runner
            // long enough to matter gets it here, userspace names the others
            // from /proc by pid.
            (*w).next_comm[0] = 0;
            if ran >= config!(min_offcpu_record_ns) / 2 {
                (*w).next_comm = aya_ebpf::helpers::bpf_get_current_comm().unwrap_or([0; 16]);
            }
        }
        (*cpu).last_switch_ts = ts;
    }
}

/// Task state bit of an uninterruptible sleep (`TASK_UNINTERRUPTIBLE`).
const TASK_UNINTERRUPTIBLE: u32 = 0x2;

/// Where a thread going to sleep in syscall `syscall` (number + 1, 0 =
/// none) with task state `state` waits.
#[inline(always)]
fn wait_site(syscall: u32, state: u32) -> u32 {
    let uninterruptible = state & TASK_UNINTERRUPTIBLE != 0;
    if syscall == 0 {
        // Only a fault or another exception sleeps outside a syscall; an
        // uninterruptible one is a major fault waiting for its page.
        return if uninterruptible {
            WaitSite::Fault as u32
        } else {
            WaitSite::Other as u32
        };
    }
    let site = SYSCALL_SITES
        .get((syscall - 1) & (SYSCALL_SLOTS - 1))
        .copied()
        .unwrap_or(WaitSite::Other as u32);
    if site != SITE_BY_STATE {
        site
    } else if uninterruptible {
        WaitSite::Io as u32
    } else {
        WaitSite::Idle as u32
    }
}

/// The run queue of `task` (through `se.cfs_rq->rq`), 0 when steal is not
/// measured here.
#[inline(always)]
fn task_rq(task: *const u8) -> u64 {
    let cfs_rq_offset = config!(task_cfs_rq_offset);
    if cfs_rq_offset == 0 {
        return 0;
    }
    // SAFETY: the helper checks the addresses; a failed read is 0.
    unsafe {
        let cfs_rq: u64 =
            bpf_probe_read_kernel(task.add(cfs_rq_offset as usize).cast::<u64>()).unwrap_or(0);
        if cfs_rq == 0 {
            return 0;
        }
        bpf_probe_read_kernel(
            (cfs_rq as *const u8)
                .add(config!(cfs_rq_rq_offset) as usize)
                .cast::<u64>(),
        )
        .unwrap_or(0)
    }
}

/// The run queue's cumulative steal time, ns (`rq->prev_steal_time_rq`,
/// updated with the run queue's clock: at every schedule and tick).
#[inline(always)]
fn rq_steal(rq: u64) -> u64 {
    // SAFETY: the helper checks the address; a failed read is 0.
    unsafe {
        bpf_probe_read_kernel(
            (rq as *const u8)
                .add(config!(rq_steal_offset) as usize)
                .cast::<u64>(),
        )
        .unwrap_or(0)
    }
}

// ------------------------------------------------------- per-thread account

/// Emits the thread's account of its current bucket, if any, and starts
/// the bucket of `ts`.
#[inline(always)]
fn acct_roll(st: &mut ThreadState, ts: u64) {
    let epoch = ts >> (config!(bucket_shift) & 63);
    if st.acct_epoch == epoch {
        return;
    }
    let acct = (&raw mut st.acct).cast::<u64>();
    let mut any = st.top_syscall_ns;
    for i in 0..NUM_ACCOUNT {
        // SAFETY: in bounds of the array.
        any |= unsafe { core::ptr::read_volatile(acct.add(i)) };
    }
    if any != 0 {
        match ACCOUNTS.reserve::<ThreadBucket>(0) {
            Some(mut entry) => {
                // Field by field into the ring: the struct does not fit the stack.
                let out = entry.as_mut_ptr();
                // SAFETY: the reserved entry is a whole ThreadBucket.
                unsafe {
                    (*out).tid = st.tid;
                    (*out).tgid = st.tgid;
                    (*out).epoch = st.acct_epoch;
                    (*out).top_syscall = st.top_syscall;
                    (*out)._pad = 0;
                    (*out).top_syscall_ns = st.top_syscall_ns;
                    let ns = (&raw mut (*out).ns).cast::<u64>();
                    for i in 0..NUM_ACCOUNT {
                        core::ptr::write_volatile(ns.add(i), core::ptr::read_volatile(acct.add(i)));
                    }
                }
                entry.submit(BPF_RB_NO_WAKEUP as u64);
            }
            None => total_add(Total::AccountsLost),
        }
        for i in 0..NUM_ACCOUNT {
            // SAFETY: in bounds; volatile so it is not a byte-wise memset.
            unsafe { core::ptr::write_volatile(acct.add(i), 0) };
        }
    }
    st.top_syscall = 0;
    st.top_syscall_ns = 0;
    st.acct_epoch = epoch;
}

/// Adds `value` to slot `slot` of the thread's account for the bucket of `ts`.
#[inline(always)]
fn acct_add(st: &mut ThreadState, ts: u64, slot: Account, value: u64) {
    acct_add_at(st, ts, slot as u32, value);
}

#[inline(always)]
fn acct_add_at(st: &mut ThreadState, ts: u64, slot: u32, value: u64) {
    if value == 0 {
        return;
    }
    acct_roll(st, ts);
    if let Some(v) = st.acct.get_mut(slot as usize) {
        *v += value;
    }
}

/// Books the thread's time on the CPU since `run_ts` up to `ts`.
#[inline(always)]
fn ran_until(st: &mut ThreadState, ts: u64) {
    if st.run_ts != 0 && ts > st.run_ts {
        let ran = ts - st.run_ts;
        acct_add(st, ts, Account::OnCpu, ran);
    }
    st.run_ts = ts;
}

/// What sched_switch tells about the thread leaving the CPU.
struct SwitchOut {
    tid: u32,
    tgid: u32,
    preempted: bool,
    state: u32,
    next_pid: u32,
}

#[inline(always)]
fn switch_out(sink: &Sink, cpu: *mut CpuState, ts: u64, out: &SwitchOut) {
    if out.state & TASK_DEAD != 0 {
        // The thread's final switch: not counted by the kernel's nvcsw/nivcsw
        // either, and it never comes back.
        untrack(out.tid);
        return;
    }
    // As the kernel counts nvcsw/nivcsw: voluntary = not preempted and no
    // longer runnable.
    let runnable = out.preempted || out.state == 0;
    let (counter, kind) = if runnable {
        (Counter::SwitchesInvoluntary, OffCpuKind::Preempted)
    } else {
        (Counter::SwitchesVoluntary, OffCpuKind::Blocked)
    };
    sink.add(counter, 1);
    let Some(state) = track(out.tid, out.tgid, cpu) else {
        return;
    };
    // SAFETY: map value, written only by this thread's own switches.
    let state = unsafe { &mut *state };
    ran_until(state, ts);
    if state.rq != 0 {
        let stolen = rq_steal(state.rq).saturating_sub(state.steal_mark);
        acct_add(state, ts, Account::Steal, stolen);
    }
    state.run_ts = 0;
    state.off_site = if runnable {
        WaitSite::Other as u32
    } else {
        wait_site(state.syscall, out.state)
    };
    state.off_kind = kind as u32;
    state.off_ts = ts;
    state.wakeup_ts = 0;
    state.cpu_out = cpu_id();
    state.next_pid = out.next_pid;
    state.next_ran_ns = 0;
    // Named by note_runner when that task's slice ends (or by userspace).
    state.next_comm[0] = 0;
    if runnable {
        // Still runnable here: watch this CPU until the thread runs again
        // (who runs longest, and IRQ time while it waits).
        state.wait_cpu = cpu_id();
        // SAFETY: per-CPU value; sched_switch runs with IRQs off.
        unsafe {
            (*cpu).waiting_tid = out.tid;
            (*cpu).last_switch_ts = ts;
        }
    }
}

#[inline(always)]
fn switch_in(sink: &Sink, st: &mut ThreadState, ts: u64) {
    if st.off_kind == 0 || st.off_ts == 0 || ts < st.off_ts {
        st.off_kind = 0;
        return;
    }
    let total = ts - st.off_ts;
    let (runnable, blocked) = if st.off_kind == OffCpuKind::Preempted as u32 {
        (total, 0)
    } else if st.wakeup_ts >= st.off_ts && st.wakeup_ts <= ts {
        (ts - st.wakeup_ts, st.wakeup_ts - st.off_ts)
    } else {
        // Woken before the probes saw it: call it all blocked.
        (0, total)
    };
    sink.add(Counter::RunnableNs, runnable);
    sink.add(Counter::BlockedNs, blocked);
    if st.syscall != 0 {
        st.sys_offcpu_ns += total;
    }
    if total >= config!(min_offcpu_record_ns) {
        emit_offcpu(sink, st, ts, runnable, blocked);
    } else if st.off_site == WaitSite::Migration as u32 && st.off_kind == OffCpuKind::Blocked as u32
    {
        // Waiting for its own migration, then for the new CPU: all of it
        // is the migration's.
        acct_add_at(
            st,
            ts,
            Account::Blocked as u32 + WaitSite::Migration as u32,
            total,
        );
    } else {
        acct_add(st, ts, Account::Runnable, runnable);
        let site = Account::Blocked as u32 + (st.off_site & 7).min(WaitSite::Other as u32);
        acct_add_at(st, ts, site, blocked);
    }
    st.off_kind = 0;
}

#[inline(always)]
fn emit_offcpu(sink: &Sink, st: &ThreadState, ts: u64, runnable: u64, blocked: u64) {
    match RECORDS.reserve::<OffCpuRecord>(0) {
        Some(mut entry) => {
            entry.write(OffCpuRecord {
                tid: st.tid,
                tgid: st.tgid,
                kind: st.off_kind,
                cpu_out: st.cpu_out,
                cpu_in: cpu_id(),
                next_pid: st.next_pid,
                start_ns: st.off_ts,
                end_ns: ts,
                runnable_ns: runnable,
                blocked_ns: blocked,
                next_comm: st.next_comm,
                syscall: st.syscall,
                site: st.off_site,
            });
            entry.submit(BPF_RB_NO_WAKEUP as u64);
        }
        // SAFETY: pointer from the map lookup in `Sink::at`.
        None => unsafe { (*sink.cpu).totals[Total::RingReserveFailed as usize] += 1 },
    }
}

/// Marks the blocked → runnable edge of a target thread, and starts
/// watching who runs on the CPU it was queued on until it runs.
/// sched_wakeup(task *p)
#[btf_tracepoint(function = "sched_wakeup")]
pub fn sched_wakeup(ctx: BtfTracePointContext) -> i32 {
    if config!(floor_only) != 0 {
        return 0;
    }
    let task: *const u8 = arg(&ctx, 0);
    let pid = task_pid(task);
    let Some(st) = thread(pid) else { return 0 };
    // SAFETY: map value.
    unsafe {
        if (*st).off_kind != OffCpuKind::Blocked as u32 || (*st).wakeup_ts != 0 {
            return 0;
        }
        let ts = now();
        let cpu = task_cpu(task);
        (*st).wakeup_ts = ts;
        (*st).wait_cpu = cpu;
        (*st).next_pid = 0;
        (*st).next_ran_ns = 0;
        (*st).next_comm[0] = 0;
        // The queue's CPU state, written from the waking CPU: a race with
        // that CPU's sched_switch can only misattribute who ran, never a count.
        // Woken onto this CPU (the common case when woken from an IPI): the
        // inlined local lookup instead of a helper call.
        let remote = if cpu == cpu_id() {
            cpu_state().unwrap_or(core::ptr::null_mut())
        } else {
            let key = 0u32;
            aya_ebpf::helpers::generated::bpf_map_lookup_percpu_elem(
                (&raw const CPUS).cast_mut().cast(),
                (&raw const key).cast(),
                cpu,
            )
            .cast::<CpuState>()
        };
        if !remote.is_null() {
            (*remote).waiting_tid = pid;
            (*remote).last_switch_ts = ts;
        }
    }
    0
}

/// Fires in the migrating context, so the filter is on the migrated task.
/// sched_migrate_task(task *p, int dest_cpu)
#[btf_tracepoint(function = "sched_migrate_task")]
pub fn sched_migrate_task(ctx: BtfTracePointContext) -> i32 {
    if config!(floor_only) != 0 {
        return 0;
    }
    let pid = task_pid(arg(&ctx, 0));
    if thread(pid).is_some() {
        count_one(Counter::Migrations);
    }
    0
}

/// New threads (and, with follow_children, new processes) of the target.
/// Runs in the parent's context and, unlike sched_process_fork, carries the
/// clone flags that tell a thread from a process.
/// task_newtask(task *task, u64 clone_flags)
#[btf_tracepoint(function = "task_newtask")]
pub fn task_newtask(ctx: BtfTracePointContext) -> i32 {
    if config!(floor_only) != 0 {
        return 0;
    }
    let tgid = current_tgid();
    if !is_target_tgid(tgid) {
        return 0;
    }
    let Some(cpu) = cpu_state() else { return 0 };
    let pid = task_pid(arg(&ctx, 0));
    let flags: u64 = arg(&ctx, 1);
    let owner = if flags & CLONE_THREAD != 0 {
        tgid
    } else if config!(follow_children) != 0 {
        if CHILD_TGIDS.insert(&pid, &tgid, 0).is_err() {
            // SAFETY: per-CPU map value.
            unsafe { (*cpu).totals[Total::ThreadMapFull as usize] += 1 };
        }
        pid
    } else {
        return 0;
    };
    let _ = track(pid, owner, cpu);
    0
}

/// sched_process_exit(task *p, bool group_dead)
#[btf_tracepoint(function = "sched_process_exit")]
pub fn sched_process_exit(ctx: BtfTracePointContext) -> i32 {
    if config!(floor_only) != 0 {
        return 0;
    }
    let pid = task_pid(arg(&ctx, 0));
    if config!(follow_children) != 0 {
        let _ = CHILD_TGIDS.remove(&pid);
    }
    0
}

// --------------------------------------------------------------- hard IRQs

/// Bits of `CpuState::irq_while_waiting`.
const HARDIRQ_WAITING: u64 = 1;
const SOFTIRQ_WAITING: u64 = 2;

/// Whether `cpu`'s waiting target thread really still waits for this CPU
/// (`waiting_tid` is only cleared at the CPU's next context switch).
#[inline(always)]
fn still_waiting(state: &CpuState) -> bool {
    let Some(w) = thread(state.waiting_tid) else {
        return false;
    };
    // SAFETY: map value.
    unsafe {
        ((*w).off_kind == OffCpuKind::Preempted as u32
            || ((*w).off_kind == OffCpuKind::Blocked as u32 && (*w).wakeup_ts != 0))
            && (*w).wait_cpu == cpu_id()
    }
}

/// Starts timing an IRQ if it steals time from a target thread: one running
/// on this CPU, or one waiting runnable for it. Returns the start (0: not
/// timed) and whether it is the waiting case.
#[inline(always)]
fn irq_start(state: &CpuState) -> (u64, bool) {
    if state.target_tid != 0 {
        (now(), false)
    } else if state.waiting_tid != 0 {
        (now(), true)
    } else {
        (0, false)
    }
}

/// A softirq that was not timed at entry but ends with a target thread
/// waiting runnable for this CPU woke that thread itself: the thread has waited
/// since its wakeup (`last_switch_ts`, set by sched_wakeup). Returns that
/// wait, 0 if none.
#[inline(always)]
fn woken_during(state: &CpuState, ts: u64) -> u64 {
    if state.waiting_tid == 0 || !still_waiting(state) {
        return 0;
    }
    ts.saturating_sub(state.last_switch_ts)
}

#[inline(always)]
fn hardirq_entry() {
    if let Some(cpu) = cpu_state() {
        // SAFETY: per-CPU value; hard IRQs do not nest.
        let state = unsafe { &mut *cpu };
        let (start, waiting) = irq_start(state);
        state.hardirq_start = start;
        if waiting {
            state.irq_while_waiting |= HARDIRQ_WAITING;
        } else {
            state.irq_while_waiting &= !HARDIRQ_WAITING;
        }
    }
}

#[inline(always)]
fn hardirq_exit(kind: IrqKind) {
    let Some(cpu) = cpu_state() else { return };
    // SAFETY: per-CPU value; hard IRQs do not nest.
    let state = unsafe { &mut *cpu };
    let start = state.hardirq_start;
    // Unlike softirqs, a hard IRQ that wakes a target thread is not timed
    // from the wakeup: what is left of it is microseconds, and remote
    // wakeups (an IPI each) would pay a clock read for nothing.
    if start == 0 {
        return;
    }
    state.hardirq_start = 0;
    let ts = now();
    let duration = ts.saturating_sub(start);
    if state.softirq_start != 0 {
        state.softirq_nested_ns += duration;
    }
    let Some(sink) = Sink::at(ts, cpu) else {
        return;
    };
    if state.irq_while_waiting & HARDIRQ_WAITING != 0 {
        sink.add(Counter::HardIrqWaitNs, duration);
        thread_acct(state.waiting_tid, ts, Account::HardIrqWait, duration);
        return;
    }
    state.totals[(TOTAL_IRQ_KIND_BASE + kind as u32) as usize] += 1;
    sink.add(Counter::HardIrqs, 1);
    sink.add(Counter::HardIrqNs, duration);
    thread_acct(state.target_tid, ts, Account::HardIrq, duration);
}

/// Adds to the account of target thread `tid`, if it is one. IRQ time
/// while the thread runs inside a syscall is not the syscall's own work.
#[inline(always)]
fn thread_acct(tid: u32, ts: u64, slot: Account, value: u64) {
    if let Some(st) = thread(tid) {
        // SAFETY: map value; see the module docs for concurrency.
        let st = unsafe { &mut *st };
        if st.syscall != 0 && matches!(slot, Account::HardIrq | Account::SoftIrq) {
            st.sys_irq_ns += value;
        }
        acct_add(st, ts, slot, value);
    }
}

macro_rules! hardirq_programs {
    ($($entry:ident, $entry_tp:literal, $exit:ident, $exit_tp:literal, $kind:expr;)*) => {$(
        #[btf_tracepoint(function = $entry_tp)]
        pub fn $entry(_ctx: BtfTracePointContext) -> i32 {
            if config!(floor_only) != 0 {
                return 0;
            }
            hardirq_entry();
            0
        }
        #[btf_tracepoint(function = $exit_tp)]
        pub fn $exit(_ctx: BtfTracePointContext) -> i32 {
            if config!(floor_only) != 0 {
                return 0;
            }
            hardirq_exit($kind);
            0
        }
    )*};
}

hardirq_programs! {
    irq_handler_entry, "irq_handler_entry", irq_handler_exit, "irq_handler_exit", IrqKind::Device;
    local_timer_entry, "local_timer_entry", local_timer_exit, "local_timer_exit", IrqKind::LocalTimer;
    reschedule_entry, "reschedule_entry", reschedule_exit, "reschedule_exit", IrqKind::Reschedule;
    call_function_entry, "call_function_entry", call_function_exit, "call_function_exit", IrqKind::CallFunction;
    call_function_single_entry, "call_function_single_entry", call_function_single_exit, "call_function_single_exit", IrqKind::CallFunctionSingle;
    irq_work_entry, "irq_work_entry", irq_work_exit, "irq_work_exit", IrqKind::IrqWork;
}

// ---------------------------------------------------------------- softirqs

#[btf_tracepoint(function = "softirq_entry")]
pub fn softirq_entry(_ctx: BtfTracePointContext) -> i32 {
    if config!(floor_only) != 0 {
        return 0;
    }
    if let Some(cpu) = cpu_state() {
        // SAFETY: per-CPU value; softirqs do not nest on a CPU.
        let state = unsafe { &mut *cpu };
        let (start, waiting) = irq_start(state);
        state.softirq_start = start;
        state.softirq_nested_ns = 0;
        if waiting {
            state.irq_while_waiting |= SOFTIRQ_WAITING;
        } else {
            state.irq_while_waiting &= !SOFTIRQ_WAITING;
        }
    }
    0
}

/// softirq_exit(unsigned int vec_nr)
#[btf_tracepoint(function = "softirq_exit")]
pub fn softirq_exit(ctx: BtfTracePointContext) -> i32 {
    if config!(floor_only) != 0 {
        return 0;
    }
    let Some(cpu) = cpu_state() else { return 0 };
    // SAFETY: per-CPU value; softirqs do not nest on a CPU.
    let state = unsafe { &mut *cpu };
    let start = state.softirq_start;
    if start == 0 {
        // A softirq that woke a target thread (a packet for it, among a
        // burst of others) keeps it waiting until the softirq ends.
        if state.waiting_tid != 0 {
            let ts = now();
            let woken = woken_during(state, ts);
            if woken > 0
                && let Some(sink) = Sink::at(ts, cpu)
            {
                sink.add(Counter::SoftIrqWaitNs, woken);
                thread_acct(state.waiting_tid, ts, Account::SoftIrqWait, woken);
            }
        }
        return 0;
    }
    state.softirq_start = 0;
    let ts = now();
    let duration = ts
        .saturating_sub(start)
        .saturating_sub(state.softirq_nested_ns);
    let Some(sink) = Sink::at(ts, cpu) else {
        return 0;
    };
    if state.irq_while_waiting & SOFTIRQ_WAITING != 0 {
        sink.add(Counter::SoftIrqWaitNs, duration);
        thread_acct(state.waiting_tid, ts, Account::SoftIrqWait, duration);
        return 0;
    }
    let vec: u32 = arg(&ctx, 0);
    state.softirqs[(vec & 15) as usize] += 1;
    sink.add(Counter::SoftIrqs, 1);
    sink.add(Counter::SoftIrqNs, duration);
    thread_acct(state.target_tid, ts, Account::SoftIrq, duration);
    0
}

const _: () = assert!(NUM_TOTALS > TOTAL_IRQ_KIND_BASE);

// ------------------------------------------------------------- syscalls

/// Notes the syscall a target thread enters: where its off-CPU time goes
/// and how long the kernel works for it are measured against this.
/// sys_enter(struct pt_regs *regs, long id)
#[btf_tracepoint(function = "sys_enter")]
pub fn sys_enter(ctx: BtfTracePointContext) -> i32 {
    if config!(floor_only) != 0 {
        return 0;
    }
    let Some(st) = thread(bpf_get_current_pid_tgid() as u32) else {
        return 0;
    };
    let nr: i64 = arg(&ctx, 1);
    // SAFETY: map value, written by this thread's own programs.
    unsafe {
        (*st).syscall = (nr as u32).wrapping_add(1);
        (*st).sys_enter_ts = now();
        (*st).sys_offcpu_ns = 0;
        (*st).sys_irq_ns = 0;
    }
    0
}

/// A target thread leaves its syscall: its time in the kernel (enter to
/// exit, minus the time it spent off the CPU inside) is booked per syscall,
/// in the thread's account, and as a record when the call was long.
#[inline(always)]
fn syscall_done(st: &mut ThreadState) {
    let syscall = st.syscall;
    if syscall == 0 || st.sys_enter_ts == 0 {
        return;
    }
    st.syscall = 0;
    let ts = now();
    let total = ts.saturating_sub(st.sys_enter_ts);
    let off = st.sys_offcpu_ns.min(total);
    let irq = st.sys_irq_ns.min(total - off);
    let on = total - off - irq;
    let index = (syscall - 1) & (SYSCALL_SLOTS - 1);
    if let Some(t) = SYSCALL_TOTALS.get_ptr_mut(index) {
        // SAFETY: per-CPU map value.
        unsafe {
            (*t).calls += 1;
            (*t).total_ns += total;
            (*t).offcpu_ns += off;
            (*t).irq_ns += irq;
        }
    }
    // Only the call's own work needs a timestamped record: its time off
    // the CPU is in the off-CPU records already (a blocking epoll_wait is
    // long, but not kernel work).
    if on >= config!(min_offcpu_record_ns) {
        match SYSCALL_RECORDS.reserve::<SyscallRecord>(0) {
            Some(mut entry) => {
                entry.write(SyscallRecord {
                    tid: st.tid,
                    tgid: st.tgid,
                    nr: syscall - 1,
                    _pad: 0,
                    start_ns: st.sys_enter_ts,
                    end_ns: ts,
                    offcpu_ns: off,
                    irq_ns: irq,
                });
                entry.submit(BPF_RB_NO_WAKEUP as u64);
            }
            None => total_add(Total::SyscallRecordsLost),
        }
        return;
    }
    acct_roll(st, ts);
    acct_add(st, ts, Account::SyscallCpu, on);
    if SYSCALL_SITES.get(index).copied() == Some(WaitSite::Migration as u32) {
        acct_add(st, ts, Account::MigrationCpu, on);
    }
    if on > st.top_syscall_ns {
        st.top_syscall_ns = on;
        st.top_syscall = syscall;
    }
}

// ---------------------------------------------------------------- samples

/// Software perf event CPU_CLOCK, one per CPU at `--sample-hz`: books the
/// running target thread's CPU time and steal so far, and what the
/// interrupted context was doing (user code, a syscall, an IRQ, or kernel
/// work outside both: fault handling).
#[perf_event]
pub fn cpu_sample(ctx: PerfEventContext) -> u32 {
    if config!(floor_only) != 0 {
        return 0;
    }
    let Some(st) = thread(bpf_get_current_pid_tgid() as u32) else {
        return 0;
    };
    // SAFETY: map value; see the module docs for concurrency.
    let st = unsafe { &mut *st };
    let ts = now();
    total_add(Total::Samples);
    ran_until(st, ts);
    if st.rq != 0 {
        let steal = rq_steal(st.rq);
        acct_add(st, ts, Account::Steal, steal.saturating_sub(st.steal_mark));
        st.steal_mark = steal;
    }
    // SAFETY: the context of a perf-event program is bpf_perf_event_data,
    // whose first member is the interrupted context's registers.
    let cs = unsafe {
        (*ctx
            .as_ptr()
            .cast::<aya_ebpf::bindings::bpf_perf_event_data>())
        .regs
        .cs
    };
    let in_softirq = cpu_state().is_some_and(|c| {
        // SAFETY: per-CPU value.
        unsafe { (*c).softirq_start != 0 }
    });
    // The sample runs in the timer's hard IRQ: the interrupted context was
    // never a hard IRQ, but may be a softirq.
    let slot = if cs & 3 == 3 {
        Account::SamplesUser
    } else if in_softirq {
        Account::SamplesIrq
    } else if st.syscall != 0 {
        Account::SamplesSyscall
    } else {
        Account::SamplesFault
    };
    acct_add(st, ts, slot, 1);
    0
}

// --------------------------------------------------- passive request latency

/// x86-64 syscall numbers of the calls that move a request's bytes.
const SYS_READ: u64 = 0;
const SYS_WRITE: u64 = 1;
const SYS_READV: u64 = 19;
const SYS_WRITEV: u64 = 20;
const SYS_SENDTO: u64 = 44;
const SYS_RECVFROM: u64 = 45;
const SYS_SENDMSG: u64 = 46;
const SYS_RECVMSG: u64 = 47;

#[inline(always)]
fn total_add(t: Total) {
    if let Some(cpu) = cpu_state() {
        // SAFETY: per-CPU value.
        unsafe { (*cpu).totals[t as usize] += 1 };
    }
}

#[inline(always)]
fn emit_request(rec: RequestRecord) {
    match REQUESTS.reserve::<RequestRecord>(0) {
        Some(mut entry) => {
            entry.write(rec);
            entry.submit(BPF_RB_NO_WAKEUP as u64);
        }
        None => total_add(Total::RequestsLost),
    }
}

/// `--syscalls`: at the exit of every syscall of the target, a read that
/// returned data starts a request on that connection (unless one is
/// pending), and a write that sent data ends the pending one. Which fds
/// are sockets is checked in userspace (the kernel side would need to walk
/// the fd table). The syscall number and fd are read from the saved user
/// registers, which syscalls do not change.
/// sys_exit(struct pt_regs *regs, long ret)
#[btf_tracepoint(function = "sys_exit")]
pub fn sys_exit(ctx: BtfTracePointContext) -> i32 {
    if config!(floor_only) != 0 {
        return 0;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    if let Some(st) = thread(pid_tgid as u32) {
        // SAFETY: map value, written by this thread's own programs.
        syscall_done(unsafe { &mut *st });
    }
    if config!(passive_syscalls) != 0 {
        pair_request(&ctx, pid_tgid);
    }
    0
}

/// `--syscalls`: pairs socket reads and writes into requests.
#[inline(always)]
fn pair_request(ctx: &BtfTracePointContext, pid_tgid: u64) {
    let tgid = (pid_tgid >> 32) as u32;
    if !is_target_tgid(tgid) {
        return;
    }
    let ret: i64 = arg(ctx, 1);
    if ret <= 0 {
        return;
    }
    let regs: *const u8 = arg(ctx, 0);
    // SAFETY: the helper checks the address.
    let read_reg = |offset: u64| unsafe {
        bpf_probe_read_kernel(regs.add(offset as usize).cast::<u64>()).unwrap_or(u64::MAX)
    };
    let nr = read_reg(config!(regs_nr_offset));
    let reading = match nr {
        SYS_READ | SYS_READV | SYS_RECVFROM | SYS_RECVMSG => true,
        SYS_WRITE | SYS_WRITEV | SYS_SENDTO | SYS_SENDMSG => false,
        _ => return,
    };
    let fd = read_reg(config!(regs_arg0_offset)) as u32;
    let key = (u64::from(tgid) << 32) | u64::from(fd);
    let ts = now();
    let conn = CONNS.get_ptr_mut(&key);
    if reading {
        match conn {
            // SAFETY: map value.
            Some(c) => unsafe {
                if (*c).responded == 0 {
                    (*c).reads += 1;
                    (*c).bytes_in += ret as u64;
                } else {
                    (*c).start_ns = ts;
                    (*c).reads = 1;
                    (*c).responded = 0;
                    (*c).bytes_in = ret as u64;
                }
            },
            None => {
                let fresh = ConnState {
                    start_ns: ts,
                    reads: 1,
                    responded: 0,
                    bytes_in: ret as u64,
                };
                let _ = CONNS.insert(&key, &fresh, 0);
            }
        }
        return;
    }
    match conn {
        // SAFETY: map value.
        Some(c) if unsafe { (*c).responded } == 0 => unsafe {
            (*c).responded = 1;
            emit_request(RequestRecord {
                tgid,
                tid: pid_tgid as u32,
                fd,
                reads: (*c).reads,
                bytes_in: (*c).bytes_in.min(u64::from(u32::MAX)) as u32,
                bytes_out: ret.min(i64::from(u32::MAX)) as u32,
                start_ns: (*c).start_ns,
                end_ns: ts,
            });
        },
        _ => total_add(Total::UnpairedWrites),
    }
}

/// `--uprobe` entry: time one call in `uprobe_every` of each thread (its
/// N-th, 2N-th, ... call), and count nesting inside a timed call.
#[uprobe]
pub fn call_entry(_ctx: ProbeContext) -> u32 {
    if config!(floor_only) != 0 {
        return 0;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    if !is_target_tgid((pid_tgid >> 32) as u32) {
        return 0;
    }
    let tid = pid_tgid as u32;
    total_add(Total::UprobeCalls);
    let c = match CALLS.get_ptr_mut(&tid) {
        Some(c) => c,
        None => {
            let _ = CALLS.insert(&tid, &CallState::default(), 0);
            let Some(c) = CALLS.get_ptr_mut(&tid) else {
                return 0;
            };
            c
        }
    };
    let every = config!(uprobe_every).max(1);
    // SAFETY: map value, only this thread's probes touch it.
    unsafe {
        if (*c).start_ns != 0 {
            (*c).depth += 1;
            return 0;
        }
        (*c).seq += 1;
        if (*c).seq % every == 0 {
            (*c).depth = 0;
            (*c).start_ns = now();
        }
    }
    0
}

/// `--uprobe` return: ends a timed call (not a nested one).
#[uretprobe]
pub fn call_return(_ctx: RetProbeContext) -> u32 {
    if config!(floor_only) != 0 {
        return 0;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    if !is_target_tgid(tgid) {
        return 0;
    }
    let tid = pid_tgid as u32;
    let Some(c) = CALLS.get_ptr_mut(&tid) else {
        return 0;
    };
    // SAFETY: map value, only this thread's probes touch it.
    unsafe {
        let start = (*c).start_ns;
        if start == 0 {
            return 0;
        }
        if (*c).depth > 0 {
            (*c).depth -= 1;
            return 0;
        }
        (*c).start_ns = 0;
        emit_request(RequestRecord {
            tgid,
            tid,
            fd: UPROBE_FD,
            reads: 1,
            bytes_in: 0,
            bytes_out: 0,
            start_ns: start,
            end_ns: now(),
        });
    }
    0
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
