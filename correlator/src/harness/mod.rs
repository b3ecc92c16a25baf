//! Helper targets for tests and benchmarks, run through hidden
//! subcommands: the workload that does known work and times itself, the
//! stalling test server, the code-path server, synthetic run files, the
//! recorder's memory check.
//! No product module imports this one (`cargo xtask layers` checks it);
//! only the command line's dispatch (`cli/helpers.rs`), unit-test modules
//! (`tests.rs`) and the integration tests do.

pub mod eval;
pub mod known_syscalls;
pub mod memcheck;
pub mod pathserver;
pub mod symbench;
pub mod synthetic;
pub mod testserver;
pub mod timelines;
pub mod watchbench;
pub mod workload;
