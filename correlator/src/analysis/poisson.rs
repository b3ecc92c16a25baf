//! Poisson upper tail, for "is this many events in the episodes more than
//! the baseline rate explains?". Nothing else here computes p-values; the
//! experiment statistics live in their own module.

/// P(X ≥ k) for X ~ Poisson(λ): the regularized lower incomplete gamma
/// function P(k, λ) (Numerical Recipes' series / continued fraction).
pub fn sf_at_least(k: u64, lambda: f64) -> f64 {
    if k == 0 {
        return 1.0;
    }
    if lambda <= 0.0 {
        return 0.0;
    }
    gamma_p(k as f64, lambda).clamp(0.0, 1.0)
}

fn ln_gamma(x: f64) -> f64 {
    // Lanczos approximation (g = 7, n = 9), accurate to ~1e-15.
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        return (std::f64::consts::PI / (std::f64::consts::PI * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let t = x + 7.5;
    let sum = C[1..]
        .iter()
        .enumerate()
        .fold(C[0], |acc, (i, c)| acc + c / (x + i as f64 + 1.0));
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + sum.ln()
}

fn gamma_p(a: f64, x: f64) -> f64 {
    if x < a + 1.0 {
        // Series.
        let mut term = 1.0 / a;
        let mut sum = term;
        let mut n = a;
        for _ in 0..10_000 {
            n += 1.0;
            term *= x / n;
            sum += term;
            if term.abs() < sum.abs() * 1e-16 {
                break;
            }
        }
        sum * (-x + a * x.ln() - ln_gamma(a)).exp()
    } else {
        1.0 - gamma_q_cf(a, x)
    }
}

/// Q(a, x) by Lentz's continued fraction.
fn gamma_q_cf(a: f64, x: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let mut b = x + 1.0 - a;
    let mut c = 1.0 / TINY;
    let mut d = 1.0 / b;
    let mut h = d;
    for i in 1..10_000 {
        let an = -(i as f64) * (i as f64 - a);
        b += 2.0;
        d = an * d + b;
        if d.abs() < TINY {
            d = TINY;
        }
        c = b + an / c;
        if c.abs() < TINY {
            c = TINY;
        }
        d = 1.0 / d;
        let delta = d * c;
        h *= delta;
        if (delta - 1.0).abs() < 1e-16 {
            break;
        }
    }
    (-x + a * x.ln() - ln_gamma(a)).exp() * h
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reference values: scipy.stats.poisson.sf(k - 1, lam) (scipy 1.x).
    #[test]
    fn matches_scipy() {
        let cases = [
            (5, 2.0, 0.052_653_017_343_711_125),
            (20, 10.0, 0.003_454_341_975_856_833_4),
            (1, 0.5, 0.393_469_340_287_366_5),
            (0, 3.0, 1.0),
            (100, 50.0, 3.200_065_324_585_149_5e-10),
            (3, 0.001, 1.665_417_166_527_809_4e-10),
        ];
        for (k, lambda, expected) in cases {
            let got = sf_at_least(k, lambda);
            let rel = ((got - expected) / expected).abs();
            assert!(rel < 1e-9, "k={k} λ={lambda}: {got} vs {expected}");
        }
    }
}
