//! Anonymous and file memory mappings for the helpers that fault pages on
//! purpose (demo scenarios, the test workload, the fault-cost measurement):
//! one place for the unsafe mmap / madvise / munmap calls.

use std::{
    fs::File,
    os::{fd::AsRawFd as _, unix::fs::FileExt as _},
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result};

/// Makes every allocation over 128 KiB its own mapping, returned to the
/// kernel when freed. glibc otherwise raises that threshold to the largest
/// block freed so far (up to 32 MiB); big transient buffers, such as a
/// report being serialised, then come from the heap and stay resident after
/// they are freed, so a long-running `watch` would hold its peak memory
/// rather than its live memory (measured on `watch-memcheck`, 10 simulated
/// minutes: 148 MiB at 2 minutes, 206 MiB at the end; with this, +0.3%).
pub fn return_freed_memory() {
    // SAFETY: mallopt changes allocator tuning only; no memory is touched.
    unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024) };
}

pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096)
}

/// This process's resident memory (`/proc/self/statm`), bytes.
pub fn rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * page_size() as u64)
}

/// A new file `dir/correlator-NAME-PID.dat` of `len` bytes of `byte`,
/// written and synced, so its pages are clean and can be dropped from the
/// page cache (for reads or faults that must go to the disk). The caller
/// need not remove it: it is unlinked once written.
pub fn disk_file(dir: &Path, name: &str, len: usize, byte: u8) -> Result<(File, PathBuf)> {
    let path = dir.join(format!("correlator-{name}-{}.dat", std::process::id()));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    let chunk = vec![byte; len.min(1 << 20)];
    let mut at = 0;
    while at < len {
        let n = chunk.len().min(len - at);
        file.write_all_at(&chunk[..n], at as u64)
            .with_context(|| format!("cannot write {}", path.display()))?;
        at += n;
    }
    file.sync_all()?;
    // Unlinked at once: the file lives while it is open or mapped, so a
    // process killed with SIGKILL (the demo suite ends its servers so)
    // leaves nothing behind. Before, each major-faults run left 6 MiB in
    // /var/tmp.
    std::fs::remove_file(&path).with_context(|| format!("cannot unlink {}", path.display()))?;
    Ok((file, path))
}

/// A mapping owned by this value (unmapped on drop). Kept as an address so
/// it can be shared across threads.
pub struct Region {
    addr: usize,
    len: usize,
}

impl Region {
    /// Fresh anonymous memory in 4 KiB pages (no huge pages: one fault per page).
    pub fn anonymous(len: usize) -> std::io::Result<Self> {
        // SAFETY: anonymous private mapping; checked below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        Self::checked(ptr, len, libc::MADV_NOHUGEPAGE)
    }

    /// A shared read-only mapping of `file`, without readahead (every page
    /// is its own fault once evicted).
    pub fn file(file: &std::fs::File, len: usize) -> std::io::Result<Self> {
        // SAFETY: shared read-only mapping of an open file; checked below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        Self::checked(ptr, len, libc::MADV_RANDOM)
    }

    fn checked(ptr: *mut libc::c_void, len: usize, advice: libc::c_int) -> std::io::Result<Self> {
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: ptr/len from a successful mmap.
        unsafe { libc::madvise(ptr, len, advice) };
        Ok(Self {
            addr: ptr as usize,
            len,
        })
    }

    pub fn pages(&self) -> usize {
        self.len / page_size()
    }

    /// Touches every page: writes (anonymous) or reads (file); returns a
    /// sum so reads are not optimised away.
    pub fn touch(&self, write: bool) -> u64 {
        let mut sum = 0u64;
        for off in (0..self.len).step_by(page_size()) {
            let p = (self.addr + off) as *mut u8;
            // SAFETY: within the mapping; writes only to writable mappings
            // (callers pass write = true for anonymous regions).
            unsafe {
                if write {
                    p.write_volatile(1);
                } else {
                    sum += u64::from(p.read_volatile());
                }
            }
        }
        sum
    }

    /// Drops the pages: the next touch faults them back.
    pub fn drop_pages(&self) {
        // SAFETY: the mapping is ours; MADV_DONTNEED only drops its pages.
        unsafe {
            libc::madvise(
                self.addr as *mut libc::c_void,
                self.len,
                libc::MADV_DONTNEED,
            )
        };
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: addr/len from our own successful mmap, unmapped once.
        unsafe { libc::munmap(self.addr as *mut libc::c_void, self.len) };
    }
}

/// `1GiB`, `500MiB`, `10MB`, `4096`: a size in bytes. Hand-written: four
/// suffixes do not need a crate.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{s:?}: expected a size such as 500MiB or 2GiB"))?;
    let k: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "kib" => 1024.0,
        "m" | "mb" => 1e6,
        "mib" => 1024.0 * 1024.0,
        "g" | "gb" => 1e9,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tb" => 1e12,
        "tib" => 1024.0_f64.powi(4),
        u => {
            return Err(format!(
                "{s:?}: unknown unit {u:?} (B, KiB, MiB, GiB, TiB, kB, MB, GB, TB)"
            ));
        }
    };
    Ok((n * k) as u64)
}

/// A memory cgroup made for a run, with a hard limit: on cgroup v1 (a
/// `memory` hierarchy) `memory.limit_in_bytes`, on v2 `memory.max` under
/// the unified hierarchy (its memory controller enabled for the root's
/// children). Its processes go back to the root cgroup and it is removed
/// on drop, so the machine is left as it was found.
pub struct LimitedCgroup {
    pub dir: PathBuf,
    /// `v1` or `v2`: which interface set the limit.
    pub version: &'static str,
    root_procs: PathBuf,
}

impl LimitedCgroup {
    /// Makes the cgroup `name` (its path under the hierarchy's root) with
    /// a limit of `bytes`.
    pub fn new(name: &str, bytes: u64) -> Result<Self> {
        let v1 = PathBuf::from("/sys/fs/cgroup/memory");
        let (root, version, file) = if v1.join("memory.limit_in_bytes").exists() {
            (v1, "v1", "memory.limit_in_bytes")
        } else {
            let root = crate::target::cgroup2_mount()
                .context("no memory cgroup hierarchy (neither v1's memory nor cgroup2)")?;
            let controllers = std::fs::read_to_string(root.join("cgroup.controllers"))
                .with_context(|| format!("cannot read {}/cgroup.controllers", root.display()))?;
            anyhow::ensure!(
                controllers.split_whitespace().any(|c| c == "memory"),
                "the cgroup v2 hierarchy at {} has no memory controller",
                root.display()
            );
            std::fs::write(root.join("cgroup.subtree_control"), "+memory")
                .context("cannot enable the memory controller (needs root)")?;
            (root, "v2", "memory.max")
        };
        let dir = root.join(name);
        if let Err(e) = std::fs::create_dir(&dir)
            && e.kind() != std::io::ErrorKind::AlreadyExists
        {
            return Err(e).with_context(|| format!("cannot create {} (needs root)", dir.display()));
        }
        let me = Self {
            dir,
            version,
            root_procs: root.join("cgroup.procs"),
        };
        std::fs::write(me.dir.join(file), bytes.to_string())
            .with_context(|| format!("cannot set {}/{file}", me.dir.display()))?;
        Ok(me)
    }

    /// Moves process `pid` (all its threads) into the cgroup.
    pub fn add(&self, pid: u32) -> Result<()> {
        std::fs::write(self.dir.join("cgroup.procs"), pid.to_string())
            .with_context(|| format!("cannot move {pid} into {}", self.dir.display()))
    }

    /// A number from the cgroup's `memory.stat` (v1 and v2 share the
    /// names this is used for: `pgmajfault`, `swap`...), 0 when absent.
    pub fn stat(&self, field: &str) -> u64 {
        std::fs::read_to_string(self.dir.join("memory.stat"))
            .unwrap_or_default()
            .lines()
            .find_map(|l| {
                l.strip_prefix(field)?
                    .strip_prefix(' ')?
                    .trim()
                    .parse()
                    .ok()
            })
            .unwrap_or(0)
    }
}

impl Drop for LimitedCgroup {
    fn drop(&mut self) {
        let procs = std::fs::read_to_string(self.dir.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.lines() {
            let _ = std::fs::write(&self.root_procs, pid);
        }
        // A cgroup whose last process just exited stays busy briefly.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

#[cfg(test)]
mod parse_bytes_tests {
    use super::parse_bytes;

    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_bytes("1GiB"), Ok(1 << 30));
        assert_eq!(parse_bytes("500MiB"), Ok(500 << 20));
        assert_eq!(parse_bytes("1.5 GB"), Ok(1_500_000_000));
        assert_eq!(parse_bytes("10kb"), Ok(10_000));
        assert!(parse_bytes("12 parsecs").is_err());
        assert!(parse_bytes("GiB").is_err());
    }
}
