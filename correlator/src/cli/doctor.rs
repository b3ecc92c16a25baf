//! `correlator doctor`: can this machine record?

use std::process::ExitCode;

use anyhow::Result;

use crate::doctor;

pub fn run() -> Result<ExitCode> {
    let checks = doctor::run_checks();
    Ok(if doctor::print(&checks) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
