//! What the opt-in syscall hooks cost that their programs' run time does
//! not show: attaching any program to `sys_enter`/`sys_exit` sends every
//! syscall of every task on the machine through the kernel's slow entry
//! path (docs/overhead.md: empty programs there cost a syscall-bound load
//! 25-40%). The kernel's BPF statistics time the programs, not that path,
//! so it is measured here, on this machine, when the hooks attach: a
//! cheap syscall timed in batches before and after, less the programs' own
//! time per call over the same batches (from the statistics).

use std::time::Instant;

use aya::Ebpf;
use serde::{Deserialize, Serialize};

use super::ProgramCost;

/// Calls per batch: ~2-10 ms each on this VM, short enough that most
/// batches run without a preemption or a host stall.
const BATCH: u32 = 20_000;
/// Batches on each side; the fastest one stands (the least disturbed).
const BATCHES: usize = 7;

/// The syscall path's cost per syscall, measured at attach.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SyscallPathCost {
    /// ns per `getppid()` before the hooks attached (fastest batch).
    pub unhooked_ns: f64,
    /// ns per `getppid()` with the hooks (fastest batch).
    pub hooked_ns: f64,
    /// The hooks' programs' own ns per call over the hooked batches (BPF
    /// statistics): already in the programs' run time.
    pub programs_ns: f64,
}

impl SyscallPathCost {
    /// What every syscall on the machine paid beyond the programs' run
    /// time (never below 0: a difference inside the batches' noise).
    pub fn extra_ns(&self) -> f64 {
        (self.hooked_ns - self.unhooked_ns - self.programs_ns).max(0.0)
    }
}

/// The fastest of [`BATCHES`] batches of `getppid()`, ns per call.
pub(super) fn time_syscalls() -> f64 {
    (0..BATCHES)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..BATCH {
                // SAFETY: getppid has no preconditions; glibc does not
                // cache it, so each call enters the kernel.
                std::hint::black_box(unsafe { libc::getppid() });
            }
            start.elapsed().as_nanos() as f64 / f64::from(BATCH)
        })
        .fold(f64::INFINITY, f64::min)
}

/// Run time and run count of the programs named in `names`, summed.
fn stats_of(ebpf: &Ebpf, names: &[&str]) -> Option<(u64, u64)> {
    names.iter().try_fold((0u64, 0u64), |(ns, n), name| {
        let cost = ProgramCost::of_program(name, ebpf.program(name)?)?;
        Some((ns + cost.run_time_ns, n + cost.run_count))
    })
}

/// Times `getppid()` with the hooks `names` attached, given `unhooked_ns`
/// timed before they were. None without the BPF statistics (the programs'
/// share of the difference is then unknown).
pub(super) fn with_hooks(ebpf: &Ebpf, names: &[&str], unhooked_ns: f64) -> Option<SyscallPathCost> {
    let before = stats_of(ebpf, names)?;
    let hooked_ns = time_syscalls();
    let after = stats_of(ebpf, names)?;
    let runs = after.1.saturating_sub(before.1);
    if runs == 0 {
        // The statistics are off: nothing was timed.
        return None;
    }
    // Each call runs every hook once: the programs' ns per call is their
    // summed time over the calls (one run of each per call).
    let calls = runs as f64 / names.len() as f64;
    let programs_ns = after.0.saturating_sub(before.0) as f64 / calls;
    Some(SyscallPathCost {
        unhooked_ns,
        hooked_ns,
        programs_ns,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_extra_is_the_difference_less_the_programs() {
        let c = SyscallPathCost {
            unhooked_ns: 100.0,
            hooked_ns: 250.0,
            programs_ns: 90.0,
        };
        assert!((c.extra_ns() - 60.0).abs() < 1e-9);
        let noise = SyscallPathCost {
            programs_ns: 200.0,
            ..c
        };
        assert_eq!(noise.extra_ns(), 0.0);
    }
}
