//! Memory stalls of the target's threads (direct reclaim, reclaim in the
//! memory cgroup, compaction, memory.high handling, mmap_lock waits), and
//! the memory cgroup the target runs in, read beside them.

use std::path::{Path, PathBuf};

use correlator_common::{MemStallKind, MemStallRecord};
use serde::{Deserialize, Serialize};

/// What held a thread up in memory management (see
/// `correlator_common::MemStallKind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StallKind {
    DirectReclaim,
    CgroupReclaim,
    Compaction,
    MemoryHigh,
    MmapLock,
    SwapIn,
}

impl StallKind {
    /// How a report says it.
    pub fn describe(self) -> &'static str {
        match self {
            StallKind::DirectReclaim => "direct reclaim (the machine short of memory)",
            StallKind::CgroupReclaim => "reclaim in its memory cgroup (at its limit)",
            StallKind::Compaction => {
                "direct compaction (a huge page or other high-order allocation)"
            }
            StallKind::MemoryHigh => "over its cgroup's memory.high (reclaim and penalty sleep)",
            StallKind::MmapLock => "waiting for the process's mmap_lock",
            StallKind::SwapIn => {
                "swap-in (faults reading its memory back from swap, or waiting for that read)"
            }
        }
    }

    fn from_kernel(kind: u32) -> Option<Self> {
        Some(match kind {
            k if k == MemStallKind::DirectReclaim as u32 => StallKind::DirectReclaim,
            k if k == MemStallKind::CgroupReclaim as u32 => StallKind::CgroupReclaim,
            k if k == MemStallKind::Compaction as u32 => StallKind::Compaction,
            k if k == MemStallKind::MemoryHigh as u32 => StallKind::MemoryHigh,
            k if k == MemStallKind::MmapLock as u32 => StallKind::MmapLock,
            k if k == MemStallKind::SwapIn as u32 => StallKind::SwapIn,
            _ => return None,
        })
    }
}

/// One memory stall of a target thread.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemStall {
    pub tid: u32,
    pub kind: StallKind,
    pub start_ns: u64,
    pub end_ns: u64,
}

impl MemStall {
    pub fn from_record(r: &MemStallRecord) -> Option<Self> {
        Some(Self {
            tid: r.tid,
            kind: StallKind::from_kernel(r.kind)?,
            start_ns: r.start_ns,
            end_ns: r.end_ns,
        })
    }
}

/// `outer` less the stalls of its thread inside it (`nested`, as [start,
/// end]; in any order): a swap-in is timed from its fault's entry to its
/// end, and a reclaim for the pages it reads (or an mmap_lock wait) inside
/// it is timed on its own. Stalls of one thread never overlap after this.
pub fn cut_around(outer: &MemStall, nested: &mut [(u64, u64)]) -> Vec<MemStall> {
    nested.sort_unstable();
    let mut pieces = Vec::with_capacity(nested.len() + 1);
    let mut from = outer.start_ns;
    for &(start, end) in nested.iter() {
        if start > from {
            pieces.push(MemStall {
                start_ns: from,
                end_ns: start,
                ..outer.clone()
            });
        }
        from = from.max(end);
    }
    if outer.end_ns > from {
        pieces.push(MemStall {
            start_ns: from,
            ..outer.clone()
        });
    }
    pieces
}

/// The target's memory cgroup and what limited it, at the end of the run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryCgroup {
    /// Its path in the hierarchy (e.g. `/system.slice/redis.service`).
    pub path: String,
    /// `v2` or `v1`.
    pub version: String,
    /// memory.high and memory.max (v2), or memory.limit_in_bytes (v1, as
    /// `max`); None: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub high: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<u64>,
    /// Usage (memory.current, or memory.usage_in_bytes).
    pub usage: u64,
    /// Times the limit was hit: v2 memory.events `high` and `max`, v1
    /// memory.failcnt (as `max_events`).
    #[serde(default)]
    pub high_events: u64,
    #[serde(default)]
    pub max_events: u64,
}

impl MemoryCgroup {
    /// The memory cgroup of `pid` (v2 first, then a v1 memory hierarchy).
    pub fn of(pid: u32) -> Option<Self> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        let v1 = text.lines().find_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
            controllers
                .split(',')
                .any(|c| c == "memory")
                .then(|| path.to_string())
        });
        if let Some(path) = v1 {
            let dir = PathBuf::from("/sys/fs/cgroup/memory").join(path.trim_start_matches('/'));
            return Self::read_v1(&dir, path);
        }
        let path = text
            .lines()
            .find_map(|l| l.strip_prefix("0::"))?
            .to_string();
        let dir = crate::target::cgroup2_mount()?.join(path.trim_start_matches('/'));
        Self::read_v2(&dir, path)
    }

    fn read_v2(dir: &Path, path: String) -> Option<Self> {
        let usage = number(&dir.join("memory.current"))?;
        let events = std::fs::read_to_string(dir.join("memory.events")).unwrap_or_default();
        let event = |name: &str| {
            events
                .lines()
                .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
                .unwrap_or(0)
        };
        Some(Self {
            path,
            version: "v2".into(),
            high: number(&dir.join("memory.high")),
            max: number(&dir.join("memory.max")),
            usage,
            high_events: event("high "),
            max_events: event("max "),
        })
    }

    fn read_v1(dir: &Path, path: String) -> Option<Self> {
        // v1 writes "no limit" as the largest page-aligned number.
        let limit = number(&dir.join("memory.limit_in_bytes")).filter(|&l| l < 1 << 62);
        Some(Self {
            path,
            version: "v1".into(),
            high: None,
            max: limit,
            usage: number(&dir.join("memory.usage_in_bytes"))?,
            high_events: 0,
            max_events: number(&dir.join("memory.failcnt")).unwrap_or(0),
        })
    }

    /// One line: the limits and the usage.
    pub fn describe(&self) -> String {
        let mib = |b: u64| format!("{:.0} MiB", b as f64 / (1 << 20) as f64);
        let mut parts = Vec::new();
        if let Some(h) = self.high {
            parts.push(format!("memory.high {}", mib(h)));
        }
        if let Some(m) = self.max {
            let name = if self.version == "v1" {
                "memory.limit_in_bytes"
            } else {
                "memory.max"
            };
            parts.push(format!("{name} {}", mib(m)));
        }
        parts.push(format!("usage {}", mib(self.usage)));
        if self.max_events + self.high_events > 0 {
            parts.push(format!(
                "limit hit {} times",
                self.max_events + self.high_events
            ));
        }
        format!("memory cgroup {} ({})", self.path, parts.join(", "))
    }
}

/// A cgroup file holding a number ("max": None).
fn number(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn swap_in(start_ns: u64, end_ns: u64) -> MemStall {
        MemStall {
            tid: 7,
            kind: StallKind::SwapIn,
            start_ns,
            end_ns,
        }
    }

    #[test]
    fn a_swap_in_is_cut_around_the_reclaims_inside_it() {
        let spans = |v: Vec<MemStall>| -> Vec<(u64, u64)> {
            v.iter().map(|m| (m.start_ns, m.end_ns)).collect()
        };
        // Two reclaims inside, given out of order.
        let pieces = cut_around(&swap_in(100, 1000), &mut [(600, 700), (200, 400)]);
        assert_eq!(spans(pieces.clone()), [(100, 200), (400, 600), (700, 1000)]);
        assert!(
            pieces
                .iter()
                .all(|m| m.kind == StallKind::SwapIn && m.tid == 7)
        );
        // One at its very start and one reaching its end: nothing empty.
        let pieces = cut_around(&swap_in(100, 1000), &mut [(100, 300), (900, 1000)]);
        assert_eq!(spans(pieces), [(300, 900)]);
        // Nothing inside: itself.
        assert_eq!(
            spans(cut_around(&swap_in(100, 1000), &mut [])),
            [(100, 1000)]
        );
    }
}
