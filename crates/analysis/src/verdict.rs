//! Whether B differs from A, as one typed answer. One test decides (Mann-Whitney with its
//! Hodges-Lehmann interval, `meshbench_stats::rank`), over one kind of sample (the per-run or the
//! per-second percentiles), and the interval printed is that test's own: the verdict is read
//! from the interval, so they cannot disagree. With too few samples for the test ever to show a
//! difference, the answer is [`Verdict::TooShort`], not "no difference".
//!
//! Every place that states significance goes through [`decide`]: `compare`, the latency added
//! over the baseline (`experiment`, `results show`, the demo) and the HTML report.

use std::fmt;

use meshbench_stats::{shift, Shift, ShiftError};
use serde::Serialize;

use crate::headline::LEVEL;

/// What one sample of the test is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// A run's percentile (repeats of one measurement).
    Repeats,
    /// A one-second percentile of the timeline (batch means of one or more runs).
    Seconds,
}

impl Unit {
    /// `4 repeats`, `1 one-second interval`.
    pub fn count(self, n: usize) -> String {
        match (self, n) {
            (Unit::Repeats, 1) => "1 repeat".into(),
            (Unit::Repeats, n) => format!("{n} repeats"),
            (Unit::Seconds, 1) => "1 one-second interval".into(),
            (Unit::Seconds, n) => format!("{n} one-second intervals"),
        }
    }
}

/// What the test compared: samples of one kind, this many a side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Basis {
    pub unit: Unit,
    pub a: usize,
    pub b: usize,
}

impl fmt::Display for Basis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.a == self.b {
            write!(f, "{} a side", self.unit.count(self.a))
        } else {
            write!(f, "{} (A) and {} (B)", self.a, self.unit.count(self.b))
        }
    }
}

/// The answer to "does B differ from A?".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    /// B is slower: the whole interval of B - A lies above zero.
    Slower,
    /// B is faster: the whole interval lies below zero.
    Faster,
    /// The interval holds zero: whatever difference there is lies within the noise.
    WithinNoise,
    /// Too few samples for the test to show any difference at all: `n` on the smaller side,
    /// `needed` a side would do.
    TooShort { n: usize, unit: Unit, needed: usize },
}

impl Verdict {
    /// The verdict the interval gives.
    pub fn of(s: &Shift) -> Verdict {
        if s.ci.0 > 0.0 {
            Verdict::Slower
        } else if s.ci.1 < 0.0 {
            Verdict::Faster
        } else {
            Verdict::WithinNoise
        }
    }

    /// Whether B differs from A (slower or faster).
    pub fn significant(self) -> bool {
        matches!(self, Verdict::Slower | Verdict::Faster)
    }

    /// A word or two for a table cell.
    pub fn short(self) -> &'static str {
        match self {
            Verdict::Slower => "slower",
            Verdict::Faster => "faster",
            Verdict::WithinNoise => "within noise",
            Verdict::TooShort { .. } => "too short",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Verdict::TooShort { n, unit, .. } => write!(
                f,
                "too short to tell: {}; run longer or repeat",
                unit.count(n)
            ),
            v => f.write_str(v.short()),
        }
    }
}

/// The test over samples of one kind.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Test {
    pub basis: Basis,
    /// The shift, its interval and p; `None` when there were too few samples (or one was not
    /// a number).
    pub shift: Option<Shift>,
    pub verdict: Verdict,
}

/// Whether `a` and `b` samples are enough for the test to show a difference.
pub fn enough(a: usize, b: usize) -> bool {
    meshbench_stats::rank::can_decide(a, b, LEVEL)
}

/// Tests B against A at [`LEVEL`] and gives the verdict: the one place where a difference is
/// called significant or not.
pub fn decide(a: &[f64], b: &[f64], unit: Unit) -> Test {
    let basis = Basis {
        unit,
        a: a.len(),
        b: b.len(),
    };
    let too_short = Verdict::TooShort {
        n: a.len().min(b.len()),
        unit,
        needed: meshbench_stats::rank::needed_a_side(LEVEL),
    };
    match shift(a, b, LEVEL) {
        Ok(s) => Test {
            basis,
            shift: Some(s),
            verdict: Verdict::of(&s),
        },
        Err(ShiftError::TooFew { .. } | ShiftError::NotFinite | ShiftError::Level) => Test {
            basis,
            shift: None,
            verdict: too_short,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SplitMix64: a seeded stream, so the trials are the same on every run.
    struct Rng(u64);

    impl Rng {
        fn uniform(&mut self) -> f64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
        }

        /// A standard normal value (Box-Muller).
        fn normal(&mut self) -> f64 {
            let u = 1.0 - self.uniform();
            (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * self.uniform()).cos()
        }
    }

    /// How the synthetic per-second percentiles are drawn around 1 ms.
    #[derive(Debug, Clone, Copy)]
    enum Shape {
        /// 1 ms + N(0, 0.1 ms).
        Normal,
        /// 0.9 ms + 0.1 ms x lognormal(0, 1): skewed, with an occasional bad second.
        Lognormal,
        /// Normal, rounded to 0.05 ms as a coarse histogram rounds: many ties.
        Rounded,
    }

    fn draw(rng: &mut Rng, shape: Shape, shift_ms: f64) -> f64 {
        shift_ms
            + match shape {
                Shape::Normal => 1.0 + 0.1 * rng.normal(),
                Shape::Lognormal => 0.9 + 0.1 * rng.normal().exp(),
                Shape::Rounded => ((1.0 + 0.1 * rng.normal()) / 0.05).round() * 0.05,
            }
    }

    /// Runs `trials` tests of `n` against `n` values; the share called significant.
    fn rate(rng: &mut Rng, shape: Shape, n: usize, shift_ms: f64, trials: usize) -> f64 {
        let mut significant = 0;
        for _ in 0..trials {
            let a: Vec<f64> = (0..n).map(|_| draw(rng, shape, 0.0)).collect();
            let b: Vec<f64> = (0..n).map(|_| draw(rng, shape, shift_ms)).collect();
            let t = decide(&a, &b, Unit::Seconds);
            let s = t.shift.expect("enough values");
            // The verdict never contradicts the interval, nor the p-value beside it.
            match t.verdict {
                Verdict::Slower => assert!(s.ci.0 > 0.0, "{s:?}"),
                Verdict::Faster => assert!(s.ci.1 < 0.0, "{s:?}"),
                Verdict::WithinNoise => assert!(s.ci.0 <= 0.0 && 0.0 <= s.ci.1, "{s:?}"),
                Verdict::TooShort { .. } => panic!("{t:?}"),
            }
            assert_eq!(t.verdict.significant(), s.p <= 1.0 - LEVEL, "{s:?}");
            assert!(s.ci.0 <= s.estimate && s.estimate <= s.ci.1, "{s:?}");
            significant += usize::from(t.verdict.significant());
        }
        significant as f64 / trials as f64
    }

    #[test]
    fn false_positives_stay_near_five_percent_and_power_grows_with_the_shift() {
        const TRIALS: usize = 1000;
        let mut rng = Rng(20240611);
        for shape in [Shape::Normal, Shape::Lognormal, Shape::Rounded] {
            for n in [4, 5, 10] {
                // The exact share of false positives the test allows at this size.
                let size = {
                    let a: Vec<f64> = (0..n).map(|i| i as f64).collect();
                    let b: Vec<f64> = (0..n).map(|i| (n + i) as f64).collect();
                    1.0 - shift(&a, &b, LEVEL).unwrap().coverage
                };
                let null = rate(&mut rng, shape, n, 0.0, TRIALS);
                let power: Vec<f64> = [0.05, 0.1, 0.2]
                    .iter()
                    .map(|&d| rate(&mut rng, shape, n, d, TRIALS))
                    .collect();
                eprintln!(
                    "{shape:?} n={n}: false positives {:.1} % (test size {:.1} %), power at +0.05/+0.1/+0.2 ms {:.0}/{:.0}/{:.0} %",
                    null * 100.0,
                    size * 100.0,
                    power[0] * 100.0,
                    power[1] * 100.0,
                    power[2] * 100.0
                );
                // Binomial spread of 1000 trials at the test's size: 4 standard deviations.
                let sd = (size * (1.0 - size) / TRIALS as f64).sqrt();
                assert!(null <= size + 4.0 * sd, "{shape:?} n={n}: {null}");
                if !matches!(shape, Shape::Rounded) {
                    // Ties make the test careful: only continuous values reach its size.
                    assert!(null >= size - 4.0 * sd, "{shape:?} n={n}: {null}");
                    assert!((0.015..=0.09).contains(&null), "{shape:?} n={n}: {null}");
                }
                assert!(power[0] <= power[2] && null < power[2], "{power:?}");
            }
        }
        // A shift of two standard deviations, ten seconds a side: almost always seen.
        assert!(rate(&mut rng, Shape::Normal, 10, 0.2, TRIALS) > 0.9);
    }

    #[test]
    fn too_few_samples_are_too_short_to_tell_not_no_difference() {
        let t = decide(&[1.0, 1.1, 0.9], &[3.0, 3.1, 2.9], Unit::Seconds);
        assert_eq!(
            t.verdict,
            Verdict::TooShort {
                n: 3,
                unit: Unit::Seconds,
                needed: 4
            }
        );
        assert_eq!(t.shift, None);
        assert_eq!(
            t.verdict.to_string(),
            "too short to tell: 3 one-second intervals; run longer or repeat"
        );
        assert!(!t.verdict.significant());
        // One more second a side and the same separation is a difference.
        let t = decide(&[1.0, 1.1, 0.9, 1.0], &[3.0, 3.1, 2.9, 3.0], Unit::Seconds);
        assert_eq!(t.verdict, Verdict::Slower);
        assert_eq!(t.basis.to_string(), "4 one-second intervals a side");
    }

    #[test]
    fn the_issue_case_is_decided_by_one_test() {
        // Regression (deliverable 11): five one-second p50s a side, B about 1 ms above A with
        // one pair overlapping. Welch and Mann-Whitney said p < 0.05 while the interval printed
        // (placed around another point) spanned zero; now one test gives p and interval.
        let a = [2.10, 2.15, 3.095, 2.12, 2.11];
        let b = [3.12, 3.10, 3.15, 3.09, 3.13];
        let t = decide(&a, &b, Unit::Seconds);
        let s = t.shift.unwrap();
        assert_eq!(t.verdict, Verdict::Slower, "{s:?}");
        assert!(s.p < 0.05 && s.ci.0 > 0.0, "{s:?}");
        assert!((s.p - 4.0 / 252.0).abs() < 1e-12, "{s:?}");
    }
}
