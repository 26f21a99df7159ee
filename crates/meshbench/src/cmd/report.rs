//! `meshbench report EXPERIMENT --out DIR`: the stored experiment's headline, charts and
//! per-step timelines as one self-contained HTML file, and each chart as SVG and PNG
//! (`common::html_report`, which `experiment --web` also writes
//! for the live page's report link), and one line saying where.

use anyhow::Result;

use super::common::html_report::write;
use super::common::stored::open_store;
use super::common::units::parse_duration;
use crate::cli::ReportArgs;
use crate::exit;

pub fn execute(args: ReportArgs) -> Result<u8> {
    let slo_p99_ms = match &args.slo_p99 {
        Some(s) => Some(parse_duration("--slo-p99", s)?.as_secs_f64() * 1000.0),
        None => None,
    };
    let store = open_store(&args.store)?;
    let written = write(&store, &args.experiment, slo_p99_ms, &args.out)?;
    outln!(
        "{} ({} charts, each also as SVG and PNG in {})",
        written.html.display(),
        written.svgs,
        args.out.join("plots").display()
    );
    Ok(exit::OK)
}
