//! The one clock: CLOCK_MONOTONIC, the clock of the kernel's
//! `bpf_ktime_get_ns`, so userspace and kernel timestamps line up.

/// Nanoseconds on CLOCK_MONOTONIC.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// The run's clock against the others at one instant, so a trace on
/// CLOCK_MONOTONIC can be merged with traces on BOOTTIME (Perfetto's
/// default) or wall time. Taken at record time: BOOTTIME − MONOTONIC grows
/// by every suspend, so an offset taken later could be wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ClockSnapshot {
    pub monotonic_ns: u64,
    pub boottime_ns: u64,
    pub realtime_ns: u64,
}

impl ClockSnapshot {
    pub fn now() -> Self {
        let read = |clock| {
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: valid pointer to a timespec; the three clocks always exist.
            unsafe { libc::clock_gettime(clock, &mut ts) };
            (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
        };
        Self {
            monotonic_ns: read(libc::CLOCK_MONOTONIC),
            boottime_ns: read(libc::CLOCK_BOOTTIME),
            realtime_ns: read(libc::CLOCK_REALTIME),
        }
    }
}
