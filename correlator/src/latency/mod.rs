//! Latency distributions under the percentile rules every output follows
//! (see ../shared/notes/measurement-rules.md):
//! - p50, p90, p99, p99.9, p99.99 and max, never mean ± stddev;
//! - every percentile comes with the sample count and the number of samples
//!   above it, and one with fewer than [`MIN_SAMPLES_ABOVE`] above it is
//!   "not enough samples", never a number;
//! - distributions are HdrHistograms (3 significant digits, 1 ns .. 1 h),
//!   merged, never averaged.

pub mod capture;
pub mod columns;
pub mod import;
pub mod passive;
pub mod recorder;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// The percentiles reported everywhere.
pub const PERCENTILES: [f64; 5] = [50.0, 90.0, 99.0, 99.9, 99.99];

/// A percentile with fewer samples above it is not quoted.
pub const MIN_SAMPLES_ABOVE: u64 = 10;

/// Highest trackable value: one hour in ns (timeouts are recorded, so the
/// range must cover them).
pub const MAX_TRACKABLE_NS: u64 = 3_600_000_000_000;

/// One quoted percentile.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Percentile {
    /// e.g. 99.9
    pub p: f64,
    /// None = not enough samples above it to quote a value.
    pub value_ns: Option<u64>,
    /// Samples strictly above `value_ns` (or that would be above it).
    pub samples_above: u64,
}

/// The shape every distribution takes in JSON outputs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub count: u64,
    pub percentiles: Vec<Percentile>,
    pub max_ns: Option<u64>,
}

impl Summary {
    /// The quoted value at percentile `p`: None when `p` is not among the
    /// summary's percentiles or too few samples lie above it.
    pub fn value_at(&self, p: f64) -> Option<u64> {
        self.percentiles
            .iter()
            .find(|x| x.p == p)
            .and_then(|x| x.value_ns)
    }
}

/// A latency distribution in ns.
#[derive(Clone, Debug)]
pub struct Distribution {
    hist: Histogram<u64>,
}

impl Default for Distribution {
    fn default() -> Self {
        Self::new()
    }
}

impl Distribution {
    pub fn new() -> Self {
        let hist = Histogram::new_with_bounds(1, MAX_TRACKABLE_NS, 3)
            .expect("constant bounds and precision are valid for HdrHistogram");
        Self { hist }
    }

    /// Records one value; values beyond the range are clamped to it.
    pub fn record(&mut self, ns: u64) {
        self.hist.saturating_record(ns.max(1));
    }

    /// HdrHistogram's corrected recording: also records the samples a
    /// closed-loop client would have sent every `expected_interval_ns`
    /// while this one waited. A model, not observations.
    pub fn record_corrected(&mut self, ns: u64, expected_interval_ns: u64) {
        let ns = ns.clamp(1, MAX_TRACKABLE_NS);
        if self.hist.record_correct(ns, expected_interval_ns).is_err() {
            self.record(ns);
        }
    }

    /// Records `count` samples of one value.
    pub fn record_n(&mut self, ns: u64, count: u64) {
        self.hist.saturating_record_n(ns.max(1), count);
    }

    /// Removes `other`'s samples (each must have been recorded here): for
    /// counterfactuals ("without these requests"). Values not present are
    /// left alone.
    pub fn subtract(&mut self, other: &Distribution) {
        if self.hist.subtract(&other.hist).is_err() {
            // Fall back value by value, never below zero.
            for v in other.hist.iter_recorded() {
                let here = self.hist.count_at(v.value_iterated_to());
                let take = v.count_at_value().min(here);
                let _ = self.hist.record_n(v.value_iterated_to(), 0);
                if take > 0 {
                    let mut one = Histogram::<u64>::new_from(&self.hist);
                    one.saturating_record_n(v.value_iterated_to(), take);
                    let _ = self.hist.subtract(&one);
                }
            }
        }
    }

    /// Merges another distribution (percentiles are never averaged).
    pub fn merge(&mut self, other: &Distribution) {
        // Same bounds by construction, so addition cannot fail.
        let _ = self.hist.add(&other.hist);
    }

    pub fn histogram(&self) -> &Histogram<u64> {
        &self.hist
    }

    pub fn from_histogram(hist: Histogram<u64>) -> Self {
        let mut d = Self::new();
        let _ = d.hist.add(&hist);
        d
    }

    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    pub fn max(&self) -> Option<u64> {
        (self.count() > 0).then(|| self.hist.max())
    }

    /// Samples strictly above `value` (HdrHistogram resolution).
    pub fn count_above(&self, value: u64) -> u64 {
        self.count()
            .saturating_sub(self.hist.count_between(0, value))
    }

    /// The value at percentile `p` (0..100) and the samples above it.
    pub fn percentile(&self, p: f64) -> Percentile {
        let n = self.count();
        if n == 0 {
            return Percentile {
                p,
                value_ns: None,
                samples_above: 0,
            };
        }
        let value = self.hist.value_at_quantile(p / 100.0);
        let above = self.count_above(value);
        Percentile {
            p,
            value_ns: (above >= MIN_SAMPLES_ABOVE).then_some(value),
            samples_above: above,
        }
    }

    pub fn summary(&self) -> Summary {
        Summary {
            count: self.count(),
            percentiles: PERCENTILES.iter().map(|&p| self.percentile(p)).collect(),
            max_ns: self.max(),
        }
    }
}

/// Human formatting of a duration in ns: 812ns, 15.2µs, 3.41ms, 1.20s.
pub fn fmt_ns(ns: u64) -> String {
    let v = ns as f64;
    if ns < 1_000 {
        format!("{ns}ns")
    } else if ns < 1_000_000 {
        format!("{:.1}µs", v / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.2}ms", v / 1e6)
    } else {
        format!("{:.2}s", v / 1e9)
    }
}

/// A percentile table, one line per percentile, plus max.
pub fn table(title: &str, s: &Summary) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "  {title} ({} samples)", s.count);
    for p in &s.percentiles {
        let value = p
            .value_ns
            .map_or_else(|| "not enough samples".to_string(), fmt_ns);
        let _ = writeln!(
            out,
            "    p{:<6} {:>20}   ({} above)",
            p.p, value, p.samples_above
        );
    }
    let max = s.max_ns.map_or_else(|| "-".to_string(), fmt_ns);
    let _ = writeln!(out, "    max     {max:>20}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_need_ten_samples_above() {
        let mut d = Distribution::new();
        for v in 1..=1000u64 {
            d.record(v * 1000);
        }
        let s = d.summary();
        assert_eq!(s.count, 1000);
        // p50: ~500 above; p99: 10 above; p99.9: 1 above -> not quoted.
        let p50 = &s.percentiles[0];
        assert!(
            p50.value_ns
                .is_some_and(|v| (499_000..=501_000).contains(&v))
        );
        let p99 = &s.percentiles[2];
        assert_eq!(p99.samples_above, 10);
        assert!(p99.value_ns.is_some());
        let p999 = &s.percentiles[3];
        assert!(p999.samples_above < 10);
        assert_eq!(p999.value_ns, None);
        assert!(s.max_ns.is_some_and(|m| (999_000..=1_001_000).contains(&m)));
    }

    #[test]
    fn empty_distribution_quotes_nothing() {
        let s = Distribution::new().summary();
        assert_eq!(s.count, 0);
        assert!(s.percentiles.iter().all(|p| p.value_ns.is_none()));
        assert_eq!(s.max_ns, None);
    }

    #[test]
    fn merging_is_not_averaging() {
        let mut a = Distribution::new();
        let mut b = Distribution::new();
        for _ in 0..990 {
            a.record(1_000);
        }
        for _ in 0..10 {
            b.record(1_000_000);
        }
        a.merge(&b);
        assert_eq!(a.count(), 1000);
        assert!(a.max().is_some_and(|m| m >= 999_000));
    }

    #[test]
    fn formats_durations() {
        assert_eq!(fmt_ns(812), "812ns");
        assert_eq!(fmt_ns(15_200), "15.2µs");
        assert_eq!(fmt_ns(3_410_000), "3.41ms");
    }
}
