//! Hard IRQs (device, local timer, IPIs) and softirqs: counted, and timed
//! when they take a CPU from a target thread running there or waiting for it.

use aya_ebpf::{
    helpers::generated::bpf_get_current_task_btf, macros::btf_tracepoint,
    programs::BtfTracePointContext,
};
use correlator_common::{
    Account, Counter, CpuState, DEVICE_IRQ_SLOTS, HARDIRQ_KIND_NS_BASE, IrqKind,
    NUM_SOFTIRQ_VECTORS, NUM_TOTALS, OffCpuKind, SOFTIRQ_NS_BASE, TOTAL_IRQ_KIND_BASE, Total,
};

use crate::{
    account::{arrival_ts, close_silence_window, rq_steal, thread_acct, window_restart},
    helpers::{Sink, arg, cpu_id, cpu_state, now},
    maps::DEVICE_IRQS,
    sched::{note_unseen_runner, switched_in_unseen},
    threads::thread,
};

/// Bits of `CpuState::irq_while_waiting`.
pub(crate) const HARDIRQ_WAITING: u64 = 1;
pub(crate) const SOFTIRQ_WAITING: u64 = 2;

/// The time counter slot of softirq vector `vec` (vectors past the last
/// known one share its slot).
#[inline(always)]
fn softirq_ns_slot(vec: u32) -> usize {
    SOFTIRQ_NS_BASE + (vec as usize).min(NUM_SOFTIRQ_VECTORS - 1)
}

/// Whether `cpu`'s waiting target thread really still waits for this CPU
/// (`waiting_tid` is only cleared at the CPU's next context switch).
#[inline(always)]
pub(crate) fn still_waiting(state: &CpuState) -> bool {
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
pub(crate) fn irq_start(state: &CpuState) -> (u64, bool) {
    if state.target_tid != 0 {
        (now(), false)
    } else if state.waiting_tid != 0 {
        (now(), true)
    } else {
        (0, false)
    }
}

/// The CPU's steal clock now, to mark a timed IRQ's entry (0 when the CPU's
/// run queue is not known yet).
#[inline(always)]
pub(crate) fn steal_now(state: &CpuState) -> u64 {
    if state.rq != 0 { rq_steal(state.rq) } else { 0 }
}

/// Steal since `mark` (taken by [`steal_now`] at the IRQ's entry): a
/// host stall inside the IRQ, which is the host's time, not the IRQ's. The
/// thread books it as steal at its next steal catch-up (its own mark is
/// older), so the IRQ must not also claim it; otherwise a 20 ms host
/// stall inside a softirq counted as 20 ms of softirq *and* 20 ms of
/// steal (episodes with softirq 23.6 ms and steal 21.7 ms in 25 ms).
#[inline(always)]
pub(crate) fn stolen_since(state: &CpuState, mark: u64) -> u64 {
    if mark == 0 || state.rq == 0 {
        return 0;
    }
    rq_steal(state.rq).saturating_sub(mark)
}

/// A softirq that was not timed at entry but ends with a target thread
/// waiting runnable for this CPU woke that thread itself: the thread has waited
/// since its wakeup (`last_switch_ts`, set by sched_waking). Returns that
/// wait, 0 if none.
#[inline(always)]
pub(crate) fn woken_during(state: &CpuState, ts: u64) -> u64 {
    if state.waiting_tid == 0 || !still_waiting(state) {
        return 0;
    }
    ts.saturating_sub(state.last_switch_ts)
}

/// Checks, at an IRQ's entry, that the task it interrupts is the one the
/// last context switch seen on this CPU made current, and puts it right
/// if not. This kernel switches tasks without firing sched_switch now and
/// then (measured: a thread of the VM's agent that preempts a task is
/// switched away from untraced, about once a second per CPU, so the
/// preempted task runs again unseen): without this check, a target
/// thread's ticks were counted against no one until its next traced
/// switch, tens of milliseconds later (2,403 of bpftrace's 2,530 local
/// timer ticks with a CPU hog beside the target). One helper call per IRQ.
///
/// A target thread found running that the probes had off the CPU came
/// back unseen: its open off-CPU interval ends at the scheduler's own
/// stamp of that switch-in ([`switched_in_unseen`]); when that cannot be
/// dated it is dropped, not given a made-up end (that time stays
/// unexplained), and the thread runs from now. A target thread waiting for
/// this CPU has its runner's slice end there too ([`note_unseen_runner`]).
/// Its timer-silence window is closed first, as a sample or a switch-out
/// would close it: a window in which nobody on this CPU was sampled for
/// more than two periods is the vCPU's stall whichever task the unseen
/// switch put in it. Seen here (a spinner preempted by a traced switch at
/// the start of a 2.46 ms host stall, switched back unseen, found running
/// by the timer 3.3 ms later): restarting the window dropped the stall,
/// booked as nobody's, in about one run of
/// `host_stalls_are_steal_not_the_threads_time` in three.
#[inline(always)]
pub(crate) fn resync_current(state: &mut CpuState) {
    let cur = aya_ebpf::helpers::bpf_get_current_pid_tgid() as u32;
    if state.cur_known != 0 && cur == state.cur_pid {
        return;
    }
    let found = thread(cur);
    // Plain values, not Options: the verifier rejected the code LLVM made
    // of `Option::filter` here (a read of an uninitialised register).
    let untraced = state.cur_known != 0;
    let from = state.cur_pid;
    if untraced && (found.is_some() || state.target_tid != 0) {
        state.totals[Total::UntracedSwitches as usize] += 1;
    }
    state.cur_pid = cur;
    state.cur_known = 1;
    state.target_tid = if found.is_some() { cur } else { 0 };
    let waiting = if untraced { state.waiting_tid } else { 0 };
    let open = match found {
        // SAFETY: map value of the thread running here; its own switches
        // (which write it) cannot run inside this IRQ.
        Some(st) if unsafe { (*st).off_kind != 0 } => st,
        _ => core::ptr::null_mut(),
    };
    if open.is_null() && waiting == 0 {
        return;
    }
    let ts = now();
    // When the current task arrived here (the idle task has no stamp).
    let arrived = if cur != 0 {
        // SAFETY: the helper returns the current task's BTF pointer.
        arrival_ts(
            state,
            unsafe { bpf_get_current_task_btf() }.cast_const().cast(),
            ts,
        )
    } else {
        0
    };
    if waiting != 0 {
        note_unseen_runner(state, waiting, from, arrived);
    }
    if !open.is_null() {
        // SAFETY: as above.
        let st = unsafe { &mut *open };
        close_silence_window(st, state.last_sample_ts, ts);
        let steal = steal_now(state);
        let rq = state.rq;
        let dated = arrived != 0
            && Sink::at(ts, state)
                .is_some_and(|sink| switched_in_unseen(&sink, rq, st, arrived, steal));
        if !dated {
            st.off_kind = 0;
            st.run_ts = ts;
            st.rq = state.rq;
            st.steal_mark = steal;
        }
        window_restart(st, ts);
    }
}

#[inline(always)]
pub(crate) fn hardirq_entry() {
    if let Some(cpu) = cpu_state() {
        // SAFETY: per-CPU value; hard IRQs do not nest.
        let state = unsafe { &mut *cpu };
        resync_current(state);
        state.in_hardirq = 1;
        let (start, waiting) = irq_start(state);
        state.hardirq_start = start;
        state.hardirq_steal_mark = if start != 0 { steal_now(state) } else { 0 };
        if waiting {
            state.irq_while_waiting |= HARDIRQ_WAITING;
        } else {
            state.irq_while_waiting &= !HARDIRQ_WAITING;
        }
    }
}

/// Ends a hard IRQ: books its time to the target thread it interrupted
/// or kept waiting. Returns that time and whether the thread was waiting
/// (None: not timed).
#[inline(always)]
pub(crate) fn hardirq_exit(kind: IrqKind) -> Option<(u64, bool)> {
    let cpu = cpu_state()?;
    // SAFETY: per-CPU value; hard IRQs do not nest.
    let state = unsafe { &mut *cpu };
    state.in_hardirq = 0;
    let start = state.hardirq_start;
    // Unlike softirqs, a hard IRQ that wakes a target thread is not timed
    // from the wakeup: what is left of it is microseconds, and remote
    // wakeups (an IPI each) would pay a clock read for nothing.
    if start == 0 {
        return None;
    }
    state.hardirq_start = 0;
    let ts = now();
    let duration = ts
        .saturating_sub(start)
        .saturating_sub(stolen_since(state, state.hardirq_steal_mark));
    if state.softirq_start != 0 {
        state.softirq_nested_ns += duration;
    }
    let sink = Sink::at(ts, cpu)?;
    sink.add_at(HARDIRQ_KIND_NS_BASE + kind as usize, duration);
    if state.irq_while_waiting & HARDIRQ_WAITING != 0 {
        sink.add(Counter::HardIrqWaitNs, duration);
        thread_acct(state.waiting_tid, ts, Account::HardIrqWait, duration);
        return Some((duration, true));
    }
    state.irq_ns_sum += duration;
    state.totals[(TOTAL_IRQ_KIND_BASE + kind as u32) as usize] += 1;
    sink.add(Counter::HardIrqs, 1);
    sink.add(Counter::HardIrqNs, duration);
    thread_acct(state.target_tid, ts, Account::HardIrq, duration);
    Some((duration, false))
}

/// A device IRQ's time by its number (the kind's time is already in the
/// buckets): which device a report names.
#[inline(always)]
fn device_irq_exit(irq: u32) {
    let Some((duration, waiting)) = hardirq_exit(IrqKind::Device) else {
        return;
    };
    let Some(slot) = DEVICE_IRQS.get_ptr_mut(irq.min(DEVICE_IRQ_SLOTS - 1)) else {
        return;
    };
    // SAFETY: per-CPU map value; hard IRQs do not nest.
    let slot = unsafe { &mut *slot };
    if waiting {
        slot.wait_count += 1;
        slot.wait_ns += duration;
    } else {
        slot.count += 1;
        slot.ns += duration;
    }
}

/// irq_handler_entry(int irq, struct irqaction *action)
#[btf_tracepoint(function = "irq_handler_entry")]
pub fn irq_handler_entry(_ctx: BtfTracePointContext) -> i32 {
    if config!(floor_only) != 0 {
        return 0;
    }
    hardirq_entry();
    0
}

/// irq_handler_exit(int irq, struct irqaction *action, int ret)
#[btf_tracepoint(function = "irq_handler_exit")]
pub fn irq_handler_exit(ctx: BtfTracePointContext) -> i32 {
    if config!(floor_only) != 0 {
        return 0;
    }
    let irq: i32 = arg(&ctx, 0);
    device_irq_exit(irq as u32);
    0
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
            let _ = hardirq_exit($kind);
            0
        }
    )*};
}

hardirq_programs! {
    local_timer_entry, "local_timer_entry", local_timer_exit, "local_timer_exit", IrqKind::LocalTimer;
    reschedule_entry, "reschedule_entry", reschedule_exit, "reschedule_exit", IrqKind::Reschedule;
    call_function_entry, "call_function_entry", call_function_exit, "call_function_exit", IrqKind::CallFunction;
    call_function_single_entry, "call_function_single_entry", call_function_single_exit, "call_function_single_exit", IrqKind::CallFunctionSingle;
    irq_work_entry, "irq_work_entry", irq_work_exit, "irq_work_exit", IrqKind::IrqWork;
}

// ---------------------------------------------------------------- softirqs

/// softirq_entry(unsigned int vec_nr)
#[btf_tracepoint(function = "softirq_entry")]
pub fn softirq_entry(ctx: BtfTracePointContext) -> i32 {
    if config!(floor_only) != 0 {
        return 0;
    }
    if let Some(cpu) = cpu_state() {
        // SAFETY: per-CPU value; softirqs do not nest on a CPU.
        let state = unsafe { &mut *cpu };
        // Only when the softirq would be timed: with no target thread
        // running here or waiting for this CPU as the last switch left it,
        // the check's helper call (~45 ns) is paid by every softirq of
        // other tasks (a loopback client's sends raise one each). The next
        // hard IRQ (the tick) still catches an unseen switch-in.
        if state.cur_known == 0 || state.target_tid != 0 || state.waiting_tid != 0 {
            resync_current(state);
        }
        let vec: u32 = arg(&ctx, 0);
        state.in_softirq = (vec & 15) + 1;
        let (start, waiting) = irq_start(state);
        state.softirq_start = start;
        state.softirq_nested_ns = 0;
        state.softirq_steal_mark = if start != 0 { steal_now(state) } else { 0 };
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
    state.in_softirq = 0;
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
                let vec: u32 = arg(&ctx, 0);
                sink.add_at(softirq_ns_slot(vec), woken);
                sink.add(Counter::SoftIrqWaitNs, woken);
                thread_acct(state.waiting_tid, ts, Account::SoftIrqWait, woken);
            }
        }
        return 0;
    }
    state.softirq_start = 0;
    let ts = now();
    // Nested hard IRQs' time is already net of the steal inside them; the
    // softirq's steal covers all of its span, theirs included.
    let duration = ts
        .saturating_sub(start)
        .saturating_sub(state.softirq_nested_ns)
        .saturating_sub(stolen_since(state, state.softirq_steal_mark));
    let Some(sink) = Sink::at(ts, cpu) else {
        return 0;
    };
    let vec: u32 = arg(&ctx, 0);
    sink.add_at(softirq_ns_slot(vec), duration);
    if state.irq_while_waiting & SOFTIRQ_WAITING != 0 {
        sink.add(Counter::SoftIrqWaitNs, duration);
        thread_acct(state.waiting_tid, ts, Account::SoftIrqWait, duration);
        return 0;
    }
    state.irq_ns_sum += duration;
    state.softirqs[(vec & 15) as usize] += 1;
    sink.add(Counter::SoftIrqs, 1);
    sink.add(Counter::SoftIrqNs, duration);
    thread_acct(state.target_tid, ts, Account::SoftIrq, duration);
    0
}

const _: () = assert!(NUM_TOTALS > TOTAL_IRQ_KIND_BASE);
