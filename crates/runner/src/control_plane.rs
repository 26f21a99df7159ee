//! A `control_plane` step: istiod serving a mesh of the step's scale
//! ([`meshbench_lab::control_plane_cost`]), measured over the step's window and stored as a
//! lab step is: istiod's usage as role `istiod` (with its samples), and the control plane's
//! figures beside it. It sends no load, so it has no load result; a failure to set it up fails
//! the step, a stop (Ctrl-C, SIGTERM) while it is set up (istiod starting, the proxies
//! connecting...) ends the setup within seconds and fails the step as
//! [`StepFailure::StoppedBeforeLoad`], and a stop during the window stores what the window
//! measured as partial.

use std::time::Duration;

use meshbench_lab::control_plane_cost::{CostSpec, CostStep};
use meshbench_lab::LabError;
use meshbench_results::{MeshScale, Role, RoleUsage, StepFailure};
use meshbench_store::{StepRecord, StepStatus};

use crate::measured::StepContext;
use crate::observer::Observer;

/// Runs a `control_plane` step serving `scale`; every failure ends up in `record`.
pub(crate) fn run(
    scale: MeshScale,
    step: &StepContext<'_>,
    mut record: StepRecord,
    observer: &mut dyn Observer,
) -> StepRecord {
    let (e, experiment_id, stop) = (step.e, step.experiment_id, step.stop);
    let step = step.at.step;
    let owner = format!("{}-{experiment_id}-{}", std::process::id(), step.index);
    let spec = CostSpec {
        scale,
        dir: std::env::temp_dir().join(format!("meshbench-{owner}")),
        owner,
        warmup: Duration::from_secs_f64(e.warmup_secs),
        duration: Duration::from_secs_f64(e.duration_secs),
        settle: Duration::from_secs_f64(e.control_plane_matrix().settle_secs),
        sample_every: Duration::from_millis(e.sample_interval_ms),
    };
    let started = CostStep::start(spec, stop, &mut |line| {
        observer.note(&format!("istiod: {line}"))
    });
    let mut cost = match started {
        Ok(c) => c,
        Err(err) => {
            record.fail(StepFailure::from_setup(
                stop,
                matches!(err, LabError::Stopped),
                || StepFailure::RigDidNotStart(err.to_string()),
            ));
            return record;
        }
    };
    let agreement = cost.agreement();
    if agreement.agrees() {
        observer.note(&format!(
            "istiod: the simulated twin of the real Envoy holds what it accepted ({})",
            agreement
                .resources
                .iter()
                .map(|(t, n)| format!("{n} {t}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    } else {
        observer.warning(&format!(
            "the simulated twin of the real Envoy differs from it: {}",
            agreement.differences.join("; ")
        ));
    }
    let run = match cost.measure(stop) {
        Ok(run) => run,
        Err(err) => {
            record.fail(StepFailure::ControlPlaneFailed(err.to_string()));
            return record;
        }
    };
    drop(cost);
    record
        .usage
        .push(RoleUsage::control_plane(Role::Istiod, run.istiod, None));
    record.samples.insert(Role::Istiod, run.istiod_samples);
    record.control_plane = Some(run.figures);
    record.status = if run.partial {
        StepStatus::Partial
    } else {
        StepStatus::Ok
    };
    record
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observer::{Quiet, StepAt};
    use meshbench_engine::Stop;
    use meshbench_experiment::{parse, Plan, Work};

    #[test]
    fn a_stop_before_the_control_plane_starts_stores_the_step_stopped() {
        let yaml = "name: t\ntopologies: [control_plane]\ncontrol_plane:\n  proxies: [5]\n";
        let e = parse("t.yaml", yaml, &[]).unwrap();
        let plan = Plan::compile(&e);
        let Work::ControlPlane(scale) = plan.steps[0].work else {
            panic!("a control-plane step: {:?}", plan.steps[0].work);
        };
        let at = StepAt::only(&plan.steps[0]);
        let stop = Stop::new();
        stop.request();
        let step = StepContext {
            e: &e,
            at: &at,
            experiment_id: 1,
            stop: &stop,
        };
        let record = StepRecord::new(0, plan.steps[0].params(&e));
        let record = run(scale, &step, record, &mut Quiet);
        assert_eq!(record.status, StepStatus::Failed);
        assert_eq!(record.error, Some(StepFailure::StoppedBeforeLoad));
        assert!(record.control_plane.is_none() && record.usage.is_empty());
    }
}
