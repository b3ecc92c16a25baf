//! The flight recorder: what the probes drained over the last `--keep`,
//! and nothing older. Memory is bounded by the window, not by how long
//! watch has been attached: the timeline and steal samples are pruned
//! every second, the request records are a ring with a hard cap (records
//! past it are counted, never silently dropped), and the kernel totals
//! are kept as one reading per second so a window's counts are a
//! difference of two readings.

use std::collections::{BTreeMap, VecDeque};

use anyhow::Result;
use correlator_common::RequestRecord;

use crate::{
    latency::passive::{Passive, PassiveSource, RequestSize, SocketCache, request_starts},
    probes::{KernelTotals, Probes},
    runfile::{Capture, Overhead, StopReason},
    target::Target,
    timeline::{Timeline, steal::StealSampler},
};

/// Everything kept for the last `keep_ns`.
pub struct FlightRecorder {
    keep_ns: u64,
    pub timeline: Timeline,
    steal: StealSampler,
    /// Requests (checked to be on sockets), in completion order.
    requests: VecDeque<RequestRecord>,
    max_requests: usize,
    /// Requests not kept because the ring was full.
    pub requests_over_cap: u64,
    /// Records the socket check turned away (files, pipes).
    not_socket: u64,
    sockets: SocketCache,
    /// The common request size: how many requests a read carried.
    sizes: RequestSize,
    /// One reading of the kernel totals per second: (time, totals).
    totals: VecDeque<(u64, KernelTotals)>,
    /// When the recorder started (attach or re-attach): no window reaches
    /// further back.
    pub since_ns: u64,
    /// Every bucket before this time has been drained.
    drained_ns: u64,
}

impl FlightRecorder {
    pub fn new(
        keep_ns: u64,
        bucket_ns: u64,
        max_records: usize,
        max_requests: usize,
        now: u64,
    ) -> Self {
        let mut steal = StealSampler::default();
        steal.sample(now);
        Self {
            keep_ns,
            timeline: Timeline::new(bucket_ns, max_records),
            steal,
            requests: VecDeque::new(),
            max_requests,
            requests_over_cap: 0,
            not_socket: 0,
            sockets: SocketCache::default(),
            sizes: RequestSize::default(),
            totals: VecDeque::new(),
            since_ns: now,
            drained_ns: now,
        }
    }

    /// The probes were drained at `ns`: every bucket that ended two
    /// bucket widths before it is in the timeline (the drain leaves the
    /// bucket in progress and one more for a late writer).
    pub fn drained_at(&mut self, ns: u64) {
        self.drained_ns = ns.saturating_sub(2 * self.timeline.bucket_ns());
    }

    /// Keeps a drained request record if it is a request, and gives
    /// `observe` the latency (ns) of each request it carried: a read that
    /// took several requests queued behind a stall is several latencies,
    /// spread over their arrivals as the report spreads them (counted
    /// once, the queued requests vanished from watch's histogram: 0.5% of
    /// requests above 41 ms against the client's 1.4% above 66 ms).
    /// Returns whether it was a request.
    pub fn push_request(&mut self, r: &RequestRecord, mut observe: impl FnMut(u64)) -> bool {
        if !self.sockets.is_request(r) {
            self.not_socket += 1;
            return false;
        }
        let k = self.sizes.requests_in(r);
        for start in request_starts(r, k) {
            observe(r.end_ns.saturating_sub(start));
        }
        if self.requests.len() >= self.max_requests {
            // The oldest goes: the ring always holds the latest requests.
            self.requests.pop_front();
            self.requests_over_cap += 1;
        }
        self.requests.push_back(*r);
        true
    }

    /// Once a second: a reading of the kernel totals, a steal sample, and
    /// everything older than the window forgotten.
    pub fn second(&mut self, now: u64, totals: KernelTotals) {
        self.steal.sample(now);
        self.totals.push_back((now, totals));
        let cut = now.saturating_sub(self.keep_ns);
        // Keep the last reading at or before the cut: a window starts there.
        while self.totals.len() >= 2 && self.totals[1].0 <= cut {
            self.totals.pop_front();
        }
        let from = self.totals.front().map_or(cut, |t| t.0);
        self.timeline.prune_before(from);
        self.steal.prune_before(from);
        while self.requests.front().is_some_and(|r| r.end_ns < from) {
            self.requests.pop_front();
        }
    }

    /// Requests kept now.
    pub fn requests(&self) -> usize {
        self.requests.len()
    }

    /// The window between two readings of the kernel totals, the oldest
    /// kept and the newest whose buckets are all drained, as a capture: what
    /// a `correlator record` of that window would have written. Bounded by
    /// readings so the window's counts (a difference of two readings) and
    /// its drained buckets cover the same time, and a shortfall between
    /// them is a real loss.
    ///
    /// `span_ns`: only the last this much (at least one second), not all
    /// that is kept.
    pub fn capture(&self, w: Window<'_>, span_ns: Option<u64>) -> Result<Capture> {
        let end = self
            .totals
            .iter()
            .rposition(|(t, _)| *t <= self.drained_ns)
            .unwrap_or(0);
        let start = match span_ns {
            Some(span) => {
                let end_t = self.totals.get(end).map_or(0, |r| r.0);
                self.totals
                    .iter()
                    .take(end)
                    .rposition(|(t, _)| *t + span <= end_t)
                    .unwrap_or(0)
            }
            None => 0,
        };
        let (started_ns, first) = self
            .totals
            .get(start)
            .map_or((self.since_ns, KernelTotals::default()), |(t, k)| {
                (*t, k.clone())
            });
        let (ended_ns, last) = self
            .totals
            .get(end)
            .map_or((started_ns, first.clone()), |(t, k)| (*t, k.clone()));
        let kernel = last.since(&first);
        let mut timeline = self.timeline.clone();
        timeline.prune_before(started_ns);
        timeline.prune_after(ended_ns);
        let server_latency = w.passive.map(|source| {
            let mut p = Passive::new(source, started_ns);
            p.add_not_socket(self.not_socket);
            for r in self
                .requests
                .iter()
                .filter(|r| r.start_ns >= started_ns && r.end_ns <= ended_ns)
            {
                p.push_checked(r);
            }
            p.finish(ended_ns, &kernel.passive)
        });
        let mut thread_names = BTreeMap::new();
        w.target.thread_names(w.follow_children, &mut thread_names);
        let syscall_path = w.probes.and_then(Probes::syscall_path);
        let hook_dispatch = w.probes.and_then(Probes::hook_dispatch);
        let stacks = match (w.stacks, w.probes) {
            (true, Some(p)) => crate::symbols::symbolize(w.target.pid, &p.raw_stacks(&timeline)),
            _ => Default::default(),
        };
        let kernel_gcs = kernel.runtime_gcs;
        let mut notes = w.notes;
        if self.requests_over_cap > 0 {
            notes.push(format!(
                "the flight recorder's request ring was full: {} older requests were dropped (raise --max-requests)",
                self.requests_over_cap
            ));
        }
        Ok(Capture {
            target: w.target.clone(),
            follow_children: w.follow_children,
            started_ns,
            ended_ns,
            stop_reason: StopReason::Triggered,
            min_offcpu_record_ns: w.min_offcpu_record_ns,
            timeline,
            kernel,
            overhead: Overhead {
                stats_enabled: !w.programs.is_empty(),
                programs: w.programs,
                syscall_path,
                hook_dispatch,
                // Already scaled to the window by watch (its own sampled second).
                sampled_ns: None,
            },
            notes,
            server_latency,
            steal: self
                .steal
                .samples()
                .iter()
                .filter(|s| s.end_ns >= started_ns)
                .cloned()
                .collect(),
            sample_period_ns: w.sample_period_ns,
            syscall_time: w.syscall_time,
            runtime_gc: w.probes.and_then(|p| p.runtime_gc_run(kernel_gcs)),
            thread_names,
            stacks,
            // A window is cut from a long attach: no PSI reading at its
            // start (the kernel's totals are not kept per window).
            memory_pressure_from: None,
        })
    }
}

/// What a window's capture needs from the attached session.
pub struct Window<'a> {
    /// The attached probes, for the stacks (None: a synthetic feed).
    pub probes: Option<&'a Probes>,
    pub target: &'a Target,
    pub follow_children: bool,
    pub passive: Option<PassiveSource>,
    pub stacks: bool,
    pub min_offcpu_record_ns: u64,
    pub sample_period_ns: u64,
    pub syscall_time: crate::probes::SyscallTime,
    /// Program costs from the last sampled second (empty: not sampled yet).
    pub programs: Vec<crate::probes::ProgramCost>,
    pub notes: Vec<String>,
}
