//! Server-side latency seen passively, for servers that cannot be given
//! load: the probes report each request the target serves (`--syscalls`:
//! data read from a socket until the response is written on it;
//! `--uprobe`: one call of a function), and this turns them into the same
//! latency capture a load run produces, so the analysis, reports and
//! experiments work on it unchanged. Memory is bounded like the load
//! generator's: distributions, per-bucket summaries and the slow requests.

use std::collections::HashMap;

use correlator_common::{RequestRecord, SOCKET_CONN, UPROBE_FD};
use serde::{Deserialize, Serialize};

use super::capture::LatencyCapture;
use crate::latency::recorder::{BUCKET_SHIFT, Recorder, RequestTimes};

/// Where passive requests come from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PassiveSource {
    /// Request/response pairs inferred from socket syscalls.
    Syscalls,
    /// Calls of `symbol` in `binary`, one timed in `every`.
    Uprobe {
        binary: String,
        symbol: String,
        every: u64,
    },
}

impl PassiveSource {
    pub fn describe(&self) -> String {
        match self {
            PassiveSource::Syscalls => "server-side, socket syscalls".into(),
            PassiveSource::Uprobe {
                binary,
                symbol,
                every,
            } => {
                let sampled = if *every > 1 {
                    format!(", 1 call in {every}")
                } else {
                    String::new()
                };
                format!("server-side, calls of {symbol} in {binary}{sampled}")
            }
        }
    }
}

/// What the passive source saw, beside the latency itself: the evidence
/// that the request pattern held.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PassiveStats {
    pub requests: u64,
    /// Requests whose bytes came in more than one read (partial reads,
    /// or several pipelined requests read one by one and answered once).
    pub multi_read: u64,
    /// Read-then-write pairs on descriptors that are not sockets (files,
    /// pipes, eventfds): ignored.
    pub not_socket: u64,
    /// Writes with no request pending on the connection (a response in
    /// several writes, or data the server pushes unasked).
    pub unpaired_writes: u64,
    /// Records the kernel could not deliver (ring full).
    pub lost: u64,
    /// `--uprobe`: calls of the function while attached (timed or not).
    pub calls: u64,
    /// `--syscalls`: the request count if every read of k times the most
    /// common request size carried k requests (answered together, as
    /// after a stall or with pipelining). Equal to `requests` when each
    /// read is one request.
    pub estimated_requests: u64,
    /// Requests whose read carried at least twice the most common size.
    pub batched: u64,
    /// `--syscalls`: requests timed from the arrival of their bytes in the
    /// socket (`sk_data_ready`); the others from their first read.
    #[serde(default)]
    pub from_arrival: u64,
}

impl PassiveStats {
    /// Whether most requests were timed from their arrival in the socket
    /// (the kernel has `sk_data_ready`; a connection's first request and
    /// the sys_exit pairing of older kernels start at the read).
    pub fn timed_from_arrival(&self) -> bool {
        self.requests > 0 && 2 * self.from_arrival >= self.requests
    }

    /// Share of writes that ended a request.
    fn paired_share(&self) -> f64 {
        let writes = self.requests + self.unpaired_writes;
        if writes == 0 {
            1.0
        } else {
            self.requests as f64 / writes as f64
        }
    }

    /// Warnings when the one-request-one-response pattern did not hold well
    /// enough for the latencies to mean what they say.
    pub fn warnings(&self, source: &PassiveSource) -> Vec<String> {
        let mut out = Vec::new();
        if *source != PassiveSource::Syscalls {
            return out;
        }
        if self.requests == 0 {
            out.push(
                "no request/response pairs on sockets were seen: the target served nothing, or does not use read/recv + write/send"
                    .into(),
            );
            return out;
        }
        let multi = self.multi_read as f64 / self.requests as f64;
        if multi > 0.10 {
            out.push(format!(
                "{:.0}% of requests took several reads before the response: partial reads or pipelining; latencies start at the first read",
                multi * 100.0
            ));
        }
        if self.estimated_requests as f64 > 1.01 * self.requests as f64 {
            let wait = if self.timed_from_arrival() {
                "each is counted from its arrival in the socket (the first and last measured, the ones between spread evenly)"
            } else {
                "their wait in the socket is invisible server-side"
            };
            out.push(format!(
                "{} reads carried several requests' worth of bytes (pipelined or queued behind a stall) and were answered together: about {} requests in all, and {wait}",
                self.batched, self.estimated_requests
            ));
        }
        if self.paired_share() < 0.90 {
            out.push(format!(
                "only {:.0}% of socket writes ended a request ({} unpaired): responses in several writes, pipelined answers or server push; the one-request-one-response pattern does not hold and these latencies are not per request",
                self.paired_share() * 100.0,
                self.unpaired_writes
            ));
        }
        out
    }
}

/// Passive server-side latency as stored in a run file.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ServerLatency {
    pub source: PassiveSource,
    pub stats: PassiveStats,
    /// Where the request pattern did not hold (see `PassiveStats::warnings`).
    pub warnings: Vec<String>,
    pub latency: LatencyCapture,
    /// `--syscalls`: estimated requests (see `PassiveStats::estimated_requests`)
    /// per bucket of `latency` (same origin and width), by completion time.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub estimated_per_bucket: Vec<u32>,
}

/// (tgid, fd) → whether the descriptor is a socket. Looked up once per
/// descriptor, while it is open; a reused fd number keeps its first answer.
#[derive(Debug, Default)]
pub struct SocketCache(HashMap<(u32, u32), bool>);

impl SocketCache {
    /// Whether `r` is a request: a uprobe call, or a read/write pair on a
    /// socket (not a file or a pipe).
    pub fn is_request(&mut self, r: &RequestRecord) -> bool {
        r.fd == UPROBE_FD
            // Seen at the socket tracepoints: a socket by construction.
            || r.fd & SOCKET_CONN != 0
            || *self.0.entry((r.tgid, r.fd)).or_insert_with(|| {
                std::fs::read_link(format!("/proc/{}/fd/{}", r.tgid, r.fd))
                    .is_ok_and(|l| l.to_string_lossy().starts_with("socket:"))
            })
    }

    /// Forgets the descriptors of a process (it exited; its numbers will be
    /// reused by its successor).
    pub fn forget(&mut self, tgid: u32) {
        self.0.retain(|(t, _), _| *t != tgid);
    }
}

/// Turns request records into a latency capture as they are drained.
pub struct Passive {
    source: PassiveSource,
    recorder: Recorder,
    start_ns: u64,
    end_ns: u64,
    sockets: SocketCache,
    /// How many of the first `LEARN` requests came in reads of each size.
    sizes: HashMap<u32, u64>,
    /// The most common request size, once learned.
    common: Option<u32>,
    /// Requests seen before `common` was known.
    pending: Vec<RequestRecord>,
    /// Estimated requests per latency bucket.
    estimated: Vec<u32>,
    stats: PassiveStats,
}

/// Requests whose sizes decide the common request size.
const LEARN: usize = 256;

/// How many requests one read carried: its bytes over the common request
/// size, at least one.
pub fn requests_in(r: &RequestRecord, common: u32) -> u64 {
    let common = u64::from(common.max(1));
    ((u64::from(r.bytes_in) + common / 2) / common).max(1)
}

/// The starts of the `k` requests of one read, answered together at
/// `end_ns`: their bytes arrived from `start_ns` to `last_start_ns`, both
/// measured (`sk_data_ready`); the requests in between are placed evenly
/// between the two (see [`Passive`]'s `record`). At most 65,536: a read
/// carries at most the socket buffer.
pub fn request_starts(r: &RequestRecord, k: u64) -> impl Iterator<Item = u64> + use<> {
    let last = r.last_start_ns.clamp(r.start_ns, r.end_ns);
    let (start, span) = (r.start_ns, last - r.start_ns);
    let k = k.clamp(1, 1 << 16);
    (0..k).map(move |j| {
        if k > 1 {
            start + span * j / (k - 1)
        } else {
            start
        }
    })
}

/// The common request size of a stream of reads, learned from the first
/// [`LEARN`] (the most frequent size; the larger on a tie), as [`Passive`]
/// learns it: what tells a read that carried several queued requests.
#[derive(Debug, Default)]
pub struct RequestSize {
    sizes: HashMap<u32, u64>,
    seen: usize,
    common: Option<u32>,
}

impl RequestSize {
    /// Takes one read; the requests it carried (1 until the size is known).
    pub fn requests_in(&mut self, r: &RequestRecord) -> u64 {
        if let Some(common) = self.common {
            return requests_in(r, common);
        }
        *self.sizes.entry(r.bytes_in).or_default() += 1;
        self.seen += 1;
        if self.seen >= LEARN {
            self.common = self
                .sizes
                .iter()
                .max_by_key(|(size, n)| (**n, **size))
                .map(|(size, _)| *size);
            self.sizes = HashMap::new();
        }
        1
    }
}

impl Passive {
    pub fn new(source: PassiveSource, start_ns: u64) -> Self {
        Self {
            source,
            recorder: Recorder::new(1, start_ns),
            start_ns,
            end_ns: start_ns,
            sockets: SocketCache::default(),
            sizes: HashMap::new(),
            common: None,
            pending: Vec::new(),
            estimated: Vec::new(),
            stats: PassiveStats::default(),
        }
    }

    /// Takes one record; false when it was not a request (not a socket).
    pub fn push(&mut self, r: &RequestRecord) -> bool {
        if !self.sockets.is_request(r) {
            self.stats.not_socket += 1;
            return false;
        }
        self.push_checked(r);
        true
    }

    /// Counts records the caller's [`SocketCache`] turned away.
    pub fn add_not_socket(&mut self, n: u64) {
        self.stats.not_socket += n;
    }

    /// Takes a record the caller already checked with a [`SocketCache`]
    /// (`correlator watch` checks each record once, as it arrives, while
    /// its descriptor is still open, and builds a `Passive` per report).
    pub fn push_checked(&mut self, r: &RequestRecord) {
        if r.end_ns < r.start_ns {
            return;
        }
        self.stats.requests += 1;
        if r.reads > 1 {
            self.stats.multi_read += 1;
        }
        self.end_ns = self.end_ns.max(r.end_ns);
        if r.fd == UPROBE_FD {
            self.record(r, 1);
            return;
        }
        match self.common {
            Some(common) => self.account(r, common),
            None => {
                // Held until the common request size is known.
                *self.sizes.entry(r.bytes_in).or_default() += 1;
                self.pending.push(*r);
                if self.pending.len() >= LEARN {
                    self.learn();
                }
            }
        }
    }

    /// Counts a request as k requests when its read carried k × the most
    /// common request size, and records k latencies.
    fn account(&mut self, r: &RequestRecord, common: u32) {
        let k = requests_in(r, common);
        self.stats.estimated_requests += k;
        if k >= 2 {
            self.stats.batched += 1;
        }
        let origin = self.recorder.bucket_origin;
        if let Some(i) = (r.end_ns >> BUCKET_SHIFT)
            .checked_sub(origin)
            .and_then(|i| usize::try_from(i).ok())
            .filter(|&i| i < 1 << 26)
        {
            if i >= self.estimated.len() {
                self.estimated.resize(i + 1, 0);
            }
            self.estimated[i] = self.estimated[i].saturating_add(k as u32);
        }
        self.record(r, k);
    }

    /// Records the `k` requests of one read, answered together at
    /// `end_ns`. Their bytes arrived from `start_ns` to `last_start_ns`,
    /// both measured (`sk_data_ready`); the requests in between are placed
    /// evenly between the two (as an open-loop or steady client sends them),
    /// so each of the k counts in the percentiles with a latency no larger
    /// than the first's and no smaller than the last's. A request is one
    /// latency; counting the whole read once would let the requests queued
    /// behind a stall (the slow ones) vanish from the tail.
    fn record(&mut self, r: &RequestRecord, k: u64) {
        for start in request_starts(r, k) {
            let times = RequestTimes {
                intended_ns: start,
                sent_ns: start,
                done_ns: r.end_ns,
                connection: if r.fd == UPROBE_FD { r.tid } else { r.fd },
                phase: 0,
            };
            self.recorder.sent(0, start, 0, true);
            self.recorder.answered(times, true, true);
        }
    }

    /// Fixes the common size and accounts the requests held until then.
    fn learn(&mut self) {
        let common = self
            .sizes
            .iter()
            .max_by_key(|(size, n)| (**n, **size))
            .map_or(1, |(size, _)| *size);
        self.common = Some(common);
        for r in std::mem::take(&mut self.pending) {
            self.account(&r, common);
        }
        self.sizes = HashMap::new();
    }

    /// The capture (one phase covering the recording) and the pattern
    /// evidence; `kernel` holds the kernel side's counts (lost, unpaired,
    /// calls).
    pub fn finish(mut self, end_ns: u64, kernel: &PassiveStats) -> ServerLatency {
        if self.source == PassiveSource::Syscalls {
            if self.common.is_none() {
                self.learn();
            }
        } else {
            self.stats.estimated_requests = self.stats.requests;
        }
        self.stats.lost = kernel.lost;
        self.stats.unpaired_writes = kernel.unpaired_writes;
        self.stats.calls = kernel.calls;
        self.stats.from_arrival = kernel.from_arrival.min(self.stats.requests);
        let end = end_ns.max(self.end_ns);
        let describe = if self.stats.timed_from_arrival() {
            format!("{}, from the request's arrival", self.source.describe())
        } else {
            self.source.describe()
        };
        let latency =
            LatencyCapture::from_recorder(describe, &self.recorder, &[(self.start_ns, end, None)]);
        ServerLatency {
            warnings: self.stats.warnings(&self.source),
            source: self.source,
            stats: self.stats,
            latency,
            estimated_per_bucket: self.estimated,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(start: u64, end: u64) -> RequestRecord {
        RequestRecord {
            tgid: 1,
            tid: 7,
            fd: UPROBE_FD,
            reads: 1,
            bytes_in: 0,
            bytes_out: 0,
            start_ns: start,
            end_ns: end,
            last_start_ns: start,
        }
    }

    /// watch's histogram counts a read that carried ten queued requests
    /// as ten latencies, from the first arrival's to the last's, once the
    /// common size is learned (one each before).
    #[test]
    fn a_read_of_queued_requests_is_each_of_its_requests() {
        let read = |bytes: u32, start: u64, last: u64, end: u64| RequestRecord {
            fd: 5,
            bytes_in: bytes,
            start_ns: start,
            last_start_ns: last,
            end_ns: end,
            ..call(0, 0)
        };
        let mut sizes = RequestSize::default();
        let queued = read(140, 0, 9_000, 10_000);
        assert_eq!(sizes.requests_in(&queued), 1, "not learned yet");
        for _ in 0..LEARN {
            assert_eq!(sizes.requests_in(&read(14, 0, 0, 50)), 1);
        }
        let k = sizes.requests_in(&queued);
        assert_eq!(k, 10);
        let latencies: Vec<u64> = request_starts(&queued, k).map(|s| 10_000 - s).collect();
        assert_eq!(
            latencies,
            (0..10).map(|j| 10_000 - 1_000 * j).collect::<Vec<_>>()
        );
    }

    #[test]
    fn calls_become_a_latency_capture() {
        let source = PassiveSource::Uprobe {
            binary: "/bin/x".into(),
            symbol: "f".into(),
            every: 1,
        };
        let mut p = Passive::new(source, 1_000);
        for i in 0..100 {
            let s = 1_000_000 + i * 10_000;
            p.push(&call(s, s + 2_000 + i));
        }
        let server = p.finish(10_000_000, &PassiveStats::default());
        assert_eq!(server.stats.requests, 100);
        let d = server.latency.merged();
        assert_eq!(d.count(), 100);
        let p50 = d.percentile(50.0).value_ns.expect("p50");
        assert!((2_040..=2_060).contains(&p50), "{p50}");
    }

    #[test]
    fn reads_of_several_requests_are_estimated_by_size() {
        let mut p = Passive::new(PassiveSource::Syscalls, 0);
        p.sockets.0.insert((1, 5), true);
        let read = |bytes: u32, t: u64| RequestRecord {
            tgid: 1,
            tid: 1,
            fd: 5,
            reads: 1,
            bytes_in: bytes,
            bytes_out: 3,
            start_ns: t,
            end_ns: t + 1_000,
            last_start_ns: t,
        };
        for i in 0..90 {
            p.push(&read(14, 1_000_000 + i * 10_000));
        }
        // After a stall: 10 reads of 3 queued requests each.
        for i in 0..10 {
            p.push(&read(42, 3_000_000 + i * 10_000));
        }
        let s = p.finish(10_000_000, &PassiveStats::default());
        assert_eq!(s.stats.requests, 100);
        assert_eq!(s.stats.estimated_requests, 90 + 30);
        assert_eq!(s.stats.batched, 10);
        assert!(
            s.warnings.iter().any(|w| w.contains("several requests")),
            "{:?}",
            s.warnings
        );
    }

    #[test]
    fn broken_pattern_is_reported() {
        let stats = PassiveStats {
            requests: 100,
            multi_read: 40,
            unpaired_writes: 60,
            ..PassiveStats::default()
        };
        let w = stats.warnings(&PassiveSource::Syscalls);
        assert_eq!(w.len(), 2, "{w:?}");
        let fine = PassiveStats {
            requests: 100,
            multi_read: 1,
            unpaired_writes: 2,
            ..PassiveStats::default()
        };
        assert!(fine.warnings(&PassiveSource::Syscalls).is_empty());
    }
}
