//! Managed runtimes' garbage collections run by a target thread itself,
//! from the runtime's own USDT probes (CPython's `python:gc__start` and
//! `python:gc__done`): the thread's time on the CPU in between is also
//! booked to [`Account::RuntimeGc`]. Userspace finds the probes in the
//! target's binaries and attaches these programs at their addresses, with
//! the probes' semaphores raised by the kernel (see `probes::usdt`).

use aya_ebpf::{helpers::bpf_get_current_pid_tgid, macros::uprobe, programs::ProbeContext};
use correlator_common::{ThreadState, Total};

use crate::{
    account::ran_until,
    helpers::{now, total_add},
    threads::thread,
};

/// The running thread's state, when it is a target thread and the probes
/// are not in their cost-floor mode.
#[inline(always)]
fn running_target() -> Option<&'static mut ThreadState> {
    if config!(floor_only) != 0 {
        return None;
    }
    let st = thread(bpf_get_current_pid_tgid() as u32)?;
    // SAFETY: map value of the running thread; its switches (the other
    // writers of its run time) cannot run inside a probe of its own.
    Some(unsafe { &mut *st })
}

/// The runtime's collection starts on this thread: its time on the CPU so
/// far is booked as usual, from now on as the collector's too.
#[uprobe]
pub fn gc_start(_ctx: ProbeContext) -> u32 {
    if let Some(st) = running_target() {
        let ts = now();
        ran_until(st, ts);
        st.gc_ts = ts;
    }
    0
}

/// The collection ends: its last stretch on the CPU is booked, and the
/// collection counted.
#[uprobe]
pub fn gc_done(_ctx: ProbeContext) -> u32 {
    if let Some(st) = running_target()
        && st.gc_ts != 0
    {
        ran_until(st, now());
        st.gc_ts = 0;
        total_add(Total::RuntimeGcs);
    }
    0
}
