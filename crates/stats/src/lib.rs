//! Statistics for turning measurements into answers: quantiles and spread of repeated
//! measurements (a median and its range, never a mean of percentiles), the one test that says
//! whether two samples differ (Mann-Whitney with its Hodges-Lehmann interval, in [`rank`]),
//! least-squares lines (CPU against load, RPS against cores) and the knee of a
//! latency/throughput curve. Pure functions over slices; the tests check them against answers
//! computed with SciPy, or by enumeration, for fixed data.

pub mod rank;

pub use rank::{shift, Shift, ShiftError};

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

/// Least squares with neither coefficient below zero: `y = intercept + slope * x` with
/// `intercept >= 0` and `slope >= 0`, as a cost against load must be (nothing runs below zero
/// and no cost shrinks as load grows). When the unconstrained line breaks a bound, the best
/// line lies on it: through the origin (`intercept` 0, `slope` = Σxy / Σx²) or flat at the
/// mean (`slope` 0), whichever leaves the smaller sum of squares. r² is 1 - SSE / SST of the
/// line returned (0 for a flat line). `None` with fewer than two distinct x or a non-finite
/// value.
pub fn nonnegative_fit(points: &[(f64, f64)]) -> Option<Line> {
    let free = linear_fit(points)?;
    if free.slope >= 0.0 && free.intercept >= 0.0 {
        return Some(free);
    }
    let n = points.len() as f64;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sst: f64 = points.iter().map(|p| (p.1 - my).powi(2)).sum();
    let sse = |intercept: f64, slope: f64| -> f64 {
        points
            .iter()
            .map(|p| (p.1 - intercept - slope * p.0).powi(2))
            .sum()
    };
    let sxy: f64 = points.iter().map(|p| p.0 * p.1).sum();
    let sxx: f64 = points.iter().map(|p| p.0 * p.0).sum();
    let through_origin = (0.0, (sxy / sxx).max(0.0));
    let flat = (my.max(0.0), 0.0);
    let (intercept, slope) = if sse(through_origin.0, through_origin.1) < sse(flat.0, flat.1) {
        through_origin
    } else {
        flat
    };
    let r2 = if sst == 0.0 {
        1.0
    } else {
        1.0 - sse(intercept, slope) / sst
    };
    Some(Line {
        slope,
        intercept,
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

#[cfg(test)]
mod tests {
    use super::*;

    // Reference values computed with SciPy 1.x / NumPy for the same data.
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
    fn a_cost_line_never_has_a_negative_slope_or_intercept() {
        // Inside the bounds it is the ordinary line.
        let rising = [(100.0, 30.0), (200.0, 41.0), (400.0, 59.0)];
        assert_eq!(nonnegative_fit(&rising), linear_fit(&rising));
        // The ordinary line starts at -20: the best line with intercept >= 0 goes through the
        // origin with slope Σxy/Σx², and at it the sum of squares would only grow with the
        // intercept (its derivative there, -2 Σ residuals, is >= 0) and is flat in the slope.
        let steep = [(100.0, 5.0), (200.0, 30.0), (300.0, 55.0)];
        assert!(linear_fit(&steep).unwrap().intercept < 0.0);
        let l = nonnegative_fit(&steep).unwrap();
        assert_eq!(l.intercept, 0.0);
        close(l.slope, 23_000.0 / 140_000.0, 1e-12);
        let residuals: Vec<f64> = steep.iter().map(|p| p.1 - l.at(p.0)).collect();
        assert!(-2.0 * residuals.iter().sum::<f64>() >= 0.0);
        let d_slope: f64 = steep.iter().zip(&residuals).map(|(p, r)| p.0 * r).sum();
        close(d_slope, 0.0, 1e-9);
        assert!(l.r2 > 0.0 && l.r2 < 1.0, "{l:?}");
        // Falling: flat at the mean, r² 0.
        let falling = [(100.0, 10.0), (200.0, 9.0), (300.0, 8.5)];
        let l = nonnegative_fit(&falling).unwrap();
        assert_eq!((l.slope, l.r2), (0.0, 0.0));
        close(l.intercept, 27.5 / 3.0, 1e-12);
        assert_eq!(nonnegative_fit(&[(1.0, 2.0), (1.0, 3.0)]), None);
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
