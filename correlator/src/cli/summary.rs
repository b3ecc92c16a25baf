//! `correlator summary`: the event totals of a run file.

use std::process::ExitCode;

use anyhow::Result;

use super::args::SummaryArgs;
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
