//! Who interrupts the target with cross-CPU calls: each call queued to a
//! CPU while a target thread runs there (`csd:csd_queue_cpu`, on the
//! sender's CPU, for smp_call_function_single and for each CPU of
//! smp_call_function_many) is counted by its sender thread, and as a TLB
//! shootdown when the function is `flush_tlb_func` (another thread of the
//! process unmapping or changing protections). The receiving side's time
//! is already in the hard-IRQ counters by kind (irq.rs); this names who
//! sent them. Counted, not recorded: one hash update per call.

use aya_ebpf::{
    helpers::{
        bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_get_current_task_btf,
        bpf_map_lookup_percpu_elem,
    },
    macros::tracepoint,
    programs::TracePointContext,
};
use correlator_common::{CpuState, IpiSender, Total};

use crate::{
    helpers::{saved_syscall, total_add},
    maps::{CPUS, IPI_SENDERS},
};

/// Offsets in the `csd:csd_queue_cpu` record (its `format` file): `cpu`
/// (u32) and `func` (a pointer).
const CPU_OFFSET: usize = 8;
const FUNC_OFFSET: usize = 24;

/// A classic tracepoint, not a BTF one: the verifier refuses a BTF
/// tracepoint's read of `func`, a function pointer ("invalid bpf_context
/// access": it takes only pointers to structs).
#[tracepoint(category = "csd", name = "csd_queue_cpu")]
pub fn csd_queue_cpu(ctx: TracePointContext) -> u32 {
    if config!(floor_only) != 0 {
        return 0;
    }
    // SAFETY: offsets within the tracepoint's record.
    let (Ok(cpu), Ok(func)) = (unsafe { ctx.read_at::<u32>(CPU_OFFSET) }, unsafe {
        ctx.read_at::<u64>(FUNC_OFFSET)
    }) else {
        return 0;
    };
    if !target_runs_on(cpu) {
        return 0;
    }
    let tid = bpf_get_current_pid_tgid() as u32;
    let tlb = u64::from(func != 0 && func == config!(tlb_flush_func));
    // The sender's syscall (munmap, mprotect, madvise, membarrier, ...),
    // from its saved registers: what it did that cost the server a call.
    // SAFETY: the current task, as a BTF pointer.
    let syscall = saved_syscall(unsafe { bpf_get_current_task_btf() } as *const u8);
    if let Some(s) = IPI_SENDERS.get_ptr_mut(&tid) {
        // SAFETY: map value; a sender thread runs on one CPU at a time.
        unsafe {
            (*s).calls += 1;
            (*s).tlb_shootdowns += tlb;
            (*s).in_syscall += u64::from(syscall != 0 && syscall == (*s).syscall);
        }
        return 0;
    }
    let sender = IpiSender {
        tgid: (bpf_get_current_pid_tgid() >> 32) as u32,
        syscall,
        comm: bpf_get_current_comm().unwrap_or([0; 16]),
        calls: 1,
        tlb_shootdowns: tlb,
        in_syscall: u64::from(syscall != 0),
    };
    if IPI_SENDERS.insert(&tid, &sender, 0).is_err() {
        total_add(Total::IpiSendersLost);
    }
    0
}

/// Whether a target thread is current on `cpu` (its per-CPU state, read
/// from this CPU: a racy read of one word, enough for a count).
#[inline(always)]
fn target_runs_on(cpu: u32) -> bool {
    let key = 0u32;
    // SAFETY: CPUS is a per-CPU array with one element; the helper returns
    // null for a CPU out of range.
    let state = unsafe {
        bpf_map_lookup_percpu_elem(
            (&raw const CPUS).cast_mut().cast(),
            (&raw const key).cast(),
            cpu,
        )
    }
    .cast::<CpuState>();
    // SAFETY: non-null: a map value.
    !state.is_null() && unsafe { (*state).target_tid } != 0
}
