//! On-CPU samples of target threads.

use aya_ebpf::{
    EbpfContext as _,
    bindings::BPF_RB_NO_WAKEUP,
    helpers::{bpf_get_current_pid_tgid, generated::bpf_get_current_task_btf},
    macros::perf_event,
    programs::PerfEventContext,
};
use correlator_common::{Account, NO_STACK, SampleRecord, Total};

use crate::{
    account::{acct_add, close_silence_window, ran_until, steal_catch_up, window_restart},
    helpers::{USER_STACK, cpu_state, now, saved_syscall, stack_id, total_add},
    maps::SAMPLES,
    threads::thread,
};

/// Software perf event CPU_CLOCK, one per CPU at `--sample-hz`: books the
/// running target thread's CPU time and steal so far, and what the
/// interrupted context was doing (user code, a syscall, an IRQ, or kernel
/// work outside both: fault handling).
#[perf_event]
pub fn cpu_sample(ctx: PerfEventContext) -> u32 {
    if config!(floor_only) != 0 {
        return 0;
    }
    let Some(cpu) = cpu_state() else { return 0 };
    let ts = now();
    // SAFETY: per-CPU value; samples of one CPU do not nest.
    let cpu_last = unsafe { core::mem::replace(&mut (*cpu).last_sample_ts, ts) };
    let Some(st) = thread(bpf_get_current_pid_tgid() as u32) else {
        return 0;
    };
    // SAFETY: map value; see the module docs for concurrency.
    let st = unsafe { &mut *st };
    total_add(Total::Samples);
    ran_until(st, ts);
    steal_catch_up(st, ts);
    // Only a window with no sample of another task in it is this
    // thread's to explain.
    close_silence_window(st, cpu_last, ts);
    window_restart(st, ts);
    // SAFETY: the context of a perf-event program is bpf_perf_event_data,
    // whose first member is the interrupted context's registers.
    let cs = unsafe {
        (*ctx
            .as_ptr()
            .cast::<aya_ebpf::bindings::bpf_perf_event_data>())
        .regs
        .cs
    };
    // SAFETY: per-CPU value.
    let in_softirq = unsafe { (*cpu).softirq_start != 0 };
    // The sample runs in the timer's hard IRQ: the interrupted context was
    // never a hard IRQ, but may be a softirq.
    // Without the syscall hooks, the syscall the thread is in (if any) is
    // read from the registers it saved entering the kernel.
    if config!(syscall_hooks) == 0 {
        st.syscall = if cs & 3 == 3 {
            0
        } else {
            // SAFETY: helper without preconditions.
            saved_syscall(unsafe { bpf_get_current_task_btf() } as *const u8)
        };
    }
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
    if st.syscall != 0 {
        st.sys_samples = st.sys_samples.saturating_add(1);
    }
    if config!(syscall_hooks) == 0 && slot == Account::SamplesSyscall {
        // Without the hooks no call is timed: the sampled syscall names the
        // bucket's kernel time instead, one sample period per sample (the
        // most sampled one wins; a bucket rarely holds two samples).
        let period = config!(sample_period_ns);
        if st.top_syscall == st.syscall {
            st.top_syscall_ns += period;
        } else if st.top_syscall_ns < period {
            st.top_syscall = st.syscall;
            st.top_syscall_ns = period;
        }
    }
    if config!(stacks) != 0 {
        let user_mode = slot == Account::SamplesUser;
        let record = SampleRecord {
            tid: st.tid,
            context: slot as u32,
            syscall: st.syscall,
            // Interrupted in user mode: there is no kernel stack to walk.
            kstack: if user_mode {
                NO_STACK
            } else {
                stack_id(&ctx, 0)
            },
            ustack: stack_id(&ctx, USER_STACK),
            _pad: 0,
            ts,
        };
        if SAMPLES.output(&record, BPF_RB_NO_WAKEUP as u64).is_err() {
            total_add(Total::SampleRecordsLost);
        }
    }
    0
}
