//! Where completed requests land: per-phase distributions, counts, a
//! per-time-bucket summary, the requests that may belong to a spike, and
//! 1-second interval histograms for the .hlog output.
//!
//! Memory is bounded by run length, not request count: distributions are
//! fixed-size HdrHistograms, buckets are per time slot, interval histograms
//! are kept compressed, and exact per-request timestamps are kept only for
//! requests above a running threshold (and capped, with the overflow counted).

use hdrhistogram::serialization::{Serializer as _, V2DeflateSerializer};
use serde::{Deserialize, Serialize};

use crate::latency::Distribution;

/// Bucket width of the latency timeline: 2^19 ns (524 µs), the same as the
/// kernel probes' default, so the two line up bucket for bucket.
pub const BUCKET_SHIFT: u32 = 19;

/// Interval of the .hlog output.
pub const HLOG_INTERVAL_NS: u64 = 1_000_000_000;

/// Requests kept with exact timestamps at most (32 bytes each).
pub const MAX_KEPT_REQUESTS: usize = 4_000_000;

/// One request's timestamps (CLOCK_MONOTONIC ns).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestTimes {
    pub intended_ns: u64,
    pub sent_ns: u64,
    pub done_ns: u64,
    pub connection: u32,
    pub phase: u32,
}

impl RequestTimes {
    /// Latency from the intended send time (coordinated-omission free).
    pub fn corrected(&self) -> u64 {
        self.done_ns.saturating_sub(self.intended_ns)
    }

    /// Latency from the actual send.
    pub fn service(&self) -> u64 {
        self.done_ns.saturating_sub(self.sent_ns)
    }
}

/// Latency summary of one time bucket (by completion time).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LatencyBucket {
    pub count: u32,
    pub max_ns: u64,
    pub sum_ns: u64,
}

/// One closed interval of the .hlog output, compressed.
pub struct Interval {
    pub start_ns: u64,
    pub duration_ns: u64,
    pub max_ns: u64,
    pub encoded: Vec<u8>,
}

/// Results of one rate phase.
#[derive(Default)]
pub struct Phase {
    pub corrected: Distribution,
    pub service: Distribution,
    pub slip: Distribution,
    pub sent: u64,
    /// Sent after the warm-up (the achieved rate's numerator).
    pub sent_measured: u64,
    /// Actual time of the last send (a late generator stretches the phase).
    pub last_sent_ns: u64,
    pub completed: u64,
    pub timeouts: u64,
    pub errors: u64,
    /// Requests discarded as warm-up (sent, answered, not in the distributions).
    pub warmup: u64,
}

pub struct Recorder {
    pub phases: Vec<Phase>,
    /// First bucket number of the run.
    pub bucket_origin: u64,
    pub buckets: Vec<LatencyBucket>,
    pub kept: Vec<RequestTimes>,
    pub kept_over_cap: u64,
    keep_threshold_ns: u64,
    since_threshold: u32,
    intervals: Vec<Interval>,
    interval: Distribution,
    interval_start: u64,
    serializer: V2DeflateSerializer,
}

impl Recorder {
    pub fn new(phases: usize, start_ns: u64) -> Self {
        Self {
            phases: (0..phases).map(|_| Phase::default()).collect(),
            bucket_origin: start_ns >> BUCKET_SHIFT,
            buckets: Vec::new(),
            kept: Vec::new(),
            kept_over_cap: 0,
            keep_threshold_ns: 0,
            since_threshold: 0,
            intervals: Vec::new(),
            interval: Distribution::new(),
            interval_start: start_ns,
            serializer: V2DeflateSerializer::new(),
        }
    }

    /// A request answered (successfully or with an error reply).
    pub fn answered(&mut self, t: RequestTimes, measured: bool, ok: bool) {
        let phase = &mut self.phases[t.phase as usize];
        if !ok {
            phase.errors += 1;
        }
        if !measured {
            phase.warmup += 1;
            return;
        }
        phase.completed += 1;
        let corrected = t.corrected();
        phase.corrected.record(corrected);
        phase.service.record(t.service());
        self.timeline(t.done_ns, corrected);
        self.keep(t, corrected);
    }

    /// A request that got no answer within the timeout: recorded as its
    /// latency so far (at least the timeout), never dropped.
    pub fn timed_out(&mut self, t: RequestTimes, measured: bool) {
        let phase = &mut self.phases[t.phase as usize];
        phase.timeouts += 1;
        if !measured {
            phase.warmup += 1;
            return;
        }
        let corrected = t.corrected();
        phase.corrected.record(corrected);
        phase.service.record(t.service());
        self.timeline(t.done_ns, corrected);
        self.keep(t, corrected);
    }

    /// A request lost to a connection failure: counted, not a latency.
    pub fn failed(&mut self, phase: u32) {
        self.phases[phase as usize].errors += 1;
    }

    /// Adds the send-side counts (sent, slip, send failures) of a recorder
    /// the pacer kept on its own.
    pub fn merge_sends(&mut self, other: &Recorder) {
        for (p, o) in self.phases.iter_mut().zip(&other.phases) {
            p.sent += o.sent;
            p.sent_measured += o.sent_measured;
            p.last_sent_ns = p.last_sent_ns.max(o.last_sent_ns);
            p.errors += o.errors;
            p.slip.merge(&o.slip);
        }
    }

    pub fn sent(&mut self, phase: u32, sent_ns: u64, slip_ns: u64, measured: bool) {
        let p = &mut self.phases[phase as usize];
        p.sent += 1;
        p.last_sent_ns = p.last_sent_ns.max(sent_ns);
        p.sent_measured += u64::from(measured);
        p.slip.record(slip_ns);
    }

    fn timeline(&mut self, done_ns: u64, corrected: u64) {
        self.roll_interval(done_ns);
        self.interval.record(corrected);
        let Some(index) = (done_ns >> BUCKET_SHIFT).checked_sub(self.bucket_origin) else {
            return;
        };
        let index = usize::try_from(index).unwrap_or(usize::MAX);
        if index >= self.buckets.len() {
            if index > 1 << 26 {
                return; // > 9 hours: a clock anomaly, not a run
            }
            self.buckets.resize(index + 1, LatencyBucket::default());
        }
        let b = &mut self.buckets[index];
        b.count += 1;
        b.max_ns = b.max_ns.max(corrected);
        b.sum_ns += corrected;
    }

    /// Keeps exact timestamps of requests above the running threshold:
    /// the larger of twice the running median and the running p90, but
    /// never above the median + 1 ms. The p90 bounds how many are kept; the
    /// ceiling keeps every request an analysis can call a spike (its
    /// default threshold is at least the median + 2 ms): with more than a
    /// tenth of the requests stalled, the p90 rose to 10.2 ms and a 10 ms
    /// lock stall's requests were counted in the buckets but left out of
    /// the requests, so an `--slo 8ms` analysis found no episode there.
    fn keep(&mut self, t: RequestTimes, corrected: u64) {
        self.since_threshold += 1;
        if self.since_threshold >= 4096 {
            self.since_threshold = 0;
            let d = &self.phases[t.phase as usize].corrected.histogram();
            let p50 = d.value_at_quantile(0.5);
            let ceiling = p50 + 1_000_000;
            self.keep_threshold_ns = (2 * p50).max(d.value_at_quantile(0.9).min(ceiling));
        }
        if corrected < self.keep_threshold_ns {
            return;
        }
        if self.kept.len() < MAX_KEPT_REQUESTS {
            self.kept.push(t);
        } else {
            self.kept_over_cap += 1;
        }
    }

    fn roll_interval(&mut self, now_ns: u64) {
        while now_ns >= self.interval_start + HLOG_INTERVAL_NS {
            self.close_interval(self.interval_start + HLOG_INTERVAL_NS);
        }
    }

    fn close_interval(&mut self, end_ns: u64) {
        if self.interval.count() > 0 {
            let mut encoded = Vec::new();
            if self
                .serializer
                .serialize(self.interval.histogram(), &mut encoded)
                .is_ok()
            {
                self.intervals.push(Interval {
                    start_ns: self.interval_start,
                    duration_ns: end_ns - self.interval_start,
                    max_ns: self.interval.max().unwrap_or(0),
                    encoded,
                });
            }
        }
        self.interval = Distribution::new();
        self.interval_start = end_ns;
    }

    /// Closes the last interval and hands over the .hlog intervals.
    pub fn take_intervals(&mut self, end_ns: u64) -> Vec<Interval> {
        if end_ns > self.interval_start {
            self.close_interval(end_ns);
        }
        std::mem::take(&mut self.intervals)
    }
}
