//! A cluster run's journal, where its undo list is kept, and what reads it back: the watcher
//! a cluster run starts beside itself, and the restore of the journals whose runs ended without
//! putting everything back (before the next cluster run, by `meshbench k8s restore`, by a
//! detached run's restarted coordinator).
//!
//! Before anything is applied, a watcher starts beside the run in a session of its own (a
//! Ctrl-C to the run's process group does not reach it): this binary's `k8s restore
//! --when-stdin-closes JOURNAL`, whose standard input is a pipe only this process holds. When
//! this process ends, however it ends, the pipe closes. A run that put everything back has
//! removed its journal and the watcher has nothing to do; a killed run's journal is still
//! there, and the watcher undoes it. The watcher's lines go to `JOURNAL.log`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result};
use meshbench_k8s::undo;

/// How long a restore waits for a namespace to go.
const GONE_WITHIN: Duration = Duration::from_secs(180);

/// The watcher of one run's journal.
pub struct Watcher {
    child: Child,
    journal: PathBuf,
    log: PathBuf,
}

impl Watcher {
    pub fn start(journal: &Path) -> Result<Watcher> {
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
    pub fn finish(mut self) {
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
pub fn restore_ended(dir: &Path) {
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
pub fn ended_journals(dir: &Path) -> Vec<PathBuf> {
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
pub fn restore_one(path: &Path) -> Result<()> {
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
