//! Running an experiment's steps into the store, as every command that runs one does
//! (`experiment`, here or on a cluster, `k8s run`, the demo): the warnings said before the
//! first step, the progress on stderr, the step table and one closing line at the end, and the
//! exit code (a signal's, else 1 if a step failed); and the same closing for a capacity
//! search's stored experiment.

use std::io::Write;
use std::path::Path;

use anyhow::Result;
use meshbench_experiment::Experiment;
use meshbench_runner::agents::Fleet;
use meshbench_runner::{Finished, Site};
use meshbench_store::{StepRecord, Store};

use super::faces::Faces;
use super::progress::{human_secs, Progress};
use super::signals::Signals;
use super::stored::show_command;
use super::tables::tables;
use crate::exit;

/// One line when the steps are too short for any verdict on a difference: each needs
/// [`verdict::needed`](meshbench_analysis::verdict::needed) one-second intervals a side, or as
/// many repeats (the verdict's own rule, `verdict::enough_for`).
pub fn short_steps(e: &Experiment) -> Option<String> {
    use meshbench_analysis::verdict::{enough_for, needed};
    if enough_for(e.duration_secs, e.repeats) {
        return None;
    }
    let n = needed();
    let seconds = e.duration_secs.max(0.0).floor();
    Some(format!(
        "duration_secs={} gives each step {seconds} whole one-second interval{} and there {} {} repeat{}: a verdict on a difference (the latency added over the baseline, `compare`) needs {n} a side, so every one will say \"too short\"; set duration_secs={n} or more, or repeats={n}",
        e.duration_secs,
        if seconds == 1.0 { "" } else { "s" },
        if e.repeats == 1 { "is" } else { "are" },
        e.repeats,
        if e.repeats == 1 { "" } else { "s" },
    ))
}

/// Runs every step of `e` into `store_path` with a progress line, prints the step table and
/// a closing line; returns what was stored and the exit code (a signal's, or 1 if a step
/// failed). Live faces, if any, see every step; `site` says where the steps are realised and
/// `fleet` who sends their load (this process when there is none).
#[allow(clippy::too_many_arguments)]
pub fn run(
    e: &Experiment,
    store_path: &Path,
    quiet: bool,
    faces: Option<&Faces>,
    site: Site,
    fleet: Option<Fleet>,
    signals: &Signals,
) -> Result<(Finished, u8)> {
    // What the dry run says, said again before anything starts: too short for a verdict,
    // and a program missing (its steps will fail; the others still run). Not for a store that
    // cannot be opened: the run stops at once with that store's one line.
    if Store::open(store_path).is_ok() {
        if let Some(w) = short_steps(e) {
            errln!("warning: {w}");
        }
        for missing in meshbench_runner::setup::missing_programs(e) {
            errln!("warning: {missing}; the steps that need it will fail");
        }
    }
    let mut progress = Progress::new(quiet, &e.name, store_path);
    progress.hub = faces.map(|f| &f.hub);
    let done = meshbench_runner::run_experiment(
        e,
        store_path,
        site,
        fleet,
        signals.stop.clone(),
        &mut progress,
    )?;
    let code = exit_code(signals, &done);
    print_finished(&done);
    Ok((done, code))
}

/// A finished experiment's exit code: the signal's that stopped it, else 1 if a step failed.
pub fn exit_code(signals: &Signals, done: &Finished) -> u8 {
    signals.exit_code().unwrap_or(if done.failed() > 0 {
        exit::FAILED
    } else {
        exit::OK
    })
}

/// The step table on stdout and one closing line on stderr, ending with the command that
/// shows the experiment again from the store it is in.
pub fn print_finished(done: &Finished) {
    let records: Vec<&StepRecord> = done.steps.iter().collect();
    out!("{}", tables(&records));
    let _ = std::io::stdout().flush();
    let stopped = match done.stopped_before_load() {
        0 => String::new(),
        n => format!(", {n} not measured (set up when the stop came)"),
    };
    errln!(
        "experiment {} {} in {}: {} steps stored, {} failed{stopped}; `{}`",
        done.id,
        done.status,
        human_secs(done.elapsed.as_secs_f64()),
        done.steps.len(),
        done.failed(),
        show_command(done.id, &done.store)
    );
}
