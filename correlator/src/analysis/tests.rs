//! Deterministic synthetic timelines: one per signature and per cause, and
//! the negative cases (no spikes, spikes without kernel excess, too few
//! episodes).

use std::collections::BTreeMap;

use correlator_common::{Counter, NUM_COUNTERS};

use super::*;
use crate::{
    latency::{
        Distribution,
        capture::{LatencyCapture, LatencyPhase, StoredDistribution},
    },
    loadgen::recorder::RequestTimes,
    target::Target,
    timeline::{
        OffCpu,
        runfile::{Durations, Environment, EventTotals, Losses, Overhead, RunFile, StopReason},
    },
};

const MS: u64 = 1_000_000;
const US: u64 = 1_000;
const SHIFT: u32 = 19;
const T0: u64 = 1_000 * MS;

/// A synthetic run: a server answering in 50 µs at a fixed rate, with
/// stalls and kernel events placed by the test.
struct Synth {
    buckets: BTreeMap<u64, [u64; NUM_COUNTERS]>,
    offcpu: Vec<OffCpu>,
    phases: Vec<(f64, u64, u64)>,
    stalls: Vec<(u64, u64)>,
    /// Extra per-phase service time that makes spikes grow with load.
    phase_slow_every: Vec<u64>,
    steal: Vec<crate::timeline::steal::StealSample>,
}

impl Synth {
    fn new(rate: f64, seconds: u64) -> Self {
        Self {
            buckets: BTreeMap::new(),
            offcpu: Vec::new(),
            phases: vec![(rate, T0, T0 + seconds * 1_000 * MS)],
            stalls: Vec::new(),
            phase_slow_every: vec![0],
            steal: Vec::new(),
        }
    }

    fn sweep(rates: &[f64], seconds: u64, slow_every: &[u64]) -> Self {
        let phases = rates
            .iter()
            .enumerate()
            .map(|(i, &r)| {
                let start = T0 + i as u64 * seconds * 1_000 * MS;
                (r, start, start + seconds * 1_000 * MS)
            })
            .collect();
        Self {
            buckets: BTreeMap::new(),
            offcpu: Vec::new(),
            phases,
            stalls: Vec::new(),
            phase_slow_every: slow_every.to_vec(),
            steal: Vec::new(),
        }
    }

    /// Steal on `cpus` throughout the run: `per_sample` in every 100 ms
    /// sample (as the recorder samples /proc/stat).
    fn steady_steal(&mut self, cpus: &[u32], per_sample: u64) {
        let (start, end) = (self.phases[0].1, self.phases[self.phases.len() - 1].2);
        let mut t = start;
        while t < end {
            for &cpu in cpus {
                self.steal.push(crate::timeline::steal::StealSample {
                    cpu,
                    start_ns: t,
                    end_ns: t + 100 * MS,
                    steal_ns: per_sample,
                });
            }
            t += 100 * MS;
        }
    }

    fn stall(&mut self, at: u64, len: u64) {
        self.stalls.push((at, len));
    }

    fn events(&mut self, at: u64, c: Counter, n: u64) {
        self.buckets.entry(at >> SHIFT).or_insert([0; NUM_COUNTERS])[c as usize] += n;
    }

    /// Background events spread over the run: `per_s` per second.
    fn background(&mut self, c: Counter, per_s: u64) {
        let (start, end) = (self.phases[0].1, self.phases[self.phases.len() - 1].2);
        let step = 1_000 * MS / per_s.max(1);
        let mut t = start;
        while t < end {
            self.events(t, c, 1);
            t += step;
        }
    }

    fn off(
        &mut self,
        tid: u32,
        start: u64,
        runnable: u64,
        blocked: u64,
        preempted: bool,
        by: &str,
    ) {
        self.offcpu.push(OffCpu {
            tid,
            tgid: 100,
            preempted,
            cpu_out: 0,
            cpu_in: 0,
            start_ns: start,
            end_ns: start + runnable + blocked,
            runnable_ns: runnable,
            blocked_ns: blocked,
            next_pid: 999,
            next_comm: by.into(),
        });
    }

    /// The serving thread's ordinary sleeps between requests.
    fn ordinary_sleeps(&mut self, tid: u32) {
        let (start, end) = (self.phases[0].1, self.phases[self.phases.len() - 1].2);
        let mut t = start;
        while t < end {
            self.off(tid, t, 5 * US, 80 * US, false, "");
            t += MS;
        }
    }

    fn build(self) -> (RunFile, LatencyCapture) {
        let mut requests = Vec::new();
        let mut phases = Vec::new();
        for (i, &(rate, start, end)) in self.phases.iter().enumerate() {
            let mut d = Distribution::new();
            let interval = (1e9 / rate) as u64;
            let mut t = start;
            let mut rng = crate::stats::Rng::new(0x9e37_79b9_7f4a_7c15);
            while t < end {
                let mut done = t + 50 * US;
                for &(at, len) in &self.stalls {
                    if t >= at && t < at + len {
                        done = done.max(at + len + 50 * US);
                    }
                }
                // Queueing-like slow requests at pseudo-random times.
                let x = rng.next_u64();
                let slow = self.phase_slow_every.get(i).copied().unwrap_or(0);
                if slow > 0 && x.is_multiple_of(slow) {
                    done = t + 3 * MS;
                }
                let r = RequestTimes {
                    intended_ns: t,
                    sent_ns: t,
                    done_ns: done,
                    connection: 0,
                    phase: i as u32,
                };
                d.record(r.corrected());
                if r.corrected() > 100 * US {
                    requests.push(r);
                }
                t += interval;
            }
            phases.push(LatencyPhase {
                rate: Some(rate),
                start_ns: start,
                end_ns: end,
                sent: d.count(),
                completed: d.count(),
                timeouts: 0,
                errors: 0,
                corrected: StoredDistribution::from(&d),
            });
        }
        let (start, end) = (self.phases[0].1, self.phases[self.phases.len() - 1].2);
        let run = RunFile {
            schema: crate::timeline::runfile::SCHEMA.into(),
            correlator_version: "test".into(),
            target: Target {
                pid: 100,
                comm: "server".into(),
                cmdline: "server".into(),
            },
            follow_children: false,
            started_ns: start - 10 * MS,
            ended_ns: end + 10 * MS,
            stop_reason: StopReason::Duration,
            bucket_ns: 1 << SHIFT,
            counter_names: Vec::new(),
            buckets: self.buckets.into_iter().collect(),
            offcpu: self.offcpu,
            min_offcpu_record_ns: 50 * US,
            totals: EventTotals::default(),
            durations: Durations::default(),
            irq_kinds: BTreeMap::new(),
            softirq_vectors: BTreeMap::new(),
            losses: Losses::default(),
            overhead: Overhead::default(),
            environment: Environment::default(),
            notes: Vec::new(),
            latency: None,
            server_latency: None,
            steal: self.steal.clone(),
        };
        let lat = LatencyCapture {
            source: "synthetic".into(),
            phases,
            requests,
            requests_over_cap: 0,
            bucket_shift: SHIFT,
            bucket_origin: start >> SHIFT,
            buckets: Vec::new(),
        };
        (run, lat)
    }
}

fn run(s: Synth) -> Analysis {
    let (run, lat) = s.build();
    analyze(&run, &lat, &AnalysisOptions::default())
}

fn top(a: &Analysis) -> &str {
    a.classification
        .causes
        .first()
        .map_or("none", |c| c.cause.as_str())
}

/// Pseudo-random but fixed times for sporadic stalls.
fn sporadic_times(n: usize, seconds: u64) -> Vec<u64> {
    let mut rng = crate::stats::Rng::new(88_172_645_463_325_252);
    let mut out: Vec<u64> = (0..n)
        .map(|_| T0 + 100 * MS + rng.next_u64() % ((seconds * 1_000 - 200) * MS))
        .collect();
    out.sort_unstable();
    out
}

/// Ten 20 ms stalls full of minor faults, every 400 ms, over background faults.
fn periodic_fault_bursts() -> Synth {
    let mut s = Synth::new(10_000.0, 5);
    s.background(Counter::PageFaultsMinor, 20);
    s.ordinary_sleeps(101);
    for i in 0..10 {
        let at = T0 + 250 * MS + i * 400 * MS;
        s.stall(at, 20 * MS);
        for k in 0..20 {
            s.events(at + k * MS, Counter::PageFaultsMinor, 700);
        }
    }
    s
}

#[test]
fn periodic_page_fault_bursts() {
    let s = periodic_fault_bursts();
    let a = run(s);
    assert_eq!(a.episodes.len(), 10);
    assert_periodic_every_400ms(&a);
    assert_eq!(top(&a), "page_faults", "{:#?}", a.classification.causes);
}

/// The bursts of `periodic_fault_bursts` found periodic at their period.
fn assert_periodic_every_400ms(a: &Analysis) {
    assert_eq!(
        a.classification.signature,
        Signature::Periodic,
        "{}",
        a.classification.evidence
    );
    let period = a.classification.period_ms.expect("period");
    assert!((395.0..=405.0).contains(&period), "{period}");
}

/// A periodic job with a couple of small unrelated stalls in between (a VM
/// hiccup) is still periodic: the intervals are those of the similar-sized
/// episodes. (Seen live: 4 hiccups of 2.5-8 ms among 24 sweeps of ~60 ms
/// had made it "sporadic".)
#[test]
fn periodic_survives_unrelated_small_stalls() {
    let mut s = periodic_fault_bursts();
    for at in [T0 + 500 * MS, T0 + 1_480 * MS] {
        s.stall(at, 3 * MS);
    }
    let a = run(s);
    assert_eq!(a.episodes.len(), 12);
    assert_periodic_every_400ms(&a);
}

#[test]
fn sporadic_preemption_names_the_task() {
    let mut s = Synth::new(10_000.0, 5);
    s.ordinary_sleeps(101);
    for at in sporadic_times(8, 5) {
        s.stall(at, 15 * MS);
        s.off(101, at, 15 * MS, 0, true, "hog");
    }
    let a = run(s);
    assert_eq!(
        a.classification.signature,
        Signature::Sporadic,
        "{}",
        a.classification.evidence
    );
    assert_eq!(top(&a), "preemption", "{:#?}", a.classification.causes);
    assert!(a.classification.causes[0].evidence.contains("hog"));
    assert!(a.episodes.iter().all(|e| e.account.explained_share > 0.5));
}

#[test]
fn sporadic_blocking() {
    let mut s = Synth::new(10_000.0, 5);
    s.ordinary_sleeps(101);
    for at in sporadic_times(8, 5) {
        s.stall(at, 12 * MS);
        s.off(101, at, 30 * US, 12 * MS, false, "");
    }
    let a = run(s);
    assert_eq!(top(&a), "blocking", "{:#?}", a.classification.causes);
}

#[test]
fn softirq_and_hardirq_time() {
    let mut s = Synth::new(10_000.0, 5);
    s.background(Counter::SoftIrqs, 100);
    s.background(Counter::SoftIrqNs, 100);
    for at in sporadic_times(8, 5) {
        s.stall(at, 8 * MS);
        for k in 0..8 {
            s.events(at + k * MS, Counter::SoftIrqs, 20);
            s.events(at + k * MS, Counter::SoftIrqNs, 900 * US);
        }
    }
    let a = run(s);
    assert_eq!(top(&a), "softirq", "{:#?}", a.classification.causes);

    let mut s = Synth::new(10_000.0, 5);
    for at in sporadic_times(8, 5) {
        s.stall(at, 8 * MS);
        for k in 0..8 {
            s.events(at + k * MS, Counter::HardIrqs, 5);
            s.events(at + k * MS, Counter::HardIrqNs, 900 * US);
        }
    }
    assert_eq!(top(&run(s)), "hardirq");
}

/// Stalls with nothing in the kernel but steal time on the CPU are the
/// hypervisor's, not on-CPU work.
#[test]
fn stalls_under_steal_are_the_hypervisors() {
    let mut s = Synth::new(10_000.0, 5);
    s.ordinary_sleeps(101);
    for at in sporadic_times(8, 5) {
        s.stall(at, 20 * MS);
        s.steal.push(crate::timeline::steal::StealSample {
            cpu: 1,
            start_ns: at - 50 * MS,
            end_ns: at + 50 * MS,
            steal_ns: 20 * MS,
        });
    }
    let a = run(s);
    assert_eq!(top(&a), "steal", "{:#?}", a.classification.causes);
}

/// A lock wait on a host that steals heavily (every 100 ms sample has more
/// steal than the episode is long) is still the lock's: the thread was
/// measured asleep, so the stolen time cannot have been its delay.
#[test]
fn blocking_under_heavy_steal_is_still_blocking() {
    let mut s = Synth::new(10_000.0, 5);
    s.ordinary_sleeps(101);
    s.steady_steal(&[0, 1], 30 * MS);
    for at in sporadic_times(8, 5) {
        s.stall(at, 15 * MS);
        s.off(101, at, 30 * US, 14 * MS, false, "");
    }
    let a = run(s);
    assert_eq!(top(&a), "blocking", "{:#?}", a.classification.causes);
    assert!(
        a.episodes
            .iter()
            .all(|e| e.account.steal_ns <= e.account.duration_ns / 10),
        "{:#?}",
        a.episodes.iter().map(|e| &e.account).collect::<Vec<_>>()
    );
}

/// Fault bursts that fill three quarters of each episode, on a host that
/// steals heavily (every 100 ms sample has more steal than an episode is
/// long): the faults are counted work, so the steal sample, which may have
/// fallen anywhere in its 100 ms, only gets the rest and does not outrank
/// them.
#[test]
fn fault_bursts_under_heavy_steal_are_still_faults() {
    let mut s = Synth::new(10_000.0, 5);
    s.background(Counter::PageFaultsMinor, 20);
    s.ordinary_sleeps(101);
    for at in sporadic_times(8, 5) {
        s.stall(at, 20 * MS);
        for k in 0..20 {
            s.events(at + k * MS, Counter::PageFaultsMinor, 500);
        }
    }
    s.steady_steal(&[1], 30 * MS);
    let a = run(s);
    assert_eq!(top(&a), "page_faults", "{:#?}", a.classification.causes);
    for e in &a.episodes {
        let acc = &e.account;
        assert!(
            acc.steal_ns + acc.faults_estimated_ns <= acc.duration_ns,
            "{acc:#?}"
        );
    }
}

/// A thread that waits for its CPU while softirqs run there (or ksoftirqd,
/// the task that "ran instead") is delayed by softirq work, not preempted by
/// a neighbour: the wait time the kernel saw as IRQ time moves to softirq.
#[test]
fn waiting_through_softirq_work_is_softirq_not_preemption() {
    let mut s = Synth::new(10_000.0, 5);
    s.ordinary_sleeps(101);
    for at in sporadic_times(8, 5) {
        s.stall(at, 10 * MS);
        s.off(101, at, 10 * MS, 0, true, "ksoftirqd/1");
        for k in 0..10 {
            s.events(at + k * MS, Counter::SoftIrqWaitNs, 950 * US);
        }
    }
    let a = run(s);
    assert_eq!(top(&a), "softirq", "{:#?}", a.classification.causes);
    assert!(
        a.episodes.iter().all(|e| e.account.runnable_ns < MS),
        "{:#?}",
        a.episodes
    );
}

#[test]
fn major_faults_and_migrations() {
    let mut s = Synth::new(10_000.0, 5);
    for at in sporadic_times(8, 5) {
        s.stall(at, 8 * MS);
        s.events(at, Counter::PageFaultsMajor, 70);
    }
    assert_eq!(top(&run(s)), "major_faults");

    let mut s = Synth::new(10_000.0, 5);
    for at in sporadic_times(8, 5) {
        s.stall(at, 8 * MS);
        s.events(at, Counter::Migrations, 300);
    }
    assert_eq!(top(&run(s)), "migrations");
}

#[test]
fn spikes_without_kernel_excess_are_on_cpu() {
    let mut s = Synth::new(10_000.0, 5);
    s.background(Counter::PageFaultsMinor, 200);
    s.ordinary_sleeps(101);
    for at in sporadic_times(8, 5) {
        s.stall(at, 10 * MS);
    }
    let a = run(s);
    assert_eq!(top(&a), "on_cpu", "{:#?}", a.classification.causes);
    assert!(
        a.classification
            .causes
            .iter()
            .all(|c| c.cause == "on_cpu" || c.score < 0.1)
    );
}

#[test]
fn load_correlated_is_queueing() {
    // Spikes: 0.1% of requests at 2k/s, 1% at 4k/s, 5% at 8k/s.
    let s = Synth::sweep(&[2_000.0, 4_000.0, 8_000.0], 3, &[1_000, 100, 20]);
    let a = run(s);
    assert_eq!(
        a.classification.signature,
        Signature::LoadCorrelated,
        "{}",
        a.classification.evidence
    );
    assert_eq!(top(&a), "queueing", "{:#?}", a.classification.causes);
}

#[test]
fn no_spikes_no_cause() {
    let mut s = Synth::new(10_000.0, 3);
    s.background(Counter::PageFaultsMinor, 1_000);
    let a = run(s);
    assert!(a.episodes.is_empty());
    assert_eq!(a.classification.signature, Signature::None);
    assert!(a.classification.causes.is_empty());
}

#[test]
fn too_few_episodes_to_tell() {
    let mut s = Synth::new(10_000.0, 3);
    s.stall(T0 + 500 * MS, 10 * MS);
    s.stall(T0 + 1_700 * MS, 10 * MS);
    let a = run(s);
    assert_eq!(a.episodes.len(), 2);
    assert_eq!(a.classification.signature, Signature::None);
    assert!(
        a.classification.evidence.contains("not enough episodes"),
        "{}",
        a.classification.evidence
    );
    assert!(a.classification.causes.is_empty());
}

#[test]
fn spikes_too_rare_to_reach_p995_claim_nothing() {
    // 4 stalls of 2.5 ms at 10k req/s in 5 s: ~0.04% of requests.
    let mut s = Synth::new(10_000.0, 5);
    s.ordinary_sleeps(101);
    for at in sporadic_times(4, 5) {
        s.stall(at, 2_500 * US);
        s.off(101, at, 2_500 * US, 0, true, "kworker");
    }
    let a = run(s);
    assert_eq!(a.episodes.len(), 4);
    assert_eq!(a.classification.signature, Signature::None);
    assert!(
        a.classification.evidence.contains("too few"),
        "{}",
        a.classification.evidence
    );
    assert!(a.classification.causes.is_empty());
}
