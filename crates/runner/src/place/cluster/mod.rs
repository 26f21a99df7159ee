//! A step realised on a Kubernetes cluster: the same step as the lab's (topology, limits,
//! load), the same record, answers and exports; only where the system under test lives and
//! who reads its cost differ. The lab starts processes under cgroups and samples them; here
//! meshbench applies the system under test ([`meshbench_k8s::system`]) in a namespace of its
//! own, sends the load from agent pods (an Indexed Job whose agents dial this process), and
//! reads each role's CPU and memory through Prometheus from the kubelets' cAdvisor, the
//! reader of `external` steps.
//!
//! ```text
//! start:  Istio there? namespace new? ─► journal ─► namespace, backend (+ gateway) ─► agents ─► fleet
//! step:   shape (limits, ambient labels) ─► apply, wait for each rollout, each Envoy acked
//!         ─► load from the agents ─► each Envoy's own counts (port-forward to its admin)
//!         ─► roles read from Prometheus over the steady window ─► StepRecord
//! end:    namespace deleted (and so everything), journal removed
//! ```
//!
//! Everything meshbench creates is in its namespace, and the namespace is written in the
//! journal ([`meshbench_k8s::undo`]) before it is created: the end of the run deletes it,
//! also after an error or Ctrl-C (on drop), and a watcher process outside the run's process
//! group deletes it when the run is killed. Outside the namespace one thing is changed, with
//! `gateway.type: contour` only: the `resources` of the cluster's Contour's containers, each
//! journaled whole before its first change and put back the same ways, before the namespace.
//!
//! - `mod.rs`: the run's cluster: checked, set up (the journal first), put back;
//! - `render.rs`: what an experiment deploys, from its file (pure but for the gateway's
//!   certificates): the system, each step's shape, the agents, `--dry-run`'s description;
//! - `step.rs`: one step there: realised, loaded, read;
//! - `changes.rs`: a step's changes there: the gateway's objects through the API server, the
//!   backend's Deployment rolled;
//! - `gateway/`: a step's gateway, Istio's or the cluster's Contour, as one
//!   [`gateway::ClusterGateway`]: what the cluster must have for it, where the load enters,
//!   when it is ready, what is read of it;
//! - `pods.rs`: the live pods a step reads, and a role as the figures' reader selects it;
//! - `tests.rs`: a step's set-up against a stop, on a played API server and Prometheus.

pub mod agent_pods;
mod attribution;
mod changes;
mod gateway;
pub mod kubelet;
mod pods;
pub mod preflight;
mod render;
mod step;
#[cfg(test)]
mod tests;

pub use render::{agents_of, describe, shape_of, system_of};
use render::{first_shape, gateway_objects};
pub(crate) use step::ClusterPlace;

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Service};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use meshbench_engine::Stop;
use meshbench_experiment::cluster::{ClusterSection, UsageFrom};
use meshbench_experiment::config::Experiment;
use meshbench_k8s::blocking::ApiError;
use meshbench_k8s::k8s_openapi;
use meshbench_k8s::objects::istio::MeshConfig;
use meshbench_k8s::system::{self, Shape, System};
use meshbench_k8s::undo::{self, Header, Journal, Undo, UndoError};
use meshbench_k8s::{names, BlockingClient, ClusterError, DistributedRun, Objects};
use meshbench_lab::istio::NAMESPACE as ISTIO_NAMESPACE;
use meshbench_lab::program::envoy::access_log;
use meshbench_results::{StepKind, Topology};
use thiserror::Error;

use crate::agents::{Fleet, FleetError};
use crate::observer::Observer;
use crate::place::external::prometheus::Prometheus;
use agent_pods::AgentsError;
pub use agent_pods::Coordinator;
use gateway::{ClusterGateway, NeededCrd};
use preflight::{Preflight, PreflightError};

/// The agents' objects' name prefix (pods `meshbench-agents-N-...`).
const AGENTS: &str = "meshbench";
/// Where an agent pod listens (on its own loopback) when the coordinator comes through a
/// port-forward.
pub const AGENT_PORT: u16 = crate::agents::DEFAULT_PORT;
/// The longest the namespace may take to go at the end.
const GONE_WITHIN: Duration = Duration::from_secs(180);

/// Why a run could not be set up on the cluster (a step that fails is not one: it is stored).
#[derive(Debug, Error)]
pub enum SiteError {
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error(transparent)]
    Undo(#[from] UndoError),
    #[error(transparent)]
    Agents(#[from] ClusterError),
    #[error(transparent)]
    Fleet(#[from] FleetError),
    #[error("the cluster cannot run this experiment: {}", .0.join("; "))]
    Missing(Vec<String>),
    #[error("namespace {0} already exists; meshbench creates its own namespace and deletes it at the end: name another (cluster.namespace), or delete it")]
    NamespaceExists(String),
    #[error("the gateway's objects: {0}")]
    Gateway(String),
    #[error("Service {0} has no cluster IP")]
    NoAddress(String),
    #[error("could not make a scratch directory for the gateway's files: {0}")]
    Scratch(std::io::Error),
    /// A stop (Ctrl-C, SIGTERM) came before the first step: nothing was measured, and the
    /// cluster was put back (as far as `put_back` says) before this was returned.
    #[error("stopped in the bring-up ({during}), before any step: {put_back}")]
    Stopped { during: BringUp, put_back: PutBack },
    /// What the checks before the first step found (an image that cannot be pulled, a node
    /// selector that matches nothing, a path to the roles' figures that does not answer).
    #[error(transparent)]
    Preflight(PreflightError),
}

/// Where the bring-up was when a stop came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BringUp {
    /// Reading what the cluster has (Istio's CRDs, the namespace).
    Checking,
    /// Applying the namespace and the system under test.
    Applying,
    /// Waiting for the agent pods to be ready (scheduled, pulled, started).
    AgentPods { ready: usize, wanted: usize },
    /// Waiting for the agents in the pods to dial this process.
    Dialling { joined: usize, wanted: usize },
}

impl std::fmt::Display for BringUp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BringUp::Checking => f.write_str("checking the cluster"),
            BringUp::Applying => f.write_str("applying the system under test"),
            BringUp::AgentPods { ready, wanted } => {
                write!(f, "agent pods {ready} of {wanted} ready")
            }
            BringUp::Dialling { joined, wanted } => {
                write!(f, "agents {joined} of {wanted} dialled in")
            }
        }
    }
}

/// What a run stopped during its bring-up did to put the cluster back.
#[derive(Debug)]
pub enum PutBack {
    /// Nothing was left on the cluster (nothing was made yet, or it was already gone).
    Nothing,
    /// The run's namespace, and everything in it, was deleted and waited for.
    Deleted { namespace: String, took: Duration },
    /// Not yet: the deletion was asked but not seen through; the journal stays, for the
    /// run's watcher or `meshbench k8s restore`.
    NotYet(UndoError),
}

impl std::fmt::Display for PutBack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PutBack::Nothing => f.write_str("nothing was left on the cluster"),
            PutBack::Deleted { namespace, took } => write!(
                f,
                "namespace {namespace} deleted ({:.0} s)",
                took.as_secs_f64()
            ),
            PutBack::NotYet(why) => write!(f, "not put back yet: {why}"),
        }
    }
}

impl From<AgentsError> for SiteError {
    fn from(err: AgentsError) -> SiteError {
        match err {
            AgentsError::Pods(err) => SiteError::Agents(err),
            AgentsError::Fleet(err) => SiteError::Fleet(err),
            AgentsError::Stopped(during) => stopped(during),
        }
    }
}

/// A stop during the bring-up, the cluster not yet put back.
fn stopped(during: BringUp) -> SiteError {
    SiteError::Stopped {
        during,
        put_back: PutBack::Nothing,
    }
}

/// A cluster holding one run's system under test.
pub struct ClusterSite {
    client: BlockingClient,
    section: ClusterSection,
    system: System,
    agents: Objects,
    /// The shape last applied.
    applied: Mutex<Option<Shape>>,
    /// The containers the run does not own whose resources it changed (their `resources` as
    /// they were is in the journal).
    borrowed: Mutex<Vec<meshbench_k8s::borrowed::Borrowed>>,
    /// The backend Service's cluster IP.
    backend_vip: IpAddr,
    gateway: Option<SiteGateway>,
    /// Written to before each change (a step records the resources of Contour's workloads
    /// before its first change of them).
    journal: Mutex<Option<Journal>>,
    /// The run's stop: after one, the namespace is waited for at most
    /// [`undo::GONE_AFTER_STOP_WITHIN`] (a hurried stop not at all).
    stop: Stop,
    /// What the checks before the first step found: the cluster's version and its nodes'.
    preflight: Preflight,
    /// A port-forward to each agent pod, when the agents are reached that way: the fleet's
    /// connections go through them (they close after the fleet, which the step runner drops
    /// first).
    agent_forwards: Vec<meshbench_k8s::Forward>,
    /// The gateway's CA, certificates, keys and targets on this machine, removed with the site
    /// (the gateway's private keys do not outlive the run).
    _scratch: tempfile::TempDir,
}

/// A gateway step's gateway on the cluster, and what its load needs.
struct SiteGateway {
    /// Who runs it.
    runs: Box<dyn ClusterGateway>,
    targets: PathBuf,
    ca: PathBuf,
    /// What its objects were written from, and the files of them applied: what a step with
    /// changes changes a copy of.
    written: meshbench_lab::change::Written,
    files: Vec<String>,
    /// The cluster IP and port of the Service in front of it.
    entry: SocketAddr,
}

/// The custom resources an experiment's objects are written in: Istio's, and its gateway's.
fn needs(e: &Experiment, gateway: Option<&dyn ClusterGateway>) -> Vec<NeededCrd> {
    let istio = |crd, what| NeededCrd {
        crd,
        what,
        install: "Istio",
    };
    let mut n = Vec::new();
    let sidecars = e
        .topologies
        .iter()
        .any(|k| k.chain().is_some_and(Topology::has_sidecars));
    if sidecars {
        n.push(istio(
            "peerauthentications.security.istio.io",
            "Istio's sidecars (PeerAuthentication)",
        ));
    }
    n.extend(gateway.map(|g| g.crd()));
    if e.topologies.contains(&StepKind::Chain(Topology::Waypoint)) {
        n.push(istio(
            "gateways.gateway.networking.k8s.io",
            "the waypoint (the Gateway API's Gateway)",
        ));
    }
    n
}

/// What the cluster lacks for `e`, one line each: Istio's CRDs, its injector, ambient's
/// ztunnel. Read only; `--dry-run` asks it too.
pub fn missing_on_cluster(
    client: &BlockingClient,
    e: &Experiment,
) -> Result<Vec<String>, ApiError> {
    let mut missing = Vec::new();
    let gateway = e.cluster.as_ref().and_then(|s| gateway::of(e, s));
    for NeededCrd { crd, what, install } in needs(e, gateway.as_deref()) {
        if client
            .get_cluster_scoped::<CustomResourceDefinition>(crd)?
            .is_none()
        {
            missing.push(format!(
                "{what} needs {install} installed: the cluster has no CustomResourceDefinition {crd}"
            ));
        }
    }
    if let Some(g) = &gateway {
        missing.extend(g.missing(client)?);
    }
    let chains = || e.topologies.iter().filter_map(|k| k.chain());
    let injects = chains().any(Topology::has_sidecars) || gateway.is_some_and(|g| g.injected());
    if injects {
        let webhooks = client.list_cluster_scoped::<MutatingWebhookConfiguration>()?;
        let injector = webhooks.iter().any(|w| {
            w.webhooks
                .iter()
                .flatten()
                .any(|h| h.name.ends_with("sidecar-injector.istio.io"))
        });
        if !injector {
            missing.push("Istio's sidecar injector is not installed (no MutatingWebhookConfiguration with a *.sidecar-injector.istio.io webhook): install Istio (istioctl install, or its istiod chart)".into());
        }
    }
    if e.attribution.is_some() {
        let revision = e.cluster.as_ref().and_then(|c| c.istio_revision.as_deref());
        missing.extend(attribution_provider_missing(client, revision)?);
    }
    let ambient = chains().any(Topology::is_ambient);
    if ambient {
        let ztunnel = client.list::<DaemonSet>(ISTIO_NAMESPACE, names::ZTUNNEL_PODS)?;
        if ztunnel.is_empty() {
            missing.push("ambient and waypoint need Istio's ambient data plane: no ztunnel DaemonSet in istio-system (istioctl install --set profile=ambient)".into());
        }
    }
    Ok(missing)
}

/// Per-hop attribution's provider, when istiod's mesh configuration lacks it: the proxies log
/// through Istio's own API, a `Telemetry` in the run's namespace naming a provider of the
/// mesh configuration, which a run does not own (docs/kubernetes.md shows what to add).
fn attribution_provider_missing(
    client: &BlockingClient,
    revision: Option<&str>,
) -> Result<Option<String>, ApiError> {
    let name = MeshConfig::config_map_name(revision);
    let Some(config_map) = client.get::<ConfigMap>(ISTIO_NAMESPACE, &name)? else {
        return Ok(Some(format!(
            "attribution reads Istio's mesh configuration, and istio-system has no ConfigMap {name}: install Istio, or name its revision (cluster.istio_revision)"
        )));
    };
    let mesh = config_map
        .data
        .and_then(|mut d| d.remove(MeshConfig::KEY))
        .unwrap_or_default();
    let has = MeshConfig::parse(&mesh).is_ok_and(|m| m.has_provider(access_log::ISTIO_PROVIDER));
    Ok((!has).then(|| {
        format!(
            "attribution needs the extension provider {} in Istio's mesh configuration (ConfigMap {name} in istio-system, key mesh): add it as docs/kubernetes.md shows",
            access_log::ISTIO_PROVIDER
        )
    }))
}

/// The cluster IP the API server gave Service `namespace/name`.
fn service_ip(client: &BlockingClient, namespace: &str, name: &str) -> Result<IpAddr, SiteError> {
    client
        .get::<Service>(namespace, name)?
        .and_then(|s| s.spec?.cluster_ip?.parse().ok())
        .ok_or_else(|| SiteError::NoAddress(format!("{namespace}/{name}")))
}

/// The cluster's client for the file's section.
pub fn connect(section: &ClusterSection) -> Result<BlockingClient, ApiError> {
    BlockingClient::connect(section.kubeconfig.as_deref())
}

impl ClusterSite {
    /// Sets the run up: checks the cluster, records the namespace in `journal`, creates it
    /// with the backend (and gateway), starts the agent pods and gathers them as the fleet.
    ///
    /// Every wait of it ends on `stop`: the cluster is then put back (bounded, see
    /// [`ClusterSite::restore`]) and [`SiteError::Stopped`] says where it was and what was put
    /// back. Any other error puts the cluster back too.
    pub fn start(
        e: &Experiment,
        experiment_text: &str,
        journal: &Path,
        coordinator: Coordinator,
        stop: &Stop,
        observer: &mut dyn Observer,
    ) -> Result<(ClusterSite, Fleet), SiteError> {
        let section = e.cluster.clone().expect("a cluster experiment");
        let client = connect(&section)?;
        let missing = missing_on_cluster(&client, e)?;
        if !missing.is_empty() {
            return Err(SiteError::Missing(missing));
        }
        if client
            .get_cluster_scoped::<Namespace>(&section.namespace)?
            .is_some()
        {
            return Err(SiteError::NamespaceExists(section.namespace.clone()));
        }
        if stop.requested() {
            return Err(stopped(BringUp::Checking));
        }
        let mut system = system_of(e, &section);
        let scratch = tempfile::Builder::new()
            .prefix("meshbench-cluster-")
            .tempdir()
            .map_err(SiteError::Scratch)?;
        let mut gateway = None;
        if let Some(runs) = gateway::of(e, &section) {
            let rendered = gateway_objects(e, runs.as_ref(), scratch.path())?;
            system.gateway_objects = rendered.objects;
            gateway = Some(SiteGateway {
                runs,
                targets: rendered.targets,
                ca: rendered.ca,
                written: rendered.written,
                files: rendered.files,
                // Read from its Service once applied.
                entry: SocketAddr::from(([0, 0, 0, 0], 0)),
            });
        }
        let plan = agents_of(
            e,
            &section,
            &system,
            &coordinator.token_text,
            experiment_text,
        );
        // On disk before the namespace is asked for.
        let mut journal = Journal::create(
            journal,
            &Header {
                pid: std::process::id(),
                kubeconfig: section.kubeconfig.clone(),
            },
        )?;
        // The scratch directory is the run's to remove too: a killed run's watcher (or `k8s
        // restore`) removes it, not only the run's own end.
        journal.record(&Undo::RemoveDir {
            path: scratch.path().to_path_buf(),
        })?;
        journal.record(&Undo::DeleteNamespace {
            name: section.namespace.clone(),
        })?;
        let agents = plan.render();
        let mut site = ClusterSite {
            client,
            section,
            system,
            agents,
            applied: Mutex::new(None),
            backend_vip: IpAddr::from([0, 0, 0, 0]),
            gateway,
            journal: Mutex::new(Some(journal)),
            borrowed: Mutex::new(Vec::new()),
            stop: stop.clone(),
            agent_forwards: Vec::new(),
            preflight: Preflight::default(),
            _scratch: scratch,
        };
        match site.bring_up(e, &plan, coordinator, stop, observer) {
            Ok(fleet) => Ok((site, fleet)),
            Err(SiteError::Stopped { during, .. }) => Err(SiteError::Stopped {
                during,
                put_back: site.put_back(),
            }),
            Err(err) => {
                // Said before the cluster is put back, which takes a while.
                observer.warning(&format!("cluster: {err}; putting the cluster back"));
                drop(site);
                Err(err)
            }
        }
    }

    /// The first step's objects applied, the agent pods started and gathered as the fleet;
    /// a stop is looked at between the requests, and ends each wait.
    fn bring_up(
        &mut self,
        e: &Experiment,
        plan: &DistributedRun,
        coordinator: Coordinator,
        stop: &Stop,
        observer: &mut dyn Observer,
    ) -> Result<Fleet, SiteError> {
        let unless_stopped = |during| match stop.requested() {
            true => Err(stopped(during)),
            false => Ok(()),
        };
        // The namespace first, then the rest of the first step's shape; the pods start while
        // the agents do.
        let first = first_shape(e);
        let objects = self.system.render(&first);
        self.client.apply(&objects[0])?;
        unless_stopped(BringUp::Checking)?;
        self.preflight =
            preflight::check(&self.client, e, &self.section, stop).map_err(|err| match err {
                PreflightError::Stopped => stopped(BringUp::Checking),
                err => SiteError::Preflight(err),
            })?;
        observer.note(&format!(
            "cluster: {} node(s) checked ({}), meshbench's image runs on each",
            self.preflight.nodes.len(),
            self.preflight
                .nodes
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        ));
        unless_stopped(BringUp::Applying)?;
        self.client.apply_all(objects[1..].to_vec())?;
        *self.applied.lock().expect("not poisoned") = Some(first);
        self.backend_vip = service_ip(&self.client, &self.section.namespace, system::BACKEND)?;
        if let Some(g) = self.gateway.as_mut() {
            let (namespace, name, port) = g.runs.entry();
            g.entry = SocketAddr::new(service_ip(&self.client, namespace, name)?, port);
        }
        unless_stopped(BringUp::Applying)?;
        observer.note(&format!(
            "cluster: applied namespace {} with the system under test; starting {} agent pod(s)",
            self.section.namespace, plan.agents
        ));
        self.client.apply_agents(&self.agents)?;
        let wait = Duration::from_secs_f64(self.section.rollout_timeout_secs);
        let wanted = plan.agents as usize;
        let gathered = agent_pods::gather(
            &self.client,
            &self.agents,
            wanted,
            wait,
            coordinator,
            stop,
            |_| {},
        )?;
        self.agent_forwards = gathered.forwards;
        Ok(gathered.fleet)
    }

    /// Puts the cluster back after a stop during the bring-up, and says what it did.
    fn put_back(mut self) -> PutBack {
        let began = std::time::Instant::now();
        let mut deleted = false;
        match self.restore(|_| deleted = true) {
            Ok(()) if deleted => PutBack::Deleted {
                namespace: self.section.namespace.clone(),
                took: began.elapsed(),
            },
            Ok(()) => PutBack::Nothing,
            Err(why) => PutBack::NotYet(why),
        }
    }

    /// The cluster section's Prometheus settings in an `external` section's words (the rate
    /// windows, the query timeout), its URL or Service as it is named.
    fn external(&self) -> meshbench_experiment::external::External {
        let base = match self.section.usage_from() {
            UsageFrom::PrometheusUrl(url) => url,
            UsageFrom::PrometheusService {
                namespace,
                name,
                port,
            } => format!("service {namespace}/{name}:{port}"),
            UsageFrom::Kubelet => String::new(),
        };
        self.section.prometheus_at(&base)
    }

    /// The run's Prometheus, each query within `timeout`, all within `budget`; none when the
    /// roles are read from the kubelets (or a client for the service proxy cannot be made).
    fn prometheus(&self, timeout: Duration, budget: Duration) -> Option<Prometheus> {
        match self.section.usage_from() {
            UsageFrom::PrometheusUrl(url) => Some(Prometheus::new(&url, timeout, budget)),
            UsageFrom::PrometheusService {
                namespace,
                name,
                port,
            } => {
                let client = self.client.another().ok()?;
                Some(Prometheus::through_api_server(
                    client,
                    (&namespace, &name, port),
                    timeout,
                    budget,
                ))
            }
            UsageFrom::Kubelet => None,
        }
    }

    /// The pods of the run's namespace `selector` selects that are not going away.
    fn pods(&self, selector: &str) -> Result<Vec<Pod>, ApiError> {
        pods::live(&self.client, &self.section.namespace, selector)
    }

    /// Puts the cluster back as the journal says (the namespace deleted and waited for), and
    /// removes the journal. It is cleanup, done after a stop too, and bounded: the namespace
    /// is waited for at most [`GONE_WITHIN`], once the run's stop is asked at most
    /// [`undo::GONE_AFTER_STOP_WITHIN`], once it is hurried (a second Ctrl-C) no longer. Not
    /// waited out, the journal stays (for the run's watcher, or `meshbench k8s restore`).
    pub fn restore(&mut self, progress: impl FnMut(&str)) -> Result<(), UndoError> {
        let Some(journal) = self.journal.get_mut().expect("not poisoned").take() else {
            return Ok(());
        };
        undo::restore(
            &self.client,
            journal.undos(),
            GONE_WITHIN,
            &self.stop,
            progress,
        )?;
        journal.close()
    }
}

impl Drop for ClusterSite {
    /// An error or a panic between start and restore still puts the cluster back.
    fn drop(&mut self) {
        if self.journal.get_mut().is_ok_and(|j| j.is_some()) {
            if let Err(e) = self.restore(|line| eprintln!("meshbench: {line}")) {
                // Its journal stays: the run's watcher, or `meshbench k8s restore`, finishes it.
                eprintln!("meshbench: warning: the cluster is not put back yet: {e}");
            }
        }
    }
}

/// `--dry-run`'s checks of the cluster: the namespace made (journaled first, so that a killed
/// dry run is put back like a run), the checks before a first step run in it, the namespace
/// deleted again; what they found, or why the run could not start.
pub fn check_for_dry_run(
    e: &Experiment,
    journal: &Path,
    stop: &Stop,
) -> Result<Preflight, SiteError> {
    let section = e.cluster.clone().expect("a cluster experiment");
    let client = connect(&section)?;
    if client
        .get_cluster_scoped::<Namespace>(&section.namespace)?
        .is_some()
    {
        return Err(SiteError::NamespaceExists(section.namespace.clone()));
    }
    let mut journal = Journal::create(
        journal,
        &Header {
            pid: std::process::id(),
            kubeconfig: section.kubeconfig.clone(),
        },
    )?;
    journal.record(&Undo::DeleteNamespace {
        name: section.namespace.clone(),
    })?;
    let namespace = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": section.namespace,
            "labels": {"app.kubernetes.io/managed-by": "meshbench"},
        },
    });
    let checked = client
        .apply(&namespace)
        .map_err(SiteError::Api)
        .and_then(|()| {
            preflight::check(&client, e, &section, stop).map_err(|err| match err {
                PreflightError::Stopped => stopped(BringUp::Checking),
                err => SiteError::Preflight(err),
            })
        });
    undo::restore(&client, journal.undos(), GONE_WITHIN, stop, |_| {})?;
    journal.close()?;
    checked
}

/// Where the journals of cluster runs with this store are: beside it.
pub fn journal_dir(store: &Path) -> PathBuf {
    let stem = store
        .file_stem()
        .map_or_else(|| "results".into(), |s| s.to_string_lossy());
    store
        .parent()
        .unwrap_or(Path::new(""))
        .join(format!("{stem}-cluster-runs"))
}

/// The journal of a run by this process.
pub fn journal_path(store: &Path) -> PathBuf {
    journal_dir(store).join(format!("{}.jsonl", std::process::id()))
}
