//! `correlator-testkit memcheck`: the latency recorder fed a long synthetic run,
//! and the process's peak memory (for `cargo xtask bench loadgen`).

use crate::latency::recorder::{Recorder, RequestTimes};

/// Feeds `rate × seconds` synthetic requests (50 µs, with 1% 5 ms spikes)
/// through a recorder, as a long run would, and returns it: the check that
/// memory is bounded by run length, not by request count.
pub fn synthetic_run(rate: u64, seconds: u64) -> Recorder {
    let start = 1_000_000_000u64;
    let interval = 1_000_000_000 / rate.max(1);
    let mut rec = Recorder::new(1, start);
    let mut rng = crate::stats::Rng::new(0x2545_f491_4f6c_dd1d);
    for i in 0..rate * seconds {
        // A deterministic 1% of requests are slow.
        let x = rng.next_u64();
        let latency = if x.is_multiple_of(100) {
            5_000_000
        } else {
            50_000 + x % 20_000
        };
        let intended = start + i * interval;
        rec.sent(0, intended + 2_000, 2_000, true);
        rec.answered(
            RequestTimes {
                intended_ns: intended,
                sent_ns: intended + 2_000,
                done_ns: intended + latency,
                connection: (i % 8) as u32,
                phase: 0,
            },
            true,
            true,
        );
    }
    rec
}

/// Peak resident memory of this process in KiB (VmHWM).
pub fn peak_rss_kib() -> Option<u64> {
    std::fs::read_to_string("/proc/self/status")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}
