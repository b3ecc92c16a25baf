//! Structural checks of the trace on a synthetic run (10 ms stalls every
//! 500 ms, overlapping requests on 8 connections). The official schema's
//! decoder checks the format in the integration test (`perfetto_live`).

use std::collections::{BTreeMap, HashMap, HashSet};

use prost::Message as _;

use super::proto::{self, Data, TracePacket};
use crate::{analysis::AnalysisOptions, harness::synthetic, report::Report};

/// `Trace`: what a reader sees, the packets in file order.
#[derive(Clone, PartialEq, prost::Message)]
struct Trace {
    #[prost(message, repeated, tag = "1")]
    packet: Vec<TracePacket>,
}

fn trace(
    seconds: u64,
    requests: u64,
) -> (crate::runfile::RunFile, Report, Trace, super::TraceSummary) {
    let run = synthetic::run(seconds, requests, 1_000);
    let latency = run.latency.clone().expect("latency");
    let report = Report::build(&run, &latency, &AnalysisOptions::default());
    let mut w = super::Writer::new(Vec::new());
    let summary = super::write_trace(&mut w, &report, &run).expect("write");
    let decoded = Trace::decode(w.out.as_slice()).expect("decode");
    (run, report, decoded, summary)
}

#[test]
fn slices_nest_on_every_track_and_every_track_is_defined() {
    let (_, _, t, _) = trace(4, 40_000);
    let defined: HashSet<u64> = t
        .packet
        .iter()
        .filter_map(|p| match &p.data {
            Some(Data::TrackDescriptor(d)) => d.uuid,
            _ => None,
        })
        .collect();
    // Events in the order a reader sorts them: by time, ties in file order.
    let mut events: Vec<(u64, usize, &proto::TrackEvent)> = t
        .packet
        .iter()
        .enumerate()
        .filter_map(|(i, p)| match &p.data {
            Some(Data::TrackEvent(e)) => Some((p.timestamp.expect("ts"), i, e)),
            _ => None,
        })
        .collect();
    events.sort_by_key(|&(ts, i, _)| (ts, i));
    let mut open: HashMap<u64, usize> = HashMap::new();
    for (_, _, e) in &events {
        let track = e.track_uuid.expect("track");
        assert!(defined.contains(&track), "track {track:#x} not defined");
        match e.r#type {
            Some(proto::SLICE_BEGIN) => *open.entry(track).or_default() += 1,
            Some(proto::SLICE_END) => {
                let depth = open.entry(track).or_default();
                assert!(*depth > 0, "end without begin on {track:#x}");
                *depth -= 1;
            }
            _ => {}
        }
    }
    assert!(open.values().all(|&d| d == 0), "slices left open");
    // Request lanes hold one slice at a time (no nesting: a request
    // never sits inside another).
    let lanes = events
        .iter()
        .filter(|(_, _, e)| e.name.as_deref().is_some_and(|n| n.ends_with("request")));
    assert!(lanes.count() > 1_000);
    assert!(
        t.packet
            .iter()
            .any(|p| matches!(&p.data, Some(Data::ClockSnapshot(c)) if c.clocks.len() == 3)),
        "clock snapshot"
    );
}

#[test]
fn every_slow_request_is_a_slice_with_a_flow_to_the_interval_that_delayed_it() {
    let (run, report, t, summary) = trace(4, 40_000);
    let threshold = report.latency.threshold_ns.expect("threshold");
    let lat = run.latency.as_ref().expect("latency");
    let slow: Vec<(u64, u64)> = lat
        .requests
        .iter()
        .filter(|r| r.corrected() >= threshold)
        .map(|r| (r.intended_ns, r.done_ns))
        .collect();
    assert!(slow.len() > 100, "{} slow requests", slow.len());
    assert_eq!(summary.slow_requests, slow.len() as u64);
    // Slow request slices: begin (ts, flow) followed on its lane by its end.
    let mut begins: BTreeMap<u64, Vec<(u64, Vec<u64>)>> = BTreeMap::new();
    let mut ends: HashMap<u64, Vec<u64>> = HashMap::new();
    let mut terminating: HashSet<u64> = HashSet::new();
    for p in &t.packet {
        let Some(Data::TrackEvent(e)) = &p.data else {
            continue;
        };
        let ts = p.timestamp.expect("ts");
        terminating.extend(&e.terminating_flow_ids);
        match (e.r#type, e.name.as_deref()) {
            (Some(proto::SLICE_BEGIN), Some("slow request")) => begins
                .entry(e.track_uuid.expect("track"))
                .or_default()
                .push((ts, e.flow_ids.clone())),
            (Some(proto::SLICE_END), _) => ends
                .entry(e.track_uuid.expect("track"))
                .or_default()
                .push(ts),
            _ => {}
        }
    }
    let mut written: Vec<(u64, u64)> = Vec::new();
    for (track, bs) in &begins {
        let track_ends = &ends[track];
        for (ts, flows) in bs {
            // The end that follows this begin on the lane.
            let end = track_ends
                .iter()
                .copied()
                .filter(|&e| e >= *ts)
                .min()
                .expect("end");
            written.push((*ts, end));
            assert_eq!(flows.len(), 1, "one flow per slow request");
            assert!(
                terminating.contains(&flows[0]),
                "flow {} goes nowhere",
                flows[0]
            );
        }
    }
    written.sort_unstable();
    let mut expected = slow;
    expected.sort_unstable();
    assert_eq!(written, expected);
}

#[test]
fn fast_requests_are_sampled_and_counted() {
    let run = synthetic::run(4, 40_000, 1_000);
    let latency = run.latency.clone().expect("latency");
    let report = Report::build(&run, &latency, &AnalysisOptions::default());
    // A recorder that kept 250,000 fast requests (as a low running
    // threshold would): the trace takes 1 in 3 of them, and says so.
    let mut with_fast = run.clone();
    let lat = with_fast.latency.as_mut().expect("latency");
    let fast = 250_000u64;
    lat.requests
        .extend((0..fast).map(|i| crate::latency::recorder::RequestTimes {
            intended_ns: run.started_ns + i * 10_000,
            sent_ns: run.started_ns + i * 10_000,
            done_ns: run.started_ns + i * 10_000 + 40_000,
            connection: (i % 8) as u32,
            phase: 0,
        }));
    let kept = lat.requests.len() as u64;
    let mut w = super::Writer::new(Vec::new());
    let summary = super::write_trace(&mut w, &report, &with_fast).expect("write");
    let kept_fast = kept - summary.slow_requests;
    assert_eq!(summary.fast_requests_written, kept_fast.div_ceil(3));
    assert_eq!(
        summary.fast_requests_written + summary.fast_requests_skipped,
        kept_fast
    );
}
