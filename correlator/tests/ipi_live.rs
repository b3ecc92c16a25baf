//! Cross-CPU calls named by their sender: the pathserver's trigger thread
//! (`path-trigger`, pinned to CPU 0) maps, writes and unmaps one page in a
//! loop for 4 ms at random times (mean 300 ms) while the serving thread
//! (CPU 1) computes for about 5 ms: each unmap sends a TLB shootdown to
//! CPU 1. bpftrace, attached first, counts the shootdowns the trigger
//! queued to CPU 1 (`csd:csd_queue_cpu` with `flush_tlb_func`): correlator
//! must name the trigger thread as the top sender, with its calls TLB
//! shootdowns, and count no more of them than bpftrace and at least 90%
//! (it counts only those that found a serving thread on the CPU; the
//! kernel sends a shootdown only to CPUs where the process's memory map
//! is live, which here is the serving thread's; 2148 of 2148, 2260 of
//! 2261, 2458 of 2458 in three runs). Needs root + BPF (fails, not skips,
//! with CI=true).

use std::process::Command;

use crate::util::{Bpftrace, helper_server, json_export, run_report, scratch};

const TLB_BT: &str = r#"
tracepoint:csd:csd_queue_cpu /tid == $1 && args->cpu == 1 && ((uint64)args->func & 0xffffffff) == $2/ { @tlb = count(); }
"#;

/// The tid of `pid`'s thread named `comm`.
fn thread_named(pid: u32, comm: &str) -> u32 {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("task dir")
        .flatten()
        .find_map(|t| {
            let name = std::fs::read_to_string(t.path().join("comm")).ok()?;
            (name.trim_end() == comm).then(|| t.file_name().to_str()?.parse().ok())?
        })
        .unwrap_or_else(|| panic!("no thread {comm} in {pid}"))
}

live_test! {
    fn tlb_shootdowns_are_named_with_the_thread_that_sent_them() {
        let dir = scratch("ipi-tlb");
        let events = dir.join("events.jsonl");
        let (server, addr) = helper_server(
            "pathserver",
            &["--path", "tlb-storm", "--every", "300ms", "--hold", "4ms",
              "--events", events.to_str().expect("path")],
        );
        server.pin_all("1");
        let trigger = thread_named(server.0.id(), "path-trigger");
        let pinned = Command::new("taskset")
            .args(["-pc", "0", &trigger.to_string()])
            .output()
            .expect("taskset");
        assert!(pinned.status.success(), "cannot pin the trigger thread");
        // flush_tlb_func's address, from /proc/kallsyms here too (its low
        // 32 bits: bpftrace takes positional numbers as signed 64-bit).
        let flush = std::fs::read_to_string("/proc/kallsyms")
            .expect("kallsyms")
            .lines()
            .find_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() == 3 && f[2] == "flush_tlb_func").then(|| u64::from_str_radix(f[0], 16).ok())?
            })
            .expect("flush_tlb_func in /proc/kallsyms");
        let bt = Bpftrace::start(
            TLB_BT,
            &[trigger.to_string(), (flush & 0xffff_ffff).to_string()],
            &dir,
        );
        let report = run_report(server.0.id(), &format!("tcp://{addr}"), 1000, "10s", &dir, &[]);
        let counted = bt.stop();
        drop(server);
        let truth = counted.get("tlb").copied().unwrap_or(0);

        let run = std::fs::read_to_string(json_export(&dir.join("report.run"))).expect("export");
        let run: serde_json::Value = serde_json::from_str(&run).expect("export json");
        let senders = run["ipi_senders"].as_array().expect("ipi_senders in the run");
        let top = &senders[0];
        eprintln!("bpftrace: {truth} TLB shootdowns to CPU 1; correlator's top sender: {top}");
        assert!(truth >= 1000, "only {truth} TLB shootdowns: the storm did not reach CPU 1");
        assert_eq!(top["tid"].as_u64(), Some(u64::from(trigger)), "{senders:?}");
        assert_eq!(top["comm"], "path-trigger");
        let calls = top["calls"].as_u64().expect("calls");
        let tlb = top["tlb_shootdowns"].as_u64().expect("tlb_shootdowns");
        assert!(tlb * 100 >= calls * 99, "{tlb} of {calls} calls named TLB shootdowns");
        assert!(
            tlb <= truth && tlb * 10 >= truth * 9,
            "correlator counted {tlb} shootdowns while the server ran, bpftrace {truth} in all"
        );
        // Sent from munmap, the only syscall of the trigger's loop that
        // flushes other CPUs' TLBs (the helper maps, writes, unmaps).
        assert_eq!(top["syscall"], "munmap", "{top}");
        let in_syscall = top["in_syscall"].as_u64().expect("in_syscall");
        assert!(
            in_syscall * 100 >= calls * 99,
            "{in_syscall} of {calls} calls made in munmap"
        );
        // The report carries them too.
        assert_eq!(report["ipi_senders"][0]["comm"], "path-trigger");
    }
}
