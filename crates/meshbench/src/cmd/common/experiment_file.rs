//! An experiment file as every command that runs one reads it (`experiment`, `capacity
//! --experiment`, `k8s run`, `gen k8s`, the demo's embedded preset): its `--set` overrides
//! applied, every mistake at once as bad input (exit 2), old words and stand-ins said in one
//! `note:` line each.

use std::path::Path;

use anyhow::Result;
use meshbench_experiment::Experiment;
use meshbench_runner::setup::Provision;

use crate::cli::ExperimentArgs;
use crate::usage;

/// The file of `meshbench experiment` (also with `--detach`): read for a plan with
/// `--dry-run`, else with a missing Envoy installed; with `--installed-only`, the gateways not
/// installed here left out, one `note:` line each.
pub fn load_args(args: &ExperimentArgs) -> Result<Experiment> {
    let provision = match args.dry_run {
        true => Provision::Plan,
        false => Provision::Install,
    };
    let mut e = load(&args.file, &args.set, provision)?;
    if args.installed_only {
        for line in meshbench_runner::setup::leave_out_missing_gateways(&mut e) {
            errln!("note: {line}");
        }
    }
    Ok(e)
}

/// Reads an experiment file with its `--set` overrides; every mistake is bad input (exit 2),
/// including external requests that cannot be built (a `.proto` that does not compile, a body
/// that is not its message). A missing Envoy is installed or stood in for as `provision` says.
pub fn load(file: &Path, set: &[String], provision: Provision) -> Result<Experiment> {
    let mut e = meshbench_experiment::load(file, set).map_err(|err| usage(err.to_string()))?;
    for note in &e.old_words {
        // A note is one line: tests and scripts collect the `note:` lines.
        eprintln!("note: {}: {note}", file.display());
    }
    announce_stand_ins(&mut e, provision);
    let problems = meshbench_runner::place::external::request_problems(&e);
    if problems.is_empty() {
        return Ok(e);
    }
    let file = file.display();
    Err(usage(format!(
        "{file}: {}",
        problems.join(&format!("\n{file}: "))
    )))
}

/// Installs a missing Envoy (`Provision::Install`) and puts the file's fallbacks in place of
/// programs that still cannot run here, saying so, one line each (the presets name Envoy, with
/// nginx where it cannot be installed).
pub fn announce_stand_ins(e: &mut Experiment, provision: Provision) {
    for note in meshbench_runner::setup::stand_ins(e, provision) {
        eprintln!("note: {note}");
    }
}
