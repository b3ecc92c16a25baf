//! Hypervisor steal time per CPU, sampled from /proc/stat on every drain.
//!
//! On a VM the host can take a vCPU away for milliseconds; the guest's
//! probes see nothing (the thread "ran"), but the guest kernel accounts the
//! time as steal. /proc/stat gives it per CPU in USER_HZ ticks (10 ms), so
//! a sample says "up to this much was stolen in this interval": evidence
//! at the drain's resolution, not an exact placement. The analysis measures
//! steal per thread at ns resolution from the run queue's steal clock (the
//! kernel side's account); these samples stay in the run file as the
//! tick-based cross-check.

use serde::{Deserialize, Serialize};

/// Steal time of one CPU over one sampling interval (only intervals with
/// some steal are kept, so the list stays short on a quiet host).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StealSample {
    pub cpu: u32,
    pub start_ns: u64,
    pub end_ns: u64,
    pub steal_ns: u64,
}

/// Samples /proc/stat and keeps the intervals with steal.
#[derive(Debug, Default)]
pub struct StealSampler {
    last: Option<(u64, Vec<u64>)>,
    samples: Vec<StealSample>,
}

/// Per-CPU steal so far, ns, from /proc/stat.
fn read_steal() -> Option<Vec<u64>> {
    // SAFETY: sysconf has no preconditions.
    let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) })
        .ok()
        .filter(|&h| h > 0)?;
    Some(steal_ns(&crate::cpu::proc_stat_ticks()?, hz))
}

/// Steal per CPU, ns, from ticks of USER_HZ `hz`.
fn steal_ns(ticks: &[crate::cpu::CpuTicks], hz: u64) -> Vec<u64> {
    ticks.iter().map(|t| t.steal * 1_000_000_000 / hz).collect()
}

impl StealSampler {
    pub fn sample(&mut self, now_ns: u64) {
        let Some(current) = read_steal() else { return };
        if let Some((t, previous)) = &self.last {
            for (cpu, (now, before)) in current.iter().zip(previous).enumerate() {
                let d = now.saturating_sub(*before);
                if d > 0 {
                    self.samples.push(StealSample {
                        cpu: u32::try_from(cpu).unwrap_or(u32::MAX),
                        start_ns: *t,
                        end_ns: now_ns,
                        steal_ns: d,
                    });
                }
            }
        }
        self.last = Some((now_ns, current));
    }

    pub fn into_samples(self) -> Vec<StealSample> {
        self.samples
    }

    /// The intervals with steal so far.
    pub fn samples(&self) -> &[StealSample] {
        &self.samples
    }

    /// Forgets the intervals that ended before `ts`.
    pub fn prune_before(&mut self, ts: u64) {
        self.samples.retain(|s| s.end_ns >= ts);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_per_cpu_lines_count() {
        let text = "cpu  1246267 71 270685 2501404 8509 0 68238 29036 0 0\n\
                    cpu0 478339 31 130408 1391655 1252 0 36794 11319 0 0\n\
                    cpu1 767927 40 140277 1109749 7257 0 31444 17717 0 0\n\
                    intr 12345 1 2 3\n\
                    softirq 1 2 3\n";
        let ticks = crate::cpu::parse_proc_stat(text).expect("ticks");
        assert_eq!(
            steal_ns(&ticks, 100),
            vec![11_319 * 10_000_000, 17_717 * 10_000_000]
        );
    }

    #[test]
    fn proc_stat_is_readable() {
        assert!(read_steal().is_some_and(|v| !v.is_empty()));
    }
}
