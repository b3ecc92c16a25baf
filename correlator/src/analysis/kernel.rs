//! The kernel side of the correlation: event counts in a time window from
//! the run file's buckets, and the off-CPU intervals of target threads
//! that overlap a window.

use std::collections::HashMap;

use correlator_common::{Counter, NUM_COUNTERS};

use crate::timeline::{OffCpu, runfile::RunFile};

/// Counts summed over a bucket range.
pub type Sums = [u64; NUM_COUNTERS];

/// Bucketed kernel counts with range sums by binary search.
pub struct KernelTimeline<'a> {
    run: &'a RunFile,
    shift: u32,
}

impl<'a> KernelTimeline<'a> {
    pub fn new(run: &'a RunFile) -> Self {
        Self {
            run,
            shift: run.bucket_ns.max(1).trailing_zeros(),
        }
    }

    pub fn bucket_ns(&self) -> u64 {
        1 << self.shift
    }

    /// Bucket numbers covering [start, end].
    pub fn bucket_range(&self, start_ns: u64, end_ns: u64) -> (u64, u64) {
        (start_ns >> self.shift, end_ns >> self.shift)
    }

    /// Sums of buckets first..=last.
    pub fn sums(&self, first: u64, last: u64) -> Sums {
        let rows = &self.run.buckets;
        let from = rows.partition_point(|(e, _)| *e < first);
        let mut sums = [0; NUM_COUNTERS];
        for (e, counts) in &rows[from..] {
            if *e > last {
                break;
            }
            for (s, c) in sums.iter_mut().zip(counts) {
                *s += c;
            }
        }
        sums
    }

    /// Sums per bucket, for plots: (bucket start ns, counts) of every bucket
    /// with events in [start, end].
    pub fn rows(&self, start_ns: u64, end_ns: u64) -> impl Iterator<Item = (u64, &Sums)> {
        let (first, last) = self.bucket_range(start_ns, end_ns);
        let rows = &self.run.buckets;
        let from = rows.partition_point(|(e, _)| *e < first);
        rows[from..]
            .iter()
            .take_while(move |(e, _)| *e <= last)
            .map(move |(e, c)| (e << self.shift, c))
    }
}

pub fn get(s: &Sums, c: Counter) -> u64 {
    s[c as usize]
}

/// What kind of off-CPU time a sub-interval is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OffKind {
    /// Waiting for a CPU (preempted, or woken and not yet running).
    Runnable,
    Blocked,
}

/// One off-CPU sub-interval of a thread.
#[derive(Clone, Debug)]
pub struct Span<'a> {
    pub kind: OffKind,
    pub start_ns: u64,
    pub end_ns: u64,
    pub record: &'a OffCpu,
}

impl Span<'_> {
    pub fn duration_ns(&self) -> u64 {
        self.end_ns - self.start_ns
    }

    pub fn overlap(&self, start: u64, end: u64) -> u64 {
        self.end_ns
            .min(end)
            .saturating_sub(self.start_ns.max(start))
    }
}

/// Splits a record into its blocked and runnable parts.
fn spans(r: &OffCpu) -> impl Iterator<Item = Span<'_>> {
    let wake = r.start_ns + r.blocked_ns;
    let blocked = (r.blocked_ns > 0).then(|| Span {
        kind: OffKind::Blocked,
        start_ns: r.start_ns,
        end_ns: wake.min(r.end_ns),
        record: r,
    });
    let runnable = (r.runnable_ns > 0).then(|| Span {
        kind: OffKind::Runnable,
        start_ns: wake.min(r.end_ns),
        end_ns: r.end_ns,
        record: r,
    });
    blocked.into_iter().chain(runnable)
}

/// Off-CPU spans of every target thread, with each thread's typical span
/// length per kind (p95 of all its spans of that kind): the yardstick a span
/// in an episode is compared with.
pub struct Threads<'a> {
    /// Spans sorted by start.
    spans: Vec<Span<'a>>,
    typical: HashMap<(u32, bool), u64>,
    /// Longest span, to bound the search for overlaps.
    longest: u64,
}

impl<'a> Threads<'a> {
    pub fn new(records: &'a [OffCpu], min_record_ns: u64) -> Self {
        let mut spans: Vec<Span<'a>> = records.iter().flat_map(spans).collect();
        spans.sort_by_key(|s| s.start_ns);
        let mut lengths: HashMap<(u32, bool), Vec<u64>> = HashMap::new();
        for s in &spans {
            lengths
                .entry((s.record.tid, s.kind == OffKind::Runnable))
                .or_default()
                .push(s.duration_ns());
        }
        let typical = lengths
            .into_iter()
            .map(|(k, mut v)| {
                v.sort_unstable();
                let p95 = v[(v.len() * 95 / 100).min(v.len() - 1)];
                (k, p95.max(min_record_ns))
            })
            .collect();
        let longest = spans.iter().map(Span::duration_ns).max().unwrap_or(0);
        Self {
            spans,
            typical,
            longest,
        }
    }

    /// Spans overlapping [start, end].
    pub fn overlapping(&self, start: u64, end: u64) -> impl Iterator<Item = &Span<'a>> {
        let from = self
            .spans
            .partition_point(|s| s.start_ns < start.saturating_sub(self.longest));
        self.spans[from..]
            .iter()
            .take_while(move |s| s.start_ns < end)
            .filter(move |s| s.end_ns > start)
    }

    /// Per thread, runnable time per ns outside the given windows (inside
    /// [start, end]): the baseline that runnable time in an episode is
    /// compared with. A thread that shares its CPU anyway waits there too.
    pub fn runnable_rates(
        &self,
        windows: &[(u64, u64)],
        start: u64,
        end: u64,
    ) -> HashMap<u32, f64> {
        let outside = (end.saturating_sub(start))
            .saturating_sub(windows.iter().map(|(a, b)| b.saturating_sub(*a)).sum());
        let mut total: HashMap<u32, u64> = HashMap::new();
        for s in self.spans.iter().filter(|s| s.kind == OffKind::Runnable) {
            let inside_windows: u64 = windows.iter().map(|&(a, b)| s.overlap(a, b)).sum();
            let t = s.overlap(start, end).saturating_sub(inside_windows);
            *total.entry(s.record.tid).or_default() += t;
        }
        total
            .into_iter()
            .map(|(tid, t)| (tid, t as f64 / outside.max(1) as f64))
            .collect()
    }

    /// Runnable time in [start, end] above each thread's baseline rate, for
    /// the worst-hit thread: (excess ns, who ran instead most, if known).
    pub fn runnable_excess(
        &self,
        rates: &HashMap<u32, f64>,
        start: u64,
        end: u64,
    ) -> (u64, Option<String>) {
        let mut per_thread: HashMap<u32, (u64, HashMap<String, u64>)> = HashMap::new();
        for s in self
            .overlapping(start, end)
            .filter(|s| s.kind == OffKind::Runnable)
        {
            let o = s.overlap(start, end);
            let entry = per_thread.entry(s.record.tid).or_default();
            entry.0 += o;
            if !s.record.next_comm.is_empty() {
                let who = format!("{} (pid {})", s.record.next_comm, s.record.next_pid);
                *entry.1.entry(who).or_default() += o;
            }
        }
        let d = end.saturating_sub(start) as f64;
        per_thread
            .into_iter()
            .map(|(tid, (t, who))| {
                let expected = rates.get(&tid).copied().unwrap_or(0.0) * d;
                let excess = (t as f64 - expected).max(0.0) as u64;
                (
                    excess,
                    who.into_iter().max_by_key(|(_, ns)| *ns).map(|(w, _)| w),
                )
            })
            .max_by_key(|(e, _)| *e)
            .unwrap_or((0, None))
    }

    /// Typical length of a thread's spans of one kind.
    pub fn typical(&self, tid: u32, kind: OffKind) -> u64 {
        self.typical
            .get(&(tid, kind == OffKind::Runnable))
            .copied()
            .unwrap_or(0)
    }

    /// The worst atypical span of `kind` in [start, end]: its overlap with
    /// the window minus the thread's typical span length. Returns (excess
    /// ns, the span).
    pub fn worst_excess(&self, kind: OffKind, start: u64, end: u64) -> Option<(u64, &Span<'a>)> {
        self.overlapping(start, end)
            .filter(|s| s.kind == kind)
            .map(|s| {
                let excess = s
                    .overlap(start, end)
                    .saturating_sub(self.typical(s.record.tid, kind));
                (excess, s)
            })
            .max_by_key(|(e, _)| *e)
    }
}
