//! `correlator-testkit`: the helper programs of the tests, benchmarks and
//! evaluation (see `correlator::harness::cli`). Built only with the
//! `testkit` feature; not part of the product.

use std::process::ExitCode;

use clap::Parser as _;
use correlator::harness::cli::{self, TestkitCli};

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    match cli::execute(TestkitCli::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("correlator-testkit: {e:#}");
            ExitCode::FAILURE
        }
    }
}
