//! correlator: why a server's latency tail spikes.
//!
//! Data flows one way: kernel ([`probes`]) → [`timeline`] → latency →
//! analysis → report.
//!
//! Layers, lowest first. A module imports only from its own layer or the
//! ones below it; `cargo xtask layers` reads this list and checks every
//! `crate::` path in `src/` against it (it runs in `cargo xtask test`):
//!
//! - utilities: clock, columnar, cpu, memory, stats, target
//! - models: timeline, latency
//! - sources: probes, loadgen, symbols
//! - run file: runfile, record
//! - analysis: analysis
//! - views: report, summary, doctor, experiment, run, confirm, demo, watch
//! - cli: cli
//!
//! Two more rules: `stats` imports nothing from the crate (pure functions
//! with scipy-checked tests), and `harness` (helper targets for tests and
//! benchmarks, compiled only for tests and with the `testkit` feature,
//! run as the `correlator-testkit` binary) may import any layer but `cli`,
//! and only unit-test modules (`tests.rs`) import it.

pub mod analysis;
pub mod cli;
pub mod clock;
pub mod columnar;
pub mod confirm;
pub mod cpu;
pub mod demo;
pub mod doctor;
pub mod experiment;
#[cfg(any(test, feature = "testkit"))]
pub mod harness;
pub mod latency;
pub mod loadgen;
pub mod memory;
pub mod probes;
pub mod record;
pub mod report;
pub mod run;
pub mod runfile;
pub mod stats;
pub mod summary;
pub mod symbols;
pub mod target;
pub mod timeline;
pub mod watch;
