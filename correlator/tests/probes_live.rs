//! Ground truth for the probes: a helper process does known work while
//! `correlator record` watches it, and the counts are compared with what the
//! kernel itself reports for the same process and window (perf software
//! counters opened by this test, the process's own getrusage, /proc).
//! Needs root + BPF; fails rather than skips when CI=true.

use std::process::Command;

use crate::util::{BIN, Recorder, Workload, proc_row, scratch};
use correlator::runfile::StopReason;
use perf_event::{Builder, Counter, events::Software};

/// A kernel perf software counter on `pid`, inherited by threads it creates.
fn kernel_counter(pid: u32, kind: Software) -> Counter {
    let mut builder = Builder::new()
        .kind(kind)
        .observe_pid(i32::try_from(pid).expect("pid"));
    // Sched events and kernel-mode faults on user addresses happen in kernel
    // mode, which the crate excludes by default.
    builder.inherit(true).include_kernel();
    let mut counter = builder.build().expect("perf_event_open");
    counter.enable().expect("enable counter");
    counter
}

struct KernelCounts {
    minor: Counter,
    major: Counter,
    migrations: Counter,
    switches: Counter,
}

impl KernelCounts {
    fn open(pid: u32) -> Self {
        Self {
            minor: kernel_counter(pid, Software::PAGE_FAULTS_MIN),
            major: kernel_counter(pid, Software::PAGE_FAULTS_MAJ),
            migrations: kernel_counter(pid, Software::CPU_MIGRATIONS),
            switches: kernel_counter(pid, Software::CONTEXT_SWITCHES),
        }
    }
}

live_test! {
    fn counts_match_the_kernels_own_counters() {
        let dir = scratch("counts");
        let fault_dir = dir.to_string_lossy().into_owned();
        let mut work = Workload::spawn(&[
            "--minor-faults",
            "3000",
            "--major-faults",
            "64",
            "--fault-dir",
            &fault_dir,
            "--sleeps",
            "200",
            "--hops",
            "40",
        ]);
        let mut kernel = KernelCounts::open(work.pid());
        let rec = Recorder::start(work.pid(), dir.join("counts.run"), &[]);
        work.go();
        let (before, after) = work.finish();
        let run = rec.wait();
        let t = &run.totals;

        let minor = kernel.minor.read().expect("read");
        let major = kernel.major.read().expect("read");
        let migrations = kernel.migrations.read().expect("read");
        let switches = kernel.switches.read().expect("read");
        eprintln!(
            "correlator: {t:?}\nkernel: minor {minor} major {major} migrations {migrations} switches {switches}\n\
             rusage delta: nvcsw {} nivcsw {}",
            after.nvcsw - before.nvcsw,
            after.nivcsw - before.nivcsw
        );
        assert_eq!(t.lost, 0, "losses: {:?}", run.losses);
        assert_eq!(t.page_faults_minor, minor, "minor faults vs perf counter");
        assert_eq!(t.page_faults_major, major, "major faults vs perf counter");
        assert!(
            major >= 32,
            "the workload should have caused major faults ({major})"
        );
        assert!(minor >= 3000, "the workload touched 3000 pages ({minor})");
        assert_eq!(t.migrations, migrations, "migrations vs perf counter");
        assert!(migrations >= 39, "40 affinity hops ({migrations})");
        let ours = t.context_switches_voluntary + t.context_switches_involuntary;
        assert!(
            ours.abs_diff(switches) <= 1,
            "switches {ours} vs perf counter {switches}"
        );
        let nvcsw = u64::try_from(after.nvcsw - before.nvcsw).expect("delta");
        assert!(nvcsw >= 200, "200 sleeps ({nvcsw})");
        // Our window adds the final stdout write and exit to getrusage's.
        assert!(
            t.context_switches_voluntary.abs_diff(nvcsw) <= 1,
            "voluntary {} vs getrusage {nvcsw}",
            t.context_switches_voluntary
        );
        assert_eq!(run.stop_reason, StopReason::TargetExited);
        assert!(
            run.notes.iter().any(|n| n.contains("exited")),
            "{:?}",
            run.notes
        );
        // Off-CPU records: each 1 ms sleep is a blocked interval of ≥ 1 ms.
        let long_sleeps = run
            .offcpu
            .iter()
            .filter(|o| !o.preempted && o.blocked_ns >= 1_000_000)
            .count();
        assert!(long_sleeps >= 195, "blocked ≥1ms intervals: {long_sleeps}");
        // Every program's cost is known.
        assert!(run.overhead.stats_enabled);
        assert!(
            run.overhead
                .programs
                .iter()
                .any(|p| p.name == "sched_switch" && p.run_count > 0)
        );
    }
}

live_test! {
    fn thread_created_after_attach_is_counted() {
        let dir = scratch("newthread");
        let mut work = Workload::spawn(&[
            "--minor-faults",
            "2000",
            "--sleeps",
            "50",
            "--in-new-thread",
        ]);
        let mut kernel = KernelCounts::open(work.pid());
        let rec = Recorder::start(work.pid(), dir.join("t.run"), &[]);
        work.go();
        let _ = work.finish();
        let run = rec.wait();
        let minor = kernel.minor.read().expect("read");
        assert!(minor >= 2000, "kernel saw the thread's faults ({minor})");
        assert_eq!(run.totals.page_faults_minor, minor);
        assert!(run.totals.context_switches_voluntary >= 50);
        let main_pid = run.target.pid;
        assert!(
            run.offcpu.iter().any(|o| o.tid != main_pid),
            "records of the new thread"
        );
    }
}

live_test! {
    /// A busy spin pinned to CPU 1 takes the local timer interrupt at HZ; the
    /// counts attributed to it must match /proc/interrupts' LOC delta for that
    /// CPU, which also counts ticks while the spinner was not running there
    /// (another task ran on CPU 1): ours is never higher, and at least the
    /// spinner's share of the CPU (its own getrusage CPU time over the spin's
    /// wall time) of the kernel's count.
    fn timer_interrupts_match_proc_interrupts() {
        let dir = scratch("irq");
        let mut work = Workload::spawn(&["--spin-ms", "2000", "--spin-cpu", "1"]);
        let rec = Recorder::start(work.pid(), dir.join("irq.run"), &[]);
        let loc_before = proc_row("/proc/interrupts", "LOC")[1];
        let soft_before: Vec<u64> = ["TIMER", "RCU", "SCHED"]
            .iter()
            .map(|r| proc_row("/proc/softirqs", r)[1])
            .collect();
        work.go();
        let (before, after, work_ns) = work.finish_timed();
        let loc_after = proc_row("/proc/interrupts", "LOC")[1];
        let soft_after: Vec<u64> = ["TIMER", "RCU", "SCHED"]
            .iter()
            .map(|r| proc_row("/proc/softirqs", r)[1])
            .collect();
        let run = rec.wait();
        let loc = loc_after - loc_before;
        let ours = run.irq_kinds["local_timer"];
        let share = (after.cpu_us - before.cpu_us) as f64 * 1e3 / work_ns as f64;
        eprintln!(
            "local timer: ours {ours}, /proc/interrupts LOC delta on CPU1 {loc}; spinner had {:.1}% of the CPU",
            share * 100.0
        );
        assert!(loc >= 100, "2 s of spinning takes ticks ({loc})");
        assert!(ours <= loc, "ours {ours} > kernel {loc}");
        // 5% slack: tick time itself and the pin at the start.
        let floor = (loc as f64 * (share - 0.05)).floor() as u64;
        assert!(
            ours >= floor,
            "ours {ours} < kernel {loc} × CPU share {share:.3}"
        );
        assert!(run.durations.hardirq_ns > 0);
        let soft_kernel: u64 = soft_after
            .iter()
            .zip(&soft_before)
            .map(|(a, b)| a - b)
            .sum();
        let soft_ours: u64 = ["TIMER", "RCU", "SCHED"]
            .iter()
            .map(|v| run.softirq_vectors[*v])
            .sum();
        eprintln!(
            "softirqs TIMER+RCU+SCHED: ours {soft_ours}, /proc/softirqs delta on CPU1 {soft_kernel}"
        );
        assert!(
            soft_ours <= soft_kernel,
            "ours {soft_ours} > kernel {soft_kernel}"
        );
        // Softirqs that ran in ksoftirqd rather than on the spinner's IRQ exit
        // are the spinner being preempted, not softirq time stolen from it:
        // 15% slack below its CPU share.
        let soft_floor = (soft_kernel as f64 * (share - 0.15)).floor() as u64;
        assert!(
            soft_ours >= soft_floor,
            "ours {soft_ours} < kernel {soft_kernel} × (CPU share {share:.3} − 0.15)"
        );
    }
}

live_test! {
    /// Time spent waiting for a CPU: a spinner shares CPU 1 with another
    /// spinner, so it waits runnable about half of the time, in slices of
    /// milliseconds. The probes' runnable time (preempted → back on a CPU)
    /// must match the kernel's own runqueue-wait account (`run_delay` in
    /// schedstat, read by the workload around its work) within 1% + 1 ms: the
    /// two accounts start and stop a wait a few µs apart (measured: 0.1 ms
    /// apart in 1,000 ms).
    fn runnable_time_matches_the_kernels_run_delay() {
        let dir = scratch("run-delay");
        let mut rival = Workload::spawn(&["--spin-ms", "3000", "--spin-cpu", "1"]);
        let mut work = Workload::spawn(&["--spin-ms", "2000", "--spin-cpu", "1"]);
        let rec = Recorder::start(work.pid(), dir.join("rd.run"), &[]);
        rival.go();
        work.go();
        let (before, after, _) = work.finish_timed();
        let run = rec.wait();
        let _ = rival.finish_timed();
        let kernel = after.run_delay_ns - before.run_delay_ns;
        let ours = run.durations.runnable_ns;
        eprintln!(
            "runnable: ours {:.1} ms, kernel run_delay {:.1} ms",
            ours as f64 / 1e6,
            kernel as f64 / 1e6
        );
        assert!(
            kernel >= 500_000_000,
            "the rival should have kept the spinner waiting ({kernel} ns)"
        );
        let diff = ours.abs_diff(kernel) as f64;
        assert!(
            diff <= 0.01 * kernel as f64 + 1e6,
            "ours {ours} vs kernel {kernel}"
        );
    }
}

live_test! {
    /// A ring buffer of one page cannot hold 100 ms of records of a thread that
    /// sleeps 1 ms at a time: the kernel must count what it could not deliver,
    /// and delivered + lost must add up to the switches that produced records.
    fn ring_overflow_is_counted_as_lost() {
        let dir = scratch("overflow");
        let mut work = Workload::spawn(&["--sleeps", "600"]);
        let rec = Recorder::start(
            work.pid(),
            dir.join("o.run"),
            &["--ring-bytes", "4096", "--min-offcpu", "0s"],
        );
        work.go();
        let _ = work.finish();
        let run = rec.wait();
        let lost = run.losses.ring_reserve_failed;
        let delivered = run.offcpu.len() as u64;
        let switches = run.totals.context_switches_voluntary + run.totals.context_switches_involuntary;
        eprintln!("delivered {delivered}, lost {lost}, switches {switches}");
        assert!(lost > 0, "a one-page ring must overflow");
        assert_eq!(run.totals.lost, lost + run.losses.records_over_cap);
        assert!(
            (delivered + lost).abs_diff(switches) <= 2,
            "delivered {delivered} + lost {lost} vs switches {switches}"
        );
        let summary = Command::new(BIN)
            .arg("summary")
            .arg(dir.join("o.run"))
            .output()
            .expect("summary");
        let text = String::from_utf8_lossy(&summary.stdout);
        assert!(text.contains("LOSSES"), "summary must say so:\n{text}");
    }
}

live_test! {
    fn ctrl_c_still_writes_the_run() {
        let dir = scratch("sigint");
        let mut work = Workload::spawn(&["--sleeps", "3000"]);
        let rec = Recorder::start(work.pid(), dir.join("i.run"), &[]);
        work.go();
        std::thread::sleep(std::time::Duration::from_millis(500));
        // SAFETY: plain kill(2) on our own child.
        unsafe { libc::kill(i32::try_from(rec.child.id()).expect("pid"), libc::SIGINT) };
        let run = rec.wait();
        assert_eq!(run.stop_reason, StopReason::Interrupted);
        assert!(run.totals.context_switches_voluntary >= 100);
        let _ = work.child.kill();
    }
}

live_test! {
    /// With --follow-children, a process the target forks after attach is
    /// watched too: its faults are in the totals, matching the kernel's perf
    /// counter (which is inherited across fork).
    fn follow_children_counts_a_forked_child() {
        let dir = scratch("children");
        let mut work = Workload::spawn(&["--minor-faults", "2500", "--in-child-process"]);
        let mut kernel = KernelCounts::open(work.pid());
        let rec = Recorder::start(work.pid(), dir.join("c.run"), &["--follow-children"]);
        work.go();
        let _ = work.finish();
        let run = rec.wait();
        let minor = kernel.minor.read().expect("read");
        eprintln!(
            "children: ours {} kernel {minor}",
            run.totals.page_faults_minor
        );
        assert!(minor >= 2500, "the child touched 2500 pages ({minor})");
        assert_eq!(run.totals.page_faults_minor, minor);
        assert!(run.follow_children);
    }
}
