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
use meshbench_k8s::system::{self, ContourInstall, Path as Through, Shape};
use meshbench_lab::program::envoy::ready::{self, AckError, Awaited, Expected, SidecarExpected};
use meshbench_lab::program::envoy::{admin, istio_shape};
use meshbench_lab::sampler;
use meshbench_results::attribution::{Attribution, Sent};
use meshbench_results::{
    ChainRole, Class, Figure, LoadPoint, PlayedBy, Program, Role, StepFailure, Topology,
};
use thiserror::Error;

use crate::external::prometheus::PromError;
use crate::external::read::came_or_went;
use crate::external::{read_window_from, warn_each};
use crate::load::{LoadOptions, TargetSource};
use crate::load_window::Measured;
use crate::measured::{Place, Realised, RoleReading, StepContext, Witnesses};
use crate::observer::Observer;
use crate::step_load::{aim_at_gateway, load_for};

use super::contour::ContourNotReady;
use super::kubelet::KubeletReader;
use super::preflight::images_of;
use super::{shape_of, ClusterSite, AGENTS, ENVOY_ADMIN};
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
    Contour(#[from] ContourNotReady),
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
/// The longest a step waits after its window for a reading past its end.
const KUBELET_PAST_WITHIN: Duration = Duration::from_secs(40);

impl ClusterSite {
    /// Brings the system to `shape`: applies what changed, waits for each rollout and for
    /// each Envoy of `topology` to hold its configuration.
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
        if let Some(contour) = &self.system.contour {
            for (kind, name) in contour.workloads() {
                self.client
                    .wait_rollout_of(kind, &contour.namespace, name, timeout, stop)?;
            }
            if topology == Topology::Gateway {
                return Ok(self.wait_contour_ready(contour, timeout, stop)?);
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

    /// The Envoys of `topology` with one pod each, by role: the pod and what it must hold.
    fn envoys(&self, topology: Topology) -> Result<Vec<(ChainRole, String, Awaited)>, ShapeError> {
        let ns = &self.section.namespace;
        let backend = self.pods(names::BACKEND_PODS)?;
        let Some(backend_pod) = backend.first() else {
            return Err(ShapeError::NoPod("backend"));
        };
        let backend_ip = backend_pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.as_deref()?.parse::<IpAddr>().ok())
            .ok_or(ShapeError::NoBackendAddress)?;
        let backend = SocketAddr::new(backend_ip, system::CAPTURED);
        let host = format!("{}.{ns}.svc.cluster.local", system::BACKEND);
        let name = |p: &Pod| p.metadata.name.clone().unwrap_or_default();
        let mut out = Vec::new();
        for r in topology.chain() {
            match r.role {
                ChainRole::ServerProxy => out.push((
                    r.role,
                    name(backend_pod),
                    Awaited::Sidecar(SidecarExpected::server(system::CAPTURED)),
                )),
                ChainRole::ClientProxy => {
                    let agents = self.pods(&self.agents.agent_selector())?;
                    if let [only] = agents.as_slice() {
                        out.push((
                            r.role,
                            name(only),
                            Awaited::Sidecar(SidecarExpected::client(
                                system::CAPTURED,
                                &host,
                                backend,
                            )),
                        ));
                    }
                }
                ChainRole::Gateway if self.system.contour.is_some() => {}
                ChainRole::Gateway => {
                    let g = self
                        .gateway
                        .as_ref()
                        .expect("a gateway topology has its assets");
                    let pods = self.pods(names::GATEWAY_PODS)?;
                    let Some(pod) = pods.first() else {
                        return Err(ShapeError::NoPod("gateway"));
                    };
                    out.push((
                        r.role,
                        name(pod),
                        Awaited::Gateway(Expected {
                            listener: istio_shape::port_name(names::GATEWAY_HTTPS_PORT),
                            filter_chains: g.domains,
                            route_configs: ready::RouteConfigs::All,
                            routes: g.routes,
                            certificates: g.domains,
                            backend: (format!("||{host}"), vec![backend]),
                        }),
                    ));
                }
                _ => {}
            }
        }
        Ok(out)
    }

    /// Waits until every Envoy of the step holds its configuration, read from its admin
    /// through its pod (the lab's one waiter); fails at once on an update it rejected. `limit`
    /// is for all of them together.
    fn wait_acked(
        &self,
        topology: Topology,
        limit: Duration,
        stop: &Stop,
    ) -> Result<(), ShapeError> {
        let began = Instant::now();
        for (role, pod, awaited) in self.envoys(topology)? {
            let forward = self
                .client
                .port_forward(&self.section.namespace, &pod, ENVOY_ADMIN)
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
        let now = |selector: &str, fallback: &str| pod_pattern(self.pods(selector).ok(), fallback);
        let backend_pods = now(names::BACKEND_PODS, "backend-.*");
        let gateway_pods = now(names::GATEWAY_PODS, "gateway-.*");
        let contour = self.system.contour.as_ref();
        // Every pod of Contour's Envoy (a DaemonSet's: one per node), their figures summed.
        let envoy_pods = |c: &ContourInstall| {
            pod_pattern(self.contour_envoy_pods(c).ok(), &format!("{}-.*", c.envoy))
        };
        let contour_pods = |c: &ContourInstall| {
            pod_pattern(self.contour_pods(c).ok(), &format!("{}-.*", c.deployment))
        };
        let named = |name: &str, preset: Preset, matches: &[(&str, &str)]| ExternalRole {
            name: name.to_string(),
            preset: Some(preset),
            matches: matches
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..ExternalRole::default()
        };
        let role = |r: ChainRole, preset: Preset, matches: &[(&str, &str)]| {
            named(r.name(), preset, matches)
        };
        let agents_pods = format!("{AGENTS}-agents-.*");
        let mut roles: Vec<ExternalRole> = topology
            .chain()
            .iter()
            .filter_map(|r| match r.role {
                ChainRole::ClientProxy => Some(role(
                    r.role,
                    Preset::IstioSidecar,
                    &[("namespace", ns), ("pod", &agents_pods)],
                )),
                ChainRole::ServerProxy => Some(role(
                    r.role,
                    Preset::IstioSidecar,
                    &[("namespace", ns), ("pod", &backend_pods)],
                )),
                ChainRole::Gateway => match contour {
                    // Container `envoy` of Contour's Envoy pods, in Contour's namespace.
                    Some(c) => Some(role(
                        r.role,
                        Preset::Contour,
                        &[("namespace", &c.namespace), ("pod", &envoy_pods(c))],
                    )),
                    None => Some(role(
                        r.role,
                        Preset::IstioSidecar,
                        &[("namespace", ns), ("pod", &gateway_pods)],
                    )),
                },
                ChainRole::Waypoint => Some(role(
                    r.role,
                    Preset::Waypoint,
                    &[("namespace", ns), ("pod", names::WAYPOINT_PODS)],
                )),
                // One DaemonSet: its pods are read once, as the client's tunnel.
                ChainRole::ZtunnelClient => Some(role(r.role, Preset::Ztunnel, &[])),
                ChainRole::ZtunnelServer | ChainRole::Backend | ChainRole::BackendReplica(_) => {
                    None
                }
            })
            .collect();
        // Contour, beside the Envoy it configures, as the lab samples it.
        if let (Some(c), Topology::Gateway) = (contour, topology) {
            roles.push(named(
                Role::Contour.name(),
                Preset::IstioSidecar,
                &[
                    ("namespace", c.namespace.as_str()),
                    ("pod", &contour_pods(c)),
                    ("container", system::CONTOUR),
                ],
            ));
        }
        roles.push(role(
            ChainRole::Backend,
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
    /// window makes its role missing. Once every role has series, their settling is waited for
    /// at most that span and two scrape intervals; the whole wait at most four scrape
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
        let settle_within = Duration::from_secs_f64(steady_for + 2.0 * x.scrape_interval_secs);
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
        if self.system.gateway {
            add(
                "gateway",
                self.pods(names::GATEWAY_PODS).unwrap_or_default(),
            );
        }
        if self.system.client_sidecar {
            add(
                "agents",
                self.pods(&self.agents.agent_selector()).unwrap_or_default(),
            );
        }
        if let Some(c) = &self.system.contour {
            add("contour", self.contour_pods(c).unwrap_or_default());
            add("envoy", self.contour_envoy_pods(c).unwrap_or_default());
        }
        let istio = self.system.gateway
            || self.system.server_sidecar
            || self.system.client_sidecar
            || self.system.waypoint;
        if istio {
            let istiod = self
                .client
                .list::<Pod>(super::ISTIO_NAMESPACE, names::ISTIOD_PODS);
            add("istiod", istiod.unwrap_or_default());
        }
        v
    }

    /// Each single-pod Envoy's admin, through its pod, for the witness; the stats listener
    /// (its admin is a unix socket) of every pod of Contour's Envoy, whose counts are summed.
    fn admins(&self, topology: Topology) -> Vec<(ChainRole, meshbench_k8s::Forward)> {
        let Ok(envoys) = self.envoys(topology) else {
            return Vec::new();
        };
        let mut admins: Vec<(ChainRole, meshbench_k8s::Forward)> = envoys
            .into_iter()
            .filter_map(|(role, pod, _)| {
                self.client
                    .port_forward(&self.section.namespace, &pod, ENVOY_ADMIN)
                    .ok()
                    .map(|f| (role, f))
            })
            .collect();
        if let (Some(contour), Topology::Gateway) = (&self.system.contour, topology) {
            let stats = self.section.contour.stats_port;
            for pod in self.contour_envoy_pods(contour).unwrap_or_default() {
                let name = pod.metadata.name.clone().unwrap_or_default();
                if let Ok(f) = self.client.port_forward(&contour.namespace, &name, stats) {
                    admins.push((ChainRole::Gateway, f));
                }
            }
        }
        admins
    }
}

/// A step's chain on the cluster: the run's site, the chain and its load, as
/// [`crate::rig_place::RigPlace`] holds them for a rig on this machine.
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
}

impl Realised for ClusterStep<'_> {
    fn load_options(&self, step: &StepContext<'_>) -> LoadOptions {
        self.site
            .load_options(step.e, step.at.step, &self.load, self.topology)
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
            if self.site.system.contour.is_some() {
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
        let gateway = match self.site.system.contour {
            Some(_) => Program::Contour,
            None => Program::Istio,
        };
        reading
            .roles
            .into_iter()
            .filter_map(|mut r| {
                let chain = match r.usage.role.clone() {
                    Role::Chain(chain) => chain,
                    Role::Contour => {
                        r.usage.program = PlayedBy::Proxy(Program::Contour);
                        r.usage.cpu_limit = shape.control_plane.cpu_cores;
                        return Some(RoleReading::read(r, None));
                    }
                    Role::Sampler | Role::External(_) | Role::Istiod => return None,
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

/// A `pod` matcher for the pods listed: their names as alternatives (pod names are DNS
/// labels: nothing in them is special to a regular expression), or `fallback` when there are
/// none (or they could not be listed).
fn pod_pattern(pods: Option<Vec<Pod>>, fallback: &str) -> String {
    let names: Vec<String> = pods
        .unwrap_or_default()
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    match names.is_empty() {
        true => fallback.to_string(),
        false => names.join("|"),
    }
}
