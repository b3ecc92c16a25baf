//! Memory stalls named, against a helper that times itself: the
//! pathserver's trigger thread (`path-trigger`) maps 256 MiB with
//! MAP_POPULATE and unmaps them at random times (mean 300 ms), holding the
//! process's mmap_lock; the serving thread's next request maps and unmaps
//! one page and waits for the lock meanwhile (`map_page` in its event
//! log). `correlator run` must name a memory stall waiting for the
//! mmap_lock (not a syscall, not a major fault) and give its time per
//! episode within 5% + 1 ms of the helper's own clocks. Needs root + BPF
//! (fails, not skips, with CI=true).

use serde_json::Value;

use crate::util::{helper_server, run_report, scratch, top_server_cause};

live_test! {
    fn an_mmap_lock_wait_is_named_with_its_time() {
        let dir = scratch("memory-mmap-lock");
        let events = dir.join("events.jsonl");
        let (server, addr) = helper_server(
            "pathserver",
            &["--path", "mmap-lock", "--every", "300ms", "--mib", "256",
              "--events", events.to_str().expect("path")],
        );
        server.pin_all("1");
        let report = run_report(server.0.id(), &format!("tcp://{addr}"), 2000, "10s", &dir, &[]);
        drop(server);
        let waits: Vec<(u64, u64)> = std::fs::read_to_string(&events)
            .expect("events")
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).expect("event json"))
            .filter(|v| v["function"] == "map_page")
            .map(|v| (v["start_ns"].as_u64().expect("start"), v["end_ns"].as_u64().expect("end")))
            .collect();
        assert!(waits.len() >= 10, "{} waits in 10 s", waits.len());

        let c = &report["classification"];
        let top = top_server_cause(c);
        assert_eq!(top["cause"], "memory_stall", "{c:#}");
        let evidence = top["evidence"].as_str().expect("evidence");
        assert!(evidence.contains("mmap_lock"), "the mmap_lock is not named: {evidence}");

        let mut checked = 0;
        for e in report["episodes"].as_array().expect("episodes") {
            let (a, b) = (e["start_ns"].as_u64().expect("start"), e["end_ns"].as_u64().expect("end"));
            let truth: u64 = waits
                .iter()
                .map(|&(s, t)| t.min(b).saturating_sub(s.max(a)))
                .sum();
            if truth < 2_000_000 {
                continue;
            }
            let ours = e["account"]["memory_stall_ns"].as_u64().expect("memory_stall_ns");
            let bound = 0.05 * truth as f64 + 1e6;
            assert!(
                (ours as f64 - truth as f64).abs() <= bound,
                "episode at {a}: memory stall {:.2} ms by the report, the helper waited {:.2} ms",
                ours as f64 / 1e6,
                truth as f64 / 1e6
            );
            checked += 1;
        }
        eprintln!("memory stall time checked in {checked} episodes ({} waits)", waits.len());
        assert!(checked >= 8, "only {checked} episodes held a wait of 2 ms or more");
    }
}
