//! Page faults, minor and major, from software perf events; a fault that
//! read its page back from swap (major), or waited for such a read under
//! way (minor), is also timed as a memory stall, from its entry (the
//! exceptions tracepoints) to its end.

use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid,
    macros::{btf_tracepoint, perf_event},
    programs::{BtfTracePointContext, PerfEventContext},
};
use correlator_common::{Counter, FAULT_FILE, FAULT_SLEPT, MemStallKind, ThreadState};

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
        fault_done(|st| {
            // Minor, yet it slept for its page outside the page cache: the
            // page was on its way back from swap (readahead started its
            // read), and the fault waited for it.
            if st.fault_flags == FAULT_SLEPT {
                memory::submit(st, MemStallKind::SwapIn, st.fault_ts, now());
            }
        });
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
            // Never went through the page cache: the page came back from
            // swap (a file's page hit mm_filemap_fault first). All of the
            // fault is the swap-in, on the CPU (the swap cache, readahead,
            // charging its pages) and off it (the read); a reclaim or an
            // mmap_lock wait inside it is timed as its own stall, which
            // userspace cuts out of this one.
            if st.fault_flags & FAULT_FILE == 0 {
                memory::submit(st, MemStallKind::SwapIn, st.fault_ts, now());
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
    if st.fault_ts == 0 && st.fault_flags == 0 {
        return;
    }
    then(st);
    st.fault_ts = 0;
    st.fault_flags = 0;
}

/// A page fault in user mode begins.
#[btf_tracepoint(function = "page_fault_user")]
pub fn page_fault_user(_ctx: BtfTracePointContext) -> i32 {
    fault_begins();
    0
}

/// A page fault in kernel mode begins: a syscall's copy touching the
/// user's memory (a write(2) of a value swapped out, say).
#[btf_tracepoint(function = "page_fault_kernel")]
pub fn page_fault_kernel(_ctx: BtfTracePointContext) -> i32 {
    fault_begins();
    0
}

#[inline(always)]
fn fault_begins() {
    if config!(floor_only) != 0 {
        return;
    }
    // The thread table holds only target threads: one lookup, no tgid
    // filter first (on every fault of the machine, a helper call saved).
    let Some(st) = thread(bpf_get_current_pid_tgid() as u32) else {
        return;
    };
    // SAFETY: map value, written by this thread's own programs. A fault
    // that ended without being counted (one that raised a signal) leaves
    // its state behind: it starts over here.
    unsafe {
        (*st).fault_ts = now();
        (*st).fault_flags = 0;
    }
}
