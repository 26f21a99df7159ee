//! `meshbench report EXPERIMENT --out DIR`: the stored experiment's headline, charts and
//! per-step timelines as one self-contained HTML file, and each chart as SVG and PNG.

use anyhow::Result;
use meshbench_report::html::{self, Input};

use super::answers::{headline, open_store};
use crate::cli::ReportArgs;
use crate::{exit, usage};

pub fn execute(args: ReportArgs) -> Result<u8> {
    let slo_p99_ms = match &args.slo_p99 {
        Some(s) => Some(super::parse_duration("--slo-p99", s)?.as_secs_f64() * 1000.0),
        None => None,
    };
    let store = open_store(&args.store)?;
    let e = store
        .experiment(&args.experiment)
        .map_err(|e| usage(e.to_string()))?;
    let h = headline(&store, e.id)?;
    if h.groups.is_empty() {
        return Err(usage(format!(
            "experiment {} has no measured step to report (`meshbench results show {}` lists why)",
            e.id, e.id
        )));
    }
    let failed = store
        .steps(e.id)?
        .into_iter()
        .filter(|s| s.step.failed())
        .map(|s| {
            format!(
                "step {} ({}): {}",
                s.step.seq + 1,
                s.step.variant,
                s.step.error.unwrap_or_default()
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
    });
    let written = html::write(&report, &args.out)?;
    outln!(
        "{} ({} charts, each also as SVG and PNG in {})",
        written.html.display(),
        written.svgs,
        args.out.join("plots").display()
    );
    Ok(exit::OK)
}
