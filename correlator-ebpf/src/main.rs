//! correlator's kernel programs.
//!
//! Cheap by design: every event of the target is counted into a per-CPU ring
//! of time buckets (and a per-CPU totals array used as a drain check); only
//! off-CPU intervals long enough to matter produce a ring-buffer record, and
//! those are submitted without waking the reader (userspace drains on a
//! timer). Each program filters on the target first and returns early.
#![no_std]
#![no_main]
// Atomic add on map values: the BPF target's `core` has no AtomicU64::fetch_add
// (no `target_has_atomic`), but LLVM lowers the intrinsic to BPF's atomic add.
#![allow(internal_features)]
#![feature(core_intrinsics)]

use core::intrinsics::{AtomicOrdering, atomic_xadd};

use aya_ebpf::{
    EbpfContext as _, Global,
    bindings::BPF_RB_NO_WAKEUP,
    helpers::{bpf_get_current_pid_tgid, bpf_get_smp_processor_id, bpf_ktime_get_ns},
    macros::{map, perf_event, tracepoint},
    maps::{HashMap, PerCpuArray, RingBuf},
    programs::{PerfEventContext, TracePointContext},
};
use correlator_common::{
    BUCKET_SLOTS, Bucket, Config, Counter, CpuState, IrqKind, NUM_COUNTERS, NUM_SOFTIRQ_VECTORS,
    NUM_TOTALS, OffCpuKind, OffCpuRecord, TOTAL_IRQ_KIND_BASE, TOTAL_SOFTIRQ_BASE, ThreadState,
    Total, tp,
};

#[unsafe(no_mangle)]
static CONFIG: Global<Config> = Global::new(Config {
    target_tgid: 0,
    follow_children: 0,
    bucket_ns: 1_000_000,
    min_offcpu_record_ns: 10_000,
    preempt_state: 0x100,
});

/// Ring of time buckets, per CPU.
#[map]
static BUCKETS: PerCpuArray<Bucket> = PerCpuArray::with_max_entries(BUCKET_SLOTS, 0);

/// Never-reset totals, per CPU: the counters, losses, per-IRQ-kind and
/// per-softirq-vector counts (layout in `correlator_common::Total`).
#[map]
static TOTALS: PerCpuArray<[u64; NUM_TOTALS as usize]> = PerCpuArray::with_max_entries(1, 0);

/// Per-CPU IRQ attribution state.
#[map]
static CPUS: PerCpuArray<CpuState> = PerCpuArray::with_max_entries(1, 0);

/// Every known thread of the target (and of followed children), by tid.
#[map]
static THREADS: HashMap<u32, ThreadState> = HashMap::with_max_entries(32768, 0);

/// Processes forked by the target (only with follow_children), by tgid.
#[map]
static CHILD_TGIDS: HashMap<u32, u32> = HashMap::with_max_entries(4096, 0);

/// Off-CPU interval records.
#[map]
static RECORDS: RingBuf = RingBuf::with_byte_size(4 << 20, 0);

const CLONE_THREAD: u64 = 0x0001_0000;
/// sched_switch prev_state bits of a dead task (EXIT_DEAD, EXIT_ZOMBIE as
/// reported by `__trace_sched_switch_state`).
const STATE_DEAD: u64 = 0x10 | 0x20;

#[inline(always)]
fn now() -> u64 {
    // SAFETY: helper without preconditions.
    unsafe { bpf_ktime_get_ns() }
}

#[inline(always)]
fn current_tgid() -> u32 {
    (bpf_get_current_pid_tgid() >> 32) as u32
}

#[inline(always)]
fn is_target_tgid(tgid: u32) -> bool {
    let cfg = CONFIG.load();
    tgid == cfg.target_tgid || (cfg.follow_children != 0 && CHILD_TGIDS.get_ptr(&tgid).is_some())
}

#[inline(always)]
fn atomic_add(slot: *mut u64, value: u64) {
    // SAFETY: `slot` points into a map value the verifier has bounds-checked.
    // Atomic because an IRQ-context program can interrupt a process-context
    // one on the same CPU and touch the same counter (e.g. migrations).
    unsafe { atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(slot, value) };
}

#[inline(always)]
fn total_add(index: u32, value: u64) {
    if let Some(totals) = TOTALS.get_ptr_mut(0) {
        let i = index as usize;
        if i < NUM_TOTALS as usize {
            // SAFETY: index checked against the array length above.
            atomic_add(unsafe { (*totals).as_mut_ptr().add(i) }, value);
        }
    }
}

/// Adds `value` to `counter` in the bucket of time `ts` and to the totals.
#[inline(always)]
fn count(counter: Counter, value: u64, ts: u64) {
    let bucket_ns = CONFIG.load().bucket_ns;
    if bucket_ns == 0 {
        return;
    }
    let epoch = ts / bucket_ns;
    let slot = (epoch & (BUCKET_SLOTS as u64 - 1)) as u32;
    if let Some(bucket) = BUCKETS.get_ptr_mut(slot) {
        // SAFETY: per-CPU map value; see `atomic_add` for the IRQ nesting.
        unsafe {
            if (*bucket).epoch != epoch {
                // Volatile stores: a plain `= [0; N]` becomes a byte-wise memset loop.
                let counts = (&raw mut (*bucket).counts).cast::<u64>();
                for i in 0..NUM_COUNTERS {
                    core::ptr::write_volatile(counts.add(i), 0);
                }
                (*bucket).epoch = epoch;
            }
            atomic_add(&raw mut (*bucket).counts[counter as usize], value);
        }
    }
    total_add(counter as u32, value);
}

#[inline(always)]
fn read<T: Copy>(ctx: &TracePointContext, offset: usize) -> T {
    // SAFETY: offsets are constants checked by userspace against the
    // tracepoint's format before loading; the verifier checks ctx bounds.
    unsafe { *(ctx.as_ptr() as *const u8).add(offset).cast::<T>() }
}

/// Reads a 16-byte comm as two 8-byte loads: a byte-wise copy would walk
/// a modified context pointer, which the verifier refuses.
#[inline(always)]
fn read_comm(ctx: &TracePointContext, offset: usize) -> [u8; 16] {
    let lo: u64 = read(ctx, offset);
    let hi: u64 = read(ctx, offset + 8);
    let mut comm = [0u8; 16];
    comm[..8].copy_from_slice(&lo.to_ne_bytes());
    comm[8..].copy_from_slice(&hi.to_ne_bytes());
    comm
}

#[inline(always)]
fn cpu_state() -> Option<*mut CpuState> {
    CPUS.get_ptr_mut(0)
}

// ---------------------------------------------------------------- faults

/// Software perf event PAGE_FAULTS_MIN, period 1, one per CPU.
#[perf_event]
pub fn page_fault_minor(_ctx: PerfEventContext) -> u32 {
    if is_target_tgid(current_tgid()) {
        count(Counter::PageFaultsMinor, 1, now());
    }
    0
}

/// Software perf event PAGE_FAULTS_MAJ, period 1, one per CPU.
#[perf_event]
pub fn page_fault_major(_ctx: PerfEventContext) -> u32 {
    if is_target_tgid(current_tgid()) {
        count(Counter::PageFaultsMajor, 1, now());
    }
    0
}

// -------------------------------------------------------------- scheduler

#[tracepoint]
pub fn sched_switch(ctx: TracePointContext) -> u32 {
    let ts = now();
    let prev_pid: u32 = read(&ctx, tp::SWITCH_PREV_PID);
    let next_pid: u32 = read(&ctx, tp::SWITCH_NEXT_PID);
    // sched_switch runs in the context of `prev`.
    let tgid = current_tgid();
    if prev_pid != 0 && is_target_tgid(tgid) {
        switch_out(&ctx, ts, prev_pid, tgid, next_pid);
    }
    switch_in(ts, next_pid);
    0
}

#[inline(always)]
fn switch_out(ctx: &TracePointContext, ts: u64, tid: u32, tgid: u32, next_pid: u32) {
    let prev_state: u64 = read(ctx, tp::SWITCH_PREV_STATE);
    if prev_state & STATE_DEAD != 0 {
        // The thread's final switch: not counted by the kernel's nvcsw/nivcsw
        // either, and it never comes back.
        let _ = THREADS.remove(&tid);
        return;
    }
    let runnable = prev_state == 0 || prev_state == CONFIG.load().preempt_state;
    let (counter, kind) = if runnable {
        (Counter::SwitchesInvoluntary, OffCpuKind::Preempted)
    } else {
        (Counter::SwitchesVoluntary, OffCpuKind::Blocked)
    };
    count(counter, 1, ts);
    // SAFETY: helper without preconditions.
    let cpu = unsafe { bpf_get_smp_processor_id() };
    let next_comm = read_comm(ctx, tp::SWITCH_NEXT_COMM);
    let state = ThreadState {
        tgid,
        off_kind: kind as u32,
        off_ts: ts,
        wakeup_ts: 0,
        cpu_out: cpu,
        next_pid,
        next_comm,
    };
    match THREADS.get_ptr_mut(&tid) {
        // SAFETY: preallocated hash map value, only this thread's switches
        // (serialised by the scheduler) write it.
        Some(existing) => unsafe { *existing = state },
        None => {
            if THREADS.insert(&tid, &state, 0).is_err() {
                total_add(Total::ThreadMapFull as u32, 1);
            }
        }
    }
}

#[inline(always)]
fn switch_in(ts: u64, next_pid: u32) {
    let Some(cpu) = cpu_state() else { return };
    let thread = if next_pid == 0 {
        None
    } else {
        THREADS.get_ptr_mut(&next_pid)
    };
    let Some(thread) = thread else {
        // SAFETY: per-CPU value, written with IRQs off (inside __schedule).
        unsafe { (*cpu).target_tid = 0 };
        return;
    };
    // SAFETY: as above; the thread's state is only written by its own switches.
    unsafe {
        (*cpu).target_tid = next_pid;
        let st = &mut *thread;
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
        count(Counter::RunnableNs, runnable, ts);
        count(Counter::BlockedNs, blocked, ts);
        if total >= CONFIG.load().min_offcpu_record_ns {
            emit_offcpu(st, next_pid, ts, runnable, blocked);
        }
        st.off_kind = 0;
    }
}

#[inline(always)]
fn emit_offcpu(st: &ThreadState, tid: u32, ts: u64, runnable: u64, blocked: u64) {
    match RECORDS.reserve::<OffCpuRecord>(0) {
        Some(mut entry) => {
            // SAFETY: helper without preconditions.
            let cpu_in = unsafe { bpf_get_smp_processor_id() };
            entry.write(OffCpuRecord {
                tid,
                tgid: st.tgid,
                kind: st.off_kind,
                cpu_out: st.cpu_out,
                cpu_in,
                next_pid: st.next_pid,
                start_ns: st.off_ts,
                end_ns: ts,
                runnable_ns: runnable,
                blocked_ns: blocked,
                next_comm: st.next_comm,
            });
            entry.submit(BPF_RB_NO_WAKEUP as u64);
        }
        None => total_add(Total::RingReserveFailed as u32, 1),
    }
}

/// Marks the blocked → runnable edge of a target thread.
#[tracepoint]
pub fn sched_wakeup(ctx: TracePointContext) -> u32 {
    let pid: u32 = read(&ctx, tp::WAKEUP_PID);
    if let Some(thread) = THREADS.get_ptr_mut(&pid) {
        // SAFETY: preallocated hash map value.
        unsafe {
            if (*thread).off_kind == OffCpuKind::Blocked as u32 && (*thread).wakeup_ts == 0 {
                (*thread).wakeup_ts = now();
            }
        }
    }
    0
}

/// Fires in the migrating context, so the filter is on the migrated task.
#[tracepoint]
pub fn sched_migrate_task(ctx: TracePointContext) -> u32 {
    let pid: u32 = read(&ctx, tp::MIGRATE_PID);
    if THREADS.get_ptr(&pid).is_some() {
        count(Counter::Migrations, 1, now());
    }
    0
}

/// New threads (and, with follow_children, new processes) of the target.
/// Runs in the parent's context and, unlike sched_process_fork, carries the
/// clone flags that tell a thread from a process.
#[tracepoint]
pub fn task_newtask(ctx: TracePointContext) -> u32 {
    let tgid = current_tgid();
    if !is_target_tgid(tgid) {
        return 0;
    }
    let pid: u32 = read(&ctx, tp::NEWTASK_PID);
    let flags: u64 = read(&ctx, tp::NEWTASK_CLONE_FLAGS);
    let owner = if flags & CLONE_THREAD != 0 {
        tgid
    } else if CONFIG.load().follow_children != 0 {
        if CHILD_TGIDS.insert(&pid, &tgid, 0).is_err() {
            total_add(Total::ThreadMapFull as u32, 1);
        }
        pid
    } else {
        return 0;
    };
    let state = ThreadState {
        tgid: owner,
        ..ThreadState::default()
    };
    if THREADS.insert(&pid, &state, 0).is_err() {
        total_add(Total::ThreadMapFull as u32, 1);
    }
    0
}

#[tracepoint]
pub fn sched_process_exit(ctx: TracePointContext) -> u32 {
    let pid: u32 = read(&ctx, tp::EXIT_PID);
    let _ = CHILD_TGIDS.remove(&pid);
    0
}

// --------------------------------------------------------------- hard IRQs

#[inline(always)]
fn hardirq_entry() {
    if let Some(cpu) = cpu_state() {
        // SAFETY: per-CPU value; hard IRQs do not nest.
        unsafe {
            (*cpu).hardirq_start = if (*cpu).target_tid != 0 { now() } else { 0 };
        }
    }
}

#[inline(always)]
fn hardirq_exit(kind: IrqKind) {
    let Some(cpu) = cpu_state() else { return };
    // SAFETY: per-CPU value; hard IRQs do not nest.
    unsafe {
        let start = (*cpu).hardirq_start;
        if start == 0 {
            return;
        }
        (*cpu).hardirq_start = 0;
        let ts = now();
        let duration = ts.saturating_sub(start);
        count(Counter::HardIrqs, 1, ts);
        count(Counter::HardIrqNs, duration, ts);
        total_add(TOTAL_IRQ_KIND_BASE + kind as u32, 1);
        if (*cpu).softirq_start != 0 {
            (*cpu).softirq_nested_ns += duration;
        }
    }
}

macro_rules! hardirq_programs {
    ($($entry:ident, $exit:ident, $category:literal, $entry_tp:literal, $exit_tp:literal, $kind:expr;)*) => {$(
        #[tracepoint(category = $category, name = $entry_tp)]
        pub fn $entry(_ctx: TracePointContext) -> u32 {
            hardirq_entry();
            0
        }
        #[tracepoint(category = $category, name = $exit_tp)]
        pub fn $exit(_ctx: TracePointContext) -> u32 {
            hardirq_exit($kind);
            0
        }
    )*};
}

hardirq_programs! {
    irq_handler_entry, irq_handler_exit, "irq", "irq_handler_entry", "irq_handler_exit", IrqKind::Device;
    local_timer_entry, local_timer_exit, "irq_vectors", "local_timer_entry", "local_timer_exit", IrqKind::LocalTimer;
    reschedule_entry, reschedule_exit, "irq_vectors", "reschedule_entry", "reschedule_exit", IrqKind::Reschedule;
    call_function_entry, call_function_exit, "irq_vectors", "call_function_entry", "call_function_exit", IrqKind::CallFunction;
    call_function_single_entry, call_function_single_exit, "irq_vectors", "call_function_single_entry", "call_function_single_exit", IrqKind::CallFunctionSingle;
    irq_work_entry, irq_work_exit, "irq_vectors", "irq_work_entry", "irq_work_exit", IrqKind::IrqWork;
}

// ---------------------------------------------------------------- softirqs

#[tracepoint(category = "irq", name = "softirq_entry")]
pub fn softirq_entry(_ctx: TracePointContext) -> u32 {
    if let Some(cpu) = cpu_state() {
        // SAFETY: per-CPU value; softirqs do not nest on a CPU.
        unsafe {
            (*cpu).softirq_start = if (*cpu).target_tid != 0 { now() } else { 0 };
            (*cpu).softirq_nested_ns = 0;
        }
    }
    0
}

#[tracepoint(category = "irq", name = "softirq_exit")]
pub fn softirq_exit(ctx: TracePointContext) -> u32 {
    let Some(cpu) = cpu_state() else { return 0 };
    // SAFETY: per-CPU value; softirqs do not nest on a CPU.
    unsafe {
        let start = (*cpu).softirq_start;
        if start == 0 {
            return 0;
        }
        (*cpu).softirq_start = 0;
        let ts = now();
        let duration = ts
            .saturating_sub(start)
            .saturating_sub((*cpu).softirq_nested_ns);
        count(Counter::SoftIrqs, 1, ts);
        count(Counter::SoftIrqNs, duration, ts);
        let vec: u32 = read(&ctx, tp::SOFTIRQ_VEC);
        if (vec as usize) < NUM_SOFTIRQ_VECTORS {
            total_add(TOTAL_SOFTIRQ_BASE + vec, 1);
        }
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
