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
