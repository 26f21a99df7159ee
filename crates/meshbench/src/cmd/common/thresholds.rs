//! `--threshold METRIC<VALUE` (run, experiment, compare): read before anything runs (a bad one
//! is bad input, exit 2) and checked at the end, one line each on stdout.

use anyhow::Result;
use meshbench_analysis::headline::{observe, Headline};
use meshbench_analysis::threshold::{self, Metric, Threshold};

use crate::usage;

/// Reads `--threshold` flags; a bad one is a usage error.
pub fn parse_thresholds(texts: &[String]) -> Result<Vec<Threshold>> {
    texts
        .iter()
        .map(|t| t.parse::<Threshold>().map_err(|e| usage(e.to_string())))
        .collect()
}

/// Checks every threshold, printing one line each; true when all hold.
pub fn check(thresholds: &[Threshold], observe: impl Fn(Metric) -> Vec<(String, f64)>) -> bool {
    let mut ok = true;
    for t in thresholds {
        let o = threshold::check(t, observe(t.metric));
        ok &= o.passed;
        outln!("{o}");
    }
    ok
}

/// Checks thresholds against an experiment's (or a run's) headline.
pub fn check_headline(thresholds: &[Threshold], h: &Headline) -> bool {
    check(thresholds, |m| observe(h, m))
}
