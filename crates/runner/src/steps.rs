//! A lab step, and an experiment as a sequence of them. For each step: start the rig under its
//! limits, aim the load at it (the same [`LoadOptions`] as `meshbench run`, built from the
//! experiment's keys), measure it while sampling every role (and reading each Envoy's admin
//! right before the load and right after it: its own counts, a second witness), summarise each
//! role over the steady window, store the step, stop the rig, cool down. A role that dies fails its step with
//! the tail of its output and the experiment goes on; a stop (Ctrl-C, SIGTERM) stores the step
//! in progress as partial and ends the experiment.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use meshbench_engine::{LoadSpec, Stop, StopAt};
use meshbench_experiment::config::{parse_cpuset, Experiment};
use meshbench_experiment::{Plan, Step};
use meshbench_lab::program::envoy::admin::{self, AdminError};
use meshbench_lab::rig::{self, Rig};
use meshbench_lab::sampler::{self, Sampled};
use meshbench_results::{
    Arrival, ChainRole, Figure, Offer, Order, PacingSlack, PlayedBy, ProxyCounters, Role,
    RoleUsage, StepFailure, Usage,
};
use meshbench_store::StepRecord;

use crate::agents::Fleet;
use crate::cluster::ClusterSite;
use crate::load::{Body, LoadOptions, TargetSource};
use crate::observer::{Observer, StepAt};
use crate::session::{new_experiment, now_rfc3339, Finished, Session};
use crate::targets::ConnectTo;
use crate::{measure, ClientPlace, LoadSource, RunnerError, Sampling};

/// Runs every step of `e` in plan order, storing each in `store_path`, until the plan ends or
/// `stop` is set.
pub fn run_experiment(
    e: &Experiment,
    store_path: &Path,
    site: Site,
    stop: Stop,
    observer: &mut dyn Observer,
) -> Result<Finished, RunnerError> {
    let plan = Plan::compile(e);
    let mut session = Session::begin(store_path, &new_experiment(e), stop)?;
    let mut lab = Lab::new(e)?;
    match site {
        Site::Here { fleet: None } => {}
        Site::Here { fleet: Some(fleet) } => lab = lab.with_fleet(fleet),
        Site::Cluster { site, fleet } => {
            lab = lab.with_fleet(fleet);
            lab.cluster = Some(*site);
        }
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
        lab.step(&mut session, e, &at, observer)?;
        if session.stopped() {
            break;
        }
    }
    session.finish()
}

/// Where an experiment's steps are realised, and who sends their load.
pub enum Site {
    /// On this machine; the load from this process, or from these agents.
    Here { fleet: Option<Fleet> },
    /// On a cluster set up for the run; the load from its agent pods.
    Cluster {
        site: Box<ClusterSite>,
        fleet: Fleet,
    },
}

/// What every lab step of an experiment shares.
pub struct Lab {
    /// The meshbench binary, which plays the backend role.
    exe: PathBuf,
    /// Agents that send every step's load instead of this process (`agents:`).
    fleet: Option<Mutex<Fleet>>,
    /// The version line of every program the experiment starts.
    pub(crate) versions: BTreeMap<String, String>,
    /// Where the steps are realised when not on this machine.
    pub(crate) cluster: Option<ClusterSite>,
}

impl Lab {
    /// Also removes what a killed earlier run left behind (its cgroups).
    pub fn new(e: &Experiment) -> Result<Lab, RunnerError> {
        rig::remove_stale();
        Ok(Lab {
            exe: std::env::current_exe().map_err(RunnerError::Exe)?,
            fleet: None,
            versions: crate::setup::program_versions(e),
            cluster: None,
        })
    }

    /// Every step's load sent by these agents.
    pub fn with_fleet(mut self, fleet: Fleet) -> Lab {
        self.fleet = Some(Mutex::new(fleet));
        self
    }

    /// Who sends a step's load of `options`.
    pub(crate) fn load_source<'a>(&'a self, options: &'a LoadOptions) -> LoadSource<'a> {
        match &self.fleet {
            Some(fleet) => LoadSource::Agents { fleet, options },
            None => LoadSource::Local,
        }
    }

    /// Runs `at.step` on a fresh rig, stores it and cools down; returns the step as stored.
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
            cool_down(e, &stop);
        }
        Ok(stored)
    }

    /// A step's record before it runs: its place, parameters, variant, label, start and the
    /// versions of the programs (lab and external steps alike).
    pub(crate) fn new_record(&self, e: &Experiment, step: &Step) -> StepRecord {
        let mut record = StepRecord::new(step.index as u32, step.params(e));
        record.repeat = step.repeat;
        record.topology = Some(step.topology);
        record.variant = step.variant();
        record.label = step.istio_label(&e.name, e.load.protocol);
        record.started_at = now_rfc3339();
        record.versions = self.versions.clone();
        record
    }
    /// Runs one step; every failure ends up in the record, never as an error.
    pub fn run_step(
        &self,
        e: &Experiment,
        at: &StepAt,
        experiment_id: i64,
        stop: &Stop,
        observer: &mut dyn Observer,
    ) -> StepRecord {
        let step = at.step;
        if !step.topology.carries_load() {
            return self.run_control_plane_step(e, at, experiment_id, stop, observer);
        }
        if let (false, Some(x)) = (step.topology.is_lab(), &e.external) {
            return self.run_external_step(e, x, at, stop, observer);
        }
        if let Some(site) = &self.cluster {
            return self.run_cluster_step(site, e, at, stop, observer);
        }
        let mut record = self.new_record(e, step);
        let spec = crate::setup::rig_spec(e, step, experiment_id, self.exe.clone());
        let mut rig = match Rig::start(&spec) {
            Ok(r) => r,
            Err(err) => {
                record.fail(StepFailure::RigDidNotStart(err.to_string()));
                return record;
            }
        };
        for w in &rig.warnings {
            observer.warning(w);
        }
        if let Some(istio) = &rig.istio_gateway {
            observer.note(&istio.summary(rig.gateway_admin()));
        }
        if let Some(mesh) = &rig.istio_sidecars {
            observer.note(&mesh.summary(&rig.roles));
        }
        let options = load_options(e, step, &rig);
        let load = match resolve_at(&options, at) {
            Ok(load) => load,
            Err(failure) => {
                record.fail(failure);
                return record;
            }
        };
        let sampling = Sampling {
            watches: rig.watches(),
            every: Duration::from_millis(e.sample_interval_ms),
        };
        let client_cpus = e.limits.client.cpuset.as_deref().and_then(parse_cpuset);
        // The rig's readiness was a TCP connect: each Envoy's own count starts here.
        let before = read_admins(&rig);
        let measured = measure(
            self.load_source(&options),
            &load,
            Some(sampling),
            ClientPlace {
                cpus: client_cpus.as_deref(),
                netns: rig.client_netns.as_deref(),
            },
            stop.clone(),
            |l, roles| observer.live(at, l, roles),
        );
        let dead = rig.dead_role();
        let after = read_admins(&rig);
        let mut measured = match measured {
            Ok(m) => m,
            Err(err) => {
                record.fail(StepFailure::LoadGeneratorFailed(err.to_string()));
                return record;
            }
        };
        if let Some(every) = load.trace_every {
            let sent = std::mem::take(&mut measured.result.traces);
            record.attribution = Some(crate::attribution::attribute(
                &rig,
                1.0 / f64::from(every),
                &sent,
            ));
        }
        let sampled = measured.sampled.unwrap_or_default();
        let (from, to) = measured.window_ms;
        for role in &rig.roles {
            let samples = sampled
                .roles
                .get(&Role::Chain(role.name))
                .cloned()
                .unwrap_or_default();
            let mut usage = RoleUsage {
                role: Role::Chain(role.name),
                program: role.program.clone(),
                workers: role.workers,
                cpu_limit: spec.limits(role.class).cpus,
                usage: sampler::summarize(&samples, from, to),
                missing: Default::default(),
                proxy: None,
            };
            keep_witness(&mut usage, role.name, &before, &after, observer);
            record.usage.push(usage);
            record.samples.insert(Role::Chain(role.name), samples);
        }
        record.usage.push(sampler_usage(&sampled));
        record.set_result(measured.result);
        if let Some((role, log_tail)) = dead {
            record.fail(StepFailure::RoleExited { role, log_tail });
        }
        record
    }
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

/// The load of one step against a running rig: the experiment's `load` keys at the step's load
/// point, aimed at the rig's entry (the gateway topology: every route of its targets file, in
/// random order, over TLS trusting the rig's CA; an HTTP/3 entry: its certificate's name over
/// TLS trusting the rig's CA). With attribution on, a sample of the requests carries an id.
pub fn load_options(e: &Experiment, step: &Step, rig: &Rig) -> LoadOptions {
    let source = match (&rig.gateway, &rig.entry_tls) {
        (Some(g), _) => TargetSource::File(g.targets.clone()),
        (None, Some(t)) => {
            TargetSource::Url(format!("https://{}:{}/", t.server_name, rig.entry.port()))
        }
        (None, None) => TargetSource::Url(format!("http://{}/", rig.entry)),
    };
    let mut o = load_for(e, step, source);
    let ca = match (&rig.gateway, &rig.entry_tls) {
        (Some(g), _) => Some(g.ca.clone()),
        (None, Some(t)) => Some(t.ca.clone()),
        (None, None) => None,
    };
    if let Some(ca) = ca {
        aim_at_gateway(&mut o, ca, rig.entry, rig.gateway.is_some());
    }
    o.send.trace_every = e.attribution.map(|a| a.every());
    o
}

/// Every request of `o` connected to `entry`, whatever its URL's host, over TLS trusting
/// `ca`; a gateway's routes (`spread`) in random order.
pub(crate) fn aim_at_gateway(o: &mut LoadOptions, ca: PathBuf, entry: SocketAddr, spread: bool) {
    if spread {
        o.send.target_order = Order::Random;
    }
    o.send.connect_to = vec![ConnectTo {
        host: None,
        port: None,
        to_host: Some(entry.ip().to_string()),
        to_port: Some(entry.port()),
    }];
    o.connect.tls.ca = Some(crate::load::CaSource::File(ca));
}

/// The experiment's `load` keys at the step's load point, against `source`: what a lab step
/// and an external step share.
pub fn load_for(e: &Experiment, step: &Step, source: TargetSource) -> LoadOptions {
    let mut o = LoadOptions::new(source);
    o.window.stop = StopAt::Duration(Duration::from_secs_f64(e.duration_secs));
    o.window.warmup = Duration::from_secs_f64(e.warmup_secs);
    o.connections = match e.load.connection_pool {
        0 => step.load.connections,
        pool => pool,
    } as usize;
    if e.load.connection_pool > 0 {
        o.pace.concurrency = Some(step.load.connections as usize);
    }
    o.timeout = Duration::from_millis(e.load.timeout_ms);
    o.pace.seed = step.index as u64 + 1;
    if let Offer::Open { rate_rps, arrival } = step.load.offer {
        o.pace.rate_rps = Some(rate_rps);
        if arrival == Arrival::Poisson {
            o.pace.arrival = Some(Arrival::Poisson);
        }
        o.pace.idle = Some(e.load.idle_strategy);
        o.pace.slack = PacingSlack::from_us(e.load.pacing_slack_us);
    }
    if e.load.threads > 0 {
        o.pace.threads = Some(e.load.threads as usize);
    }
    o.connect.protocol = e.load.protocol;
    if o.connect.protocol.is_multiplexed() {
        o.connect.streams = e.load.streams.max(1) as usize;
    }
    if e.load.request_bytes > 0 && o.connect.protocol == meshbench_results::Protocol::Grpc {
        // A gRPC step pings with this much payload (the backend echoes it back).
        o.send.grpc_payload = e.load.request_bytes as usize;
    } else if e.load.request_bytes > 0 {
        o.send.method = "POST".into();
        o.send.body = Body::Size(e.load.request_bytes);
    }
    o
}

/// The sampler's own cost, stored as a pseudo-role so that it can be checked.
pub(crate) fn sampler_usage(s: &Sampled) -> RoleUsage {
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

/// One reading of every role with an admin endpoint (Envoy's), by role name. Each is bounded
/// (`admin::DEADLINE`), so a rig of three Envoys whose admins are all silent costs the step at
/// most a few seconds outside its measured window.
fn read_admins(rig: &Rig) -> BTreeMap<ChainRole, Result<ProxyCounters, AdminError>> {
    rig.roles
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

/// A role's own counts over the step into its `usage` ([`witness`]); why they are missing, if
/// they are, said once and kept with it.
pub(crate) fn keep_witness(
    usage: &mut RoleUsage,
    role: ChainRole,
    before: &BTreeMap<ChainRole, Result<ProxyCounters, AdminError>>,
    after: &BTreeMap<ChainRole, Result<ProxyCounters, AdminError>>,
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
    before: &BTreeMap<ChainRole, Result<ProxyCounters, AdminError>>,
    after: &BTreeMap<ChainRole, Result<ProxyCounters, AdminError>>,
) -> Option<Result<ProxyCounters, AdminError>> {
    match (before.get(&role)?, after.get(&role)?) {
        (Ok(b), Ok(a)) => Some(Ok(a.since(b))),
        (Err(e), _) | (_, Err(e)) => Some(Err(e.clone())),
    }
}

fn cool_down(e: &Experiment, stop: &Stop) {
    let end = Instant::now() + Duration::from_secs_f64(e.cooldown_secs);
    while Instant::now() < end && !stop.requested() {
        std::thread::sleep(Duration::from_millis(20));
    }
}
