//! `meshbench compare A B`: per-percentile differences of B over A with 95 % intervals and a
//! verdict (one test, [`crate::verdict`]). Each side is one run or the repeats of a
//! measurement; repeats are merged as histograms for the pooled difference and summarised as
//! median and spread, never averaged. A difference tested over one-second intervals must clear
//! the [`Margin`] (what identical runs differ by) to be called one.

use meshbench_stats::{spread, Spread};
use thiserror::Error;

use crate::headline::{delta, Delta};
use crate::runs::{Group, PERCENTILES};
use crate::verdict::Margin;

#[derive(Debug, Error, PartialEq)]
pub enum CompareError {
    #[error("{0} holds no measured run (its steps failed or it is empty)")]
    Empty(String),
    #[error("{a} and {b} have no measurement in common (same variant and load); pick one of each with EXPERIMENT:VARIANT")]
    NothingInCommon { a: String, b: String },
}

/// A percentile of one side: the merged value and the spread of the runs' own values.
#[derive(Debug, Clone, PartialEq)]
pub struct SideFigure {
    pub merged_ms: f64,
    pub runs: Option<Spread>,
}

/// One compared percentile.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub a: SideFigure,
    pub b: SideFigure,
    pub delta: Delta,
}

/// Two matched measurements compared.
#[derive(Debug, Clone)]
pub struct Pair {
    pub a: Group,
    pub b: Group,
    pub lines: Vec<Line>,
    /// The margin a difference over seconds had to clear (what identical runs differ by).
    pub margin: Margin,
}

impl Pair {
    /// A against B at every percentile, a difference over seconds held to `margin`.
    pub fn of(a: Group, b: Group, margin: Margin) -> Pair {
        let lines = PERCENTILES
            .iter()
            .map(|&q| {
                let figure = |g: &Group| SideFigure {
                    merged_ms: g.latency_ms(q),
                    runs: spread(
                        &g.runs
                            .iter()
                            .map(|r| r.latency.value_at_quantile(q) as f64 / 1000.0)
                            .collect::<Vec<_>>(),
                    ),
                };
                Line {
                    a: figure(&a),
                    b: figure(&b),
                    delta: delta(&a, &b, q, margin),
                }
            })
            .collect();
        Pair {
            a,
            b,
            lines,
            margin,
        }
    }
}

/// Pairs the groups of two sides: directly when each side is one measurement, by load when
/// each side is one variant, else by equal variant and load.
pub fn pair_up(
    a_name: &str,
    a: Vec<Group>,
    b_name: &str,
    b: Vec<Group>,
    margin: Margin,
) -> Result<Vec<Pair>, CompareError> {
    if a.is_empty() {
        return Err(CompareError::Empty(a_name.into()));
    }
    if b.is_empty() {
        return Err(CompareError::Empty(b_name.into()));
    }
    if a.len() == 1 && b.len() == 1 {
        let (a, b) = (a.into_iter().next(), b.into_iter().next());
        return Ok(a
            .zip(b)
            .map(|(a, b)| Pair::of(a, b, margin))
            .into_iter()
            .collect());
    }
    // One variant a side (two topologies of one experiment): pair by load alone.
    let single = |g: &[Group]| g.iter().all(|x| x.variant == g[0].variant);
    let by_load = single(&a) && single(&b);
    let pairs: Vec<Pair> = a
        .iter()
        .filter_map(|ga| {
            let gb = b
                .iter()
                .find(|gb| gb.load == ga.load && (by_load || gb.variant == ga.variant))?;
            Some(Pair::of(ga.clone(), gb.clone(), margin))
        })
        .collect();
    if pairs.is_empty() {
        return Err(CompareError::NothingInCommon {
            a: a_name.into(),
            b: b_name.into(),
        });
    }
    Ok(pairs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runs::{group, Run};
    use crate::verdict::Verdict;
    use meshbench_results::{
        histogram::{encode_histogram, new_histogram},
        run::TimelinePoint,
        RunResult,
    };

    /// One run of `name` whose one-second p50s are these (ms), its histogram at the first.
    fn run(name: &str, seconds_ms: &[f64]) -> Run {
        let mut r: RunResult = meshbench_results::fixtures::run_result();
        let mut h = new_histogram();
        h.record_n((seconds_ms[0] * 1000.0) as u64, 1000)
            .expect("a value in range");
        r.histogram.latency_us = encode_histogram(&h);
        r.timeline = seconds_ms
            .iter()
            .enumerate()
            .map(|(i, ms)| TimelinePoint {
                second: i as u32,
                requests: 200,
                errors: 0,
                p50_us: (ms * 1000.0).round() as u64,
                p90_us: 0,
                p99_us: 0,
                p999_us: 0,
            })
            .collect();
        Run::from_result(name, r).expect("the fixture's histogram decodes")
    }

    fn p50(a: &[f64], b: &[f64]) -> Line {
        let pairs = pair_up(
            "a",
            group(vec![run("a", a)]),
            "b",
            group(vec![run("b", b)]),
            Margin::DEFAULT,
        )
        .expect("one run a side pairs");
        pairs[0].lines[0].clone()
    }

    #[test]
    fn identical_runs_a_drift_apart_are_not_called_different() {
        // Issue 24: two 8 s runs against one server spinning 2 ms per request, B's seconds
        // 0.020 ms above A's (a 1 % drift between runs). The seconds of one run cannot show
        // how much runs differ, so this is no verdict of "slower".
        let a = [2.081, 2.079, 2.084, 2.080, 2.078, 2.083, 2.082, 2.080];
        let b = [2.100, 2.098, 2.105, 2.101, 2.099, 2.104, 2.097, 2.102];
        let line = p50(&a, &b);
        let s = line
            .delta
            .test
            .shift
            .expect("eight seconds a side are tested");
        assert!(s.ci.0 > 0.0, "the test alone separates them: {s:?}");
        assert!(
            !line.delta.significant(),
            "a 1 % drift is no difference: {:?}",
            line.delta.verdict()
        );
    }

    #[test]
    fn a_server_slower_by_half_its_time_is_still_slower() {
        let a = [2.081, 2.079, 2.084, 2.080, 2.078, 2.083, 2.082, 2.080];
        let b = [3.101, 3.098, 3.105, 3.100, 3.099, 3.104, 3.097, 3.102];
        assert_eq!(p50(&a, &b).delta.verdict(), Verdict::Slower);
        assert_eq!(p50(&b, &a).delta.verdict(), Verdict::Faster);
    }
}
