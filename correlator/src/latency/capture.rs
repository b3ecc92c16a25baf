//! Latency as stored with a run (the `latency` section of a run file) and
//! handed to the analysis: per-phase distributions, the requests that may
//! belong to a spike with exact timestamps, and per-bucket summaries.
//! Built from a load run or from an imported log.

use serde::{Deserialize, Serialize};

use super::Distribution;
use super::recorder::{BUCKET_SHIFT, LatencyBucket, Recorder, RequestTimes};

/// A distribution as (value, count) pairs of its non-empty HdrHistogram
/// buckets: mergeable and exact to the histogram's resolution, and plain JSON.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredDistribution(pub Vec<(u64, u64)>);

impl From<&Distribution> for StoredDistribution {
    fn from(d: &Distribution) -> Self {
        Self(
            d.histogram()
                .iter_recorded()
                .map(|v| (v.value_iterated_to(), v.count_at_value()))
                .collect(),
        )
    }
}

impl StoredDistribution {
    pub fn to_distribution(&self) -> Distribution {
        let mut d = Distribution::new();
        for &(value, count) in &self.0 {
            d.record_n(value, count);
        }
        d
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LatencyPhase {
    /// Offered rate (None for imported logs).
    pub rate: Option<f64>,
    /// Measured window (after warm-up), CLOCK_MONOTONIC ns.
    pub start_ns: u64,
    pub end_ns: u64,
    pub sent: u64,
    pub completed: u64,
    pub timeouts: u64,
    pub errors: u64,
    /// From the intended send time.
    pub corrected: StoredDistribution,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LatencyCapture {
    /// Where the latency came from, e.g. "open-loop load tcp://127.0.0.1:7000".
    pub source: String,
    pub phases: Vec<LatencyPhase>,
    /// Requests above the recorder's running threshold, exact timestamps.
    #[serde(with = "super::columns::requests")]
    pub requests: Vec<RequestTimes>,
    /// Requests above that threshold not kept (memory cap).
    pub requests_over_cap: u64,
    /// Per-bucket summaries: bucket `bucket_origin + i`, width 2^bucket_shift ns.
    pub bucket_shift: u32,
    pub bucket_origin: u64,
    #[serde(with = "super::columns::latency_buckets")]
    pub buckets: Vec<LatencyBucket>,
}

impl LatencyCapture {
    pub fn from_recorder(
        source: String,
        rec: &Recorder,
        windows: &[(u64, u64, Option<f64>)],
    ) -> Self {
        let phases = rec
            .phases
            .iter()
            .zip(windows)
            .map(|(p, &(start_ns, end_ns, rate))| LatencyPhase {
                rate,
                start_ns,
                end_ns,
                sent: p.sent,
                completed: p.completed,
                timeouts: p.timeouts,
                errors: p.errors,
                corrected: StoredDistribution::from(&p.corrected),
            })
            .collect();
        Self {
            source,
            phases,
            requests: rec.kept.clone(),
            requests_over_cap: rec.kept_over_cap,
            bucket_shift: BUCKET_SHIFT,
            bucket_origin: rec.bucket_origin,
            buckets: rec.buckets.clone(),
        }
    }

    /// All phases merged (histograms are merged, never averaged).
    pub fn merged(&self) -> Distribution {
        let mut d = Distribution::new();
        for p in &self.phases {
            d.merge(&p.corrected.to_distribution());
        }
        d
    }

    pub fn start_ns(&self) -> u64 {
        self.phases.iter().map(|p| p.start_ns).min().unwrap_or(0)
    }

    pub fn end_ns(&self) -> u64 {
        self.phases.iter().map(|p| p.end_ns).max().unwrap_or(0)
    }
}
