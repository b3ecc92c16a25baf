//! Latency captured elsewhere: per-request logs (CSV, JSON lines) and
//! HdrHistogram interval logs (.hlog).
//!
//! Per-request logs carry start and end timestamps in ns on CLOCK_MONOTONIC
//! or CLOCK_REALTIME; realtime is converted to monotonic with an offset
//! measured now (its uncertainty is reported, and a clock step between the
//! capture and the import would shift every timestamp: say so). A
//! closed-loop log can be corrected with an expected interval (HdrHistogram's
//! corrected recording): that adds modelled samples, and is labelled a model.
//!
//! One piece on purpose (over 450 lines): the three formats share the clock
//! conversion and the `file:line: reason` errors.

use std::{
    fs::File,
    io::{BufRead as _, BufReader},
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result, bail};
use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
use serde::Serialize;

use super::Distribution;
use crate::{
    clock,
    latency::recorder::{Recorder, RequestTimes},
};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Csv,
    Jsonl,
    Hlog,
}

impl Format {
    /// Guesses the format from the file name.
    pub fn from_path(path: &Path) -> Option<Self> {
        match path.extension()?.to_str()? {
            "csv" => Some(Self::Csv),
            "jsonl" | "ndjson" => Some(Self::Jsonl),
            "hlog" => Some(Self::Hlog),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Clock {
    Monotonic,
    Realtime,
}

#[derive(Clone, Debug)]
pub struct ImportOptions {
    pub path: PathBuf,
    pub format: Format,
    pub clock: Clock,
    /// Closed-loop correction: the interval at which requests were meant to
    /// be sent (HdrHistogram's expected interval).
    pub expected_interval_ns: Option<u64>,
    /// .hlog: the tag whose intervals to read (a log with several tags is
    /// refused without one: merging them would mix different things).
    pub tag: Option<String>,
    /// .hlog: the unit the histograms' values are in (wrk2 and Java tools
    /// often log µs).
    pub hlog_unit: HlogUnit,
}

/// Unit of the values in an .hlog's histograms.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum HlogUnit {
    #[default]
    Ns,
    Us,
    Ms,
}

impl HlogUnit {
    pub fn ns(self) -> u64 {
        match self {
            HlogUnit::Ns => 1,
            HlogUnit::Us => 1_000,
            HlogUnit::Ms => 1_000_000,
        }
    }
}

/// CLOCK_REALTIME − CLOCK_MONOTONIC, measured as the tightest of several
/// bracketed reads.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct ClockOffset {
    pub offset_ns: i128,
    /// Half the tightest bracket: the offset is known to ± this.
    pub uncertainty_ns: u64,
}

pub fn measure_clock_offset() -> ClockOffset {
    let realtime = || {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: valid pointer; CLOCK_REALTIME always exists.
        unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
        ts.tv_sec as i128 * 1_000_000_000 + i128::from(ts.tv_nsec)
    };
    (0..64)
        .map(|_| {
            let a = clock::monotonic_ns();
            let r = realtime();
            let b = clock::monotonic_ns();
            let mid = i128::from(a) + i128::from(b - a) / 2;
            ClockOffset {
                offset_ns: r - mid,
                uncertainty_ns: (b - a).div_ceil(2),
            }
        })
        .min_by_key(|o| o.uncertainty_ns)
        .unwrap_or(ClockOffset {
            offset_ns: 0,
            uncertainty_ns: u64::MAX,
        })
}

/// What an import produced.
pub struct Imported {
    pub recorder: Recorder,
    /// Requests read from the log (observations).
    pub requests: u64,
    /// Requests with a non-success status (in the distribution, counted).
    pub errors: u64,
    /// Closed-loop correction: the distribution with modelled samples.
    pub modelled: Option<Distribution>,
    pub clock_offset: Option<ClockOffset>,
    /// Per-interval histograms, for .hlog input: (start s, end s, count),
    /// seconds since the epoch when the log has a BaseTime.
    pub intervals: Vec<(f64, f64, u64)>,
    /// .hlog: the log's StartTime (or BaseTime), seconds since the epoch.
    pub start_time_s: Option<f64>,
    pub notes: Vec<String>,
}

/// One request of a per-request log.
struct Row {
    start: u64,
    end: u64,
    ok: bool,
}

fn malformed(path: &Path, line: usize, reason: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("{}:{line}: {reason}", path.display())
}

pub fn import(opts: &ImportOptions) -> Result<Imported> {
    let file =
        File::open(&opts.path).with_context(|| format!("cannot open {}", opts.path.display()))?;
    match opts.format {
        Format::Hlog => import_hlog(&opts.path, file, opts.tag.as_deref(), opts.hlog_unit),
        Format::Csv | Format::Jsonl => import_requests(opts, file),
    }
}

fn import_requests(opts: &ImportOptions, file: File) -> Result<Imported> {
    let offset = (opts.clock == Clock::Realtime).then(measure_clock_offset);
    let mut rows = Vec::new();
    let mut header: Option<Columns> = None;
    for (i, line) in BufReader::new(file).lines().enumerate() {
        let n = i + 1;
        let line = line.map_err(|e| malformed(&opts.path, n, format!("unreadable: {e}")))?;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let row = match opts.format {
            Format::Jsonl => parse_jsonl(line).map_err(|e| malformed(&opts.path, n, e))?,
            _ => {
                if header.is_none() && !line.starts_with(|c: char| c.is_ascii_digit()) {
                    header =
                        Some(Columns::from_header(line).map_err(|e| malformed(&opts.path, n, e))?);
                    continue;
                }
                let cols = header.get_or_insert(Columns::DEFAULT);
                parse_csv(line, cols).map_err(|e| malformed(&opts.path, n, e))?
            }
        };
        if row.end < row.start {
            return Err(malformed(&opts.path, n, "end before start"));
        }
        rows.push(to_monotonic(row, offset).map_err(|e| malformed(&opts.path, n, e))?);
    }
    if rows.is_empty() {
        bail!("{}: no requests in the file", opts.path.display());
    }
    rows.sort_by_key(|r| r.start);
    let first = rows[0].start;
    let mut recorder = Recorder::new(1, first);
    let mut modelled = opts.expected_interval_ns.map(|_| Distribution::new());
    let mut errors = 0;
    for r in &rows {
        errors += u64::from(!r.ok);
        let times = RequestTimes {
            intended_ns: r.start,
            sent_ns: r.start,
            done_ns: r.end,
            connection: 0,
            phase: 0,
        };
        recorder.sent(0, r.start, 0, true);
        recorder.answered(times, true, r.ok);
        if let (Some(m), Some(interval)) = (modelled.as_mut(), opts.expected_interval_ns) {
            m.record_corrected(r.end - r.start, interval);
        }
    }
    let mut notes = Vec::new();
    if let Some(o) = offset {
        notes.push(format!(
            "realtime timestamps converted with an offset measured now (± {} ns); a clock step \
             since the capture would shift every request",
            o.uncertainty_ns
        ));
    }
    if opts.expected_interval_ns.is_some() {
        notes.push(
            "closed-loop correction adds modelled samples (HdrHistogram corrected recording): \
             a model of the requests a stall held back, not observations"
                .into(),
        );
    }
    Ok(Imported {
        recorder,
        requests: rows.len() as u64,
        errors,
        modelled,
        clock_offset: offset,
        intervals: Vec::new(),
        start_time_s: None,
        notes,
    })
}

fn to_monotonic(row: Row, offset: Option<ClockOffset>) -> Result<Row, String> {
    let Some(o) = offset else { return Ok(row) };
    let conv = |t: u64| {
        u64::try_from(i128::from(t) - o.offset_ns)
            .map_err(|_| format!("timestamp {t} predates boot"))
    };
    Ok(Row {
        start: conv(row.start)?,
        end: conv(row.end)?,
        ok: row.ok,
    })
}

/// Column positions in a CSV file.
#[derive(Clone, Copy)]
struct Columns {
    start: usize,
    end: usize,
    status: Option<usize>,
}

impl Columns {
    const DEFAULT: Self = Self {
        start: 0,
        end: 1,
        status: Some(2),
    };

    fn from_header(line: &str) -> Result<Self, String> {
        let names: Vec<String> = line
            .split(',')
            .map(|c| c.trim().to_ascii_lowercase())
            .collect();
        let find = |options: &[&str]| names.iter().position(|n| options.contains(&n.as_str()));
        Ok(Self {
            start: find(&["start_ns", "start"]).ok_or("header has no start_ns column")?,
            end: find(&["end_ns", "end"]).ok_or("header has no end_ns column")?,
            status: find(&["status", "ok"]),
        })
    }
}

fn is_ok_status(s: &str) -> bool {
    let s = s.trim().to_ascii_lowercase();
    matches!(s.as_str(), "" | "ok" | "true" | "0" | "success")
        || s.parse::<u16>().is_ok_and(|c| (200..400).contains(&c))
}

fn parse_csv(line: &str, cols: &Columns) -> Result<Row, String> {
    let fields: Vec<&str> = line.split(',').collect();
    let num = |i: usize, what: &str| -> Result<u64, String> {
        let f = fields
            .get(i)
            .ok_or_else(|| format!("missing {what} column"))?;
        f.trim()
            .parse()
            .map_err(|_| format!("{what} {f:?} is not an integer number of ns"))
    };
    Ok(Row {
        start: num(cols.start, "start_ns")?,
        end: num(cols.end, "end_ns")?,
        ok: cols
            .status
            .and_then(|i| fields.get(i))
            .is_none_or(|s| is_ok_status(s)),
    })
}

fn parse_jsonl(line: &str) -> Result<Row, String> {
    let v: serde_json::Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    let num = |k: &str| -> Result<u64, String> {
        v.get(k)
            .ok_or_else(|| format!("no \"{k}\" field"))?
            .as_u64()
            .ok_or_else(|| format!("\"{k}\" is not an integer number of ns"))
    };
    let ok = match v.get("status") {
        None => true,
        Some(serde_json::Value::Bool(b)) => *b,
        Some(serde_json::Value::Number(n)) => n
            .as_u64()
            .is_some_and(|c| c == 0 || (200..400).contains(&c)),
        Some(serde_json::Value::String(s)) => is_ok_status(s),
        Some(other) => return Err(format!("\"status\" {other} is not a status")),
    };
    Ok(Row {
        start: num("start_ns")?,
        end: num("end_ns")?,
        ok,
    })
}

fn import_hlog(path: &Path, mut file: File, tag: Option<&str>, unit: HlogUnit) -> Result<Imported> {
    use std::io::Read as _;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let mut deserializer = hdrhistogram::serialization::Deserializer::new();
    let mut merged = Distribution::new();
    let mut intervals = Vec::new();
    let mut tags_seen: std::collections::BTreeSet<String> = Default::default();
    let (mut start_time, mut base_time) = (None, None);
    let mut kept: Vec<(f64, f64, hdrhistogram::Histogram<u64>)> = Vec::new();
    let mut by_tag: std::collections::BTreeMap<String, usize> = Default::default();
    for (i, entry) in IntervalLogIterator::new(&bytes).enumerate() {
        let entry = entry.map_err(|e| {
            anyhow::anyhow!(
                "{}: entry {}: malformed interval log ({e:?})",
                path.display(),
                i + 1
            )
        })?;
        let ih = match entry {
            LogEntry::StartTime(t) => {
                start_time = Some(t.as_secs_f64());
                continue;
            }
            LogEntry::BaseTime(t) => {
                base_time = Some(t.as_secs_f64());
                continue;
            }
            LogEntry::Interval(ih) => ih,
        };
        let this_tag = ih.tag().map_or(String::new(), |t| t.as_str().to_string());
        tags_seen.insert(this_tag.clone());
        *by_tag.entry(this_tag.clone()).or_default() += 1;
        if tag.is_some_and(|want| want != this_tag) {
            continue;
        }
        let encoded = base64_decode(ih.encoded_histogram()).ok_or_else(|| {
            anyhow::anyhow!(
                "{}: interval at {:?}: bad base64",
                path.display(),
                ih.start_timestamp()
            )
        })?;
        let h: hdrhistogram::Histogram<u64> = deserializer
            .deserialize(&mut encoded.as_slice())
            .map_err(|e| {
                anyhow::anyhow!(
                    "{}: interval at {:?}: bad histogram ({e:?})",
                    path.display(),
                    ih.start_timestamp()
                )
            })?;
        let start = ih.start_timestamp().as_secs_f64();
        kept.push((start, start + ih.duration().as_secs_f64(), h));
    }
    if tag.is_none() && tags_seen.len() > 1 {
        let list: Vec<String> = by_tag
            .iter()
            .map(|(t, n)| {
                format!(
                    "{} ({n} intervals)",
                    if t.is_empty() { "(untagged)" } else { t }
                )
            })
            .collect();
        bail!(
            "{}: the log holds several tags: {}; pick one with --tag (merging them would mix different measurements)",
            path.display(),
            list.join(", ")
        );
    }
    if kept.is_empty() {
        match tag {
            Some(t) => bail!(
                "{}: no intervals tagged {t:?} (tags: {})",
                path.display(),
                tags_seen.into_iter().collect::<Vec<_>>().join(", ")
            ),
            None => bail!("{}: no interval histograms in the file", path.display()),
        }
    }
    // Interval timestamps are relative to BaseTime when the log has one
    // (HdrHistogram's log format), else absolute or relative to StartTime.
    let origin = base_time.unwrap_or(0.0);
    for (start, end, h) in kept {
        intervals.push((origin + start, origin + end, h.len()));
        let mut d = Distribution::new();
        for v in h.iter_recorded() {
            d.record_n(
                v.value_iterated_to().saturating_mul(unit.ns()),
                v.count_at_value(),
            );
        }
        merged.merge(&d);
    }
    let mut notes =
        vec!["interval log: distributions per interval, no per-request timestamps".into()];
    if unit != HlogUnit::Ns {
        notes.push(
            format!("values read as {unit:?} (--hlog-unit) and converted to ns")
                .replace("Us", "µs")
                .replace("Ms", "ms"),
        );
    }
    if let Some(t) = tag {
        notes.push(format!("intervals tagged {t:?} only"));
    }
    if let Some(st) = start_time {
        notes.push(format!(
            "StartTime {st:.3} s since the epoch{}",
            base_time.map_or(String::new(), |b| format!(", BaseTime {b:.3}"))
        ));
    }
    let mut recorder = Recorder::new(1, 0);
    recorder.phases[0].corrected = merged;
    recorder.phases[0].completed = recorder.phases[0].corrected.count();
    Ok(Imported {
        requests: recorder.phases[0].completed,
        recorder,
        errors: 0,
        modelled: None,
        clock_offset: None,
        intervals,
        start_time_s: start_time.or(base_time),
        notes,
    })
}

/// Standard base64 (the .hlog encoding); hand-written because hdrhistogram
/// decodes it internally but does not expose the decoder, and a crate for
/// this one call is not worth a dependency.
fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let val = |c: u8| -> Option<u32> {
        Some(
            match c {
                b'A'..=b'Z' => c - b'A',
                b'a'..=b'z' => c - b'a' + 26,
                b'0'..=b'9' => c - b'0' + 52,
                b'+' => 62,
                b'/' => 63,
                _ => return None,
            }
            .into(),
        )
    };
    let digits: Vec<u32> = s
        .trim()
        .bytes()
        .filter(|&c| c != b'=')
        .map(val)
        .collect::<Option<_>>()?;
    let mut out = Vec::with_capacity(digits.len() * 3 / 4);
    for chunk in digits.chunks(4) {
        let n = chunk.iter().fold(0u32, |acc, &v| (acc << 6) | v) << (6 * (4 - chunk.len() as u32));
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(name: &str, text: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("correlator-import-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let p = dir.join(name);
        std::fs::write(&p, text).expect("write");
        p
    }

    fn opts(path: PathBuf, format: Format) -> ImportOptions {
        ImportOptions {
            path,
            format,
            clock: Clock::Monotonic,
            expected_interval_ns: None,
            tag: None,
            hlog_unit: HlogUnit::Ns,
        }
    }

    /// An .hlog in µs with two tags and a BaseTime, as wrk2 or a Java
    /// service writes it: refused without --tag, read per tag with the
    /// unit applied and the intervals placed at BaseTime + offset.
    #[test]
    fn hlog_tags_units_and_base_time_round_trip() {
        use hdrhistogram::serialization::{
            V2DeflateSerializer,
            interval_log::{IntervalLogWriterBuilder, Tag},
        };
        let base = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
        let mut bytes = Vec::new();
        let mut ser = V2DeflateSerializer::new();
        {
            let mut log = IntervalLogWriterBuilder::new()
                .with_start_time(base)
                .with_base_time(base)
                .begin_log_with(&mut bytes, &mut ser)
                .expect("log");
            for second in 0..3u64 {
                let mut fast = hdrhistogram::Histogram::<u64>::new(3).expect("h");
                let mut slow = hdrhistogram::Histogram::<u64>::new(3).expect("h");
                for v in 0..1000u64 {
                    fast.record(100 + v % 10).expect("record"); // ~100 µs
                    slow.record(5_000 + v % 10).expect("record"); // ~5 ms
                }
                let at = std::time::Duration::from_secs(second);
                let one = std::time::Duration::from_secs(1);
                log.write_histogram(&fast, at, one, Tag::new("get"))
                    .expect("w");
                log.write_histogram(&slow, at, one, Tag::new("set"))
                    .expect("w");
            }
        }
        let p = write("tags.hlog", std::str::from_utf8(&bytes).expect("utf8"));
        let err = import(&opts(p.clone(), Format::Hlog))
            .err()
            .expect("refused");
        assert!(format!("{err}").contains("--tag"), "{err}");
        let mut o = opts(p, Format::Hlog);
        o.tag = Some("get".into());
        o.hlog_unit = HlogUnit::Us;
        let imp = import(&o).expect("import");
        assert_eq!(imp.requests, 3000);
        let d = &imp.recorder.phases[0].corrected;
        let p50 = d.percentile(50.0).value_ns.expect("p50");
        assert!(
            (100_000..=110_000).contains(&p50),
            "µs read as ns×1000: {p50}"
        );
        assert_eq!(imp.intervals.len(), 3);
        assert!(
            (imp.intervals[1].0 - 1_700_000_001.0).abs() < 1e-6,
            "{:?}",
            imp.intervals
        );
        assert_eq!(imp.start_time_s, Some(1_700_000_000.0));
        o.tag = Some("set".into());
        let set = import(&o).expect("import");
        let p50 = set.recorder.phases[0]
            .corrected
            .percentile(50.0)
            .value_ns
            .expect("p50");
        assert!((4_990_000..=5_010_000).contains(&p50), "{p50}");
    }

    #[test]
    fn csv_with_header_and_status() {
        let p = write(
            "a.csv",
            "end_ns,start_ns,status\n2000,1000,200\n5000,1000,500\n",
        );
        let imp = import(&opts(p, Format::Csv)).expect("import");
        assert_eq!(imp.requests, 2);
        assert_eq!(imp.errors, 1);
        let d = &imp.recorder.phases[0].corrected;
        assert_eq!(d.count(), 2);
        assert!(d.max().is_some_and(|m| (3990..=4010).contains(&m)));
    }

    #[test]
    fn jsonl_and_errors_name_file_and_line() {
        let p = write(
            "b.jsonl",
            "{\"start_ns\": 10, \"end_ns\": 30}\n{\"start_ns\": 10}\n",
        );
        let err = import(&opts(p.clone(), Format::Jsonl))
            .err()
            .expect("malformed");
        let msg = err.to_string();
        assert!(msg.contains("b.jsonl:2") && msg.contains("end_ns"), "{msg}");
        let p = write("c.csv", "1,2\n3,x\n");
        let msg = import(&opts(p, Format::Csv))
            .err()
            .expect("malformed")
            .to_string();
        assert!(
            msg.contains("c.csv:2") && msg.contains("not an integer"),
            "{msg}"
        );
        let p = write("d.csv", "5,2\n");
        let msg = import(&opts(p, Format::Csv))
            .err()
            .expect("malformed")
            .to_string();
        assert!(msg.contains("end before start"), "{msg}");
    }

    #[test]
    fn closed_loop_correction_is_a_model() {
        // 99 fast requests and one 10 ms stall, meant to go out every 100 µs:
        // the correction adds the ~99 requests the stall held back.
        let mut text = String::new();
        for i in 0..99u64 {
            text.push_str(&format!("{},{}\n", i * 100_000, i * 100_000 + 5_000));
        }
        text.push_str("9900000,19900000\n");
        let p = write("e.csv", &text);
        let mut o = opts(p, Format::Csv);
        o.expected_interval_ns = Some(100_000);
        let imp = import(&o).expect("import");
        assert_eq!(imp.recorder.phases[0].corrected.count(), 100);
        let m = imp.modelled.expect("modelled");
        assert!(m.count() >= 190, "modelled count {}", m.count());
        assert!(imp.notes.iter().any(|n| n.contains("model")));
    }

    #[test]
    fn realtime_is_converted_with_a_measured_offset() {
        let o = measure_clock_offset();
        assert!(o.uncertainty_ns < 1_000_000);
        let now_real = (i128::from(clock::monotonic_ns()) + o.offset_ns) as u64;
        let p = write("f.csv", &format!("{},{}\n", now_real, now_real + 1000));
        let mut opt = opts(p, Format::Csv);
        opt.clock = Clock::Realtime;
        let imp = import(&opt).expect("import");
        assert!(imp.clock_offset.is_some());
        assert_eq!(imp.requests, 1);
    }

    #[test]
    fn base64_roundtrip_known_value() {
        assert_eq!(base64_decode("aGVsbG8=").as_deref(), Some(&b"hello"[..]));
        assert_eq!(base64_decode("a$"), None);
    }

    mod fuzz {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

            /// Any file content is imported or refused with an error, never
            /// a panic, in every format.
            #[test]
            fn any_file_is_imported_or_refused(bytes in proptest::collection::vec(any::<u8>(), 0..400),
                                               text in "[0-9a-z_,.:{}\"\n -]{0,300}") {
                for (i, content) in [bytes, text.into_bytes()].into_iter().enumerate() {
                    for (format, ext) in [(Format::Csv, "csv"), (Format::Jsonl, "jsonl"), (Format::Hlog, "hlog")] {
                        let dir = std::env::temp_dir().join(format!("correlator-fuzz-{}", std::process::id()));
                        let _ = std::fs::create_dir_all(&dir);
                        let p = dir.join(format!("f{i}.{ext}"));
                        std::fs::write(&p, &content).expect("write");
                        let _ = import(&opts(p, format));
                    }
                }
            }
        }
    }
}
