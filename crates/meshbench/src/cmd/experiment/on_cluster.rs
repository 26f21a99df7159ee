//! `meshbench experiment FILE` for a file with a `cluster:` section, whose steps are realised
//! on a Kubernetes cluster ([`meshbench_runner::place::cluster`]): its `--dry-run` checks against the
//! cluster, and the run, set up and put back by the runner with a watcher beside it
//! (`common::journal`) that puts back what a killed run left.

use std::net::TcpListener;
use std::path::Path;

use anyhow::Result;
use meshbench_experiment::cluster::ClusterSection;
use meshbench_experiment::Experiment;
use meshbench_runner::place::cluster::preflight::PreflightError;
use meshbench_runner::place::cluster::{self, ClusterSite, Coordinator, SiteError};
use meshbench_runner::{Finished, Site};

use crate::cli::ExperimentArgs;
use crate::cmd::common::faces::Faces;
use crate::cmd::common::fleet::token_for_pods;
use crate::cmd::common::journal::{restore_ended, Watcher};
use crate::cmd::common::progress::Progress;
use crate::cmd::common::session;
use crate::cmd::common::signals::Signals;
use crate::{exit, usage};

/// `--dry-run`: every object and change the run would make, what the cluster lacks (Istio
/// not installed is an error, as a missing program is for the lab), and the checks a run
/// makes before its first step (meshbench's image on each node the plan uses, the path to the
/// roles' figures), in a namespace made for them and deleted again (a watcher beside, as for
/// a run).
pub fn dry_run(e: &Experiment, section: &ClusterSection, store_path: &Path) -> Result<u8> {
    out!("{}", cluster::describe(e, section, "<the agents' token>"));
    let client = cluster::connect(section)
        .map_err(|err| anyhow::anyhow!("the plan cannot be checked against the cluster: {err}"))?;
    let missing = cluster::missing_on_cluster(&client, e)
        .map_err(|err| anyhow::anyhow!("the plan cannot be checked against the cluster: {err}"))?;
    if !missing.is_empty() {
        return Err(anyhow::anyhow!(
            "the plan cannot run on this cluster: {}",
            missing.join("; and ")
        ));
    }
    restore_ended(&cluster::journal_dir(store_path));
    let journal = cluster::journal_path(store_path);
    let watcher = Watcher::start(&journal)?;
    let signals = Signals::install()?;
    let checked = cluster::check_for_dry_run(e, &journal, &signals.stop);
    watcher.finish();
    let preflight = checked.map_err(|err| site_error(err, &signals))?;
    for (key, value) in preflight.versions() {
        outln!("# checked: {key}: {value}");
    }
    Ok(exit::OK)
}

/// A cluster run that could not start, as the binary says it: a file the cluster cannot
/// satisfy is bad input (exit 2), a stop is the signal's line, anything else one line.
fn site_error(err: SiteError, signals: &Signals) -> anyhow::Error {
    match err {
        SiteError::Stopped { during, put_back } => {
            signals.interrupted(format_args!("in the bring-up ({during}): {put_back}"))
        }
        SiteError::Preflight(PreflightError::Impossible(why)) => usage(why),
        SiteError::Preflight(err) => anyhow::anyhow!("the run cannot start on this cluster: {err}"),
        err => err.into(),
    }
}

/// Sets the cluster up (a watcher beside), runs every step there, puts it back.
pub fn run(
    e: &Experiment,
    args: &ExperimentArgs,
    store_path: &Path,
    faces: Option<&Faces>,
) -> Result<(Finished, u8)> {
    let section = e.cluster.as_ref().expect("a cluster experiment");
    restore_ended(&cluster::journal_dir(store_path));
    let (token, token_text) = token_for_pods(args.agents.auth.token_file.as_deref())?;
    // Without `cluster.coordinator` the agents are reached through the API server: nothing
    // listens here.
    let listener = match section.coordinator_port() {
        Some(port) => {
            let listen = e
                .agents
                .as_ref()
                .and_then(|a| a.listen.clone())
                .unwrap_or_else(|| format!("0.0.0.0:{port}"));
            Some(TcpListener::bind(&listen).map_err(|err| {
                usage(format!(
                    "agents.listen {listen}: the agent pods' coordinator cannot listen there: {err}"
                ))
            })?)
        }
        None => None,
    };
    let journal = cluster::journal_path(store_path);
    let watcher = Watcher::start(&journal)?;
    let signals = Signals::install()?;
    let text = std::fs::read_to_string(&args.file).unwrap_or_default();
    let mut progress = Progress::new(args.quiet, &e.name, store_path);
    let started = ClusterSite::start(
        e,
        &text,
        &journal,
        Coordinator {
            listener,
            token,
            token_text,
        },
        &signals.stop,
        &mut progress,
    );
    let outcome = match started {
        Ok((site, fleet)) => {
            let site = Site::Cluster(Box::new(site));
            session::run(
                e,
                store_path,
                args.quiet,
                faces,
                site,
                Some(fleet),
                &signals,
            )
        }
        // Nothing was measured, and the cluster is put back: one line (and the signal's code).
        Err(err) => Err(site_error(err, &signals)),
    };
    watcher.finish();
    outcome
}
