//! The target's threads: a direct-mapped table with a spill hash (see
//! `THREAD_SLOTS`).

use correlator_common::{CpuState, THREAD_SLOTS, ThreadState, Total};

use crate::maps::{SCRATCH, SPILL, THREADS};

/// The state of target thread `tid`, if it is one.
#[inline(always)]
pub(crate) fn thread(tid: u32) -> Option<*mut ThreadState> {
    if tid == 0 {
        return None;
    }
    let slot = THREADS.get_ptr_mut(tid & (THREAD_SLOTS - 1))?;
    // SAFETY: array map value; see the module docs for concurrency.
    unsafe {
        if (*slot).tid == tid {
            Some(slot)
        } else if (*slot).spill != 0 {
            SPILL.get_ptr_mut(&tid)
        } else {
            None
        }
    }
}

/// Zeroes a thread state in place, eight bytes at a time (volatile: a plain
/// assignment becomes a stack copy or a byte-wise loop).
#[inline(always)]
pub(crate) fn zero_state(p: *mut ThreadState) {
    let words = p.cast::<u64>();
    for i in 0..size_of::<ThreadState>() / 8 {
        // SAFETY: in bounds of the map value; ThreadState is 8-byte sized.
        unsafe { core::ptr::write_volatile(words.add(i), 0) };
    }
}

const _: () = assert!(size_of::<ThreadState>() % 8 == 0);

/// Starts tracking `tid` (idempotent).
#[inline(always)]
pub(crate) fn track(tid: u32, tgid: u32, cpu: *mut CpuState) -> Option<*mut ThreadState> {
    if let Some(existing) = thread(tid) {
        return Some(existing);
    }
    let slot = THREADS.get_ptr_mut(tid & (THREAD_SLOTS - 1))?;
    // SAFETY: array map value.
    unsafe {
        if (*slot).tid == 0 {
            let spill = (*slot).spill;
            zero_state(slot);
            (*slot).tid = tid;
            (*slot).tgid = tgid;
            (*slot).spill = spill;
            return Some(slot);
        }
        (*slot).spill = 1;
    }
    let fresh = SCRATCH.get_ptr_mut(0)?;
    zero_state(fresh);
    // SAFETY: per-CPU map value.
    let inserted = unsafe {
        (*fresh).tid = tid;
        (*fresh).tgid = tgid;
        SPILL.insert(&tid, &*fresh, 0)
    };
    if inserted.is_err() {
        // SAFETY: per-CPU map value.
        unsafe { (*cpu).totals[Total::ThreadMapFull as usize] += 1 };
        return None;
    }
    SPILL.get_ptr_mut(&tid)
}

#[inline(always)]
pub(crate) fn untrack(tid: u32) {
    if let Some(slot) = THREADS.get_ptr_mut(tid & (THREAD_SLOTS - 1)) {
        // SAFETY: array map value.
        unsafe {
            if (*slot).tid == tid {
                (*slot).tid = 0;
                (*slot).off_kind = 0;
                return;
            }
        }
    }
    let _ = SPILL.remove(&tid);
}
