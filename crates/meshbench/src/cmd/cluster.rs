//! `meshbench experiment FILE` for a file with a `cluster:` section, whose steps are realised
//! on a Kubernetes cluster ([`meshbench_runner::cluster`]), and `meshbench k8s restore`, which
//! puts back what a killed run left, from its journal.
//!
//! Before anything is applied, a watcher starts beside the run in a session of its own (a
//! Ctrl-C to the run's process group does not reach it): this binary's `k8s restore
//! --when-stdin-closes JOURNAL`, whose standard input is a pipe only this process holds. When
//! this process ends, however it ends, the pipe closes. A run that put everything back has
//! removed its journal and the watcher has nothing to do; a killed run's journal is still
//! there, and the watcher undoes it. The watcher's lines go to `JOURNAL.log`.

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result};
use meshbench_experiment::cluster::Cluster;
use meshbench_experiment::Experiment;
use meshbench_k8s::undo;
use meshbench_runner::cluster::preflight::{NodeFacts, PreflightError};
use meshbench_runner::cluster::{self, ClusterSite, Coordinator, SiteError};
use meshbench_runner::{Finished, Site};

use super::experiment::Progress;
use super::live::Faces;
use super::signals::Signals;
use crate::cli::{ExperimentArgs, K8sRestoreArgs};
use crate::{exit, usage};

/// How long a restore waits for a namespace to go.
const GONE_WITHIN: Duration = Duration::from_secs(180);

/// `--dry-run`: every object and change the run would make, what the cluster lacks (Istio
/// not installed is an error, as a missing program is for the lab), and the checks a run
/// makes before its first step (meshbench's image on each node the plan uses, the path to the
/// roles' figures), in a namespace made for them and deleted again (a watcher beside, as for
/// a run).
pub fn dry_run(e: &Experiment, section: &Cluster, store_path: &Path) -> Result<u8> {
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
    let (token, token_text) = super::k8s::token_for_pods(args.agents.auth.token_file.as_deref())?;
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
            super::experiment::run(
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

/// The watcher of one run's journal.
struct Watcher {
    child: Child,
    journal: PathBuf,
    log: PathBuf,
}

impl Watcher {
    fn start(journal: &Path) -> Result<Watcher> {
        let exe = std::env::current_exe().context("finding meshbench's own binary")?;
        if let Some(dir) = journal.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let log_path = journal.with_extension("log");
        let log = std::fs::File::create(&log_path)
            .with_context(|| format!("creating {}", log_path.display()))?;
        let mut cmd = Command::new(exe);
        cmd.args(["k8s", "restore", "--when-stdin-closes"])
            .arg(journal)
            .stdin(Stdio::piped())
            .stdout(log.try_clone()?)
            .stderr(log);
        // A session of its own: the terminal's Ctrl-C goes to the run's process group only.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let child = cmd.spawn().context("starting the cluster run's watcher")?;
        Ok(Watcher {
            child,
            journal: journal.to_path_buf(),
            log: log_path,
        })
    }

    /// The run is over. If it put everything back, the watcher finds nothing to do and its
    /// empty log goes; if not (a namespace not yet gone when the run stopped waiting), the
    /// watcher finishes it on its own, and this process does not wait for it.
    fn finish(mut self) {
        drop(self.child.stdin.take());
        if self.journal.exists() {
            errln!(
                "meshbench: the run's watcher (pid {}) finishes it (else `meshbench k8s restore`)",
                self.child.id()
            );
            errln!("meshbench: the watcher's log: {}", self.log.display());
            return;
        }
        let _ = self.child.wait();
        if std::fs::metadata(&self.log).is_ok_and(|m| m.len() == 0) {
            let _ = std::fs::remove_file(&self.log);
        }
    }
}

/// Undoes the journals in `dir` whose runs have ended (their process is gone), one line each.
pub(crate) fn restore_ended(dir: &Path) {
    for path in ended_journals(dir) {
        errln!(
            "meshbench: a cluster run ended without putting everything back ({}); doing it now",
            path.display()
        );
        if let Err(err) = restore_one(&path) {
            errln!("meshbench: warning: {err:#}");
        }
    }
}

/// The journals in `dir` whose runs have ended: their process is gone, or the file is not a
/// journal that names one.
fn ended_journals(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .filter(|p| {
            undo::read(p).map_or(true, |r| {
                !Path::new(&format!("/proc/{}", r.header.pid)).exists()
            })
        })
        .collect();
    out.sort();
    out
}

/// Undoes one journal and removes it.
fn restore_one(path: &Path) -> Result<()> {
    let recorded = undo::read(path)?;
    let client = meshbench_k8s::BlockingClient::connect(recorded.header.kubeconfig.as_deref())?;
    // Nobody stops a restore: it is what is left to do.
    let stop = meshbench_engine::Stop::new();
    undo::restore(&client, &recorded.undos, GONE_WITHIN, &stop, |line| {
        errln!("meshbench: {line}")
    })?;
    std::fs::remove_file(path).with_context(|| format!("removing {}", path.display()))?;
    errln!("meshbench: {} undone", path.display());
    Ok(())
}

/// `meshbench k8s restore`.
pub fn restore(a: K8sRestoreArgs) -> Result<u8> {
    if a.when_stdin_closes {
        // Until the run that started this ends, however it ends.
        let mut sink = [0u8; 64];
        let mut stdin = std::io::stdin();
        while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
    }
    let paths = if a.journals.is_empty() {
        let store = a
            .store
            .clone()
            .unwrap_or_else(meshbench_store::default_path);
        ended_journals(&cluster::journal_dir(&store))
    } else {
        a.journals.clone()
    };
    let mut failed = 0;
    for path in paths.iter().filter(|p| p.exists()) {
        if let Err(err) = restore_one(path) {
            errln!("meshbench: {}: {err:#}", path.display());
            failed += 1;
        }
    }
    Ok(if failed == 0 { exit::OK } else { exit::FAILED })
}

/// `meshbench k8s node-facts`: this node's kernel, CPU model and CPUs as one JSON line (what
/// a cluster run's check pods print, read back through the API server).
pub fn node_facts() -> Result<u8> {
    out!("{}", serde_json::to_string(&NodeFacts::here())?);
    Ok(exit::OK)
}
