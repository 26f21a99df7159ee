//! What a run changed on a cluster, written down before each change, so that it can be put
//! back by whoever is left: the run itself at its end (also after an error or Ctrl-C), a
//! watcher process that outlives a killed run, or a person (`meshbench k8s restore`).
//!
//! The journal is a file of JSON lines: a header (the process that writes it, the kubeconfig
//! it reached the cluster with), then one [`Undo`] per change, each written and synced to
//! disk *before* the change is asked of the API server. A change that was recorded but never
//! made undoes to nothing (deleting what is not there is not an error). Once everything is
//! put back the file is removed: a journal on disk is a run not yet undone.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use meshbench_results::Stop;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::blocking::{ApiError, BlockingClient};
use crate::borrowed::{Borrowed, BorrowedError, WorkloadKind};
use crate::rollout::{Rollout, Workload};

/// One change to put back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "undo", rename_all = "snake_case")]
pub enum Undo {
    /// A namespace the run created: deleted, and everything in it.
    DeleteNamespace { name: String },
    /// A local directory the run made for its files (the gateway's targets and CA): removed,
    /// with what is in it, by whoever puts the run back on the machine the run ran on.
    RemoveDir { path: PathBuf },
    /// A container of a workload the run does not own (the cluster's Contour, its Envoy),
    /// whose `resources` the run changes: `before` is the whole field as it was before the
    /// run's first change (`{}` when it had none). Put back exactly (a JSON patch), then the
    /// workload's rollout waited for; a workload gone since is nothing to put back.
    RestoreResources {
        namespace: String,
        kind: WorkloadKind,
        name: String,
        container: String,
        before: serde_json::Value,
    },
}

/// The journal's first line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    /// The process that writes it; while it lives, nobody else undoes its run.
    pub pid: u32,
    pub kubeconfig: Option<PathBuf>,
}

/// Why a journal could not be written, read or undone.
#[derive(Debug, Error)]
pub enum UndoError {
    /// The journal's file (or its directory) could not be written or read.
    #[error("{}: {error}", path.display())]
    File {
        path: PathBuf,
        error: std::io::Error,
    },
    /// A file that is not a journal: its first line is not a header.
    #[error("{}: not a meshbench journal (no header line)", path.display())]
    NotAJournal { path: PathBuf },
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error("namespace {name} was still there {} s after it was deleted", waited.as_secs())]
    NotGone { name: String, waited: Duration },
    /// A hurried stop ended the wait for the namespace to go; its deletion was asked.
    #[error("namespace {name} is being deleted; not waited for (hurried)")]
    NotWaited { name: String },
    /// A borrowed workload's resources could not be put back.
    #[error("putting back the resources of {0}")]
    Borrowed(#[from] BorrowedError),
    /// Its resources were put back, but its rollout did not finish in time (or was not waited
    /// for: a hurried stop).
    #[error("{what}: its resources are put back, but its rollout did not finish within {} s: {why}", waited.as_secs())]
    NotRolledBack {
        what: String,
        waited: Duration,
        why: String,
    },
}

/// A run's journal, open for writing.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    file: std::fs::File,
    /// What was recorded, in order.
    undos: Vec<Undo>,
}

fn file_error(path: &Path) -> impl FnOnce(std::io::Error) -> UndoError + '_ {
    move |error| UndoError::File {
        path: path.to_path_buf(),
        error,
    }
}

impl Journal {
    /// A new journal at `path` (its directory made if missing), its header written.
    pub fn create(path: &Path, header: &Header) -> Result<Journal, UndoError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(file_error(dir))?;
        }
        let file = std::fs::File::create(path).map_err(file_error(path))?;
        let mut j = Journal {
            path: path.to_path_buf(),
            file,
            undos: Vec::new(),
        };
        j.line(&serde_json::to_string(header).expect("a header serialises"))?;
        Ok(j)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records a change about to be made; returns once it is on disk.
    pub fn record(&mut self, undo: &Undo) -> Result<(), UndoError> {
        self.line(&serde_json::to_string(undo).expect("an undo serialises"))?;
        self.undos.push(undo.clone());
        Ok(())
    }

    /// Every change recorded so far, in order.
    pub fn undos(&self) -> &[Undo] {
        &self.undos
    }

    fn line(&mut self, text: &str) -> Result<(), UndoError> {
        writeln!(self.file, "{text}")
            .and_then(|()| self.file.sync_data())
            .map_err(file_error(&self.path))
    }

    /// Everything put back: the journal goes.
    pub fn close(self) -> Result<(), UndoError> {
        std::fs::remove_file(&self.path).map_err(file_error(&self.path))
    }
}

/// A journal as read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    pub header: Header,
    pub undos: Vec<Undo>,
}

/// Reads a journal; a last line cut short (the writer killed mid-line) is left out.
pub fn read(path: &Path) -> Result<Recorded, UndoError> {
    let text = std::fs::read_to_string(path).map_err(file_error(path))?;
    let mut lines = text.lines();
    let header = lines
        .next()
        .and_then(|l| serde_json::from_str::<Header>(l).ok())
        .ok_or_else(|| UndoError::NotAJournal {
            path: path.to_path_buf(),
        })?;
    let undos = lines
        .filter_map(|l| serde_json::from_str::<Undo>(l).ok())
        .collect();
    Ok(Recorded { header, undos })
}

/// The longest a namespace is waited for once a stop was asked (before or during the wait):
/// whoever asked waits no longer (the namespace controller takes about 5 s).
pub const GONE_AFTER_STOP_WITHIN: Duration = Duration::from_secs(30);

/// Puts back every change of `undos`, the last first, each waited for at most `within`;
/// `progress` hears each one as it is done.
///
/// It is cleanup, so a stop does not skip it: every deletion is asked whatever `stop` says.
/// Only the wait for a namespace to be gone is shortened: to [`GONE_AFTER_STOP_WITHIN`] once a
/// stop is asked, and ended at once by a *hurried* stop (a second Ctrl-C); the API server
/// finishes the deletion by itself, the error ([`UndoError::NotGone`], [`UndoError::NotWaited`])
/// says so, and the journal stays for whoever sees it gone (the watcher, `meshbench k8s
/// restore`).
pub fn restore(
    client: &BlockingClient,
    undos: &[Undo],
    within: Duration,
    stop: &Stop,
    mut progress: impl FnMut(&str),
) -> Result<(), UndoError> {
    // Each change is put back whatever became of the others; the first failure is the answer.
    let mut first_error = None;
    for undo in undos.iter().rev() {
        if let Err(e) = restore_one(client, undo, within, stop, &mut progress) {
            first_error.get_or_insert(e);
        }
    }
    match first_error {
        None => Ok(()),
        Some(e) => Err(e),
    }
}

/// Puts back one change.
fn restore_one(
    client: &BlockingClient,
    undo: &Undo,
    within: Duration,
    stop: &Stop,
    progress: &mut impl FnMut(&str),
) -> Result<(), UndoError> {
    match undo {
        Undo::DeleteNamespace { name } => {
            if client.get_cluster_scoped::<Namespace>(name)?.is_none() {
                return Ok(());
            }
            // The namespace first, so that no controller makes a pod anew in it (a Job
            // replaces its deleted pods), then its pods with no grace: a namespace waits
            // for its slowest pod.
            client.delete_namespace(name)?;
            client.delete_pods(name, "", Duration::ZERO)?;
            let began = Instant::now();
            while client.get_cluster_scoped::<Namespace>(name)?.is_some() {
                let limit = match stop.requested() {
                    true => within.min(GONE_AFTER_STOP_WITHIN),
                    false => within,
                };
                if began.elapsed() >= limit {
                    return Err(UndoError::NotGone {
                        name: name.clone(),
                        waited: limit,
                    });
                }
                if !sleep_unless_hurried(GONE_POLL, stop) {
                    return Err(UndoError::NotWaited { name: name.clone() });
                }
            }
            progress(&format!(
                "deleted namespace {name} and everything in it ({:.0} s)",
                began.elapsed().as_secs_f64()
            ));
        }
        Undo::RemoveDir { path } => match std::fs::remove_dir_all(path) {
            Ok(()) => progress(&format!("removed {}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => {
                return Err(UndoError::File {
                    path: path.clone(),
                    error,
                })
            }
        },
        Undo::RestoreResources {
            namespace,
            kind,
            name,
            container,
            before,
        } => {
            let borrowed = Borrowed {
                namespace: namespace.clone(),
                kind: *kind,
                name: name.clone(),
                container: container.clone(),
            };
            let began = Instant::now();
            match borrowed.set_resources(client, before) {
                // Gone since (deleted by its owner): nothing of it to put back.
                Err(BorrowedError::NoWorkload(_)) => return Ok(()),
                done => done?,
            }
            wait_rolled_back(client, &borrowed, within, stop)?;
            progress(&format!(
                "put back the resources of {borrowed} as they were: {before} ({:.0} s)",
                began.elapsed().as_secs_f64()
            ));
        }
    }
    Ok(())
}

/// Waits for the rollout of a workload whose resources were put back, as long as a namespace
/// is waited for ([`GONE_AFTER_STOP_WITHIN`] once a stop is asked; a hurried stop not at all).
fn wait_rolled_back(
    client: &BlockingClient,
    borrowed: &Borrowed,
    within: Duration,
    stop: &Stop,
) -> Result<(), UndoError> {
    use k8s_openapi::api::core::v1::Pod;
    let began = Instant::now();
    loop {
        let Some(w) = Workload::get(client, borrowed.kind, &borrowed.namespace, &borrowed.name)?
        else {
            return Ok(());
        };
        let pods = client.list::<Pod>(&borrowed.namespace, &w.selector())?;
        let why = match w.progress(&pods) {
            Rollout::Done => return Ok(()),
            Rollout::Waiting(why) => why,
        };
        let limit = match stop.requested() {
            true => within.min(GONE_AFTER_STOP_WITHIN),
            false => within,
        };
        let not_rolled_back = |waited| UndoError::NotRolledBack {
            what: borrowed.to_string(),
            waited,
            why: why.clone(),
        };
        if began.elapsed() >= limit {
            return Err(not_rolled_back(limit));
        }
        if !sleep_unless_hurried(GONE_POLL, stop) {
            return Err(not_rolled_back(began.elapsed()));
        }
    }
}

/// How often a namespace being deleted is looked for.
const GONE_POLL: Duration = Duration::from_millis(200);

/// Sleeps `d`, looking at `stop` every 20 ms; `false` when it was hurried.
fn sleep_unless_hurried(d: Duration, stop: &Stop) -> bool {
    let end = Instant::now() + d;
    while !stop.hurried() {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return true;
        }
        std::thread::sleep(left.min(Duration::from_millis(20)));
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_journal_reads_back_what_was_recorded_and_a_torn_last_line_is_left_out() {
        let dir = std::env::temp_dir().join(format!("mb-undo-{}", std::process::id()));
        let path = dir.join("run.jsonl");
        let header = Header {
            pid: 42,
            kubeconfig: Some("/k".into()),
        };
        let mut j = Journal::create(&path, &header).unwrap();
        let undo = Undo::DeleteNamespace {
            name: "bench".into(),
        };
        j.record(&undo).unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"{\"undo\":\"delete_nam")
            .unwrap();
        let back = read(&path).unwrap();
        assert_eq!(back.header, header);
        assert_eq!(back.undos, [undo]);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains("{\"undo\":\"delete_namespace\",\"name\":\"bench\"}\n"),
            "{text}"
        );
        j.close().unwrap();
        assert!(!path.exists());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
