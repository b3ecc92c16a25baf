//! Page faults, minor and major, from software perf events; a major fault
//! that read its page back from swap is also timed as a memory stall.

use aya_ebpf::{helpers::bpf_get_current_pid_tgid, macros::perf_event, programs::PerfEventContext};
use correlator_common::{Counter, MemStallKind, ThreadState};

use crate::{
    helpers::{count_one, current_tgid, is_target_tgid, now},
    memory,
    threads::thread,
};

/// Software perf event PAGE_FAULTS_MIN, period 1, one per CPU.
#[perf_event]
pub fn page_fault_minor(_ctx: PerfEventContext) -> u32 {
    if config!(floor_only) != 0 {
        return 0;
    }
    if is_target_tgid(current_tgid()) {
        count_one(Counter::PageFaultsMinor);
        fault_done(|_| {});
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
        fault_done(|st| {
            // Slept for its page and never went through the page cache:
            // the page came back from swap. (A file's page waits the same
            // way, but its fault hit mm_filemap_fault first.)
            // Timed in up to two stretches: before and after the stall (a
            // reclaim for the page it allocated) that interrupted it.
            if st.file_fault == 0 {
                memory::submit(
                    st,
                    MemStallKind::SwapIn,
                    st.fault_wait_start,
                    st.fault_wait_end,
                );
                memory::submit(st, MemStallKind::SwapIn, st.fault_sleep_ts, now());
            }
        });
    }
    0
}

/// The kernel counted the fault in progress (a retried fault is counted
/// once, at its end): `then` sees what the fault did, and the thread's
/// fault state starts over.
#[inline(always)]
fn fault_done(then: impl FnOnce(&ThreadState)) {
    let Some(st) = thread(bpf_get_current_pid_tgid() as u32) else {
        return;
    };
    // SAFETY: map value, written by this thread's own programs.
    let st = unsafe { &mut *st };
    if st.fault_sleep_ts == 0 && st.file_fault == 0 && st.fault_wait_start == 0 {
        return;
    }
    then(st);
    st.fault_sleep_ts = 0;
    st.fault_wait_start = 0;
    st.fault_wait_end = 0;
    st.file_fault = 0;
}
