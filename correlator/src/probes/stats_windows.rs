//! The kernel's BPF run-time statistics on for one window in every period
//! of a recording, not all of it. With them on, every run of every
//! program on the machine pays two clock reads and a per-CPU update: on
//! the bench's pinned pipe load, `record` inside a window of statistics
//! cost 21.9% against 19.4% outside (docs/overhead.md). A sample of the
//! run measures the programs' ns per run as well; their run counts and
//! CPU time over the whole run are then that sample scaled by the run's
//! length, and the report says so.
//!
//! Each window's costs are the difference of the programs' cumulative
//! statistics across it, so statistics someone else holds on between the
//! windows (another tool's reference-counted fd, the sysctl) do not count.

use std::collections::BTreeMap;

use super::ProgramCost;

/// One window of this length ...
pub const WINDOW_NS: u64 = 1_000_000_000;
/// ... at the start of every period of this length (the first at attach).
pub const PERIOD_NS: u64 = 10_000_000_000;

/// The sampled windows of one recording.
#[derive(Debug, Default)]
pub struct StatsWindows {
    /// The open window: its start and the programs' statistics then.
    open: Option<(u64, Vec<ProgramCost>)>,
    /// Run count and run time per program, summed over closed windows.
    sums: BTreeMap<String, (u64, u64)>,
    /// The closed windows' total length.
    sampled_ns: u64,
}

impl StatsWindows {
    /// Opens the first window at `now` (the statistics were turned on at
    /// attach), with the programs' statistics `costs` then.
    pub fn start(now: u64, costs: Vec<ProgramCost>) -> Self {
        Self {
            open: Some((now, costs)),
            ..Self::default()
        }
    }

    /// Whether the statistics should be on at `now`, `since` the start.
    fn wanted(since: u64) -> bool {
        since % PERIOD_NS < WINDOW_NS
    }

    /// At `now` (`started` the recording's start): closes the open window
    /// when it is over (returns false: turn the statistics off) or opens a
    /// new one when one is due (returns true: turn them on). None: leave
    /// them as they are. `costs` reads the programs' statistics.
    pub fn tick(
        &mut self,
        started: u64,
        now: u64,
        costs: impl FnOnce() -> Vec<ProgramCost>,
    ) -> Option<bool> {
        let wanted = Self::wanted(now.saturating_sub(started));
        match (&self.open, wanted) {
            (Some(_), false) => {
                self.close(now, costs());
                Some(false)
            }
            (None, true) => {
                self.open = Some((now, costs()));
                Some(true)
            }
            _ => None,
        }
    }

    /// The statistics could not be turned on for the window `tick` just
    /// opened: it is dropped.
    pub fn refused(&mut self) {
        self.open = None;
    }

    /// Closes the open window, if any, at `now` with the statistics `after`.
    pub fn close(&mut self, now: u64, after: Vec<ProgramCost>) {
        let Some((from, before)) = self.open.take() else {
            return;
        };
        self.sampled_ns += now.saturating_sub(from);
        for p in after.iter().map(|p| p.since(&before)) {
            let e = self.sums.entry(p.name).or_default();
            e.0 += p.run_count;
            e.1 += p.run_time_ns;
        }
    }

    /// The programs' costs over the sampled windows, and the windows'
    /// total length.
    pub fn finish(self) -> (Vec<ProgramCost>, u64) {
        let programs = self
            .sums
            .into_iter()
            .map(|(name, (run_count, run_time_ns))| ProgramCost::new(name, run_count, run_time_ns))
            .collect();
        (programs, self.sampled_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(name: &str, run_count: u64, run_time_ns: u64) -> ProgramCost {
        ProgramCost {
            name: name.into(),
            run_count,
            run_time_ns,
            ns_per_run: 0.0,
        }
    }

    #[test]
    fn windows_open_each_period_and_count_only_their_own_runs() {
        let s = 1_000_000_000;
        let mut w = StatsWindows::start(0, vec![cost("a", 0, 0)]);
        assert_eq!(w.tick(0, s / 2, Vec::new), None);
        assert_eq!(w.tick(0, s, || vec![cost("a", 100, 5_000)]), Some(false));
        // Someone else's statistics between the windows: not ours.
        assert_eq!(w.tick(0, 5 * s, Vec::new), None);
        assert_eq!(
            w.tick(0, 10 * s, || vec![cost("a", 900, 50_000)]),
            Some(true)
        );
        w.close(10 * s + s / 2, vec![cost("a", 950, 52_500)]);
        let (programs, sampled) = w.finish();
        assert_eq!(sampled, s + s / 2);
        assert_eq!(programs[0].run_count, 150);
        assert_eq!(programs[0].run_time_ns, 7_500);
        assert!((programs[0].ns_per_run - 50.0).abs() < 1e-9);
    }
}
