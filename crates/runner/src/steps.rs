//! An experiment as a sequence of steps, each run where its kind says. The plan decides the
//! kind ([`Work`]): a chain is realised on this machine's rig or on the run's cluster, an
//! external variant is found where it runs, and each is then measured by the one skeleton of
//! [`crate::measured`]; a control-plane step has no load and runs on its own
//! ([`crate::control_plane`]). Each step is stored, then the experiment cools down. A role
//! that dies fails its step with the tail of its output and the experiment goes on; a stop
//! (Ctrl-C, SIGTERM) stores the step in progress as partial and ends the experiment.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use meshbench_engine::Stop;
use meshbench_experiment::config::Experiment;
use meshbench_experiment::{Plan, Step, Work};
use meshbench_lab::rig;
use meshbench_store::StepRecord;

use crate::agents::Fleet;
use crate::measured::{measured_step, StepContext};
use crate::observer::{Observer, StepAt};
use crate::place::cluster::{ClusterPlace, ClusterSite};
use crate::place::external::ExternalPlace;
use crate::place::rig::RigPlace;
use crate::session::{new_experiment, now_rfc3339, Finished, Session};
use crate::RunnerError;

/// Runs every step of `e` in plan order at `site`, the load from `fleet` (else from this
/// process), storing each in `store_path`, until the plan ends or `stop` is set.
pub fn run_experiment(
    e: &Experiment,
    store_path: &Path,
    site: Site,
    fleet: Option<Fleet>,
    stop: Stop,
    observer: &mut dyn Observer,
) -> Result<Finished, RunnerError> {
    let plan = Plan::compile(e);
    let mut session = Session::begin(store_path, &new_experiment(e), stop)?;
    let mut runner = StepRunner::new(e, site)?;
    if let Some(fleet) = fleet {
        runner = runner.with_fleet(fleet);
    }
    observer.experiment_started(session.id, plan.steps.len(), plan.total_secs(e));
    for step in &plan.steps {
        let at = StepAt {
            step,
            steps: plan.steps.len(),
            step_secs: e.warmup_secs + e.duration_secs,
            left_after_secs: (plan.steps.len() - step.index - 1) as f64 * plan.step_secs(e),
            service_at_lower_load_us: None,
        };
        runner.step(&mut session, e, &at, observer)?;
        if session.stopped() {
            break;
        }
    }
    session.finish()
}

/// Where an experiment's chains are realised; a value for the whole run.
pub enum Site {
    /// On this machine: each step on a rig of its own.
    Here,
    /// On a cluster set up for the run (its load from its agent pods).
    Cluster(Box<ClusterSite>),
}

/// What every step of an experiment shares: where its chains are realised, who sends the
/// load, the programs' versions.
pub struct StepRunner {
    /// The meshbench binary, which plays the backend role.
    exe: PathBuf,
    /// Agents that send every step's load instead of this process (`agents:`, a cluster's
    /// agent pods).
    fleet: Option<Mutex<Fleet>>,
    /// The version line of every program the experiment starts.
    versions: BTreeMap<String, String>,
    site: Site,
}

impl StepRunner {
    /// Here, also removes what a killed earlier run left behind (its cgroups) and reads the
    /// programs' versions; a cluster run does no lab work (its steps read the pods' images).
    pub fn new(e: &Experiment, site: Site) -> Result<StepRunner, RunnerError> {
        let versions = match &site {
            Site::Here => {
                rig::remove_stale();
                crate::setup::program_versions(e)
            }
            Site::Cluster(_) => BTreeMap::from([(
                "meshbench".to_string(),
                env!("CARGO_PKG_VERSION").to_string(),
            )]),
        };
        Ok(StepRunner {
            exe: std::env::current_exe().map_err(RunnerError::Exe)?,
            fleet: None,
            versions,
            site,
        })
    }

    /// Every step's load sent by these agents.
    pub fn with_fleet(mut self, fleet: Fleet) -> StepRunner {
        self.fleet = Some(Mutex::new(fleet));
        self
    }

    /// Runs `at.step`, stores it and cools down; returns the step as stored.
    pub fn step<'s>(
        &self,
        session: &'s mut Session,
        e: &Experiment,
        at: &StepAt,
        observer: &mut dyn Observer,
    ) -> Result<&'s StepRecord, RunnerError> {
        observer.step_started(at);
        let stop = session.stop.clone();
        let record = self.run_step(e, at, session.id, &stop, observer);
        let stored = session.record(record)?;
        observer.step_finished(at, stored);
        if !stop.requested() {
            stop.sleep(Duration::from_secs_f64(e.cooldown_secs));
        }
        Ok(stored)
    }

    /// A step's record before it runs: its kind, parameters, variant, label, start and the
    /// versions of the programs.
    fn new_record(&self, e: &Experiment, step: &Step) -> StepRecord {
        let mut record = StepRecord::new(step.index as u32, step.params(e));
        record.repeat = step.repeat;
        record.kind = Some(step.kind());
        record.variant = step.variant();
        record.label = step.istio_label(&e.name, e.load.protocol);
        record.started_at = now_rfc3339();
        record.versions = self.versions.clone();
        record
    }

    /// Runs one step where its kind and the site say; every failure ends up in the record,
    /// never as an error.
    pub fn run_step(
        &self,
        e: &Experiment,
        at: &StepAt,
        experiment_id: i64,
        stop: &Stop,
        observer: &mut dyn Observer,
    ) -> StepRecord {
        let record = self.new_record(e, at.step);
        let step = StepContext {
            e,
            at,
            experiment_id,
            stop,
        };
        let fleet = self.fleet.as_ref();
        match (&at.step.work, &self.site) {
            (Work::ControlPlane(mesh), _) => {
                crate::control_plane::run(*mesh, &step, record, observer)
            }
            (Work::External(external, load), _) => {
                let place = ExternalPlace { external, load };
                measured_step(&place, fleet, &step, record, observer)
            }
            (Work::Chain(variant, load), Site::Here) => {
                let place = RigPlace {
                    exe: &self.exe,
                    variant,
                    load,
                };
                measured_step(&place, fleet, &step, record, observer)
            }
            (Work::Chain(variant, load), Site::Cluster(site)) => {
                let place = ClusterPlace {
                    site,
                    variant,
                    load,
                };
                measured_step(&place, fleet, &step, record, observer)
            }
        }
    }
}
