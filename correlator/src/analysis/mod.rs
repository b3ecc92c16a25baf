//! From events and latencies to causes.
//!
//! 1. Spikes (requests above a threshold) are grouped into episodes.
//! 2. Each episode's kernel events are compared with the same measures in
//!    the baseline (every bucket of the run outside any episode), and its
//!    time is accounted for: waiting runnable, blocked, in IRQs.
//! 3. The episodes' rhythm gives the signature (periodic / load-correlated /
//!    sporadic), following the decision flow in the measurement rules.
//! 4. Causes are ranked by score = significance × share of episode time
//!    they explain.

pub mod episodes;
pub mod kernel;
pub mod poisson;
mod signature;
pub mod synthetic;

use std::collections::BTreeMap;

use correlator_common::Counter;
use serde::{Deserialize, Serialize};

use crate::{
    latency::{Summary, capture::LatencyCapture},
    timeline::runfile::RunFile,
};
use episodes::Window;
use kernel::{KernelTimeline, OffKind, Threads, get};

pub use signature::Signature;

/// Estimated cost of one event, used only to put count-only families on the
/// same scale as measured durations ("share of episode time explained").
/// A minor fault's cost is measured on the machine at record time (see
/// `Environment::minor_fault_ns`); this is the fallback for run files
/// without it. The others are rough figures for this class of machine,
/// stated as estimates in reports.
const MINOR_FAULT_COST_NS: f64 = 1_500.0;
const MAJOR_FAULT_COST_NS: f64 = 100_000.0;
const MIGRATION_COST_NS: f64 = 20_000.0;

/// Below this many episodes no pattern or cause is claimed.
pub const MIN_EPISODES: usize = 3;

#[derive(Clone, Debug, Default)]
pub struct AnalysisOptions {
    /// Spike threshold; default: [`episodes::default_threshold`].
    pub slo_ns: Option<u64>,
}

/// Observed vs expected (from the baseline rate) in an episode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Excess {
    pub observed: f64,
    pub expected: f64,
}

/// Where an episode's time went, for the worst-hit target thread.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TimeAccount {
    pub duration_ns: u64,
    /// Longest atypical wait for a CPU (beyond the thread's typical wait).
    pub runnable_ns: u64,
    /// Who ran instead, when the thread had been preempted.
    pub preempted_by: Option<String>,
    /// Longest atypical blocked interval (beyond the thread's typical one).
    pub blocked_ns: u64,
    /// Hard-IRQ and softirq time on the target's CPUs above baseline.
    pub hardirq_ns: u64,
    pub softirq_ns: u64,
    /// Hypervisor steal on the worst CPU during the episode, at most (see
    /// timeline::steal: 100 ms samples of 10 ms ticks), and at most the
    /// episode time nothing else accounts for.
    #[serde(default)]
    pub steal_ns: u64,
    /// Estimated from excess fault and migration counts (see docs).
    pub faults_estimated_ns: u64,
    pub migrations_estimated_ns: u64,
    /// What none of the above covers: the thread ran, or something the probes
    /// cannot see (application work, GC, SMI).
    pub unexplained_ns: u64,
    /// Share of the episode the kernel events explain.
    pub explained_share: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Episode {
    #[serde(flatten)]
    pub window: Window,
    pub duration_ns: u64,
    /// Per event family: observed vs expected from the baseline.
    pub excess: BTreeMap<String, Excess>,
    pub account: TimeAccount,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Cause {
    pub cause: String,
    pub score: f64,
    pub evidence: String,
    /// The isolate-and-remeasure experiment that would confirm it.
    pub experiment: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Classification {
    pub signature: Signature,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub period_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jitter_ms: Option<f64>,
    pub evidence: String,
    pub causes: Vec<Cause>,
}

/// Latency of one phase with its spikes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PhaseLatency {
    pub rate: Option<f64>,
    /// Measured window (after warm-up), CLOCK_MONOTONIC ns: the clock of
    /// the episodes, so a reader can place outside events against them.
    #[serde(default)]
    pub start_ns: u64,
    #[serde(default)]
    pub end_ns: u64,
    pub spikes: u64,
    pub spike_fraction: f64,
    #[serde(flatten)]
    pub summary: Summary,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LatencyReport {
    pub source: String,
    #[serde(flatten)]
    pub summary: Summary,
    pub threshold_ns: Option<u64>,
    pub spikes: u64,
    /// Requests over the threshold that the generator sent late (most of
    /// their latency passed before the send): its lateness, not the
    /// server's, so not spikes.
    pub late_sends: u64,
    pub timeouts: u64,
    pub errors: u64,
    pub phases: Vec<PhaseLatency>,
}

/// Everything the analysis concluded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Analysis {
    pub latency: LatencyReport,
    pub episodes: Vec<Episode>,
    pub classification: Classification,
}

/// Event families compared between episodes and baseline, as
/// (report name, counter).
const FAMILIES: [(&str, Counter); 11] = [
    ("page_faults_minor", Counter::PageFaultsMinor),
    ("page_faults_major", Counter::PageFaultsMajor),
    ("context_switches_voluntary", Counter::SwitchesVoluntary),
    ("context_switches_involuntary", Counter::SwitchesInvoluntary),
    ("migrations", Counter::Migrations),
    ("hardirqs", Counter::HardIrqs),
    ("softirqs", Counter::SoftIrqs),
    ("hardirq_ns", Counter::HardIrqNs),
    ("softirq_ns", Counter::SoftIrqNs),
    ("hardirq_wait_ns", Counter::HardIrqWaitNs),
    ("softirq_wait_ns", Counter::SoftIrqWaitNs),
];

pub fn analyze(run: &RunFile, latency: &LatencyCapture, opts: &AnalysisOptions) -> Analysis {
    let merged = latency.merged();
    let threshold = opts.slo_ns.or_else(|| episodes::default_threshold(&merged));
    let windows = threshold.map_or_else(Vec::new, |t| episodes::episodes(&latency.requests, t));
    let latency_report = latency_report(latency, &merged, threshold);
    let kt = KernelTimeline::new(run);
    let threads = Threads::new(&run.offcpu, run.min_offcpu_record_ns);
    let baseline = Baseline::new(
        &kt,
        &windows,
        latency.start_ns().max(run.started_ns),
        latency.end_ns().min(run.ended_ns),
    );
    let costs = Costs {
        minor_fault_ns: match run.environment.minor_fault_ns {
            0 => MINOR_FAULT_COST_NS,
            measured => measured as f64,
        },
    };
    let spans: Vec<(u64, u64)> = windows.iter().map(|w| (w.start_ns, w.end_ns)).collect();
    let runnable_rates = threads.runnable_rates(&spans, latency.start_ns(), latency.end_ns());
    let ctx = EpisodeContext {
        kt: &kt,
        threads: &threads,
        runnable_rates: &runnable_rates,
        baseline: &baseline,
        costs: &costs,
    };
    let spans: Vec<(u64, u64)> = windows.iter().map(|w| (w.start_ns, w.end_ns)).collect();
    let steal = crate::timeline::steal::allocate(&run.steal, &spans);
    let episodes: Vec<Episode> = windows
        .iter()
        .zip(steal)
        .map(|(w, stolen)| episode(w, stolen, &ctx))
        .collect();
    let classification = classify(&episodes, &latency_report, &costs, opts.slo_ns.is_some());
    Analysis {
        latency: latency_report,
        episodes,
        classification,
    }
}

fn latency_report(
    latency: &LatencyCapture,
    merged: &crate::latency::Distribution,
    threshold: Option<u64>,
) -> LatencyReport {
    let spikes_in = |phase: u32| {
        threshold.map_or(0, |t| {
            latency
                .requests
                .iter()
                .filter(|r| {
                    r.phase == phase && r.corrected() >= t && episodes::slow_at_server(r, t)
                })
                .count() as u64
        })
    };
    let late_sends = threshold.map_or(0, |t| {
        latency
            .requests
            .iter()
            .filter(|r| r.corrected() >= t && !episodes::slow_at_server(r, t))
            .count() as u64
    });
    let phases: Vec<PhaseLatency> = latency
        .phases
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let d = p.corrected.to_distribution();
            let spikes = spikes_in(i as u32);
            PhaseLatency {
                rate: p.rate,
                start_ns: p.start_ns,
                end_ns: p.end_ns,
                spikes,
                spike_fraction: spikes as f64 / d.count().max(1) as f64,
                summary: d.summary(),
            }
        })
        .collect();
    LatencyReport {
        source: latency.source.clone(),
        summary: merged.summary(),
        threshold_ns: threshold,
        spikes: phases.iter().map(|p| p.spikes).sum(),
        late_sends,
        timeouts: latency.phases.iter().map(|p| p.timeouts).sum(),
        errors: latency.phases.iter().map(|p| p.errors).sum(),
        phases,
    }
}

/// Per-event cost estimates for this run.
struct Costs {
    minor_fault_ns: f64,
}

/// Per-bucket event rates outside every episode.
struct Baseline {
    rates: [f64; correlator_common::NUM_COUNTERS],
}

impl Baseline {
    fn new(kt: &KernelTimeline, windows: &[Window], start_ns: u64, end_ns: u64) -> Self {
        let (first, last) = kt.bucket_range(start_ns, end_ns.max(start_ns));
        let total = kt.sums(first, last);
        let mut in_episodes = [0u64; correlator_common::NUM_COUNTERS];
        let mut episode_buckets = 0u64;
        // Merge the episodes' bucket ranges (padded by one bucket: a stall's
        // cause can sit just before the first delayed request) so no bucket
        // is subtracted twice.
        let mut ranges: Vec<(u64, u64)> = windows
            .iter()
            .map(|w| {
                let (a, b) = kt.bucket_range(w.start_ns, w.end_ns);
                (a.saturating_sub(1).max(first), (b + 1).min(last))
            })
            .filter(|(a, b)| a <= b)
            .collect();
        ranges.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::new();
        for (a, b) in ranges {
            match merged.last_mut() {
                Some(m) if a <= m.1 + 1 => m.1 = m.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        for (a, b) in merged {
            episode_buckets += b - a + 1;
            for (s, v) in in_episodes.iter_mut().zip(kt.sums(a, b)) {
                *s += v;
            }
        }
        let buckets = (last - first + 1).saturating_sub(episode_buckets);
        let mut rates = [0.0; correlator_common::NUM_COUNTERS];
        for ((r, t), e) in rates.iter_mut().zip(total).zip(in_episodes) {
            *r = t.saturating_sub(e) as f64 / buckets.max(1) as f64;
        }
        Self { rates }
    }

    fn expected(&self, c: Counter, buckets: u64) -> f64 {
        self.rates[c as usize] * buckets as f64
    }
}

/// What every episode is measured against.
struct EpisodeContext<'a> {
    kt: &'a KernelTimeline<'a>,
    threads: &'a Threads<'a>,
    runnable_rates: &'a std::collections::HashMap<u32, f64>,
    baseline: &'a Baseline,
    costs: &'a Costs,
}

/// `stolen`: hypervisor steal handed to this episode (timeline::steal::allocate).
fn episode(w: &Window, stolen: u64, ctx: &EpisodeContext) -> Episode {
    let (kt, threads, baseline, costs) = (ctx.kt, ctx.threads, ctx.baseline, ctx.costs);
    let (first, last) = kt.bucket_range(w.start_ns, w.end_ns);
    // The bucket before the first delayed request too (see Baseline::new).
    let first = first.saturating_sub(1);
    let n = last - first + 1;
    let sums = kt.sums(first, last);
    let excess: BTreeMap<String, Excess> = FAMILIES
        .iter()
        .map(|&(name, c)| {
            (
                name.to_string(),
                Excess {
                    observed: get(&sums, c) as f64,
                    expected: baseline.expected(c, n),
                },
            )
        })
        .collect();
    let over = |name: &str| {
        excess
            .get(name)
            .map_or(0.0, |e| (e.observed - e.expected).max(0.0))
    };
    let d = w.duration_ns();
    // Waiting for a CPU: total wait above the thread's own baseline (under a
    // CPU-sharing neighbour it is many short waits, not one long one).
    let (runnable_ns, preempted_by) =
        threads.runnable_excess(ctx.runnable_rates, w.start_ns, w.end_ns);
    // Blocked: one atypically long sleep (a lock or I/O wait) — an idle
    // server sleeps most of the time anyway, so totals say little.
    let blocked = threads.worst_excess(OffKind::Blocked, w.start_ns, w.end_ns);
    // Part of the wait for a CPU went to IRQs on that CPU (including
    // ksoftirqd's softirq work), not to another task: it is IRQ time.
    let (hardirq_wait, softirq_wait) = (over("hardirq_wait_ns"), over("softirq_wait_ns"));
    let runnable_ns = runnable_ns
        .saturating_sub((hardirq_wait + softirq_wait) as u64)
        .min(d);
    let blocked_ns = blocked.as_ref().map_or(0, |b| b.0);
    let (hardirq_ns, softirq_ns) = (
        (over("hardirq_ns") + hardirq_wait) as u64,
        (over("softirq_ns") + softirq_wait) as u64,
    );
    let faults_estimated_ns = (over("page_faults_minor") * costs.minor_fault_ns
        + over("page_faults_major") * MAJOR_FAULT_COST_NS) as u64;
    let migrations_estimated_ns = (over("migrations") * MIGRATION_COST_NS) as u64;
    // Steal is invisible to the guest: a thread whose vCPU the host took
    // looks as if it ran. So stolen time can only explain the part of the
    // episode nothing else accounts for: time measured off-CPU or in IRQs
    // is timed exactly, fault and migration time is counted work, while
    // the steal sample is an upper bound at 100 ms resolution (where in
    // the sample it fell is unknown). Without this cap a host stealing 15%
    // under load hands every lock wait and every fault burst its "steal".
    let accounted = runnable_ns
        + blocked_ns
        + hardirq_ns
        + softirq_ns
        + faults_estimated_ns
        + migrations_estimated_ns;
    let mut account = TimeAccount {
        duration_ns: d,
        runnable_ns,
        preempted_by: preempted_by.filter(|_| runnable_ns > 0),
        blocked_ns,
        hardirq_ns,
        softirq_ns,
        faults_estimated_ns,
        migrations_estimated_ns,
        steal_ns: stolen.min(d.saturating_sub(accounted)),
        ..TimeAccount::default()
    };
    let explained = (accounted + account.steal_ns).min(d);
    account.unexplained_ns = d - explained;
    account.explained_share = explained as f64 / d as f64;
    Episode {
        window: w.clone(),
        duration_ns: d,
        excess,
        account,
    }
}

/// Totals over all episodes of one count family.
fn family_totals(episodes: &[Episode], name: &str) -> Excess {
    episodes.iter().fold(Excess::default(), |acc, e| {
        let x = e.excess.get(name).copied().unwrap_or_default();
        Excess {
            observed: acc.observed + x.observed,
            expected: acc.expected + x.expected,
        }
    })
}

/// Significance that the episodes hold more events than the baseline rate
/// predicts: 1 − P(X ≥ observed) under Poisson(expected).
fn significance(x: Excess) -> (f64, f64) {
    if x.observed <= x.expected {
        return (0.0, 1.0);
    }
    let p = poisson::sf_at_least(x.observed as u64, x.expected.max(1e-9));
    (1.0 - p, p)
}

fn classify(
    episodes: &[Episode],
    latency: &LatencyReport,
    costs: &Costs,
    explicit_slo: bool,
) -> Classification {
    let sig = signature::signature(episodes, latency, explicit_slo);
    if sig.signature == Signature::None {
        return Classification {
            signature: sig.signature,
            period_ms: None,
            jitter_ms: None,
            evidence: sig.evidence,
            causes: Vec::new(),
        };
    }
    let mut causes = rank_causes(episodes, sig.signature, costs);
    // A cause that explains under 1% of episode time is not a finding.
    causes.retain(|c| c.score >= 0.01);
    causes.sort_by(|a, b| b.score.total_cmp(&a.score));
    Classification {
        signature: sig.signature,
        period_ms: sig.period_ms,
        jitter_ms: sig.jitter_ms,
        evidence: sig.evidence,
        causes,
    }
}

fn pct(x: f64) -> String {
    format!("{:.0}%", x * 100.0)
}

fn rank_causes(episodes: &[Episode], signature: Signature, costs: &Costs) -> Vec<Cause> {
    let n = episodes.len() as f64;
    let total_ns: f64 = episodes
        .iter()
        .map(|e| e.duration_ns as f64)
        .sum::<f64>()
        .max(1.0);
    let share = |f: &dyn Fn(&TimeAccount) -> u64| {
        episodes.iter().map(|e| f(&e.account) as f64).sum::<f64>() / total_ns
    };
    // Fraction of episodes where a time measure covers a quarter of the episode.
    let consistency = |f: &dyn Fn(&TimeAccount) -> u64| {
        episodes
            .iter()
            .filter(|e| f(&e.account) as f64 >= 0.25 * e.duration_ns as f64)
            .count() as f64
            / n
    };
    let mut causes = Vec::new();
    let mut count_cause = |cause: &str, family: &str, cost: f64, what: &str, experiment: &str| {
        let x = family_totals(episodes, family);
        let (sig, p) = significance(x);
        let magnitude = ((x.observed - x.expected).max(0.0) * cost / total_ns).min(1.0);
        let score = sig * magnitude;
        if score > 0.0 {
            causes.push(Cause {
                cause: cause.into(),
                score,
                evidence: format!(
                    "{:.0} {what} in {} episodes ({:.1} per episode) vs {:.1} expected from the baseline rate (Poisson p = {p:.2e}); est. {} of episode time",
                    x.observed,
                    episodes.len(),
                    x.observed / n,
                    x.expected,
                    pct(magnitude)
                ),
                experiment: experiment.into(),
            });
        }
    };
    count_cause(
        "page_faults",
        "page_faults_minor",
        costs.minor_fault_ns,
        "minor page faults",
        "pre-fault or reuse the memory (MAP_POPULATE, a pool), or change THP (knob thp=never|always), and re-measure the tail",
    );
    count_cause(
        "major_faults",
        "page_faults_major",
        MAJOR_FAULT_COST_NS,
        "major page faults",
        "keep the file resident (mlock / vmtouch, more page cache) and re-measure the tail",
    );
    count_cause(
        "migrations",
        "migrations",
        MIGRATION_COST_NS,
        "CPU migrations",
        "pin the serving threads to fixed CPUs (knob pin=CPULIST) and re-measure the tail",
    );
    let preempted_by = {
        let mut who: BTreeMap<&str, u64> = BTreeMap::new();
        for e in episodes {
            if let Some(p) = &e.account.preempted_by {
                *who.entry(p.as_str()).or_default() += e.account.runnable_ns;
            }
        }
        who.into_iter()
            .max_by_key(|(_, ns)| *ns)
            .map(|(w, _)| w.to_string())
    };
    let mut time_cause =
        |cause: &str, f: &dyn Fn(&TimeAccount) -> u64, evidence: String, experiment: String| {
            let s = share(f);
            let score = s * consistency(f).max(s);
            if score > 0.0 {
                causes.push(Cause {
                    cause: cause.into(),
                    score,
                    evidence: format!(
                        "{evidence}: {} of episode time, in {} of episodes",
                        pct(s),
                        pct(consistency(f))
                    ),
                    experiment,
                });
            }
        };
    time_cause(
        "preemption",
        &|a| a.runnable_ns,
        match &preempted_by {
            Some(who) => format!("a target thread waited runnable while {who} ran"),
            None => "a target thread waited runnable for a CPU".into(),
        },
        match &preempted_by {
            Some(who) => format!(
                "pin the server away from {who} (knob pin=CPULIST) or stop it (knob stop=PID), and re-measure"
            ),
            None => "pin the server to less busy CPUs (knob pin=CPULIST) and re-measure".into(),
        },
    );
    time_cause(
        "blocking",
        &|a| a.blocked_ns,
        "a target thread was blocked far longer than its typical sleep".into(),
        "find what the thread waits on (lock holder, I/O) and shorten or remove it; re-measure"
            .into(),
    );
    time_cause(
        "hardirq",
        &|a| a.hardirq_ns,
        "hard-IRQ time on the target's CPUs above the baseline, while a target thread ran or waited for the CPU".into(),
        "move IRQ affinity away from the server's CPUs (knob irq-affinity=IRQ:CPULIST) and re-measure".into(),
    );
    time_cause(
        "steal",
        &|a| a.steal_ns,
        "the hypervisor took the CPU (steal time in /proc/stat, 10 ms ticks sampled every 100 ms: an upper bound, counted only for episode time nothing else accounts for)".into(),
        "not the server's doing: move to dedicated vCPUs or a less contended host, and re-measure".into(),
    );
    time_cause(
        "softirq",
        &|a| a.softirq_ns,
        "softirq time on the target's CPUs above the baseline, while a target thread ran or waited for the CPU".into(),
        "steer softirq work (RPS / IRQ affinity) away from the server's CPUs, or pin the server elsewhere; re-measure".into(),
    );
    let explained: f64 = episodes
        .iter()
        .map(|e| e.account.explained_share)
        .sum::<f64>()
        / n;
    let unexplained = (1.0 - explained).max(0.0);
    let strongest = causes.iter().map(|c| c.score).fold(0.0, f64::max);
    if signature == Signature::LoadCorrelated {
        causes.push(Cause {
            cause: "queueing".into(),
            score: unexplained * (1.0 - strongest).max(0.0) * 0.9 + 0.05,
            evidence: format!(
                "spikes grow with offered load and the kernel events explain only {} of episode time",
                pct(explained)
            ),
            experiment: "re-measure at a lower rate or with more capacity (workers, cores); the tail should shrink if it is queueing".into(),
        });
    } else {
        causes.push(Cause {
            cause: "on_cpu".into(),
            score: unexplained * (1.0 - strongest).max(0.0) * 0.8,
            evidence: format!(
                "the target's threads were not waiting, blocked or interrupted for {} of episode time: \
                 application work, GC, or something the probes cannot see (SMI)",
                pct(unexplained)
            ),
            experiment: "profile the server's threads during episodes (perf record -t TID) and re-measure after changing what runs there".into(),
        });
    }
    causes
}

#[cfg(test)]
mod tests;
