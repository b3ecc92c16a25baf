//! `correlator_request_latency_seconds`: watch's latency histogram, whose
//! buckets carry OpenMetrics exemplars pointing at the report that
//! explains a spike in them (`report="<directory name>"`).
//!
//! Written by hand, beside the `prometheus-client` registry that encodes
//! every other metric, because the crate can only attach an exemplar *at
//! the observation* (`HistogramWithExemplars::observe`; its `Exemplar`
//! cannot be built outside the crate), and the report that explains a
//! request is written seconds after the request was counted (`--after`,
//! then the analysis). Delaying the counts until then would delay every
//! alert on the histogram; so the counts are taken at once (one atomic add
//! per request, as before) and the exemplars are set when the report is.

use std::{
    fmt::Write as _,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
};

/// Lowest bucket bound (10 µs), the bounds per doubling and the number of
/// finite bounds (up to ~21 s). Four per doubling (×1.19 each) keep a
/// quantile interpolated inside a bucket (`histogram_quantile`) within a
/// few percent of the requests' own: with one per doubling, a p99 of 66 ms
/// read as anything between 41 and 82 ms.
const FIRST_BOUND_NS: u64 = 10_000;
const PER_DOUBLING: usize = 4;
const BOUNDS: usize = 22 * PER_DOUBLING;

/// The finite bounds in ns, rounded to whole ns (every fourth one exact:
/// 10 µs × 2^k).
static BOUNDS_NS: std::sync::LazyLock<Vec<u64>> = std::sync::LazyLock::new(|| {
    (0..BOUNDS)
        .map(|i| (FIRST_BOUND_NS as f64 * 2f64.powf(i as f64 / PER_DOUBLING as f64)).round() as u64)
        .collect()
});

/// One exemplar: the slowest spike of a report in a bucket.
#[derive(Clone, Debug, PartialEq)]
pub struct Exemplar {
    /// The report's directory name (under `--out`).
    pub report: String,
    pub latency_ns: u64,
    /// Unix time of the spike, seconds.
    pub unix_s: f64,
}

#[derive(Debug)]
struct Inner {
    /// Per bucket (finite bounds, then +Inf): requests in it (not
    /// cumulative; summed when encoded).
    counts: Vec<AtomicU64>,
    sum_ns: AtomicU64,
    exemplars: Mutex<Vec<Option<Exemplar>>>,
}

/// Cheap to clone (shared counts).
#[derive(Clone, Debug)]
pub struct LatencyHistogram(Arc<Inner>);

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self(Arc::new(Inner {
            counts: (0..=BOUNDS).map(|_| AtomicU64::new(0)).collect(),
            sum_ns: AtomicU64::new(0),
            exemplars: Mutex::new(vec![None; BOUNDS + 1]),
        }))
    }
}

/// The upper bound of bucket `i` in ns (`None`: +Inf).
fn bound_ns(i: usize) -> Option<u64> {
    BOUNDS_NS.get(i).copied()
}

/// The bucket a latency falls in (`le` is inclusive).
fn bucket_of(ns: u64) -> usize {
    BOUNDS_NS.partition_point(|&b| b < ns)
}

impl LatencyHistogram {
    /// Counts one request.
    pub fn observe(&self, ns: u64) {
        self.0.counts[bucket_of(ns)].fetch_add(1, Ordering::Relaxed);
        self.0.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// Points the buckets of `spikes` (latency ns, Unix time s) at
    /// `report`: each bucket gets its slowest spike, replacing the
    /// exemplar of an older report there.
    pub fn mark(&self, report: &str, spikes: impl IntoIterator<Item = (u64, f64)>) {
        let mut best: Vec<Option<(u64, f64)>> = vec![None; BOUNDS + 1];
        for (ns, unix_s) in spikes {
            let b = &mut best[bucket_of(ns)];
            if b.is_none_or(|(worst, _)| ns > worst) {
                *b = Some((ns, unix_s));
            }
        }
        let mut exemplars = self
            .0
            .exemplars
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for (slot, spike) in exemplars.iter_mut().zip(best) {
            if let Some((latency_ns, unix_s)) = spike {
                *slot = Some(Exemplar {
                    report: report.to_string(),
                    latency_ns,
                    unix_s,
                });
            }
        }
    }

    pub fn count(&self) -> u64 {
        self.0
            .counts
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }

    /// The family in the OpenMetrics text format, named `name`.
    pub fn encode(&self, out: &mut String, name: &str, help: &str) -> std::fmt::Result {
        writeln!(out, "# HELP {name} {help}")?;
        writeln!(out, "# TYPE {name} histogram")?;
        let counts: Vec<u64> = self
            .0
            .counts
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect();
        let sum_s = self.0.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
        writeln!(out, "{name}_sum {sum_s}")?;
        writeln!(out, "{name}_count {}", counts.iter().sum::<u64>())?;
        let exemplars = self
            .0
            .exemplars
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let mut cumulative = 0;
        for (i, (n, exemplar)) in counts.iter().zip(&exemplars).enumerate() {
            cumulative += n;
            let le = bound_ns(i).map_or("+Inf".to_string(), |b| (b as f64 / 1e9).to_string());
            write!(out, "{name}_bucket{{le=\"{le}\"}} {cumulative}")?;
            if let Some(e) = exemplar {
                write!(
                    out,
                    " # {{report=\"{}\"}} {} {:.3}",
                    escape(&e.report),
                    e.latency_ns as f64 / 1e9,
                    e.unix_s
                )?;
            }
            out.push('\n');
        }
        Ok(())
    }
}

/// A label value as OpenMetrics quotes it.
fn escape(v: &str) -> String {
    v.replace('\\', r"\\")
        .replace('"', "\\\"")
        .replace('\n', r"\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_inclusive_and_cumulative() {
        let h = LatencyHistogram::default();
        for ns in [5_000, 10_000, 10_001, 20_000, 100_000_000_000] {
            h.observe(ns);
        }
        let mut text = String::new();
        h.encode(&mut text, "lat", "help").expect("encode");
        assert!(text.contains("lat_bucket{le=\"0.00001\"} 2\n"), "{text}");
        assert!(text.contains("lat_bucket{le=\"0.00002\"} 4\n"), "{text}");
        assert!(text.contains("lat_bucket{le=\"+Inf\"} 5\n"), "{text}");
        assert!(text.contains("lat_count 5\n"), "{text}");
        assert!(text.contains("lat_sum 100.000045001\n"), "{text}");
        assert_eq!(h.count(), 5);
    }

    #[test]
    fn each_bucket_points_at_its_slowest_spike_of_the_latest_report() {
        let h = LatencyHistogram::default();
        h.observe(3_000_000);
        h.mark("2026-12-05T09-00-00Z", [(3_000_000, 100.0)]);
        // A later report with two spikes in the same bucket (2.56-3.04 ms)
        // and one in another.
        h.mark(
            "2026-12-05T09-01-00Z",
            [(2_900_000, 160.0), (3_040_000, 161.5), (15_000_000, 162.0)],
        );
        let mut text = String::new();
        h.encode(&mut text, "lat", "help").expect("encode");
        let line = |ns: u64| {
            let le = (bound_ns(bucket_of(ns)).expect("finite") as f64 / 1e9).to_string();
            text.lines()
                .find(|l| l.starts_with(&format!("lat_bucket{{le=\"{le}\"}}")))
                .expect("bucket line")
                .to_string()
        };
        assert_eq!(
            line(3_000_000),
            "lat_bucket{le=\"0.00304437\"} 1 # {report=\"2026-12-05T09-01-00Z\"} 0.00304 161.500"
        );
        assert!(line(15_000_000).ends_with("# {report=\"2026-12-05T09-01-00Z\"} 0.015 162.000"));
        assert!(!line(2_000_000).contains('#'));
    }

    #[test]
    fn four_bounds_per_doubling_and_exact_powers_of_two() {
        assert_eq!(bound_ns(0), Some(10_000));
        assert_eq!(bound_ns(4), Some(20_000));
        assert_eq!(bound_ns(36), Some(5_120_000));
        assert_eq!(bound_ns(BOUNDS), None);
        for i in 1..BOUNDS {
            let (a, b) = (bound_ns(i - 1).expect("a"), bound_ns(i).expect("b"));
            let ratio = b as f64 / a as f64;
            assert!((ratio - 2f64.powf(0.25)).abs() < 1e-3, "{a} -> {b}");
            assert_eq!(bucket_of(b), i);
            assert_eq!(bucket_of(b + 1), i + 1);
        }
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
