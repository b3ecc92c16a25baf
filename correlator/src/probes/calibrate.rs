//! What hooks cost that their programs' run time does not show, measured
//! here, on this machine, when they attach: a cheap operation that fires
//! them timed in batches before and after, less the programs' own time
//! per call over the same batches (from the kernel's BPF statistics,
//! which time the programs, not the path to them).
//!
//! - The opt-in syscall hooks: attaching any program to
//!   `sys_enter`/`sys_exit` sends every syscall of every task on the
//!   machine through the kernel's slow entry path (docs/overhead.md: empty
//!   programs there cost a syscall-bound load 25-40%). Timed on `getppid()`.
//! - Every other hook's dispatch: the tracepoint's call into the BPF
//!   program (retpolines and return thunks on CPUs that need them), paid by
//!   every event of every task at that tracepoint, the target's or not
//!   (docs/overhead.md: on redis at saturation, the hooks with empty
//!   programs cost about what `watch` costs). Timed on a datagram sent
//!   and read back over a socketpair, which fires the two socket transfer
//!   hooks once each.

use std::time::Instant;

use aya::Ebpf;
use serde::{Deserialize, Serialize};

use super::ProgramCost;

/// Calls per batch: ~2-10 ms each on this VM, short enough that most
/// batches run without a preemption or a host stall.
const BATCH: u32 = 20_000;
/// Batches on each side; the fastest one stands (the least disturbed).
const BATCHES: usize = 7;

/// One operation's cost with and without hooks, measured at attach.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct HookedTiming {
    /// ns per operation before the hooks attached (fastest batch).
    pub unhooked_ns: f64,
    /// ns per operation with the hooks (fastest batch).
    pub hooked_ns: f64,
    /// The hooks' programs' own ns per operation over the hooked batches
    /// (BPF statistics): already in the programs' run time.
    pub programs_ns: f64,
    /// ns per operation with the hooks and the BPF statistics off, as the
    /// hooks run outside the statistics' windows (`watch` always, `record`
    /// 9 s in 10). `hooked_ns` is with them on, which they need to time the
    /// programs: timing every run costs ~85 ns per hook run on this VM
    /// (two clock reads), and counted in the dispatch it had doubled it.
    /// None when it could not be measured (the statistics stayed on: the
    /// sysctl or another tool holds them), and in runs saved before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hooked_no_stats_ns: Option<f64>,
}

/// The syscall hooks' slow path, per `getppid()`.
pub type SyscallPathCost = HookedTiming;

/// The socket transfer hooks, per datagram sent and read back: one run of
/// each of the two ([`DISPATCHES_PER_ROUND_TRIP`]).
pub type HookDispatchCost = HookedTiming;

/// Hook runs per socketpair round trip: `sock_send_length` and
/// `sock_recv_length`, once each.
pub const DISPATCHES_PER_ROUND_TRIP: f64 = 2.0;

impl HookedTiming {
    /// What each operation paid beyond the programs' run time (never below
    /// 0: a difference inside the batches' noise): with the statistics off
    /// when that was measured, so that the statistics' own cost is not
    /// counted as the hooks'.
    pub fn extra_ns(&self) -> f64 {
        let hooked = self.hooked_no_stats_ns.unwrap_or(self.hooked_ns);
        (hooked - self.unhooked_ns - self.programs_ns).max(0.0)
    }

    /// The BPF statistics' own cost per operation while they are on (None
    /// when not measured; 0 inside the noise).
    pub fn stats_ns(&self) -> Option<f64> {
        self.hooked_no_stats_ns
            .map(|off| (self.hooked_ns - off).max(0.0))
    }

    /// For the socket round trip: the statistics' cost of timing one hook
    /// run.
    pub fn stats_ns_per_dispatch(&self) -> Option<f64> {
        self.stats_ns().map(|ns| ns / DISPATCHES_PER_ROUND_TRIP)
    }

    /// For the socket round trip: the dispatch of one hook run.
    pub fn extra_ns_per_dispatch(&self) -> f64 {
        self.extra_ns() / DISPATCHES_PER_ROUND_TRIP
    }
}

/// The fastest of [`BATCHES`] batches of `op`, ns per call.
fn fastest_batch(mut op: impl FnMut()) -> f64 {
    (0..BATCHES)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..BATCH {
                op();
            }
            start.elapsed().as_nanos() as f64 / f64::from(BATCH)
        })
        .fold(f64::INFINITY, f64::min)
}

/// The fastest of [`BATCHES`] batches of `getppid()`, ns per call.
pub(super) fn time_syscalls() -> f64 {
    fastest_batch(|| {
        // SAFETY: getppid has no preconditions; glibc does not cache it,
        // so each call enters the kernel.
        std::hint::black_box(unsafe { libc::getppid() });
    })
}

/// A connected pair of Unix datagram sockets: both transfer hooks fire for
/// every socket family, and nothing else does (no softirq, no wakeup).
pub(super) struct SocketPair(
    std::os::unix::net::UnixDatagram,
    std::os::unix::net::UnixDatagram,
);

impl SocketPair {
    pub(super) fn new() -> std::io::Result<Self> {
        let (a, b) = std::os::unix::net::UnixDatagram::pair()?;
        Ok(Self(a, b))
    }

    /// One byte sent on one end and read on the other.
    pub(super) fn round_trip(&self) {
        let mut byte = [0u8; 1];
        // A failure only makes the batch cheaper (and the difference
        // smaller); a 1-byte datagram into an empty queue does not fail.
        let _ = self.0.send(&byte);
        let _ = self.1.recv(&mut byte);
    }
}

/// Turns this process's hold on the BPF run-time statistics on or off
/// (another holder, or the sysctl, keeps them on: the calibration sees
/// that in the programs' run counts).
pub(super) type StatsSwitch<'a> = &'a mut dyn FnMut(bool);

/// Rounds of [`interleaved`]: a batch without the hooks, then with them
/// (with the statistics on and off, in alternating order).
const ROUNDS: usize = 15;
/// Operations per batch of [`interleaved`]: ~10 ms of socket round trips
/// here, so that a round's two batches see the same host.
const ROUND_BATCH: u32 = 5_000;

/// Times `op` (one operation running every hook in `names` once) in
/// [`ROUNDS`] rounds of a batch without the hooks and batches with them
/// (`set_hooked` attaches or detaches them; left detached): one with the
/// BPF statistics on (the programs' own time comes from them) and one
/// with `stats` turning them off (what the hooks cost as they mostly run;
/// not kept when another holder kept them on). Each side is its median
/// batch, and each difference the median of the rounds' own differences:
/// this host's speed drifts and jumps by more than the difference between
/// rounds, less within one. Leaves the statistics on. None without the
/// BPF statistics.
pub(super) fn interleaved(
    ebpf: &mut Ebpf,
    names: &[&str],
    mut set_hooked: impl FnMut(&mut Ebpf, bool) -> anyhow::Result<()>,
    stats: StatsSwitch<'_>,
    mut op: impl FnMut(),
) -> anyhow::Result<Option<HookedTiming>> {
    let mut batch = || {
        let start = Instant::now();
        for _ in 0..ROUND_BATCH {
            op();
        }
        start.elapsed().as_nanos() as f64 / f64::from(ROUND_BATCH)
    };
    let Some(before) = stats_of(ebpf, names) else {
        return Ok(None);
    };
    let mut unhooked = Vec::with_capacity(ROUNDS);
    let mut differences = Vec::with_capacity(ROUNDS);
    let mut no_stats_differences = Vec::with_capacity(ROUNDS);
    // Whether every batch meant to run without the statistics did (no
    // program run was counted over it).
    let mut stats_went_off = true;
    for round in 0..ROUNDS {
        let without = batch();
        set_hooked(ebpf, true)?;
        let mut with = 0.0;
        // Alternating which goes first: a drift within the round falls on
        // each side in turn.
        for stats_on in [round % 2 == 0, round % 2 == 1] {
            if stats_on {
                with = batch();
            } else {
                match without_stats(ebpf, names, &mut *stats, &mut batch) {
                    Some(off) => no_stats_differences.push(off - without),
                    None => stats_went_off = false,
                }
            }
        }
        set_hooked(ebpf, false)?;
        unhooked.push(without);
        differences.push(with - without);
    }
    let Some(after) = stats_of(ebpf, names) else {
        return Ok(None);
    };
    let unhooked_ns = crate::stats::median(&unhooked);
    let hooked_ns = unhooked_ns + crate::stats::median(&differences);
    let hooked_no_stats_ns =
        stats_went_off.then(|| unhooked_ns + crate::stats::median(&no_stats_differences));
    Ok(
        programs_ns_per_call(before, after, names.len()).map(|programs_ns| HookedTiming {
            unhooked_ns,
            hooked_ns,
            programs_ns,
            hooked_no_stats_ns,
        }),
    )
}

/// The programs' summed time per call between two readings of their
/// statistics, each call running each of `hooks` programs once. None when
/// nothing ran (the statistics are off).
fn programs_ns_per_call(before: (u64, u64), after: (u64, u64), hooks: usize) -> Option<f64> {
    let runs = after.1.saturating_sub(before.1);
    if runs == 0 {
        return None;
    }
    let calls = runs as f64 / hooks as f64;
    Some(after.0.saturating_sub(before.0) as f64 / calls)
}

/// Run time and run count of the programs named in `names`, summed.
fn stats_of(ebpf: &Ebpf, names: &[&str]) -> Option<(u64, u64)> {
    names.iter().try_fold((0u64, 0u64), |(ns, n), name| {
        let cost = ProgramCost::of_program(name, ebpf.program(name)?)?;
        Some((ns + cost.run_time_ns, n + cost.run_count))
    })
}

/// Times `time` (one operation, each running every hook in `names` once)
/// with the hooks attached, given `unhooked_ns` timed before they were:
/// with the BPF statistics on (the programs' time comes from them), then
/// with `stats` turning them off (what the hooks cost as they run; not
/// kept when a program run was counted over it: another holder kept them
/// on). Leaves them on. None without the BPF statistics (the programs'
/// share of the difference is then unknown).
pub(super) fn with_hooks(
    ebpf: &Ebpf,
    names: &[&str],
    unhooked_ns: f64,
    time: impl Fn() -> f64,
    stats: StatsSwitch<'_>,
) -> Option<HookedTiming> {
    let before = stats_of(ebpf, names)?;
    let hooked_ns = time();
    let after = stats_of(ebpf, names)?;
    let programs_ns = programs_ns_per_call(before, after, names.len())?;
    let hooked_no_stats_ns = without_stats(ebpf, names, stats, time);
    Some(HookedTiming {
        unhooked_ns,
        hooked_ns,
        programs_ns,
        hooked_no_stats_ns,
    })
}

/// Runs a calibration with the BPF statistics on: a run that holds them
/// already (`held`) keeps them as the calibration leaves them; one without
/// them (`watch`) holds them for the calibration only, as the programs'
/// own time comes from them.
pub(super) fn with_stats_held<T>(
    stats: StatsSwitch<'_>,
    held: bool,
    calibrate: impl FnOnce(StatsSwitch<'_>) -> T,
) -> T {
    if !held {
        stats(true);
    }
    let measured = calibrate(&mut *stats);
    if !held {
        stats(false);
    }
    measured
}

/// `time` run with this process's hold on the statistics dropped (put
/// back after); None when a run of the `names` programs was counted over
/// it (another holder kept them on, so it is not the hooks without them).
fn without_stats(
    ebpf: &Ebpf,
    names: &[&str],
    stats: StatsSwitch<'_>,
    time: impl FnOnce() -> f64,
) -> Option<f64> {
    stats(false);
    let counted = stats_of(ebpf, names);
    let off = time();
    let went_off = counted.is_some() && stats_of(ebpf, names) == counted;
    stats(true);
    went_off.then_some(off)
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
            hooked_no_stats_ns: None,
        };
        assert!((c.extra_ns() - 60.0).abs() < 1e-9);
        assert_eq!(c.stats_ns(), None);
        // With the statistics off measured: their cost is not the hooks'.
        let off = SyscallPathCost {
            hooked_no_stats_ns: Some(210.0),
            ..c
        };
        assert!((off.extra_ns() - 20.0).abs() < 1e-9);
        assert_eq!(off.stats_ns(), Some(40.0));
        assert_eq!(off.stats_ns_per_dispatch(), Some(20.0));
        let noise = SyscallPathCost {
            programs_ns: 200.0,
            ..c
        };
        assert_eq!(noise.extra_ns(), 0.0);
        // Two hook runs per socket round trip.
        assert!((c.extra_ns_per_dispatch() - 30.0).abs() < 1e-9);
    }
}
