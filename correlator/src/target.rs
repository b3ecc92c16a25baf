//! The process being watched: validation of a user-given PID and
//! enumeration of its threads (and, optionally, descendant processes).

use std::{fs, path::PathBuf};

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

/// A live user-space process.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Target {
    pub pid: u32,
    pub comm: String,
    pub cmdline: String,
}

fn proc_path(pid: u32) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}"))
}

impl Target {
    /// Checks that `pid` names a live user-space process.
    pub fn from_pid(pid: u32) -> Result<Self> {
        if pid == 0 {
            bail!("PID 0 is the idle task, not a process; give the PID of the server to watch");
        }
        let dir = proc_path(pid);
        let Ok(stat) = fs::read_to_string(dir.join("stat")) else {
            bail!("no process with PID {pid}; check the PID (e.g. `pgrep -a NAME`)");
        };
        let Some(info) = parse_stat(&stat) else {
            bail!("cannot parse /proc/{pid}/stat");
        };
        if info.state == 'Z' || info.state == 'X' {
            bail!("process {pid} ({}) has already exited (zombie)", info.comm);
        }
        let tgid = read_tgid(pid);
        if tgid.is_some_and(|t| t != pid) {
            bail!(
                "{pid} is a thread of process {}, not a process; give the process PID",
                tgid.unwrap_or(0)
            );
        }
        let cmdline = fs::read(dir.join("cmdline")).unwrap_or_default();
        // PF_KTHREAD: kernel threads have no user address space and no cmdline.
        if info.flags & 0x0020_0000 != 0 || (cmdline.is_empty() && info.ppid == 2) {
            bail!(
                "PID {pid} ({}) is a kernel thread; correlator watches user-space servers",
                info.comm
            );
        }
        let cmdline = cmdline
            .split(|&b| b == 0)
            .filter(|s| !s.is_empty())
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .collect::<Vec<_>>()
            .join(" ");
        Ok(Self {
            pid,
            comm: info.comm,
            cmdline,
        })
    }

    /// Whether the process still runs (exists and is not a zombie).
    pub fn is_alive(&self) -> bool {
        is_alive(self.pid)
    }

    /// CPUs the process may run on (its main thread's affinity).
    pub fn allowed_cpus(&self) -> Option<Vec<usize>> {
        let status = fs::read_to_string(proc_path(self.pid).join("status")).ok()?;
        let list = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?;
        crate::cpu::parse_cpu_list(list)
    }

    /// The TCP ports the target listens on (its own listening sockets, in
    /// its network namespace): connections on them are the ones it
    /// accepted; its other TCP connections are upstreams it opened.
    pub fn listening_ports(&self) -> Vec<u16> {
        let dir = proc_path(self.pid);
        let inodes = socket_inodes(&dir);
        let mut ports: Vec<u16> = ["net/tcp", "net/tcp6"]
            .iter()
            .filter_map(|t| fs::read_to_string(dir.join(t)).ok())
            .flat_map(|table| listening_in(&table, &inodes))
            .collect();
        ports.sort_unstable();
        ports.dedup();
        ports
    }

    /// Whether the target (and with `children` its descendants) has a
    /// connection it opened: a TCP socket connecting or established, or a
    /// connected UDP socket, whose local port is not one of `listening`
    /// (its `listening_ports`).
    pub fn has_upstream(&self, listening: &[u16], children: bool) -> bool {
        let mut tgids = vec![self.pid];
        if children {
            tgids.extend(descendants(self.pid));
        }
        tgids.into_iter().any(|tgid| {
            let dir = proc_path(tgid);
            let inodes = socket_inodes(&dir);
            ["net/tcp", "net/tcp6", "net/udp", "net/udp6"]
                .iter()
                .filter_map(|t| fs::read_to_string(dir.join(t)).ok())
                .any(|table| outbound_in(&table, &inodes, listening))
        })
    }

    /// The target's cgroup v2 directory (its `0::` line in
    /// /proc/PID/cgroup under the cgroup2 mount), when there is one.
    pub fn cgroup2_dir(&self) -> Option<std::path::PathBuf> {
        let text = fs::read_to_string(proc_path(self.pid).join("cgroup")).ok()?;
        cgroup2_of(&text).map(|(dir, _)| dir)
    }

    /// (tgid, tid) of every thread of the target, and with `children` of
    /// every descendant process too.
    pub fn threads(&self, children: bool) -> Vec<(u32, u32)> {
        let mut tgids = vec![self.pid];
        if children {
            tgids.extend(descendants(self.pid));
        }
        tgids
            .into_iter()
            .flat_map(|tgid| task_ids(tgid).into_iter().map(move |tid| (tgid, tid)))
            .collect()
    }

    /// Adds the names of the target's live threads to `names` (a thread
    /// that exited keeps the name seen earlier).
    pub fn thread_names(
        &self,
        children: bool,
        names: &mut std::collections::BTreeMap<u32, String>,
    ) {
        for (tgid, tid) in self.threads(children) {
            if let Ok(comm) = fs::read_to_string(
                proc_path(tgid)
                    .join("task")
                    .join(tid.to_string())
                    .join("comm"),
            ) {
                names.insert(tid, comm.trim_end().to_string());
            }
        }
    }
}

/// How `correlator watch` names its server: a PID (watched until it
/// exits), or a comm or cgroup (re-found when the server restarts).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TargetSpec {
    Pid(u32),
    /// The process's comm (as in /proc/PID/comm, at most 15 bytes).
    Comm(String),
    /// A cgroup directory (v2, e.g. /sys/fs/cgroup/system.slice/redis.service).
    Cgroup(PathBuf),
}

impl TargetSpec {
    /// Whether a successor can be found when the target exits.
    pub fn follows_restarts(&self) -> bool {
        !matches!(self, TargetSpec::Pid(_))
    }

    /// The live process it names now, if any; the oldest (lowest PID of
    /// the longest-running) when several match.
    pub fn find(&self) -> Result<Option<Target>> {
        let pids: Vec<u32> = match self {
            TargetSpec::Pid(pid) => return Target::from_pid(*pid).map(Some),
            TargetSpec::Comm(name) => processes_named(name),
            TargetSpec::Cgroup(dir) => {
                if !is_cgroup_dir(dir) {
                    anyhow::bail!(
                        "{} is not a cgroup directory (not on a cgroup or cgroup2 filesystem; e.g. /sys/fs/cgroup/system.slice/redis.service, or under the cgroup2 mount of a hybrid system)",
                        dir.display()
                    );
                }
                let procs = dir.join("cgroup.procs");
                let text = fs::read_to_string(&procs).map_err(|e| {
                    anyhow::anyhow!(
                        "cannot read {} ({e}): give a cgroup directory",
                        procs.display()
                    )
                })?;
                text.lines().filter_map(|l| l.trim().parse().ok()).collect()
            }
        };
        let mut found: Vec<(u64, u32)> = pids
            .into_iter()
            .filter(|&p| is_alive(p))
            .filter_map(|p| Some((start_time(p)?, p)))
            .collect();
        found.sort_unstable();
        Ok(found
            .into_iter()
            .find_map(|(_, pid)| Target::from_pid(pid).ok()))
    }

    pub fn describe(&self) -> String {
        match self {
            TargetSpec::Pid(p) => format!("PID {p}"),
            TargetSpec::Comm(c) => format!("comm {c:?}"),
            TargetSpec::Cgroup(d) => format!("cgroup {}", d.display()),
        }
    }
}

/// Whether `dir` is on a cgroup filesystem (v2, or a v1 hierarchy: both
/// list their processes in cgroup.procs). A plain directory holding a file
/// of that name is not one.
pub fn is_cgroup_dir(dir: &std::path::Path) -> bool {
    const CGROUP_SUPER_MAGIC: i64 = 0x0027_e0eb;
    const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;
    let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: a valid C string and a zeroed statfs the call fills in.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(path.as_ptr(), &mut st) } != 0 {
        return false;
    }
    let kind = st.f_type as i64;
    kind == CGROUP_SUPER_MAGIC || kind == CGROUP2_SUPER_MAGIC
}

/// Where the cgroup v2 hierarchy is mounted (/sys/fs/cgroup on a unified
/// system, often /sys/fs/cgroup/unified on a hybrid one).
pub fn cgroup2_mount() -> Option<std::path::PathBuf> {
    let mounts = fs::read_to_string("/proc/self/mounts").ok()?;
    mounts.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let (_, at, kind) = (f.next()?, f.next()?, f.next()?);
        (kind == "cgroup2").then(|| std::path::PathBuf::from(at))
    })
}

/// The cgroup v2 directory named by a /proc/PID/cgroup text (its `0::`
/// line, under the cgroup2 mount), and that line's path in the hierarchy.
pub fn cgroup2_of(cgroup_file: &str) -> Option<(std::path::PathBuf, String)> {
    let path = cgroup_file.lines().find_map(|l| l.strip_prefix("0::"))?;
    let dir = cgroup2_mount()?.join(path.trim_start_matches('/'));
    Some((dir, path.to_string()))
}

/// User processes whose comm is `name` (only thread-group leaders).
fn processes_named(name: &str) -> Vec<u32> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            fs::read_to_string(proc_path(pid).join("comm")).is_ok_and(|c| c.trim_end() == name)
        })
        .collect()
}

/// Start time of `pid` in clock ticks since boot (field 22 of stat).
fn start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(proc_path(pid).join("stat")).ok()?;
    let close = stat.rfind(')')?;
    stat.get(close + 1..)?
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

/// Whether `pid` exists and is not a zombie.
pub fn is_alive(pid: u32) -> bool {
    fs::read_to_string(proc_path(pid).join("stat"))
        .ok()
        .and_then(|s| parse_stat(&s))
        .is_some_and(|i| i.state != 'Z' && i.state != 'X')
}

struct StatInfo {
    comm: String,
    state: char,
    ppid: u32,
    flags: u64,
    /// The CPU it last ran on (field 39; None in a truncated line).
    cpu: Option<u32>,
}

/// Parses the fields of /proc/PID/stat we need. The comm is in parentheses
/// and may itself contain spaces and parentheses: split at the last ')'.
fn parse_stat(stat: &str) -> Option<StatInfo> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat.get(open + 1..close)?.to_string();
    let mut rest = stat.get(close + 1..)?.split_whitespace();
    let state = rest.next()?.chars().next()?;
    let ppid = rest.next()?.parse().ok()?;
    // pgrp, session, tty_nr, tpgid, then flags (field 9).
    let flags = rest.nth(4)?.parse().ok()?;
    // Fields 10 to 38, then the CPU (field 39).
    let cpu = rest.nth(29).and_then(|f| f.parse().ok());
    Some(StatInfo {
        comm,
        state,
        ppid,
        flags,
        cpu,
    })
}

fn read_tgid(pid: u32) -> Option<u32> {
    let status = fs::read_to_string(proc_path(pid).join("status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
}

/// A thread asleep as the probes start, as /proc shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Asleep {
    /// The syscall it sleeps in (None: outside any, e.g. in a fault).
    pub syscall: Option<u32>,
    /// `D` (uninterruptible), not `S`.
    pub uninterruptible: bool,
    /// The CPU it last ran on.
    pub cpu: u32,
}

/// Whether thread `tid` of `tgid` sleeps now, and in what: its switch-out
/// came before the probes, so without this its first wakeup would be time
/// nobody recorded (a lock holder's sleep, a server's wait for input).
pub fn asleep(tgid: u32, tid: u32) -> Option<Asleep> {
    let dir = proc_path(tgid).join("task").join(tid.to_string());
    let stat = fs::read_to_string(dir.join("stat")).ok()?;
    let syscall = fs::read_to_string(dir.join("syscall")).ok()?;
    parse_asleep(&stat, &syscall)
}

/// [`asleep`] from the texts of /proc/…/stat and /proc/…/syscall.
fn parse_asleep(stat: &str, syscall: &str) -> Option<Asleep> {
    let info = parse_stat(stat)?;
    let uninterruptible = match info.state {
        'S' => false,
        'D' => true,
        _ => return None,
    };
    // "running", or the number (-1: not in a syscall) and its arguments.
    let nr: i64 = syscall.split_whitespace().next()?.parse().ok()?;
    Some(Asleep {
        syscall: u32::try_from(nr).ok(),
        uninterruptible,
        cpu: info.cpu?,
    })
}

fn task_ids(pid: u32) -> Vec<u32> {
    fs::read_dir(proc_path(pid).join("task"))
        .map(|dir| {
            dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// All processes descending from `pid` (children, grandchildren, ...),
/// parents before their children. Public for the tests' watchdog.
pub fn descendants(pid: u32) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = fs::read_dir("/proc")
        .map(|dir| {
            dir.filter_map(|e| {
                let child: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
                let stat = fs::read_to_string(proc_path(child).join("stat")).ok()?;
                Some((child, parse_stat(&stat)?.ppid))
            })
            .collect()
        })
        .unwrap_or_default();
    let mut found = Vec::new();
    let mut frontier = vec![pid];
    while let Some(parent) = frontier.pop() {
        for &(child, ppid) in &parents {
            if ppid == parent && !found.contains(&child) {
                found.push(child);
                frontier.push(child);
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_odd_comm() {
        let s = "1234 (a (b) c) S 1 1234 1234 0 -1 4194560 100 0 0 0";
        let info = parse_stat(s).expect("parses");
        assert_eq!(info.comm, "a (b) c");
        assert_eq!(info.state, 'S');
        assert_eq!(info.ppid, 1);
        assert_eq!(info.flags, 4194560);
    }

    #[test]
    fn a_thread_asleep_in_a_syscall_and_one_running() {
        let stat = "6079 (sl (e) ep) S 6077 6077 2376 0 -1 4194304 140 0 0 0 0 0 0 0 20 0 1 0 \
            862368 2990080 415 18446744073709551615 94139364966400 94139364984329 \
            140723644544864 0 0 0 0 6 0 1 0 0 17 1 0 0 0 0 0 94139364998416";
        let asleep = parse_asleep(stat, "230 0x0 0x0 0x7ffcc6d83570 0x7ffcc6d835b0 0x0 0x0\n");
        assert_eq!(
            asleep,
            Some(Asleep {
                syscall: Some(230),
                uninterruptible: false,
                cpu: 1
            })
        );
        // In a fault (no syscall), uninterruptibly.
        let faulting = parse_asleep(&stat.replace(") S ", ") D "), "-1 0x7ffc 0x5555\n");
        assert_eq!(
            faulting.map(|a| (a.syscall, a.uninterruptible)),
            Some((None, true))
        );
        assert_eq!(
            parse_asleep(&stat.replace(") S ", ") R "), "running\n"),
            None
        );
        assert_eq!(parse_asleep("garbage", "230"), None);
    }

    #[test]
    fn rejects_missing_and_kernel_pids() {
        let err = Target::from_pid(u32::MAX - 1).expect_err("no such pid");
        assert!(err.to_string().contains("no process with PID"), "{err}");
        let err = Target::from_pid(0).expect_err("idle");
        assert!(err.to_string().contains("idle task"), "{err}");
        // PID 2 is kthreadd on Linux.
        let err = Target::from_pid(2).expect_err("kthreadd");
        assert!(err.to_string().contains("kernel thread"), "{err}");
    }

    #[test]
    fn own_process_is_a_target_with_threads() {
        let me = Target::from_pid(std::process::id()).expect("self");
        assert!(me.is_alive());
        let threads = me.threads(false);
        assert!(
            threads
                .iter()
                .any(|&(tgid, tid)| tgid == me.pid && tid == me.pid)
        );
    }
}

/// The inodes of the sockets among the descriptors of the process whose
/// /proc directory is `dir`.
fn socket_inodes(dir: &std::path::Path) -> std::collections::HashSet<u64> {
    fs::read_dir(dir.join("fd"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| fs::read_link(e.path()).ok())
        .filter_map(|l| {
            l.to_str()?
                .strip_prefix("socket:[")?
                .strip_suffix(']')?
                .parse()
                .ok()
        })
        .collect()
}

/// Whether a /proc/net/{tcp,udp}[6] `table` holds a socket of `inodes`
/// with a peer (TCP established or connecting, UDP connected: state 01
/// or 02 and a remote port) on a local port not in `listening`.
fn outbound_in(table: &str, inodes: &std::collections::HashSet<u64>, listening: &[u16]) -> bool {
    table.lines().skip(1).any(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        let port = |addr: &str| u16::from_str_radix(addr.rsplit(':').next()?, 16).ok();
        let (Some(local), Some(remote), Some(state), Some(inode)) = (
            f.get(1).and_then(|a| port(a)),
            f.get(2).and_then(|a| port(a)),
            f.get(3),
            f.get(9).and_then(|i| i.parse::<u64>().ok()),
        ) else {
            return false;
        };
        matches!(*state, "01" | "02")
            && remote != 0
            && !listening.contains(&local)
            && inodes.contains(&inode)
    })
}

/// Local ports of the LISTEN sockets (state 0A) of a /proc/net/tcp table
/// whose inode is one of `inodes`.
fn listening_in(table: &str, inodes: &std::collections::HashSet<u64>) -> Vec<u16> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            // sl local rem st tx:rx tr:when retrnsmt uid timeout inode
            let (local, state, inode) = (f.get(1)?, f.get(3)?, f.get(9)?);
            if *state != "0A" || !inodes.contains(&inode.parse().ok()?) {
                return None;
            }
            u16::from_str_radix(local.rsplit(':').next()?, 16).ok()
        })
        .collect()
}

#[cfg(test)]
mod listen_tests {
    use super::*;

    #[test]
    fn only_the_targets_listening_sockets_count() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1 0000000000000000 100 0 0 10 0
   1: 0100007F:18EB 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 222 1 0000000000000000 100 0 0 10 0
   2: 0100007F:D431 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 111 1 0000000000000000 20 4 30 10 -1
";
        let ours: std::collections::HashSet<u64> = [111].into();
        assert_eq!(listening_in(table, &ours), vec![0x1F90]);
    }

    #[test]
    fn an_upstream_is_a_connection_on_a_port_the_target_does_not_listen_on() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 333 1 0000000000000000 20 4 30 10 -1
";
        let ours: std::collections::HashSet<u64> = [111, 333].into();
        // An accepted connection (local port 8080, listened on) is not one.
        assert!(!outbound_in(table, &ours, &[0x1F90]));
        // Without the listener, the same connection is the target's own.
        assert!(outbound_in(table, &ours, &[]));
        // Nor is another process's socket.
        assert!(!outbound_in(table, &[111].into(), &[]));
        let connecting = "  sl  local_address rem_address   st
   0: 0100007F:D431 0100007F:18EB 02 00000000:00000000 00:00000000 00000000     0        0 444 1
";
        assert!(outbound_in(connecting, &[444].into(), &[0x1F90]));
    }
}
