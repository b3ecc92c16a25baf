//! Group-sequential designs for experiments that add repetitions until
//! they can answer (`--reps auto`), and the power of a design.
//!
//! Looking at the data after every few repetitions and stopping as soon as
//! a test is significant inflates the false-positive rate far above α if
//! each look uses α. A group-sequential design spends α over the looks
//! instead: the Lan–DeMets spending function of O'Brien–Fleming type,
//! α/2 per side spent as 2 − 2Φ(z₁₋α/₄ / √t) by information fraction
//! t = n / n_max, gives
//! each look a boundary such that the chance of crossing any of them under
//! the null is α. Early looks get very strict boundaries (the first few
//! repetitions can only stop an experiment on an overwhelming effect), the
//! last one is close to the fixed-sample α.
//!
//! Boundaries are found by simulating the canonical joint distribution of
//! the looks' z statistics (a Brownian motion observed at the information
//! fractions: independent increments) with a fixed seed, so they are exact
//! to simulation error and reproduce. Hand-written: no crate for group-
//! sequential designs exists; the method is the textbook one (Jennison &
//! Turnbull, ch. 7) with simulation in place of numerical integration.
//!
//! The same simulated paths give the design's power: the drift θ (in units
//! of the per-look standard error at n_max) at which the chance of crossing
//! some boundary is the target power; the smallest detectable change is
//! θ · σ · √(2 / n_max) / √ARE, with σ the relative spread of one
//! repetition's value and ARE = 3/π the U test's efficiency against the
//! t test under normality.

use serde::Serialize;

use super::{Rng, norm_sf};

/// Paths simulated for boundaries and power.
const PATHS: usize = 200_000;

/// Asymptotic relative efficiency of the U test against the t test
/// (normal data): it needs π/3 times the repetitions for the same power.
const ARE: f64 = 3.0 / std::f64::consts::PI;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Design {
    /// Repetitions per arm at each look (the last is the maximum).
    pub looks: Vec<usize>,
    /// Two-sided α of the whole design.
    pub alpha: f64,
    /// |z| boundary at each look.
    pub z: Vec<f64>,
    /// The same as a two-sided nominal p-value: a test at look k is
    /// significant when p < nominal_p[k].
    pub nominal_p: Vec<f64>,
    /// Power the detectable change is stated at, and the drift (mean of z
    /// at the last look) at which the design reaches it.
    pub power: f64,
    #[serde(skip)]
    drift: f64,
}

/// Power the smallest detectable change is stated at.
pub const POWER: f64 = 0.8;

/// Standard normal quantile (inverse of Φ), by bisection on the survival
/// function: only called a handful of times per experiment.
pub fn norm_quantile(p: f64) -> f64 {
    let (mut lo, mut hi) = (-40.0f64, 40.0f64);
    for _ in 0..200 {
        let mid = (lo + hi) / 2.0;
        if 1.0 - norm_sf(mid) < p {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (lo + hi) / 2.0
}

/// Standard normal draws (Box–Muller).
fn normal(rng: &mut Rng) -> f64 {
    let u1 = rng.unit().max(f64::MIN_POSITIVE);
    let u2 = rng.unit();
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

/// The z statistics of `PATHS` Brownian paths at the information fractions
/// of `looks` (row per path), under the null.
fn paths(looks: &[usize], seed: u64) -> Vec<Vec<f64>> {
    let n_max = *looks.last().unwrap_or(&1) as f64;
    let fractions: Vec<f64> = looks.iter().map(|&n| n as f64 / n_max).collect();
    let mut rng = Rng::new(seed);
    (0..PATHS)
        .map(|_| {
            let (mut w, mut t_prev) = (0.0, 0.0);
            fractions
                .iter()
                .map(|&t| {
                    w += normal(&mut rng) * (t - t_prev).sqrt();
                    t_prev = t;
                    w / t.sqrt()
                })
                .collect()
        })
        .collect()
}

/// O'Brien–Fleming-type spending: two-sided α used up by information
/// fraction t, spent as α/2 on each side with the one-sided function
/// 2 − 2Φ(z₁₋ₐ/₂ / √t) at a = α/2 (gsDesign's `sfLDOF` convention, so
/// the boundaries can be checked against published tables).
fn spent(alpha: f64, t: f64) -> f64 {
    let side = alpha / 2.0;
    2.0 * (2.0 * norm_sf(norm_quantile(1.0 - side / 2.0) / t.sqrt()))
}

impl Design {
    /// A fixed-sample design: one look at `reps`.
    pub fn fixed(reps: usize, alpha: f64) -> Self {
        let z = norm_quantile(1.0 - alpha / 2.0);
        Self {
            looks: vec![reps],
            alpha,
            z: vec![z],
            nominal_p: vec![alpha],
            power: POWER,
            drift: z + norm_quantile(POWER),
        }
    }

    /// Looks at `looks` repetitions per arm (increasing), two-sided α.
    pub fn obrien_fleming(looks: &[usize], alpha: f64) -> Self {
        let n_max = *looks.last().unwrap_or(&1) as f64;
        let sims = paths(looks, 0x5e9_0e27);
        let mut alive: Vec<&Vec<f64>> = sims.iter().collect();
        let mut z = Vec::with_capacity(looks.len());
        let mut spent_before = 0.0;
        for (k, &n) in looks.iter().enumerate() {
            let total = spent(alpha, n as f64 / n_max);
            let budget = ((total - spent_before) * PATHS as f64).floor() as usize;
            let mut values: Vec<f64> = alive.iter().map(|p| p[k].abs()).collect();
            values.sort_by(|a, b| b.total_cmp(a));
            // The boundary lets `budget` of all paths cross here (those not
            // stopped before); with none to spend, nothing crosses.
            let bound = match budget {
                0 => values.first().map_or(f64::INFINITY, |&v| v + 1e-9),
                b => values.get(b).copied().unwrap_or(0.0),
            };
            alive.retain(|p| p[k].abs() <= bound);
            spent_before += budget as f64 / PATHS as f64;
            z.push(bound);
        }
        let mut design = Self {
            looks: looks.to_vec(),
            alpha,
            nominal_p: z.iter().map(|&b| 2.0 * norm_sf(b)).collect(),
            z,
            power: POWER,
            drift: 0.0,
        };
        design.drift = design.drift_for_power(POWER);
        design
    }

    /// Chance of crossing some boundary at drift θ (z at n_max has mean θ).
    fn power_at(&self, theta: f64, sims: &[Vec<f64>]) -> f64 {
        let n_max = *self.looks.last().unwrap_or(&1) as f64;
        let shift: Vec<f64> = self
            .looks
            .iter()
            .map(|&n| theta * (n as f64 / n_max).sqrt())
            .collect();
        let crossed = sims
            .iter()
            .filter(|p| {
                p.iter()
                    .zip(&shift)
                    .zip(&self.z)
                    .any(|((&z, &s), &b)| (z + s).abs() > b)
            })
            .count();
        crossed as f64 / sims.len() as f64
    }

    /// The drift at which the design has `power`.
    fn drift_for_power(&self, power: f64) -> f64 {
        let sims = paths(&self.looks, 0xd21f7);
        let (mut lo, mut hi) = (0.0, 10.0);
        for _ in 0..40 {
            let mid = (lo + hi) / 2.0;
            if self.power_at(mid, &sims) < power {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        (lo + hi) / 2.0
    }

    /// Smallest relative change (percent) this design detects with
    /// [`POWER`], for repetitions whose value has relative spread `cv`
    /// (standard deviation / median).
    pub fn detectable_change_pct(&self, cv: f64) -> f64 {
        let n_max = *self.looks.last().unwrap_or(&1) as f64;
        self.drift * cv * (2.0 / n_max).sqrt() / ARE.sqrt() * 100.0
    }
}

/// Relative spread of repetition values: 1.4826 · MAD / median (the
/// standard deviation for normal data, robust to one wild repetition).
pub fn relative_spread(values: &[f64]) -> f64 {
    let m = super::median(values);
    let deviations: Vec<f64> = values.iter().map(|v| (v - m).abs()).collect();
    1.4826 * super::median(&deviations) / m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantile_inverts_the_normal() {
        assert!((norm_quantile(0.975) - 1.959_964).abs() < 1e-5);
        assert!((norm_quantile(0.8) - 0.841_621).abs() < 1e-5);
    }

    /// Published O'Brien–Fleming-type (Lan–DeMets) boundaries for four
    /// equally spaced looks at two-sided α = 0.05: 4.333, 2.963, 2.359,
    /// 2.014 (Jennison & Turnbull, table 7.6 / R's gsDesign sfLDOF).
    #[test]
    fn boundaries_match_published_values() {
        let d = Design::obrien_fleming(&[5, 10, 15, 20], 0.05);
        for (z, want) in d.z.iter().zip([4.333, 2.963, 2.359, 2.014]) {
            assert!((z - want).abs() < 0.03, "{:?}", d.z);
        }
    }

    /// Under the null the design crosses a boundary in α of simulated
    /// paths (fresh paths, not the ones the boundaries came from).
    #[test]
    fn the_design_spends_alpha_and_no_more() {
        let d = Design::obrien_fleming(&[5, 10, 15, 20], 0.05);
        let sims = paths(&d.looks, 77);
        let rate = d.power_at(0.0, &sims);
        assert!((rate - 0.05).abs() < 0.004, "{rate}");
    }
}
