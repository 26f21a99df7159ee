//! Statistics for turning measurements into answers: quantiles and spread of repeated
//! measurements (a median and its range, never a mean of percentiles), the t-interval of a mean,
//! Welch's t-test with its confidence interval, the Mann-Whitney U test for when the runs'
//! distribution is not normal, least-squares lines (CPU against load, RPS against cores) and
//! the knee of a latency/throughput curve. Pure functions over slices; the tests check them
//! against answers computed with SciPy for fixed data.

/// The q-quantile of `sorted` (ascending), interpolating linearly between order statistics
/// (the method R calls type 7 and NumPy uses by default). `None` when empty.
pub fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() || !(0.0..=1.0).contains(&q) {
        return None;
    }
    let h = (sorted.len() - 1) as f64 * q;
    let (lo, hi) = (h.floor() as usize, h.ceil() as usize);
    Some(sorted[lo] + (h - lo as f64) * (sorted[hi] - sorted[lo]))
}

/// Median and spread of repeated measurements.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    pub n: usize,
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// Interquartile range (p75 - p25).
    pub iqr: f64,
}

/// The median, range and IQR of `values`; `None` when empty or holding a NaN.
pub fn spread(values: &[f64]) -> Option<Spread> {
    if values.iter().any(|v| v.is_nan()) {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    Some(Spread {
        n: v.len(),
        median: quantile(&v, 0.5)?,
        min: v[0],
        max: v[v.len() - 1],
        iqr: quantile(&v, 0.75)? - quantile(&v, 0.25)?,
    })
}

fn mean_var(x: &[f64]) -> (f64, f64) {
    let n = x.len() as f64;
    let mean = x.iter().sum::<f64>() / n;
    let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, var)
}

/// The mean of `x` and the half-width of its t confidence interval at `level` (0.95 for 95 %);
/// `None` with fewer than two values.
pub fn mean_ci(x: &[f64], level: f64) -> Option<(f64, f64)> {
    if x.len() < 2 || !(0.0..1.0).contains(&level) || x.iter().any(|v| !v.is_finite()) {
        return None;
    }
    let (mean, var) = mean_var(x);
    let q = student_t_quantile(0.5 + level / 2.0, x.len() as f64 - 1.0);
    Some((mean, q * (var / x.len() as f64).sqrt()))
}

/// The one-sample t-test of "the mean of `x` is 0" (for paired differences), in the shape of
/// [`Welch`]: `diff` is the mean; `None` with fewer than two values or no variance.
pub fn one_sample(x: &[f64], level: f64) -> Option<Welch> {
    let (mean, half) = mean_ci(x, level)?;
    let df = x.len() as f64 - 1.0;
    let se = (mean_var(x).1 / x.len() as f64).sqrt();
    if se == 0.0 {
        return None;
    }
    let t = mean / se;
    Some(Welch {
        diff: mean,
        t,
        df,
        p: (2.0 * (1.0 - student_t_cdf(t.abs(), df))).clamp(0.0, 1.0),
        ci: (mean - half, mean + half),
    })
}

/// A least-squares line `y = intercept + slope * x`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Line {
    pub slope: f64,
    pub intercept: f64,
    /// Coefficient of determination (1 for points on the line).
    pub r2: f64,
    pub n: usize,
}

impl Line {
    pub fn at(&self, x: f64) -> f64 {
        self.intercept + self.slope * x
    }
}

/// Ordinary least squares over `(x, y)` points; `None` with fewer than two distinct x.
pub fn linear_fit(points: &[(f64, f64)]) -> Option<Line> {
    if points.len() < 2 || points.iter().any(|(x, y)| !x.is_finite() || !y.is_finite()) {
        return None;
    }
    let n = points.len() as f64;
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let syy: f64 = points.iter().map(|p| (p.1 - my).powi(2)).sum();
    if sxx == 0.0 {
        return None;
    }
    let slope = sxy / sxx;
    let r2 = if syy == 0.0 {
        1.0
    } else {
        (sxy * sxy) / (sxx * syy)
    };
    Some(Line {
        slope,
        intercept: my - slope * mx,
        r2,
        n: points.len(),
    })
}

/// The knee of an increasing, convex curve such as latency against throughput: with both axes
/// scaled to [0, 1], the point farthest below the chord from the first to the last point (the
/// Kneedle method of Satopää et al., 2011). Returns its index in `points` (sorted by x), or
/// `None` with fewer than three points, or a curve that does not end at (or within 5 % of) its
/// highest value at least 20 % above where it started, or one that stays within 0.1 of its
/// chord: a curve that never bends upward has no knee.
pub fn knee(points: &[(f64, f64)]) -> Option<usize> {
    if points.len() < 3 {
        return None;
    }
    let (x0, x1) = (points[0].0, points[points.len() - 1].0);
    let ymin = points.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
    let ymax = points.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
    let (y_first, y_last) = (points[0].1, points[points.len() - 1].1);
    if x1 <= x0 || ymax <= ymin || y_last < 0.95 * ymax || y_last < 1.2 * y_first {
        return None;
    }
    let norm = |p: &(f64, f64)| ((p.0 - x0) / (x1 - x0), (p.1 - ymin) / (ymax - ymin));
    let (_, first_y) = norm(&points[0]);
    let (_, last_y) = norm(&points[points.len() - 1]);
    let mut best = None;
    let mut best_gap = 0.1;
    for (i, p) in points.iter().enumerate().take(points.len() - 1).skip(1) {
        let (x, y) = norm(p);
        let chord = first_y + (last_y - first_y) * x;
        let gap = chord - y;
        if gap > best_gap {
            best_gap = gap;
            best = Some(i);
        }
    }
    best
}

/// Welch's t-test of B against A.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Welch {
    /// mean(B) - mean(A).
    pub diff: f64,
    pub t: f64,
    /// Welch-Satterthwaite degrees of freedom.
    pub df: f64,
    /// Two-sided p-value.
    pub p: f64,
    /// Confidence interval of `diff` at the level asked for.
    pub ci: (f64, f64),
}

/// Welch's unequal-variance t-test; `None` with fewer than two values on a side or no variance.
pub fn welch(a: &[f64], b: &[f64], level: f64) -> Option<Welch> {
    if a.len() < 2 || b.len() < 2 || !(0.0..1.0).contains(&level) {
        return None;
    }
    let (ma, va) = mean_var(a);
    let (mb, vb) = mean_var(b);
    let (sa, sb) = (va / a.len() as f64, vb / b.len() as f64);
    let se = (sa + sb).sqrt();
    if se == 0.0 || !se.is_finite() {
        return None;
    }
    let df =
        (sa + sb).powi(2) / (sa * sa / (a.len() as f64 - 1.0) + sb * sb / (b.len() as f64 - 1.0));
    let diff = mb - ma;
    let t = diff / se;
    let p = 2.0 * (1.0 - student_t_cdf(t.abs(), df));
    let q = student_t_quantile(0.5 + level / 2.0, df);
    Some(Welch {
        diff,
        t,
        df,
        p: p.clamp(0.0, 1.0),
        ci: (diff - q * se, diff + q * se),
    })
}

/// The Mann-Whitney U test of A against B: U of A, and the two-sided p-value from the normal
/// approximation with tie and continuity corrections (SciPy's `method="asymptotic"`).
pub fn mann_whitney(a: &[f64], b: &[f64]) -> Option<(f64, f64)> {
    if a.is_empty() || b.is_empty() || a.iter().chain(b).any(|v| v.is_nan()) {
        return None;
    }
    let (n1, n2) = (a.len() as f64, b.len() as f64);
    let mut all: Vec<(f64, bool)> = a
        .iter()
        .map(|&v| (v, true))
        .chain(b.iter().map(|&v| (v, false)))
        .collect();
    all.sort_by(|x, y| x.0.total_cmp(&y.0));
    // Average ranks over ties; the tie term for the variance.
    let mut rank_sum_a = 0.0;
    let mut ties = 0.0;
    let mut i = 0;
    while i < all.len() {
        let mut j = i;
        while j + 1 < all.len() && all[j + 1].0 == all[i].0 {
            j += 1;
        }
        let rank = (i + j) as f64 / 2.0 + 1.0;
        let t = (j - i + 1) as f64;
        ties += t * t * t - t;
        rank_sum_a += all[i..=j].iter().filter(|x| x.1).count() as f64 * rank;
        i = j + 1;
    }
    let u1 = rank_sum_a - n1 * (n1 + 1.0) / 2.0;
    let n = n1 + n2;
    let mu = n1 * n2 / 2.0;
    let sigma = (n1 * n2 / 12.0 * ((n + 1.0) - ties / (n * (n - 1.0)))).sqrt();
    if sigma == 0.0 {
        return Some((u1, 1.0));
    }
    let u = u1.max(n1 * n2 - u1);
    let z = (u - mu - 0.5) / sigma;
    Some((u1, (2.0 * (1.0 - normal_cdf(z))).clamp(0.0, 1.0)))
}

/// The standard normal CDF.
pub fn normal_cdf(z: f64) -> f64 {
    0.5 * erfc(-z / std::f64::consts::SQRT_2)
}

/// The complementary error function, by the published Chebyshev fit of Press et al.
/// (Numerical Recipes, section 6.2): fractional error below 1.2e-7 everywhere.
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t
        * (-z * z - 1.265_512_23
            + t * (1.000_023_68
                + t * (0.374_091_96
                    + t * (0.096_784_18
                        + t * (-0.186_288_06
                            + t * (0.278_868_07
                                + t * (-1.135_203_98
                                    + t * (1.488_515_87
                                        + t * (-0.822_152_23 + t * 0.170_872_77)))))))))
            .exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

/// Student's t CDF with `df` degrees of freedom (real-valued df, as Welch's test needs).
pub fn student_t_cdf(t: f64, df: f64) -> f64 {
    let x = df / (df + t * t);
    let tail = 0.5 * incomplete_beta(df / 2.0, 0.5, x);
    if t >= 0.0 {
        1.0 - tail
    } else {
        tail
    }
}

/// The p-quantile of Student's t, by bisection on the CDF.
pub fn student_t_quantile(p: f64, df: f64) -> f64 {
    let (mut lo, mut hi) = (-1e3, 1e3);
    for _ in 0..200 {
        let mid = (lo + hi) / 2.0;
        if student_t_cdf(mid, df) < p {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (lo + hi) / 2.0
}

fn ln_gamma(x: f64) -> f64 {
    // Lanczos approximation (g = 7, n = 9).
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
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut a = C[0];
    let t = x + 7.5;
    for (i, c) in C.iter().enumerate().skip(1) {
        a += c / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// The regularized incomplete beta function I_x(a, b), by its continued fraction.
fn incomplete_beta(a: f64, b: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let front =
        (ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln()).exp();
    if x < (a + 1.0) / (a + b + 2.0) {
        front * beta_fraction(a, b, x) / a
    } else {
        1.0 - front * beta_fraction(b, a, 1.0 - x) / b
    }
}

/// Lentz's evaluation of the incomplete beta continued fraction.
fn beta_fraction(a: f64, b: f64, x: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let mut c = 1.0;
    let mut d = 1.0 - (a + b) * x / (a + 1.0);
    if d.abs() < TINY {
        d = TINY;
    }
    d = 1.0 / d;
    let mut h = d;
    for m in 1..300 {
        let m = m as f64;
        let m2 = 2.0 * m;
        let aa = m * (b - m) * x / ((a + m2 - 1.0) * (a + m2));
        for (num, last) in [
            (aa, false),
            (
                -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0)),
                true,
            ),
        ] {
            d = 1.0 + num * d;
            if d.abs() < TINY {
                d = TINY;
            }
            c = 1.0 + num / c;
            if c.abs() < TINY {
                c = TINY;
            }
            d = 1.0 / d;
            let delta = d * c;
            h *= delta;
            if last && (delta - 1.0).abs() < 1e-15 {
                return h;
            }
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    // Reference values computed with SciPy 1.x / NumPy for the same data.
    const A: [f64; 7] = [12.1, 11.8, 12.6, 13.0, 12.2, 11.9, 12.4];
    const B: [f64; 8] = [13.1, 12.9, 13.8, 13.3, 12.7, 13.6, 14.0, 13.2];

    fn close(x: f64, want: f64, tol: f64) {
        assert!((x - want).abs() <= tol, "{x} vs {want}");
    }

    #[test]
    fn quantiles_interpolate_as_numpy_does() {
        let v = [1.0, 2.0, 3.0, 4.0, 10.0];
        close(quantile(&v, 0.25).unwrap(), 2.0, 1e-12);
        close(quantile(&v, 0.5).unwrap(), 3.0, 1e-12);
        close(quantile(&v, 0.9).unwrap(), 7.6, 1e-12);
        assert_eq!(quantile(&[], 0.5), None);
        let s = spread(&[5.0, 1.0, 3.0, 4.0, 2.0]).unwrap();
        assert_eq!(
            (s.n, s.median, s.min, s.max, s.iqr),
            (5, 3.0, 1.0, 5.0, 2.0)
        );
        assert_eq!(spread(&[1.0, f64::NAN]), None);
    }

    #[test]
    fn welch_matches_scipy() {
        // scipy.stats.ttest_ind(A, B, equal_var=False): t = -4.653568370231742,
        // p = 0.0004588468736634433, df = 12.920858198516338,
        // 95 % CI of mean(A) - mean(B) = (-1.5220634183242256, -0.5565080102471964).
        let w = welch(&A, &B, 0.95).unwrap();
        close(w.t, 4.653568370231742, 1e-9);
        close(w.df, 12.920858198516338, 1e-9);
        close(w.p, 0.0004588468736634433, 1e-7);
        close(w.ci.0, 0.5565080102471964, 1e-6);
        close(w.ci.1, 1.5220634183242256, 1e-6);
        assert!(welch(&[1.0], &B, 0.95).is_none());
        assert!(
            welch(&[2.0, 2.0], &[2.0, 2.0], 0.95).is_none(),
            "no variance"
        );
    }

    #[test]
    fn t_quantiles_match_scipy() {
        // scipy.stats.t.ppf(0.975, 12.3) = 2.172933481758962
        close(student_t_quantile(0.975, 12.3), 2.172933481758962, 1e-6);
        close(student_t_cdf(0.0, 5.0), 0.5, 1e-12);
    }

    #[test]
    fn mann_whitney_matches_scipy_with_and_without_ties() {
        // scipy.stats.mannwhitneyu(A, B, method="asymptotic"): U = 2, p = 0.0031669403816566894
        let (u, p) = mann_whitney(&A, &B).unwrap();
        assert_eq!(u, 2.0);
        close(p, 0.0031669403816566894, 1e-6);
        // With ties: [1,2,2,3,3,3,4] vs [2,3,3,4,4,5,5]: U = 11, p = 0.0860363143950735
        let (u, p) = mann_whitney(
            &[1.0, 2.0, 2.0, 3.0, 3.0, 3.0, 4.0],
            &[2.0, 3.0, 3.0, 4.0, 4.0, 5.0, 5.0],
        )
        .unwrap();
        assert_eq!(u, 11.0);
        close(p, 0.0860363143950735, 1e-6);
        assert_eq!(mann_whitney(&[], &B), None);
    }

    #[test]
    fn mean_interval_matches_scipy() {
        // np.mean and st.t.ppf(0.975, 4) * st.sem(x).
        let (m, h) = mean_ci(&[4.1, 3.9, 4.4, 4.0, 4.3], 0.95).unwrap();
        close(m, 4.14, 1e-12);
        close(h, 0.2574769267929078, 1e-6);
        assert_eq!(mean_ci(&[1.0], 0.95), None);
        // st.ttest_1samp([0.3, 0.5, 0.2, 0.6, 0.4], 0).
        let t = one_sample(&[0.3, 0.5, 0.2, 0.6, 0.4], 0.95).unwrap();
        close(t.t, 5.65685424949238, 1e-9);
        close(t.p, 0.00481267833004422, 1e-6);
        assert_eq!(one_sample(&[1.0, 1.0], 0.95), None);
    }

    #[test]
    fn line_matches_scipy_linregress() {
        let pts = [
            (100.0, 12.0),
            (200.0, 21.5),
            (400.0, 43.0),
            (800.0, 79.0),
            (1600.0, 161.0),
        ];
        let l = linear_fit(&pts).unwrap();
        close(l.slope, 0.09897177419354838, 1e-12);
        close(l.intercept, 1.9375, 1e-9);
        close(l.r2, 0.9995044288808645, 1e-12);
        close(l.at(1000.0), 1.9375 + 98.97177419354838, 1e-9);
        assert_eq!(linear_fit(&[(1.0, 2.0), (1.0, 3.0)]), None);
    }

    #[test]
    fn knee_of_a_hockey_stick_is_where_it_bends() {
        // Flat at 1 ms until 800 req/s, then steep: the bend is the 800 point.
        let pts = [
            (100.0, 1.0),
            (200.0, 1.0),
            (400.0, 1.1),
            (800.0, 1.3),
            (900.0, 4.0),
            (950.0, 20.0),
        ];
        assert_eq!(knee(&pts), Some(3));
        // A straight line has no knee; two points are not a curve.
        assert_eq!(knee(&[(1.0, 1.0), (2.0, 2.0), (3.0, 3.0)]), None);
        assert_eq!(knee(&pts[..2]), None);
        // Latency that falls with load (a warmer CPU) or barely rises: no knee.
        assert_eq!(knee(&[(1.0, 3.0), (2.0, 2.0), (3.0, 2.5)]), None);
        assert_eq!(knee(&[(1.0, 1.0), (2.0, 1.05), (3.0, 1.1)]), None);
    }
}
