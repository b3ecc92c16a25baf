//! correlator: why a server's latency tail spikes.
//!
//! Data flows one way: kernel ([`probes`]) → [`timeline`] → latency →
//! analysis → report.

pub mod analysis;
pub mod cli;
pub mod clock;
pub mod cpu;
pub mod demo;
pub mod doctor;
pub mod experiment;
pub mod known_syscalls;
pub mod latency;
pub mod loadgen;
pub mod memory;
pub mod probes;
pub mod record;
pub mod report;
pub mod run;
pub mod stats;
pub mod summary;
pub mod target;
pub mod timeline;
pub mod workload;
