//! `correlator demo`: a demo server with switchable latency causes, a
//! neighbour that preempts it, and the scenario suite that checks
//! correlator names each injected cause.

use crate::analysis::CauseKind;

pub mod hog;
pub mod server;
pub mod suite;

/// The injected causes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    /// A clean baseline: no cause injected.
    None,
    /// A GC-like sweep of fresh memory on the serving thread, every period.
    Periodic,
    /// A CPU-bound neighbour pinned to the server's CPU, in random bursts.
    Preemption,
    /// A fixed service cost per request: queueing as the rate nears capacity.
    Load,
    /// At random times the working set is dropped and refaulted on the request path.
    PageFaults,
    /// At random times a mapped file is evicted and read back on the request path.
    MajorFaults,
    /// At random times the serving thread hops between CPUs.
    Migrations,
    /// At random times another thread holds the lock the request path needs.
    Blocking,
    /// At random times a burst of loopback traffic whose receive work
    /// (NET_RX softirq) is steered to the server's CPU.
    Softirq,
    /// At random times the request path writes more page cache than its
    /// memory cgroup's limit leaves room for (the suite puts the server
    /// in a cgroup limited below it): the cgroup reclaims, waiting for
    /// the writeback of the server's own dirty pages.
    MemoryLimit,
}

impl Scenario {
    /// Every scenario, in the order the suite runs them (`--scenario all`).
    pub const ALL: [Scenario; 10] = [
        Scenario::None,
        Scenario::Periodic,
        Scenario::Load,
        Scenario::PageFaults,
        Scenario::MajorFaults,
        Scenario::Preemption,
        Scenario::Migrations,
        Scenario::Blocking,
        Scenario::Softirq,
        Scenario::MemoryLimit,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scenario::None => "none",
            Scenario::Periodic => "periodic",
            Scenario::Preemption => "preemption",
            Scenario::Load => "load",
            Scenario::PageFaults => "page-faults",
            Scenario::MajorFaults => "major-faults",
            Scenario::Migrations => "migrations",
            Scenario::Blocking => "blocking",
            Scenario::Softirq => "softirq",
            Scenario::MemoryLimit => "memory-limit",
        }
    }

    /// The signature and top cause a correct analysis names.
    pub fn expected(self) -> (&'static str, Option<CauseKind>) {
        match self {
            Scenario::None => ("none", None),
            Scenario::Periodic => ("periodic", Some(CauseKind::PageFaults)),
            Scenario::Load => ("load-correlated", Some(CauseKind::Queueing)),
            Scenario::PageFaults => ("sporadic", Some(CauseKind::PageFaults)),
            Scenario::MajorFaults => ("sporadic", Some(CauseKind::MajorFaults)),
            Scenario::Preemption => ("sporadic", Some(CauseKind::Preemption)),
            Scenario::Migrations => ("sporadic", Some(CauseKind::Migrations)),
            Scenario::Blocking => ("sporadic", Some(CauseKind::Blocking)),
            Scenario::Softirq => ("sporadic", Some(CauseKind::Softirq)),
            Scenario::MemoryLimit => ("sporadic", Some(CauseKind::MemoryStall)),
        }
    }
}
