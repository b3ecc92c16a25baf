//! The kernel side of the correlation: event counts in a time window from
//! the run file's buckets, and the off-CPU intervals of target threads
//! that overlap a window.

use std::collections::HashMap;

use correlator_common::{Counter, NUM_COUNTERS};

use crate::runfile::RunFile;
use crate::timeline::OffCpu;

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

/// Off-CPU records of every target thread, by thread and sorted by start,
/// for window queries.
///
/// An index of positions (4 bytes a record), not a list of spans: a
/// minute at 10,000 req/s has half a million records, and their spans
/// (32 bytes each, two a record) were 35 MB of the report's peak memory.
pub struct Threads<'a> {
    records: &'a [OffCpu],
    by_thread: HashMap<u32, ThreadIndex>,
}

/// One thread's records: positions sorted by start, and the longest, to
/// bound the search for overlaps.
#[derive(Default)]
struct ThreadIndex {
    order: Vec<u32>,
    longest: u64,
}

impl<'a> Threads<'a> {
    pub fn new(records: &'a [OffCpu]) -> Self {
        let mut by_thread: HashMap<u32, ThreadIndex> = HashMap::new();
        for (i, r) in records.iter().enumerate() {
            let Ok(i) = u32::try_from(i) else { break };
            let t = by_thread.entry(r.tid).or_default();
            t.order.push(i);
            t.longest = t.longest.max(r.end_ns.saturating_sub(r.start_ns));
        }
        for t in by_thread.values_mut() {
            t.order
                .sort_unstable_by_key(|&i| (records[i as usize].start_ns, i));
            t.order.shrink_to_fit();
        }
        Self { records, by_thread }
    }

    /// Thread `tid`'s spans overlapping [start, end].
    pub fn overlapping(&self, tid: u32, start: u64, end: u64) -> impl Iterator<Item = Span<'a>> {
        let records = self.records;
        let (order, longest) = self
            .by_thread
            .get(&tid)
            .map_or((&[][..], 0), |t| (&t.order[..], t.longest));
        let from = order
            .partition_point(|&i| records[i as usize].start_ns < start.saturating_sub(longest));
        order[from..]
            .iter()
            .map(move |&i| &records[i as usize])
            .take_while(move |r| r.start_ns < end)
            .flat_map(spans)
            .filter(move |s| s.end_ns > start && s.start_ns < end)
    }

    /// The threads with records, in tid order.
    pub fn tids(&self) -> Vec<u32> {
        let mut tids: Vec<u32> = self.by_thread.keys().copied().collect();
        tids.sort_unstable();
        tids
    }

    /// Thread `tid`'s records by start (ties in the run's order): their
    /// positions in the run's list.
    pub fn positions(&self, tid: u32) -> impl Iterator<Item = usize> + '_ {
        self.by_thread
            .get(&tid)
            .into_iter()
            .flat_map(|t| t.order.iter().map(|&i| i as usize))
    }

    /// Every span of every thread, in no particular order.
    pub fn all(&self) -> impl Iterator<Item = Span<'a>> {
        self.records.iter().flat_map(spans)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::columnar::StreamedRows as _;

    /// A record of `tid`: blocked from `start` for `blocked` ns, then
    /// runnable until `end`.
    fn record(tid: u32, start: u64, blocked: u64, end: u64) -> OffCpu {
        OffCpu {
            tid,
            start_ns: start,
            blocked_ns: blocked,
            runnable_ns: end - start - blocked,
            end_ns: end,
            ..OffCpu::blank()
        }
    }

    #[test]
    fn overlapping_gives_one_threads_spans_in_the_window() {
        let records = [
            record(1, 500, 100, 700),
            // Long, and starting long before the window: still found.
            record(1, 0, 10_000, 10_000),
            record(2, 550, 50, 650),
            record(1, 900, 40, 950),
            record(1, 2_000, 50, 2_100),
        ];
        let threads = Threads::new(&records);
        let found: Vec<(OffKind, u64, u64)> = threads
            .overlapping(1, 600, 1_000)
            .map(|s| (s.kind, s.start_ns, s.end_ns))
            .collect();
        assert_eq!(
            found,
            [
                (OffKind::Blocked, 0, 10_000),
                (OffKind::Runnable, 600, 700),
                (OffKind::Blocked, 900, 940),
                (OffKind::Runnable, 940, 950),
            ]
        );
        // The blocked part of the first record ends at the window's start.
        assert_eq!(threads.overlapping(2, 0, 560).count(), 1);
        assert_eq!(threads.overlapping(3, 0, u64::MAX).count(), 0);
        assert_eq!(threads.tids(), [1, 2]);
        assert_eq!(threads.positions(1).collect::<Vec<_>>(), [1, 0, 3, 4]);
        assert_eq!(threads.all().count(), 9);
    }

    #[test]
    fn positions_keep_the_runs_order_on_ties() {
        let records = [record(1, 5, 1, 9), record(1, 5, 2, 7), record(1, 1, 1, 2)];
        let threads = Threads::new(&records);
        assert_eq!(threads.positions(1).collect::<Vec<_>>(), [2, 0, 1]);
    }
}
