//! CPUs and the calling thread's place on them: affinity, CPU lists, the
//! online count, the thread's name (what `comm` shows), and each CPU's
//! time as /proc/stat counts it.

use anyhow::{Result, bail};

/// Names the calling thread (what `comm` shows, e.g. as "who ran instead").
pub fn set_name(name: &str) {
    let mut bytes = [0u8; 16];
    for (b, c) in bytes.iter_mut().zip(name.bytes().take(15)) {
        *b = c;
    }
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, bytes.as_ptr() as libc::c_ulong, 0, 0, 0) };
}

/// Pins the calling thread to one CPU.
pub fn pin(cpu: usize) -> Result<()> {
    pin_set(&[cpu])
}

/// The calling thread pinned to `cpus` until the guard drops, then put back
/// on the CPUs it had.
pub struct PinnedThread {
    previous: Vec<usize>,
}

impl PinnedThread {
    pub fn to(cpus: &[usize]) -> Result<Self> {
        let previous = affinity(0)?;
        pin_set(cpus)?;
        Ok(Self { previous })
    }
}

impl Drop for PinnedThread {
    fn drop(&mut self) {
        let _ = pin_set(&self.previous);
    }
}

/// Restricts the calling thread to a set of CPUs.
pub fn pin_set(cpus: &[usize]) -> Result<()> {
    set_affinity(0, cpus)
}

/// CPUs online on the machine, whatever the calling thread's affinity
/// (`available_parallelism()` counts only the CPUs this thread may use,
/// and the recorder pins itself).
pub fn online_cpu_count() -> Option<usize> {
    // SAFETY: sysconf has no preconditions.
    usize::try_from(unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }).ok()
}

/// The CPUs thread `tid` may run on (0: the calling thread).
pub fn affinity(tid: u32) -> Result<Vec<usize>> {
    // SAFETY: zeroed cpu_set_t is valid output storage.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer and size.
    let rc = unsafe {
        libc::sched_getaffinity(tid as libc::pid_t, size_of::<libc::cpu_set_t>(), &mut set)
    };
    if rc != 0 {
        bail!(
            "sched_getaffinity({tid}): {}",
            std::io::Error::last_os_error()
        );
    }
    // SAFETY: reading a set filled by the kernel.
    Ok((0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect())
}

/// Restricts thread `tid` (0: the calling thread) to a set of CPUs.
pub fn set_affinity(tid: u32, cpus: &[usize]) -> Result<()> {
    // SAFETY: zeroed cpu_set_t is an empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus {
        if cpu >= libc::CPU_SETSIZE as usize {
            bail!("CPU {cpu} is beyond what sched_setaffinity can express");
        }
        // SAFETY: cpu < CPU_SETSIZE, checked above.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: valid set.
    let rc =
        unsafe { libc::sched_setaffinity(tid as libc::pid_t, size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        bail!(
            "sched_setaffinity({tid}, {cpus:?}): {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

/// Parses a CPU list such as "0-2,5".
pub fn parse_cpu_list(list: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                cpus.extend(a.trim().parse::<usize>().ok()?..=b.trim().parse::<usize>().ok()?)
            }
            None => cpus.push(part.trim().parse().ok()?),
        }
    }
    Some(cpus)
}

/// One CPU's time from its `cpuN` line of /proc/stat, in USER_HZ ticks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTicks {
    /// user + nice + system + irq + softirq.
    pub busy: u64,
    /// Time the hypervisor ran something else while this vCPU wanted to run.
    pub steal: u64,
    /// Every column up to steal, idle and iowait included.
    pub total: u64,
}

/// A measurement during which the host took at least this share of the
/// CPU time the VM wanted measured the host, not the server: an
/// experiment's repetition is run again, same arm, and so is a demo
/// scenario. A VM's host steals in bursts (here: 30-50% for 20-60 s,
/// while a clean server's p99 went from 0.4 ms to 100 ms); a burst that
/// falls on some repetitions of both arms widens both and hides a real
/// change. The share is steal over the time a vCPU wanted (busy +
/// steal), per CPU, not over wall time and not pooled, so an arm that
/// leaves a CPU idle (a stopped hog) or keeps it busy (the hog) is not
/// judged quieter or noisier for it. Fixed, not tested: it says
/// which repetitions are measurements of the server at all, before any
/// comparison, and is the same for both arms of an experiment.
pub const HOST_DISTURBED: f64 = 0.10;

/// The most the host took of any CPU's wanted time (steal over busy +
/// steal) between two readings of [`proc_stat_ticks`]. Per CPU, so
/// that an arm that keeps one CPU busy (a hog) or leaves it idle does not dilute
/// the steal of another; a CPU that wanted under a tenth of the time is
/// left out (a tick or two of steal there is no evidence).
pub fn host_share(before: Option<Vec<CpuTicks>>, after: Option<Vec<CpuTicks>>) -> Option<f64> {
    let (before, after) = (before?, after?);
    before
        .iter()
        .zip(&after)
        .filter_map(|(b, a)| {
            let busy = a.busy.saturating_sub(b.busy);
            let steal = a.steal.saturating_sub(b.steal);
            let total = a.total.saturating_sub(b.total);
            let wanted = busy + steal;
            (wanted > 0 && wanted * 10 >= total).then(|| steal as f64 / wanted as f64)
        })
        .reduce(f64::max)
}

/// Whether a [`host_share`] says the host, not the server, was measured.
pub fn host_disturbed(share: f64) -> bool {
    share >= HOST_DISTURBED
}

/// Per-CPU ticks from /proc/stat, indexed by CPU number (a CPU the file
/// skips, offline, reads zero); None if it cannot be read or a CPU's line
/// has no steal column.
pub fn proc_stat_ticks() -> Option<Vec<CpuTicks>> {
    parse_proc_stat(&std::fs::read_to_string("/proc/stat").ok()?)
}

/// [`proc_stat_ticks`] of a /proc/stat text.
pub fn parse_proc_stat(text: &str) -> Option<Vec<CpuTicks>> {
    let mut out: Vec<CpuTicks> = Vec::new();
    for line in text.lines() {
        // `cpuN ...` only: the all-CPU line is `cpu  ...`, whose first
        // number is a tick count, not a CPU id.
        let Some(rest) = line
            .strip_prefix("cpu")
            .filter(|r| r.starts_with(|c: char| c.is_ascii_digit()))
        else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let Some(id) = fields.next().and_then(|c| c.parse::<usize>().ok()) else {
            continue;
        };
        let mut next = || fields.next()?.parse::<u64>().ok();
        let (user, nice, system, idle, iowait, irq, softirq, steal) = (
            next()?,
            next()?,
            next()?,
            next()?,
            next()?,
            next()?,
            next()?,
            next()?,
        );
        let busy = user + nice + system + irq + softirq;
        if out.len() <= id {
            out.resize(id + 1, CpuTicks::default());
        }
        out[id] = CpuTicks {
            busy,
            steal,
            total: busy + idle + iowait + steal,
        };
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The host's share comes from /proc/stat's per-CPU lines: steal
    /// over busy + steal, idle and iowait left out (an idle CPU wants
    /// nothing), the worst CPU that wanted a tenth of the time.
    #[test]
    fn the_host_share_is_steal_over_the_time_the_cpus_wanted() {
        let line = |cpu, user, system, idle, steal| {
            format!("cpu{cpu} {user} 0 {system} {idle} 0 0 0 {steal} 0 0")
        };
        let at = |ticks: [(u64, u64, u64, u64); 3]| {
            let text: String = ticks
                .iter()
                .enumerate()
                .map(|(i, &(u, s, idle, st))| line(i, u, s, idle, st) + "\n")
                .collect();
            parse_proc_stat(&format!("cpu  1 2 3 4 5 6 7 8 9 10\n{text}"))
        };
        let before = at([(100, 50, 1000, 10), (0, 0, 1000, 0), (0, 0, 1000, 0)]);
        assert_eq!(
            before.as_ref().map(|v| v[0]),
            Some(CpuTicks {
                busy: 150,
                steal: 10,
                total: 1160
            })
        );
        // CPU 0: 60 busy, 40 stolen, 900 idle: 40% of what it wanted.
        // CPU 1: 500 busy, 0 stolen: a hog's CPU does not dilute CPU 0.
        // CPU 2: 10 wanted of 1000, 5 stolen: too little to say anything.
        let after = at([(140, 70, 1900, 50), (500, 0, 1500, 0), (5, 0, 1990, 5)]);
        let share = host_share(before.clone(), after).expect("share");
        assert!((share - 0.4).abs() < 1e-9, "{share}");
        assert!(parse_proc_stat("cpu0 1 2 3").is_none(), "no steal column");
        // Nothing wanted, nothing to say.
        assert_eq!(host_share(before.clone(), before), None);
        assert!(host_disturbed(HOST_DISTURBED));
        assert!(!host_disturbed(HOST_DISTURBED / 2.0));
    }
}
