//! `correlator latency`: the distribution of latency captured elsewhere.

use std::process::ExitCode;

use anyhow::Result;

use super::args::LatencyArgs;
use crate::latency::{import, table};

pub fn run(args: &LatencyArgs) -> Result<ExitCode> {
    let format = match args
        .format
        .or_else(|| import::Format::from_path(&args.file))
    {
        Some(f) => f,
        None => anyhow::bail!(
            "{}: cannot tell the format from the name; pass --format csv|jsonl|hlog",
            args.file.display()
        ),
    };
    let imported = import::import(&import::ImportOptions {
        path: args.file.clone(),
        format,
        clock: args.clock,
        expected_interval_ns: args
            .expected_interval
            .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
        tag: args.tag.clone(),
        hlog_unit: args.hlog_unit,
    })?;
    let observed = imported.recorder.phases[0].corrected.summary();
    let modelled = imported.modelled.as_ref().map(|m| m.summary());
    if args.json {
        let v = serde_json::json!({
            "schema": "correlator.latency/v1",
            "file": args.file,
            "format": format,
            "requests": imported.requests,
            "errors": imported.errors,
            "observed": observed,
            "modelled": modelled,
            "clock_offset": imported.clock_offset,
            "notes": imported.notes,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "{}: {} requests, {} errors",
            args.file.display(),
            imported.requests,
            imported.errors
        );
        print!("{}", table("observed latency", &observed));
        if let Some(m) = &modelled {
            print!(
                "{}",
                table("closed-loop corrected (MODEL, not observations)", m)
            );
        }
        for n in &imported.notes {
            println!("  note: {n}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
