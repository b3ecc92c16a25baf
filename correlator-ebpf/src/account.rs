//! Each target thread's account of the current time bucket (see
//! `correlator_common::Account`), emitted when the thread moves on to a
//! later bucket, and the run queue's steal clock it books from.

use aya_ebpf::{bindings::BPF_RB_NO_WAKEUP, helpers::bpf_probe_read_kernel};
use correlator_common::{Account, CpuState, NUM_ACCOUNT, ThreadBucket, ThreadState, Total};

use crate::{
    helpers::{task_last_arrival, total_add, total_add_n},
    maps::ACCOUNTS,
    threads::thread,
};

/// The run queue of `task` (through `se.cfs_rq->rq`), null when steal is
/// not measured here. Direct loads through the BTF-typed task pointer (the
/// offsets are frozen load-time constants the verifier checks against the
/// kernel's structs; the loads through `cfs_rq` and `rq` are exception-
/// guarded by the kernel): sched_switch reads the run queue and its steal
/// clock at every target switch, and a `bpf_probe_read_kernel` per field is
/// a helper call each, costly with this kernel's return thunks.
#[inline(always)]
pub(crate) fn task_rq(task: *const u8) -> *const u8 {
    let cfs_rq_offset = config!(task_cfs_rq_offset);
    if cfs_rq_offset == 0 {
        return core::ptr::null();
    }
    // SAFETY: `task` is a BTF task pointer (a tracepoint argument); the
    // verifier checks each load against the kernel's BTF.
    unsafe {
        let cfs_rq = *task.add(cfs_rq_offset as usize).cast::<*const u8>();
        if cfs_rq.is_null() {
            return core::ptr::null();
        }
        *cfs_rq
            .add(config!(cfs_rq_rq_offset) as usize)
            .cast::<*const u8>()
    }
}

/// The steal clock of run queue `rq` (from [`task_rq`]; 0 for null) at a
/// context switch: the run queue's own copy, which `__schedule` updated
/// just before sched_switch, by a direct load (see
/// `Config::rq_steal_copy_offset`). It lags the live clock by at most the
/// steal since that update; marks taken from it are never ahead of a later
/// live read.
#[inline(always)]
pub(crate) fn rq_steal_at_switch(rq: *const u8) -> u64 {
    if rq.is_null() {
        return 0;
    }
    // SAFETY: `rq` is a BTF `struct rq` pointer (loaded through the task's
    // cfs_rq); the verifier checks the load against the kernel's struct.
    unsafe { *rq.add(config!(rq_steal_copy_offset) as usize).cast::<u64>() }
}

/// Takes this CPU's offset from the run queue's clock to the probes'
/// (`CpuState::clock_offset`) at a context switch at `ts`: `__schedule`
/// brought `rq->clock` up to date just before sched_switch fired.
#[inline(always)]
pub(crate) fn calibrate_rq_clock(cpu: *mut CpuState, rq: *const u8, ts: u64) {
    let offset = config!(rq_clock_offset);
    if rq.is_null() || offset == 0 {
        return;
    }
    // SAFETY: `rq` as in `rq_steal_at_switch`; `cpu` is the per-CPU value.
    unsafe {
        let clock = *rq.add(offset as usize).cast::<u64>();
        (*cpu).clock_offset = ts.wrapping_sub(clock);
    }
}

/// When the running task `task` arrived on this CPU, in the probes' clock
/// (its `sched_info.last_arrival` moved by the CPU's calibrated offset),
/// at most `ts`; 0 when it cannot be told (no calibration yet, a kernel
/// without the stamp). Dates a switch-in the kernel did not trace.
#[inline(always)]
pub(crate) fn arrival_ts(cpu: &CpuState, task: *const u8, ts: u64) -> u64 {
    if cpu.clock_offset == 0 {
        return 0;
    }
    let arrived = task_last_arrival(task);
    if arrived == 0 {
        return 0;
    }
    arrived.wrapping_add(cpu.clock_offset).min(ts)
}

/// The steal clock of run queue `rq`, read through the helper: on a KVM
/// guest `rq_steal_offset` leads out of `struct rq` to the CPU's
/// `steal_time` page (the live clock, see `probes::steal_offset_from_rq`),
/// which no verifier-checked load can reach.
#[inline(always)]
pub(crate) fn rq_steal(rq: u64) -> u64 {
    // SAFETY: the helper checks the address; a failed read is 0.
    unsafe {
        bpf_probe_read_kernel(rq.wrapping_add(config!(rq_steal_offset)) as *const u64).unwrap_or(0)
    }
}

/// Books the steal of the running thread since its last mark (switch-in,
/// sample, syscall boundary) and moves the mark to now: at a syscall's
/// boundaries, so that a stall inside a call is the call's steal and not
/// its own work, nor the next call's.
#[inline(always)]
pub(crate) fn steal_catch_up(st: &mut ThreadState, ts: u64) {
    if st.rq == 0 {
        return;
    }
    let steal = rq_steal(st.rq);
    let stolen = steal.saturating_sub(st.steal_mark);
    st.steal_mark = steal;
    clock_steal_add(st, ts, stolen);
}

/// Emits the thread's account of its current bucket, if any, and starts
/// the bucket of `ts`.
#[inline(always)]
pub(crate) fn acct_roll(st: &mut ThreadState, ts: u64) {
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
pub(crate) fn acct_add(st: &mut ThreadState, ts: u64, slot: Account, value: u64) {
    acct_add_at(st, ts, slot as u32, value);
}

#[inline(always)]
pub(crate) fn acct_add_at(st: &mut ThreadState, ts: u64, slot: u32, value: u64) {
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
pub(crate) fn ran_until(st: &mut ThreadState, ts: u64) {
    if st.run_ts != 0 && ts > st.run_ts {
        let ran = ts - st.run_ts;
        acct_add(st, ts, Account::OnCpu, ran);
        if st.gc_ts != 0 {
            acct_add(st, ts, Account::RuntimeGc, ran);
        }
    }
    st.run_ts = ts;
}

/// Adds to the account of target thread `tid`, if it is one. IRQ time
/// while the thread runs inside a syscall is not the syscall's own work.
#[inline(always)]
pub(crate) fn thread_acct(tid: u32, ts: u64, slot: Account, value: u64) {
    if let Some(st) = thread(tid) {
        // SAFETY: map value; see the module docs for concurrency.
        let st = unsafe { &mut *st };
        if st.syscall != 0 && matches!(slot, Account::HardIrq | Account::SoftIrq) {
            st.sys_irq_ns += value;
        }
        if slot == Account::HardIrq {
            st.window_hardirq_ns += value;
        }
        acct_add(st, ts, slot, value);
    }
}

/// How long timer silence stays creditable against steal the steal clock
/// reports later: the run queue's steal moves at scheduler ticks (4 ms
/// here) and switches, so a stall the host did account shows up there
/// within a tick or two of the sample that found the timer silent.
const SILENCE_CREDIT_NS: u64 = 10_000_000;

/// Books steal-clock steal of the running thread, less what timer silence
/// already booked for the same stall (the two measure one thing: the
/// larger one stands).
///
/// Only the steal booked here counts against the current window's own
/// silence (`window_steal_ns`): steal the credit took is an earlier
/// stall's, reported late. Counted whole, it hides the next stall within
/// the credit's 10 ms: that stall's steal goes to the earlier credit and
/// its silence is its gap less that same steal, so neither books it (the
/// one path found for a CI run's silent 3.46 ms stall that came out
/// explained 0.06 ms with nothing lost).
#[inline(always)]
pub(crate) fn clock_steal_add(st: &mut ThreadState, ts: u64, stolen: u64) {
    if ts.saturating_sub(st.silence_credit_ts) > SILENCE_CREDIT_NS {
        st.silence_credit_ns = 0;
    }
    let credited = stolen.min(st.silence_credit_ns);
    st.silence_credit_ns -= credited;
    st.window_steal_ns += stolen - credited;
    steal_add(st, ts, stolen - credited);
}

/// Closes the thread's timer-silence window at `ts` when nobody on its CPU
/// was sampled since it began (`cpu_last_sample`: the CPU's last sample
/// before now), booking the silence [`timer_silence`] finds in it. Returns
/// whether any was booked. A sample, a switch-out and an IRQ finding the
/// thread switched in unseen all close the window this way.
#[inline(always)]
pub(crate) fn close_silence_window(st: &mut ThreadState, cpu_last_sample: u64, ts: u64) -> bool {
    if st.window_start_ts == 0 || cpu_last_sample > st.window_start_ts {
        return false;
    }
    let silent = timer_silence(ts.saturating_sub(st.window_start_ts), st);
    if silent != 0 {
        silence_add(st, ts, silent);
    }
    silent != 0
}

/// Starts the thread's timer-silence window at `ts` (see [`timer_silence`]).
#[inline(always)]
pub(crate) fn window_restart(st: &mut ThreadState, ts: u64) {
    st.window_start_ts = ts;
    st.window_steal_ns = 0;
    st.window_hardirq_ns = 0;
    st.window_away_ns = 0;
}

/// Books timer silence in its own slot (counted in the totals), not as
/// steal: a silent timer is a vCPU stall or a late host timer (see
/// [`Account::TimerSilence`]). Creditable against the steal clock, which
/// may report the same stall later.
#[inline(always)]
pub(crate) fn silence_add(st: &mut ThreadState, ts: u64, silent: u64) {
    total_add(Total::TimerSilences);
    total_add_n(Total::TimerSilenceNs, silent);
    if ts.saturating_sub(st.silence_credit_ts) > SILENCE_CREDIT_NS {
        st.silence_credit_ns = 0;
    }
    st.silence_credit_ns += silent;
    st.silence_credit_ts = ts;
    environment_add(st, ts, Account::TimerSilence, silent);
}

/// Books time the hypervisor took the CPU from the running thread.
#[inline(always)]
pub(crate) fn steal_add(st: &mut ThreadState, ts: u64, stolen: u64) {
    environment_add(st, ts, Account::Steal, stolen);
}

/// Books the environment's time while the thread was on the CPU (steal,
/// timer silence); inside a syscall it is not the call's own work either.
#[inline(always)]
fn environment_add(st: &mut ThreadState, ts: u64, slot: Account, ns: u64) {
    if ns == 0 {
        return;
    }
    if st.syscall != 0 {
        st.sys_steal_ns += ns;
    }
    acct_add(st, ts, slot, ns);
}

/// Time the CPU's sampling timer was silent between two samples of the
/// thread on this CPU (`gap` apart, no other sample between them), beyond
/// what the steal clock, hard IRQs and the thread's own time off the CPU
/// in that window explain.
///
/// The timer fires on a fixed grid of the sample period. Measured here
/// (a spinning helper timing itself against this program's samples, 19,721
/// gaps on a CPU of its own): undisturbed, a sample comes 0.90-1.10
/// periods after the last; a single sample goes missing now and then (129
/// gaps of 1.95-2.05 periods, back on the grid); a vCPU the host holds for
/// 1.6-6 ms without accounting steal silences the grid points it spans and
/// the next sample comes 2.1-6 periods after the last, on the grid or late
/// (the timer's interrupt delivered when the vCPU resumes: a 2.17 ms stall
/// gave a gap under 2.5 periods). The steal clock shows none of it. So a
/// gap longer than two periods by more than the grid's jitter (a tenth of
/// a period), less what was measured in it, is time the vCPU did not run
/// guest code (or ran it with interrupts off): the environment's, not the
/// thread's. Its length is known to one period (the stall lies somewhere
/// between the grid points it silenced); a stall shorter than about a
/// period may go unseen.
#[inline(always)]
pub(crate) fn timer_silence(gap: u64, st: &ThreadState) -> u64 {
    let period = config!(sample_period_ns);
    if gap < period * 2 + period / 10 {
        return 0;
    }
    gap.saturating_sub(period)
        .saturating_sub(st.window_steal_ns)
        .saturating_sub(st.window_hardirq_ns)
        .saturating_sub(st.window_away_ns)
}
