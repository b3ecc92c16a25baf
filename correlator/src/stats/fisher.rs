//! One-sided Fisher exact test of two proportions: do more of the
//! episodes than of the baseline windows show something?
//!
//! The cause test's second look (see `analysis::causes`): a family of
//! long major-fault episodes among many short unrelated ones dilutes the
//! KS gap to the family's fraction of the episodes, while "major faults
//! dominate 10 of 56 episodes and 0 of 200 baseline windows" is plain.
//! Written here because it is a dozen lines over the hypergeometric
//! distribution; the statistics crates that offer it (e.g. `statrs`'s
//! hypergeometric) would bring a large dependency for one tail sum.

/// P(X ≥ a) for X hypergeometric: `a` of `n` episodes and `b` of `m`
/// baseline windows show it, and under the null the a + b showing ones
/// fall among the n + m at random (scipy's `fisher_exact([[a, n − a],
/// [b, m − b]], alternative="greater")`).
pub fn fisher_greater(a: u64, n: u64, b: u64, m: u64) -> f64 {
    if a > n || b > m {
        return f64::NAN;
    }
    let (total, shown) = (n + m, a + b);
    if a == 0 || shown == 0 {
        return 1.0;
    }
    // pmf(x) = C(shown, x) · C(total − shown, n − x) / C(total, n), from
    // x = a upward by the ratio of consecutive terms.
    let hi = n.min(shown);
    let mut pmf =
        (ln_choose(shown, a) + ln_choose(total - shown, n - a) - ln_choose(total, n)).exp();
    let mut p = 0.0;
    for x in a..=hi {
        p += pmf;
        if x < hi {
            let num = (shown - x) as f64 * (n - x) as f64;
            let den = (x + 1) as f64 * (total - shown - n + x + 1) as f64;
            pmf *= num / den;
        }
    }
    p.clamp(0.0, 1.0)
}

/// ln C(n, k) as a sum of logs: exact enough for the run sizes here
/// (hundreds of windows), and no gamma function needed.
fn ln_choose(n: u64, k: u64) -> f64 {
    let k = k.min(n - k);
    (1..=k).map(|i| ((n - k + i) as f64 / i as f64).ln()).sum()
}
