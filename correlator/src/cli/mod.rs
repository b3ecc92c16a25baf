//! The command line: [`args`] holds the clap types, and each subcommand
//! lives in its own file with a `run(&Args) -> Result<ExitCode>`; this
//! module only dispatches.

pub mod args;
mod compare;
mod compare_inputs;
mod demo;
mod doctor;
mod experiment;
mod helpers;
mod latency;
mod load;
mod merge;
mod record;
mod report;
mod run;
mod summary;
mod watch;

use std::process::ExitCode;

use anyhow::Result;

pub use args::{Cli, Command};

/// Runs one parsed command line.
pub fn execute(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Record(a) => record::run(&a),
        Command::Summary(a) => summary::run(&a),
        Command::Convert(a) => summary::convert(&a),
        Command::Load(a) => load::run(&a),
        Command::Run(a) => run::run(&a),
        Command::Demo(a) => demo::run(&a),
        Command::Experiment(a) => experiment::run(&a),
        Command::Compare(a) => compare::run(&a),
        Command::Report(a) => report::run(&a),
        Command::Merge(a) => merge::run(&a),
        Command::Latency(a) => latency::run(&a),
        Command::Watch(a) => watch::run(&a),
        Command::Doctor => doctor::run(),
        Command::DemoServer(a) => helpers::demo_server(&a),
        Command::DemoHog(a) => helpers::demo_hog(&a),
    }
}
