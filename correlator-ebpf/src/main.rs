//! correlator's kernel programs.
//!
//! Cheap by design:
//! - every event of the target is counted into a per-CPU ring of time
//!   buckets and into never-reset per-CPU totals (the drain check);
//! - each program run does at most one bucket lookup, one per-CPU state
//!   lookup and one clock read, and programs that fire for every task on the
//!   machine (sched_switch, sched_waking) decide "not a target" with inlined
//!   array lookups only, before reading the clock;
//! - only off-CPU intervals long enough to matter produce a ring-buffer
//!   record, submitted without waking the reader (userspace drains on a timer).
//!
//! - every target thread keeps an account of the current bucket (on-CPU
//!   time, syscall time in the kernel, steal, IRQ time, short off-CPU
//!   intervals by wait site, on-CPU samples by context) and emits it as one
//!   ring-buffer record when it first does something in a later bucket.
//!
//! Counters are plain (non-atomic) adds: the maps are per-CPU, tracepoint
//! and perf-event programs are not preempted, and each counter has one
//! writer context (hard IRQ fields only in hard IRQ, switch and migration
//! fields only with IRQs off, fault fields only in the faulting task), so
//! no two writes of one field interleave. Two races are left: a bucket
//! reset interrupted by an IRQ program can only lose counts from buckets,
//! never from totals, and userspace reports any such shortfall as lost; a
//! thread's account updated by its syscall exit can be interrupted by an
//! IRQ or sample program adding to the same account (BTF tracepoints nest
//! across programs), which can lose that one addition or emit one bucket's
//! account twice: at most one IRQ's or sample's worth, rarely.
//!
//! One file per probe family (`faults`, `sched`, `irq`, `locks`,
//! `syscalls`, `samples`, `passive`), with the maps in `maps`, the per-thread account
//! in `account` and the thread table in `threads`; all in one object.
#![no_std]
#![no_main]

/// One field of CONFIG, as a single volatile load: `CONFIG.load()` copies
/// the whole struct (a dozen loads) wherever it is called.
macro_rules! config {
    ($field:ident) => {{
        // Used inside unsafe blocks too.
        #[allow(unused_unsafe)]
        // SAFETY: Global<T> is repr(transparent) over T, which the
        // loader initialised; the field is plain data.
        let value = unsafe {
            core::ptr::read_volatile(
                &raw const (*(&raw const crate::maps::CONFIG).cast::<correlator_common::Config>())
                    .$field,
            )
        };
        value
    }};
}

mod account;
mod faults;
mod helpers;
mod ipi;
mod irq;
mod locks;
mod maps;
mod memory;
mod passive;
mod runtimes;
mod samples;
mod sched;
mod syscalls;
mod threads;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
