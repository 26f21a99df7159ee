//! How a running experiment is watched: the runner calls an [`Observer`] when a step starts,
//! about every 200 ms while it runs, on warnings and when a step is stored. The command line
//! draws a progress line from it; a live view or a remote coordinator can watch the same way.
//! Every method has a default that does nothing, and nothing measured depends on them.

use meshbench_engine::Live;
use meshbench_experiment::Step;
use meshbench_results::{Role, Sample};
use meshbench_store::StepRecord;

/// Where a step stands in its experiment.
#[derive(Debug, Clone, Copy)]
pub struct StepAt<'a> {
    pub step: &'a Step,
    /// Steps in the whole plan (or tried so far, in a search).
    pub steps: usize,
    /// Seconds the step's load takes (warm-up and measurement).
    pub step_secs: f64,
    /// Seconds the steps after this one will take.
    pub left_after_secs: f64,
    /// The fastest answer of the target seen at a lower load (a capacity search's earlier
    /// steps): evidence for the self-check, which the step's load carries
    /// (`LoadSpec::service_at_lower_load_us`).
    pub service_at_lower_load_us: Option<u64>,
}

impl<'a> StepAt<'a> {
    /// `step` as the only step of a plan, one second long: what the unit tests of a place ask.
    #[cfg(test)]
    pub(crate) fn only(step: &'a Step) -> StepAt<'a> {
        StepAt {
            step,
            steps: 1,
            step_secs: 1.0,
            left_after_secs: 0.0,
            service_at_lower_load_us: None,
        }
    }

    /// How a warning names the step: `step 3/12 (serveronly)`.
    pub fn tag(&self, variant: &str) -> String {
        format!("step {}/{} ({variant})", self.step.index + 1, self.steps)
    }
}

pub trait Observer {
    /// The experiment is stored as `id` and about to run `steps` steps, about `secs` in all.
    fn experiment_started(&mut self, _id: i64, _steps: usize, _secs: f64) {}
    /// The rig of a step is about to start.
    fn step_started(&mut self, _at: &StepAt) {}
    /// The load of a step, about every 200 ms: progress, the seconds completed since the last
    /// call, and (with them) the newest reading of each role of the rig.
    fn live(&mut self, _at: &StepAt, _live: &Live, _roles: &[(Role, Sample)]) {}
    /// Something could not be done as asked (and what was done instead).
    fn warning(&mut self, _text: &str) {}
    /// What setting a step's rig up cost, for the record (Istio's control plane pushing the
    /// gateway's configuration): not a figure of the load.
    fn note(&mut self, _text: &str) {}
    /// A step was stored.
    fn step_finished(&mut self, _at: &StepAt, _record: &StepRecord) {}
}

/// Watches nothing.
pub struct Quiet;

impl Observer for Quiet {}
