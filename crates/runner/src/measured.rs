//! The measured step, written once. Wherever a step is realised (the lab's rig, a cluster,
//! systems read through Prometheus), measuring it is the same skeleton:
//!
//! ```text
//! record ─► place.realise(step) ─► load options resolved ─► witnesses before ─► measure
//!        ─► a role that died? ─► witnesses after ─► result ─► attribution (sampled requests)
//!        ─► each role's usage and samples over the steady window ─► record
//! ```
//!
//! What differs by place is behind two traits: a [`Place`] realises a step (starts its rig,
//! shapes the cluster, finds the external variant) and hands back a [`Realised`] step, which
//! says where the load goes and from where, reads the witnesses (each Envoy's own counts) and
//! each role's usage over the window, and is torn down when dropped. Every failure ends up in
//! the record, never as an error: a place that cannot realise the step fails it with the
//! [`StepFailure`] it chose.

use std::collections::BTreeMap;
use std::sync::Mutex;

use meshbench_engine::{LoadSpec, Stop};
use meshbench_experiment::config::{parse_cpuset, Experiment};
use meshbench_lab::program::envoy::admin::AdminError;
use meshbench_results::attribution::{Attribution, Sent};
use meshbench_results::{
    ChainRole, ChangeFigures, Figure, ProxyCounters, Role, RoleUsage, Sample, StepFailure,
    UsageReader, UsageSource,
};
use meshbench_store::StepRecord;

use crate::agents::Fleet;
use crate::changes::StepChanges;
use crate::load::LoadOptions;
use crate::load_window::{measure, Beside, LoadOrigin, LoadSource, Measured, Sampling};
use crate::observer::{Observer, StepAt};
use crate::place::external::read::RoleRead;

/// One reading of every Envoy's admin of a step, by role.
pub(crate) type Witnesses = BTreeMap<ChainRole, Result<ProxyCounters, AdminError>>;

/// What a place is told about the step it realises.
pub(crate) struct StepContext<'a> {
    pub e: &'a Experiment,
    pub at: &'a StepAt<'a>,
    /// The stored experiment's id (names the rig's cgroups and files).
    pub experiment_id: i64,
    pub stop: &'a Stop,
}

/// Where a step is realised: the lab's rig, a cluster, systems meshbench does not start.
pub(crate) trait Place {
    /// Brings the system under test to the step's shape, ready for the load; a failure is
    /// the step's ([`StepFailure::RigDidNotStart`] or what fits better).
    fn realise<'s>(
        &'s self,
        step: &StepContext<'s>,
        observer: &mut dyn Observer,
    ) -> Result<Box<dyn Realised + 's>, StepFailure>;
}

/// A step realised and ready for its load; dropping it tears down what was realised for this
/// step alone (a rig's processes; a cluster's objects stay for the next step).
pub(crate) trait Realised {
    /// The step's load, aimed at the system under test.
    fn load_options(&self, step: &StepContext<'_>) -> LoadOptions;

    /// The network namespace a local generator runs in (an Istio client pod's); by default
    /// this process's own.
    fn client_netns(&self) -> Option<&str> {
        None
    }

    /// The roles the sampler watches over the load, if this place samples its roles itself
    /// (by default it does not: they are read afterwards).
    fn sampling(&self, _step: &StepContext<'_>) -> Option<Sampling> {
        None
    }

    /// One reading of each Envoy's own counts (right before the load and right after it); by
    /// default there is no admin to read.
    fn witnesses(&self) -> Witnesses {
        Witnesses::new()
    }

    /// A role that exited while the load ran, with the tail of its output; by default none
    /// is watched.
    fn dead_role(&mut self) -> Option<(ChainRole, String)> {
        None
    }

    /// Where the sampled requests' latency went, hop by hop, if this place can say (by
    /// default it cannot).
    fn attribution(
        &self,
        _step: &StepContext<'_>,
        _sample_rate: f64,
        _sent: &[Sent],
    ) -> Option<Attribution> {
        None
    }

    /// Each role's usage and samples over the steady window of `measured`; warnings (a role
    /// that could not be read) go to the observer.
    fn roles(
        &mut self,
        step: &StepContext<'_>,
        measured: &mut Measured,
        observer: &mut dyn Observer,
    ) -> Vec<RoleReading>;

    /// What ran the step, when the place knows better than this machine's programs (a
    /// cluster: its version, its nodes', the pods' images); by default the run's.
    fn versions(&self) -> Option<BTreeMap<String, String>> {
        None
    }

    /// The gateway changes of a step of a changes pair: the step with them applies them, its
    /// pair says how they would be told; `Ok(None)` for every other step (the default). A
    /// gateway that cannot be changed fails the step.
    fn changes(&mut self, _step: &StepContext<'_>) -> Result<Option<StepChanges>, StepFailure> {
        Ok(None)
    }

    /// Who read the roles, and how finely (asked after [`Realised::roles`], with the samples
    /// it kept); by default the lab's sampler, at the spacing of those samples.
    fn usage_source(&self, kept: &[&[Sample]]) -> UsageSource {
        UsageSource::measured(UsageReader::Sampler, kept.iter().copied())
    }
}

/// A role's usage over a step and its samples.
pub(crate) struct RoleReading {
    pub usage: RoleUsage,
    /// Its samples, kept under its role even when empty; `None`: none kept (the sampler's own
    /// row, a role Prometheus had no points for).
    pub samples: Option<Vec<Sample>>,
    /// The chain role whose witness belongs to it, if it is one.
    pub chain: Option<ChainRole>,
}

impl RoleReading {
    /// A role as Prometheus read it: its samples kept when it had points.
    pub fn read(r: RoleRead, chain: Option<ChainRole>) -> RoleReading {
        RoleReading {
            usage: r.usage,
            samples: (!r.samples.is_empty()).then_some(r.samples),
            chain,
        }
    }
}

/// Realises the step at `place`, measures it with the load from `fleet` (else from this
/// process), and records every role; every failure ends up in `record`.
pub(crate) fn measured_step<'s>(
    place: &'s dyn Place,
    fleet: Option<&Mutex<Fleet>>,
    step: &StepContext<'s>,
    mut record: StepRecord,
    observer: &mut dyn Observer,
) -> StepRecord {
    let at = step.at;
    let mut realised = match place.realise(step, observer) {
        Ok(r) => r,
        Err(failure) => {
            record.fail(failure);
            return record;
        }
    };
    let options = realised.load_options(step);
    let load = match resolve_at(&options, at) {
        Ok(load) => load,
        Err(failure) => {
            record.fail(failure);
            return record;
        }
    };
    if let Some(versions) = realised.versions() {
        record.versions = versions;
    }
    let changes = match realised.changes(step) {
        Ok(changes) => changes,
        Err(failure) => {
            record.fail(failure);
            return record;
        }
    };
    // Readiness was the place's: each Envoy's own count starts here.
    let before = realised.witnesses();
    let source = match fleet {
        Some(fleet) => LoadSource::Agents {
            fleet,
            options: &options,
        },
        None => LoadSource::Local,
    };
    // Pinned where the file says (`limits.client.cpuset`; a cluster's file cannot say).
    let client_cpus = step
        .e
        .limits
        .client
        .cpuset
        .as_deref()
        .and_then(parse_cpuset);
    let measured = measure(
        source,
        &load,
        Beside {
            sampling: realised.sampling(step),
            changes,
        },
        LoadOrigin {
            cpus: client_cpus.as_deref(),
            netns: realised.client_netns(),
        },
        step.stop.clone(),
        |l, roles| observer.live(at, l, roles),
    );
    let dead = realised.dead_role();
    let after = realised.witnesses();
    let mut measured = match measured {
        Ok(m) => m,
        Err(err) => {
            record.fail(StepFailure::LoadGeneratorFailed(err.to_string()));
            return record;
        }
    };
    if let Some(every) = load.trace_every {
        let sent = std::mem::take(&mut measured.result.traces);
        record.attribution = realised.attribution(step, 1.0 / f64::from(every), &sent);
    }
    for mut r in realised.roles(step, &mut measured, observer) {
        if let Some(chain) = r.chain {
            keep_witness(&mut r.usage, chain, &before, &after, observer);
        }
        if let Some(samples) = r.samples {
            record.samples.insert(r.usage.role.clone(), samples);
        }
        record.usage.push(r.usage);
    }
    if !record.usage.is_empty() {
        let kept: Vec<&[Sample]> = record.samples.values().map(Vec::as_slice).collect();
        record.usage_source = Some(realised.usage_source(&kept));
    }
    record.changes = with_gateway_peaks(measured.changes, &record.samples, measured.window_ms.0);
    record.set_result(measured.result);
    if let Some((role, log_tail)) = dead {
        record.fail(StepFailure::RoleExited { role, log_tail });
    }
    record
}

/// A step's changes with the changed proxy's CPU and memory peak over each (the gateway's, or
/// for Istio's sidecars' mesh the client's sidecar, which the probe reads), from its samples
/// (when it was sampled) of the window opened at `window_start_ms`.
fn with_gateway_peaks(
    changes: Option<ChangeFigures>,
    samples: &BTreeMap<Role, Vec<Sample>>,
    window_start_ms: u64,
) -> Option<ChangeFigures> {
    let mut changes = changes?;
    let changed = [ChainRole::Gateway, ChainRole::ClientProxy]
        .into_iter()
        .find_map(|role| samples.get(&Role::Chain(role)));
    if let Some(changed) = changed {
        changes.read_gateway_peaks(changed, window_start_ms);
    }
    Some(changes)
}

/// A step's options resolved for the engine, with the service time measured at the step's
/// lower load (the self-check's reference); a contradiction fails the step.
pub(crate) fn resolve_at(options: &LoadOptions, at: &StepAt) -> Result<LoadSpec, StepFailure> {
    options
        .resolve()
        .map(|spec| LoadSpec {
            service_at_lower_load_us: at.service_at_lower_load_us,
            ..spec
        })
        .map_err(|err| StepFailure::LoadNotSetUp(err.to_string()))
}

/// A role's own counts over the step into its `usage` ([`witness`]); why they are missing, if
/// they are, said once and kept with it.
fn keep_witness(
    usage: &mut RoleUsage,
    role: ChainRole,
    before: &Witnesses,
    after: &Witnesses,
    observer: &mut dyn Observer,
) {
    match witness(role, before, after) {
        None => {}
        Some(Ok(counters)) => usage.proxy = Some(counters),
        Some(Err(why)) => {
            observer.warning(&format!(
                "{role}: {why}; its own counts are not kept (the step is)"
            ));
            usage.missing.insert(Figure::Proxy, why.to_string());
        }
    }
}

/// A role's own counts over the step: the reading after the load since the one before it, or
/// why there is none (the first reading that failed); `None` for a role without an admin.
fn witness(
    role: ChainRole,
    before: &Witnesses,
    after: &Witnesses,
) -> Option<Result<ProxyCounters, AdminError>> {
    match (before.get(&role)?, after.get(&role)?) {
        (Ok(b), Ok(a)) => Some(Ok(a.since(b))),
        (Err(e), _) | (_, Err(e)) => Some(Err(e.clone())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::TargetSource;
    use crate::observer::Quiet;
    use meshbench_experiment::{parse, Plan};
    use meshbench_store::StepStatus;

    /// A place that fails to realise, or realises a step whose load cannot be set up; neither
    /// sends a request.
    enum Broken {
        Refuses,
        BadUrl,
    }

    struct NoLoad;

    impl Realised for NoLoad {
        fn load_options(&self, _step: &StepContext<'_>) -> LoadOptions {
            LoadOptions::new(TargetSource::Url("ftp://nowhere/".into()))
        }

        fn roles(
            &mut self,
            _step: &StepContext<'_>,
            _measured: &mut Measured,
            _observer: &mut dyn Observer,
        ) -> Vec<RoleReading> {
            unreachable!("a step whose load is not set up reads no role")
        }
    }

    impl Place for Broken {
        fn realise<'s>(
            &'s self,
            _step: &StepContext<'s>,
            _observer: &mut dyn Observer,
        ) -> Result<Box<dyn Realised + 's>, StepFailure> {
            match self {
                Broken::Refuses => Err(StepFailure::RigDidNotStart("no such program".into())),
                Broken::BadUrl => Ok(Box::new(NoLoad)),
            }
        }
    }

    #[test]
    fn a_place_that_fails_fails_its_step_with_its_reason_and_nothing_is_measured() {
        let e = parse("t.yaml", "name: t\ntopologies: [baseline]\n", &[]).unwrap();
        let plan = Plan::compile(&e);
        let at = StepAt::only(&plan.steps[0]);
        let stop = Stop::new();
        let step = StepContext {
            e: &e,
            at: &at,
            experiment_id: 1,
            stop: &stop,
        };
        for (place, expected) in [
            (Broken::Refuses, "no such program"),
            (Broken::BadUrl, "ftp"),
        ] {
            let record = StepRecord::new(0, plan.steps[0].params(&e));
            let record = measured_step(&place, None, &step, record, &mut Quiet);
            assert_eq!(record.status, StepStatus::Failed);
            let why = record.error.as_ref().unwrap().to_string();
            assert!(why.contains(expected), "{why}");
            assert!(record.result.is_none() && record.usage.is_empty());
        }
    }
}
