//! Small helpers every program uses: the clock, the CPU, task fields read
//! through BTF pointers, and where a program run counts (its bucket and
//! the CPU's totals).

use aya_ebpf::programs::tracing::StackIdContext;
use aya_ebpf::{
    helpers::{
        bpf_get_current_pid_tgid, bpf_get_smp_processor_id, bpf_ktime_get_ns,
        generated::bpf_task_pt_regs,
    },
    programs::BtfTracePointContext,
};
use correlator_common::{
    BUCKET_SLOTS, Bucket, Counter, CpuState, NO_STACK, NUM_COUNTERS, STACK_SLOTS, SYSCALL_SLOTS,
    Total,
};

use crate::maps::{BUCKETS, CHILD_TGIDS, CPUS, STACKS, STACKS_OVERFLOW};

#[inline(always)]
pub(crate) fn now() -> u64 {
    // SAFETY: helper without preconditions.
    unsafe { bpf_ktime_get_ns() }
}

#[inline(always)]
pub(crate) fn cpu_id() -> u32 {
    // SAFETY: helper without preconditions.
    unsafe { bpf_get_smp_processor_id() }
}

#[inline(always)]
pub(crate) fn current_tgid() -> u32 {
    (bpf_get_current_pid_tgid() >> 32) as u32
}

#[inline(always)]
pub(crate) fn is_target_tgid(tgid: u32) -> bool {
    tgid == config!(target_tgid)
        || (config!(follow_children) != 0 && CHILD_TGIDS.get_ptr(&tgid).is_some())
}

/// Argument `n` of a BTF tracepoint.
#[inline(always)]
pub(crate) fn arg<T: aya_ebpf::Argument>(ctx: &BtfTracePointContext, n: usize) -> T {
    ctx.arg(n)
}

/// `task->pid`, a direct load through the BTF-typed task pointer (the
/// offset is a frozen load-time constant, so the verifier checks it against
/// the kernel's struct layout).
#[inline(always)]
pub(crate) fn task_pid(task: *const u8) -> u32 {
    let offset = config!(task_pid_offset) as usize;
    // SAFETY: `task` is a task_struct pointer from the tracepoint's
    // arguments; the verifier checks the access.
    unsafe { *task.add(offset).cast::<u32>() }
}

/// `task->tgid`, a direct load like `task_pid`.
#[inline(always)]
pub(crate) fn task_tgid(task: *const u8) -> u32 {
    let offset = config!(task_tgid_offset) as usize;
    // SAFETY: as for `task_pid`.
    unsafe { *task.add(offset).cast::<u32>() }
}

/// `task->thread_info.cpu`, a direct load like `task_pid`.
#[inline(always)]
pub(crate) fn task_cpu(task: *const u8) -> u32 {
    let offset = config!(task_cpu_offset) as usize;
    // SAFETY: as for `task_pid`.
    unsafe { *task.add(offset).cast::<u32>() }
}

/// `task->on_rq`, a direct load like `task_pid`.
#[inline(always)]
pub(crate) fn task_on_rq(task: *const u8) -> u32 {
    let offset = config!(task_on_rq_offset) as usize;
    // SAFETY: as for `task_pid`.
    unsafe { *task.add(offset).cast::<u32>() }
}

/// `task->sched_info.last_arrival`: when the scheduler last put the task
/// on a CPU, in its run queue's clock (0: config without it). A direct
/// load like `task_pid`.
#[inline(always)]
pub(crate) fn task_last_arrival(task: *const u8) -> u64 {
    let offset = config!(task_last_arrival_offset) as usize;
    if offset == 0 {
        return 0;
    }
    // SAFETY: as for `task_pid`.
    unsafe { *task.add(offset).cast::<u64>() }
}

/// `-ENOSYS`: what the x86-64 syscall entry stores in the saved `ax`
/// until the syscall returns its value there.
const NEG_ENOSYS: i64 = -38;

/// The syscall `task` is inside (number + 1), or 0 (user mode, or an
/// exception such as a page fault), from the user registers the kernel
/// saved at the top of its stack when it entered (`--syscall-time
/// sampled`, instead of hooking every syscall's entry and exit).
///
/// A syscall entry saves its number in `orig_ax` and `-ENOSYS` in `ax`,
/// which holds until the call returns its value there; interrupts and
/// exceptions (a page fault included: the entry code moves its error code
/// out) save `orig_ax` -1. Checking `ax` too makes a thread that finished
/// its call but has not left the kernel yet (signal delivery, a reschedule
/// on the way out) "not in a syscall", as the exact hooks see it: their
/// `sys_exit` fires before that work.
#[inline(always)]
pub(crate) fn saved_syscall(task: *const u8) -> u32 {
    // SAFETY: `task` is a BTF task pointer (a tracepoint argument or the
    // current task); the helper returns its saved user registers.
    let regs = unsafe { bpf_task_pt_regs(task as *mut _) } as *const u8;
    if regs.is_null() {
        return 0;
    }
    // The helper returns a BTF `struct pt_regs` pointer: direct loads, which
    // the verifier checks against the struct (a probe read each was two
    // more helper calls at every target switch-out).
    // SAFETY: as above; the offsets are frozen load-time constants.
    let read = |offset: u64| unsafe { *regs.add(offset as usize).cast::<i64>() };
    let nr = read(config!(regs_nr_offset));
    if !(0..i64::from(SYSCALL_SLOTS)).contains(&nr) || read(config!(regs_ax_offset)) != NEG_ENOSYS {
        return 0;
    }
    nr as u32 + 1
}

// ------------------------------------------------------------------ counts

/// Where one program run counts: the bucket of its timestamp and the CPU's
/// state (totals), each looked up once.
pub(crate) struct Sink {
    pub(crate) bucket: *mut Bucket,
    pub(crate) cpu: *mut CpuState,
}

impl Sink {
    #[inline(always)]
    pub(crate) fn at(ts: u64, cpu: *mut CpuState) -> Option<Self> {
        let epoch = ts >> (config!(bucket_shift) & 63);
        let bucket = BUCKETS.get_ptr_mut((epoch & (BUCKET_SLOTS as u64 - 1)) as u32)?;
        // SAFETY: per-CPU map value; see the module docs for concurrency.
        unsafe {
            if (*bucket).epoch != epoch {
                // Volatile stores: a plain `= [0; N]` becomes a byte-wise memset loop.
                let counts = (&raw mut (*bucket).counts).cast::<u64>();
                for i in 0..NUM_COUNTERS {
                    core::ptr::write_volatile(counts.add(i), 0);
                }
                (*bucket).epoch = epoch;
            }
        }
        Some(Self { bucket, cpu })
    }

    /// Adds to counter slot `index` (a per-source IRQ time counter, whose
    /// slot is computed); out of range adds nothing.
    #[inline(always)]
    pub(crate) fn add_at(&self, index: usize, value: u64) {
        if index >= NUM_COUNTERS {
            return;
        }
        // SAFETY: pointers from map lookups in `at`; index checked above.
        unsafe {
            (*self.bucket).counts[index] += value;
            (*self.cpu).totals[index] += value;
        }
    }

    #[inline(always)]
    pub(crate) fn add(&self, counter: Counter, value: u64) {
        // SAFETY: pointers from map lookups in `at`.
        unsafe {
            (*self.bucket).counts[counter as usize] += value;
            (*self.cpu).totals[counter as usize] += value;
        }
    }
}

#[inline(always)]
pub(crate) fn cpu_state() -> Option<*mut CpuState> {
    CPUS.get_ptr_mut(0)
}

/// Counts one event of `counter` now.
#[inline(always)]
pub(crate) fn count_one(counter: Counter) {
    let Some(cpu) = cpu_state() else { return };
    if let Some(sink) = Sink::at(now(), cpu) {
        sink.add(counter, 1);
    }
}

#[inline(always)]
pub(crate) fn total_add(t: Total) {
    total_add_n(t, 1);
}

#[inline(always)]
pub(crate) fn total_add_n(t: Total, n: u64) {
    if let Some(cpu) = cpu_state() {
        // SAFETY: per-CPU value.
        unsafe { (*cpu).totals[t as usize] += n };
    }
}

/// `bpf_get_stackid` flag: the user stack (default: the kernel's).
pub(crate) const USER_STACK: u64 = 1 << 8;
/// `-EEXIST`: the stack's hash slot holds a different stack.
const EEXIST: i32 = -17;

/// The id in `STACKS` of the current kernel (`flags` 0) or user
/// (`USER_STACK`) stack, or in `STACKS_OVERFLOW` plus `STACK_SLOTS` when
/// its slot in `STACKS` holds another stack; a failure is counted and
/// returned negative.
#[inline(always)]
pub(crate) fn stack_id<C: StackIdContext>(ctx: &C, flags: u64) -> i32 {
    let found = match ctx.get_stackid(&STACKS, flags) {
        Err(EEXIST) => ctx
            .get_stackid(&STACKS_OVERFLOW, flags)
            .map(|id| id + STACK_SLOTS as i64),
        other => other,
    };
    match found {
        Ok(id) => id as i32,
        Err(e) => {
            total_add(if e == EEXIST {
                Total::StackCollisions
            } else {
                Total::StackErrors
            });
            if e == 0 { NO_STACK } else { e }
        }
    }
}
