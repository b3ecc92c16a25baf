//! Page faults, minor and major, from software perf events.

use aya_ebpf::{macros::perf_event, programs::PerfEventContext};
use correlator_common::Counter;

use crate::helpers::{count_one, current_tgid, is_target_tgid};

/// Software perf event PAGE_FAULTS_MIN, period 1, one per CPU.
#[perf_event]
pub fn page_fault_minor(_ctx: PerfEventContext) -> u32 {
    if config!(floor_only) != 0 {
        return 0;
    }
    if is_target_tgid(current_tgid()) {
        count_one(Counter::PageFaultsMinor);
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
    }
    0
}
