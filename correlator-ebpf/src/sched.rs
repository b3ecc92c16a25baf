//! The scheduler: context switches (off-CPU intervals and their wait
//! site, who ran instead), wakeups, migrations, thread creation and exit.

use aya_ebpf::{
    bindings::BPF_RB_NO_WAKEUP, macros::btf_tracepoint, programs::BtfTracePointContext,
};
use correlator_common::{
    Account, Counter, CpuState, FAULT_SLEPT, NO_STACK, OffCpuKind, OffCpuRecord, SYSCALL_SLOTS,
    ThreadState, Total, WaitSite, WakeContext, wait_site_of,
};

use crate::{
    account::{
        acct_add, acct_add_at, arrival_ts, calibrate_rq_clock, clock_steal_add,
        close_silence_window, ran_until, rq_steal_at_switch, task_rq, window_restart,
    },
    helpers::{
        Sink, USER_STACK, arg, count_one, cpu_id, cpu_state, current_tgid, is_target_tgid, now,
        saved_syscall, stack_id, task_cpu, task_on_rq, task_pid, task_tgid, total_add,
    },
    maps::{CHILD_TGIDS, CPU_RQS, CPUS, RECORDS, SYSCALL_SITES},
    threads::{thread, track, untrack},
};

pub(crate) const CLONE_THREAD: u64 = 0x0001_0000;
/// `TASK_DEAD`: the state of a task's final switch.
pub(crate) const TASK_DEAD: u32 = 0x80;

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
    let (waiting, untraced_from) = unsafe {
        // The switch must start from the task the last one left current:
        // if not, the kernel switched without tracing it in between, and
        // the task it had made current left unseen.
        let untraced_from =
            ((*cpu).cur_known != 0 && (*cpu).cur_pid != prev_pid).then_some((*cpu).cur_pid);
        if untraced_from.is_some() && (prev_is_target || (*cpu).target_tid != 0) {
            (*cpu).totals[Total::UntracedSwitches as usize] += 1;
        }
        (*cpu).cur_pid = next_pid;
        (*cpu).cur_known = 1;
        (*cpu).target_tid = if next.is_some() { next_pid } else { 0 };
        // No spin outlives a switch (spinning disables preemption): a
        // contention whose end was never seen stops here.
        (*cpu).spin_lock = 0;
        ((*cpu).waiting_tid, untraced_from)
    };
    // SAFETY: per-CPU value.
    if unsafe { (*cpu).rq } == 0 && next_pid != 0 {
        note_rq(cpu, next_task);
    }
    if !prev_is_target && next.is_none() && waiting == 0 {
        return 0;
    }
    let ts = now();
    // Put on this CPU by a switch the kernel did not trace: when, by the
    // scheduler's own stamp (the idle task has none).
    let arrived = if untraced_from.is_some() && prev_pid != 0 {
        calibrate_rq_clock(cpu, task_rq(prev_task), ts);
        // SAFETY: per-CPU value.
        arrival_ts(unsafe { &*cpu }, prev_task, ts)
    } else {
        0
    };
    if waiting != 0 {
        if let Some(from) = untraced_from {
            // The task the last traced switch put here ran until then.
            note_unseen_runner(cpu, waiting, from, arrived);
        }
        note_runner(cpu, waiting, prev_pid, ts, true);
    }
    if !prev_is_target && next.is_none() {
        return 0;
    }
    let Some(sink) = Sink::at(ts, cpu) else {
        return 0;
    };
    // Both tasks are on this CPU's run queue: its steal clock is read once
    // for the thread leaving and the one arriving.
    let rq = task_rq(if next.is_some() { next_task } else { prev_task });
    let steal = rq_steal_at_switch(rq);
    calibrate_rq_clock(cpu, rq, ts);
    if prev_is_target {
        // Switched in unseen: its wait ends at its arrival, not never.
        if arrived != 0
            && let Some(st) = thread(prev_pid)
        {
            // SAFETY: per-CPU value; map value of the thread running here.
            switched_in_unseen(
                &sink,
                unsafe { (*cpu).rq },
                unsafe { &mut *st },
                arrived,
                steal,
            );
        }
        // The switching-out thread is still current: its kernel stack ends
        // in schedule() (userspace drops the tracing frames above it) and
        // its user stack is where it entered the kernel.
        let (kstack, ustack) = if config!(stacks) != 0 && prev_state as u32 & TASK_DEAD == 0 {
            (stack_id(&ctx, 0), stack_id(&ctx, USER_STACK))
        } else {
            (NO_STACK, NO_STACK)
        };
        // Without the syscall hooks, the syscall it sleeps in is read now,
        // from the registers it saved entering the kernel.
        let syscall = if config!(syscall_hooks) == 0 {
            saved_syscall(prev_task)
        } else {
            0
        };
        let out = SwitchOut {
            syscall,
            steal,
            tid: prev_pid,
            tgid,
            // Bool argument: only the low byte is defined.
            preempted: preempt & 0xff != 0,
            state: prev_state as u32,
            next_pid,
            kstack,
            ustack,
        };
        switch_out(&sink, cpu, ts, &out);
    }
    if let Some(next) = next {
        // SAFETY: map value; a thread's state is only written by its own
        // switches (serialised by the scheduler) and its wakeup.
        let st = unsafe { &mut *next };
        switch_in(&sink, st, ts);
        st.run_ts = ts;
        st.rq = rq as u64;
        st.steal_mark = steal;
        // Another task was sampled here since the thread's window began, or
        // the thread changed CPUs: its window starts now.
        // SAFETY: per-CPU value.
        if st.cpu_out != cpu_id() || unsafe { (*cpu).last_sample_ts } > st.window_start_ts {
            window_restart(st, ts);
        }
    }
    0
}

/// Keeps this CPU's run queue (through a task switching in here), once:
/// IRQs take the steal inside them off their time, and a kernel spin on
/// any CPU compares the other CPUs' steal clocks (`CPU_RQS`).
#[inline(never)]
fn note_rq(cpu: *mut CpuState, task: *const u8) {
    let rq = task_rq(task) as u64;
    if rq == 0 {
        return;
    }
    // SAFETY: per-CPU value.
    unsafe { (*cpu).rq = rq };
    if let Some(slot) = CPU_RQS.get_ptr_mut(cpu_id()) {
        // SAFETY: array map value; only this CPU writes its slot.
        unsafe { *slot = rq };
    }
}

/// A target thread waits runnable on this CPU: `prev` just ended a slice
/// there. Remember the task that ran longest in one go, which is the one
/// that took the CPU (the first to run after the preemption is often only a
/// short wakeup).
///
/// `current`: `prev` is the current task, whose comm can be read here;
/// otherwise userspace names it from /proc by pid.
#[inline(always)]
pub(crate) fn note_runner(cpu: *mut CpuState, waiting: u32, prev_pid: u32, ts: u64, current: bool) {
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
            if current && ran >= config!(min_offcpu_record_ns) / 2 {
                (*w).next_comm = aya_ebpf::helpers::bpf_get_current_comm().unwrap_or([0; 16]);
            }
        }
        (*cpu).last_switch_ts = ts;
    }
}

/// A target thread waits runnable on this CPU and a switch the kernel did
/// not trace took `from` (the task the last traced switch made current)
/// off it at `arrived` (0: undated): `from`'s slice ends there. Without
/// this, the untraced task's whole slice went to whichever task the next
/// traced switch found current (on this machine: the VM agent's threads,
/// which no tracepoint sees leave, handing the CPU to rcu_preempt, which
/// was then named for their milliseconds).
#[inline(always)]
pub(crate) fn note_unseen_runner(cpu: *mut CpuState, waiting: u32, from: u32, arrived: u64) {
    // SAFETY: per-CPU value.
    if arrived > unsafe { (*cpu).last_switch_ts } {
        note_runner(cpu, waiting, from, arrived, false);
    }
}

/// A target thread the kernel switched in without tracing it is found
/// running (at its traced switch-out, or by an IRQ): its open off-CPU
/// interval ends at `arrived`, the scheduler's own stamp of that switch-in
/// in the probes' clock, and is recorded as a traced switch-in would
/// have; the thread has run since. Returns whether it closed one (not
/// when none is open, or when the stamp is older than the interval's
/// start, which only an error in the clock conversion could make).
/// `rq`: this CPU's run queue (`CpuState::rq`); `steal`: its steal clock
/// now (the steal between the arrival and now goes unbooked).
#[inline(always)]
pub(crate) fn switched_in_unseen(
    sink: &Sink,
    rq: u64,
    st: &mut ThreadState,
    arrived: u64,
    steal: u64,
) -> bool {
    if st.off_kind == 0 || arrived < st.off_ts {
        return false;
    }
    total_add(Total::UnseenSwitchInsDated);
    switch_in(sink, st, arrived);
    st.run_ts = arrived;
    st.rq = rq;
    st.steal_mark = steal;
    window_restart(st, arrived);
    true
}

/// Task state bit of an uninterruptible sleep (`TASK_UNINTERRUPTIBLE`).
pub(crate) const TASK_UNINTERRUPTIBLE: u32 = 0x2;

/// Where a thread going to sleep in syscall `syscall` (number + 1, 0 =
/// none) with task state `state` waits.
#[inline(always)]
pub(crate) fn wait_site(syscall: u32, state: u32) -> u32 {
    let by_syscall = if syscall == 0 {
        None
    } else {
        Some(
            SYSCALL_SITES
                .get((syscall - 1) & (SYSCALL_SLOTS - 1))
                .copied()
                .unwrap_or(WaitSite::Other as u32),
        )
    };
    wait_site_of(by_syscall, state & TASK_UNINTERRUPTIBLE != 0)
}

/// What sched_switch tells about the thread leaving the CPU.
pub(crate) struct SwitchOut {
    /// The syscall read at the switch (number + 1; only without the hooks).
    syscall: u32,
    /// The steal clock of the run queue it leaves (0: not measured).
    steal: u64,
    tid: u32,
    tgid: u32,
    preempted: bool,
    state: u32,
    next_pid: u32,
    kstack: i32,
    ustack: i32,
}

#[inline(always)]
pub(crate) fn switch_out(sink: &Sink, cpu: *mut CpuState, ts: u64, out: &SwitchOut) {
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
        let stolen = out.steal.saturating_sub(state.steal_mark);
        clock_steal_add(state, ts, stolen);
    }
    // Silenced since its last sample and switched out before the timer
    // came back (often: a task whose timer expired in the stall takes the
    // CPU at once): the window ends here.
    // SAFETY: per-CPU value.
    if close_silence_window(state, unsafe { (*cpu).last_sample_ts }, ts) {
        // The next window starts with the next sample.
        state.window_start_ts = 0;
    }
    state.run_ts = 0;
    if config!(syscall_hooks) == 0 {
        state.syscall = out.syscall;
    }
    state.off_site = if runnable {
        WaitSite::Other as u32
    } else {
        wait_site(state.syscall, out.state)
    };
    // A page fault's sleep for its page, outside any other memory stall
    // (a reclaim or an mmap_lock wait times itself): see faults.rs.
    if state.off_site == WaitSite::Fault as u32 && state.mem_stall == 0 && state.fault_ts != 0 {
        state.fault_flags |= FAULT_SLEPT;
    }
    state.off_kind = kind as u32;
    state.off_ts = ts;
    state.wakeup_ts = 0;
    state.moved_ts = 0;
    state.cpu_out = cpu_id();
    state.next_pid = out.next_pid;
    state.next_ran_ns = 0;
    state.off_kstack = out.kstack;
    state.off_ustack = out.ustack;
    state.waker_context = WakeContext::None as u32;
    state.waker_kstack = NO_STACK;
    state.waker_ustack = NO_STACK;
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
pub(crate) fn switch_in(sink: &Sink, st: &mut ThreadState, ts: u64) {
    if st.off_kind == 0 || st.off_ts == 0 || ts < st.off_ts {
        st.off_kind = 0;
        return;
    }
    let total = ts - st.off_ts;
    st.window_away_ns += total;
    let (runnable, blocked) = if st.off_kind == OffCpuKind::Preempted as u32 {
        (total, 0)
    } else if st.wakeup_ts >= st.off_ts && st.wakeup_ts <= ts {
        (ts - st.wakeup_ts, st.wakeup_ts - st.off_ts)
    } else {
        // Woken before the probes saw it: call it all blocked.
        (0, total)
    };
    // The wait after the last move to another CPU's queue, part of the
    // runnable wait.
    let moved = if st.moved_ts >= st.off_ts && st.moved_ts <= ts {
        (ts - st.moved_ts).min(runnable)
    } else {
        0
    };
    sink.add(Counter::RunnableNs, runnable);
    sink.add(Counter::BlockedNs, blocked);
    if st.syscall != 0 {
        st.sys_offcpu_ns += total;
    }
    if total >= config!(min_offcpu_record_ns) {
        emit_offcpu(sink, st, ts, runnable, blocked, moved);
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
        acct_add(st, ts, Account::Runnable, runnable - moved);
        acct_add(st, ts, Account::RunnableMoved, moved);
        let site = Account::Blocked as u32 + (st.off_site & 7).min(WaitSite::Other as u32);
        acct_add_at(st, ts, site, blocked);
    }
    st.off_kind = 0;
}

#[inline(always)]
pub(crate) fn emit_offcpu(
    sink: &Sink,
    st: &ThreadState,
    ts: u64,
    runnable: u64,
    blocked: u64,
    moved: u64,
) {
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
                kstack: st.off_kstack,
                ustack: st.off_ustack,
                waker_tid: st.waker_tid,
                waker_tgid: st.waker_tgid,
                waker_context: if st.off_kind == OffCpuKind::Blocked as u32 {
                    st.waker_context
                } else {
                    WakeContext::None as u32
                },
                waker_kstack: if st.off_kind == OffCpuKind::Blocked as u32 {
                    st.waker_kstack
                } else {
                    NO_STACK
                },
                waker_ustack: if st.off_kind == OffCpuKind::Blocked as u32 {
                    st.waker_ustack
                } else {
                    NO_STACK
                },
                moved_ns: moved.min(u64::from(u32::MAX)) as u32,
            });
            entry.submit(BPF_RB_NO_WAKEUP as u64);
        }
        // SAFETY: pointer from the map lookup in `Sink::at`.
        None => unsafe { (*sink.cpu).totals[Total::RingReserveFailed as usize] += 1 },
    }
}

/// Marks the blocked → runnable edge of a target thread: who woke it (the
/// wait-for chain) and when, and starts watching who runs on the CPU it is
/// queued on until it runs.
///
/// sched_waking fires in the waker's context (try_to_wake_up's caller, or
/// the IRQ it runs in); sched_wakeup does not (a wakeup onto an idle CPU is
/// queued there and finished from an IPI, where the current task is
/// whatever ran on that CPU), so the waker is only known here. One program
/// for both jobs: sched_wakeup fires for every wakeup on the machine too,
/// and a second program there cost each wakeup another run and thread-table
/// lookup (docs/overhead.md). The runnable interval starts at the waking,
/// before the task is queued: a wakeup queued to another CPU's IPI is
/// runnable time (scheduling latency), not the wait's. The CPU it will be
/// queued on is chosen after this tracepoint; when it is not the one it
/// slept on, sched_migrate_task moves the watch (see [`wakeup_moved`]).
/// The first waking of an interval wins (a second finds the thread
/// already runnable and does not trace).
/// sched_waking(task *p)
#[btf_tracepoint(function = "sched_waking")]
pub fn sched_waking(ctx: BtfTracePointContext) -> i32 {
    if config!(floor_only) != 0 {
        return 0;
    }
    let task: *const u8 = arg(&ctx, 0);
    let pid = task_pid(task);
    let Some(st) = thread(pid) else {
        return 0;
    };
    // SAFETY: map value; the woken thread is off the CPU, so only its
    // wakeup writes it now.
    unsafe {
        if (*st).off_kind != OffCpuKind::Blocked as u32 || (*st).wakeup_ts != 0 {
            return 0;
        }
        let id = aya_ebpf::helpers::bpf_get_current_pid_tgid();
        (*st).waker_tid = id as u32;
        (*st).waker_tgid = (id >> 32) as u32;
        let local = cpu_state();
        (*st).waker_context = match local {
            Some(cpu) if (*cpu).in_hardirq != 0 => WakeContext::HardIrq as u32,
            Some(cpu) if (*cpu).in_softirq != 0 => {
                WakeContext::Softirq as u32 + ((*cpu).in_softirq - 1)
            }
            _ => WakeContext::Task as u32,
        };
        // The release site. A user stack only of a target thread waking in
        // its own context: userspace symbolizes user stacks against the
        // target's address space, and an interrupt's is whoever it hit.
        let (kstack, ustack) = if config!(stacks) == 0 {
            (NO_STACK, NO_STACK)
        } else if (*st).waker_context == WakeContext::Task as u32
            && is_target_tgid((*st).waker_tgid)
        {
            (stack_id(&ctx, 0), stack_id(&ctx, USER_STACK))
        } else {
            (stack_id(&ctx, 0), NO_STACK)
        };
        (*st).waker_kstack = kstack;
        (*st).waker_ustack = ustack;
        let ts = now();
        (*st).wakeup_ts = ts;
        (*st).next_pid = 0;
        (*st).next_ran_ns = 0;
        (*st).next_comm[0] = 0;
        let cpu = task_cpu(task);
        watch_queue(&mut *st, pid, cpu, ts, local);
    }
    0
}

/// Watches CPU `cpu`'s switches (who runs) and IRQs while the woken thread
/// `pid` waits to run there. `local` is this CPU's state, used when `cpu`
/// is this CPU (the common case when woken from an IPI): the inlined local
/// lookup instead of a helper call.
#[inline(always)]
fn watch_queue(st: &mut ThreadState, pid: u32, cpu: u32, ts: u64, local: Option<*mut CpuState>) {
    st.wait_cpu = cpu;
    // The queue's CPU state, written from the waking CPU: a race with that
    // CPU's sched_switch can only misattribute who ran, never a count.
    // SAFETY: helper with a valid map and key.
    let queue = if cpu == cpu_id() {
        local.unwrap_or(core::ptr::null_mut())
    } else {
        let key = 0u32;
        unsafe {
            aya_ebpf::helpers::generated::bpf_map_lookup_percpu_elem(
                (&raw const CPUS).cast_mut().cast(),
                (&raw const key).cast(),
                cpu,
            )
        }
        .cast::<CpuState>()
    };
    if !queue.is_null() {
        // SAFETY: per-CPU map value.
        unsafe {
            (*queue).waiting_tid = pid;
            (*queue).last_switch_ts = ts;
        }
    }
}

/// A woken target thread is being queued on another CPU than the one it
/// slept on (set_task_cpu in try_to_wake_up, after sched_waking chose the
/// old one): watch the new one instead. The old CPU stops watching at its
/// next switch (`note_runner` checks `wait_cpu`).
#[inline(always)]
fn wakeup_moved(st: &mut ThreadState, pid: u32, dest_cpu: u32) {
    if st.off_kind == OffCpuKind::Blocked as u32 && st.wakeup_ts != 0 && st.wait_cpu != dest_cpu {
        watch_queue(st, pid, dest_cpu, now(), cpu_state());
    }
}

/// The kernel's `TASK_ON_RQ_MIGRATING`: a queued task in the middle of a
/// move between run queues (a wakeup's placement moves a task not queued
/// yet: `on_rq` 0).
const TASK_ON_RQ_MIGRATING: u32 = 2;

/// Off the CPU and waiting for one: preempted, or blocked and since woken.
#[inline(always)]
fn runnable_off_cpu(st: &ThreadState) -> bool {
    st.off_kind == OffCpuKind::Preempted as u32
        || (st.off_kind == OffCpuKind::Blocked as u32 && st.wakeup_ts >= st.off_ts)
}

/// A queued target thread moved to another CPU's queue (the load
/// balancer pulling it, or an affinity change by another thread): its wait
/// from now on is the move's ([`Account::RunnableMoved`], an off-CPU
/// record's `moved_ns`), and who runs on the new CPU is watched instead.
/// A move inside the thread's own migration wait (sched_setaffinity) is
/// booked whole as migration already.
#[inline(always)]
fn queued_moved(st: &mut ThreadState, pid: u32, dest_cpu: u32) {
    let ts = now();
    st.moved_ts = ts;
    if st.wait_cpu != dest_cpu {
        watch_queue(st, pid, dest_cpu, ts, cpu_state());
    }
}

/// Fires in the migrating context, so the filter is on the migrated task.
/// sched_migrate_task(task *p, int dest_cpu)
#[btf_tracepoint(function = "sched_migrate_task")]
pub fn sched_migrate_task(ctx: BtfTracePointContext) -> i32 {
    if config!(floor_only) != 0 {
        return 0;
    }
    let task: *const u8 = arg(&ctx, 0);
    let pid = task_pid(task);
    if let Some(st) = thread(pid) {
        count_one(Counter::Migrations);
        let dest_cpu: u64 = arg(&ctx, 1);
        // SAFETY: map value; a thread being migrated is not running, and
        // its wakeup (if this is one) runs in this context.
        let st = unsafe { &mut *st };
        if task_on_rq(task) == TASK_ON_RQ_MIGRATING && runnable_off_cpu(st) {
            queued_moved(st, pid, dest_cpu as u32);
        } else {
            wakeup_moved(st, pid, dest_cpu as u32);
        }
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
