//! `correlator demo`: a demo server with switchable latency causes, a
//! neighbour that preempts it, and the scenario suite that checks
//! correlator names each injected cause.

pub mod hog;
pub mod server;

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
}
