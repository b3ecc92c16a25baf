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

    /// A CLOCK_MONOTONIC instant as Unix time in seconds (wall-clock
    /// steps after the snapshot are not followed).
    pub fn unix_s(&self, monotonic_ns: u64) -> f64 {
        (self.realtime_ns as f64 + monotonic_ns as f64 - self.monotonic_ns as f64) / 1e9
    }
}

#[cfg(test)]
mod tests {
    use super::ClockSnapshot;

    #[test]
    fn a_monotonic_instant_maps_to_unix_time_by_the_snapshots_offset() {
        let c = ClockSnapshot {
            monotonic_ns: 5_000_000_000,
            boottime_ns: 6_000_000_000,
            realtime_ns: 1_800_000_000_000_000_000,
        };
        assert_eq!(c.unix_s(4_500_000_000), 1_799_999_999.5);
        assert_eq!(c.unix_s(5_000_000_000), 1_800_000_000.0);
    }
}
