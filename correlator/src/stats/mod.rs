//! Statistics for comparing two measurements, and nothing else computes a
//! p-value for experiments. Pure functions, checked against scipy reference
//! values (tests/fixtures) and by simulation.
//!
//! The procedure (../shared/notes/measurement-rules.md): one value per
//! repetition; Mann-Whitney U, two-sided (its null is stochastic equality,
//! not equal medians); a bootstrap 95% CI for the relative change; several
//! percentiles tested at once → Bonferroni; a minimum meaningful change.

use serde::Serialize;

/// How a p-value was computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// The exact null distribution of U (small samples without ties).
    Exact,
    /// Normal approximation with tie correction and continuity correction.
    Asymptotic,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct MannWhitney {
    /// U of the first sample (scipy's `statistic`).
    pub u: f64,
    pub p_value: f64,
    pub method: Method,
}

/// Ranks with ties averaged, and the tie-group sizes.
fn ranks(all: &[f64]) -> (Vec<f64>, Vec<usize>) {
    let mut idx: Vec<usize> = (0..all.len()).collect();
    idx.sort_by(|&a, &b| all[a].total_cmp(&all[b]));
    let mut ranks = vec![0.0; all.len()];
    let mut ties = Vec::new();
    let mut i = 0;
    while i < idx.len() {
        let mut j = i;
        while j + 1 < idx.len() && all[idx[j + 1]] == all[idx[i]] {
            j += 1;
        }
        let avg = (i + j) as f64 / 2.0 + 1.0;
        for &k in &idx[i..=j] {
            ranks[k] = avg;
        }
        if j > i {
            ties.push(j - i + 1);
        }
        i = j + 1;
    }
    (ranks, ties)
}

/// Number of ways to get each U for samples of sizes m ≤ n (no ties):
/// the coefficients of the Gaussian binomial [m+n choose m]_q, the
/// product over i = 1..m of (1 − q^(n+i)) / (1 − q^i), built one factor
/// at a time on a single polynomial of degree m·n. Memory is m·n + 1
/// values and time m·(m·n), where the textbook table over (i, j, u) took
/// n·m·n values: 8 values against 20,000 needed 23 GB that way.
fn u_frequencies(m: usize, n: usize) -> Vec<f64> {
    let max_u = m * n;
    let mut f = vec![0.0; max_u + 1];
    f[0] = 1.0;
    for i in 1..=m {
        // × (1 − q^(n+i)), truncated at degree m·n.
        for u in (n + i..=max_u).rev() {
            f[u] -= f[u - n - i];
        }
        // ÷ (1 − q^i): a running sum with stride i.
        for u in i..=max_u {
            f[u] += f[u - i];
        }
    }
    f
}

/// Standard normal survival function, 1 − Φ(z).
pub fn norm_sf(z: f64) -> f64 {
    0.5 * erfc(z / std::f64::consts::SQRT_2)
}

/// Complementary error function: the Taylor series of erf below 2, a
/// continued fraction above (the usual short approximations are only good
/// to ~1e-7 relative, not enough for small p-values).
fn erfc(x: f64) -> f64 {
    if x < 0.0 {
        return 2.0 - erfc(-x);
    }
    if x < 2.0 {
        // erf series: erf(x) = 2/√π Σ (-1)^n x^(2n+1) / (n! (2n+1))
        let mut sum = 0.0;
        let mut term = x;
        let mut n = 0.0;
        // Converges in < 60 terms for |x| < 2; the bound also ends x = 0.
        while n < 200.0 {
            let add = term / (2.0 * n + 1.0);
            sum += add;
            n += 1.0;
            term *= -x * x / n;
            if add.abs() <= 1e-17 * sum.abs() {
                break;
            }
        }
        1.0 - 2.0 / std::f64::consts::PI.sqrt() * sum
    } else {
        // Continued fraction (Lentz) for erfc.
        const TINY: f64 = 1e-300;
        let mut f = x;
        let mut c = x;
        let mut d = 0.0;
        for i in 1..500 {
            let a = i as f64 / 2.0;
            d = x + a * d;
            d = if d.abs() < TINY { TINY } else { d };
            c = x + a / c;
            c = if c.abs() < TINY { TINY } else { c };
            d = 1.0 / d;
            let delta = c * d;
            f *= delta;
            if (delta - 1.0).abs() < 1e-16 {
                break;
            }
        }
        (-x * x).exp() / (f * std::f64::consts::PI.sqrt())
    }
}

/// Mann-Whitney U test, two-sided, with an explicit method.
pub fn mann_whitney_with(a: &[f64], b: &[f64], method: Method) -> MannWhitney {
    let (n1, n2) = (a.len(), b.len());
    let all: Vec<f64> = a.iter().chain(b).copied().collect();
    let (r, ties) = ranks(&all);
    let r1: f64 = r[..n1].iter().sum();
    let u1 = r1 - (n1 * (n1 + 1)) as f64 / 2.0;
    let u2 = (n1 * n2) as f64 - u1;
    let u = u1.max(u2);
    let p = match method {
        Method::Exact => {
            let f = u_frequencies(n1.min(n2), n1.max(n2));
            let total: f64 = f.iter().sum();
            // P(U ≥ u) = P(U ≤ n1·n2 − u) by symmetry: the low
            // coefficients are exact (no subtraction reaches them), the
            // high ones carry the cancellation of the product's factors.
            let k = (n1 * n2).saturating_sub(u.round() as usize);
            let sf: f64 = f.iter().take(k + 1).sum::<f64>() / total;
            2.0 * sf
        }
        Method::Asymptotic => {
            let (n1f, n2f) = (n1 as f64, n2 as f64);
            let n = n1f + n2f;
            let tie_term: f64 = ties.iter().map(|&t| (t * t * t - t) as f64).sum();
            let s = (n1f * n2f / 12.0 * ((n + 1.0) - tie_term / (n * (n - 1.0)))).sqrt();
            if s > 0.0 {
                let z = (u - n1f * n2f / 2.0 - 0.5) / s;
                2.0 * norm_sf(z)
            } else {
                // Every value tied (or an empty side): U cannot vary, and
                // identical samples carry no evidence of a difference.
                1.0
            }
        }
    };
    MannWhitney {
        u: u1,
        p_value: p.clamp(0.0, 1.0),
        method,
    }
}

/// Mann-Whitney U test, two-sided: exact for small samples (either ≤ 8)
/// without ties, the tie-corrected normal approximation otherwise (scipy's
/// `method="auto"` rule).
pub fn mann_whitney(a: &[f64], b: &[f64]) -> MannWhitney {
    let all: Vec<f64> = a.iter().chain(b).copied().collect();
    let has_ties = !ranks(&all).1.is_empty();
    let method = if (a.len() <= 8 || b.len() <= 8) && !has_ties {
        Method::Exact
    } else {
        Method::Asymptotic
    };
    mann_whitney_with(a, b, method)
}

/// One-sided Mann-Whitney U test: p-value of "`a` tends to be larger
/// than `b`". The null distribution of U is symmetric, so this is half the
/// two-sided p when `a`'s U is above its mean, and one minus that half
/// otherwise (scipy's `alternative="greater"`, up to the continuity
/// correction's side).
pub fn mann_whitney_greater(a: &[f64], b: &[f64]) -> f64 {
    if a.is_empty() || b.is_empty() {
        return 1.0;
    }
    let t = mann_whitney(a, b);
    let mean = (a.len() * b.len()) as f64 / 2.0;
    let half = (t.p_value / 2.0).clamp(0.0, 0.5);
    if t.u > mean { half } else { 1.0 - half }
}

pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// A small, seeded generator (SplitMix64): bootstrap results reproduce.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, n).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Uniform in [lo, hi].
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi.saturating_sub(lo) + 1)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct ChangeCi {
    /// Relative change B vs A, in percent: of the medians, or the
    /// Hodges-Lehmann ratio ([`Estimate`]).
    pub change_pct: f64,
    pub ci_low_pct: f64,
    pub ci_high_pct: f64,
    /// Resamples whose change was not a number (a resampled baseline
    /// median of 0): left out of the CI, and counted here so a reader
    /// knows the CI rests on fewer resamples.
    #[serde(skip_serializing_if = "is_zero")]
    pub non_finite: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Which statistic a relative change (B vs A) is the change of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Estimate {
    /// The medians' ratio: for samples large enough that each median is
    /// stable (`compare` of raw values).
    Medians,
    /// The Hodges-Lehmann ratio: the median over every pair (a, b) of
    /// b / a, the effect size that goes with the Mann-Whitney test. For a
    /// few repetitions per arm whose values fall in two modes (a CPU hog's
    /// bursts in some repetitions and not others, a host stall in some B
    /// repetitions) each median jumps between the modes under resampling:
    /// the U test found −84% significant while the medians' bootstrap CI
    /// ran to +167%. The median of 400 pairwise ratios does not jump.
    HodgesLehmann,
}

/// The relative change B vs A in percent, by `estimate`: for the
/// Hodges-Lehmann ratio `a` and `b` hold the values' logarithms; `pairs`
/// is scratch space. Reorders `a` and `b`: medians by selection, not a
/// sort (a bootstrap of 10,000 resamples of 20,000 values sorted each
/// one, 5-8 s for `compare`).
fn change_of(a: &mut [f64], b: &mut [f64], estimate: Estimate, pairs: &mut Vec<f64>) -> f64 {
    match estimate {
        Estimate::Medians => {
            let (ma, mb) = (median_in_place(a), median_in_place(b));
            (mb - ma) / ma * 100.0
        }
        Estimate::HodgesLehmann => {
            let (a, b): (&[f64], &[f64]) = (a, b);
            if a.iter().chain(b).any(|x| x.is_nan()) {
                return f64::NAN;
            }
            pairs.clear();
            pairs.extend(a.iter().flat_map(|la| b.iter().map(move |lb| lb - la)));
            (median_in_place(pairs).exp() - 1.0) * 100.0
        }
    }
}

/// The bootstrap CI of the change of the median, each resample's medians
/// drawn as order statistics ([`resampled_median`]) instead of by drawing
/// and selecting every resample: O(1) a resample, where 8 values against
/// 20,000 took 1.6 s.
fn medians_ci(change_pct: f64, a: &[f64], b: &[f64], resamples: usize, rng: &mut Rng) -> ChangeCi {
    let sorted = |v: &[f64]| {
        let mut s = v.to_vec();
        s.sort_by(f64::total_cmp);
        s
    };
    let (a, b) = (sorted(a), sorted(b));
    let changes: Vec<f64> = (0..resamples)
        .map(|_| {
            let (ma, mb) = (resampled_median(&a, rng), resampled_median(&b, rng));
            (mb - ma) / ma * 100.0
        })
        .collect();
    percentile_ci(change_pct, changes)
}

/// The median of one bootstrap resample of `sorted` (ascending), without
/// the resample. A resample is n uniform draws of indices; their k-th
/// smallest is ⌊n·U₍ₖ₎⌋ where U₍ₖ₎, the k-th smallest of n uniforms on
/// (0, 1), is Beta(k, n − k + 1) (an index is a monotone step function of
/// its uniform, which keeps the order). With n even the next order
/// statistic is the smallest of the other n − k uniforms, which lie above
/// U₍ₖ₎. Same distribution as drawing and selecting, as the unit test
/// `resampled_medians_match_drawn_resamples` checks.
fn resampled_median(sorted: &[f64], rng: &mut Rng) -> f64 {
    let n = sorted.len();
    if n == 0 {
        return f64::NAN;
    }
    let index = |u: f64| ((u * n as f64) as usize).min(n - 1);
    if n % 2 == 1 {
        let k = n / 2 + 1;
        return sorted[index(beta(k as f64, (n - k + 1) as f64, rng))];
    }
    let k = n / 2;
    let u = beta(k as f64, (n - k + 1) as f64, rng);
    let next = u + (1.0 - u) * (1.0 - (1.0 - rng.unit()).powf(1.0 / (n - k) as f64));
    (sorted[index(u)] + sorted[index(next)]) / 2.0
}

/// Beta(a, b) for a, b ≥ 1: the ratio of two gamma draws. Written here
/// (Marsaglia-Tsang, with Box-Muller normals) rather than through
/// rand_distr: that crate wants rand's generator traits around this
/// module's seeded generator for these few lines.
fn beta(a: f64, b: f64, rng: &mut Rng) -> f64 {
    let x = gamma(a, rng);
    x / (x + gamma(b, rng))
}

/// Gamma(shape, 1) for shape ≥ 1 (Marsaglia and Tsang, 2000).
fn gamma(shape: f64, rng: &mut Rng) -> f64 {
    let d = shape - 1.0 / 3.0;
    let c = 1.0 / (9.0 * d).sqrt();
    loop {
        let x = normal(rng);
        let v = (1.0 + c * x).powi(3);
        if v <= 0.0 {
            continue;
        }
        let u = 1.0 - rng.unit();
        if u.ln() < 0.5 * x * x + d - d * v + d * v.ln() {
            return d * v;
        }
    }
}

/// A standard normal draw (Box-Muller).
fn normal(rng: &mut Rng) -> f64 {
    let (u, v) = (1.0 - rng.unit(), rng.unit());
    (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
}

/// The percentile-method 95% CI of `changes` (non-finite ones counted and
/// left out).
fn percentile_ci(change_pct: f64, mut changes: Vec<f64>) -> ChangeCi {
    let total = changes.len();
    changes.retain(|c| c.is_finite());
    let non_finite = total - changes.len();
    changes.sort_by(f64::total_cmp);
    let q = |p: f64| {
        changes
            .get(((changes.len() as f64 - 1.0) * p).round() as usize)
            .copied()
            .unwrap_or(f64::NAN)
    };
    ChangeCi {
        change_pct,
        ci_low_pct: q(0.025),
        ci_high_pct: q(0.975),
        non_finite,
    }
}

/// The median of `v`, reordering it (a selection, not a sort).
fn median_in_place(v: &mut [f64]) -> f64 {
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    let (_, upper, _) = v.select_nth_unstable_by(n / 2, f64::total_cmp);
    let upper = *upper;
    if n % 2 == 1 {
        return upper;
    }
    let lower = v[..n / 2].iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (lower + upper) / 2.0
}

/// Bootstrap 95% CI (percentile method) of the relative change of the
/// median from `a` to `b`, resampling each independently with replacement.
pub fn bootstrap_change(a: &[f64], b: &[f64], resamples: usize, seed: u64) -> ChangeCi {
    bootstrap_change_of(a, b, resamples, seed, Estimate::Medians)
}

/// Bootstrap 95% CI (percentile method) of the relative change from `a`
/// to `b` by `estimate`, resampling each independently with replacement.
pub fn bootstrap_change_of(
    a: &[f64],
    b: &[f64],
    resamples: usize,
    seed: u64,
    estimate: Estimate,
) -> ChangeCi {
    // The Hodges-Lehmann ratio works on logarithms (a ratio is a
    // difference of logs); a value ≤ 0 has none, and its ratios are not
    // numbers (counted as such below).
    let prepare = |v: &[f64]| -> Vec<f64> {
        match estimate {
            Estimate::Medians => v.to_vec(),
            Estimate::HodgesLehmann => v
                .iter()
                .map(|&x| if x > 0.0 { x.ln() } else { f64::NAN })
                .collect(),
        }
    };
    let (a, b) = (prepare(a), prepare(b));
    // Every pair's difference, for the Hodges-Lehmann estimate only (two
    // samples of 20,000 would reserve 3.2 GB for medians that need none).
    let mut pairs = match estimate {
        Estimate::HodgesLehmann => Vec::with_capacity(a.len() * b.len()),
        Estimate::Medians => Vec::new(),
    };
    // On copies: the resamples below draw from `a` and `b` in their order.
    let change_pct = change_of(&mut a.clone(), &mut b.clone(), estimate, &mut pairs);
    let mut rng = Rng::new(seed);
    if estimate == Estimate::Medians {
        return medians_ci(change_pct, &a, &b, resamples, &mut rng);
    }
    let changes = if a.iter().chain(&b).any(|x| x.is_nan()) {
        hodges_lehmann_resampled(&a, &b, resamples, &mut rng, &mut pairs)
    } else {
        hodges_lehmann_resampled_weighted(&a, &b, resamples, &mut rng)
    };
    percentile_ci(change_pct, changes)
}

/// Each resample's Hodges-Lehmann change, by drawing the resample and
/// selecting the median of its n × m pairwise differences.
fn hodges_lehmann_resampled(
    a: &[f64],
    b: &[f64],
    resamples: usize,
    rng: &mut Rng,
    pairs: &mut Vec<f64>,
) -> Vec<f64> {
    let mut buf_a = vec![0.0; a.len()];
    let mut buf_b = vec![0.0; b.len()];
    (0..resamples)
        .map(|_| {
            for x in buf_a.iter_mut() {
                *x = a[rng.below(a.len())];
            }
            for x in buf_b.iter_mut() {
                *x = b[rng.below(b.len())];
            }
            change_of(&mut buf_a, &mut buf_b, Estimate::HodgesLehmann, pairs)
        })
        .collect()
}

/// The same values as [`hodges_lehmann_resampled`] (the same draws from
/// the same generator), without building each resample's differences: a
/// resample's pairwise differences are the original sample's, each
/// counted (times a drew its first value) × (times b drew its second), so
/// its median is found by walking the original differences in order once
/// sorted, summing those weights. A linear walk that stops at the middle,
/// instead of a fill and a selection of n × m values: the experiments'
/// calibration tests (200 simulated experiments each) took 40-70 s.
fn hodges_lehmann_resampled_weighted(
    a: &[f64],
    b: &[f64],
    resamples: usize,
    rng: &mut Rng,
) -> Vec<f64> {
    let (n, m) = (a.len(), b.len());
    let mut pairs: Vec<(f64, u32, u32)> = Vec::with_capacity(n * m);
    for (i, la) in (0u32..).zip(a) {
        for (j, lb) in (0u32..).zip(b) {
            pairs.push((lb - la, i, j));
        }
    }
    pairs.sort_by(|x, y| x.0.total_cmp(&y.0));
    let total = (n * m) as u64;
    if total == 0 {
        return vec![f64::NAN; resamples];
    }
    // The ranks (from 0) whose values median_in_place averages.
    let (lo_rank, hi_rank) = if total % 2 == 1 {
        (total / 2, total / 2)
    } else {
        (total / 2 - 1, total / 2)
    };
    let (mut ca, mut cb) = (vec![0u64; n], vec![0u64; m]);
    (0..resamples)
        .map(|_| {
            ca.fill(0);
            cb.fill(0);
            for _ in 0..n {
                ca[rng.below(n)] += 1;
            }
            for _ in 0..m {
                cb[rng.below(m)] += 1;
            }
            let (mut seen, mut lo) = (0u64, f64::NAN);
            for &(d, i, j) in &pairs {
                seen += ca[i as usize] * cb[j as usize];
                if lo.is_nan() && seen > lo_rank {
                    lo = d;
                }
                if seen > hi_rank {
                    return (((lo + d) / 2.0).exp() - 1.0) * 100.0;
                }
            }
            f64::NAN
        })
        .collect()
}

/// The verdict in the words of the procedure. Lower is better (latency).
/// An effect is only claimed when the bootstrap CI of the change excludes 0.
/// Whether a relative change reaches the minimum meaningful change, both
/// as ratios: a change of m% up (ratio 1 + m) is as large as one down to
/// ratio 1 / (1 + m). Comparing percentages directly would make a floor
/// above 100% (a noisy A/A) unreachable by any improvement, since no
/// latency falls by more than 100%.
pub fn meaningful(change_pct: f64, min_change_pct: f64) -> bool {
    let ratio = 1.0 + change_pct / 100.0;
    if ratio <= 0.0 {
        return true;
    }
    ratio.ln().abs() >= (1.0 + min_change_pct.max(0.0) / 100.0).ln()
}

/// What a comparison found, before it is put in words: only
/// `Improvement` and `Regression` are claims (significant, meaningful, CI
/// excluding 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Finding {
    NoDifference,
    /// Significant, but smaller than the minimum meaningful change.
    BelowMinimum,
    /// Significant by the rank test while the CI of the change holds 0.
    CiIncludesZero,
    Improvement,
    Regression,
}

impl Finding {
    pub fn of(p_value: f64, alpha: f64, ci: &ChangeCi, min_change_pct: f64) -> Self {
        if p_value >= alpha {
            Finding::NoDifference
        } else if !meaningful(ci.change_pct, min_change_pct) {
            Finding::BelowMinimum
        } else if ci.ci_low_pct <= 0.0 && ci.ci_high_pct >= 0.0 {
            Finding::CiIncludesZero
        } else if ci.change_pct < 0.0 {
            Finding::Improvement
        } else {
            Finding::Regression
        }
    }

    /// A claimed change, either way.
    pub fn is_claim(self) -> bool {
        matches!(self, Finding::Improvement | Finding::Regression)
    }

    /// The verdict line.
    pub fn describe(self, ci: &ChangeCi) -> String {
        let claim = |what: &str| {
            format!(
                "{what} {:.1}% (95% CI {:.1}%..{:.1}%)",
                ci.change_pct.abs(),
                ci.ci_low_pct,
                ci.ci_high_pct
            )
        };
        match self {
            Finding::NoDifference => "no significant difference".into(),
            Finding::BelowMinimum => "significant but below the minimum meaningful change".into(),
            // The rank test and the size of the change disagree: the change
            // is not pinned down yet.
            Finding::CiIncludesZero => format!(
                "significant by the U test, but the 95% CI of the change ({:.1}%..{:.1}%) includes 0: collect more repetitions",
                ci.ci_low_pct, ci.ci_high_pct
            ),
            Finding::Improvement => claim("improvement"),
            Finding::Regression => claim("regression"),
        }
    }
}

pub fn verdict(p_value: f64, alpha: f64, ci: &ChangeCi, min_change_pct: f64) -> String {
    Finding::of(p_value, alpha, ci, min_change_pct).describe(ci)
}

/// Per-test α when `tests` are made at once (Bonferroni).
pub fn bonferroni(alpha: f64, tests: usize) -> f64 {
    alpha / tests.max(1) as f64
}

/// Reads one number per line (blank lines and `#` comments skipped).
/// Numbers, one per line (`#` comments and blank lines skipped).
pub fn parse_samples(path: &std::path::Path, text: &str) -> anyhow::Result<Vec<f64>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let v: f64 = t
            .parse()
            .map_err(|_| anyhow::anyhow!("{}:{}: {t:?} is not a number", path.display(), i + 1))?;
        if !v.is_finite() {
            anyhow::bail!("{}:{}: {t:?} is not a finite number", path.display(), i + 1);
        }
        out.push(v);
    }
    Ok(out)
}

/// `correlator compare`: two sample sets, the whole procedure.
#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    pub schema: &'static str,
    pub n_a: usize,
    pub n_b: usize,
    pub u: f64,
    pub p_value: f64,
    pub method: Method,
    pub median_a: f64,
    pub median_b: f64,
    pub change_pct: f64,
    pub ci_low_pct: f64,
    pub ci_high_pct: f64,
    pub alpha: f64,
    pub min_change_pct: f64,
    pub verdict: String,
    pub notes: Vec<String>,
}

pub fn compare(a: &[f64], b: &[f64], alpha: f64, min_change_pct: f64, seed: u64) -> Comparison {
    let mw = mann_whitney(a, b);
    let ci = bootstrap_change(a, b, 10_000, seed);
    let mut notes = Vec::new();
    if a.len() < 9 || b.len() < 9 {
        notes.push(
            "fewer than 9 values per side: the U test has little power; collect ≥ 20 repetitions"
                .into(),
        );
    }
    notes.push("Mann-Whitney's null is stochastic equality, not equal medians".into());
    if ci.non_finite > 0 {
        notes.push(format!(
            "{} of 10,000 bootstrap resamples had a baseline median of 0 (change not a number): the CI rests on the others",
            ci.non_finite
        ));
    }
    Comparison {
        schema: "correlator.compare/v1",
        n_a: a.len(),
        n_b: b.len(),
        u: mw.u,
        p_value: mw.p_value,
        method: mw.method,
        median_a: median(a),
        median_b: median(b),
        change_pct: ci.change_pct,
        ci_low_pct: ci.ci_low_pct,
        ci_high_pct: ci.ci_high_pct,
        alpha,
        min_change_pct,
        verdict: verdict(mw.p_value, alpha, &ci, min_change_pct),
        notes,
    }
}

/// The Cochran-Armitage test for a trend in proportions: `successes[i]`
/// of `totals[i]` in ordered groups scored `scores[i]` (e.g. spike requests
/// of all requests per offered rate). Returns z (standard normal under no
/// trend) and the one-sided p-value of an increasing trend; `None` when the
/// groups cannot show one (fewer than two, no successes or all, equal scores).
pub fn cochran_armitage(successes: &[u64], totals: &[u64], scores: &[f64]) -> Option<(f64, f64)> {
    if successes.len() < 2 || successes.len() != totals.len() || totals.len() != scores.len() {
        return None;
    }
    let n: f64 = totals.iter().map(|&t| t as f64).sum();
    let s: f64 = successes.iter().map(|&x| x as f64).sum();
    if n <= 0.0 || s <= 0.0 || s >= n {
        return None;
    }
    let p = s / n;
    let sum_nx: f64 = totals.iter().zip(scores).map(|(&t, x)| t as f64 * x).sum();
    let sum_nx2: f64 = totals
        .iter()
        .zip(scores)
        .map(|(&t, x)| t as f64 * x * x)
        .sum();
    let mean_x = sum_nx / n;
    let t: f64 = successes
        .iter()
        .zip(scores)
        .map(|(&k, x)| k as f64 * (x - mean_x))
        .sum();
    let var = p * (1.0 - p) * (sum_nx2 - sum_nx * sum_nx / n);
    if var <= 0.0 {
        return None;
    }
    let z = t / var.sqrt();
    Some((z, norm_sf(z)))
}

/// Spearman's rank correlation of paired samples, with the one-sided
/// p-value of a positive association from the Fisher transform
/// z = atanh(ρ)·√((n − 3) / 1.06) (Fieller, Hartley and Pearson's variance
/// for Spearman's ρ). `None` with fewer than 5 pairs or a constant sample.
pub fn spearman(x: &[f64], y: &[f64]) -> Option<(f64, f64)> {
    let n = x.len();
    if n < 5 || y.len() != n {
        return None;
    }
    let (rx, _) = ranks(x);
    let (ry, _) = ranks(y);
    let mean = (n as f64 + 1.0) / 2.0;
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (a, b) in rx.iter().zip(&ry) {
        sxy += (a - mean) * (b - mean);
        sxx += (a - mean).powi(2);
        syy += (b - mean).powi(2);
    }
    if sxx <= 0.0 || syy <= 0.0 {
        return None;
    }
    let rho = (sxy / (sxx * syy).sqrt()).clamp(-0.999_999, 0.999_999);
    let z = rho.atanh() * ((n as f64 - 3.0) / 1.06).sqrt();
    Some((rho, norm_sf(z)))
}

mod fisher;
mod ks;
pub use fisher::fisher_greater;
pub use ks::ks_greater;
pub mod intervals;
pub mod periodicity;
pub mod sequential;

#[cfg(test)]
mod tests;
