//! The `correlator` binary: parse the command line, run it, and turn any
//! error into one line on stderr and a non-zero exit.

use std::process::ExitCode;

use clap::Parser as _;
use correlator::cli::{self, Cli};

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    match cli::execute(Cli::parse()) {
        Ok(code) => code,
        Err(e) => {
            // One line: what is wrong and what to do.
            eprintln!("correlator: {e:#}");
            ExitCode::FAILURE
        }
    }
}
