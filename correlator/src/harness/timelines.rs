//! Deterministic synthetic timelines for analysis tests and the
//! evaluation (`correlator-testkit eval`): a server answering in 50 µs at a fixed
//! rate (or a sweep of rates), with stalls, off-CPU intervals, per-thread
//! accounts and kernel events placed by the caller.

use std::collections::BTreeMap;

use correlator_common::{Account, Counter, NUM_ACCOUNT, NUM_COUNTERS};

use crate::runfile::{Durations, Environment, EventTotals, Losses, Overhead, RunFile, StopReason};
use crate::{
    latency::recorder::{LatencyBucket, RequestTimes},
    latency::{
        Distribution,
        capture::{LatencyCapture, LatencyPhase, StoredDistribution},
    },
    target::Target,
    timeline::{OffCpu, SyscallSpan, ThreadAccount, syscalls::Site},
};

pub const MS: u64 = 1_000_000;
pub const US: u64 = 1_000;
pub const SHIFT: u32 = 19;
pub const T0: u64 = 1_000 * MS;

/// A synthetic run: a server answering in 50 µs at a fixed rate, with
/// stalls and kernel events placed by the test.
pub struct Synth {
    buckets: BTreeMap<u64, [u64; NUM_COUNTERS]>,
    offcpu: Vec<OffCpu>,
    pub phases: Vec<(f64, u64, u64)>,
    pub stalls: Vec<(u64, u64)>,
    /// Extra per-phase service time that makes spikes grow with load.
    phase_slow_every: Vec<u64>,
    pub steal: Vec<crate::timeline::steal::StealSample>,
    /// Per-thread bucket accounts by (tid, bucket).
    accounts: BTreeMap<(u32, u64), [u64; NUM_ACCOUNT]>,
    pub syscalls: Vec<SyscallSpan>,
    /// Latency as a passive recording would give it: one phase without an
    /// offered rate, whatever the rates the phases were built with.
    passive: bool,
    /// From this time on, arrivals outpace the server: each request waits
    /// for the queue built since then (`growth` ns of wait per ns elapsed).
    overload: Option<(u64, f64)>,
    /// Memory stalls of the threads (see `timeline::memory`).
    pub memory_stalls: Vec<crate::timeline::memory::MemStall>,
    /// The runtime gc probes the run says were attached.
    pub runtime_gc: Option<crate::probes::RuntimeGcRun>,
    /// Stopped worlds of the process (Go; see `timeline::pauses`).
    pub runtime_pauses: Vec<crate::timeline::pauses::RuntimePause>,
}

/// The serving thread of every synthetic run.
pub const SERVER: u32 = 101;

impl Synth {
    pub fn new(rate: f64, seconds: u64) -> Self {
        Self {
            buckets: BTreeMap::new(),
            offcpu: Vec::new(),
            phases: vec![(rate, T0, T0 + seconds * 1_000 * MS)],
            stalls: Vec::new(),
            phase_slow_every: vec![0],
            steal: Vec::new(),
            accounts: BTreeMap::new(),
            syscalls: Vec::new(),
            passive: false,
            overload: None,
            memory_stalls: Vec::new(),
            runtime_gc: None,
            runtime_pauses: Vec::new(),
        }
    }

    pub fn sweep(rates: &[f64], seconds: u64, slow_every: &[u64]) -> Self {
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
            accounts: BTreeMap::new(),
            syscalls: Vec::new(),
            passive: false,
            overload: None,
            memory_stalls: Vec::new(),
            runtime_gc: None,
            runtime_pauses: Vec::new(),
        }
    }

    /// The latency of this run as a passive recording (`record --syscalls`,
    /// an import) would store it: the phases' requests in one phase without
    /// an offered rate, so only their arrival times tell the rate.
    pub fn passive(mut self) -> Self {
        self.passive = true;
        self
    }

    /// Arrivals outpace the server from `from` on: the queue, and each
    /// request's wait, grows by `growth` ns per ns (a client past the
    /// server's capacity).
    pub fn overload(&mut self, from: u64, growth: f64) {
        self.overload = Some((from, growth));
    }

    /// Adds `ns` to slot `slot` of `tid`'s account, spread over the
    /// buckets of [at, at + len) (all at `at` when `len` is 0).
    pub fn acct(&mut self, tid: u32, at: u64, len: u64, slot: usize, ns: u64) {
        if len == 0 {
            self.accounts
                .entry((tid, at >> SHIFT))
                .or_insert([0; NUM_ACCOUNT])[slot] += ns;
            return;
        }
        let bucket = 1u64 << SHIFT;
        let mut t = at;
        while t < at + len {
            let next = ((t >> SHIFT) + 1) * bucket;
            // Cumulative shares, so small counts are not lost to rounding.
            let share = |x: u64| (u128::from(ns) * u128::from(x - at) / u128::from(len)) as u64;
            let part = share(next.min(at + len)) - share(t);
            self.accounts
                .entry((tid, t >> SHIFT))
                .or_insert([0; NUM_ACCOUNT])[slot] += part;
            t = next;
        }
    }

    /// `tid` on the CPU for [at, at + len): `kernel` of it in `slot`
    /// (syscall time, IRQ, steal...), and one sample per ms, `fault_share`
    /// of them in fault handling and the rest in user code.
    pub fn on_cpu(
        &mut self,
        tid: u32,
        at: u64,
        len: u64,
        kernel: &[(Account, u64)],
        fault_share: f64,
    ) {
        self.acct(tid, at, len, Account::OnCpu as usize, len);
        for &(slot, ns) in kernel {
            self.acct(tid, at, len, slot as usize, ns);
        }
        let samples = len / MS;
        let faults = (samples as f64 * fault_share).round() as u64;
        self.acct(tid, at, len, Account::SamplesFault as usize, faults);
        self.acct(
            tid,
            at,
            len,
            Account::SamplesUser as usize,
            samples - faults,
        );
    }

    /// As [`Self::on_cpu`], with the samples (one per ms) split as
    /// `samples` gives them (slot, share); the rest in user code.
    pub fn on_cpu_sampled(
        &mut self,
        tid: u32,
        at: u64,
        len: u64,
        kernel: &[(Account, u64)],
        samples: &[(Account, f64)],
    ) {
        self.acct(tid, at, len, Account::OnCpu as usize, len);
        for &(slot, ns) in kernel {
            self.acct(tid, at, len, slot as usize, ns);
        }
        let all = len / MS;
        let mut left = all;
        for &(slot, share) in samples {
            let n = ((all as f64 * share).round() as u64).min(left);
            self.acct(tid, at, len, slot as usize, n);
            left -= n;
        }
        self.acct(tid, at, len, Account::SamplesUser as usize, left);
    }

    pub fn stall(&mut self, at: u64, len: u64) {
        self.stalls.push((at, len));
    }

    /// A syscall `nr` on the CPU from `at` for `len`, never off it, in
    /// which the sampling timer took `samples` of the thread's samples.
    pub fn long_syscall(&mut self, tid: u32, nr: u32, at: u64, len: u64, samples: u32) {
        self.syscalls.push(SyscallSpan {
            tid,
            nr,
            start_ns: at,
            end_ns: at + len,
            offcpu_ns: 0,
            irq_ns: 0,
            steal_ns: 0,
            spin_ns: 0,
            samples: Some(samples),
        });
    }

    pub fn events(&mut self, at: u64, c: Counter, n: u64) {
        self.buckets.entry(at >> SHIFT).or_insert([0; NUM_COUNTERS])[c as usize] += n;
    }

    /// Background events spread over the run: `per_s` per second.
    pub fn background(&mut self, c: Counter, per_s: u64) {
        let (start, end) = (self.phases[0].1, self.phases[self.phases.len() - 1].2);
        let step = 1_000 * MS / per_s.max(1);
        let mut t = start;
        while t < end {
            self.events(t, c, 1);
            t += step;
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub fn off(
        &mut self,
        tid: u32,
        start: u64,
        runnable: u64,
        blocked: u64,
        preempted: bool,
        by: &str,
        site: Site,
        syscall: Option<u32>,
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
            // The idle task is pid 0 (named swapper/N), as in the kernel.
            next_pid: if by.starts_with("swapper/") { 0 } else { 999 },
            next_comm: by.into(),
            syscall,
            site,
            kstack: None,
            ustack: None,
            waker: None,
            moved_ns: 0,
        });
    }

    /// A memory stall of `kind` on thread `tid` (its time is placed by
    /// the test too: a blocked interval or on-CPU time inside it).
    pub fn mem_stall(
        &mut self,
        tid: u32,
        start: u64,
        len: u64,
        kind: crate::timeline::memory::StallKind,
    ) {
        self.memory_stalls.push(crate::timeline::memory::MemStall {
            tid,
            kind,
            start_ns: start,
            end_ns: start + len,
        });
    }

    pub fn preempted(&mut self, tid: u32, start: u64, len: u64, by: &str) {
        self.off(tid, start, len, 0, true, by, Site::Other, None);
    }

    /// As [`Self::preempted`], moved to another CPU's queue by the load
    /// balancer `moved` before it ran again.
    pub fn preempted_then_moved(&mut self, tid: u32, start: u64, len: u64, moved: u32, by: &str) {
        self.preempted(tid, start, len, by);
        if let Some(last) = self.offcpu.last_mut() {
            last.moved_ns = moved;
        }
    }

    pub fn blocked(&mut self, tid: u32, start: u64, len: u64, site: Site, syscall: Option<u32>) {
        self.off(tid, start, 30 * US, len, false, "", site, syscall);
    }

    /// As [`Self::blocked`], woken by thread `waker` (named `name`) of the
    /// same process, from its own code.
    #[allow(clippy::too_many_arguments)]
    pub fn blocked_woken(
        &mut self,
        tid: u32,
        start: u64,
        len: u64,
        site: Site,
        syscall: Option<u32>,
        waker: u32,
        name: &str,
    ) {
        self.blocked(tid, start, len, site, syscall);
        if let Some(last) = self.offcpu.last_mut() {
            last.waker = Some(crate::timeline::Waker {
                tid: waker,
                tgid: last.tgid,
                comm: name.into(),
                context: crate::timeline::WakeContext::Task,
                kstack: None,
                ustack: None,
            });
        }
    }

    /// The serving thread's ordinary life between requests: idle in
    /// epoll_wait (recorded), then 100 µs on the CPU, every ms, except
    /// where a stall is (placed before this is called).
    pub fn ordinary_sleeps(&mut self, tid: u32) {
        self.ordinary_sleeps_with(tid, &[]);
    }

    /// As [`Self::ordinary_sleeps`], with `kernel` of each 100 µs on the
    /// CPU in those slots (IRQ time, syscalls...).
    pub fn ordinary_sleeps_with(&mut self, tid: u32, kernel: &[(Account, u64)]) {
        let (start, end) = (self.phases[0].1, self.phases[self.phases.len() - 1].2);
        let stalls = self.stalls.clone();
        let mut t = start;
        while t < end {
            if !stalls.iter().any(|&(at, len)| t + MS > at && t < at + len) {
                self.off(tid, t, 5 * US, 800 * US, false, "", Site::Idle, Some(232));
                self.on_cpu(tid, t + 805 * US, 100 * US, kernel, 0.0);
            }
            t += MS;
        }
    }

    pub fn build(self) -> (RunFile, LatencyCapture) {
        let mut requests = Vec::new();
        let mut phases = Vec::new();
        let (start, end) = (self.phases[0].1, self.phases[self.phases.len() - 1].2);
        let origin = start >> SHIFT;
        // Completions per bucket, as the recorder keeps them.
        let mut buckets: Vec<LatencyBucket> = Vec::new();
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
                if let Some((from, growth)) = self.overload.filter(|o| t >= o.0) {
                    done = done.max(t + 50 * US + ((t - from) as f64 * growth) as u64);
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
                    phase: if self.passive { 0 } else { i as u32 },
                };
                d.record(r.corrected());
                let k = ((done >> SHIFT) - origin) as usize;
                if k >= buckets.len() {
                    buckets.resize(k + 1, LatencyBucket::default());
                }
                buckets[k].count += 1;
                buckets[k].sum_ns += r.corrected();
                buckets[k].max_ns = buckets[k].max_ns.max(r.corrected());
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
        if self.passive {
            phases = vec![one_phase(&phases)];
        }
        let run = RunFile {
            schema: crate::runfile::SCHEMA.into(),
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
            account_names: Vec::new(),
            thread_accounts: self
                .accounts
                .iter()
                .map(|(&(tid, epoch), &ns)| ThreadAccount {
                    tid,
                    epoch,
                    top_syscall: None,
                    ns,
                })
                .collect(),
            syscalls: self.syscalls.clone(),
            syscall_totals: BTreeMap::new(),
            sample_period_ns: 1_000_000,
            syscall_time: crate::probes::SyscallTime::Exact,
            samples: 0,
            thread_names: BTreeMap::new(),
            stack_samples: Vec::new(),
            stacks: Default::default(),
            upstreams: Vec::new(),
            memory_stalls: self.memory_stalls,
            memory_cgroup: None,
            ipi_senders: Vec::new(),
            device_irqs: Vec::new(),
            runtime_pauses: self.runtime_pauses,
            clocks: None,
            runtime_gc: self.runtime_gc,
        };
        let lat = LatencyCapture {
            source: "synthetic".into(),
            phases,
            requests,
            requests_over_cap: 0,
            bucket_shift: SHIFT,
            bucket_origin: origin,
            buckets,
        };
        (run, lat)
    }
}

/// The phases merged into one without an offered rate, as a passive
/// recording has it.
fn one_phase(phases: &[LatencyPhase]) -> LatencyPhase {
    let mut d = Distribution::new();
    for p in phases {
        d.merge(&p.corrected.to_distribution());
    }
    LatencyPhase {
        rate: None,
        start_ns: phases.first().map_or(0, |p| p.start_ns),
        end_ns: phases.last().map_or(0, |p| p.end_ns),
        sent: d.count(),
        completed: d.count(),
        timeouts: 0,
        errors: 0,
        corrected: StoredDistribution::from(&d),
    }
}
