//! The run's code paths as a pprof profile (`profile.proto`, gzip'd), for
//! `go tool pprof`, Pyroscope, Parca or speedscope: every on-CPU sample of
//! the target's threads (sample type `cpu`, the sampling period in ns) and
//! every recorded off-CPU interval (`off_cpu`, its length in ns), each
//! with its stack and labels saying where it fell: `cause` and `family`
//! (the episode's family; `baseline` outside the episodes), `episode`
//! (its index), `thread`, and `context` (on the CPU: user, syscall, fault,
//! irq; off it: the wait site, or runnable). So `go tool pprof
//! -tagfocus cause=blocking -sample_index=off_cpu` shows the tail's
//! blocked code paths.
//!
//! The messages are written with prost's derive from the schema
//! (github.com/google/pprof, proto/profile.proto): no crate ships them
//! without a protoc build step or a profiler attached, and this is the
//! few fields a profile needs.

use std::{collections::HashMap, io::Write as _, path::Path};

use anyhow::{Context as _, Result};
use prost::Message as _;

use super::Report;
use crate::{
    analysis::{kernel::OffKind, kernel::Threads, paths},
    runfile::RunFile,
    timeline::stacks::StackId,
};

#[derive(Clone, PartialEq, prost::Message)]
pub struct Profile {
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    #[prost(int64, tag = "12")]
    pub period: i64,
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ValueType {
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Label {
    #[prost(int64, tag = "1")]
    pub key: i64,
    #[prost(int64, tag = "2")]
    pub str: i64,
    #[prost(int64, tag = "3")]
    pub num: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Location {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Line {
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Function {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(int64, tag = "2")]
    pub name: i64,
    #[prost(int64, tag = "3")]
    pub system_name: i64,
}

/// Builds the profile of `run` with `report`'s episodes and families.
pub fn profile(report: &Report, run: &RunFile) -> Profile {
    let mut b = Builder::default();
    b.string(""); // index 0 is the empty string, by the format's rule
    let (cpu, off_cpu, ns) = (
        b.string("cpu"),
        b.string("off_cpu"),
        b.string("nanoseconds"),
    );
    let mut p = Profile {
        sample_type: vec![
            ValueType {
                r#type: cpu,
                unit: ns,
            },
            ValueType {
                r#type: off_cpu,
                unit: ns,
            },
        ],
        duration_nanos: i64::try_from(run.duration_ns()).unwrap_or(i64::MAX),
        period_type: Some(ValueType {
            r#type: cpu,
            unit: ns,
        }),
        period: i64::try_from(run.sample_period_ns).unwrap_or(0),
        default_sample_type: cpu,
        ..Profile::default()
    };
    // Each episode's family, by index.
    let mut family_of: HashMap<usize, (String, String)> = HashMap::new();
    for f in &report.families {
        let cause = if f.environment {
            "environment".to_string()
        } else {
            f.cause.to_string()
        };
        for &i in &f.episodes {
            family_of.insert(i, (cause.clone(), f.name()));
        }
    }
    let mut windows: Vec<(u64, u64, usize)> = report
        .episodes
        .iter()
        .enumerate()
        .map(|(i, e)| (e.window.start_ns, e.window.end_ns, i))
        .collect();
    windows.sort_unstable();
    let episode_at = |t: u64| {
        let upto = windows.partition_point(|w| w.0 <= t);
        windows[..upto].iter().rev().find(|w| t < w.1).map(|w| w.2)
    };
    let period = run.sample_period_ns;
    for s in &run.stack_samples {
        let frames = paths::path(&run.stacks, s.kstack, s.ustack, s.syscall);
        let context = format!("{:?}", s.context).to_lowercase();
        let labels = b.labels(run, s.tid, episode_at(s.ts), &family_of, &context);
        p.sample.push(Sample {
            location_id: b.locations(&frames),
            value: vec![i64::try_from(period).unwrap_or(0), 0],
            label: labels,
        });
    }
    // Off-CPU intervals, cut at the episodes' edges so each part carries
    // the label of where it fell.
    let threads = Threads::new(&run.offcpu);
    for span in threads.all() {
        let r = span.record;
        let frames = paths::path(
            &run.stacks,
            r.kstack.map(StackId::get),
            r.ustack.map(StackId::get),
            r.syscall,
        );
        let context = match span.kind {
            OffKind::Blocked => r.site.name().to_string(),
            OffKind::Runnable => "runnable".to_string(),
        };
        for (from, to, episode) in cut(span.start_ns, span.end_ns, &windows) {
            let labels = b.labels(run, r.tid, episode, &family_of, &context);
            p.sample.push(Sample {
                location_id: b.locations(&frames),
                value: vec![0, i64::try_from(to - from).unwrap_or(0)],
                label: labels,
            });
        }
    }
    p.comment.push(b.string(&format!(
        "correlator {}: PID {} ({}); cpu = on-CPU samples, off_cpu = recorded off-CPU intervals (50 us or more)",
        env!("CARGO_PKG_VERSION"),
        run.target.pid,
        run.target.comm
    )));
    p.location = b.location;
    p.function = b.function;
    p.string_table = b.strings;
    p
}

/// [start, end) cut at the episodes' edges: (from, to, episode index).
fn cut(start: u64, end: u64, windows: &[(u64, u64, usize)]) -> Vec<(u64, u64, Option<usize>)> {
    let mut out = Vec::new();
    let mut at = start;
    for &(ws, we, i) in windows.iter().filter(|w| w.1 > start && w.0 < end) {
        if ws > at {
            out.push((at, ws, None));
        }
        let (a, b) = (ws.max(at), we.min(end));
        if b > a {
            out.push((a, b, Some(i)));
        }
        at = at.max(b);
    }
    if end > at {
        out.push((at, end, None));
    }
    out
}

/// Writes the gzip'd profile.
pub fn write(report: &Report, run: &RunFile, path: &Path) -> Result<()> {
    let p = profile(report, run);
    let file =
        std::fs::File::create(path).with_context(|| format!("cannot write {}", path.display()))?;
    let mut gz = flate2::write::GzEncoder::new(file, flate2::Compression::default());
    gz.write_all(&p.encode_to_vec())
        .and_then(|()| gz.finish().map(|_| ()))
        .with_context(|| format!("cannot write {}", path.display()))
}

/// The profile's string, function and location tables, built as used.
#[derive(Default)]
struct Builder {
    strings: Vec<String>,
    string_ids: HashMap<String, i64>,
    function: Vec<Function>,
    location: Vec<Location>,
    /// Location id by frame name (one location per function: no addresses).
    location_ids: HashMap<String, u64>,
}

impl Builder {
    fn string(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.string_ids.get(s) {
            return i;
        }
        let i = self.strings.len() as i64;
        self.strings.push(s.to_string());
        self.string_ids.insert(s.to_string(), i);
        i
    }

    /// Location ids of `frames` (outermost first), leaf first as the
    /// format wants.
    fn locations(&mut self, frames: &[String]) -> Vec<u64> {
        frames
            .iter()
            .rev()
            .map(|f| {
                if let Some(&id) = self.location_ids.get(f) {
                    return id;
                }
                let id = self.location.len() as u64 + 1;
                let name = self.string(f);
                self.function.push(Function {
                    id,
                    name,
                    system_name: name,
                });
                self.location.push(Location {
                    id,
                    line: vec![Line { function_id: id }],
                });
                self.location_ids.insert(f.clone(), id);
                id
            })
            .collect()
    }

    fn labels(
        &mut self,
        run: &RunFile,
        tid: u32,
        episode: Option<usize>,
        family_of: &HashMap<usize, (String, String)>,
        context: &str,
    ) -> Vec<Label> {
        let (cause, family) = episode
            .and_then(|i| family_of.get(&i))
            .map_or(("baseline", "baseline"), |(c, f)| (c.as_str(), f.as_str()));
        let thread = format!(
            "{} ({tid})",
            run.thread_names.get(&tid).map_or("thread", String::as_str)
        );
        let mut out = Vec::new();
        for (k, v) in [
            ("cause", cause),
            ("family", family),
            ("thread", thread.as_str()),
            ("context", context),
        ] {
            let (key, str) = (self.string(k), self.string(v));
            out.push(Label { key, str, num: 0 });
        }
        if let Some(i) = episode {
            let key = self.string("episode");
            out.push(Label {
                key,
                str: 0,
                num: i as i64,
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_are_cut_at_the_episodes_edges() {
        let w = [(10, 20, 0), (30, 40, 1)];
        assert_eq!(
            cut(5, 35, &w),
            vec![
                (5, 10, None),
                (10, 20, Some(0)),
                (20, 30, None),
                (30, 35, Some(1))
            ]
        );
        assert_eq!(cut(12, 18, &w), vec![(12, 18, Some(0))]);
        assert_eq!(cut(41, 50, &w), vec![(41, 50, None)]);
    }

    #[test]
    fn frames_share_locations_and_strings() {
        let mut b = Builder::default();
        b.string("");
        let a = b.locations(&["main".into(), "work".into()]);
        let c = b.locations(&["main".into(), "other".into()]);
        let name = |id: u64| &b.strings[b.function[id as usize - 1].name as usize];
        assert_eq!(
            a.iter().map(|&i| name(i).as_str()).collect::<Vec<_>>(),
            ["work", "main"],
            "leaf first"
        );
        assert_eq!(c[1], a[1], "main is one location");
        assert_eq!(b.function.len(), 3);
        assert_eq!(b.strings[0], "");
    }
}
