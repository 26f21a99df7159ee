//! `meshbench results list|show|export`: the results store read back, as the step table (the
//! one a run prints, `common::tables`), as JSON, as Istio
//! perf/benchmark CSV, as SMP documents, or as one fortio JSON file per step.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};
use meshbench_store::StepRecord;

use super::common::stored::{changes_text, find_experiment, headline, open_store};
use super::common::tables::tables;
use crate::cli::{ExportFormat, ResultsCommand, StoreArg};
use crate::exit;

pub fn execute(c: ResultsCommand) -> Result<u8> {
    match c {
        ResultsCommand::List(s) => list(&s),
        ResultsCommand::Show(a) => show(&a.experiment, &a.store),
        ResultsCommand::Export(a) => export(&a.experiment, a.format, a.out.as_deref(), &a.store),
    }
}

/// Every experiment, newest first; its status says when a step failed or was cut short
/// (`partial 2/3: failed at step 2`), never `done` over a failed step.
fn list(s: &StoreArg) -> Result<u8> {
    let store = open_store(s)?;
    let experiments = store.experiments()?;
    let outcomes: Vec<String> = experiments.iter().map(|e| e.outcome()).collect();
    let width = outcomes.iter().map(|o| o.len()).max().unwrap_or(0).max(12);
    outln!(
        "{:>4}  {:<24} {:<21} {:<width$} {:>5}",
        "id",
        "name",
        "started",
        "status",
        "steps"
    );
    for (e, outcome) in experiments.iter().zip(&outcomes) {
        outln!(
            "{:>4}  {:<24} {:<21} {:<width$} {:>5}",
            e.id,
            e.name,
            e.started_at,
            outcome,
            e.steps
        );
    }
    Ok(exit::OK)
}

fn show(key: &str, s: &StoreArg) -> Result<u8> {
    let store = open_store(s)?;
    let e = find_experiment(&store, key)?;
    let steps = store.steps(e.id)?;
    outln!(
        "experiment {} '{}' ({}), started {}, meshbench {}",
        e.id,
        e.name,
        e.outcome(),
        e.started_at,
        e.meshbench_version
    );
    if let Some(v) = steps.first().map(|s| &s.step.versions) {
        outln!("versions: {}", serde_json::to_string(v)?);
    }
    // Who read the roles, once when every step says the same, else per step.
    let sources: Vec<(usize, String)> = steps
        .iter()
        .enumerate()
        .filter_map(|(i, s)| Some((i + 1, s.step.usage_source?.to_string())))
        .collect();
    let distinct: std::collections::BTreeSet<&str> =
        sources.iter().map(|(_, s)| s.as_str()).collect();
    match distinct.iter().collect::<Vec<_>>().as_slice() {
        [] => {}
        [one] => outln!("roles read by: {one}"),
        _ => {
            for (step, source) in &sources {
                outln!("roles read by (step {step}): {source}");
            }
        }
    }
    let records: Vec<&StepRecord> = steps.iter().map(|s| &s.step).collect();
    out!("{}", tables(&records));
    let h = headline(&store, e.id)?;
    out!("{}", meshbench_report::answers::headline_text(&h));
    out!(
        "{}",
        meshbench_report::attribution::text(&meshbench_analysis::attribution::by_variant(&steps))
    );
    out!("{}", changes_text(&steps));
    out!("{}", meshbench_report::changes::per_change(&steps));
    Ok(exit::OK)
}

fn export(key: &str, format: ExportFormat, out: Option<&Path>, s: &StoreArg) -> Result<u8> {
    let store = open_store(s)?;
    let e = find_experiment(&store, key)?;
    let steps = store.steps(e.id)?;
    let write = |text: String| -> Result<()> {
        match out {
            Some(p) => {
                std::fs::write(p, text).with_context(|| format!("cannot write {}", p.display()))
            }
            None => {
                std::io::stdout().write_all(text.as_bytes())?;
                Ok(())
            }
        }
    };
    match format {
        ExportFormat::Csv => write(meshbench_report::export::istio_csv(&steps))?,
        ExportFormat::Json => {
            let mut doc = serde_json::json!({ "experiment": e, "steps": steps });
            // Only when a step had attribution on: without it the document is as it was.
            let attribution = meshbench_analysis::attribution::by_variant(&steps);
            if !attribution.is_empty() {
                doc["attribution"] = serde_json::to_value(attribution)?;
            }
            write(serde_json::to_string_pretty(&doc)? + "\n")?;
        }
        ExportFormat::Smp => {
            let doc = meshbench_report::smp::smp(&e, &steps);
            write(serde_json::to_string_pretty(&doc)? + "\n")?;
        }
        ExportFormat::Fortio => {
            let dir = out.ok_or_else(|| {
                crate::usage("--format fortio writes one file per step: give --out DIR")
            })?;
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            let mut n = 0;
            for step in &steps {
                let Some(doc) = meshbench_report::export::fortio_json(&e, step) else {
                    continue;
                };
                let path = dir.join(format!("{:03}_{}.json", step.step.seq + 1, step.step.label));
                std::fs::write(&path, serde_json::to_string_pretty(&doc)? + "\n")
                    .with_context(|| format!("cannot write {}", path.display()))?;
                n += 1;
            }
            errln!("{n} fortio JSON files in {}", dir.display());
        }
    }
    Ok(exit::OK)
}
