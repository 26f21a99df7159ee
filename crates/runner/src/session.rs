//! An experiment being written to the store: steps are added one by one (by a plan, or by a
//! capacity search that picks each step from the last), each in its own transaction, and the
//! experiment is marked done or interrupted at the end. A step already stored is never lost,
//! whatever happens to the steps after it.

use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use meshbench_engine::Stop;
use meshbench_experiment::Experiment;
use meshbench_store::{ExperimentStatus, NewExperiment, StepRecord, Store};

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
}

/// What a finished (or interrupted) experiment left.
#[derive(Debug)]
pub struct Finished {
    pub id: i64,
    pub status: ExperimentStatus,
    pub steps: Vec<StepRecord>,
    pub elapsed: Duration,
}

impl Finished {
    pub fn failed(&self) -> usize {
        self.steps.iter().filter(|s| s.failed()).count()
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
        })
    }

    /// Stores a step; returns it as stored.
    pub fn record(&mut self, record: StepRecord) -> Result<&StepRecord, RunnerError> {
        self.store.add_step(self.id, &record)?;
        self.steps.push(record);
        Ok(self.steps.last().expect("pushed above"))
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
            status,
            steps: self.steps,
            elapsed: self.started.elapsed(),
        })
    }
}
