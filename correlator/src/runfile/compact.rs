//! The compact run file: a short magic, then frames, each a little-endian
//! `u32` length and one zstd frame of MessagePack (field names kept, so the
//! format describes itself the way the JSON did: fields added later read
//! with their defaults, fields removed are skipped).
//!
//! A recorder writes a [`Frame::Start`] when it attaches and a
//! [`Frame::Delta`] about once a second while it records (see
//! the `journal` module); when it finishes, it replaces that file with one
//! holding a single [`Frame::Complete`]. A recorder killed with SIGKILL
//! leaves the journal, which [`read`] turns into a run up to its last
//! whole frame.
//!
//! zstd and rmp-serde are well-kept crates; only the framing (a length
//! before each frame, so a torn last frame is told from a corrupt one) is
//! ours.

use anyhow::{Context as _, Result};
use serde::{Deserialize, Serialize};

use std::collections::BTreeMap;

use correlator_common::{Counter, RequestRecord};

use super::{ACCOUNT_NAMES, BucketRow, Environment, RunFile, SCHEMA, counter_name};
use crate::timeline::{OffCpu, SyscallSpan, ThreadAccount, stacks, steal::StealSample};
use crate::{latency::passive::PassiveSource, probes::SyscallTime, target::Target};

/// First bytes of a compact run file (never the first bytes of JSON).
pub const MAGIC: &[u8; 8] = b"\x89CRUN\r\n\x1a";

/// zstd level of the journal's frames, written every second while the
/// target runs: zstd's default, cheap.
const JOURNAL_LEVEL: i32 = 3;

/// zstd level of a complete run, written once and read many times: 19
/// makes a demo run 20× smaller than its JSON where 3 made it 16×, for
/// 0.4 s at the end of recording (docs/run-file.md). Above
/// [`ARCHIVE_MAX_BYTES`] of MessagePack the cost grows to seconds, so
/// bigger runs get [`LARGE_LEVEL`].
const ARCHIVE_LEVEL: i32 = 19;
const LARGE_LEVEL: i32 = 9;
const ARCHIVE_MAX_BYTES: usize = 16 << 20;

#[derive(Serialize, Deserialize)]
pub enum Frame {
    /// What a recorder knows when it attaches.
    Start(Box<Start>),
    /// What it drained since the previous frame.
    Delta(Box<Delta>),
    /// The whole run, written once recording finished.
    Complete(Box<RunFile>),
}

/// What a recorder knows when it attaches.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Start {
    pub schema: String,
    pub correlator_version: String,
    pub target: Target,
    pub follow_children: bool,
    pub started_ns: u64,
    pub bucket_ns: u64,
    pub counter_names: Vec<String>,
    pub account_names: Vec<String>,
    pub min_offcpu_record_ns: u64,
    pub sample_period_ns: u64,
    pub syscall_time: SyscallTime,
    pub thread_names: BTreeMap<u32, String>,
    pub environment: Environment,
    /// `--syscalls` / `--uprobe`: where the server-side latency comes from.
    #[serde(default)]
    pub passive: Option<PassiveSource>,
}

/// What was drained since the previous frame. Buckets carry their whole
/// current counts (a later frame's row replaces an earlier one's); the
/// records are new ones only.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Delta {
    /// CLOCK_MONOTONIC ns when the frame was written.
    pub at_ns: u64,
    #[serde(with = "super::buckets")]
    pub buckets: Vec<BucketRow>,
    #[serde(with = "crate::timeline::columns::offcpu")]
    pub offcpu: Vec<OffCpu>,
    #[serde(with = "crate::timeline::columns::accounts")]
    pub thread_accounts: Vec<ThreadAccount>,
    pub syscalls: Vec<SyscallSpan>,
    pub stack_samples: Vec<stacks::Sample>,
    pub steal: Vec<StealSample>,
    /// Server-side requests (`--syscalls`, `--uprobe`) the recorder kept.
    #[serde(default)]
    pub requests: Vec<Request>,
}

/// A server-side request as the probes delivered it
/// ([`correlator_common::RequestRecord`], which has no serde).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    pub tgid: u32,
    pub tid: u32,
    pub fd: u32,
    pub reads: u32,
    pub bytes_in: u32,
    pub bytes_out: u32,
    pub start_ns: u64,
    pub end_ns: u64,
    pub last_start_ns: u64,
}

impl From<&RequestRecord> for Request {
    fn from(r: &RequestRecord) -> Self {
        Self {
            tgid: r.tgid,
            tid: r.tid,
            fd: r.fd,
            reads: r.reads,
            bytes_in: r.bytes_in,
            bytes_out: r.bytes_out,
            start_ns: r.start_ns,
            end_ns: r.end_ns,
            last_start_ns: r.last_start_ns,
        }
    }
}

impl From<Request> for RequestRecord {
    fn from(r: Request) -> Self {
        Self {
            tgid: r.tgid,
            tid: r.tid,
            fd: r.fd,
            reads: r.reads,
            bytes_in: r.bytes_in,
            bytes_out: r.bytes_out,
            start_ns: r.start_ns,
            end_ns: r.end_ns,
            last_start_ns: r.last_start_ns,
        }
    }
}

impl Start {
    pub fn new(
        target: Target,
        cfg: &crate::probes::ProbeConfig,
        started_ns: u64,
        bucket_ns: u64,
        thread_names: BTreeMap<u32, String>,
    ) -> Self {
        Self {
            schema: SCHEMA.to_string(),
            correlator_version: env!("CARGO_PKG_VERSION").to_string(),
            target,
            follow_children: cfg.follow_children,
            started_ns,
            bucket_ns,
            counter_names: Counter::ALL
                .iter()
                .map(|&c| counter_name(c).to_string())
                .collect(),
            account_names: ACCOUNT_NAMES.map(String::from).to_vec(),
            min_offcpu_record_ns: u64::try_from(cfg.min_offcpu_record.as_nanos())
                .unwrap_or(u64::MAX),
            sample_period_ns: cfg.sample_period_ns(),
            syscall_time: cfg.syscall_time,
            thread_names,
            environment: Environment::current(),
            passive: cfg.passive.clone(),
        }
    }
}

/// One journal frame as bytes: length, then the compressed MessagePack.
pub fn encode(frame: &Frame) -> Result<Vec<u8>> {
    let mut z = zstd::stream::Encoder::new(Vec::new(), JOURNAL_LEVEL).context("zstd")?;
    rmp_serde::encode::write_named(&mut z, frame).context("cannot encode the run")?;
    framed(z.finish().context("zstd")?)
}

fn framed(body: Vec<u8>) -> Result<Vec<u8>> {
    let len = u32::try_from(body.len()).context("a run-file frame over 4 GiB")?;
    let mut out = Vec::with_capacity(body.len() + 4);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&body);
    Ok(out)
}

/// Writes a complete compact run file.
pub fn write_complete(w: &mut impl std::io::Write, run: &RunFile) -> Result<()> {
    /// [`Frame`] by reference (same variants in the same order, so the
    /// same bytes), to encode a run without a copy of it.
    #[derive(Serialize)]
    enum FrameRef<'a> {
        #[expect(dead_code, reason = "keeps Complete's variant index")]
        Start(()),
        #[expect(dead_code, reason = "keeps Complete's variant index")]
        Delta(()),
        Complete(&'a RunFile),
    }
    w.write_all(MAGIC)?;
    let plain =
        rmp_serde::to_vec_named(&FrameRef::Complete(run)).context("cannot encode the run")?;
    let level = if plain.len() <= ARCHIVE_MAX_BYTES {
        ARCHIVE_LEVEL
    } else {
        LARGE_LEVEL
    };
    let body = zstd::bulk::compress(&plain, level).context("zstd")?;
    w.write_all(&framed(body)?)?;
    w.flush()?;
    Ok(())
}

/// The frames of a compact file, and whether its last frame was torn
/// (a recorder killed while writing it).
pub struct Frames {
    pub frames: Vec<Frame>,
    pub torn_bytes: usize,
}

/// Reads every whole frame of `bytes` (which start with [`MAGIC`]).
pub fn read(bytes: &[u8]) -> Result<Frames> {
    let mut rest = bytes
        .strip_prefix(MAGIC.as_slice())
        .context("not a compact run file")?;
    let mut frames = Vec::new();
    while !rest.is_empty() {
        let Some((len, body)) = rest.split_first_chunk::<4>() else {
            return Ok(Frames {
                frames,
                torn_bytes: rest.len(),
            });
        };
        let len = u32::from_le_bytes(*len) as usize;
        if body.len() < len {
            return Ok(Frames {
                frames,
                torn_bytes: rest.len(),
            });
        }
        let z = zstd::stream::Decoder::new(&body[..len]).context("zstd")?;
        let frame: Frame = rmp_serde::from_read(z)
            .with_context(|| format!("frame {} is malformed", frames.len() + 1))?;
        frames.push(frame);
        rest = &body[len..];
    }
    Ok(Frames {
        frames,
        torn_bytes: 0,
    })
}
