//! The host under the tests: is it quiet enough to measure a server?
//!
//! Live tests share a 2-vCPU VM whose host takes the vCPUs away in bursts
//! (steal of 30–45% for minutes, stalls of 10–100 ms; a clean server's p50
//! went from 0.17 ms to 6 ms in one CI run). A latency measurement taken in
//! such a burst measures the host, not the server, whatever the code under
//! test does. So a latency test first waits, for a bounded time, until two
//! one-second spins on every CPU, 3 s apart, see little steal and no long
//! stall, like a benchmark harness that lets the machine settle. The probe reads the
//! kernel's own steal counter (/proc/stat) and its own clock gaps: ground
//! truth from outside correlator.
//!
//! A burst can still start after the test did: the host took 26–46% of
//! the wanted CPU time during three tests that failed in one CI run, each
//! of which had started on a quiet host. So [`measure`] applies the rule
//! the product applies to its own demo scenarios and experiment
//! repetitions (`cpu::HOST_DISTURBED`): an attempt during which the host
//! took 10% or more of a CPU's wanted time (steal ÷ (busy + steal), per
//! CPU, /proc/stat) measured the host, so it is measured again once the
//! host is quiet, *whatever its verdict*: a disturbed attempt that passed
//! is discarded like one that failed, and an undisturbed attempt's verdict
//! always stands. A test whose verdict one short burst moves
//! ([`measure_burst_sensitive`]) also counts the worst second of the
//! attempt. The decision reads only /proc/stat, never the test's
//! outcome. At most [`MAX_ATTEMPTS`], within the suite's budget; when
//! either runs out, the last attempt's verdict stands, with how much the
//! host took said beside it.
//!
//! Every attempt runs under the [`crate::watchdog`]: one that hangs fails,
//! with what its processes were waiting in, and is not measured again.

use std::{
    panic::{AssertUnwindSafe, catch_unwind, resume_unwind},
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, Instant},
};

/// Steal above this share of a CPU's probe second is a burst.
const MAX_STEAL: f64 = 0.05;
/// A spin loop that misses the clock for longer than this was descheduled
/// by the host (or by a guest task that should not be running).
const MAX_GAP_NS: u64 = 10_000_000;
/// How long one test waits for quiet at most.
const WAIT_PER_TEST: Duration = Duration::from_secs(180);
/// How long the whole suite waits for quiet and re-measures disturbed
/// attempts at most. CI has 90 minutes: the fast tier's tests take about
/// 13 (the full tier's about 50) and set-up, building and the other steps
/// about 9, so this keeps CI's worst case near 50.
const WAIT_PER_SUITE: Duration = Duration::from_secs(30 * 60);
/// Quiet probes in a row, 3 s apart, before a test starts: one quiet
/// second can be a lull inside a burst (bursts here last 20-60 s with
/// lulls of a few seconds).
const QUIET_IN_A_ROW: u32 = 2;

/// An attempt in which the host took this share of some CPU's wanted time
/// measured the host (the product's `cpu::HOST_DISTURBED`).
const HOST_DISTURBED: f64 = 0.10;
/// Attempts of one test at most (the demo runs a scenario at most 4 times;
/// a test here is one scenario's size or more).
const MAX_ATTEMPTS: u32 = 3;

static WAITED_MS: AtomicU64 = AtomicU64::new(0);

/// What one probe second saw.
#[derive(Debug, Clone, Copy)]
pub struct Noise {
    /// Worst CPU's steal as a share of the probe's wall time.
    pub steal: f64,
    /// Longest gap between two clock reads of a spinning thread, any CPU.
    pub max_gap_ns: u64,
}

impl Noise {
    pub fn quiet(&self) -> bool {
        self.steal <= MAX_STEAL && self.max_gap_ns <= MAX_GAP_NS
    }
}

impl std::fmt::Display for Noise {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "host steal {:.0}% of the worst CPU, longest stall {:.1} ms",
            self.steal * 100.0,
            self.max_gap_ns as f64 / 1e6
        )
    }
}

/// Per-CPU ticks (USER_HZ) from /proc/stat's `cpuN` lines.
#[derive(Debug, Clone, Copy)]
struct Ticks {
    /// user + nice + system + irq + softirq.
    busy: u64,
    steal: u64,
    /// Every state's ticks (the first eight columns; guest time is inside
    /// user already).
    total: u64,
}

/// [`Ticks`] of every CPU. Read here rather than through correlator's own
/// reader: this is the tests' ground truth.
fn cpu_ticks() -> Vec<Ticks> {
    let text = std::fs::read_to_string("/proc/stat").expect("/proc/stat");
    text.lines()
        .filter(|l| l.starts_with("cpu") && !l.starts_with("cpu "))
        .map(|l| {
            let v: Vec<u64> = l
                .split_whitespace()
                .skip(1)
                .map(|x| x.parse().expect("tick count"))
                .collect();
            Ticks {
                busy: v[0] + v[1] + v[2] + v[5] + v[6],
                steal: v[7],
                total: v[..8].iter().sum(),
            }
        })
        .collect()
}

/// Spins one thread per CPU for `span`, each pinned, and returns the
/// longest gap any of them saw between two clock reads.
fn spin_all(span: Duration) -> u64 {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads: Vec<_> = (0..cpus)
        .map(|cpu| {
            std::thread::spawn(move || {
                // SAFETY: a zeroed cpu_set_t is valid; CPU_SET writes in it.
                unsafe {
                    let mut set: libc::cpu_set_t = std::mem::zeroed();
                    libc::CPU_SET(cpu, &mut set);
                    libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set);
                }
                // Instant is CLOCK_MONOTONIC.
                let start = Instant::now();
                let (mut last, mut worst) = (Duration::ZERO, Duration::ZERO);
                while last < span {
                    let t = start.elapsed();
                    worst = worst.max(t - last);
                    last = t;
                }
                u64::try_from(worst.as_nanos()).unwrap_or(u64::MAX)
            })
        })
        .collect();
    threads
        .into_iter()
        .map(|t| t.join().expect("probe thread"))
        .max()
        .unwrap_or(0)
}

/// One probe second.
pub fn probe() -> Noise {
    let span = Duration::from_secs(1);
    let before = cpu_ticks();
    let started = Instant::now();
    let max_gap_ns = spin_all(span);
    let wall = started.elapsed().as_secs_f64();
    let after = cpu_ticks();
    let hz = 100.0; // USER_HZ, fixed at 100 by the kernel's ABI.
    let steal = before
        .iter()
        .zip(&after)
        .map(|(b, a)| a.steal.saturating_sub(b.steal) as f64 / hz / wall)
        .fold(0.0, f64::max);
    Noise { steal, max_gap_ns }
}

/// Waits, within the per-test and per-suite budgets, until
/// `QUIET_IN_A_ROW` probe seconds in a row are quiet; prints what it saw
/// when it waited long or gave up. Returns the last probe.
pub fn await_quiet(test: &str) -> Noise {
    let started = Instant::now();
    let mut in_a_row = 0;
    loop {
        let noise = probe();
        let waited = started.elapsed();
        let suite = Duration::from_millis(WAITED_MS.load(Ordering::Relaxed)) + waited;
        in_a_row = if noise.quiet() { in_a_row + 1 } else { 0 };
        if in_a_row >= QUIET_IN_A_ROW {
            if waited > Duration::from_secs(6) {
                eprintln!(
                    "{test}: host quiet after {:.0} s ({noise})",
                    waited.as_secs_f64()
                );
            }
            WAITED_MS.fetch_add(waited.as_millis() as u64, Ordering::Relaxed);
            return noise;
        }
        if waited >= WAIT_PER_TEST || suite >= WAIT_PER_SUITE {
            eprintln!(
                "{test}: host still noisy after {:.0} s ({noise}); measuring anyway",
                waited.as_secs_f64()
            );
            WAITED_MS.fetch_add(waited.as_millis() as u64, Ordering::Relaxed);
            return noise;
        }
        std::thread::sleep(Duration::from_secs(3));
    }
}

/// The most the host took of any CPU's wanted time (steal over busy +
/// steal) between two readings; a CPU that wanted under a tenth of the
/// time is left out (a tick of steal there is no evidence). The product's
/// `cpu::host_share`, written again from /proc/stat.
fn host_share(before: &[Ticks], after: &[Ticks]) -> f64 {
    before
        .iter()
        .zip(after)
        .filter_map(|(b, a)| {
            let busy = a.busy.saturating_sub(b.busy);
            let steal = a.steal.saturating_sub(b.steal);
            let total = a.total.saturating_sub(b.total);
            let wanted = busy + steal;
            (wanted > 0 && wanted * 10 >= total).then(|| steal as f64 / wanted as f64)
        })
        .fold(0.0, f64::max)
}

/// Appends `line` to `file` in the tests' scratch directory: a passing
/// test's output is captured, and `cargo xtask test` prints these files
/// after the suite.
fn append_line(file: &str, line: &str) {
    use std::io::Write as _;
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(file);
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = writeln!(f, "{line}");
    }
}

/// A discarded attempt, in `host-remeasured.txt`.
fn record_discarded(line: &str) {
    append_line("host-remeasured.txt", line);
}

/// Runs a live test's `body` on a quiet host and measures it again while
/// the host disturbed it (see the module docs): the verdict is that of the
/// first undisturbed attempt, or of the last one when the attempts or the
/// suite's budget run out. A discarded attempt's panic message, if any,
/// is printed by the test harness as usual: it is not hidden, only not
/// counted.
pub fn measure(test: &str, body: impl Fn()) {
    attempts(test, MAX_ATTEMPTS, Rule::Average, body);
}

/// [`measure`] for a test whose command re-measures what the host
/// disturbed itself (the demo re-runs a disturbed scenario): one attempt,
/// with the host's share said beside a failure.
pub fn measure_once(test: &str, body: impl Fn()) {
    attempts(test, 1, Rule::Average, body);
}

/// [`measure`] for a test whose verdict a single burst of host stalls
/// moves: an attempt is also discarded when, in any one second of it, the
/// host took [`HOST_DISTURBED`] of a CPU's wanted time. The coordinated-
/// omission test's p99 is made of 20 ms stalls behind 1% of its requests;
/// three 40 ms host stalls in one second doubled it (38 ms) while the host
/// took 4% of the attempt's wanted time in all.
pub fn measure_burst_sensitive(test: &str, body: impl Fn()) {
    attempts(test, MAX_ATTEMPTS, Rule::WorstSecond, body);
}

/// What counts as the host's share of an attempt.
#[derive(Clone, Copy)]
enum Rule {
    /// Over the whole attempt.
    Average,
    /// The larger of that and the worst one-second window's.
    WorstSecond,
}

/// Reads /proc/stat every [`SAMPLE_EVERY`] on a thread until stopped.
struct Sampler {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Vec<(Instant, Vec<Ticks>)>>,
}

const SAMPLE_EVERY: Duration = Duration::from_millis(200);

impl Sampler {
    fn start() -> Sampler {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = std::sync::Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut samples = vec![(Instant::now(), cpu_ticks())];
            while !flag.load(Ordering::Relaxed) {
                std::thread::sleep(SAMPLE_EVERY);
                samples.push((Instant::now(), cpu_ticks()));
            }
            samples
        });
        Sampler { stop, thread }
    }

    /// The largest host share over any window of at least a second.
    fn worst_second(self) -> f64 {
        self.stop.store(true, Ordering::Relaxed);
        let samples = self.thread.join().expect("sampler");
        worst_window(&samples, Duration::from_secs(1))
    }
}

/// The largest [`host_share`] between a sample and the first one at least
/// `span` later.
fn worst_window(samples: &[(Instant, Vec<Ticks>)], span: Duration) -> f64 {
    let mut worst: f64 = 0.0;
    for (i, (t0, before)) in samples.iter().enumerate() {
        if let Some((_, after)) = samples[i..].iter().find(|(t, _)| *t - *t0 >= span) {
            worst = worst.max(host_share(before, after));
        }
    }
    worst
}

/// The test's wall time (waits for quiet and discarded attempts
/// included), in `live-times.txt`: `cargo xtask test` prints every live
/// test's time, the tier's total and the slowest ten from it.
fn record_time(test: &str, took: Duration, attempts: u32, outcome: &str) {
    let secs = took.as_secs_f64();
    append_line(
        "live-times.txt",
        &format!("{test}\t{secs:.1}\t{attempts}\t{outcome}"),
    );
}

fn attempts(test: &str, max: u32, rule: Rule, body: impl Fn()) {
    let first_start = Instant::now();
    for attempt in 1..=max {
        await_quiet(test);
        let before = cpu_ticks();
        let sampler = matches!(rule, Rule::WorstSecond).then(Sampler::start);
        let started = Instant::now();
        let dog = crate::watchdog::Watchdog::arm(test, crate::watchdog::ATTEMPT_LIMIT);
        let mut outcome = catch_unwind(AssertUnwindSafe(&body));
        let hung = dog.disarm();
        if hung {
            // Whatever the body did once its children were killed.
            outcome = Err(Box::new(format!(
                "{test} hung: the watchdog killed its children after {:.0} s (what they were doing is printed above)",
                crate::watchdog::ATTEMPT_LIMIT.as_secs_f64()
            )));
        }
        let took = started.elapsed();
        let average = host_share(&before, &cpu_ticks());
        let mut said = format!(
            "{test}: during attempt {attempt} ({:.0} s) the host took {:.0}% of a CPU's wanted time (steal ÷ (busy + steal), /proc/stat)",
            took.as_secs_f64(),
            average * 100.0
        );
        let mut share = average;
        if let Some(sampler) = sampler {
            let worst = sampler.worst_second();
            said.push_str(&format!(", {:.0}% in its worst second", worst * 100.0));
            share = share.max(worst);
        }
        let spent = Duration::from_millis(WAITED_MS.load(Ordering::Relaxed));
        // A hang is no measurement of the host: it stands.
        let again =
            !hung && share >= HOST_DISTURBED && attempt < max && spent + took <= WAIT_PER_SUITE;
        if again {
            let verdict = if outcome.is_ok() { "passed" } else { "failed" };
            let line = format!(
                "{said}: it measured the host, so it is discarded, whatever its verdict ({verdict}), and measured again"
            );
            eprintln!("{line}");
            record_discarded(&line);
            WAITED_MS.fetch_add(took.as_millis() as u64, Ordering::Relaxed);
            continue;
        }
        let verdict = if outcome.is_ok() { "passed" } else { "failed" };
        record_time(test, first_start.elapsed(), attempt, verdict);
        if let Err(panic) = outcome {
            eprintln!("{said}; this attempt's verdict stands");
            resume_unwind(panic);
        }
        return;
    }
}

#[test]
fn the_host_share_is_the_worst_cpus_steal_over_its_wanted_time() {
    let t = |busy, steal, total| Ticks { busy, steal, total };
    let before = [t(0, 0, 0), t(0, 0, 0), t(0, 0, 0)];
    // CPU 0: 80 busy + 20 steal of 100 → 20%. CPU 1: 45 + 5 of 100 → 10%.
    // CPU 2 wanted 5 of 100 ticks (1 of them stolen): too little to count.
    let after = [t(80, 20, 100), t(45, 5, 100), t(4, 1, 100)];
    let share = host_share(&before, &after);
    assert!((share - 0.20).abs() < 1e-12, "{share}");
    assert!(share >= HOST_DISTURBED);
    let quiet = [t(90, 5, 100), t(45, 0, 100), t(4, 1, 100)];
    assert!(host_share(&before, &quiet) < HOST_DISTURBED);
}

#[test]
fn a_burst_is_the_worst_seconds_share() {
    let t = |busy, steal, total| Ticks { busy, steal, total };
    let t0 = Instant::now();
    let at = |ms| t0 + Duration::from_millis(ms);
    // One CPU, fully busy for 5 s (100 ticks a second): 30 ticks stolen
    // between 2.0 and 3.0 s, none else: 6% of the 5 s, 30% of that second.
    let samples = vec![
        (at(0), vec![t(0, 0, 0)]),
        (at(1000), vec![t(100, 0, 100)]),
        (at(2000), vec![t(200, 0, 200)]),
        (at(3000), vec![t(270, 30, 300)]),
        (at(4000), vec![t(370, 30, 400)]),
        (at(5000), vec![t(470, 30, 500)]),
    ];
    let average = host_share(&samples[0].1, &samples[5].1);
    assert!((average - 0.06).abs() < 1e-12, "{average}");
    let worst = worst_window(&samples, Duration::from_secs(1));
    assert!((worst - 0.30).abs() < 1e-12, "{worst}");
}
