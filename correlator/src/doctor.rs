//! `correlator doctor`: can recording work on this machine? One line per
//! check, with a fix for each failure.

use std::fs;

use crate::{
    probes::{ProbeConfig, Probes, tracefs},
    target::Target,
};

/// Result of one check.
pub struct Check {
    pub name: &'static str,
    pub ok: bool,
    /// What was found (ok) or what to do (failed).
    pub detail: String,
    /// Recording cannot work without it.
    pub required: bool,
}

fn check(name: &'static str, required: bool, result: Result<String, String>) -> Check {
    let (ok, detail) = match result {
        Ok(d) => (true, d),
        Err(d) => (false, d),
    };
    Check {
        name,
        ok,
        detail,
        required,
    }
}

fn kernel_version() -> Result<String, String> {
    let release = fs::read_to_string("/proc/sys/kernel/osrelease")
        .map_err(|e| format!("cannot read the kernel release: {e}"))?;
    let release = release.trim().to_string();
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let minor: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    if (major, minor) >= (5, 8) {
        Ok(format!("{release} (BPF ring buffer needs 5.8 or later)"))
    } else {
        Err(format!(
            "{release} is too old: the BPF ring buffer needs Linux 5.8 or later; upgrade the kernel"
        ))
    }
}

fn btf() -> Result<String, String> {
    if fs::metadata("/sys/kernel/btf/vmlinux").is_ok() {
        Ok("/sys/kernel/btf/vmlinux present".into())
    } else {
        Err("no /sys/kernel/btf/vmlinux: use a kernel built with CONFIG_DEBUG_INFO_BTF=y".into())
    }
}

fn tracefs_check() -> Result<String, String> {
    let root = tracefs::require_root().map_err(|e| format!("{e:#}"))?;
    Ok(format!(
        "{} mounted (not needed by the probes, used by perf and bpftrace)",
        root.display()
    ))
}

fn task_layout() -> Result<String, String> {
    let btf = crate::probes::btf::Btf::from_sys_fs().map_err(|e| format!("{e:#}"))?;
    let pid = btf
        .member_offset("task_struct", "pid")
        .map_err(|e| format!("{e:#}"))?;
    let comm = btf
        .member_offset("task_struct", "comm")
        .map_err(|e| format!("{e:#}"))?;
    Ok(format!("task_struct.pid at {pid}, .comm at {comm}"))
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Whether this process has the effective capability `bit`
/// (linux/capability.h numbering).
fn has_capability(bit: u32) -> bool {
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    let caps = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    caps & (1u64 << bit) != 0
}

/// CAP_PERFMON = 38, CAP_BPF = 39 (linux/capability.h).
fn privileges() -> Result<String, String> {
    if is_root() {
        return Ok("running as root".into());
    }
    if has_capability(38) && has_capability(39) {
        Ok("CAP_BPF and CAP_PERFMON present".into())
    } else {
        Err(
            "not root and missing CAP_BPF/CAP_PERFMON: run with sudo, or \
             `setcap cap_bpf,cap_perfmon+ep $(which correlator)`"
                .into(),
        )
    }
}

fn attach_trial() -> Result<String, String> {
    let me = Target::from_pid(std::process::id()).map_err(|e| format!("{e:#}"))?;
    // Every tracepoint, the opt-in syscall hooks included.
    let cfg = ProbeConfig {
        syscall_time: crate::probes::SyscallTime::Exact,
        ..ProbeConfig::default()
    };
    let probes = Probes::attach(&me, &cfg).map_err(|e| format!("{e:#}"))?;
    let stats = probes.stats_enabled();
    drop(probes);
    Ok(format!(
        "{} BTF tracepoints, {} software perf events per CPU, ring buffer; BPF run-time stats {}",
        crate::probes::TRACEPOINTS.len(),
        crate::probes::PERF_EVENTS.len(),
        if stats { "on" } else { "unavailable" }
    ))
}

/// `watch` and `--syscalls` read other processes' descriptors and maps:
/// root or CAP_SYS_PTRACE (19); not needed for a server of the same user.
fn read_other_processes() -> Result<String, String> {
    if is_root() {
        return Ok("running as root".into());
    }
    if has_capability(19) {
        Ok("CAP_SYS_PTRACE present".into())
    } else {
        Err("no CAP_SYS_PTRACE: --syscalls, watch and symbolization can only read servers of your own user".into())
    }
}

/// `watch --syscalls`: the passive-latency programs load and attach as
/// watch attaches them by default (sampled syscall time: the socket
/// tracepoints, and the syscall read from saved registers).
fn passive_trial() -> Result<String, String> {
    let me = Target::from_pid(std::process::id()).map_err(|e| format!("{e:#}"))?;
    let cfg = ProbeConfig {
        passive: Some(crate::latency::passive::PassiveSource::Syscalls),
        bpf_stats: false,
        syscall_time: crate::probes::SyscallTime::Sampled,
        request_start: crate::probes::RequestStart::Arrival,
        ..ProbeConfig::default()
    };
    let mut probes = Probes::attach(&me, &cfg).map_err(|e| format!("{e:#}"))?;
    // watch samples the BPF statistics one second in sixty.
    let sampled = probes.set_stats(true);
    probes.set_stats(false);
    Ok(format!(
        "socket tracepoints (sock_recv_length, sock_send_length) and the saved-register syscall context attach; requests timed from their arrival in the socket: {}; BPF statistics can be sampled: {}",
        if probes.arrival_timed() {
            "yes (sk_data_ready)"
        } else {
            "no (needs the sk_data_ready tracepoint, Linux 6.10+: latency starts at the server's read)"
        },
        if sampled {
            "yes"
        } else {
            "no (probe cost unknown)"
        }
    ))
}

/// `watch --cgroup`: a cgroup hierarchy to read cgroup.procs from (v2,
/// wherever it is mounted; a hybrid system mounts it beside v1's).
fn cgroup_v2() -> Result<String, String> {
    match crate::target::cgroup2_mount() {
        Some(at) => Ok(format!(
            "cgroup v2 at {} (watch --cgroup takes a directory under it)",
            at.display()
        )),
        None => Err(
            "no cgroup v2 mounted: watch --cgroup needs a cgroup directory (use --comm or --pid)"
                .into(),
        ),
    }
}

/// Runs every check, in order.
pub fn run_checks() -> Vec<Check> {
    let mut checks = vec![
        check("kernel version", true, kernel_version()),
        check("BTF", true, btf()),
        check("task_struct layout", true, task_layout()),
        check("tracefs", false, tracefs_check()),
        check("privileges", true, privileges()),
    ];
    let can_try = checks.iter().all(|c| c.ok || !c.required);
    checks.push(check(
        "load and attach probes",
        true,
        if can_try {
            attach_trial()
        } else {
            Err("skipped: fix the failures above first".into())
        },
    ));
    checks.push(check("read other processes", false, read_other_processes()));
    checks.push(check(
        "passive latency (watch)",
        false,
        if can_try {
            passive_trial()
        } else {
            Err("skipped: fix the failures above first".into())
        },
    ));
    checks.push(check("cgroup v2 (watch --cgroup)", false, cgroup_v2()));
    checks
}

/// Prints the checks; returns whether recording can work.
pub fn print(checks: &[Check]) -> bool {
    for c in checks {
        let mark = if c.ok { "✔" } else { "✘" };
        println!("{mark} {:<24} {}", c.name, c.detail);
    }
    checks.iter().all(|c| c.ok || !c.required)
}
