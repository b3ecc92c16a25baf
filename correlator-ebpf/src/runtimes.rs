//! Managed runtimes' garbage collections run by a target thread itself,
//! from the runtime's own USDT probes (CPython's `python:gc__start` and
//! `python:gc__done`): the thread's time on the CPU in between is also
//! booked to [`Account::RuntimeGc`]. Userspace finds the probes in the
//! target's binaries and attaches these programs at their addresses, with
//! the probes' semaphores raised by the kernel (see `probes::usdt`).
//!
//! Go has no USDT probes; its stopped worlds (every goroutine parked while
//! the collector, or another stop-the-world operation, runs alone) are
//! timed by uprobes on the runtime's functions that stop and restart the
//! world, found by symbol in the Go binary, and recorded as intervals the
//! analysis lays over every thread's waits.

use aya_ebpf::{
    bindings::BPF_RB_NO_WAKEUP, helpers::bpf_get_current_pid_tgid, macros::uprobe,
    programs::ProbeContext,
};
use correlator_common::{RuntimePauseRecord, ThreadState, Total};

use crate::{
    account::ran_until,
    helpers::{now, total_add},
    maps::RUNTIME_PAUSES,
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

/// Go's `runtime.stopTheWorldWithSema` starts: this thread stops the world.
/// (An entry probe only: a return probe would rewrite the return address
/// on a goroutine stack the runtime may move.)
#[uprobe]
pub fn go_world_stop(_ctx: ProbeContext) -> u32 {
    if let Some(st) = running_target() {
        st.stw_ts = now();
    }
    0
}

/// Go's `runtime.startTheWorldWithSema` starts: the world stopped since
/// this thread's `go_world_stop` is restarting. Pauses shorter than the
/// off-CPU records' minimum are counted, not recorded.
#[uprobe]
pub fn go_world_start(_ctx: ProbeContext) -> u32 {
    let Some(st) = running_target() else {
        return 0;
    };
    let start = st.stw_ts;
    if start == 0 {
        return 0;
    }
    st.stw_ts = 0;
    total_add(Total::RuntimeGcs);
    let end = now();
    if end < start + config!(min_offcpu_record_ns) {
        return 0;
    }
    match RUNTIME_PAUSES.reserve::<RuntimePauseRecord>(0) {
        Some(mut entry) => {
            entry.write(RuntimePauseRecord {
                tid: st.tid,
                tgid: st.tgid,
                start_ns: start,
                end_ns: end,
            });
            entry.submit(BPF_RB_NO_WAKEUP as u64);
        }
        None => total_add(Total::RuntimePausesLost),
    }
    0
}
