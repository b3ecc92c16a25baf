//! `correlator demo`: the scenario suite, injected vs detected.

use std::process::ExitCode;

use anyhow::Result;

use super::args::DemoArgs;
use crate::demo::{Scenario, suite};

pub fn run(a: &DemoArgs) -> Result<ExitCode> {
    let (scenario, out, json) = (a.scenario.as_str(), &a.out, a.json.as_deref());
    let scenarios = if scenario == "all" {
        Scenario::ALL.to_vec()
    } else {
        vec![
            Scenario::ALL
                .into_iter()
                .find(|s| s.name() == scenario)
                .ok_or_else(|| {
                    let names: Vec<&str> = Scenario::ALL.iter().map(|s| s.name()).collect();
                    anyhow::anyhow!(
                        "unknown scenario {scenario:?}; one of: all, {}",
                        names.join(", ")
                    )
                })?,
        ]
    };
    let online = crate::cpu::online_cpu_count().unwrap_or(1);
    if online < 2 {
        anyhow::bail!(
            "the demo needs 2 CPUs (server on CPU 1, load on CPU 0); this machine has {online}"
        );
    }
    let opts = suite::SuiteOptions {
        scenarios,
        out_dir: out.clone(),
        duration: a.duration,
        rate: a.rate,
    };
    println!("{}", suite::header());
    let outcomes = suite::run_suite(&opts, |o| {
        println!("{}", suite::row(o));
        if let Some(note) = suite::host_note(o) {
            println!("{note}");
        }
    })?;
    let bad = outcomes.iter().filter(|o| !o.correct).count();
    if let Some(path) = json {
        std::fs::write(path, serde_json::to_string_pretty(&outcomes)?)?;
    }
    println!(
        "\n{} of {} scenarios attributed correctly; HTML reports in {}/ (e.g. {})",
        outcomes.len() - bad,
        outcomes.len(),
        out.display(),
        outcomes
            .first()
            .map(|o| o.html.display().to_string())
            .unwrap_or_default()
    );
    Ok(if bad == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
