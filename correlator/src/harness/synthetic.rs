//! A large synthetic run for the analysis benchmark: `seconds` of requests
//! at a constant rate with a 10 ms stall every 500 ms, and kernel events
//! spread over the buckets (fault bursts inside the stalls), as a long
//! real run would produce. Deterministic.

use std::collections::BTreeMap;

use correlator_common::{Account, Counter, NUM_ACCOUNT, NUM_COUNTERS};

use crate::runfile::{Durations, Environment, EventTotals, Losses, Overhead, RunFile, SCHEMA};
use crate::{
    latency::capture::LatencyCapture,
    latency::recorder::{Recorder, RequestTimes},
    target::Target,
    timeline::{OffCpu, ThreadAccount, syscalls::Site},
};

pub fn run(seconds: u64, requests: u64, events: u64) -> RunFile {
    const SHIFT: u32 = 19;
    let start = 1_000_000_000u64;
    let end = start + seconds * 1_000_000_000;
    let interval = (end - start) / requests.max(1);
    let stalled = |t: u64| (t - start) % 500_000_000 < 10_000_000;
    let mut rec = Recorder::new(1, start);
    for i in 0..requests {
        let t = start + i * interval;
        let done = if stalled(t) {
            t - (t - start) % 500_000_000 + 10_050_000
        } else {
            t + 40_000 + (i % 7) * 3_000
        };
        rec.sent(0, t, 0, true);
        rec.answered(
            RequestTimes {
                intended_ns: t,
                sent_ns: t,
                done_ns: done,
                connection: (i % 8) as u32,
                phase: 0,
            },
            true,
            true,
        );
    }
    let buckets_n = (end - start) >> SHIFT;
    let first = start >> SHIFT;
    let per_bucket = events / buckets_n.max(1);
    let mut buckets = Vec::with_capacity(buckets_n as usize);
    let mut accounts = Vec::with_capacity(buckets_n as usize);
    let mut total = [0u64; NUM_COUNTERS];
    for b in 0..buckets_n {
        let mut c = [0u64; NUM_COUNTERS];
        let t = (first + b) << SHIFT;
        let burst = t >= start && stalled(t);
        c[Counter::PageFaultsMinor as usize] = if burst {
            per_bucket * 4
        } else {
            per_bucket / 4
        };
        c[Counter::SwitchesVoluntary as usize] = per_bucket / 4;
        c[Counter::SwitchesInvoluntary as usize] = per_bucket / 8;
        c[Counter::HardIrqs as usize] = per_bucket / 8;
        c[Counter::SoftIrqs as usize] = per_bucket / 4;
        c[Counter::HardIrqNs as usize] = 2_000;
        c[Counter::BlockedNs as usize] = 300_000;
        for (s, v) in total.iter_mut().zip(c) {
            *s += v;
        }
        buckets.push((first + b, c));
        // The serving thread's account of the bucket: busy in a burst,
        // mostly idle otherwise (one row per bucket, as a busy server has).
        let mut ns = [0u64; NUM_ACCOUNT];
        let bucket = 1u64 << SHIFT;
        ns[Account::OnCpu as usize] = if burst { bucket } else { bucket / 10 };
        ns[Account::SyscallCpu as usize] = bucket / 40;
        ns[Account::SamplesFault as usize] = u64::from(burst);
        ns[Account::Blocked as usize + Site::Idle as usize] =
            if burst { 0 } else { bucket * 8 / 10 };
        accounts.push(ThreadAccount {
            tid: 100,
            epoch: first + b,
            top_syscall: Some((232, bucket / 80)),
            ns,
        });
    }
    let offcpu: Vec<OffCpu> = (0..100_000u64)
        .map(|i| {
            let s = start + i * ((end - start) / 100_000);
            OffCpu {
                tid: 100 + (i % 4) as u32,
                tgid: 100,
                preempted: i % 5 == 0,
                cpu_out: 1,
                cpu_in: 1,
                start_ns: s,
                end_ns: s + 80_000,
                runnable_ns: if i % 5 == 0 { 80_000 } else { 5_000 },
                blocked_ns: if i % 5 == 0 { 0 } else { 75_000 },
                next_pid: 7,
                next_comm: "kworker".into(),
                syscall: None,
                site: crate::timeline::syscalls::Site::Other,
                kstack: None,
                ustack: None,
                waker: None,
                moved_ns: 0,
            }
        })
        .collect();
    let latency = LatencyCapture::from_recorder(
        "synthetic".into(),
        &rec,
        &[(start, end, Some(requests as f64 / seconds as f64))],
    );
    RunFile {
        schema: SCHEMA.into(),
        correlator_version: env!("CARGO_PKG_VERSION").into(),
        target: Target {
            pid: 100,
            comm: "synthetic".into(),
            cmdline: "synthetic".into(),
        },
        follow_children: false,
        started_ns: start,
        ended_ns: end,
        stop_reason: crate::runfile::StopReason::Duration,
        bucket_ns: 1 << SHIFT,
        counter_names: Counter::ALL
            .iter()
            .map(|&c| crate::runfile::counter_name(c).to_string())
            .collect(),
        buckets,
        offcpu,
        min_offcpu_record_ns: 50_000,
        totals: EventTotals {
            page_faults_minor: total[Counter::PageFaultsMinor as usize],
            context_switches_voluntary: total[Counter::SwitchesVoluntary as usize],
            context_switches_involuntary: total[Counter::SwitchesInvoluntary as usize],
            hardirqs: total[Counter::HardIrqs as usize],
            softirqs: total[Counter::SoftIrqs as usize],
            ..EventTotals::default()
        },
        durations: Durations::default(),
        irq_kinds: Default::default(),
        softirq_vectors: Default::default(),
        losses: Losses::default(),
        overhead: Overhead::default(),
        environment: Environment::default(),
        notes: Vec::new(),
        latency: Some(latency),
        server_latency: None,
        steal: Vec::new(),
        account_names: Vec::new(),
        thread_accounts: accounts,
        stack_samples: Vec::new(),
        stacks: Default::default(),
        upstreams: Vec::new(),
        memory_stalls: Vec::new(),
        memory_cgroup: None,
        ipi_senders: Vec::new(),
        device_irqs: Vec::new(),
        runtime_pauses: Vec::new(),
        clocks: None,
        runtime_gc: None,
        syscalls: Vec::new(),
        syscall_totals: BTreeMap::new(),
        sample_period_ns: 1_003_009,
        syscall_time: crate::probes::SyscallTime::Exact,
        samples: 0,
        thread_names: BTreeMap::new(),
    }
}
