//! Syscalls of target threads: which one each thread is in (the wait site
//! of its off-CPU time) and how long the kernel worked for it.

use aya_ebpf::{
    bindings::BPF_RB_NO_WAKEUP, helpers::bpf_get_current_pid_tgid, macros::btf_tracepoint,
    programs::BtfTracePointContext,
};
use correlator_common::{Account, SYSCALL_SLOTS, SyscallRecord, ThreadState, Total, WaitSite};

use crate::{
    account::{acct_add, acct_roll, steal_catch_up},
    helpers::{arg, now, total_add},
    maps::{SYSCALL_RECORDS, SYSCALL_SITES, SYSCALL_TOTALS},
    passive::pair_request,
    threads::thread,
};

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
    let ts = now();
    // SAFETY: map value, written by this thread's own programs.
    unsafe {
        // Steal up to here is not the call's.
        steal_catch_up(&mut *st, ts);
        (*st).syscall = (nr as u32).wrapping_add(1);
        (*st).sys_enter_ts = ts;
        (*st).sys_offcpu_ns = 0;
        (*st).sys_irq_ns = 0;
        (*st).sys_steal_ns = 0;
        (*st).sys_spin_ns = 0;
        (*st).sys_samples = 0;
    }
    0
}

/// A target thread leaves its syscall: its time in the kernel (enter to
/// exit, minus the time it spent off the CPU inside) is booked per syscall,
/// in the thread's account, and as a record when the call was long.
#[inline(always)]
pub(crate) fn syscall_done(st: &mut ThreadState) {
    let syscall = st.syscall;
    if syscall == 0 {
        return;
    }
    if st.sys_enter_ts == 0 {
        // Entered before the probes (userspace found the thread asleep in
        // it): untimed, but over.
        st.syscall = 0;
        return;
    }
    let ts = now();
    // Steal since the last mark is inside the call (booked to it while
    // `syscall` still names it).
    steal_catch_up(st, ts);
    st.syscall = 0;
    let total = ts.saturating_sub(st.sys_enter_ts);
    let off = st.sys_offcpu_ns.min(total);
    let irq = st.sys_irq_ns.min(total - off);
    let steal = st.sys_steal_ns.min(total - off - irq);
    // A spin on a contended kernel lock is a lock wait (booked by
    // `locks`), not the call's own work.
    let spin = st.sys_spin_ns.min(total - off - irq - steal);
    let on = total - off - irq - steal - spin;
    let index = (syscall - 1) & (SYSCALL_SLOTS - 1);
    if let Some(t) = SYSCALL_TOTALS.get_ptr_mut(index) {
        // SAFETY: per-CPU map value.
        unsafe {
            (*t).calls += 1;
            (*t).total_ns += total;
            (*t).offcpu_ns += off;
            (*t).irq_ns += irq;
            (*t).steal_ns += steal;
            (*t).spin_ns += spin;
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
                    samples: st.sys_samples,
                    start_ns: st.sys_enter_ts,
                    end_ns: ts,
                    offcpu_ns: off,
                    irq_ns: irq,
                    steal_ns: steal,
                    spin_ns: spin,
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
