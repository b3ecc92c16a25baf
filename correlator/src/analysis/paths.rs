//! Code paths: where, in the code, the accounted thread's time went during
//! episodes and baseline windows (`--stacks`).
//!
//! Each on-CPU sample of the accounted thread inside a window stands for
//! one sample period of its CPU time, with the kernel and user stack at
//! that instant; each off-CPU interval recorded for it stands for its
//! overlap with the window, with the stacks at its switch-out. A path's
//! share is its time over all episode time (the denominator of a cause's
//! share), so a function's share is comparable with its cause's.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use super::{
    Classification, CodePaths, Episode,
    account::TimeAccount,
    cause_kind::CauseKind,
    kernel::{OffKind, Threads},
};
use crate::{
    runfile::RunFile,
    timeline::{
        stacks::{Sample, SampleContext, StackId, StackKind, StackTable},
        syscalls::{self, Site},
    },
};

/// What the thread was doing on a path: the root frame of folded stacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PathCategory {
    OnCpu(SampleContext),
    Blocked(Site),
    /// Waiting for a CPU.
    Runnable,
    /// On the CPU spinning for a contended kernel spinlock (the lock's
    /// slow path at the sample's leaf): a lock wait, the `lock_spin_ns`
    /// of the account.
    LockSpin,
    /// Samples in a spinlock's slow path beyond the account's measured
    /// spin: the part of the spin the lock holder's vCPU lost to the host
    /// (`lock_holder_steal_ns`). The environment's, evidence for no server
    /// cause; shown so the flame graph still holds every sample.
    LockHolderSteal,
    /// On the CPU inside correlator's own kernel programs (a sample that
    /// landed in a tracepoint's BPF program): the probes' cost, shown as
    /// such and evidence for no cause.
    Probes,
}

impl PathCategory {
    /// The root frame in folded stacks (no spaces or `;`: the format's
    /// separators).
    pub fn label(self) -> String {
        match self {
            PathCategory::OnCpu(SampleContext::User) => "on-cpu:user".into(),
            PathCategory::OnCpu(SampleContext::Syscall) => "on-cpu:syscall".into(),
            PathCategory::OnCpu(SampleContext::Fault) => "on-cpu:fault".into(),
            PathCategory::OnCpu(SampleContext::Irq) => "on-cpu:softirq".into(),
            PathCategory::Blocked(site) => format!("blocked:{}", site.name()),
            PathCategory::Runnable => "runnable".into(),
            PathCategory::LockSpin => "on-cpu:lock-spin".into(),
            PathCategory::LockHolderSteal => "steal:lock-holder".into(),
            PathCategory::Probes => "on-cpu:correlator-probes".into(),
        }
    }

    /// Whether this category's time is evidence for `cause`.
    fn evidence_for(self, cause: CauseKind) -> bool {
        use PathCategory::{Blocked, OnCpu, Runnable};
        match cause {
            CauseKind::OnCpu | CauseKind::Queueing => self == OnCpu(SampleContext::User),
            CauseKind::PageFaults => self == OnCpu(SampleContext::Fault),
            CauseKind::Syscall => self == OnCpu(SampleContext::Syscall),
            CauseKind::Softirq => self == OnCpu(SampleContext::Irq),
            CauseKind::MajorFaults => self == Blocked(Site::Fault),
            CauseKind::Migrations => self == Blocked(Site::Migration),
            CauseKind::Blocking => matches!(
                self,
                Blocked(Site::Lock | Site::Io | Site::Sleep | Site::Other) | PathCategory::LockSpin
            ),
            CauseKind::Preemption => self == Runnable,
            // A stack of the waiting thread shows the safepoint's barrier,
            // not the collector's work: its time comes from the waker. An
            // upstream wait's stack is the event loop's wait for anything.
            CauseKind::GarbageCollection
            | CauseKind::MemoryStall
            | CauseKind::Upstream
            | CauseKind::Hardirq
            | CauseKind::Steal
            | CauseKind::Idle
            | CauseKind::CpuWakeup => false,
        }
    }

    /// The category of a sample: its context, corrected by its kernel
    /// stack where that tells more. The kernel side calls kernel time
    /// outside syscalls and IRQs "fault"; the stack shows whether it was
    /// fault handling, syscall entry/exit work, or the probes themselves.
    fn of_sample(context: SampleContext, frames: &[String]) -> Self {
        let has = |needle: &str| frames.iter().any(|f| f.contains(needle));
        if context == SampleContext::User {
            return PathCategory::OnCpu(context);
        }
        if has("bpf_trace_run") || has("__bpf_trace_") {
            return PathCategory::Probes;
        }
        // The qspinlock slow path, native or paravirt (whose waiter halts
        // in `kvm_wait` until the holder kicks it).
        if has("queued_spin_lock_slowpath") || has("kvm_wait") {
            return PathCategory::LockSpin;
        }
        if context == SampleContext::Fault
            && !frames.is_empty()
            && !has("exc_page_fault")
            && has("entry_SYSCALL")
        {
            return PathCategory::OnCpu(SampleContext::Syscall);
        }
        PathCategory::OnCpu(context)
    }
}

/// One code path with its time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CodePath {
    /// Frames from the outermost caller to the leaf; kernel frames end in
    /// `_[k]` (the flame-graph convention), user frames come first.
    pub frames: Vec<String>,
    /// Share of all episode time (as a cause's share is).
    pub share: f64,
    pub time_ns: u64,
}

impl CodePath {
    /// The innermost user frame with a name (not `[file+0x..]`): the
    /// function to look at.
    pub fn user_leaf(&self) -> Option<&str> {
        self.frames
            .iter()
            .rev()
            .filter(|f| !f.ends_with("_[k]"))
            .find(|f| !f.starts_with('['))
            .map(String::as_str)
    }
}

/// Time per (category, stack), for one set of windows.
#[derive(Default)]
pub struct PathTimes {
    by_path: HashMap<(PathCategory, Vec<String>), f64>,
    /// User stack depth of each sample or interval with a user stack.
    user_depths: Vec<usize>,
}

impl PathTimes {
    /// Folded stacks (`category;frame;...;leaf` → µs), for flame graphs.
    pub fn folded(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for ((cat, frames), ns) in &self.by_path {
            let mut line = cat.label();
            for f in frames {
                line.push(';');
                // `;` separates frames and a space the count: neither may
                // appear in a frame (C++ and Rust names can hold spaces).
                line.push_str(&f.replace([';', ' '], "_"));
            }
            *out.entry(line).or_default() += (*ns / 1e3).round() as u64;
        }
        out.retain(|_, v| *v > 0);
        out
    }

    /// The paths of the categories `keep` accepts, heaviest first, with
    /// their share of `total_ns`. Paths are compared by their [`trimmed`]
    /// form: the same function reached the same way is one path, whatever
    /// the kernel did deep below its entry point.
    fn ranked(&self, keep: impl Fn(PathCategory) -> bool, total_ns: f64) -> Vec<CodePath> {
        let mut by_trimmed: HashMap<Vec<String>, f64> = HashMap::new();
        for ((cat, frames), ns) in &self.by_path {
            if keep(*cat) && !frames.is_empty() {
                *by_trimmed.entry(trimmed(frames)).or_default() += ns;
            }
        }
        let mut paths: Vec<CodePath> = by_trimmed
            .into_iter()
            .map(|(frames, ns)| CodePath {
                frames,
                share: ns / total_ns.max(1.0),
                time_ns: ns as u64,
            })
            .collect();
        paths.sort_by(|a, b| b.time_ns.cmp(&a.time_ns).then(a.frames.cmp(&b.frames)));
        paths
    }

    /// The heaviest paths that are evidence for `cause`.
    pub fn top_for(&self, cause: CauseKind, total_ns: f64, n: usize) -> Vec<CodePath> {
        let mut paths = self.ranked(|cat| cat.evidence_for(cause), total_ns);
        paths.truncate(n);
        paths
    }

    /// The heaviest path of any category that is the server's doing (not
    /// an idle wait, not the probes).
    pub fn top_any(&self, total_ns: f64) -> Option<CodePath> {
        let server = |cat| {
            !matches!(
                cat,
                PathCategory::Blocked(Site::Idle)
                    | PathCategory::Probes
                    | PathCategory::LockHolderSteal
            )
        };
        self.ranked(server, total_ns).into_iter().next()
    }

    /// Keeps the lock-spin samples of one window to the spin the account
    /// measured there (`lock_spin_ns`: the contention tracepoints' spin
    /// less what the holder's vCPU lost to the host), moving the rest, in
    /// proportion across the paths, to [`PathCategory::LockHolderSteal`].
    /// Why: a waiter spinning on a lock whose holder the host descheduled
    /// samples at full rate in the slow path while the account books that
    /// spin as holder steal; a path's time and the account must tell one
    /// story. (In one CI run on a host stealing 46%, `recvfrom`'s path led
    /// the blocking cause's paths over a real futex wait; a socket-lock
    /// spin is the likely reason, the run was not kept.)
    fn limit_lock_spin(&mut self, measured_ns: f64) {
        let sampled: f64 = self
            .by_path
            .iter()
            .filter(|((cat, _), _)| *cat == PathCategory::LockSpin)
            .map(|(_, ns)| ns)
            .sum();
        if sampled <= measured_ns || sampled <= 0.0 {
            return;
        }
        let keep = measured_ns.max(0.0) / sampled;
        let mut held = Vec::new();
        for ((cat, frames), ns) in &mut self.by_path {
            if *cat == PathCategory::LockSpin {
                held.push((frames.clone(), *ns * (1.0 - keep)));
                *ns *= keep;
            }
        }
        for (frames, ns) in held {
            *self
                .by_path
                .entry((PathCategory::LockHolderSteal, frames))
                .or_default() += ns;
        }
    }

    fn merge(&mut self, other: PathTimes) {
        for (k, v) in other.by_path {
            *self.by_path.entry(k).or_default() += v;
        }
        self.user_depths.extend(other.user_depths);
    }

    /// Median user stack depth, if any user stack was seen.
    pub fn median_user_depth(&self) -> Option<usize> {
        let mut d = self.user_depths.clone();
        d.sort_unstable();
        d.get(d.len() / 2).copied()
    }
}

/// Samples and off-CPU spans of the run, indexed for window queries.
pub struct PathIndex<'a> {
    run: &'a RunFile,
    /// Samples per thread, sorted by time.
    samples: HashMap<u32, Vec<&'a Sample>>,
    threads: &'a Threads<'a>,
}

impl<'a> PathIndex<'a> {
    /// `None` when the run has no stacks (`--stacks` was off).
    pub fn new(run: &'a RunFile, threads: &'a Threads<'a>) -> Option<Self> {
        if run.stacks.is_empty() {
            return None;
        }
        let mut samples: HashMap<u32, Vec<&Sample>> = HashMap::new();
        for s in &run.stack_samples {
            samples.entry(s.tid).or_default().push(s);
        }
        for v in samples.values_mut() {
            v.sort_by_key(|s| s.ts);
        }
        Some(Self {
            run,
            samples,
            threads,
        })
    }

    /// Adds the time of thread `tid` in [start, end) to `out`.
    pub fn add_window(&self, out: &mut PathTimes, tid: u32, start: u64, end: u64) {
        let table = &self.run.stacks;
        let period = self.run.sample_period_ns as f64;
        if let Some(samples) = self.samples.get(&tid) {
            let from = samples.partition_point(|s| s.ts < start);
            for s in samples[from..].iter().take_while(|s| s.ts < end) {
                let frames = path(table, s.kstack, s.ustack, s.syscall);
                if let Some(u) = s.ustack {
                    out.user_depths.push(table.user_depth(u));
                }
                let cat = PathCategory::of_sample(s.context, &frames);
                *out.by_path.entry((cat, frames)).or_default() += period;
            }
        }
        for span in self.threads.overlapping(tid, start, end) {
            let r = span.record;
            let cat = match span.kind {
                OffKind::Blocked => PathCategory::Blocked(r.site),
                OffKind::Runnable => PathCategory::Runnable,
            };
            let (kstack, ustack) = (r.kstack.map(StackId::get), r.ustack.map(StackId::get));
            let frames = path(table, kstack, ustack, r.syscall);
            if let Some(u) = ustack {
                out.user_depths.push(table.user_depth(u));
            }
            *out.by_path.entry((cat, frames)).or_default() += span.overlap(start, end) as f64;
        }
    }
}

/// User frames kept (from the leaf) and kernel frames kept (from the
/// entry) in a cause's code paths.
const USER_FRAMES: usize = 6;
const KERNEL_FRAMES: usize = 4;

/// A path cut to what tells paths apart: the innermost user frames (the
/// outermost ones are the same `main` and runtime everywhere, and where a
/// user stack walk stopped varies) and the kernel's entry frames (the
/// fault or syscall path; deeper frames are the allocator or scheduler of
/// the moment).
pub fn trimmed(frames: &[String]) -> Vec<String> {
    let split = frames
        .iter()
        .position(|f| f.ends_with("_[k]"))
        .unwrap_or(frames.len());
    let (user, kernel) = frames.split_at(split);
    user[user.len().saturating_sub(USER_FRAMES)..]
        .iter()
        .chain(kernel.iter().take(KERNEL_FRAMES))
        .cloned()
        .collect()
}

/// Code paths for an analysis: each episode's top path, each cause's top
/// paths, and the folded stacks of episodes and baseline windows (whose
/// accounts and spans are given in the same order).
pub fn attach(
    index: &PathIndex<'_>,
    episodes: &mut [Episode],
    classification: &mut Classification,
    baseline: &[TimeAccount],
    baseline_spans: &[(u64, u64)],
) -> CodePaths {
    let mut in_episodes = PathTimes::default();
    let mut episode_ns = 0u64;
    for e in episodes.iter_mut() {
        let (start, end) = (e.window.start_ns, e.window.end_ns);
        episode_ns += end.saturating_sub(start);
        let mut times = PathTimes::default();
        if let Some(tid) = e.account.tid {
            index.add_window(&mut times, tid, start, end);
        }
        times.limit_lock_spin(e.account.lock_spin_ns as f64);
        e.code_path = times.top_any(end.saturating_sub(start) as f64);
        in_episodes.merge(times);
    }
    let mut in_baseline = PathTimes::default();
    let mut baseline_ns = 0u64;
    for (a, &(start, end)) in baseline.iter().zip(baseline_spans) {
        baseline_ns += end.saturating_sub(start);
        if let Some(tid) = a.tid {
            let mut times = PathTimes::default();
            index.add_window(&mut times, tid, start, end);
            times.limit_lock_spin(a.lock_spin_ns as f64);
            in_baseline.merge(times);
        }
    }
    for c in &mut classification.causes {
        c.stacks = in_episodes.top_for(c.cause, episode_ns as f64, 5);
        if let Some(f) = c.stacks.first().and_then(CodePath::user_leaf) {
            c.experiment = format!("{}; the code path: {f}", c.experiment);
        }
    }
    let median_user_depth = in_episodes.median_user_depth();
    let mut notes = index.run.stacks.notes.clone();
    notes.extend(depth_note(median_user_depth));
    CodePaths {
        episodes: in_episodes.folded(),
        episode_ns,
        baseline: in_baseline.folded(),
        baseline_ns,
        median_user_depth,
        notes,
    }
}

/// One path's frames, outermost first: user frames, then the syscall (if
/// the kernel stack is missing), then kernel frames marked `_[k]`.
pub fn path(
    table: &StackTable,
    kstack: Option<u32>,
    ustack: Option<u32>,
    syscall: Option<u32>,
) -> Vec<String> {
    let mut frames: Vec<String> = ustack
        .map(|u| {
            let mut f: Vec<String> = table.frames(StackKind::User, u).map(String::from).collect();
            f.reverse();
            f
        })
        .unwrap_or_default();
    let kernel: Vec<String> = kstack
        .map(|k| {
            let mut f: Vec<String> = table
                .frames(StackKind::Kernel, k)
                .map(|n| format!("{n}_[k]"))
                .collect();
            f.reverse();
            f
        })
        .unwrap_or_default();
    if kernel.is_empty()
        && let Some(nr) = syscall
    {
        frames.push(format!("{}_[k]", syscalls::name(nr)));
    }
    frames.extend(kernel);
    frames
}

/// How deep user stacks went, and what the user can do about short ones:
/// the kernel walks user stacks by frame pointers only.
pub fn depth_note(median: Option<usize>) -> Option<String> {
    match median {
        Some(d) if d <= 2 => Some(format!(
            "user stacks stopped after {d} frame{} (median): the binary or its libraries were most likely built without frame pointers, and the kernel walks user stacks by frame pointers only; the leaf function and the kernel path are exact. For full stacks rebuild with -fno-omit-frame-pointer (C/C++) or RUSTFLAGS=\"-C force-frame-pointers=yes\" (Rust)",
            if d == 1 { "" } else { "s" }
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline::stacks::StackTableBuilder;

    #[test]
    fn paths_put_user_frames_first_and_mark_kernel_frames() {
        let mut b = StackTableBuilder::default();
        b.add(StackKind::User, 1, &["leaf".into(), "main".into()]);
        b.add(
            StackKind::Kernel,
            2,
            &["handle_mm_fault".into(), "exc_page_fault".into()],
        );
        let t = b.finish(0);
        assert_eq!(
            path(&t, Some(2), Some(1), None),
            ["main", "leaf", "exc_page_fault_[k]", "handle_mm_fault_[k]"]
        );
        // No kernel stack: the syscall stands in for it.
        assert_eq!(
            path(&t, None, Some(1), Some(0)),
            ["main", "leaf", "read_[k]"]
        );
    }

    #[test]
    fn trimming_keeps_inner_user_and_entry_kernel_frames() {
        let f: Vec<String> = [
            "main",
            "a",
            "b",
            "c",
            "d",
            "e",
            "f",
            "g",
            "entry_[k]",
            "do_[k]",
            "x_[k]",
            "y_[k]",
            "z_[k]",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            trimmed(&f),
            [
                "b",
                "c",
                "d",
                "e",
                "f",
                "g",
                "entry_[k]",
                "do_[k]",
                "x_[k]",
                "y_[k]"
            ]
        );
    }

    #[test]
    fn samples_are_recategorised_by_their_kernel_stack() {
        let f = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let fault = SampleContext::Fault;
        assert_eq!(
            PathCategory::of_sample(fault, &f(&["main", "asm_exc_page_fault_[k]"])),
            PathCategory::OnCpu(fault)
        );
        assert_eq!(
            PathCategory::of_sample(
                fault,
                &f(&[
                    "entry_SYSCALL_64_after_hwframe_[k]",
                    "syscall_exit_work_[k]"
                ])
            ),
            PathCategory::OnCpu(SampleContext::Syscall)
        );
        assert_eq!(
            PathCategory::of_sample(
                SampleContext::Syscall,
                &f(&["do_syscall_64_[k]", "bpf_trace_run2_[k]"])
            ),
            PathCategory::Probes
        );
        // Seen on this VM: recvfrom spinning for its socket's lock.
        assert_eq!(
            PathCategory::of_sample(
                SampleContext::Syscall,
                &f(&[
                    "__x64_sys_recvfrom_[k]",
                    "lock_sock_nested_[k]",
                    "_raw_spin_lock_bh_[k]",
                    "__pv_queued_spin_lock_slowpath_[k]"
                ])
            ),
            PathCategory::LockSpin
        );
        assert!(PathCategory::LockSpin.evidence_for(CauseKind::Blocking));
        assert!(!PathCategory::LockSpin.evidence_for(CauseKind::Syscall));
    }

    #[test]
    fn folded_lines_have_no_stray_separators() {
        let mut p = PathTimes::default();
        p.by_path.insert(
            (
                PathCategory::OnCpu(SampleContext::User),
                vec!["a b".into(), "c;d".into()],
            ),
            2_000.0,
        );
        let f = p.folded();
        assert_eq!(f.get("on-cpu:user;a_b;c_d"), Some(&2));
    }

    #[test]
    fn causes_take_their_own_categories() {
        let mut p = PathTimes::default();
        p.by_path.insert(
            (PathCategory::OnCpu(SampleContext::Fault), vec!["f".into()]),
            30.0,
        );
        p.by_path.insert(
            (PathCategory::Blocked(Site::Lock), vec!["futex".into()]),
            70.0,
        );
        let faults = p.top_for(CauseKind::PageFaults, 100.0, 5);
        assert_eq!(faults.len(), 1);
        assert!((faults[0].share - 0.3).abs() < 1e-9);
        let blocking = p.top_for(CauseKind::Blocking, 100.0, 5);
        assert_eq!(blocking[0].frames, ["futex"]);
        assert!(p.top_for(CauseKind::Steal, 100.0, 5).is_empty());
    }

    /// A socket-lock spin sampled at full rate while the holder's vCPU was
    /// stolen: the account measured 2 ms of the 12 ms sampled as the
    /// thread's own spin, so the recv path keeps 2 ms and a 5 ms futex
    /// wait leads the blocking cause; the rest is holder steal, held by no
    /// server cause.
    #[test]
    fn lock_spin_paths_keep_only_the_measured_spin() {
        let mut p = PathTimes::default();
        let recv = || vec!["recv".to_string(), "queued_spin_lock_slowpath_[k]".into()];
        p.by_path
            .insert((PathCategory::LockSpin, recv()), 12_000_000.0);
        p.by_path.insert(
            (PathCategory::Blocked(Site::Lock), vec!["futex".into()]),
            5_000_000.0,
        );
        p.limit_lock_spin(2_000_000.0);
        let blocking = p.top_for(CauseKind::Blocking, 20e6, 5);
        assert_eq!(blocking[0].frames, ["futex"]);
        assert_eq!(blocking[1].time_ns, 2_000_000);
        let held = p.by_path[&(PathCategory::LockHolderSteal, recv())];
        assert!((held - 10e6).abs() < 1.0, "{held}");
        // Every sample is still in the flame graph.
        assert_eq!(p.folded().values().sum::<u64>(), 17_000);
        // A window whose spin was all the thread's own keeps it.
        let mut q = PathTimes::default();
        q.by_path
            .insert((PathCategory::LockSpin, recv()), 1_000_000.0);
        q.limit_lock_spin(1_500_000.0);
        assert_eq!(q.by_path.len(), 1);
    }
}
