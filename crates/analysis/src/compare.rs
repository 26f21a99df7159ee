//! `meshbench compare A B`: per-percentile differences of B over A with 95 % intervals and a
//! verdict (one test, [`crate::verdict`]). Each side is one run or the repeats of a
//! measurement; repeats are merged as histograms for the pooled difference and summarised as
//! median and spread, never averaged.

use meshbench_stats::{spread, Spread};
use thiserror::Error;

use crate::headline::{delta, Delta};
use crate::runs::{Group, PERCENTILES};

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
}

impl Pair {
    pub fn of(a: Group, b: Group) -> Pair {
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
                    delta: delta(&a, &b, q),
                }
            })
            .collect();
        Pair { a, b, lines }
    }
}

/// Pairs the groups of two sides: directly when each side is one measurement, by load when
/// each side is one variant, else by equal variant and load.
pub fn pair_up(
    a_name: &str,
    a: Vec<Group>,
    b_name: &str,
    b: Vec<Group>,
) -> Result<Vec<Pair>, CompareError> {
    if a.is_empty() {
        return Err(CompareError::Empty(a_name.into()));
    }
    if b.is_empty() {
        return Err(CompareError::Empty(b_name.into()));
    }
    if a.len() == 1 && b.len() == 1 {
        let (a, b) = (a.into_iter().next(), b.into_iter().next());
        return Ok(a.zip(b).map(|(a, b)| Pair::of(a, b)).into_iter().collect());
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
            Some(Pair::of(ga.clone(), gb.clone()))
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
