//! Native Perfetto traces (protobuf `TracePacket`s with `TrackEvent`s),
//! opened by ui.perfetto.dev and `trace_processor`, mergeable with a
//! system trace of the same machine through the clock snapshot.
//!
//! What is in it:
//! - one track per target thread, named by its comm, with Running /
//!   Runnable (preempted by X) / Blocked (wait site) / Idle slices from the
//!   off-CPU records, and on-CPU samples as instants (`--stacks`);
//! - requests as slices on lanes (child tracks) allocated so that slices
//!   never overlap on a track: overlapping requests, the slow ones above
//!   all, are legal. Every kept request at or above the spike threshold is
//!   written; faster ones are sampled (said so in the track description);
//! - episodes and families as slices with their account in the args;
//! - kernel counters as counter tracks with units;
//! - flows from each slow request to the off-CPU interval (or, failing
//!   that, the on-CPU sample) that delayed it.
//!
//! Written streaming: each packet is encoded and written on its own
//! (a `Trace` is just repeated field 1), so memory is what the report
//! already holds plus per-request lane numbers, not the trace.

pub mod proto;

use std::{
    cmp::Reverse,
    collections::{BTreeMap, BinaryHeap, HashMap},
    fs::File,
    io::{BufWriter, Write},
    path::Path,
};

use anyhow::{Context as _, Result};
use prost::Message as _;
use proto::{
    Clock, ClockSnapshot, CounterDescriptor, Data, DebugAnnotation, ProcessDescriptor,
    ThreadDescriptor, TracePacket, TrackDescriptor, TrackEvent, Value,
};

use crate::{
    analysis::kernel::Threads,
    latency::{capture::LatencyCapture, fmt_ns, recorder::RequestTimes},
    runfile::RunFile,
    timeline::{
        OffCpu,
        stacks::{Sample, StackKind},
        syscalls::{self, Site},
    },
};

use super::Report;

/// Identifies our traces' layout in the first annotation.
pub const SCHEMA: &str = "correlator.perfetto/v2";

/// Requests below the spike threshold written at most (sampled evenly
/// beyond that); the ones above are always written.
const MAX_FAST_REQUESTS: usize = 100_000;

/// The one packet sequence of the trace.
const SEQUENCE: u32 = 1;

/// What a trace holds, for the caller to print.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TraceSummary {
    pub packets: u64,
    pub slow_requests: u64,
    pub fast_requests_written: u64,
    pub fast_requests_skipped: u64,
    pub flows: u64,
    pub notes: Vec<String>,
}

/// Track uuids: a kind in the top 16 bits, a number below.
mod uuid {
    const fn make(kind: u64, n: u64) -> u64 {
        (kind << 48) | (n & 0xffff_ffff_ffff)
    }
    pub const RUN: u64 = make(1, 0);
    pub const EPISODES: u64 = make(2, 0);
    pub fn process(pid: u32) -> u64 {
        make(3, u64::from(pid))
    }
    pub fn thread(tid: u32) -> u64 {
        make(4, u64::from(tid))
    }
    /// Request lanes of group `g` (0 client, 1 server-side); lane 0 of a
    /// group is its parent track.
    pub fn lane(g: u64, lane: usize) -> u64 {
        make(5 + g, lane as u64)
    }
    pub fn family(i: usize) -> u64 {
        make(7, i as u64 + 1)
    }
    pub fn counter(i: usize) -> u64 {
        make(8, i as u64)
    }
}

/// Writes the trace of `run` (analysed as `report`) to `path`.
pub fn write(report: &Report, run: &RunFile, path: &Path) -> Result<TraceSummary> {
    let file = File::create(path).with_context(|| format!("create {}", path.display()))?;
    let mut w = Writer::new(BufWriter::new(file));
    let summary = write_trace(&mut w, report, run)?;
    w.out
        .flush()
        .with_context(|| format!("write {}", path.display()))?;
    Ok(TraceSummary {
        packets: w.packets,
        ..summary
    })
}

fn write_trace<W: Write>(
    w: &mut Writer<W>,
    report: &Report,
    run: &RunFile,
) -> Result<TraceSummary> {
    let mut summary = TraceSummary::default();
    let clocks = run.clocks.unwrap_or_else(|| {
        summary.notes.push(
            "the run file has no clock snapshot (recorded before it was kept): \
             BOOTTIME and wall time are tied to CLOCK_MONOTONIC as of now, \
             wrong by any suspend since the run"
                .into(),
        );
        crate::clock::ClockSnapshot::now()
    });
    w.clock_snapshot(&clocks)?;
    let threshold = report.latency.threshold_ns.unwrap_or(u64::MAX);
    w.track(TrackDescriptor {
        uuid: Some(uuid::RUN),
        name: Some(format!(
            "correlator: {} (pid {})",
            run.target.comm, run.target.pid
        )),
        ..Default::default()
    })?;
    w.track(TrackDescriptor {
        uuid: Some(uuid::EPISODES),
        name: Some("episodes".into()),
        description: Some(
            "Windows where requests exceeded the spike threshold, with their time account".into(),
        ),
        ..Default::default()
    })?;
    let targets = Targets::new(run);
    write_threads(w, run, &targets)?;

    let mut flows = Flows::default();
    let groups = [
        run.latency.as_ref().map(|lat| RequestGroup {
            id: 0,
            name: "requests (client, from intended send time)",
            latency: lat,
        }),
        run.server_latency.as_ref().map(|s| RequestGroup {
            id: 1,
            name: "requests (server side, seen by the probes)",
            latency: &s.latency,
        }),
    ];
    for group in groups.iter().flatten() {
        write_requests(w, group, threshold, run, &mut flows, &mut summary)?;
    }
    write_offcpu(w, run, &targets, &flows)?;
    write_samples(w, run, &flows)?;
    write_episodes(w, report)?;
    write_counters(w, run)?;
    summary.flows = flows.count;
    w.event(
        run.started_ns,
        TrackEvent {
            r#type: Some(proto::INSTANT),
            track_uuid: Some(uuid::RUN),
            name: Some("correlator run".into()),
            debug_annotations: vec![
                annotation("schema", &SCHEMA.into()),
                annotation("report_schema", &report.schema.clone().into()),
                annotation("latency_source", &report.latency.source.clone().into()),
                annotation("spike_threshold_ns", &report.latency.threshold_ns.into()),
                annotation("slow_requests_written", &summary.slow_requests.into()),
                annotation(
                    "fast_requests_written",
                    &summary.fast_requests_written.into(),
                ),
                annotation(
                    "fast_requests_not_written",
                    &summary.fast_requests_skipped.into(),
                ),
                annotation("min_offcpu_record_ns", &run.min_offcpu_record_ns.into()),
                annotation("notes", &serde_json::json!(summary.notes)),
            ],
            ..Default::default()
        },
    )?;
    Ok(summary)
}

/// Encodes packets one by one into `out`.
struct Writer<W: Write> {
    out: W,
    buf: Vec<u8>,
    packets: u64,
}

impl<W: Write> Writer<W> {
    fn new(out: W) -> Self {
        Self {
            out,
            buf: Vec::with_capacity(256),
            packets: 0,
        }
    }

    fn packet(&mut self, mut p: TracePacket) -> Result<()> {
        p.trusted_packet_sequence_id = Some(SEQUENCE);
        if self.packets == 0 {
            p.sequence_flags = Some(proto::SEQ_INCREMENTAL_STATE_CLEARED);
        }
        self.buf.clear();
        // `Trace { repeated TracePacket packet = 1; }`: tag, length, bytes.
        prost::encoding::encode_key(1, prost::encoding::WireType::LengthDelimited, &mut self.buf);
        prost::encoding::encode_varint(p.encoded_len() as u64, &mut self.buf);
        p.encode(&mut self.buf)?;
        self.out.write_all(&self.buf)?;
        self.packets += 1;
        Ok(())
    }

    fn clock_snapshot(&mut self, c: &crate::clock::ClockSnapshot) -> Result<()> {
        let clock = |id, ns| Clock {
            clock_id: Some(id),
            timestamp: Some(ns),
        };
        self.packet(TracePacket {
            timestamp: Some(c.boottime_ns),
            timestamp_clock_id: Some(proto::CLOCK_BOOTTIME),
            data: Some(Data::ClockSnapshot(ClockSnapshot {
                clocks: vec![
                    clock(proto::CLOCK_MONOTONIC, c.monotonic_ns),
                    clock(proto::CLOCK_BOOTTIME, c.boottime_ns),
                    clock(proto::CLOCK_REALTIME, c.realtime_ns),
                ],
                primary_trace_clock: Some(proto::CLOCK_BOOTTIME as i32),
            })),
            ..Default::default()
        })
    }

    fn track(&mut self, d: TrackDescriptor) -> Result<()> {
        self.packet(TracePacket {
            data: Some(Data::TrackDescriptor(d)),
            ..Default::default()
        })
    }

    /// An event at `ts` on CLOCK_MONOTONIC, the run's clock.
    fn event(&mut self, ts: u64, e: TrackEvent) -> Result<()> {
        self.packet(TracePacket {
            timestamp: Some(ts),
            timestamp_clock_id: Some(proto::CLOCK_MONOTONIC),
            data: Some(Data::TrackEvent(e)),
            ..Default::default()
        })
    }

    /// A slice `[start, end]` on `track`; `begin` carries name, args, flows.
    fn slice(&mut self, start: u64, end: u64, track: u64, begin: TrackEvent) -> Result<()> {
        self.event(
            start,
            TrackEvent {
                r#type: Some(proto::SLICE_BEGIN),
                track_uuid: Some(track),
                ..begin
            },
        )?;
        self.event(
            end.max(start),
            TrackEvent {
                r#type: Some(proto::SLICE_END),
                track_uuid: Some(track),
                ..Default::default()
            },
        )
    }

    fn counter(&mut self, ts: u64, track: u64, value: u64) -> Result<()> {
        self.event(
            ts,
            TrackEvent {
                r#type: Some(proto::COUNTER),
                track_uuid: Some(track),
                counter_value: Some(i64::try_from(value).unwrap_or(i64::MAX)),
                ..Default::default()
            },
        )
    }
}

fn named(name: &str, value: Value) -> DebugAnnotation {
    DebugAnnotation {
        name: Some(name.into()),
        value: Some(value),
        ..Default::default()
    }
}

/// A debug annotation from any JSON value (objects become dictionaries),
/// so report structures go into the args as they are in the JSON report.
fn annotation(name: &str, v: &serde_json::Value) -> DebugAnnotation {
    use serde_json::Value as J;
    let mut a = DebugAnnotation {
        name: (!name.is_empty()).then(|| name.to_string()),
        ..Default::default()
    };
    match v {
        J::Null => a.value = Some(Value::String("null".into())),
        J::Bool(b) => a.value = Some(Value::Bool(*b)),
        J::Number(n) => {
            a.value = Some(match (n.as_u64(), n.as_i64()) {
                (Some(u), _) => Value::Uint(u),
                (None, Some(i)) => Value::Int(i),
                _ => Value::Double(n.as_f64().unwrap_or(f64::NAN)),
            })
        }
        J::String(s) => a.value = Some(Value::String(s.clone())),
        J::Array(items) => a.array_values = items.iter().map(|i| annotation("", i)).collect(),
        J::Object(map) => a.dict_entries = map.iter().map(|(k, v)| annotation(k, v)).collect(),
    }
    a
}

/// The target's threads: tid → (tgid, name).
struct Targets(BTreeMap<u32, (u32, String)>);

impl Targets {
    fn new(run: &RunFile) -> Self {
        let mut t: BTreeMap<u32, (u32, String)> = BTreeMap::new();
        let name = |tid: &u32| {
            run.thread_names
                .get(tid)
                .cloned()
                .unwrap_or_else(|| run.target.comm.clone())
        };
        for o in &run.offcpu {
            t.entry(o.tid).or_insert_with(|| (o.tgid, name(&o.tid)));
        }
        for tid in run
            .thread_names
            .keys()
            .chain(run.stack_samples.iter().map(|s| &s.tid))
        {
            t.entry(*tid).or_insert_with(|| (run.target.pid, name(tid)));
        }
        Self(t)
    }
}

fn write_threads<W: Write>(w: &mut Writer<W>, run: &RunFile, targets: &Targets) -> Result<()> {
    let mut processes: Vec<u32> = targets.0.values().map(|(pid, _)| *pid).collect();
    processes.push(run.target.pid);
    processes.sort_unstable();
    processes.dedup();
    for pid in processes {
        w.track(TrackDescriptor {
            uuid: Some(uuid::process(pid)),
            process: Some(ProcessDescriptor {
                pid: Some(pid as i32),
                process_name: Some(if pid == run.target.pid {
                    run.target.comm.clone()
                } else {
                    format!("{} (child)", run.target.comm)
                }),
            }),
            ..Default::default()
        })?;
    }
    for (&tid, (pid, name)) in &targets.0 {
        w.track(TrackDescriptor {
            uuid: Some(uuid::thread(tid)),
            description: Some(format!(
                "Running: between recorded off-CPU intervals (intervals shorter than {} µs are \
                 only counted, so a Running slice can hold some)",
                run.min_offcpu_record_ns / 1000
            )),
            thread: Some(ThreadDescriptor {
                pid: Some(*pid as i32),
                tid: Some(tid as i32),
                thread_name: Some(name.clone()),
            }),
            ..Default::default()
        })?;
    }
    Ok(())
}

/// Flow ids from slow requests, by the off-CPU record or sample they end at.
#[derive(Default)]
struct Flows {
    offcpu: HashMap<usize, Vec<u64>>,
    samples: HashMap<usize, Vec<u64>>,
    count: u64,
}

/// Off-CPU records by start time, to find the one that delayed a request.
struct OffCpuIndex<'a> {
    records: &'a [OffCpu],
    by_start: Vec<usize>,
    /// Longest record that can delay a request (idle waits cannot).
    longest_ns: u64,
}

impl<'a> OffCpuIndex<'a> {
    fn new(records: &'a [OffCpu]) -> Self {
        let delaying: Vec<usize> = (0..records.len())
            .filter(|&i| records[i].preempted || records[i].site != Site::Idle)
            .collect();
        let mut by_start = delaying;
        by_start.sort_by_key(|&i| records[i].start_ns);
        let longest_ns = by_start
            .iter()
            .map(|&i| records[i].end_ns.saturating_sub(records[i].start_ns))
            .max()
            .unwrap_or(0);
        Self {
            records,
            by_start,
            longest_ns,
        }
    }

    /// The record overlapping `[start, end]` the most.
    fn delaying(&self, start: u64, end: u64) -> Option<usize> {
        let upto = self
            .by_start
            .partition_point(|&i| self.records[i].start_ns < end);
        self.by_start[..upto]
            .iter()
            .rev()
            .take_while(|&&i| self.records[i].start_ns.saturating_add(self.longest_ns) > start)
            .map(|&i| {
                let r = &self.records[i];
                (r.end_ns.min(end).saturating_sub(r.start_ns.max(start)), i)
            })
            .filter(|&(overlap, _)| overlap > 0)
            .max()
            .map(|(_, i)| i)
    }
}

/// The last on-CPU sample inside `[start, end]`: what the server was doing
/// just before it answered, when it was not off the CPU.
fn delaying_sample(samples: &[Sample], start: u64, end: u64) -> Option<usize> {
    let upto = samples.partition_point(|s| s.ts <= end);
    (upto > 0 && samples[upto - 1].ts >= start).then(|| upto - 1)
}

/// Requests of one source: the client's, or the server side's.
struct RequestGroup<'a> {
    id: u64,
    name: &'static str,
    latency: &'a LatencyCapture,
}

/// Request slices of one group on lanes, and their flows.
fn write_requests<W: Write>(
    w: &mut Writer<W>,
    group: &RequestGroup<'_>,
    threshold: u64,
    run: &RunFile,
    flows: &mut Flows,
    summary: &mut TraceSummary,
) -> Result<()> {
    let (lat, name) = (group.latency, group.name);
    let group = group.id;
    let requests = &lat.requests;
    let mut order: Vec<u32> = (0..requests.len() as u32).collect();
    order.sort_by_key(|&i| requests[i as usize].intended_ns);
    let fast = order
        .iter()
        .filter(|&&i| requests[i as usize].corrected() < threshold)
        .count();
    let stride = fast.div_ceil(MAX_FAST_REQUESTS).max(1);
    let mut fast_seen = 0usize;
    let chosen: Vec<u32> = order
        .into_iter()
        .filter(|&i| {
            if requests[i as usize].corrected() >= threshold {
                return true;
            }
            fast_seen += 1;
            (fast_seen - 1).is_multiple_of(stride)
        })
        .collect();
    let slow = chosen
        .iter()
        .filter(|&&i| requests[i as usize].corrected() >= threshold)
        .count() as u64;
    summary.slow_requests += slow;
    summary.fast_requests_written += chosen.len() as u64 - slow;
    summary.fast_requests_skipped += fast as u64 - (chosen.len() as u64 - slow);

    let lanes = assign_lanes(requests, &chosen);
    let lane_count = lanes.iter().copied().max().map_or(0, |m| m as usize + 1);
    let below = if lat.requests_over_cap > 0 {
        format!(
            " {} requests above the recorder's running threshold were not kept (memory cap).",
            lat.requests_over_cap
        )
    } else {
        String::new()
    };
    w.track(TrackDescriptor {
        uuid: Some(uuid::lane(group, 0)),
        name: Some(name.into()),
        description: Some(format!(
            "{}. Every kept request at or above the spike threshold ({}) is here; of the faster \
             kept requests, 1 in {stride} ({} of {fast}). The recorder keeps requests above a \
             running threshold (the larger of 2 × p50 and p90); the others are only in the \
             latency distributions.{below}",
            lat.source,
            if threshold == u64::MAX {
                "none".to_string()
            } else {
                fmt_ns(threshold)
            },
            fast.div_ceil(stride),
        )),
        child_ordering: Some(proto::CHILD_ORDERING_EXPLICIT),
        ..Default::default()
    })?;
    for lane in 1..=lane_count {
        w.track(TrackDescriptor {
            uuid: Some(uuid::lane(group, lane)),
            parent_uuid: Some(uuid::lane(group, 0)),
            name: Some("request".into()),
            sibling_order_rank: Some(lane as i32),
            ..Default::default()
        })?;
    }
    let index = OffCpuIndex::new(&run.offcpu);
    for (k, &i) in chosen.iter().enumerate() {
        let r = &requests[i as usize];
        let slow = r.corrected() >= threshold;
        let mut begin = TrackEvent {
            name: Some(if slow { "slow request" } else { "request" }.into()),
            debug_annotations: vec![
                named("latency_ns", Value::Uint(r.corrected())),
                named(
                    "sent_after_ns",
                    Value::Uint(r.sent_ns.saturating_sub(r.intended_ns)),
                ),
                named("connection", Value::Uint(u64::from(r.connection))),
                named("phase", Value::Uint(u64::from(r.phase))),
            ],
            ..Default::default()
        };
        if slow {
            let id = (group << 40) | (u64::from(i) + 1);
            let target = index
                .delaying(r.intended_ns, r.done_ns)
                .map(|o| flows.offcpu.entry(o))
                .or_else(|| {
                    delaying_sample(&run.stack_samples, r.intended_ns, r.done_ns)
                        .map(|s| flows.samples.entry(s))
                });
            if let Some(entry) = target {
                entry.or_default().push(id);
                begin.flow_ids.push(id);
                flows.count += 1;
            }
        }
        w.slice(
            r.intended_ns,
            r.done_ns,
            uuid::lane(group, lanes[k] as usize + 1),
            begin,
        )?;
    }
    Ok(())
}

/// Lane of each chosen request (in `chosen` order, sorted by start): the
/// lane that freed up first, if it is free by the request's start, else a
/// new one. Strictly free: a slice never starts where another ends.
fn assign_lanes(requests: &[RequestTimes], chosen: &[u32]) -> Vec<u32> {
    let mut free: BinaryHeap<Reverse<(u64, u32)>> = BinaryHeap::new();
    let mut next = 0u32;
    chosen
        .iter()
        .map(|&i| {
            let r = &requests[i as usize];
            let lane = match free.peek() {
                Some(&Reverse((end, lane))) if end < r.intended_ns => {
                    free.pop();
                    lane
                }
                _ => {
                    next += 1;
                    next - 1
                }
            };
            free.push(Reverse((r.done_ns.max(r.intended_ns), lane)));
            lane
        })
        .collect()
}

/// The thread slices: Running between recorded intervals, then each
/// interval as Blocked/Idle (its blocked part) and Runnable (its wait for
/// a CPU).
fn write_offcpu<W: Write>(
    w: &mut Writer<W>,
    run: &RunFile,
    targets: &Targets,
    flows: &Flows,
) -> Result<()> {
    // The same per-thread index the analysis builds (4 bytes a record),
    // built again here: the analysis's is dropped with it. A list of
    // positions per thread and a stable sort's scratch were 11 MB of the
    // report's peak on a minute at 10,000 req/s.
    let threads = Threads::new(&run.offcpu);
    for tid in threads.tids() {
        if !targets.0.contains_key(&tid) {
            continue;
        }
        let track = uuid::thread(tid);
        let mut last_end: Option<u64> = None;
        for i in threads.positions(tid) {
            let o = &run.offcpu[i];
            // Records of one thread never overlap; if clocks say otherwise,
            // clamp so the slices still nest.
            let start = last_end.map_or(o.start_ns, |e| o.start_ns.max(e));
            if o.end_ns <= start {
                continue;
            }
            if let Some(e) = last_end.filter(|&e| e < start) {
                w.slice(
                    e,
                    start,
                    track,
                    TrackEvent {
                        name: Some("Running".into()),
                        ..Default::default()
                    },
                )?;
            }
            write_interval(w, o, start, track, flows.offcpu.get(&i))?;
            last_end = Some(o.end_ns);
        }
    }
    Ok(())
}

fn write_interval<W: Write>(
    w: &mut Writer<W>,
    o: &OffCpu,
    start: u64,
    track: u64,
    flows: Option<&Vec<u64>>,
) -> Result<()> {
    let syscall = o.syscall.map(syscalls::name);
    let mut args = vec![
        named("cpu_out", Value::Uint(u64::from(o.cpu_out))),
        named("cpu_in", Value::Uint(u64::from(o.cpu_in))),
        named("blocked_ns", Value::Uint(o.blocked_ns)),
        named("runnable_ns", Value::Uint(o.runnable_ns)),
    ];
    if let Some(s) = &syscall {
        args.push(named("syscall", Value::String(s.clone())));
    }
    if !o.next_comm.is_empty() {
        args.push(named(
            "ran_instead",
            Value::String(format!("{} ({})", o.next_comm, o.next_pid)),
        ));
    }
    let terminating = flows.cloned().unwrap_or_default();
    let waiting = |what: &str| {
        if o.next_comm.is_empty() {
            format!("Runnable ({what})")
        } else {
            format!("Runnable ({what}; {} ran)", o.next_comm)
        }
    };
    // The first slice: the whole interval when it only waited for a CPU,
    // else its blocked part (a Runnable slice for the wait after the
    // wake-up follows).
    let (first_end, name) = if o.preempted || o.blocked_ns == 0 {
        let what = if o.preempted {
            "preempted"
        } else {
            "waiting for a CPU"
        };
        (o.end_ns, waiting(what))
    } else {
        let what = syscall.as_deref().unwrap_or("no syscall");
        let name = match o.site {
            Site::Idle => format!("Idle ({what})"),
            site => format!("Blocked ({}: {what})", site.name()),
        };
        ((start + o.blocked_ns).min(o.end_ns), name)
    };
    w.slice(
        start,
        first_end,
        track,
        TrackEvent {
            name: Some(name),
            debug_annotations: args,
            terminating_flow_ids: terminating,
            ..Default::default()
        },
    )?;
    if first_end < o.end_ns {
        w.slice(
            first_end,
            o.end_ns,
            track,
            TrackEvent {
                name: Some(waiting("woken, waiting for a CPU")),
                ..Default::default()
            },
        )?;
    }
    Ok(())
}

/// On-CPU samples (`--stacks`) as instants on their thread, named by the
/// innermost user function, with both stacks in the args.
fn write_samples<W: Write>(w: &mut Writer<W>, run: &RunFile, flows: &Flows) -> Result<()> {
    let stacks = &run.stacks;
    for (i, s) in run.stack_samples.iter().enumerate() {
        let frames = |kind, id: Option<u32>| -> Vec<String> {
            id.map(|id| stacks.frames(kind, id).map(String::from).collect())
                .unwrap_or_default()
        };
        let user = frames(StackKind::User, s.ustack);
        let kernel = frames(StackKind::Kernel, s.kstack);
        let context = serde_json::to_value(s.context)?;
        let leaf = user
            .first()
            .cloned()
            .unwrap_or_else(|| format!("({})", context.as_str().unwrap_or("sample")));
        let mut args = vec![annotation("context", &context)];
        if let Some(nr) = s.syscall {
            args.push(named("syscall", Value::String(syscalls::name(nr))));
        }
        args.push(annotation("user_stack", &serde_json::json!(user)));
        args.push(annotation("kernel_stack", &serde_json::json!(kernel)));
        w.event(
            s.ts,
            TrackEvent {
                r#type: Some(proto::INSTANT),
                track_uuid: Some(uuid::thread(s.tid)),
                name: Some(format!("sample: {leaf}")),
                debug_annotations: args,
                terminating_flow_ids: flows.samples.get(&i).cloned().unwrap_or_default(),
                ..Default::default()
            },
        )?;
    }
    Ok(())
}

fn write_episodes<W: Write>(w: &mut Writer<W>, report: &Report) -> Result<()> {
    for (i, e) in report.episodes.iter().enumerate() {
        let mut args = vec![
            named("peak_ns", Value::Uint(e.window.peak_ns)),
            named("spike_requests", Value::Uint(e.window.requests)),
            annotation("account", &serde_json::to_value(&e.account)?),
        ];
        if let Some(p) = &e.code_path {
            args.push(annotation("code_path", &serde_json::to_value(p)?));
        }
        w.slice(
            e.window.start_ns,
            e.window.start_ns + e.duration_ns,
            uuid::EPISODES,
            TrackEvent {
                name: Some(format!("episode {}", i + 1)),
                debug_annotations: args,
                ..Default::default()
            },
        )?;
    }
    for (f, family) in report.families.iter().enumerate() {
        let name = family.name();
        w.track(TrackDescriptor {
            uuid: Some(uuid::family(f)),
            parent_uuid: Some(uuid::EPISODES),
            name: Some(format!(
                "family {}: {name}{}",
                f + 1,
                if family.environment {
                    " (environment)"
                } else {
                    ""
                }
            )),
            description: Some(family.evidence.clone()),
            sibling_order_rank: Some(f as i32),
            ..Default::default()
        })?;
        let mut summary = serde_json::to_value(family)?;
        if let Some(o) = summary.as_object_mut() {
            o.remove("episodes");
        }
        for &e in &family.episodes {
            let Some(ep) = report.episodes.get(e) else {
                continue;
            };
            w.slice(
                ep.window.start_ns,
                ep.window.start_ns + ep.duration_ns,
                uuid::family(f),
                TrackEvent {
                    name: Some(name.clone()),
                    debug_annotations: vec![
                        named("episode", Value::Uint(e as u64 + 1)),
                        annotation("family", &summary),
                    ],
                    ..Default::default()
                },
            )?;
        }
    }
    Ok(())
}

/// Kernel counters per bucket, one counter track each, written only where
/// the value changes (empty buckets are zeros).
fn write_counters<W: Write>(w: &mut Writer<W>, run: &RunFile) -> Result<()> {
    let bucket = fmt_ns(run.bucket_ns);
    for (c, name) in run.counter_names.iter().enumerate() {
        let time = name.ends_with("_ns");
        w.track(TrackDescriptor {
            uuid: Some(uuid::counter(c)),
            parent_uuid: Some(uuid::process(run.target.pid)),
            name: Some(format!("{name} per {bucket}")),
            counter: Some(CounterDescriptor {
                unit: Some(if time {
                    proto::UNIT_TIME_NS
                } else {
                    proto::UNIT_COUNT
                }),
                unit_name: (!time).then(|| format!("events per {bucket}")),
            }),
            ..Default::default()
        })?;
        let mut previous = (0u64, 0u64); // (bucket end, value)
        for (b, counts) in &run.buckets {
            let start = b * run.bucket_ns;
            let value = counts.get(c).copied().unwrap_or(0);
            if previous.1 != 0 && previous.0 < start {
                w.counter(previous.0, uuid::counter(c), 0)?;
                previous.1 = 0;
            }
            if value != previous.1 {
                w.counter(start, uuid::counter(c), value)?;
            }
            previous = (start + run.bucket_ns, value);
        }
        if previous.1 != 0 {
            w.counter(previous.0, uuid::counter(c), 0)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
