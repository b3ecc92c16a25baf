//! Episode families: episodes whose measured account looks alike (the same
//! dominant category, and for blocking, syscalls and preemption the same
//! wait site, syscall or neighbour), each classified on its own and ranked
//! by what it does to the tail.
//!
//! One verdict for a whole run fails as soon as two things happen in it: a
//! periodic job's few big episodes among dozens of small VM stalls, or a
//! periodic job beside a sporadic neighbour. Families keep them apart.
//!
//! - **Periodicity**: the Rayleigh test of the family's episode times,
//!   maximised over candidate periods with the search accounted for
//!   (`stats::periodicity`). Episodes closer together than half the
//!   shortest candidate period count as one event (a burst of episodes is
//!   one occurrence). Periods from 20 ms to a quarter of the family's
//!   span (four cycles at least) are searched. Beside it, with 5 to 60
//!   occurrences, the regularity of the intervals themselves against a
//!   renewal process (`stats::intervals`): six evenly spaced occurrences,
//!   which no search over periods can show, are periodic to it. Periodic
//!   when the smaller p of the two, doubled, is < 0.001 / families.
//! - **Load correlation**: with a rate sweep, the Cochran-Armitage trend
//!   test of the family's spike requests over the phases' requests, scored
//!   by offered rate; in any other run (passive, imported, one rate),
//!   Spearman's rank correlation of requests per second against the
//!   family's spike requests per second. Load-correlated when one-sided p < 0.001 /
//!   families (0.001 as for periodicity). When both tests pass, the
//!   smaller p-value wins.
//! - **Impact** on the chosen percentile: the percentile of all requests
//!   with the family's spike requests counted at the run's median latency
//!   instead (as if they had not been delayed), against the percentile as
//!   measured; `share_of_excess` is the drop over the percentile's excess
//!   above the median. Families are ranked by `share_above`, their share
//!   of the requests at or above the percentile's value (which adds up
//!   over families; the counterfactuals do not when two families share
//!   the tail), as a count they surely hold (its lower confidence bound:
//!   see `surely_held`), then by their spike requests.
//!
//! Episodes whose time went mostly to the environment (idle, waiting for
//! requests that came late; hypervisor steal; or not measured) form the
//! environment family, never a server cause.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{
    Episode, LatencyReport,
    account::TimeAccount,
    cause_kind::{CauseKind, ENVIRONMENT_CAUSES, SERVER_CAUSES},
    episodes,
    signature::Signature,
};
use crate::{
    latency::{Distribution, capture::LatencyCapture},
    stats,
};

/// Significance level of a family's signature test, before correction
/// over the families tested. Strict on purpose: a report's headline should
/// call a sporadic problem periodic about once in a thousand runs, not once
/// in a hundred (at 0.01, a seven-scenario demo suite saw one in about
/// thirty suites).
const ALPHA: f64 = 0.001;

/// Shortest period tested (ns): shorter rhythms are the scheduler's tick
/// inside one burst, not a job.
const MIN_PERIOD_NS: f64 = 20e6;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PeriodicityTest {
    /// The period of the test with the smaller p-value.
    pub period_ms: f64,
    pub jitter_ms: f64,
    /// Rayleigh statistic Z = n·R² at the best period, and R.
    pub z: f64,
    pub r: f64,
    /// The smaller of the two tests' p-values, doubled (Bonferroni over
    /// the Rayleigh scan and the intervals' regularity).
    pub p_value: f64,
    /// The Rayleigh scan's, with the search over periods accounted for.
    #[serde(default)]
    pub rayleigh_p_value: f64,
    /// The regularity of the intervals themselves (5 to 60 occurrences).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intervals: Option<IntervalTest>,
    /// Occurrences tested (bursts of episodes count once) and independent
    /// periods searched.
    pub events: usize,
    pub periods_searched: f64,
}

/// The intervals between occurrences against a renewal process's
/// (`stats::intervals`): few occurrences at a steady rhythm, which the
/// Rayleigh scan's search over periods cannot show.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IntervalTest {
    pub period_ms: f64,
    /// Mean |gap − k·period| / period.
    pub deviation: f64,
    pub p_value: f64,
    /// Gaps read as two or three periods (missed cycles).
    pub missed: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrendTest {
    /// `cochran-armitage` (over a rate sweep's phases) or `spearman`
    /// (request rate against spike rate, second by second: any run).
    pub method: String,
    /// The test's standard-normal statistic.
    pub z: f64,
    /// One-sided: spikes grow with the request rate.
    pub p_value: f64,
    /// Spearman's ρ (rank correlation), for `spearman`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rho: Option<f64>,
    /// Seconds with requests that were ranked, for `spearman`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<usize>,
    /// Spike fraction per phase, with the phase's rate (`cochran-armitage`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub phases: Vec<(f64, f64)>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Impact {
    /// The percentile the report leads with (e.g. 99).
    pub percentile: f64,
    pub value_ns: u64,
    /// The same percentile with the family's spike requests counted at
    /// the median latency.
    pub without_ns: u64,
    /// (value − without) / (value − median).
    pub share_of_excess: f64,
    /// The family's share of the requests at or above the percentile's
    /// value (additive over families, unlike the counterfactual).
    pub share_above: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Family {
    /// The dominant measured category of its episodes.
    pub cause: CauseKind,
    /// Wait site, syscall or neighbour that sets it apart, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Idle, steal or unmeasured time: the run's environment, not the server.
    pub environment: bool,
    /// Indices into the report's `episodes`.
    pub episodes: Vec<usize>,
    pub spike_requests: u64,
    pub signature: Signature,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub periodicity: Option<PeriodicityTest>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trend: Option<TrendTest>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub impact: Option<Impact>,
    pub evidence: String,
    /// How many of the requests at or above the percentile it surely holds
    /// (see `surely_held`; 0 without a tail to hold). Ranks the families.
    #[serde(skip)]
    pub held: f64,
    /// When the environment's family leads: whether this family surely
    /// holds most of the requests at or above the percentile the run would
    /// have *without* the environment's family (its noise can set the
    /// percentile just above a real stall that is the next thing in the
    /// tail).
    #[serde(skip)]
    pub leads_under_environment: bool,
    /// What `held` would be at the percentile of the run without the
    /// environment's family, when that family leads (else 0).
    #[serde(skip)]
    pub held_under_environment: f64,
}

/// The dominant category of one window (unmeasured time counts as
/// environment) and the detail that splits that category.
pub(super) fn dominant(a: &TimeAccount) -> (CauseKind, Option<String>) {
    // The server categories the causes are tested in, and the environment.
    let (cause, t) = SERVER_CAUSES
        .iter()
        .chain(&ENVIRONMENT_CAUSES)
        .map(|&c| (c, c.time(a)))
        .max_by_key(|&(c, t)| (t, std::cmp::Reverse(c)))
        .unwrap_or((CauseKind::Idle, 0));
    if a.unexplained_ns > t {
        return (CauseKind::Idle, None);
    }
    let detail = match cause {
        CauseKind::Blocking => a.wait_site.clone(),
        CauseKind::Syscall => a.top_syscall.clone(),
        CauseKind::Upstream => a.upstream.clone(),
        CauseKind::MemoryStall => a.memory_stall.map(|k| k.describe().to_string()),
        // The neighbour's name, not its pid: a pool of workers is one cause.
        CauseKind::Preemption => a
            .preempted_by
            .as_ref()
            .map(|w| w.split(" (pid").next().unwrap_or(w).to_string()),
        _ => None,
    };
    (cause, detail)
}

/// The family an episode joins: its dominant category, with the two kinds
/// of fault time one family. A mapped file read back after eviction
/// faults both ways in one stall: a major fault per readahead window,
/// blocked for its I/O, and minor faults on the pages readahead brought
/// in, handled on the CPU; which is larger varies from stall to stall (a
/// demo run's 15 such stalls split 1 on-CPU-first and 14 blocked-first,
/// and the lone one, the longest, led the tail as a `page_faults` family).
/// Which fault kind the family is, is decided over all its episodes
/// ([`fault_kind`]).
fn family_key(a: &TimeAccount) -> (CauseKind, Option<String>) {
    match dominant(a) {
        (CauseKind::MajorFaults, d) => (CauseKind::PageFaults, d),
        k => k,
    }
}

/// A fault family's kind: major faults when its episodes spent more time
/// in major faults (blocked for their pages, and on the CPU in windows
/// where the kernel counted mostly major faults: `fault_major_ns`) than in
/// minor ones. The demo's evicted file, in a CI run, took 22,503 major
/// faults and no minor one, 580 ms on the CPU against 524 ms blocked, and
/// was named `page_faults` while only blocked time counted as major
/// (without the on-CPU part, ablation of 2026-12-04: 4 more false claims
/// on the corpus's demo-major-faults cases, top cause still right).
fn fault_kind(members: &[&Episode]) -> CauseKind {
    let (major, minor) = members.iter().fold((0u64, 0u64), |(j, n), e| {
        (
            j + CauseKind::MajorFaults.time(&e.account),
            n + CauseKind::PageFaults.time(&e.account),
        )
    });
    if major > minor {
        CauseKind::MajorFaults
    } else {
        CauseKind::PageFaults
    }
}

/// Groups, classifies and ranks the families of `episodes`; with them,
/// each episode's requests at or above the percentile's value.
pub fn families(
    episodes: &[Episode],
    latency: &LatencyCapture,
    merged: &Distribution,
    report: &LatencyReport,
    percentile: f64,
) -> (Vec<Family>, Vec<u64>) {
    let mut groups: BTreeMap<(bool, CauseKind, Option<String>), Vec<usize>> = BTreeMap::new();
    for (i, e) in episodes.iter().enumerate() {
        let (cause, detail) = family_key(&e.account);
        let env = !cause.is_server();
        let k = if env {
            (true, CauseKind::Idle, None)
        } else {
            (false, cause, detail)
        };
        groups.entry(k).or_default().push(i);
    }
    let tested = groups.keys().filter(|k| !k.0).count().max(1);
    let alpha = ALPHA / tested as f64;
    let tail = Tail::new(episodes, latency, merged, report, percentile);
    let mut out: Vec<Family> = groups
        .into_iter()
        .map(|((environment, cause, detail), idx)| {
            let members: Vec<&Episode> = idx.iter().map(|&i| &episodes[i]).collect();
            let cause = if cause == CauseKind::PageFaults {
                fault_kind(&members)
            } else {
                cause
            };
            // IRQ families are named by the source with most of their time
            // (a softirq vector, an IPI kind), over all their episodes.
            let detail = match cause {
                CauseKind::Hardirq | CauseKind::Softirq => {
                    super::cause_kind::irq_source(members.iter().copied(), cause)
                        .map(|(name, _)| name.to_string())
                }
                _ => detail,
            };
            let spike_requests = members.iter().map(|e| e.window.requests).sum();
            let periodicity = periodicity(&members);
            let trend = trend(&members, report, latency);
            let periodic = periodicity.as_ref().is_some_and(|p| p.p_value < alpha);
            let growing = trend.as_ref().is_some_and(|t| t.p_value < alpha);
            // Both: the stronger evidence wins (a load sweep's changing rate
            // can look rhythmic; a periodic job's share can drift with load).
            let signature = match (&periodicity, &trend) {
                (Some(p), Some(t)) if periodic && growing => {
                    if p.p_value <= t.p_value {
                        Signature::Periodic
                    } else {
                        Signature::LoadCorrelated
                    }
                }
                _ if periodic => Signature::Periodic,
                _ if growing => Signature::LoadCorrelated,
                _ => Signature::Sporadic,
            };
            let impact = tail.as_ref().map(|t| t.impact(&idx, environment));
            // Named as the run's causes name it (queueing).
            let cause = cause.under(signature);
            let mut family = Family {
                cause,
                detail,
                environment,
                episodes: idx,
                spike_requests,
                signature,
                periodicity,
                trend,
                impact,
                evidence: String::new(),
                held: 0.0,
                leads_under_environment: false,
                held_under_environment: 0.0,
            };
            family.evidence = evidence(&family, alpha);
            family
        })
        .collect();
    let above = tail.as_ref().map_or(0, |t| t.above);
    for f in &mut out {
        f.held = surely_held(f.impact.as_ref().map_or(0.0, |i| i.share_above), above);
    }
    out.sort_by(|a, b| {
        b.held
            .total_cmp(&a.held)
            .then(b.spike_requests.cmp(&a.spike_requests))
    });
    let below_environment = out
        .first()
        .filter(|f| f.environment)
        .and_then(|f| f.impact.as_ref())
        .map(|i| i.without_ns);
    if let (Some(t), Some(value)) = (tail.as_ref(), below_environment) {
        // Requests at or above the percentile, whichever its value.
        let tail_size = (1.0 - t.percentile / 100.0) * t.merged.count() as f64;
        for f in out.iter_mut().filter(|f| !f.environment) {
            f.held_under_environment = surely_held(1.0, t.spikes_at_least(&f.episodes, value));
            let held = f.held_under_environment;
            f.leads_under_environment = held > 0.0 && held >= tail_size / 2.0;
        }
        // The environment leads; the server families follow in the order
        // of the tail it would leave (a stable sort: ties keep their
        // order): its stalls can set the percentile just above a real
        // stall, and a few requests of another host stall above that value
        // say less than hundreds of the real one's just below it.
        out.sort_by(|a, b| {
            b.environment.cmp(&a.environment).then(
                b.held_under_environment
                    .total_cmp(&a.held_under_environment),
            )
        });
    }
    let tail_requests = tail.map_or_else(|| vec![0; episodes.len()], |t| t.above_in);
    (out, tail_requests)
}

/// The environment's family holds the tail and no server family surely
/// holds any of it, nor of the tail the environment would leave (the
/// percentile without it): whatever the server's episodes show against
/// the baseline, they are not why the percentile is where it is.
///
/// A server family of fewer than `MIN_EPISODES` episodes surely holds
/// nothing here: its requests above the percentile are not independent
/// draws (one stall delays every request behind it), so one or two stalls
/// cannot be told from chance however many requests they held. In clean
/// demo baselines on this VM a single kworker preemption holding 6 of 350
/// requests above p99 kept two epoll_wait episodes claimed as a syscall
/// cause.
pub fn environment_holds_tail(families: &[Family]) -> Option<&Family> {
    let top = families.first().filter(|f| f.environment && f.held > 0.0)?;
    families
        .iter()
        .all(|f| {
            f.environment
                || f.episodes.len() < super::MIN_EPISODES
                || (f.held == 0.0 && !f.leads_under_environment)
        })
        .then_some(top)
}

/// How many of the `above` requests at or above the percentile a family
/// surely holds: 0 while its count cannot be told from none (all n of n
/// requests in one family rather than an empty one has probability 2^-n
/// under a fair split: below 5% from n = 5 on), else the one-sided 95%
/// lower bound of its count (Poisson, normal approximation). Families are
/// ranked by it, then by their spike requests: three requests above the
/// percentile are no evidence that a family matters more than one with
/// twice the spikes just below it (a noisy run once ranked host stalls in
/// recvfrom, 3 of 189 requests above p99.9, before an injected periodic
/// stall with 284 spike requests and none above).
fn surely_held(share: f64, above: u64) -> f64 {
    let n = (share * above as f64).round();
    if n < 5.0 {
        return 0.0;
    }
    (n - 1.645 * n.sqrt()).max(0.0)
}

impl Family {
    /// How a reader calls it: `environment`, or the cause with its detail
    /// (`blocking (futex)`).
    pub fn name(&self) -> String {
        match (&self.detail, self.environment) {
            (_, true) => "environment".to_string(),
            (Some(d), false) => format!("{} ({d})", self.cause),
            (None, false) => self.cause.to_string(),
        }
    }
}

/// Occurrence times of a family: episode starts, a burst of episodes
/// closer than half the shortest period counted once.
fn occurrences(members: &[&Episode]) -> Vec<f64> {
    let mut windows: Vec<(u64, u64)> = members
        .iter()
        .map(|e| (e.window.start_ns, e.window.end_ns))
        .collect();
    windows.sort_unstable();
    let mut out: Vec<f64> = Vec::new();
    // End of the occurrence being built: an episode that starts less than
    // half the shortest tested period after it belongs to it. Measured from
    // the end, not the start: a neighbour's 40 ms burst lets the server run
    // in slices and makes an episode every ~12 ms; counted as separate
    // events, such a cluster puts k events at one phase and inflates the
    // Rayleigh Z about k-fold (seen: a random hog "periodic", p = 2e-5).
    let mut end: Option<u64> = None;
    for (start, stop) in windows {
        if end.is_none_or(|e| start.saturating_sub(e) as f64 >= MIN_PERIOD_NS / 2.0) {
            out.push(start as f64);
        }
        end = Some(end.map_or(stop, |e| e.max(stop)));
    }
    out
}

fn periodicity(members: &[&Episode]) -> Option<PeriodicityTest> {
    let times = occurrences(members);
    let span = times.last()? - times.first()?;
    // At least four cycles of the longest period tested: over two or three
    // cycles, a rate that changes during the run (a load sweep) bunches
    // the phases as well as a rhythm does.
    let p = stats::periodicity::periodicity(&times, MIN_PERIOD_NS, span / 4.0)?;
    let intervals = stats::intervals::regularity(&times)
        .filter(|i| i.period_ns >= MIN_PERIOD_NS)
        .map(|i| IntervalTest {
            period_ms: i.period_ns / 1e6,
            deviation: i.deviation,
            p_value: i.p_value,
            missed: i.missed,
        });
    let by_intervals = intervals.as_ref().filter(|i| i.p_value < p.p_value);
    Some(PeriodicityTest {
        period_ms: by_intervals.map_or(p.period_ns / 1e6, |i| i.period_ms),
        jitter_ms: by_intervals.map_or(p.jitter_ns / 1e6, |i| i.deviation * i.period_ms),
        z: p.z,
        r: p.r,
        p_value: (2.0
            * intervals
                .as_ref()
                .map_or(p.p_value, |i| i.p_value.min(p.p_value)))
        .min(1.0),
        rayleigh_p_value: p.p_value,
        intervals,
        events: p.events,
        periods_searched: p.frequencies,
    })
}

/// Seconds per bin of the rank-correlation trend test.
const TREND_BIN_NS: u64 = 1_000_000_000;

/// Without a sweep (a passive recording, an imported log, one fixed rate):
/// requests arriving per second against the share of them that are the
/// family's spike requests, by Spearman's rank correlation over the
/// seconds that had requests. A fixed rate has nothing to correlate with
/// and gives a large p; a client that raises its rate in steps, or
/// production traffic that rises and falls, does.
///
/// The share, not the count: a stall at random times delays whatever
/// arrives during it, so its spike requests per second grow with the rate
/// although the stall does not (a sporadic lock holder would read as
/// load-correlated under rising traffic), and seconds without requests
/// (before a client starts) would tie at the bottom of both rankings and
/// add agreement that says nothing about load.
///
/// Requests and spike requests are binned by arrival, not completion or
/// episode start: an overload is one episode whose spike requests arrive
/// over the whole last step (binned at its start, a passive recording of a
/// 2,000 → 4,500 → 7,000 req/s client gave ρ = 0.35, p = 0.08). A stall holds back the
/// completions of the requests that arrive during it and releases them
/// together, so completions per second rise and fall with the stalls
/// themselves. Binned by completion, a fixed 5,000 req/s with softirq
/// bursts gave ρ = 0.95, p = 1.4e-4 ("load-correlated") in one demo run
/// of five. The latency timeline keeps per-bucket counts of completions,
/// and each slow request (the recorder's kept requests) with its arrival:
/// fast requests are counted where they completed, slow ones where they
/// arrived.
fn rank_trend(
    members: &[&Episode],
    latency: &LatencyCapture,
    threshold_ns: Option<u64>,
) -> Option<TrendTest> {
    let shift = latency.bucket_shift;
    let (start, end) = (latency.start_ns(), latency.end_ns());
    let bins = usize::try_from(end.saturating_sub(start) / TREND_BIN_NS).ok()?;
    if bins < 5 {
        return None;
    }
    let bin = |t: u64| {
        usize::try_from(t.checked_sub(start)? / TREND_BIN_NS)
            .ok()
            .filter(|&b| b < bins)
    };
    let mut requests = vec![0.0; bins];
    for (i, b) in latency.buckets.iter().enumerate() {
        let done = ((latency.bucket_origin + i as u64) << shift) + (1 << shift) / 2;
        if let Some(k) = bin(done) {
            requests[k] += f64::from(b.count);
        }
    }
    // Completions stand for arrivals except for the slow requests, which
    // the capture keeps one by one: each is moved from the second it
    // completed in to the second it arrived in. (Placing a bucket's
    // completions at their mean latency instead put a stall's
    // released backlog at the stall's middle: at a fixed 2,000 req/s the
    // seconds holding a stall gained 35 requests, the only variation of
    // the rate, and the spike share agreed with it, ρ = 0.88, p = 9.3e-5.)
    for r in &latency.requests {
        if let Some(d) = bin(r.done_ns) {
            requests[d] = (requests[d] - 1.0).max(0.0);
        }
        if let Some(a) = bin(r.intended_ns) {
            requests[a] += 1.0;
        }
    }
    let mut spikes = vec![0.0; bins];
    let mut windows: Vec<(u64, u64)> = members
        .iter()
        .map(|e| (e.window.start_ns, e.window.end_ns))
        .collect();
    windows.sort_unstable();
    match threshold_ns {
        // The family's spike requests (as `episodes` gathers them: spikes
        // sent inside one of its windows), at their intended send time.
        Some(threshold) if !latency.requests.is_empty() => {
            for r in latency
                .requests
                .iter()
                .filter(|r| super::episodes::is_spike(r, threshold))
            {
                let i = windows.partition_point(|w| w.0 <= r.intended_ns);
                let inside = i > 0 && r.intended_ns <= windows[i - 1].1;
                if let Some(k) = bin(r.intended_ns).filter(|_| inside) {
                    spikes[k] += 1.0;
                }
            }
        }
        _ => {
            for e in members {
                if let Some(k) = bin(e.window.start_ns) {
                    spikes[k] += e.window.requests as f64;
                }
            }
        }
    }
    log::debug!("trend bins: requests {requests:?} spikes {spikes:?}");
    let (rate, fraction): (Vec<f64>, Vec<f64>) = requests
        .iter()
        .zip(&spikes)
        .filter(|&(&n, _)| n > 0.0)
        .map(|(&n, &s)| (n, s / n))
        .unzip();
    // Rates closer than a Poisson count's standard deviation (√n) are one
    // rate: a fixed 2,000 req/s client's seconds hold 1,999, 2,000 and
    // 2,001 requests in a 3 s rhythm (its send schedule against the
    // second boundaries), which a 300 ms periodic job's spikes per second
    // share; ranked as rates, such rounding correlates with anything that
    // has the same rhythm. Equal rates tie, and a run at one rate has
    // nothing to correlate with (no test).
    let resolution = stats::median(&rate).sqrt().max(1.0);
    let rate: Vec<f64> = rate.iter().map(|r| (r / resolution).round()).collect();
    let bins = rate.len();
    let (rho, p_value) = stats::spearman(&rate, &fraction)?;
    Some(TrendTest {
        method: "spearman".into(),
        z: rho.atanh() * ((bins as f64 - 3.0) / 1.06).sqrt(),
        p_value,
        rho: Some(rho),
        seconds: Some(bins),
        phases: Vec::new(),
    })
}

fn trend(
    members: &[&Episode],
    report: &LatencyReport,
    latency: &LatencyCapture,
) -> Option<TrendTest> {
    let phases: Vec<(f64, u64)> = report
        .phases
        .iter()
        .filter_map(|p| Some((p.rate?, p.summary.count)))
        .collect();
    if phases.len() < 2 || phases.len() != report.phases.len() {
        return rank_trend(members, latency, report.threshold_ns);
    }
    let mut spikes = vec![0u64; phases.len()];
    for e in members {
        if let Some(s) = spikes.get_mut(e.window.phase as usize) {
            *s += e.window.requests;
        }
    }
    let totals: Vec<u64> = phases.iter().map(|p| p.1).collect();
    let scores: Vec<f64> = phases.iter().map(|p| p.0).collect();
    let (z, p_value) = stats::cochran_armitage(&spikes, &totals, &scores)?;
    Some(TrendTest {
        method: "cochran-armitage".into(),
        z,
        p_value,
        rho: None,
        seconds: None,
        phases: phases
            .iter()
            .zip(&spikes)
            .map(|(&(rate, n), &s)| (rate, s as f64 / n.max(1) as f64))
            .collect(),
    })
}

/// The chosen percentile of the run and, per episode, its spike requests'
/// latencies and how many reached the percentile: gathered in one pass over
/// the requests, then summed per family.
struct Tail<'a> {
    merged: &'a Distribution,
    percentile: f64,
    value_ns: u64,
    median_ns: u64,
    /// Requests at or above the percentile's value, in all.
    above: u64,
    /// Per episode: its spike requests' latencies, and how many of them are
    /// at or above the percentile's value.
    spikes: Vec<Vec<u64>>,
    above_in: Vec<u64>,
    /// Requests at or above the spike threshold that were not slow at the
    /// server (the load generator sent them late): the environment's, as
    /// its family's stalls are.
    late: Vec<u64>,
    late_above: u64,
}

impl<'a> Tail<'a> {
    fn new(
        episodes: &[Episode],
        latency: &LatencyCapture,
        merged: &'a Distribution,
        report: &LatencyReport,
        percentile: f64,
    ) -> Option<Self> {
        let threshold = report.threshold_ns?;
        let value_ns = merged.percentile(percentile).value_ns?;
        let median_ns = merged.percentile(50.0).value_ns?;
        let mut tail = Self {
            merged,
            percentile,
            value_ns,
            median_ns,
            above: 0,
            spikes: vec![Vec::new(); episodes.len()],
            above_in: vec![0; episodes.len()],
            late: Vec::new(),
            late_above: 0,
        };
        for r in &latency.requests {
            let ns = r.corrected();
            let above = ns >= value_ns;
            tail.above += u64::from(above);
            if ns >= threshold && !episodes::slow_at_server(r, threshold) {
                tail.late.push(ns);
                tail.late_above += u64::from(above);
            }
            if !episodes::is_spike(r, threshold) {
                continue;
            }
            // Episodes are in time order and do not overlap: the last one
            // starting at or before the request is the only candidate.
            let i = episodes.partition_point(|e| e.window.start_ns <= r.intended_ns);
            if let Some(i) = i.checked_sub(1)
                && r.intended_ns <= episodes[i].window.end_ns
            {
                tail.spikes[i].push(ns);
                tail.above_in[i] += u64::from(above);
            }
        }
        Some(tail)
    }

    /// Spike requests of episodes `idx` at or above `value_ns`.
    fn spikes_at_least(&self, idx: &[usize], value_ns: u64) -> u64 {
        idx.iter()
            .filter_map(|&i| self.spikes.get(i))
            .map(|s| s.iter().filter(|&&ns| ns >= value_ns).count() as u64)
            .sum()
    }

    /// The impact of the family made of episodes `idx`: its spike requests
    /// counted at the median instead, and its share of the requests at or
    /// above the percentile. The environment's family takes the late sends
    /// with it: without them, a generator's lateness would still set the
    /// percentile of the run "without the environment" (a p99.9 run with
    /// host stalls once left 3.27 ms there, above most of an injected 3 ms
    /// stall's requests, held by late sends no family owned).
    fn impact(&self, idx: &[usize], environment: bool) -> Impact {
        let mut removed = Distribution::new();
        let mut above_here = 0;
        for &i in idx {
            for &ns in &self.spikes[i] {
                removed.record(ns);
            }
            above_here += self.above_in[i];
        }
        if environment {
            for &ns in &self.late {
                removed.record(ns);
            }
            above_here += self.late_above;
        }
        let mut without = self.merged.clone();
        without.subtract(&removed);
        without.record_n(self.median_ns, removed.count());
        let value = self.value_ns;
        let without_ns = without
            .percentile(self.percentile)
            .value_ns
            .unwrap_or(self.median_ns)
            .min(value);
        Impact {
            percentile: self.percentile,
            value_ns: value,
            without_ns,
            share_of_excess: (value - without_ns) as f64
                / value.saturating_sub(self.median_ns).max(1) as f64,
            share_above: above_here as f64 / self.above.max(1) as f64,
        }
    }
}

/// The intervals test's part of the evidence ("" when not run).
fn intervals_evidence(p: &PeriodicityTest) -> String {
    p.intervals.as_ref().map_or_else(String::new, |i| {
        format!(
            "intervals {:.1}% off multiples of {:.1} ms{}, p = {} against a renewal process; ",
            i.deviation * 100.0,
            i.period_ms,
            match i.missed {
                0 => String::new(),
                1 => " with 1 cycle missed".into(),
                m => format!(" with {m} cycles missed"),
            },
            fmt_p(i.p_value)
        )
    })
}

fn evidence(f: &Family, alpha: f64) -> String {
    let mut parts = vec![format!(
        "{} episode{}, {} spike requests",
        f.episodes.len(),
        if f.episodes.len() == 1 { "" } else { "s" },
        f.spike_requests
    )];
    match &f.periodicity {
        Some(p) if p.p_value < alpha => parts.push(format!(
            "periodic every {:.1} ms (jitter {:.2} ms; {}Rayleigh Z = {:.1} over {} occurrences, p = {} with {:.0} periods searched; p = {} for the two tests, needs < {})",
            p.period_ms,
            p.jitter_ms,
            intervals_evidence(p),
            p.z,
            p.events,
            fmt_p(p.rayleigh_p_value),
            p.periods_searched,
            fmt_p(p.p_value),
            fmt_p(alpha)
        )),
        Some(p) => {
            let rayleigh_best = stats::periodicity::best_possible_p(p.events, p.periods_searched);
            let intervals_best = if p.intervals.is_some() {
                1.0 / (1 + stats::intervals::SIMULATIONS) as f64
            } else {
                1.0
            };
            let best = (2.0 * rayleigh_best.min(intervals_best)).min(1.0);
            parts.push(if best >= alpha {
                format!(
                    "not enough evidence for or against a period: {} occurrences could not show one (even all in phase would give p = {}, needs < {}); a longer run would",
                    p.events,
                    fmt_p(best),
                    fmt_p(alpha)
                )
            } else {
                format!(
                    "no period (best {:.1} ms, {}p = {} for the two tests, needs < {})",
                    p.period_ms,
                    intervals_evidence(p),
                    fmt_p(p.p_value),
                    fmt_p(alpha)
                )
            })
        }
        None => parts.push("too few occurrences to test for a period (needs 4)".into()),
    }
    if let Some(t) = &f.trend {
        parts.push(match t.rho {
            // A positive but weak correlation: say what would settle it.
            Some(rho) if rho > 0.0 && t.p_value >= alpha => format!(
                "spike share against request rate, second by second: Spearman ρ = {rho:.2} over {} s, p = {} (needs < {}: more seconds at each rate would tell)",
                t.seconds.unwrap_or(0),
                fmt_p(t.p_value),
                fmt_p(alpha)
            ),
            Some(rho) => format!(
                "spike share against request rate, second by second: Spearman ρ = {rho:.2} over {} s, p = {}",
                t.seconds.unwrap_or(0),
                fmt_p(t.p_value)
            ),
            None => format!(
                "trend with offered rate: Cochran-Armitage z = {:.2}, p = {}",
                t.z,
                fmt_p(t.p_value)
            ),
        });
    }
    if let Some(i) = &f.impact {
        parts.push(format!(
            "{:.0}% of the requests at or above p{} ({}); without it p{} would be {} ({:.0}% of its excess over the median)",
            i.share_above * 100.0,
            i.percentile,
            crate::latency::fmt_ns(i.value_ns),
            i.percentile,
            crate::latency::fmt_ns(i.without_ns),
            i.share_of_excess * 100.0
        ));
    }
    parts.join("; ")
}

/// A p-value as a reader takes it in: two decimals, or scientific when
/// small.
fn fmt_p(p: f64) -> String {
    if p < 0.01 {
        format!("{p:.1e}")
    } else {
        format!("{p:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_few_requests_above_the_percentile_rank_no_family_first() {
        // 3 of 189: indistinguishable from none (2^-3 = 12.5%).
        assert_eq!(surely_held(3.0 / 189.0, 189), 0.0);
        assert_eq!(surely_held(0.0, 189), 0.0);
        // 5 of 189 can be told from none; the bound grows with the count.
        let five = surely_held(5.0 / 189.0, 189);
        assert!(five > 0.0 && five < 5.0, "{five}");
        assert!(surely_held(150.0 / 189.0, 189) > surely_held(30.0 / 189.0, 189));
    }

    fn episode(start_ms: u64, len_ms: u64) -> Episode {
        Episode {
            window: episodes::Window {
                start_ns: start_ms * 1_000_000,
                end_ns: (start_ms + len_ms) * 1_000_000,
                peak_ns: len_ms * 1_000_000,
                requests: 1,
                phase: 0,
            },
            duration_ns: len_ms * 1_000_000,
            excess: BTreeMap::new(),
            account: TimeAccount::default(),
            tail_requests: 0,
            code_path: None,
        }
    }

    /// A hog's burst lets the server run in slices: an episode every
    /// ~12 ms while it lasts. One burst is one occurrence, whatever the
    /// spacing of its slices; bursts apart are apart.
    #[test]
    fn a_burst_of_episodes_is_one_occurrence() {
        let mut eps = Vec::new();
        for burst in [0u64, 517, 2_188, 3_036] {
            for k in 0..5 {
                eps.push(episode(burst + 12 * k, 5));
            }
        }
        let members: Vec<&Episode> = eps.iter().collect();
        assert_eq!(occurrences(&members), vec![0.0, 517e6, 2_188e6, 3_036e6]);
    }
}
