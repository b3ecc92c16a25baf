//! Helper targets for tests and benchmarks, run as `correlator-testkit`
//! subcommands ([`cli`]): the workload that does known work and times
//! itself, the stalling test server, the code-path server, synthetic run
//! files, the recorder's memory check, the evaluation.
//! Compiled only for unit tests and with the `testkit` feature, so the
//! product binary holds none of it. No product module imports this one
//! (`cargo xtask layers` checks it); only unit-test modules (`tests.rs`),
//! the `correlator-testkit` binary and the integration tests do.

pub mod cli;
pub mod corpus;
pub mod eval;
pub mod known_syscalls;
pub mod memcheck;
pub mod pathserver;
pub mod proxy;
pub mod symbench;
pub mod synthetic;
pub mod testserver;
pub mod timelines;
pub mod watchbench;
pub mod workload;
