//! The terminal summary: readable in ten seconds. Signature and top causes
//! first, then the latency table, episodes, events, overhead and losses.

use std::fmt::Write as _;

use super::Report;
use crate::latency::{fmt_ns, table};

pub fn render(r: &Report) -> String {
    let mut out = String::new();
    let c = &r.classification;
    let _ = writeln!(
        out,
        "correlator report: PID {} ({}), {:.1} s, latency from {}",
        r.target.pid, r.target.comm, r.duration_s, r.latency.source
    );
    let sig = serde_json::to_value(c.signature)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let _ = writeln!(out, "\nSIGNATURE  {}  — {}", sig.to_uppercase(), c.evidence);
    if c.causes.is_empty() {
        let _ = writeln!(out, "CAUSES     none claimed");
    } else {
        let _ = writeln!(out, "CAUSES (best first)");
        for (i, cause) in c.causes.iter().take(3).enumerate() {
            // The share and the test's p-value are in the evidence; a bare
            // "score 0.62" read like a confidence.
            let _ = writeln!(
                out,
                "  {}. {:<12} {}",
                i + 1,
                cause.cause.name(),
                cause.evidence
            );
            for path in cause.stacks.iter().take(2) {
                let _ = writeln!(
                    out,
                    "     code path {:>3.0}%: {}",
                    path.share * 100.0,
                    super::flame::one_line(path)
                );
            }
            let _ = writeln!(out, "     → confirm: {}", cause.experiment);
        }
        if c.causes.len() > 3 {
            let rest: Vec<String> = c.causes[3..]
                .iter()
                .map(|x| format!("{} ({:.0}% of episode time)", x.cause, x.score * 100.0))
                .collect();
            let _ = writeln!(out, "     also: {}", rest.join(", "));
        }
    }
    if !r.families.is_empty() {
        let p = r
            .families
            .iter()
            .find_map(|f| f.impact.as_ref().map(|i| i.percentile));
        let _ = writeln!(
            out,
            "FAMILIES (episodes alike, by impact{})",
            p.map_or(String::new(), |p| format!(" on p{p}"))
        );
        for (i, f) in r.families.iter().take(4).enumerate() {
            let name = f.name();
            let sig = serde_json::to_value(f.signature)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            let _ = writeln!(out, "  {}. {name:<24} {sig:<10} {}", i + 1, f.evidence);
        }
    }
    let _ = writeln!(out);
    out.push_str(&table(
        &latency_title(&r.latency.source),
        &r.latency.summary,
    ));
    let threshold = r.latency.threshold_ns.map_or("-".into(), fmt_ns);
    let _ = writeln!(
        out,
        "  spikes: {} requests above {threshold}; timeouts {}; errors {}",
        r.latency.spikes, r.latency.timeouts, r.latency.errors
    );
    if r.latency.phases.len() > 1 {
        for p in &r.latency.phases {
            let p99 = p
                .summary
                .value_at(99.0)
                .map_or("not enough samples".into(), fmt_ns);
            let _ = writeln!(
                out,
                "  phase {:>7}/s: {} requests, p99 {p99}, {:.2}% spikes",
                p.rate.map_or("-".into(), |r| format!("{r:.0}")),
                p.summary.count,
                p.spike_fraction * 100.0
            );
        }
    }
    if !r.episodes.is_empty() {
        let mut durations: Vec<u64> = r.episodes.iter().map(|e| e.duration_ns).collect();
        durations.sort_unstable();
        let explained = r
            .episodes
            .iter()
            .map(|e| e.account.explained_share)
            .sum::<f64>()
            / r.episodes.len() as f64;
        let _ = writeln!(
            out,
            "\nEPISODES   {} (median {}, longest {}), {} requests affected, {:.0}% of episode time measured",
            r.episodes.len(),
            fmt_ns(durations[durations.len() / 2]),
            fmt_ns(durations[durations.len() - 1]),
            r.episodes.iter().map(|e| e.window.requests).sum::<u64>(),
            explained * 100.0
        );
        let _ = writeln!(out, "  where the time went: {}", account_line(r));
        if !c.not_significant.is_empty() {
            let _ = writeln!(
                out,
                "  not enough evidence (not above the baseline windows): {}",
                c.not_significant.join(", ")
            );
        }
        if !c.beside.is_empty() {
            let _ = writeln!(
                out,
                "  above the baseline beside the causes, not claimed: {}",
                c.beside.join(", ")
            );
        }
    }
    if let Some(s) = &r.server_side {
        let pct = |p: f64| s.summary.value_at(p).map_or("-".into(), fmt_ns);
        // Off from the client's count, %.
        let off = |n: u64| {
            (n as f64 - s.client_requests as f64) / (s.client_requests.max(1)) as f64 * 100.0
        };
        let diff = off(s.server_requests);
        let batched = match s.server_requests_estimated {
            Some(est) if est != s.server_requests => format!(
                "; ≈{est} counting reads of several requests, {:+.2}%",
                off(est)
            ),
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "SERVER     {}: {} requests in the measured windows (client {}, {:+.2}%{batched}), p50 {}, p99 {}; {} of {} episodes also slow server-side ({} server-side episodes)",
            s.source,
            s.server_requests,
            s.client_requests,
            diff,
            pct(50.0),
            pct(99.0),
            s.client_episodes_seen,
            r.episodes.len(),
            s.server_episodes
        );
        for w in &s.warnings {
            let _ = writeln!(out, "           warning: {w}");
        }
    }
    for u in r.upstreams.iter().take(3) {
        let _ = writeln!(out, "{}", upstream_line(u));
    }
    if let Some(line) = ipi_line(&r.ipi_senders) {
        let _ = writeln!(out, "{line}");
    }
    if let Some(line) = device_irq_line(&r.device_irqs) {
        let _ = writeln!(out, "{line}");
    }
    let e = &r.events;
    let _ = writeln!(
        out,
        "EVENTS     faults {} minor / {} major, switches {} voluntary / {} involuntary, migrations {}, hardirqs {}, softirqs {}, lost {}",
        e.page_faults_minor,
        e.page_faults_major,
        e.context_switches_voluntary,
        e.context_switches_involuntary,
        e.migrations,
        e.hardirqs,
        e.softirqs,
        e.lost
    );
    let busiest: Vec<String> = {
        let mut p = r.overhead.programs.clone();
        p.sort_by(|a, b| {
            (b.run_count as f64 * b.ns_per_run).total_cmp(&(a.run_count as f64 * a.ns_per_run))
        });
        p.iter()
            .take(3)
            .map(|p| format!("{} {:.0} ns × {}", p.name, p.ns_per_run, p.run_count))
            .collect()
    };
    let _ = writeln!(
        out,
        "OVERHEAD   probes used {:.1} ms of CPU ({:.2}% of the run{}); busiest: {}",
        r.overhead.probes_cpu_ms,
        r.overhead.probes_cpu_share * 100.0,
        r.overhead
            .sampled_note()
            .map_or(String::new(), |n| format!("; {n}")),
        if busiest.is_empty() {
            "unknown (BPF stats off)".into()
        } else {
            busiest.join(", ")
        }
    );
    if let Some(p) = &r.overhead.syscall_path {
        let m = &p.measured;
        let hooked = match m.hooked_no_stats_ns {
            Some(off) => format!(
                "{off:.0} ns with the hooks and the BPF statistics off ({:.0} with them on: their own cost is not counted)",
                m.hooked_ns
            ),
            None => format!(
                "{:.0} ns with the hooks (the BPF statistics on, which could not be turned off: their own cost is counted in it)",
                m.hooked_ns
            ),
        };
        let _ = writeln!(
            out,
            "           + the syscall hooks' slow path, not in the programs' time: {:.1} ms of CPU ({:.0} ns × {} syscalls on the machine; getppid() {:.0} → {hooked}, {:.0} ns of it their programs, measured at attach)",
            p.cpu_ms, p.ns_per_syscall, p.syscalls, m.unhooked_ns, m.programs_ns
        );
    }
    if let Some(d) = &r.overhead.hook_dispatch {
        let m = &d.measured;
        let measured = match m.hooked_no_stats_ns {
            Some(off) => format!(
                "a socketpair round trip {:.0} → {off:.0} ns with the two socket hooks, {:.0} ns of it their programs, measured at attach with the BPF statistics off ({:.0} ns with them on: their own cost is not counted)",
                m.unhooked_ns, m.programs_ns, m.hooked_ns
            ),
            None => format!(
                "a socketpair round trip {:.0} → {:.0} ns with the two socket hooks, {:.0} ns of it their programs, measured at attach (with the BPF statistics on, which could not be turned off: their own cost is counted in it)",
                m.unhooked_ns, m.hooked_ns, m.programs_ns
            ),
        };
        let _ = if d.ns_per_run > 0.0 {
            writeln!(
                out,
                "           + the hooks' dispatch, not in the programs' time: {:.1} ms of CPU, of every task that hit them ({:.0} ns × {} runs; {measured} and taken for every hook)",
                d.cpu_ms, d.ns_per_run, d.runs
            )
        } else {
            writeln!(
                out,
                "           + the hooks' dispatch, not in the programs' time: not measured above this host's noise ({measured})"
            )
        };
    }
    if let Some(s) = &r.overhead.statistics {
        let _ = if s.ns_per_run > 0.0 {
            writeln!(
                out,
                "           + the BPF statistics' own cost while on (the kernel timing each run, to time the programs): {:.1} ms of CPU, of every task that hit the hooks ({:.0} ns × {} runs they counted; measured at attach on the socket hooks, with them on less off, and taken for every hook)",
                s.cpu_ms, s.ns_per_run, s.runs
            )
        } else {
            writeln!(
                out,
                "           + the BPF statistics' own cost while on ({} runs they counted): not measured above this host's noise at attach",
                s.runs
            )
        };
    }
    if e.lost > 0 {
        let _ = writeln!(
            out,
            "LOSSES     {} kernel events/records lost: {}",
            e.lost,
            nonzero_losses(&r.losses)
        );
    }
    for n in &r.notes {
        let _ = writeln!(out, "note: {n}");
    }
    out
}

/// `stack_collisions 1, ring_reserve_failed 3`: the kinds that lost
/// something, named as in the JSON.
fn nonzero_losses(l: &crate::runfile::Losses) -> String {
    let Ok(serde_json::Value::Object(kinds)) = serde_json::to_value(l) else {
        return String::new();
    };
    kinds
        .iter()
        .filter_map(|(k, v)| v.as_u64().filter(|&n| n > 0).map(|n| format!("{k} {n}")))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One upstream's reply times, inside the episodes and outside them.
/// Who sent cross-CPU calls to the server's CPU: the top two senders
/// (shown from 100 calls: a few are every process's background).
fn ipi_line(senders: &[crate::timeline::ipis::IpiSender]) -> Option<String> {
    let all: u64 = senders.iter().map(|s| s.calls).sum();
    if all < 100 {
        return None;
    }
    let named: Vec<String> = senders
        .iter()
        .take(2)
        .map(|s| {
            let tlb = if s.tlb_shootdowns > 0 {
                format!(", {} TLB shootdowns", s.tlb_shootdowns)
            } else {
                String::new()
            };
            format!("{} {} calls{}{tlb}", s.name(), s.calls, s.syscall_note())
        })
        .collect();
    Some(format!(
        "IPIS       {all} cross-CPU calls queued to the server's CPU while it ran: {}",
        named.join("; ")
    ))
}

/// The device IRQs that took most time from the server's threads (none
/// printed under 1 ms in all: a few handlers are every run's noise).
fn device_irq_line(irqs: &[crate::timeline::irqs::DeviceIrq]) -> Option<String> {
    let all: u64 = irqs.iter().map(|i| i.total_ns()).sum();
    if all < 1_000_000 {
        return None;
    }
    let named: Vec<String> = irqs
        .iter()
        .take(2)
        .map(|i| {
            format!(
                "{} {} handlers {:.2}ms",
                i.label(),
                i.count + i.wait_count,
                i.total_ns() as f64 / 1e6
            )
        })
        .collect();
    Some(format!(
        "DEVICE IRQS {:.2}ms of the server's CPU time: {}",
        all as f64 / 1e6,
        named.join("; ")
    ))
}

fn upstream_line(u: &crate::analysis::upstreams::UpstreamSummary) -> String {
    let ms = |ns: u64| format!("{:.2}ms", ns as f64 / 1e6);
    let inside = if u.in_episodes > 0 {
        format!(
            "; {} in flight during episodes, the longest {}",
            u.in_episodes,
            ms(u.in_episodes_max_ns)
        )
    } else {
        String::new()
    };
    let outside = u.outside_p99_ns.map_or(String::new(), |p| {
        format!(" (p99 outside the episodes {})", ms(p))
    });
    format!(
        "UPSTREAM   {}: {} exchanges, replies p50 {} p99 {} max {}{inside}{outside}",
        u.peer,
        u.exchanges,
        ms(u.p50_ns),
        ms(u.p99_ns),
        ms(u.max_ns)
    )
}

/// The parts of [`account_line`], in its order.
const ACCOUNT_PARTS: [&str; 21] = [
    "user code",
    "syscalls",
    "fault handling",
    "migration",
    "runnable",
    "CPU wake-up",
    "lock",
    "kernel lock spin",
    "io",
    "major faults",
    "sleep/other waits",
    "runtime pause",
    "memory stall",
    "upstream",
    "idle",
    "IRQs",
    "steal",
    "timer silence (host)",
    "lock holder stalled (host)",
    "kernel sleep outside syscalls, no major fault (unnamed)",
    "unexplained",
];

/// The episodes' accounts summed: each category's share of episode time,
/// largest first.
fn account_line(r: &Report) -> String {
    let mut sum = [0u64; ACCOUNT_PARTS.len()];
    let mut total = 0u64;
    for e in &r.episodes {
        let a = &e.account;
        total += a.duration_ns;
        let parts: [u64; ACCOUNT_PARTS.len()] = [
            a.on_cpu_user_ns,
            a.syscall_ns,
            a.fault_ns.saturating_sub(a.fault_major_ns),
            a.migration_ns,
            a.runnable_ns.saturating_sub(a.runnable_idle_ns),
            a.runnable_idle_ns,
            a.blocked_lock_ns,
            a.lock_spin_ns,
            a.blocked_io_ns,
            a.blocked_fault_ns + a.fault_major_ns,
            a.blocked_sleep_ns + a.blocked_other_ns,
            a.runtime_pause_ns,
            a.memory_stall_ns,
            a.upstream_ns,
            a.idle_ns,
            a.hardirq_ns + a.softirq_ns,
            a.steal_ns
                .saturating_sub(a.timer_silence_ns + a.lock_holder_steal_ns),
            a.timer_silence_ns,
            a.lock_holder_steal_ns,
            a.unnamed_kernel_sleep_ns,
            a.unexplained_ns.saturating_sub(a.unnamed_kernel_sleep_ns),
        ];
        for (s, v) in sum.iter_mut().zip(parts) {
            *s += v;
        }
    }
    let mut parts: Vec<(u64, &str)> = sum
        .into_iter()
        .zip(ACCOUNT_PARTS)
        .filter(|(v, _)| *v > 0)
        .collect();
    parts.sort_by_key(|p| std::cmp::Reverse(p.0));
    parts
        .iter()
        .map(|(v, n)| format!("{n} {:.0}%", *v as f64 / total.max(1) as f64 * 100.0))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What the latency table measured: only open-loop load times requests from
/// their intended send time; closed-loop load from the actual send, an
/// imported log as its tool did, and server-side latency from the
/// request's arrival in the socket (or its first read) to the response.
fn latency_title(source: &str) -> String {
    if source.starts_with("open-loop") {
        "LATENCY from the intended send time".into()
    } else {
        format!("LATENCY ({source})")
    }
}

#[cfg(test)]
mod tests {
    use super::{latency_title, nonzero_losses};

    #[test]
    fn losses_are_listed_by_kind_only_where_nonzero() {
        let l = crate::runfile::Losses {
            ring_reserve_failed: 3,
            stack_collisions: 1,
            ..Default::default()
        };
        assert_eq!(
            nonzero_losses(&l),
            "ring_reserve_failed 3, stack_collisions 1"
        );
    }

    #[test]
    fn only_open_loop_latency_is_from_the_intended_send_time() {
        assert_eq!(
            latency_title("open-loop load tcp://127.0.0.1:1"),
            "LATENCY from the intended send time"
        );
        for source in [
            "closed-loop load tcp://127.0.0.1:1",
            "server-side, socket syscalls",
            "imported wrk2.hlog",
        ] {
            assert_eq!(latency_title(source), format!("LATENCY ({source})"));
        }
    }
}
