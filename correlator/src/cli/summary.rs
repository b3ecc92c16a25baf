//! `correlator summary`: the event totals of a run file; `correlator
//! convert`: the run file in another format.

use std::process::ExitCode;

use anyhow::Result;

use super::args::{ConvertArgs, SummaryArgs};
use crate::{runfile::RunFile, summary};

pub fn run(a: &SummaryArgs) -> Result<ExitCode> {
    let run = RunFile::load(&a.run_file)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&summary::json(&run))?);
    } else {
        print!("{}", summary::text(&run));
    }
    Ok(ExitCode::SUCCESS)
}

/// `correlator convert`: the same run in the format OUT's name asks for.
pub fn convert(a: &ConvertArgs) -> Result<ExitCode> {
    RunFile::load(&a.run_file)?.save(&a.out)?;
    Ok(ExitCode::SUCCESS)
}
