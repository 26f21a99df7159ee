//! The one test meshbench uses to say whether B differs from A: the Mann-Whitney (Wilcoxon
//! rank-sum) test of a shift, with the Hodges-Lehmann estimate of that shift and its confidence
//! interval obtained by inverting the same test. The interval is the set of shifts the test
//! does not reject, so "the interval excludes zero" and "p <= 1 - level" are one statement: a
//! verdict read from the interval cannot disagree with the p-value printed beside it.
//!
//! Why ranks: the samples are a few per-second (or per-run) latency percentiles, skewed and
//! prone to one bad second. The test assumes no shape; under "no difference" (both samples from
//! one distribution) it rejects at most 1 - level of the time whatever that distribution is, and
//! the exact null distribution (used up to 2,500 pairs) keeps that true with four values a side.
//!
//! Ties between A and B count against a difference: a tied pair is neither above nor below, so
//! values rounded by a coarse histogram can only make the test more careful, never less.
//!
//! Too few values: with m and n values the smallest two-sided p the test can give is
//! 2 / C(m+n, m). When that is above 1 - level, no data could show a difference, and [`shift`]
//! says so ([`ShiftError::TooFew`]) instead of answering "no difference".

use crate::normal_cdf;

/// Pairs (m x n) up to which the null distribution is computed exactly (about 1.6 million
/// additions at 50 x 50); beyond, the normal approximation with a continuity correction, whose
/// error there is below 0.001 in probability.
const EXACT_PAIRS: usize = 2500;

/// The test of B against A.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shift {
    /// Hodges-Lehmann estimate of B - A: the median of the differences b - a over every pair.
    pub estimate: f64,
    /// Confidence interval of the shift: the (c+1)-th smallest and largest pairwise difference,
    /// c the test's critical count.
    pub ci: (f64, f64),
    /// The interval's exact coverage under the null distribution: at least the level asked
    /// for (the distribution is discrete, so e.g. 97.1 % with four values a side at 95 %).
    pub coverage: f64,
    /// Two-sided p-value of "no shift" (ties count against a difference).
    pub p: f64,
    pub n_a: usize,
    pub n_b: usize,
}

impl Shift {
    /// Whether the interval lies wholly above or wholly below zero; the same as `p <= 1 -
    /// level`.
    pub fn excludes_zero(&self) -> bool {
        self.ci.0 > 0.0 || self.ci.1 < 0.0
    }
}

/// Why there is no test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShiftError {
    /// So few values that no outcome could reach the level (2 / C(m+n, m) > 1 - level).
    TooFew { n_a: usize, n_b: usize },
    /// A value is NaN or infinite.
    NotFinite,
    /// The level is not between 0 and 1.
    Level,
}

/// The null distribution of U = #{(a, b): b > a} for `m` values of A and `n` of B drawn from one
/// continuous distribution: each of the C(m+n, m) orders of the values is equally likely.
struct Null {
    m: usize,
    n: usize,
    /// P(U <= u) for u in 0..=m*n, when computed exactly.
    cdf: Option<Vec<f64>>,
}

impl Null {
    fn new(m: usize, n: usize) -> Null {
        let cdf = (m * n <= EXACT_PAIRS).then(|| {
            let mut acc = 0.0;
            exact_pmf(m, n)
                .into_iter()
                .map(|p| {
                    acc += p;
                    f64::min(acc, 1.0)
                })
                .collect()
        });
        Null { m, n, cdf }
    }

    /// P(U <= u), which by symmetry is also P(U >= m*n - u).
    fn cdf(&self, u: usize) -> f64 {
        match &self.cdf {
            Some(c) => c[u.min(c.len() - 1)],
            None => {
                let (m, n) = (self.m as f64, self.n as f64);
                let sigma = (m * n * (m + n + 1.0) / 12.0).sqrt();
                normal_cdf((u as f64 + 0.5 - m * n / 2.0) / sigma)
            }
        }
    }

    /// The critical count c: the largest u with 2 P(U <= u) <= alpha. The test rejects when at
    /// most c pairs go one way. `None` when even c = 0 is too likely (too few values).
    fn critical(&self, alpha: f64) -> Option<usize> {
        let ok = |u: usize| 2.0 * self.cdf(u) <= alpha;
        if !ok(0) {
            return None;
        }
        // P(U <= mn/2) >= 1/2 by symmetry, so the answer is below mn/2 for any alpha < 1.
        let (mut lo, mut hi) = (0, self.m * self.n / 2);
        while lo + 1 < hi {
            let mid = (lo + hi) / 2;
            if ok(mid) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        Some(lo)
    }
}

/// P(U = u) for u in 0..=m*n, by the recurrence on the largest of the m + n values: it is one of
/// B with probability n/(m+n), and then above all m values of A (U = m + U of the rest), or one
/// of A, above no value of B (U = U of the rest). Only additions of positive terms: no
/// cancellation in the tails, which are what a test reads.
fn exact_pmf(m: usize, n: usize) -> Vec<f64> {
    // prev[j]: the distribution for (i - 1, j); at i = 0, U is 0.
    let mut prev: Vec<Vec<f64>> = vec![vec![1.0]; n + 1];
    for i in 1..=m {
        let mut cur: Vec<Vec<f64>> = Vec::with_capacity(n + 1);
        cur.push(vec![1.0]);
        for j in 1..=n {
            let (pa, pb) = (i as f64 / (i + j) as f64, j as f64 / (i + j) as f64);
            let mut v = vec![0.0; i * j + 1];
            for (u, p) in prev[j].iter().enumerate() {
                v[u] += pa * p;
            }
            for (u, p) in cur[j - 1].iter().enumerate() {
                v[u + i] += pb * p;
            }
            cur.push(v);
        }
        prev = cur;
    }
    prev.pop().unwrap_or_else(|| vec![1.0])
}

/// Whether `n_a` and `n_b` values could ever show a difference at `level`.
pub fn can_decide(n_a: usize, n_b: usize, level: f64) -> bool {
    n_a > 0
        && n_b > 0
        && level > 0.0
        && level < 1.0
        && Null::new(n_a, n_b).critical(1.0 - level).is_some()
}

/// The fewest values a side with which a difference can be shown at `level` (4 at 95 %).
pub fn needed_a_side(level: f64) -> usize {
    (1..64).find(|&k| can_decide(k, k, level)).unwrap_or(64)
}

/// The Mann-Whitney test of a shift of B over A at `level` (0.95 for 95 %), with the
/// Hodges-Lehmann estimate and the interval of the shift from inverting the test.
pub fn shift(a: &[f64], b: &[f64], level: f64) -> Result<Shift, ShiftError> {
    if !(level > 0.0 && level < 1.0) {
        return Err(ShiftError::Level);
    }
    if a.iter().chain(b).any(|v| !v.is_finite()) {
        return Err(ShiftError::NotFinite);
    }
    let (m, n) = (a.len(), b.len());
    let too_few = ShiftError::TooFew { n_a: m, n_b: n };
    if m == 0 || n == 0 {
        return Err(too_few);
    }
    let null = Null::new(m, n);
    let c = null.critical(1.0 - level).ok_or(too_few)?;
    let mut d: Vec<f64> = Vec::with_capacity(m * n);
    for &y in b {
        d.extend(a.iter().map(|&x| y - x));
    }
    d.sort_by(f64::total_cmp);
    let pairs = d.len();
    let above = d.iter().filter(|&&x| x > 0.0).count();
    let below = d.iter().filter(|&&x| x < 0.0).count();
    // Rejected when at least pairs - c pairs go one way; a tie goes neither way.
    let p = f64::min(2.0 * null.cdf(pairs - above.max(below)), 1.0);
    let estimate = if pairs % 2 == 1 {
        d[pairs / 2]
    } else {
        (d[pairs / 2 - 1] + d[pairs / 2]) / 2.0
    };
    Ok(Shift {
        estimate,
        ci: (d[c], d[pairs - 1 - c]),
        coverage: 1.0 - 2.0 * null.cdf(c),
        p,
        n_a: m,
        n_b: n,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(x: f64, want: f64, tol: f64) {
        assert!((x - want).abs() <= tol, "{x} vs {want}");
    }

    /// The distribution of U by enumerating every split of m + n ranks into A and B.
    fn enumerated(m: usize, n: usize) -> Vec<f64> {
        let total = m + n;
        let mut counts = vec![0u64; m * n + 1];
        let mut splits = 0u64;
        for mask in 0u32..(1 << total) {
            if mask.count_ones() as usize != m {
                continue;
            }
            // Bit r set: rank r belongs to A. U counts (a, b) with b above a.
            let mut u = 0;
            for rb in (0..total).filter(|r| mask & (1 << r) == 0) {
                u += (0..rb).filter(|ra| mask & (1 << ra) != 0).count();
            }
            counts[u] += 1;
            splits += 1;
        }
        counts.iter().map(|&c| c as f64 / splits as f64).collect()
    }

    #[test]
    fn the_exact_null_distribution_is_what_enumeration_gives() {
        for (m, n) in [(1, 1), (2, 3), (3, 2), (4, 4), (3, 7), (6, 5), (8, 8)] {
            let got = exact_pmf(m, n);
            let want = enumerated(m, n);
            assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(&want) {
                close(*g, *w, 1e-12);
            }
        }
        // Beyond the exact range the normal approximation is close to the exact tail.
        let exact = Null::new(50, 50);
        let normal = Null {
            m: 50,
            n: 50,
            cdf: None,
        };
        for u in [900, 1000, 1100, 1250] {
            close(normal.cdf(u), exact.cdf(u), 1e-3);
        }
    }

    #[test]
    fn p_values_and_interval_match_hand_counts() {
        // 7 vs 8 values with 2 of the 56 pairs going A's way: P(U <= 2) counts the partitions
        // of 0, 1 and 2 into at most 7 parts of at most 8, (1 + 1 + 2) / C(15, 7) = 4 / 6435;
        // the two-sided p is twice that (SciPy's mannwhitneyu, method="exact").
        let a = [12.1, 11.8, 12.6, 13.0, 12.2, 11.9, 12.4];
        let b = [13.1, 12.9, 13.8, 13.3, 12.7, 13.6, 14.0, 13.2];
        let s = shift(&a, &b, 0.95).unwrap();
        close(s.p, 8.0 / 6435.0, 1e-12);
        assert!(s.excludes_zero() && s.ci.0 > 0.0);
        // Four a side: the only significant outcome is complete separation (p = 2/70), and the
        // interval is then the smallest to the largest difference, with coverage 68/70.
        let s = shift(&[1.0, 2.0, 3.0, 4.0], &[5.0, 6.0, 8.0, 7.5], 0.95).unwrap();
        close(s.p, 2.0 / 70.0, 1e-12);
        assert_eq!(s.ci, (1.0, 7.0));
        close(s.coverage, 68.0 / 70.0, 1e-12);
        // Differences 1, 2, 2, 3, 3, 3, 4, 4 | 4, 4, 5, 5, 5, 6, 6, 7: the median is 4.
        let s = shift(&[1.0, 2.0, 3.0, 4.0], &[5.0, 6.0, 7.0, 8.0], 0.95).unwrap();
        close(s.estimate, 4.0, 1e-12);
        // One overlap among four a side: not significant, and the interval shows it.
        let s = shift(&[1.0, 2.0, 3.0, 5.5], &[5.0, 6.0, 7.0, 8.0], 0.95).unwrap();
        close(s.p, 4.0 / 70.0, 1e-12);
        assert!(!s.excludes_zero(), "{s:?}");
    }

    #[test]
    fn too_few_values_are_said_to_be_too_few() {
        assert_eq!(needed_a_side(0.95), 4);
        assert!(!can_decide(3, 3, 0.95) && !can_decide(3, 4, 0.95));
        assert!(can_decide(3, 5, 0.95) && can_decide(2, 8, 0.95));
        assert_eq!(
            shift(&[1.0, 2.0, 3.0], &[7.0, 8.0, 9.0], 0.95),
            Err(ShiftError::TooFew { n_a: 3, n_b: 3 })
        );
        assert_eq!(
            shift(&[], &[1.0], 0.95),
            Err(ShiftError::TooFew { n_a: 0, n_b: 1 })
        );
        assert_eq!(
            shift(&[1.0; 4], &[f64::NAN; 4], 0.95),
            Err(ShiftError::NotFinite)
        );
        assert_eq!(shift(&[1.0; 4], &[2.0; 4], 1.0), Err(ShiftError::Level));
    }

    #[test]
    fn ties_count_against_a_difference() {
        // Identical samples: nothing goes either way.
        let s = shift(&[2.0; 6], &[2.0; 6], 0.95).unwrap();
        assert_eq!((s.p, s.ci, s.estimate), (1.0, (0.0, 0.0), 0.0));
        assert!(!s.excludes_zero());
        // B above A except for one tied pair: 15 of 16 pairs above, as with one overlap.
        let s = shift(&[1.0, 2.0, 3.0, 5.0], &[5.0, 6.0, 7.0, 8.0], 0.95).unwrap();
        close(s.p, 4.0 / 70.0, 1e-12);
        assert!(!s.excludes_zero());
        assert_eq!(s.ci.0, 0.0);
    }

    #[test]
    fn the_interval_excludes_zero_exactly_when_p_is_below_the_level() {
        // Values on a coarse grid (many ties), many sizes, shifts of every direction.
        let mut x: u64 = 7;
        let mut next = || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) as f64 / (1u64 << 31) as f64
        };
        for trial in 0..3000 {
            let (m, n) = (2 + trial % 9, 3 + (trial / 9) % 8);
            let shift_by = ((trial % 7) as f64 - 3.0) * 0.5;
            let a: Vec<f64> = (0..m).map(|_| (next() * 8.0).round() / 4.0).collect();
            let b: Vec<f64> = (0..n)
                .map(|_| (next() * 8.0).round() / 4.0 + shift_by)
                .collect();
            match shift(&a, &b, 0.95) {
                Ok(s) => {
                    assert_eq!(s.excludes_zero(), s.p <= 0.05, "{a:?} {b:?} {s:?}");
                    assert!(s.ci.0 <= s.estimate && s.estimate <= s.ci.1, "{s:?}");
                    assert!(s.coverage >= 0.95, "{s:?}");
                }
                Err(ShiftError::TooFew { .. }) => assert!(!can_decide(m, n, 0.95)),
                Err(e) => panic!("{e:?}"),
            }
        }
    }
}
