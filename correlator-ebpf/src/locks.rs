//! Contended kernel spinlocks: how long a target thread spun on the CPU
//! waiting for one (the kernel's `contention_begin`/`contention_end`
//! tracepoints), and how much of that spin the other CPUs' steal clocks
//! cover.
//!
//! Why: on this VM a server's `recvfrom` spun for milliseconds in
//! `lock_sock_nested` → `__pv_queued_spin_lock_slowpath` while the load
//! generator's softirq on the other vCPU held the socket's lock and the
//! host had that vCPU descheduled (lock-holder preemption). Counted as the
//! syscall's own kernel work, that made `recvfrom` a claimed cause on a
//! noisy host. A spin is a lock wait; the part of it the holder's vCPU
//! lost to the host is the environment's. A guest cannot see which CPU
//! holds a spinlock, so the most steal any other CPU took during the spin
//! stands for the holder's (exact on two CPUs; an upper bound on more).

use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid, macros::btf_tracepoint, programs::BtfTracePointContext,
};
use correlator_common::{Account, SPIN_CPUS};

use crate::{
    account::{acct_add, rq_steal},
    helpers::{arg, cpu_id, cpu_state, now},
    maps::CPU_RQS,
    threads::thread,
};

/// `LCB_F_*` flags of `contention_begin` (include/trace/events/lock.h).
const LCB_F_SPIN: u32 = 1 << 0;
const LCB_F_RT: u32 = 1 << 3;
const LCB_F_PERCPU: u32 = 1 << 4;
const LCB_F_MUTEX: u32 = 1 << 5;

/// A contention the waiter spins through without sleeping: a spinlock or
/// an rwlock (`SPIN`, maybe `READ`/`WRITE`). Mutexes, rwsems and RT locks
/// may sleep: their waits are off-CPU intervals already.
#[inline(always)]
fn pure_spin(flags: u32) -> bool {
    flags & LCB_F_SPIN != 0 && flags & (LCB_F_RT | LCB_F_PERCPU | LCB_F_MUTEX) == 0
}

/// Steal clock of CPU `c`, 0 when its run queue is not known.
#[inline(always)]
fn cpu_steal(c: u32) -> u64 {
    match CPU_RQS.get(c) {
        Some(&rq) if rq != 0 => rq_steal(rq),
        _ => 0,
    }
}

/// contention_begin(void *lock, unsigned int flags)
#[btf_tracepoint(function = "contention_begin")]
pub fn contention_begin(ctx: BtfTracePointContext) -> i32 {
    if config!(floor_only) != 0 {
        return 0;
    }
    if thread(bpf_get_current_pid_tgid() as u32).is_none() {
        return 0;
    }
    let lock: u64 = arg(&ctx, 0);
    let flags: u32 = arg(&ctx, 1);
    if !pure_spin(flags) {
        return 0;
    }
    let Some(cpu) = cpu_state() else { return 0 };
    // SAFETY: per-CPU value; the spinning thread stays on this CPU.
    let state = unsafe { &mut *cpu };
    // Nested (a lock taken inside another's slow path, or an IRQ that
    // contends while the thread spins), or inside an IRQ the thread's
    // account already times: not the thread's own spin.
    if state.spin_lock != 0 || state.hardirq_start != 0 || state.softirq_start != 0 {
        return 0;
    }
    state.spin_lock = lock;
    state.spin_irq_mark = state.irq_ns_sum;
    // Every CPU's steal clock, this one's included (its own steal is not
    // the spin's either).
    let n = config!(spin_cpus) as u32;
    for c in 0..SPIN_CPUS {
        if c >= n {
            break;
        }
        state.spin_steal_marks[(c & (SPIN_CPUS - 1)) as usize] = cpu_steal(c);
    }
    state.spin_start = now();
    0
}

/// contention_end(void *lock, int ret)
#[btf_tracepoint(function = "contention_end")]
pub fn contention_end(ctx: BtfTracePointContext) -> i32 {
    if config!(floor_only) != 0 {
        return 0;
    }
    let Some(st) = thread(bpf_get_current_pid_tgid() as u32) else {
        return 0;
    };
    let lock: u64 = arg(&ctx, 0);
    let Some(cpu) = cpu_state() else { return 0 };
    // SAFETY: per-CPU value.
    let state = unsafe { &mut *cpu };
    if state.spin_lock == 0 || state.spin_lock != lock {
        return 0;
    }
    state.spin_lock = 0;
    let ts = now();
    let irq = state.irq_ns_sum.saturating_sub(state.spin_irq_mark);
    let here = cpu_id();
    let n = config!(spin_cpus) as u32;
    let (mut own_steal, mut other) = (0u64, 0u64);
    for c in 0..SPIN_CPUS {
        if c >= n {
            break;
        }
        let mark = state.spin_steal_marks[(c & (SPIN_CPUS - 1)) as usize];
        if mark == 0 {
            continue;
        }
        let stolen = cpu_steal(c).saturating_sub(mark);
        if c == here {
            own_steal = stolen;
        } else {
            other = other.max(stolen);
        }
    }
    let spin = ts
        .saturating_sub(state.spin_start)
        .saturating_sub(irq)
        .saturating_sub(own_steal);
    if spin == 0 {
        return 0;
    }
    let holder = other.min(spin);
    // SAFETY: map value, written by this thread's own programs.
    let st = unsafe { &mut *st };
    if st.syscall != 0 {
        st.sys_spin_ns += spin;
    }
    acct_add(st, ts, Account::LockSpin, spin - holder);
    acct_add(st, ts, Account::LockHolderSteal, holder);
    0
}
