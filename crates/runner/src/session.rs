//! An experiment being written to the store: steps are added one by one (by a plan, or by a
//! capacity search that picks each step from the last), each in its own transaction, and the
//! experiment is marked done or interrupted at the end. A step already stored is never lost,
//! whatever happens to the steps after it.
//!
//! A measured step the store refuses (its disk is full) is not lost either: it is written as
//! JSON to the temporary directory (`$TMPDIR`, else /tmp), usually another disk, and the
//! error ([`NotStored`]) says where; if that fails too, the error carries the JSON for the
//! caller to print. The experiment is then marked failed if the store still takes that much.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use meshbench_engine::Stop;
use meshbench_experiment::Experiment;
use meshbench_store::{ExperimentStatus, NewExperiment, StepRecord, Store, StoreError};

use crate::RunnerError;

/// The current time as the store keeps it (RFC 3339, UTC, seconds).
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

/// The store row of an experiment file about to run.
pub fn new_experiment(e: &Experiment) -> NewExperiment {
    NewExperiment {
        name: e.name.clone(),
        description: e.description.clone(),
        labels: e.labels.clone(),
        config: serde_json::to_value(e).expect("an experiment serialises"),
        started_at: now_rfc3339(),
        meshbench_version: env!("CARGO_PKG_VERSION").into(),
    }
}

pub struct Session {
    store: Store,
    pub id: i64,
    /// Set by Ctrl-C or SIGTERM (or by whoever drives the session): no further step starts.
    pub stop: Stop,
    steps: Vec<StepRecord>,
    started: Instant,
    /// Where a step the store refuses is written instead.
    keep_dir: PathBuf,
}

/// A measured step the store refused, and where its result went instead.
#[derive(Debug)]
pub struct NotStored {
    pub experiment: i64,
    /// 0-based, as stored.
    pub seq: u32,
    /// Steps of this experiment stored before it (all still in the store).
    pub stored: usize,
    pub why: StoreError,
    pub kept: Kept,
}

/// Where a step that could not be stored was kept.
#[derive(Debug)]
pub enum Kept {
    /// A JSON file: `{"store", "experiment", "step"}`, the step as `results export --format
    /// json` lists one (without `id` and `summary`).
    File(PathBuf),
    /// Nowhere: the file could not be written either (`why`); `json` is what it would hold,
    /// for the caller to print.
    Nowhere {
        dir: PathBuf,
        why: String,
        json: String,
    },
}

impl fmt::Display for NotStored {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let before = match self.stored {
            0 => "no step before it was stored".to_string(),
            1 => "the step before it is in the store".to_string(),
            n => format!("the {n} steps before it are in the store"),
        };
        write!(
            f,
            "step {} was measured but not stored: {}; {before} (experiment {}); ",
            self.seq + 1,
            self.why,
            self.experiment
        )?;
        match &self.kept {
            Kept::File(p) => write!(f, "its result is kept in {}", p.display()),
            Kept::Nowhere { dir, why, .. } => write!(
                f,
                "its result could not be written to {} either ({why}) and is printed on stdout",
                dir.display()
            ),
        }
    }
}

impl std::error::Error for NotStored {}

/// What a finished (or interrupted) experiment left.
#[derive(Debug)]
pub struct Finished {
    pub id: i64,
    /// The store it is in, for the command that shows it again.
    pub store: PathBuf,
    pub status: ExperimentStatus,
    pub steps: Vec<StepRecord>,
    pub elapsed: Duration,
}

impl Finished {
    /// The steps that failed; not the one a stop caught before its load began.
    pub fn failed(&self) -> usize {
        self.steps
            .iter()
            .filter(|s| s.failed() && !s.stopped_before_load())
            .count()
    }

    /// The step a stop caught while it was set up (0 or 1: the run ends there).
    pub fn stopped_before_load(&self) -> usize {
        self.steps
            .iter()
            .filter(|s| s.stopped_before_load())
            .count()
    }
}

impl Session {
    pub fn begin(
        store_path: &Path,
        new: &NewExperiment,
        stop: Stop,
    ) -> Result<Session, RunnerError> {
        let store = Store::open(store_path)?;
        let id = store.begin_experiment(new)?;
        Ok(Session {
            store,
            id,
            stop,
            steps: Vec::new(),
            started: Instant::now(),
            keep_dir: std::env::temp_dir(),
        })
    }

    /// Where a step the store refuses is kept (the temporary directory unless told).
    pub fn keep_unstored_in(&mut self, dir: PathBuf) {
        self.keep_dir = dir;
    }

    /// Stores a step; returns it as stored. A step the store refuses is kept elsewhere
    /// ([`NotStored`]) and the experiment is marked failed if the store still allows it.
    pub fn record(&mut self, record: StepRecord) -> Result<&StepRecord, RunnerError> {
        if let Err(why) = self.store.add_step(self.id, &record) {
            let kept = self.keep(&record, &why);
            let _ = self
                .store
                .finish_experiment(self.id, ExperimentStatus::Failed, &now_rfc3339());
            return Err(RunnerError::NotStored(Box::new(NotStored {
                experiment: self.id,
                seq: record.seq,
                stored: self.steps.len(),
                why,
                kept,
            })));
        }
        self.steps.push(record);
        Ok(self.steps.last().expect("pushed above"))
    }

    fn keep(&self, record: &StepRecord, why: &StoreError) -> Kept {
        let doc = serde_json::json!({
            "store": self.store.path(),
            "experiment": self.id,
            "not_stored_because": why.to_string(),
            "step": record,
        });
        let json = serde_json::to_string_pretty(&doc).expect("a step serialises") + "\n";
        let path = self.keep_dir.join(format!(
            "meshbench-unstored-{}-experiment{}-step{}.json",
            std::process::id(),
            self.id,
            record.seq + 1
        ));
        match std::fs::write(&path, &json) {
            Ok(()) => Kept::File(path),
            Err(e) => {
                // A half-written file would be mistaken for the result.
                let _ = std::fs::remove_file(&path);
                Kept::Nowhere {
                    dir: self.keep_dir.clone(),
                    why: e.to_string(),
                    json,
                }
            }
        }
    }

    /// Steps stored so far.
    pub fn steps(&self) -> &[StepRecord] {
        &self.steps
    }

    pub fn stopped(&self) -> bool {
        self.stop.requested()
    }

    /// Marks the experiment done, or interrupted if it was stopped.
    pub fn finish(self) -> Result<Finished, RunnerError> {
        let status = if self.stopped() {
            ExperimentStatus::Interrupted
        } else {
            ExperimentStatus::Done
        };
        self.store
            .finish_experiment(self.id, status, &now_rfc3339())?;
        Ok(Finished {
            id: self.id,
            store: self.store.path().to_path_buf(),
            status,
            steps: self.steps,
            elapsed: self.started.elapsed(),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use meshbench_results::{Protocol, StepParams};

    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("mb-session-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn session(store: &Path) -> Session {
        let new = NewExperiment {
            name: "t".into(),
            description: String::new(),
            labels: BTreeMap::new(),
            config: serde_json::json!({}),
            started_at: now_rfc3339(),
            meshbench_version: "0".into(),
        };
        Session::begin(store, &new, Stop::new()).unwrap()
    }

    fn step(seq: u32) -> StepRecord {
        let mut s = StepRecord::new(seq, StepParams::open(100.0, 2, Protocol::Http1));
        s.label = format!("t_{seq}");
        s
    }

    /// The store stops taking steps (its table gone: any refusal takes the same path as a
    /// full disk, which the store's and the binary's tests cause for real).
    fn break_store(store: &Path) {
        rusqlite::Connection::open(store)
            .unwrap()
            .execute_batch("DROP TABLE steps")
            .unwrap();
    }

    #[test]
    fn a_step_the_store_refuses_is_kept_in_a_file_and_the_error_says_where() {
        let d = dir("kept");
        let store = d.join("results.db");
        let mut s = session(&store);
        s.keep_unstored_in(d.clone());
        s.record(step(0)).unwrap();
        s.record(step(1)).unwrap();
        break_store(&store);
        let err = s.record(step(2)).err().unwrap();
        let RunnerError::NotStored(n) = &err else {
            panic!("{err}")
        };
        let Kept::File(path) = &n.kept else {
            panic!("{err}")
        };
        let text = err.to_string();
        assert!(!text.contains('\n'), "{text}");
        assert!(
            text.starts_with("step 3 was measured but not stored: results store "),
            "{text}"
        );
        assert!(
            text.contains("the 2 steps before it are in the store (experiment 1)"),
            "{text}"
        );
        assert!(
            text.ends_with(&format!("its result is kept in {}", path.display())),
            "{text}"
        );
        let kept: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        assert_eq!(kept["experiment"], 1);
        assert_eq!(kept["store"], store.display().to_string());
        let back: StepRecord = serde_json::from_value(kept["step"].clone()).unwrap();
        assert_eq!((back.seq, back.label.as_str()), (2, "t_2"));
        assert_eq!(s.steps().len(), 2);
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn a_step_that_no_file_takes_either_is_handed_back_to_print() {
        let d = dir("nowhere");
        let store = d.join("results.db");
        let mut s = session(&store);
        // A directory under a regular file cannot exist.
        let blocked = store.join("sub");
        s.keep_unstored_in(blocked.clone());
        break_store(&store);
        let err = s.record(step(0)).err().unwrap();
        let RunnerError::NotStored(n) = &err else {
            panic!("{err}")
        };
        let Kept::Nowhere { json, .. } = &n.kept else {
            panic!("{err}")
        };
        let text = err.to_string();
        assert!(text.contains("no step before it was stored"), "{text}");
        assert!(
            text.contains(&format!(
                "its result could not be written to {} either",
                blocked.display()
            )) && text.ends_with("and is printed on stdout"),
            "{text}"
        );
        let doc: serde_json::Value = serde_json::from_str(json).unwrap();
        assert_eq!(doc["step"]["label"], "t_0");
        std::fs::remove_dir_all(d).unwrap();
    }
}
