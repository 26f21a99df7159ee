//! An experiment's HTML report, written where `meshbench report` is told to and where
//! `experiment --web` links it from the live page: report.html (headline, charts, per-step
//! timelines) and every chart as SVG and PNG in plots/.

use std::path::Path;

use anyhow::Result;
use meshbench_report::html::{self, Input, Written};
use meshbench_results::StepFailure;
use meshbench_store::Store;

use super::stored::{find_experiment, headline, show_command};
use crate::usage;

/// Writes the report of the experiment `key` names (id, name or `latest`) in `store` into
/// `out`: report.html and plots/.
pub fn write(store: &Store, key: &str, slo_p99_ms: Option<f64>, out: &Path) -> Result<Written> {
    let e = find_experiment(store, key)?;
    let h = headline(store, e.id)?;
    let steps = store.steps(e.id)?;
    let control_plane = steps.iter().any(|s| s.step.control_plane.is_some());
    if h.groups.is_empty() && !control_plane {
        return Err(usage(format!(
            "experiment {} has no measured step to report (`{}` lists why)",
            e.id,
            show_command(e.id, store.path())
        )));
    }
    let failed = steps
        .iter()
        .filter(|s| s.step.failed())
        .map(|s| {
            format!(
                "step {} ({}): {}",
                s.step.seq + 1,
                s.step.variant,
                s.step
                    .error
                    .as_ref()
                    .map(StepFailure::to_string)
                    .unwrap_or_default()
            )
        })
        .collect();
    let report = html::build(&Input {
        name: &e.name,
        id: e.id,
        started_at: &e.started_at,
        status: e.status.as_str(),
        headline: &h,
        warmup_secs: e.config["warmup_secs"].as_f64().unwrap_or(0.0),
        slo_p99_ms,
        failed,
        steps: &steps,
    });
    Ok(html::write(&report, out)?)
}
