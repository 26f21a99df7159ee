//! One step on the cluster, as a [`Place`] of the one measured step: its shape applied and
//! waited for (each rollout, each Envoy's configuration read from its admin through a
//! port-forward), its load from the agent pods, each single-pod Envoy's own counts around it
//! (the witness), and each role read over the steady window, from its kubelet through the API
//! server (polled while the step runs) or from Prometheus; every failure ends up in the
//! record.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use meshbench_engine::Stop;
use meshbench_experiment::config::Experiment;
use meshbench_experiment::external::promql::with_window;
use meshbench_experiment::external::{ExternalRole, Preset};
use meshbench_experiment::{ChainVariant, Step};
use meshbench_k8s::blocking::ApiError;
use meshbench_k8s::k8s_openapi;
use meshbench_k8s::names;
use meshbench_k8s::rollout::RolloutError;
use meshbench_k8s::system::{self, Path as Through, Shape};
use meshbench_lab::istio::ADMIN_PORT;
use meshbench_lab::program::envoy::admin;
use meshbench_lab::program::envoy::ready::{self, AckError, Awaited, SidecarExpected};
use meshbench_lab::sampler;
use meshbench_results::attribution::{Attribution, Sent};
use meshbench_results::{
    ChainRole, Class, Figure, LoadPoint, PlayedBy, Program, Role, StepFailure, Topology,
};
use thiserror::Error;

use crate::changes::StepChanges;
use crate::load::{LoadOptions, TargetSource};
use crate::load_window::Measured;
use crate::measured::{Place, Realised, RoleReading, StepContext, Witnesses};
use crate::observer::Observer;
use crate::place::external::prometheus::PromError;
use crate::place::external::read::came_or_went;
use crate::place::external::{read_window_from, warn_each};
use crate::step_load::{aim_at_gateway, load_for};

use super::gateway::GatewayNotReady;
use super::kubelet::KubeletReader;
use super::pods::{self, reader_role};
use super::preflight::images_of;
use super::{shape_of, ClusterSite, AGENTS, ISTIO_NAMESPACE};
use meshbench_experiment::cluster::UsageFrom;
use meshbench_k8s::borrowed::BorrowedError;
use meshbench_k8s::undo::{Undo, UndoError};
use meshbench_results::{Sample, UsageReader, UsageSource};

/// Why a step's shape could not be realised on the cluster (the step fails with it).
#[derive(Debug, Error)]
pub enum ShapeError {
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error(transparent)]
    Rollout(#[from] RolloutError),
    #[error("no {0} pod")]
    NoPod(&'static str),
    #[error("the backend pod has no address yet")]
    NoBackendAddress,
    #[error("{role}: {source}")]
    Forward { role: ChainRole, source: ApiError },
    #[error("{role} (pod {pod}): {source}")]
    NotAcked {
        role: ChainRole,
        pod: String,
        source: AckError,
    },
    #[error(transparent)]
    Borrowed(#[from] BorrowedError),
    #[error("the run's journal: {0}")]
    Journal(#[from] UndoError),
    #[error(transparent)]
    Gateway(#[from] GatewayNotReady),
}

/// Why the reader of a step's roles did not yet have them (the step goes on, warned), or a
/// stop (the step is not measured).
#[derive(Debug, Error)]
pub enum ObservableError {
    #[error("Prometheus: {0}")]
    Prometheus(PromError),
    #[error("stopped while waiting for the roles' first readings")]
    Stopped,
    #[error("{reader} did not have the roles' series within {} s ({})", .limit.as_secs(), .waiting.join("; "))]
    NotYet {
        reader: &'static str,
        limit: Duration,
        waiting: Vec<String>,
    },
    #[error("the kubelets cannot be read: {0}")]
    Kubelet(meshbench_k8s::ApiError),
}

/// The longest a step waits for the kubelets' first readings of its roles (a pod a rollout
/// just made is read at the kubelet's next housekeeping, 10 s by default).
const KUBELET_FIRST_WITHIN: Duration = Duration::from_secs(45);
/// How long after a new container's first series cAdvisor may take to show its others: the
/// kubelet's housekeeping of each container (its pod's sandbox, which holds the network, too)
/// runs every 10 s, at most 15 s apart.
const CADVISOR_FIRST_WITHIN_SECS: f64 = 15.0;
/// The longest a step waits after its window for a reading past its end.
const KUBELET_PAST_WITHIN: Duration = Duration::from_secs(40);

impl ClusterSite {
    /// Brings the system to `shape`: applies what changed, waits for each rollout and for
    /// each Envoy of `topology` (the gateway's, the sidecars') to hold its configuration.
    fn realise_shape(
        &self,
        topology: Topology,
        shape: &Shape,
        stop: &Stop,
    ) -> Result<(), ShapeError> {
        let timeout = Duration::from_secs_f64(self.section.rollout_timeout_secs);
        let mut applied = self.applied.lock().expect("not poisoned");
        if applied.as_ref() != Some(shape) {
            self.client.apply_all(self.system.render(shape))?;
            *applied = Some(shape.clone());
        }
        drop(applied);
        self.set_borrowed_limits(shape)?;
        for d in self.system.deployments() {
            self.client
                .wait_rollout(&self.section.namespace, d, timeout, stop)?;
        }
        if let Some(g) = &self.gateway {
            g.runs.wait_rollouts(&self.client, timeout, stop)?;
            if topology == Topology::Gateway {
                let (backend, _) = self.backend_endpoint()?;
                g.runs.wait_ready(&self.client, backend, timeout, stop)?;
            }
        }
        self.wait_acked(topology, timeout, stop)
    }

    /// Sets the step's limits on the containers the run does not own (Contour's Envoy, Contour);
    /// before the first change of each, its `resources` as they are go into the journal, on
    /// disk, so that however the run ends they are put back exactly.
    fn set_borrowed_limits(&self, shape: &Shape) -> Result<(), ShapeError> {
        for limit in self.system.borrowed_limits(shape) {
            let mut borrowed = self.borrowed.lock().expect("not poisoned");
            if !borrowed.contains(&limit.container) {
                let before = limit.container.resources(&self.client)?;
                let c = &limit.container;
                let mut journal = self.journal.lock().expect("not poisoned");
                if let Some(journal) = journal.as_mut() {
                    journal.record(&Undo::RestoreResources {
                        namespace: c.namespace.clone(),
                        kind: c.kind,
                        name: c.name.clone(),
                        container: c.container.clone(),
                        before,
                    })?;
                }
                borrowed.push(limit.container.clone());
            }
            drop(borrowed);
            limit
                .container
                .set_resources(&self.client, &limit.resources)?;
        }
        Ok(())
    }

    /// The backend's endpoint (its first pod's address, on the captured port) and that pod.
    fn backend_endpoint(&self) -> Result<(SocketAddr, Pod), ShapeError> {
        let backend = self.pods(names::BACKEND_PODS)?;
        let Some(pod) = backend.into_iter().next() else {
            return Err(ShapeError::NoPod("backend"));
        };
        let ip = pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.as_deref()?.parse::<IpAddr>().ok())
            .ok_or(ShapeError::NoBackendAddress)?;
        Ok((SocketAddr::new(ip, system::CAPTURED), pod))
    }

    /// The sidecars of `topology` with one pod each, by role: the pod and what it must hold
    /// (the gateway is its own: [`super::gateway::ClusterGateway`]).
    fn sidecars(
        &self,
        topology: Topology,
    ) -> Result<Vec<(ChainRole, String, Awaited)>, ShapeError> {
        let (backend, backend_pod) = self.backend_endpoint()?;
        let host = system::backend_host(&self.section.namespace);
        let mut out = Vec::new();
        for r in topology.chain() {
            match r.role {
                ChainRole::ServerProxy => out.push((
                    r.role,
                    pods::name(&backend_pod),
                    Awaited::Sidecar(SidecarExpected::server(system::CAPTURED)),
                )),
                ChainRole::ClientProxy => {
                    let agents = self.pods(&self.agents.agent_selector())?;
                    if let [only] = agents.as_slice() {
                        out.push((
                            r.role,
                            pods::name(only),
                            Awaited::Sidecar(SidecarExpected::client(
                                system::CAPTURED,
                                &host,
                                backend,
                            )),
                        ));
                    }
                }
                _ => {}
            }
        }
        Ok(out)
    }

    /// Waits until every sidecar of the step holds its configuration, read from its admin
    /// through its pod (the lab's one waiter); fails at once on an update it rejected. `limit`
    /// is for all of them together.
    fn wait_acked(
        &self,
        topology: Topology,
        limit: Duration,
        stop: &Stop,
    ) -> Result<(), ShapeError> {
        let began = Instant::now();
        for (role, pod, awaited) in self.sidecars(topology)? {
            let forward = self
                .client
                .port_forward(&self.section.namespace, &pod, ADMIN_PORT)
                .map_err(|source| ShapeError::Forward { role, source })?;
            let left = limit.saturating_sub(began.elapsed());
            // A pod that goes is seen by the next reading, which then fails to connect.
            ready::wait_acked(forward.addr(), &awaited, left, stop, &mut || None)
                .map_err(|source| ShapeError::NotAcked { role, pod, source })?;
        }
        Ok(())
    }

    /// The load of a step of `topology`, aimed at the system through the Services' addresses.
    fn load_options(
        &self,
        e: &Experiment,
        step: &Step,
        load: &LoadPoint,
        topology: Topology,
    ) -> LoadOptions {
        let through = match topology {
            Topology::Serveronly => Through::ServerSidecar,
            Topology::Clientonly => Through::ClientSidecar,
            Topology::Both => Through::BothSidecars,
            _ => Through::Direct,
        };
        match (&self.gateway, topology) {
            (Some(g), Topology::Gateway) => {
                let mut o = load_for(e, step, load, TargetSource::File(g.targets.clone()));
                aim_at_gateway(&mut o, g.ca.clone(), g.entry, true);
                o
            }
            _ => load_for(
                e,
                step,
                load,
                TargetSource::Url(format!("http://{}:{}/", self.backend_vip, through.port())),
            ),
        }
    }

    /// The roles of `topology` and the backend, as Prometheus reads them (cAdvisor).
    ///
    /// The backend's and the gateway's pods are named as they are now: a pod of the template
    /// before (gone since the rollout) has series that end before the window, and a series
    /// that comes or goes in a window makes the role missing (`external::read`).
    fn roles(&self, topology: Topology) -> Vec<ExternalRole> {
        let ns = self.section.namespace.as_str();
        let backend_pods = pods::pattern(self.pods(names::BACKEND_PODS).ok(), "backend-.*");
        let agents_pods = format!("{AGENTS}-agents-.*");
        let mut roles = Vec::new();
        for r in topology.chain() {
            let role =
                |preset, matches: &[(&str, &str)]| reader_role(r.role.name(), preset, matches);
            match r.role {
                ChainRole::ClientProxy => roles.push(role(
                    Preset::IstioSidecar,
                    &[("namespace", ns), ("pod", &agents_pods)],
                )),
                ChainRole::ServerProxy => roles.push(role(
                    Preset::IstioSidecar,
                    &[("namespace", ns), ("pod", &backend_pods)],
                )),
                // Its Envoy, and the control plane beside it that the run limits.
                ChainRole::Gateway => {
                    roles.extend((self.gateway.iter()).flat_map(|g| g.runs.roles(&self.client)))
                }
                ChainRole::Waypoint => roles.push(role(
                    Preset::Waypoint,
                    &[("namespace", ns), ("pod", names::WAYPOINT_PODS)],
                )),
                // One DaemonSet: its pods are read once, as the client's tunnel.
                ChainRole::ZtunnelClient => roles.push(role(Preset::Ztunnel, &[])),
                ChainRole::ZtunnelServer | ChainRole::Backend | ChainRole::BackendReplica(_) => {}
            }
        }
        roles.push(reader_role(
            ChainRole::Backend.name(),
            Preset::IstioSidecar,
            &[
                ("namespace", ns),
                ("pod", &backend_pods),
                ("container", "backend|backend-direct"),
            ],
        ));
        roles
    }

    /// Waits until Prometheus has every role's series of the pods as they are now, and has had
    /// the same series for a rate window (less the warm-up, which comes before the steady
    /// window): a pod a rollout just made is scraped a scrape interval or more later, the pod
    /// it replaced leaves its series until then, and a series that is not there for the whole
    /// window makes its role missing. A role is seen once its CPU has series; its other
    /// counters (a pod's network is its sandbox's, which cAdvisor finds on its own) are then
    /// waited for, and the settling of all, at most that span, two scrape intervals and
    /// cAdvisor's housekeeping of a new container; the whole wait at most four scrape
    /// intervals, that span and half a minute, then why not.
    fn wait_observable(
        &self,
        e: &Experiment,
        roles: &[ExternalRole],
        stop: &Stop,
    ) -> Result<(), ObservableError> {
        let x = self.external();
        let window = x.window_ms(e.sample_interval_ms);
        let timeout = Duration::from_secs_f64(x.query_timeout_secs);
        // The span the rate windows look back before the steady window, and a scrape's margin.
        let steady_for = (window as f64 / 1000.0 - e.warmup_secs).max(0.0) + x.scrape_interval_secs;
        let limit = Duration::from_secs_f64(4.0 * x.scrape_interval_secs + steady_for + 30.0);
        let began = Instant::now();
        let Some(prom) = self.prometheus(timeout, limit + timeout) else {
            return Ok(());
        };
        let queries: Vec<(String, String, Vec<String>)> = roles
            .iter()
            .filter_map(|r| {
                let q = r.queries();
                let cpu = q.query(Figure::Cpu).ok()?.expr.clone();
                let counters = Figure::ALL
                    .iter()
                    .filter_map(|f| q.query(*f).ok()?.counter.clone())
                    .collect();
                Some((r.name.clone(), with_window(&cpu, window), counters))
            })
            .collect();
        // Once every role has series, their settling is waited for at most this long: a series
        // that still comes or goes after it is the restart check's to judge, in the window.
        let settle_within = Duration::from_secs_f64(
            steady_for + 2.0 * x.scrape_interval_secs + CADVISOR_FIRST_WITHIN_SECS,
        );
        let mut all_seen_at: Option<Instant> = None;
        let mut waiting: Vec<String> = Vec::new();
        loop {
            waiting.clear();
            let mut unseen = false;
            let now = sampler::now_ms() as f64 / 1000.0;
            for (name, q, counters) in &queries {
                // Each query is bounded by the query timeout; the stop is looked at between.
                if stop.requested() {
                    return Err(ObservableError::Stopped);
                }
                let seen = prom.query(q, now).and_then(|series| {
                    if series.is_empty() {
                        return Ok(Some((true, "no series yet".to_string())));
                    }
                    for sel in counters {
                        // A new pod's series come one container at a time (its network's with
                        // the pod's sandbox): one not there yet is waited for, as one that came.
                        if prom.query(sel, now)?.is_empty() {
                            return Ok(Some((false, format!("no series of {sel} yet"))));
                        }
                        if let Some(which) = came_or_went(&prom, sel, now - steady_for, now)? {
                            return Ok(Some((
                                false,
                                format!("{which} came or went within the last {steady_for:.0} s"),
                            )));
                        }
                    }
                    Ok(None)
                });
                match seen {
                    Ok(None) => {}
                    Ok(Some((none_yet, why))) => {
                        unseen |= none_yet;
                        waiting.push(format!("{name}: {why}"));
                    }
                    Err(e) if e.is_fatal() => return Err(ObservableError::Prometheus(e)),
                    Err(e) => waiting.push(format!("{name}: {e}")),
                }
            }
            if waiting.is_empty() {
                break;
            }
            if !unseen && all_seen_at.get_or_insert_with(Instant::now).elapsed() >= settle_within {
                break;
            }
            if began.elapsed() >= limit {
                return Err(ObservableError::NotYet {
                    reader: "Prometheus",
                    limit,
                    waiting,
                });
            }
            if !stop.sleep(Duration::from_secs(1)) {
                return Err(ObservableError::Stopped);
            }
        }
        Ok(())
    }

    /// Starts reading `roles` from the kubelets of the nodes their pods run on, and waits
    /// until each has a first reading (at most [`KUBELET_FIRST_WITHIN`]; then the step goes
    /// on with the reader and why not yet, and what has none is missing). An error: no reader
    /// (it could not start, or a stop).
    fn start_kubelet_reader(
        &self,
        roles: &[ExternalRole],
        stop: &Stop,
    ) -> Result<(KubeletReader, Option<ObservableError>), ObservableError> {
        let nodes = self.role_nodes(roles).map_err(ObservableError::Kubelet)?;
        let reader = KubeletReader::start(&self.client, nodes, roles.to_vec())
            .map_err(ObservableError::Kubelet)?;
        let began = Instant::now();
        loop {
            let waiting = reader.waiting();
            if waiting.is_empty() {
                return Ok((reader, None));
            }
            if began.elapsed() >= KUBELET_FIRST_WITHIN {
                let why = ObservableError::NotYet {
                    reader: "the kubelets",
                    limit: KUBELET_FIRST_WITHIN,
                    waiting,
                };
                return Ok((reader, Some(why)));
            }
            if !stop.sleep(Duration::from_millis(250)) {
                return Err(ObservableError::Stopped);
            }
        }
    }

    /// The nodes that run a pod of the namespaces `roles` read.
    fn role_nodes(&self, roles: &[ExternalRole]) -> Result<Vec<String>, ApiError> {
        let mut namespaces = std::collections::BTreeSet::new();
        for r in roles {
            let q = r.queries();
            let summed = q.query(Figure::Cpu).ok().and_then(|q| q.summed.clone());
            for m in summed.iter().flat_map(|s| s.matchers.iter()) {
                if m.label == "namespace" {
                    namespaces.insert(m.value.clone());
                }
            }
        }
        let mut nodes = std::collections::BTreeSet::new();
        for ns in namespaces {
            for p in self.client.list::<Pod>(&ns, "")? {
                if let Some(node) = p.spec.and_then(|s| s.node_name) {
                    nodes.insert(node);
                }
            }
        }
        Ok(nodes.into_iter().collect())
    }

    /// What runs the step: the cluster's and its nodes' versions (from the checks before the
    /// first step), and the image of each container of the system under test as its pods
    /// report it now (the proxies', istiod's or Contour's).
    fn versions(&self) -> BTreeMap<String, String> {
        let mut v = self.preflight.versions();
        v.insert("meshbench".into(), env!("CARGO_PKG_VERSION").into());
        let mut add = |who: &str, pods: Vec<Pod>| {
            for (container, image) in images_of(&pods) {
                v.insert(format!("{who}:{container}"), image);
            }
        };
        add(
            "backend",
            self.pods(names::BACKEND_PODS).unwrap_or_default(),
        );
        for (who, pods) in (self.gateway.iter()).flat_map(|g| g.runs.pods(&self.client)) {
            add(who, pods);
        }
        if self.system.client_sidecar {
            add(
                "agents",
                self.pods(&self.agents.agent_selector()).unwrap_or_default(),
            );
        }
        let istio = self.system.gateway
            || self.system.server_sidecar
            || self.system.client_sidecar
            || self.system.waypoint;
        if istio {
            let istiod = self.client.list::<Pod>(ISTIO_NAMESPACE, names::ISTIOD_PODS);
            add("istiod", istiod.unwrap_or_default());
        }
        v
    }

    /// Each sidecar's admin, through its pod, and the gateway's counters (every pod of its
    /// Envoy), for the witness.
    fn admins(&self, topology: Topology) -> Vec<(ChainRole, meshbench_k8s::Forward)> {
        let Ok(sidecars) = self.sidecars(topology) else {
            return Vec::new();
        };
        let mut admins: Vec<(ChainRole, meshbench_k8s::Forward)> = sidecars
            .into_iter()
            .filter_map(|(role, pod, _)| {
                self.client
                    .port_forward(&self.section.namespace, &pod, ADMIN_PORT)
                    .ok()
                    .map(|f| (role, f))
            })
            .collect();
        if let (Some(g), Topology::Gateway) = (&self.gateway, topology) {
            let counters = g.runs.counters(&self.client);
            admins.extend(counters.into_iter().map(|f| (ChainRole::Gateway, f)));
        }
        admins
    }
}

/// A step's chain on the cluster: the run's site, the chain and its load, as
/// [`crate::place::rig::RigPlace`] holds them for a rig on this machine.
pub(crate) struct ClusterPlace<'a> {
    pub site: &'a ClusterSite,
    pub variant: &'a ChainVariant,
    pub load: &'a LoadPoint,
}

impl Place for ClusterPlace<'_> {
    fn realise<'s>(
        &'s self,
        step: &StepContext<'s>,
        observer: &mut dyn Observer,
    ) -> Result<Box<dyn Realised + 's>, StepFailure> {
        let (e, at, site) = (step.e, step.at, self.site);
        let (topology, load) = (self.variant.topology, *self.load);
        let shape = shape_of(e, self.variant);
        let stop = step.stop;
        // A stop while the step is set up is no failure of the system: the step is stored as
        // stopped before its load, and the experiment ends there.
        if stop.requested() {
            return Err(StepFailure::StoppedBeforeLoad);
        }
        site.realise_shape(topology, &shape, stop).map_err(|why| {
            StepFailure::from_setup(stop, false, || {
                StepFailure::ClusterNotShaped(why.to_string())
            })
        })?;
        let roles = site.roles(topology);
        let warn = |observer: &mut dyn Observer, why: ObservableError| {
            observer.warning(&format!(
                "{}: {why}; the step goes on, those roles may be missing",
                at.tag(&at.step.variant())
            ))
        };
        let mut kubelet = None;
        match site.section.usage_from() {
            UsageFrom::Kubelet => match site.start_kubelet_reader(&roles, stop) {
                Ok((reader, not_yet)) => {
                    kubelet = Some(reader);
                    if let Some(why) = not_yet {
                        warn(observer, why);
                    }
                }
                Err(ObservableError::Stopped) => return Err(StepFailure::StoppedBeforeLoad),
                Err(why) => warn(observer, why),
            },
            UsageFrom::PrometheusUrl(_) | UsageFrom::PrometheusService { .. } => {
                match site.wait_observable(e, &roles, stop) {
                    Ok(()) => {}
                    Err(ObservableError::Stopped) => return Err(StepFailure::StoppedBeforeLoad),
                    Err(why) => warn(observer, why),
                }
            }
        }
        let admins = site.admins(topology);
        if stop.requested() {
            return Err(StepFailure::StoppedBeforeLoad);
        }
        // The logs attribution reads: the step's warm-up and load, and a minute to spare.
        let log_window = Duration::from_secs_f64(e.warmup_secs + e.duration_secs + 60.0);
        Ok(Box::new(ClusterStep {
            site,
            topology,
            load,
            shape,
            roles,
            kubelet,
            admins,
            log_window,
            versions: site.versions(),
            changes: self.variant.changes,
        }))
    }
}

/// A step's shape applied on the cluster, with its roles as their reader selects them (the
/// kubelets' reader polling, when it is them) and a port-forward to each single-pod Envoy's
/// admin (closed when dropped).
struct ClusterStep<'a> {
    site: &'a ClusterSite,
    topology: Topology,
    load: LoadPoint,
    shape: Shape,
    roles: Vec<ExternalRole>,
    /// Reading the roles from their kubelets since before the load (no Prometheus named).
    kubelet: Option<KubeletReader>,
    admins: Vec<(ChainRole, meshbench_k8s::Forward)>,
    /// How far back the proxies' logs are read for attribution.
    log_window: Duration,
    /// What runs the step (the cluster's versions and the pods' images).
    versions: BTreeMap<String, String>,
    /// One of a changes pair: with the changes (true) or without (false).
    changes: Option<bool>,
}

impl Realised for ClusterStep<'_> {
    fn load_options(&self, step: &StepContext<'_>) -> LoadOptions {
        self.site
            .load_options(step.e, step.at.step, &self.load, self.topology)
    }

    fn changes(&mut self, step: &StepContext<'_>) -> Result<Option<StepChanges>, StepFailure> {
        self.changes
            .map(|apply| self.site.step_changes(step.e, apply))
            .transpose()
            .map_err(StepFailure::ClusterNotShaped)
    }

    fn attribution(
        &self,
        _step: &StepContext<'_>,
        sample_rate: f64,
        sent: &[Sent],
    ) -> Option<Attribution> {
        Some(self.site.attribute(
            self.topology,
            self.log_window,
            sample_rate,
            sent,
            &self.site.stop,
        ))
    }

    /// Each role's Envoy counts; a role of several pods (Contour's Envoy as a DaemonSet, one
    /// per node) is their sum, saying how many pods it sums.
    fn witnesses(&self) -> Witnesses {
        let mut witnesses = Witnesses::new();
        for (role, f) in &self.admins {
            let read = admin::read(f.addr());
            match witnesses.remove(role) {
                None => witnesses.insert(*role, read),
                Some(Ok(mut sum)) => witnesses.insert(
                    *role,
                    read.map(|one| {
                        sum += one;
                        sum
                    }),
                ),
                Some(Err(e)) => witnesses.insert(*role, Err(e)),
            };
        }
        if let Some(Ok(gateway)) = witnesses.get_mut(&ChainRole::Gateway) {
            if self
                .site
                .gateway
                .as_ref()
                .is_some_and(|g| g.runs.sums_pods())
            {
                let pods = self
                    .admins
                    .iter()
                    .filter(|(r, _)| *r == ChainRole::Gateway)
                    .count();
                gateway.pods = Some(pods as u32);
            }
        }
        witnesses
    }

    fn roles(
        &mut self,
        step: &StepContext<'_>,
        measured: &mut Measured,
        observer: &mut dyn Observer,
    ) -> Vec<RoleReading> {
        let reading = match self.kubelet.as_mut() {
            Some(reader) => {
                reader.wait_past(measured.window_ms.1, KUBELET_PAST_WITHIN, step.stop);
                reader.read(measured.window_ms)
            }
            None => {
                let x = self.site.external();
                let timeout = Duration::from_secs_f64(x.query_timeout_secs);
                match self.site.prometheus(timeout, 3 * timeout) {
                    Some(prom) => read_window_from(
                        || prom,
                        step.e,
                        &x,
                        &self.roles,
                        measured.window_ms,
                        step.stop,
                    ),
                    // The kubelets' reader did not start (said when the step began).
                    None => super::kubelet::unread(&self.roles, "the kubelets could not be read"),
                }
            }
        };
        warn_each(&reading, step, observer);
        let shape = &self.shape;
        let runs = self.site.gateway.as_ref().map(|g| &g.runs);
        let gateway = runs.map_or(Program::Istio, |g| g.program());
        // The control plane the run limits, read beside the gateway's Envoy (Contour).
        let control_plane = runs.and_then(|g| g.control_plane());
        reading
            .roles
            .into_iter()
            .filter_map(|mut r| {
                let chain = match r.usage.role.clone() {
                    Role::Chain(chain) => chain,
                    role if control_plane.as_ref().is_some_and(|(cp, _)| *cp == role) => {
                        let (_, program) = control_plane.as_ref().expect("just matched");
                        r.usage.program = PlayedBy::Proxy(*program);
                        r.usage.cpu_limit = shape.control_plane.cpu_cores;
                        return Some(RoleReading::read(r, None));
                    }
                    _ => return None,
                };
                r.usage.program = match chain {
                    ChainRole::Backend => PlayedBy::Backend,
                    ChainRole::Gateway => PlayedBy::Proxy(gateway),
                    _ => PlayedBy::Proxy(Program::Istio),
                };
                r.usage.cpu_limit = match (chain, chain.class()) {
                    (ChainRole::ClientProxy, _) => shape.client_proxy.cpu_cores,
                    (_, Class::Proxy) => shape.proxy.cpu_cores,
                    (_, Class::Backend) => shape.backend.cpu_cores,
                    (_, Class::Tunnel | Class::ControlPlane) => None,
                };
                Some(RoleReading::read(r, Some(chain)))
            })
            .collect()
    }

    fn versions(&self) -> Option<BTreeMap<String, String>> {
        Some(self.versions.clone())
    }

    /// The kubelets at the spacing of their own readings, or Prometheus at its scrapes'.
    fn usage_source(&self, _kept: &[&[Sample]]) -> UsageSource {
        let scrapes = Some((self.site.section.scrape_interval_secs * 1000.0).round() as u64);
        match (&self.kubelet, self.site.section.usage_from()) {
            (Some(k), _) => UsageSource {
                reader: UsageReader::Kubelet,
                every_ms: k.every_ms(),
            },
            (None, UsageFrom::PrometheusService { .. }) => UsageSource {
                reader: UsageReader::PrometheusService,
                every_ms: scrapes,
            },
            (None, UsageFrom::PrometheusUrl(_)) => UsageSource {
                reader: UsageReader::Prometheus,
                every_ms: scrapes,
            },
            (None, UsageFrom::Kubelet) => UsageSource {
                reader: UsageReader::Kubelet,
                every_ms: None,
            },
        }
    }
}
