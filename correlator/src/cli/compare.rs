//! `correlator compare`: two sample sets, Mann-Whitney U, bootstrap CI, verdict.

use std::process::ExitCode;

use anyhow::Result;

use super::{args::CompareArgs, compare_inputs};
use crate::stats;

pub fn run(a: &CompareArgs) -> Result<ExitCode> {
    let (sa, sb) = (
        compare_inputs::read(&a.a, a.metric)?,
        compare_inputs::read(&a.b, a.metric)?,
    );
    let mut c = stats::compare(&sa.values, &sb.values, a.alpha, a.min_change, a.seed);
    c.notes
        .insert(0, format!("A: {}; B: {}", sa.source, sb.source));
    if a.json {
        println!("{}", serde_json::to_string_pretty(&c)?);
    } else {
        println!("{:<4} {:>5} {:>14}", "", "n", "median");
        println!("{:<4} {:>5} {:>14.6}", "A", c.n_a, c.median_a);
        println!("{:<4} {:>5} {:>14.6}", "B", c.n_b, c.median_b);
        println!(
            "Mann-Whitney U = {}, two-sided p = {} ({:?}); change of the median {:+.1}% (bootstrap 95% CI {:+.1}%..{:+.1}%)",
            c.u,
            fmt_p(c.p_value),
            c.method,
            c.change_pct,
            c.ci_low_pct,
            c.ci_high_pct
        );
        println!(
            "verdict (α = {}, minimum change {}%): {}",
            c.alpha, c.min_change_pct, c.verdict
        );
        for n in &c.notes {
            println!("  note: {n}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A p-value readable at any size: fixed digits down to 1e-4, then
/// scientific (a tiny p printed as 0.000000 reads as impossible).
fn fmt_p(p: f64) -> String {
    if p >= 1e-4 {
        format!("{p:.6}")
    } else {
        format!("{p:.2e}")
    }
}
