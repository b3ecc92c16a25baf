//! Confirmations in the report model (`confirmation[]`, docs/report.md):
//! each cause's experiment as data and, after `run --confirm`, its
//! outcome. Planned and run by [`crate::confirm`].

use serde::{Deserialize, Serialize};

use crate::{analysis::causes::CauseKind, latency::fmt_ns};

/// How a cause could be confirmed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Plan {
    /// A knob that removes the cause for the treatment arm.
    Knob {
        knob: String,
        /// None: safe to run unattended; Some: what must be allowed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        needs: Option<String>,
    },
    /// No system knob removes it: the code has to change.
    NotConfirmable { reason: String },
}

/// One planned experiment: the cause (or a candidate the user offered),
/// its knob, and what should happen.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Planned {
    /// The report's cause this tests; None for a user's `--candidate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<CauseKind>,
    pub plan: Plan,
    /// The percentile that should move (the report's) and its value now.
    pub percentile: f64,
    pub now_ns: u64,
    /// Its predicted value without the cause (from the account), and the
    /// change in percent (negative: an improvement). None for a
    /// candidate knob the account cannot predict (anything but stopping a
    /// process): the experiment decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_ns: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_change_pct: Option<f64>,
}

impl Planned {
    /// The cause's name, or "candidate KNOB".
    pub fn name(&self) -> String {
        match (&self.cause, &self.plan) {
            (Some(c), _) => c.name().to_string(),
            (None, Plan::Knob { knob, .. }) => format!("candidate {knob}"),
            (None, Plan::NotConfirmable { .. }) => "candidate".into(),
        }
    }

    /// "−64% (1.33ms → 477.7µs)", or "not predicted".
    pub fn prediction(&self) -> String {
        match (self.expected_change_pct, self.expected_ns) {
            (Some(pct), Some(ns)) => format!(
                "{pct:+.0}% of p{} ({} → {})",
                self.percentile,
                fmt_ns(self.now_ns),
                fmt_ns(ns)
            ),
            _ => format!(
                "not predicted (p{} now {})",
                self.percentile,
                fmt_ns(self.now_ns)
            ),
        }
    }
}

/// The outcome of one confirming experiment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The percentile improved significantly and meaningfully with the
    /// cause removed.
    Confirmed,
    /// Removing the cause did not give even half the predicted change (the
    /// CI rules it out), or made things worse.
    Refuted,
    /// Neither: the experiment could not tell.
    Inconclusive,
    /// Not run: the knob needs a permission the user did not give.
    NotAllowed,
    /// Not run: no system knob removes this cause.
    NotConfirmable,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Confirmation {
    #[serde(flatten)]
    pub planned: Planned,
    pub outcome: Outcome,
    /// The percentile's measured change (median of the B repetitions
    /// against the A ones) and its 95% CI, percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change_pct: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ci_pct: Option<(f64, f64)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median_a_ns: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median_b_ns: Option<u64>,
    /// Repetitions per arm the experiment ran.
    #[serde(default)]
    pub reps_per_arm: usize,
    pub verdict: String,
}

impl Confirmation {
    /// The headline of a confirmed cause, e.g. "confirmed: preemption —
    /// stop=12 cut p99 from 4.7 ms to 0.3 ms (−94%, CI −96..−90%)".
    pub fn headline(&self) -> Option<String> {
        let c = self;
        if c.outcome != Outcome::Confirmed {
            return None;
        }
        let (a, b) = (c.median_a_ns?, c.median_b_ns?);
        let (lo, hi) = c.ci_pct?;
        Some(format!(
            "confirmed: {} — {} cut p{} from {} to {} ({:+.0}%, CI {:+.0}..{:+.0}%); the account predicted {}",
            c.planned.name(),
            match &c.planned.plan {
                Plan::Knob { knob, .. } => knob.as_str(),
                Plan::NotConfirmable { .. } => "?",
            },
            c.planned.percentile,
            fmt_ns(a),
            fmt_ns(b),
            c.change_pct.unwrap_or(0.0),
            lo,
            hi,
            c.planned
                .expected_change_pct
                .map_or("nothing (a candidate knob)".into(), |p| format!("{p:+.0}%"))
        ))
    }
}
