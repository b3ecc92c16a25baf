//! The report directory of `correlator watch`: one subdirectory per
//! report, named by its UTC time so names sort by age; at most
//! `--max-reports-per-hour` written in any hour, and at most `--max-disk`
//! bytes kept (the oldest reports removed first, and said so).

use std::{
    collections::VecDeque,
    path::{Path, PathBuf},
    time::{Duration, Instant, SystemTime},
};

use anyhow::{Context as _, Result};

/// Files of one report, inside its directory.
pub const RUN_FILE: &str = "capture.run";
pub const REPORT_JSON: &str = "report.json";
pub const REPORT_HTML: &str = "report.html";
pub const TRACE: &str = "trace.perfetto-trace";

pub struct ReportDir {
    root: PathBuf,
    max_per_hour: u32,
    max_disk: u64,
    written: VecDeque<Instant>,
}

/// What the retention rules did with one report.
#[derive(Debug, PartialEq)]
pub struct Removed {
    pub dir: PathBuf,
    pub bytes: u64,
}

impl ReportDir {
    /// Creates `root` if needed; fails (before attaching) if it cannot.
    pub fn open(root: &Path, max_per_hour: u32, max_disk: u64) -> Result<Self> {
        std::fs::create_dir_all(root)
            .with_context(|| format!("cannot create the report directory {}", root.display()))?;
        let probe = root.join(".correlator-write-test");
        std::fs::write(&probe, b"")
            .with_context(|| format!("cannot write into {}", root.display()))?;
        let _ = std::fs::remove_file(probe);
        Ok(Self {
            root: root.to_path_buf(),
            max_per_hour,
            max_disk,
            written: VecDeque::new(),
        })
    }

    /// Whether one more report fits the hourly budget now.
    pub fn allowed(&mut self, now: Instant) -> bool {
        while self
            .written
            .front()
            .is_some_and(|t| now.duration_since(*t) >= Duration::from_secs(3600))
        {
            self.written.pop_front();
        }
        self.written.len() < self.max_per_hour as usize
    }

    /// A new, empty directory for a report written at `wall`.
    pub fn create(&mut self, now: Instant, wall: SystemTime) -> Result<PathBuf> {
        let name = dir_name(wall);
        let mut dir = self.root.join(&name);
        let mut n = 1;
        while dir.exists() {
            n += 1;
            dir = self.root.join(format!("{name}-{n}"));
        }
        std::fs::create_dir(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        self.written.push_back(now);
        Ok(dir)
    }

    /// Removes the oldest reports until the directory holds at most
    /// `max_disk` bytes; the newest report is never removed (if it alone is
    /// larger, that is said by the caller from the returned size).
    pub fn enforce_disk(&self) -> Result<(Vec<Removed>, u64)> {
        let mut reports = list(&self.root)?;
        let mut total: u64 = reports.iter().map(|r| r.bytes).sum();
        let mut removed = Vec::new();
        // Oldest first (names sort by time); keep the newest.
        while total > self.max_disk && reports.len() > 1 {
            let oldest = reports.remove(0);
            std::fs::remove_dir_all(&oldest.dir)
                .with_context(|| format!("cannot remove {}", oldest.dir.display()))?;
            total -= oldest.bytes;
            removed.push(Removed {
                dir: oldest.dir,
                bytes: oldest.bytes,
            });
        }
        Ok((removed, total))
    }
}

/// `2026-12-01T04-05-06Z`: RFC 3339 with `-` for `:` (valid on every file
/// system), sorting by time.
pub fn dir_name(wall: SystemTime) -> String {
    humantime::format_rfc3339_seconds(wall)
        .to_string()
        .replace(':', "-")
}

/// One report directory and its size.
#[derive(Debug)]
pub struct Entry {
    pub dir: PathBuf,
    pub bytes: u64,
}

/// The report directories under `root`, oldest first.
pub fn list(root: &Path) -> Result<Vec<Entry>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(root).with_context(|| format!("cannot read {}", root.display()))? {
        let e = e?;
        let dir = e.path();
        if !e.file_type()?.is_dir()
            || !dir.join(REPORT_JSON).exists() && !dir.join(RUN_FILE).exists()
        {
            continue;
        }
        let mut bytes = 0;
        for f in std::fs::read_dir(&dir)?.flatten() {
            bytes += f.metadata().map_or(0, |m| m.len());
        }
        out.push(Entry { dir, bytes });
    }
    out.sort_by(|a, b| a.dir.cmp(&b.dir));
    Ok(out)
}

/// `correlator report DIR` on a watch directory: one line per report,
/// oldest first: when, why, what it found, where.
pub fn list_text(root: &Path) -> Result<String> {
    use std::fmt::Write as _;
    let entries = list(root)?;
    let mut out = String::new();
    if entries.is_empty() {
        writeln!(
            out,
            "{}: no reports (a watch directory holds one directory per report)",
            root.display()
        )?;
        return Ok(out);
    }
    writeln!(
        out,
        "{:<22} {:<13} {:<10} {:>9} {:>8} {:>9}  trigger",
        "written (UTC)", "top cause", "signature", "p99", "episodes", "size"
    )?;
    let mut total = 0;
    for e in &entries {
        total += e.bytes;
        let name = e
            .dir
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        let Ok(text) = std::fs::read(e.dir.join(REPORT_JSON)) else {
            writeln!(
                out,
                "{name:<22} (no {REPORT_JSON}: the run file alone; `correlator report {}/{RUN_FILE}`)",
                e.dir.display()
            )?;
            continue;
        };
        let r: crate::report::Report = match serde_json::from_slice(&text) {
            Ok(r) => r,
            Err(err) => {
                writeln!(out, "{name:<22} (unreadable {REPORT_JSON}: {err})")?;
                continue;
            }
        };
        let cause = r
            .classification
            .causes
            .first()
            .map_or("-", |c| c.cause.name());
        let sig = serde_json::to_value(r.classification.signature)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        let p99 = r
            .latency
            .summary
            .value_at(99.0)
            .map_or_else(|| "-".into(), |ns| format!("{:.2}ms", ns as f64 / 1e6));
        let trigger = r
            .notes
            .iter()
            .find_map(|n| n.strip_prefix("written by correlator watch: "))
            .unwrap_or("-");
        writeln!(
            out,
            "{name:<22} {cause:<13} {sig:<10} {p99:>9} {:>8} {:>8}K  {trigger}",
            r.episodes.len(),
            e.bytes / 1024
        )?;
    }
    writeln!(
        out,
        "{} report(s), {} MiB in {}; open one with `correlator report DIR/<time>/{RUN_FILE}` or its {REPORT_HTML}",
        entries.len(),
        total / (1024 * 1024),
        root.display()
    )?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hourly_budget_and_disk_limit() -> Result<()> {
        let root = std::env::temp_dir().join(format!("correlator-outdir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let mut d = ReportDir::open(&root, 2, 2_500)?;
        let t0 = Instant::now();
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let mut dirs = Vec::new();
        for i in 0..3u64 {
            assert_eq!(d.allowed(t0), i < 2);
            let dir = d.create(t0, wall + Duration::from_secs(i))?;
            std::fs::write(dir.join(REPORT_JSON), vec![b'x'; 1_000])?;
            dirs.push(dir);
        }
        // An hour later the budget is back.
        assert!(d.allowed(t0 + Duration::from_secs(3_600)));
        // 3,000 bytes over a 2,500-byte limit: the oldest goes.
        let (removed, total) = d.enforce_disk()?;
        assert_eq!(removed.len(), 1);
        assert_eq!(removed[0].dir, dirs[0]);
        assert_eq!(total, 2_000);
        assert!(!dirs[0].exists() && dirs[1].exists() && dirs[2].exists());
        assert_eq!(dir_name(wall), "2027-01-15T08-00-00Z");
        std::fs::remove_dir_all(&root)?;
        Ok(())
    }
}
