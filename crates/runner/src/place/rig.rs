//! The lab's rig as the place a step is realised: a fresh rig per step (its roles started
//! under their limits from [`crate::setup::rig_spec`]), the load aimed at its entry, every role
//! sampled over the load, each Envoy's admin read right before the load and right after it
//! (`lab::program::envoy::admin`, the one reader of Envoy's admin), and, with attribution on,
//! the L7 Envoys' access logs joined with the sampled requests. Dropping the realised step
//! stops the rig. A stop (Ctrl-C, SIGTERM) while the rig starts ends the start within seconds
//! and fails the step as [`StepFailure::StoppedBeforeLoad`]; the half-started rig is torn
//! down.

use std::path::PathBuf;
use std::time::Duration;

use meshbench_experiment::config::Experiment;
use meshbench_experiment::{ChainVariant, Step};
use meshbench_lab::change::BackendRoll;
use meshbench_lab::program::envoy::admin::{self, AdminError};
use meshbench_lab::rig::{Rig, RigSpec};
use meshbench_lab::{change, sampler, LabError};
use meshbench_results::attribution::{Attribution, Sent};
use meshbench_results::change::schedule;
use meshbench_results::{
    ChainRole, LoadPoint, PlayedBy, Role, RoleUsage, StepFailure, Topology, Usage,
};

use crate::changes::{Changes, StepChanges};
use crate::load::{LoadOptions, TargetSource};
use crate::load_window::{Measured, Sampling};
use crate::measured::{Place, Realised, RoleReading, StepContext, Witnesses};
use crate::observer::Observer;
use crate::step_load::{aim_at_gateway, load_for};

/// This machine's lab: each step on a rig of its own, its backend played by `exe`.
pub(crate) struct RigPlace<'a> {
    /// The meshbench binary, which plays the backend role.
    pub exe: &'a PathBuf,
    /// The chain the step starts and its load.
    pub variant: &'a ChainVariant,
    pub load: &'a LoadPoint,
}

/// A started rig, with the spec it was started from and the generator's CPUs.
struct RigStep {
    rig: Rig,
    load: LoadPoint,
    spec: RigSpec,
    /// Of a changes pair: whether this step applies the changes.
    changes: Option<bool>,
}

impl Place for RigPlace<'_> {
    fn realise<'s>(
        &'s self,
        step: &StepContext<'s>,
        observer: &mut dyn Observer,
    ) -> Result<Box<dyn Realised + 's>, StepFailure> {
        let spec = crate::setup::rig_spec(
            step.e,
            step.at.step,
            (self.variant, self.load),
            step.experiment_id,
            self.exe.clone(),
        );
        let rig = Rig::start(&spec, step.stop).map_err(|err| {
            // The lab says a stop ended the start with `LabError::Stopped`.
            StepFailure::from_setup(step.stop, matches!(err, LabError::Stopped), || {
                StepFailure::RigDidNotStart(err.to_string())
            })
        })?;
        for w in &rig.warnings {
            observer.warning(w);
        }
        let note = rig.control_plane_summary(step.stop);
        if step.stop.requested() {
            // The rig drops here, and with it all it started.
            return Err(StepFailure::StoppedBeforeLoad);
        }
        if let Some(note) = &note {
            observer.note(note);
        }
        Ok(Box::new(RigStep {
            rig,
            load: *self.load,
            spec,
            changes: self.variant.changes,
        }))
    }
}

impl Realised for RigStep {
    fn load_options(&self, step: &StepContext<'_>) -> LoadOptions {
        load_options(step.e, step.at.step, &self.load, &self.rig)
    }

    fn client_netns(&self) -> Option<&str> {
        self.rig.client_netns.as_deref()
    }

    fn sampling(&self, step: &StepContext<'_>) -> Option<Sampling> {
        Some(Sampling {
            watches: self.rig.watches(),
            every: Duration::from_millis(step.e.sample_interval_ms),
        })
    }

    /// Each is bounded (`admin::DEADLINE`), so a rig of three Envoys whose admins are all
    /// silent costs the step at most a few seconds outside its measured window.
    fn witnesses(&self) -> Witnesses {
        self.rig
            .roles
            .iter()
            .filter_map(|r| {
                let read = r.read_admin(admin::read)?;
                let addr = r.admin?;
                // A namespace that cannot be entered is an admin that cannot be reached.
                let read = read.unwrap_or_else(|e| {
                    Err(AdminError::Unreachable {
                        addr,
                        reason: e.to_string(),
                    })
                });
                Some((r.name, read))
            })
            .collect()
    }

    fn dead_role(&mut self) -> Option<(ChainRole, String)> {
        self.rig.dead_role()
    }

    fn changes(&mut self, step: &StepContext<'_>) -> Result<Option<StepChanges>, StepFailure> {
        let Some(apply) = self.changes else {
            return Ok(None);
        };
        let topology = self.spec.topology;
        let gateway = topology == Topology::Gateway;
        let cannot = || {
            StepFailure::RigDidNotStart(match gateway {
                true => format!(
                    "gateway.type {} cannot be changed under load by meshbench",
                    self.spec.gateway.program.name()
                ),
                false => format!("the {topology} step has no mesh meshbench can change"),
            })
        };
        if !apply {
            let told_by = match gateway {
                true => {
                    change::told_by(self.spec.gateway.program, self.spec.gateway.haproxy_reload)
                }
                false => change::sidecars::TOLD_BY,
            };
            return Ok(Some(StepChanges::Still { told_by }));
        }
        let changer = (self.rig.changer())
            .map_err(|e| StepFailure::RigDidNotStart(e.to_string()))?
            .ok_or_else(cannot)?;
        let window = Duration::from_secs_f64(step.e.duration_secs);
        Ok(Some(StepChanges::Apply(Box::new(Changes {
            changer,
            backend: (self.rig.backend_roll()).map(|r| Box::new(r) as Box<dyn BackendRoll>),
            schedule: schedule(&step.e.change_streams(topology), window),
            netns: self.rig.client_netns.clone(),
            forward: None,
        }))))
    }

    fn attribution(
        &self,
        step: &StepContext<'_>,
        sample_rate: f64,
        sent: &[Sent],
    ) -> Option<Attribution> {
        Some(crate::attribution::attribute(
            &self.rig,
            sample_rate,
            sent,
            step.stop,
        ))
    }

    fn roles(
        &mut self,
        _step: &StepContext<'_>,
        measured: &mut Measured,
        _observer: &mut dyn Observer,
    ) -> Vec<RoleReading> {
        let sampled = measured.sampled.take().unwrap_or_default();
        let (from, to) = measured.window_ms;
        let mut readings: Vec<RoleReading> = self
            .rig
            .roles
            .iter()
            .map(|role| {
                let samples = sampled
                    .roles
                    .get(&Role::Chain(role.name))
                    .cloned()
                    .unwrap_or_default();
                let usage = sampler::summarize(&samples, from, to);
                RoleReading {
                    usage: RoleUsage {
                        role: Role::Chain(role.name),
                        program: role.program.clone(),
                        workers: role.workers,
                        cpu_limit: self.spec.limits(role.class).cpus,
                        missing: sampler::unmeasured(&usage),
                        usage,
                        proxy: None,
                    },
                    samples: Some(samples),
                    chain: Some(role.name),
                }
            })
            .collect();
        // The control plane (istiod, Contour), where the rig runs one: sampled as a role
        // beside the data plane.
        if let Some(watch) = self.rig.control_plane_watch() {
            let samples = sampled.roles.get(&watch.role).cloned().unwrap_or_default();
            let usage = sampler::summarize(&samples, from, to);
            let missing = sampler::unmeasured(&usage);
            readings.push(RoleReading {
                usage: RoleUsage {
                    missing,
                    ..RoleUsage::control_plane(
                        watch.role,
                        usage,
                        self.spec.control_plane_limits.cpus,
                    )
                },
                samples: Some(samples),
                chain: None,
            });
        }
        readings.push(RoleReading {
            usage: sampler_usage(&sampled),
            samples: None,
            chain: None,
        });
        readings
    }
}

/// The load of one step against a running rig: the experiment's `load` keys at the step's load
/// point, aimed at the rig's entry (the gateway topology: every route of its targets file, in
/// random order, over TLS trusting the rig's CA; an HTTP/3 entry: its certificate's name over
/// TLS trusting the rig's CA).
pub fn load_options(e: &Experiment, step: &Step, load: &LoadPoint, rig: &Rig) -> LoadOptions {
    let source = match (&rig.gateway, &rig.entry_tls) {
        (Some(g), _) => TargetSource::File(g.targets.clone()),
        (None, Some(t)) => {
            TargetSource::Url(format!("https://{}:{}/", t.server_name, rig.entry.port()))
        }
        (None, None) => TargetSource::Url(format!("http://{}/", rig.entry)),
    };
    let mut o = load_for(e, step, load, source);
    let ca = match (&rig.gateway, &rig.entry_tls) {
        (Some(g), _) => Some(g.ca.clone()),
        (None, Some(t)) => Some(t.ca.clone()),
        (None, None) => None,
    };
    if let Some(ca) = ca {
        aim_at_gateway(&mut o, ca, rig.entry, rig.gateway.is_some());
    }
    o
}

/// The sampler's own cost, stored as a pseudo-role so that it can be checked.
fn sampler_usage(s: &sampler::Sampled) -> RoleUsage {
    let mc = meshbench_lab::sample::millicores(0, s.own_cpu_ns, s.wall_ns);
    RoleUsage {
        role: Role::Sampler,
        program: PlayedBy::Meshbench,
        workers: 1,
        cpu_limit: None,
        usage: Usage {
            samples: s.roles.values().map(Vec::len).max().unwrap_or(0),
            cpu_millicores_avg: mc,
            cpu_millicores_max: mc,
            ..Usage::default()
        },
        missing: Default::default(),
        proxy: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measured::measured_step;
    use crate::observer::{Quiet, StepAt};
    use meshbench_experiment::{parse, Plan, Work};
    use meshbench_results::Stop;
    use meshbench_store::{StepRecord, StepStatus};

    #[test]
    fn a_stop_before_the_rig_starts_stores_the_step_stopped_and_starts_nothing() {
        let e = parse("t.yaml", "name: t\ntopologies: [baseline]\n", &[]).unwrap();
        let plan = Plan::compile(&e);
        let Work::Chain(variant, load) = &plan.steps[0].work else {
            panic!("a chain step: {:?}", plan.steps[0].work);
        };
        // Nothing may be started: no backend can be.
        let exe = PathBuf::from("/nonexistent/meshbench");
        let place = RigPlace {
            exe: &exe,
            variant,
            load,
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
        let record = measured_step(&place, None, &step, record, &mut Quiet);
        assert_eq!(record.status, StepStatus::Failed);
        assert_eq!(record.error, Some(StepFailure::StoppedBeforeLoad));
        assert!(record.result.is_none() && record.usage.is_empty());
    }
}
