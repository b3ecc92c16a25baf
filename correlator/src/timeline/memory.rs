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
    /// Memory pressure over the run (PSI), when the kernel keeps it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pressure: Option<MemoryPressure>,
}

/// Memory pressure (the kernel's pressure stall information) over a run:
/// how much of its wall time some, or all, of the non-idle tasks in scope
/// were stalled on memory (reclaim, refaults, swap-in, throttling). It is
/// the kernel's own total, read at attach and at the end, so it holds
/// every task in scope, not only the target, and covers the whole run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryPressure {
    /// `cgroup` (v2's `memory.pressure` of the target's cgroup) or
    /// `machine` (`/proc/pressure/memory`: v1 keeps none per cgroup).
    pub scope: String,
    /// Time some tasks in scope were stalled on memory.
    pub some_ns: u64,
    /// Time all non-idle tasks in scope were stalled at once.
    pub full_ns: u64,
    /// The wall time it was read over.
    pub over_ns: u64,
}

impl MemoryPressure {
    pub fn describe(&self) -> String {
        let pct = |v: u64| 100.0 * v as f64 / self.over_ns.max(1) as f64;
        let scope = if self.scope == "cgroup" {
            "its cgroup's"
        } else {
            "the machine's (cgroup v1 keeps none per cgroup)"
        };
        format!(
            "memory pressure (PSI, {scope}): some {:.1}%, full {:.1}% of the run's {:.1} s",
            pct(self.some_ns),
            pct(self.full_ns),
            self.over_ns as f64 / 1e9
        )
    }
}

/// The PSI memory totals of the target's scope, read when the run starts,
/// to be differenced at its end ([`PsiReading::since`]).
#[derive(Clone, Debug)]
pub struct PsiReading {
    path: PathBuf,
    scope: &'static str,
    some_us: u64,
    full_us: u64,
    at_ns: u64,
}

impl PsiReading {
    /// The memory pressure file for `pid` now: its v2 cgroup's
    /// `memory.pressure`, or the machine's. None when the kernel keeps no
    /// PSI (built without it, or booted with psi=0).
    pub fn of(pid: u32, now_ns: u64) -> Option<Self> {
        // A v2 memory cgroup's own file; on v1 (or a hybrid machine whose
        // memory controller is v1) the v2 hierarchy's pressure is not the
        // memory cgroup's, so the machine's is read.
        let cgroup = MemoryCgroup::locate(pid)
            .filter(|(_, path, version)| *version == "v2" && path != "/")
            .map(|(dir, ..)| dir.join("memory.pressure"))
            .filter(|f| f.exists());
        let (path, scope) = match cgroup {
            Some(f) => (f, "cgroup"),
            None => (PathBuf::from("/proc/pressure/memory"), "machine"),
        };
        let (some_us, full_us) = read_psi(&path)?;
        Some(Self {
            path,
            scope,
            some_us,
            full_us,
            at_ns: now_ns,
        })
    }

    /// The pressure between this reading and now.
    pub fn since(&self, now_ns: u64) -> Option<MemoryPressure> {
        let (some, full) = read_psi(&self.path)?;
        Some(MemoryPressure {
            scope: self.scope.into(),
            some_ns: some.saturating_sub(self.some_us) * 1000,
            full_ns: full.saturating_sub(self.full_us) * 1000,
            over_ns: now_ns.saturating_sub(self.at_ns),
        })
    }
}

/// The `total=` (µs) of the `some` and `full` lines of a PSI file.
fn read_psi(path: &Path) -> Option<(u64, u64)> {
    parse_psi(&std::fs::read_to_string(path).ok()?)
}

fn parse_psi(text: &str) -> Option<(u64, u64)> {
    let total = |kind: &str| {
        text.lines()
            .find(|l| l.starts_with(kind))?
            .split_whitespace()
            .find_map(|f| f.strip_prefix("total="))?
            .parse()
            .ok()
    };
    Some((total("some ")?, total("full ").unwrap_or(0)))
}

impl MemoryCgroup {
    /// The memory cgroup of `pid` (a v1 memory hierarchy first, then v2).
    pub fn of(pid: u32) -> Option<Self> {
        let (dir, path, version) = Self::locate(pid)?;
        match version {
            "v1" => Self::read_v1(&dir, path),
            _ => Self::read_v2(&dir, path),
        }
    }

    /// Where the memory cgroup of `pid` is: its directory, its path in
    /// the hierarchy, and `v1` or `v2`.
    pub fn locate(pid: u32) -> Option<(PathBuf, String, &'static str)> {
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
            return Some((dir, path, "v1"));
        }
        let (dir, path) = crate::target::cgroup2_of(&text)?;
        Some((dir, path, "v2"))
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
            pressure: None,
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
            pressure: None,
        })
    }

    /// Whether a limit (memory.high, memory.max, v1's limit_in_bytes) is set.
    pub fn limited(&self) -> bool {
        self.high.is_some() || self.max.is_some()
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
        let pressure = self
            .pressure
            .as_ref()
            .map_or(String::new(), |p| format!("; {}", p.describe()));
        format!(
            "memory cgroup {} ({}){pressure}",
            self.path,
            parts.join(", ")
        )
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
    fn psi_totals_are_read_from_both_lines() {
        let text = "some avg10=0.00 avg60=0.00 avg300=0.00 total=3059329\nfull avg10=1.50 avg60=0.00 avg300=0.00 total=3008163\n";
        assert_eq!(parse_psi(text), Some((3_059_329, 3_008_163)));
        // The CPU file has no `full` line on older kernels.
        assert_eq!(parse_psi("some avg10=0.00 total=12\n"), Some((12, 0)));
        assert_eq!(parse_psi("garbage"), None);
        let p = MemoryPressure {
            scope: "machine".into(),
            some_ns: 1_500_000_000,
            full_ns: 500_000_000,
            over_ns: 10_000_000_000,
        };
        assert_eq!(
            p.describe(),
            "memory pressure (PSI, the machine's (cgroup v1 keeps none per cgroup)): some 15.0%, full 5.0% of the run's 10.0 s"
        );
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
