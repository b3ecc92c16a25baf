//! The spike signature, first step of the decision flow: periodic (regular
//! period and size: timer-driven work), load-correlated (grows with load:
//! queueing, contention), or sporadic (neither: faults, interrupts,
//! preemption).

use serde::{Deserialize, Serialize};

use super::{Episode, LatencyReport, MIN_EPISODES};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Signature {
    Periodic,
    LoadCorrelated,
    Sporadic,
    None,
}

pub struct SignatureResult {
    pub signature: Signature,
    pub period_ms: Option<f64>,
    pub jitter_ms: Option<f64>,
    pub evidence: String,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Fewest spike requests worth classifying (the percentile rules' 10).
const MIN_SPIKES: u64 = 10;

/// The smallest spike fraction that can move the chosen percentile: half
/// the share of requests above it (p99: 0.5%, p99.9: 0.05%). Rarer spikes
/// are not the tail the user asked about; a higher `--percentile` looks at
/// them.
fn min_spike_fraction(percentile: f64) -> f64 {
    (100.0 - percentile).max(0.0) / 100.0 / 2.0
}

fn none(evidence: String) -> SignatureResult {
    SignatureResult {
        signature: Signature::None,
        period_ms: None,
        jitter_ms: None,
        evidence,
    }
}

/// `Some(none)` when the run has too few spike requests to classify at
/// all: none, fewer than ten, or too small a share to move the chosen
/// percentile (unless the user set the SLO).
pub fn too_few_spikes(
    episodes: &[Episode],
    latency: &LatencyReport,
    explicit_slo: bool,
    percentile: f64,
) -> Option<SignatureResult> {
    let min_fraction = min_spike_fraction(percentile);
    if latency.spikes == 0 {
        return Some(none("no request exceeded the spike threshold".into()));
    }
    let fraction = latency.spikes as f64 / latency.summary.count.max(1) as f64;
    if latency.spikes < MIN_SPIKES || (!explicit_slo && fraction < min_fraction) {
        return Some(none(format!(
            "{} spike requests in {} episode(s) ({:.3}% of requests): too few to classify \
             (needs ≥ {MIN_SPIKES}{}); run longer, look further into the tail \
             (--percentile 99.9), or set --slo to analyse them",
            latency.spikes,
            episodes.len(),
            fraction * 100.0,
            if explicit_slo {
                String::new()
            } else {
                format!(
                    " and ≥ {}% of requests to move p{percentile}",
                    min_fraction * 100.0
                )
            }
        )));
    }
    None
}

/// The whole-run signature of a run with enough spike requests (see
/// `too_few_spikes`, checked first).
pub fn signature(episodes: &[Episode], latency: &LatencyReport) -> SignatureResult {
    if let Some(load) = load_correlated(latency) {
        // Checked before "too few episodes": a sweep can show growth even
        // when the highest phase is one long episode.
        if episodes.len() < MIN_EPISODES || periodic(episodes).is_none() {
            return load;
        }
    }
    if episodes.len() < MIN_EPISODES {
        return none(format!(
            "only {} episode(s) ({} spike requests): not enough episodes to tell",
            episodes.len(),
            latency.spikes
        ));
    }
    if let Some(p) = periodic(episodes) {
        return p;
    }
    if let Some(load) = load_correlated(latency) {
        return load;
    }
    SignatureResult {
        signature: Signature::Sporadic,
        period_ms: None,
        jitter_ms: None,
        evidence: format!(
            "{} episodes at irregular intervals, not growing with load",
            episodes.len()
        ),
    }
}

/// Similar sizes (peak latency within a factor of 3 of the median peak
/// of the spike requests, for episodes holding ≥ 80% of the spike
/// requests) and, among those similar episodes, regular starts (≥ 80% of
/// their intervals within ±20% of the median, together covering ≥ 80% of
/// the time from the first to the last). Sizes and shares are weighed by
/// spike requests, not by episode count, and intervals are taken over the
/// similar episodes only: a periodic job plus unrelated small stalls (VM
/// hiccups, each a few requests) is still a periodic job, however many
/// hiccups there are. (Seen live: 24 sweeps of 23 ms every 300 ms and 7
/// stalls of 2-7 ms; by count the sweeps were 77% of the episodes.)
fn periodic(episodes: &[Episode]) -> Option<SignatureResult> {
    if episodes.len() < 4 {
        return None;
    }
    let peak = request_weighted_median_peak(episodes);
    let similar: Vec<&Episode> = episodes
        .iter()
        .filter(|e| {
            let p = e.window.peak_ns as f64;
            p <= 3.0 * peak && p >= peak / 3.0
        })
        .collect();
    let similar_requests: u64 = similar.iter().map(|e| e.window.requests).sum();
    let all_requests: u64 = episodes.iter().map(|e| e.window.requests).sum();
    if (similar_requests as f64) < 0.8 * all_requests as f64 || similar.len() < 4 {
        return None;
    }
    let starts: Vec<f64> = similar.iter().map(|e| e.window.start_ns as f64).collect();
    let mut gaps: Vec<f64> = starts.windows(2).map(|w| w[1] - w[0]).collect();
    let period = median(&mut gaps.clone());
    if period <= 0.0 {
        return None;
    }
    let regular: Vec<f64> = gaps
        .iter()
        .copied()
        .filter(|g| (g - period).abs() <= 0.2 * period)
        .collect();
    if (regular.len() as f64) < 0.8 * gaps.len() as f64 {
        return None;
    }
    // The rhythm must last through the run, not only inside clusters: a
    // CPU hog's 20-60 ms bursts preempt the server at every 4 ms scheduler
    // tick, so the episodes inside each burst are 4 ms apart, yet the
    // bursts come at random. Regular gaps of a periodic job cover (nearly)
    // the whole span from its first episode to its last; a burst's cover a
    // few percent of it.
    let span = starts[starts.len() - 1] - starts[0];
    let covered: f64 = regular.iter().sum();
    if covered < 0.8 * span {
        return None;
    }
    let mean = regular.iter().sum::<f64>() / regular.len() as f64;
    let jitter =
        (regular.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / regular.len() as f64).sqrt();
    gaps.clear();
    Some(SignatureResult {
        signature: Signature::Periodic,
        period_ms: Some(period / 1e6),
        jitter_ms: Some(jitter / 1e6),
        evidence: format!(
            "{} of {} episodes every {:.1} ms (jitter {:.2} ms; {} of {} intervals within ±20%), peaks of similar size (median {:.2} ms)",
            similar.len(),
            episodes.len(),
            period / 1e6,
            jitter / 1e6,
            regular.len(),
            starts.len() - 1,
            peak / 1e6
        ),
    })
}

/// The peak latency of the episode holding the median spike request:
/// what a typical slow request saw.
fn request_weighted_median_peak(episodes: &[Episode]) -> f64 {
    let mut by_peak: Vec<(u64, u64)> = episodes
        .iter()
        .map(|e| (e.window.peak_ns, e.window.requests.max(1)))
        .collect();
    by_peak.sort_unstable();
    let half = by_peak.iter().map(|(_, n)| n).sum::<u64>().div_ceil(2);
    let mut seen = 0;
    for (peak, n) in &by_peak {
        seen += n;
        if seen >= half {
            return *peak as f64;
        }
    }
    0.0
}

/// Spike fraction that grows with the offered rate across a sweep:
/// non-decreasing phase to phase (10% tolerance) and the highest phase at
/// least 3× the lowest (and ≥ 0.5% of its requests).
fn load_correlated(latency: &LatencyReport) -> Option<SignatureResult> {
    let phases: Vec<(f64, f64)> = latency
        .phases
        .iter()
        .filter_map(|p| Some((p.rate?, p.spike_fraction)))
        .collect();
    if phases.len() < 2 || phases.windows(2).any(|w| w[1].0 <= w[0].0) {
        return None;
    }
    let (first, last) = (phases[0].1, phases[phases.len() - 1].1);
    let growing = phases.windows(2).all(|w| w[1].1 >= w[0].1 * 0.9);
    if !(growing && last >= 3.0 * first && last >= 0.005) {
        return None;
    }
    let steps: Vec<String> = phases
        .iter()
        .map(|(r, f)| format!("{:.2}% at {r:.0}/s", f * 100.0))
        .collect();
    Some(SignatureResult {
        signature: Signature::LoadCorrelated,
        period_ms: None,
        jitter_ms: None,
        evidence: format!(
            "spike fraction grows with offered load: {}",
            steps.join(", ")
        ),
    })
}
