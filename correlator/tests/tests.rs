//! correlator's integration tests, one binary (one link of the crate):
//! command-line errors, compare, the load generator against real servers,
//! and the live suites that need root and BPF (probes against the kernel's
//! own counters, syscalls and wait sites, the wait-for chain, passive latency, run, code
//! paths, demo, experiments). Live tests fail rather than skip when `CI=true`.

/// A test that needs root and BPF: skipped, with the reason printed,
/// outside CI; a failure when `CI=true`. It measures a server, not the
/// host's steal bursts: it starts when the host is quiet and is measured
/// again when the host disturbed it, whatever its verdict
/// (`host::measure`). `once fn` is for a test that needs one attempt
/// whatever the host did: its command re-measures disturbed runs itself
/// (the demo), or the host's stalls are what it measures.
///
/// `full fn` / `full once fn` put a test in the full tier (`cargo xtask
/// test --full`, README): it is `#[ignore]`d in the fast tier, which
/// covers the same kind of live situation with another test.
macro_rules! live_test {
    ($(#[$meta:meta])* fn $name:ident() $body:block) => {
        live_test!(@attempts measure, $(#[$meta])* $name, $body);
    };
    ($(#[$meta:meta])* once fn $name:ident() $body:block) => {
        live_test!(@attempts measure_once, $(#[$meta])* $name, $body);
    };
    ($(#[$meta:meta])* full fn $name:ident() $body:block) => {
        live_test!(@attempts measure, $(#[$meta])* #[ignore = "full tier: cargo xtask test --full"] $name, $body);
    };
    ($(#[$meta:meta])* full once fn $name:ident() $body:block) => {
        live_test!(@attempts measure_once, $(#[$meta])* #[ignore = "full tier: cargo xtask test --full"] $name, $body);
    };
    (@attempts $how:ident, $(#[$meta:meta])* $name:ident, $body:block) => {
        $(#[$meta])*
        #[test]
        fn $name() {
            if !$crate::util::live_or_skip(stringify!($name)) {
                return;
            }
            $crate::host::$how(stringify!($name), || $body);
        }
    };
}

mod host;
mod util;
mod watchdog;

mod chain_live;
mod cli_errors;
mod compare_cli;
mod confirm_live;
mod demo_live;
mod experiment_live;
mod families_live;
mod ipi_live;
mod loadgen;
mod memory_live;
mod merge_cli;
mod passive_live;
mod perfetto_live;
mod pprof_live;
mod probes_live;
mod run_live;
mod runtime_live;
mod stacks_live;
mod syscalls_live;
mod upstream_live;
mod watch_live;
