//! Memory stalls of target threads, timed on their own path from the
//! kernel's begin/end events: direct reclaim (global and in the memory
//! cgroup), direct compaction, memory.high handling (its reclaim and
//! penalty sleep) and mmap_lock waits. One stall per thread at a time, the
//! outermost (memory.high handling reclaims inside it); one record each
//! when at least `min_offcpu_record_ns` long, so the account can book the
//! time it holds (on or off the CPU) to the stall. A swap-in (faults.rs)
//! spans its whole fault, these stalls inside it included: userspace cuts
//! them out of it (`timeline::memory::cut_around`).

use aya_ebpf::{
    bindings::BPF_RB_NO_WAKEUP,
    helpers::bpf_get_current_pid_tgid,
    macros::{btf_tracepoint, fentry, fexit},
    programs::{BtfTracePointContext, FEntryContext, FExitContext},
};
use correlator_common::{FAULT_FILE, MemStallKind, MemStallRecord, ThreadState, Total};

use crate::{
    helpers::{current_tgid, is_target_tgid, now, total_add},
    maps::MEM_STALLS,
    threads::thread,
};

#[inline(always)]
fn begin(kind: MemStallKind) {
    if config!(floor_only) != 0 {
        return;
    }
    let Some(st) = thread(bpf_get_current_pid_tgid() as u32) else {
        return;
    };
    // SAFETY: map value, written by this thread's own programs.
    unsafe {
        if (*st).mem_stall == 0 {
            (*st).mem_stall = kind as u32;
            (*st).mem_stall_ts = now();
        }
    }
}

#[inline(always)]
fn end(kind: MemStallKind) {
    if config!(floor_only) != 0 {
        return;
    }
    let Some(st) = thread(bpf_get_current_pid_tgid() as u32) else {
        return;
    };
    // SAFETY: as in `begin`.
    unsafe {
        if (*st).mem_stall != kind as u32 {
            return;
        }
        (*st).mem_stall = 0;
        submit(&*st, kind, (*st).mem_stall_ts, now());
    }
}

/// Records a stall of `kind` in [start, end] when it is long enough to
/// book (counted when the ring is full).
#[inline(always)]
pub(crate) fn submit(st: &ThreadState, kind: MemStallKind, start: u64, end: u64) {
    if start == 0 || end < start + config!(min_offcpu_record_ns) {
        return;
    }
    match MEM_STALLS.reserve::<MemStallRecord>(0) {
        Some(mut entry) => {
            entry.write(MemStallRecord {
                tid: st.tid,
                tgid: st.tgid,
                kind: kind as u32,
                _pad: 0,
                start_ns: start,
                end_ns: end,
            });
            entry.submit(BPF_RB_NO_WAKEUP as u64);
        }
        None => total_add(Total::MemStallsLost),
    }
}

/// Each program is named after its tracepoint: userspace loads it for the
/// tracepoint of its name.
macro_rules! stall_tracepoints {
    ($($begin:ident, $end:ident, $kind:expr;)*) => {$(
        #[btf_tracepoint]
        pub fn $begin(_ctx: BtfTracePointContext) -> i32 {
            begin($kind);
            0
        }
        #[btf_tracepoint]
        pub fn $end(_ctx: BtfTracePointContext) -> i32 {
            end($kind);
            0
        }
    )*};
}

stall_tracepoints! {
    mm_vmscan_direct_reclaim_begin, mm_vmscan_direct_reclaim_end, MemStallKind::DirectReclaim;
    mm_vmscan_memcg_reclaim_begin, mm_vmscan_memcg_reclaim_end, MemStallKind::CgroupReclaim;
    mm_compaction_begin, mm_compaction_end, MemStallKind::Compaction;
    mmap_lock_start_locking, mmap_lock_acquire_returned, MemStallKind::MmapLock;
}

/// A page fault going through the page cache: its major fault, if it has
/// one, reads a file, not swap (see `faults::page_fault_major`).
#[btf_tracepoint]
pub fn mm_filemap_fault(_ctx: BtfTracePointContext) -> i32 {
    if config!(floor_only) != 0 || !is_target_tgid(current_tgid()) {
        return 0;
    }
    if let Some(st) = thread(bpf_get_current_pid_tgid() as u32) {
        // SAFETY: map value, written by this thread's own programs.
        unsafe { (*st).fault_flags |= FAULT_FILE };
    }
    0
}

/// Over memory.high: reclaim, then the penalty sleep, on the way back to
/// user space (no tracepoint marks it).
#[fentry(function = "__mem_cgroup_handle_over_high")]
pub fn memory_high_entry(_ctx: FEntryContext) -> i32 {
    begin(MemStallKind::MemoryHigh);
    0
}

#[fexit(function = "__mem_cgroup_handle_over_high")]
pub fn memory_high_exit(_ctx: FExitContext) -> i32 {
    end(MemStallKind::MemoryHigh);
    0
}
