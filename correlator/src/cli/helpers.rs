//! Hidden subcommands that belong to the demo: its server and its CPU hog,
//! which `correlator demo` starts as processes of their own. The test and
//! benchmark helpers are not here: they are `correlator-testkit`.

use std::process::ExitCode;

use anyhow::Result;

use crate::demo::{hog::HogArgs, server::DemoServerArgs};

pub fn demo_server(a: &DemoServerArgs) -> Result<ExitCode> {
    crate::demo::server::run(a)?;
    Ok(ExitCode::SUCCESS)
}

pub fn demo_hog(a: &HogArgs) -> Result<ExitCode> {
    crate::demo::hog::run(a)?;
    Ok(ExitCode::SUCCESS)
}
