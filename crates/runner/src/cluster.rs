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
//! group deletes it when the run is killed. Nothing outside the namespace is changed.

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use meshbench_engine::Stop;
use meshbench_experiment::cluster::{AntiAffinity as FileAntiAffinity, Cluster};
use meshbench_experiment::config::Experiment;
use meshbench_experiment::external::{Preset, Role as PromRole};
use meshbench_experiment::Step;
use meshbench_k8s::blocking::ApiError;
use meshbench_k8s::k8s_openapi;
use meshbench_k8s::render::PodExtras;
use meshbench_k8s::system::{self, Path as Through, Resources, Shape, System};
use meshbench_k8s::undo::{self, Header, Journal, Undo, UndoError};
use meshbench_k8s::{AntiAffinity, BlockingClient, ClusterError, Objects, Plan};
use meshbench_lab::control_plane::ready::{self, Awaited, Expected, SidecarExpected};
use meshbench_lab::gateway::istio_objects::{Istio, Place};
use meshbench_lab::gateway::{self, CertLayout, GatewayPlan};
use meshbench_lab::program::envoy::admin::{self, AdminError};
use meshbench_results::{
    ChainRole, Class, Figure, PeerAuthentication, PlayedBy, Program, ProxyCounters, Role,
    StepFailure, Topology,
};
use meshbench_store::StepRecord;
use serde_json::Value;
use thiserror::Error;

use crate::agents::{Fleet, FleetError, FleetReach, Token};
use crate::load::{LoadOptions, TargetSource};
use crate::observer::{Observer, StepAt};
use crate::steps::{aim_at_gateway, load_for, resolve_at};
use crate::{measure, ClientPlace, Lab};

/// The agents' objects' name prefix (pods `meshbench-agents-N-...`).
const AGENTS: &str = "meshbench";
/// Envoy's admin port in Istio's proxies (on the pod's loopback).
const ENVOY_ADMIN: u16 = 15000;
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
}

/// Where the agent pods reach this process.
pub struct Coordinator {
    pub listener: TcpListener,
    pub token: Token,
    /// The token as the agents' Secret holds it.
    pub token_text: String,
}

/// A cluster holding one run's system under test.
pub struct ClusterSite {
    client: BlockingClient,
    section: Cluster,
    system: System,
    agents: Objects,
    /// The objects as last applied, and the shape they were applied for.
    applied: Mutex<Option<(Shape, Vec<Value>)>>,
    backend_vip: String,
    gateway: Option<GatewayAssets>,
    journal: Option<Journal>,
}

/// What the load of a gateway step needs.
struct GatewayAssets {
    targets: PathBuf,
    ca: PathBuf,
    vip: String,
    domains: usize,
    routes: usize,
}

/// What an experiment needs of Istio on the cluster, and the CRD each needs.
fn needs(e: &Experiment) -> Vec<(&'static str, &'static str)> {
    let has = |t: Topology| e.topologies.contains(&t);
    let mut n = Vec::new();
    let sidecars = has(Topology::Serveronly) || has(Topology::Clientonly) || has(Topology::Both);
    if sidecars {
        n.push((
            "peerauthentications.security.istio.io",
            "Istio's sidecars (PeerAuthentication)",
        ));
    }
    if has(Topology::Gateway) {
        n.push((
            "gateways.networking.istio.io",
            "Istio's ingress gateway (Gateway, VirtualService)",
        ));
    }
    if has(Topology::Waypoint) {
        n.push((
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
    for (crd, what) in needs(e) {
        if client
            .get_cluster_scoped::<CustomResourceDefinition>(crd)?
            .is_none()
        {
            missing.push(format!(
                "{what} needs Istio installed: the cluster has no CustomResourceDefinition {crd}"
            ));
        }
    }
    let injects = e.topologies.iter().any(|t| {
        matches!(
            t,
            Topology::Serveronly | Topology::Clientonly | Topology::Both | Topology::Gateway
        )
    });
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
    let ambient = e
        .topologies
        .iter()
        .any(|t| matches!(t, Topology::Ambient | Topology::Waypoint));
    if ambient {
        let ztunnel = client.list::<DaemonSet>("istio-system", "app=ztunnel")?;
        if ztunnel.is_empty() {
            missing.push("ambient and waypoint need Istio's ambient data plane: no ztunnel DaemonSet in istio-system (istioctl install --set profile=ambient)".into());
        }
    }
    Ok(missing)
}

/// The cluster's client for the file's section.
pub fn connect(section: &Cluster) -> Result<BlockingClient, ApiError> {
    BlockingClient::connect(section.kubeconfig.as_deref())
}

/// The system an experiment deploys (its gateway objects come later).
pub fn system_of(e: &Experiment, section: &Cluster) -> System {
    let has = |t: Topology| e.topologies.contains(&t);
    let mut backend_args = vec![
        "--size".to_string(),
        e.load
            .response_bytes
            .first()
            .copied()
            .unwrap_or(1024)
            .to_string(),
    ];
    if e.backend.threads > 0 {
        backend_args.extend(["--threads".into(), e.backend.threads.to_string()]);
    }
    if e.backend.delay_ms > 0 {
        backend_args.extend(["--delay".into(), format!("{}ms", e.backend.delay_ms)]);
    }
    if e.load.protocol.is_http2() {
        backend_args.push("--http2".into());
    }
    let tolerations = section
        .system_under_test
        .tolerations
        .iter()
        .map(|t| serde_json::to_value(t).expect("a toleration serialises"))
        .map(|mut v| {
            // The pod spec takes no nulls for the keys not given.
            if let Some(m) = v.as_object_mut() {
                m.retain(|_, x| !x.is_null());
            }
            v
        })
        .collect();
    System {
        namespace: section.namespace.clone(),
        image: section.image.clone(),
        pull_policy: section.image_pull_policy.name().into(),
        backend_args,
        server_sidecar: has(Topology::Serveronly) || has(Topology::Both),
        client_sidecar: has(Topology::Clientonly) || has(Topology::Both),
        gateway: has(Topology::Gateway),
        waypoint: has(Topology::Waypoint),
        revision: section.istio_revision.clone(),
        node_selector: section.system_under_test.node_selector.clone(),
        tolerations,
        coordinator_port: section.coordinator_port().unwrap_or(0),
        gateway_objects: Vec::new(),
    }
}

/// The shape of `step`'s system: its limits (the swept one at the step's value), its
/// ambient labels, its mTLS mode.
pub fn shape_of(e: &Experiment, step: &Step) -> Shape {
    let swept = |class: Class| step.cpu.filter(|(c, _)| *c == class).map(|(_, c)| c);
    let resources = |class: Class, r: &meshbench_experiment::config::RoleLimits| Resources {
        cpu_cores: swept(class).or_else(|| r.cpus.first().copied()),
        memory_mib: r.memory_mib,
    };
    let sidecars = matches!(
        step.topology,
        Topology::Serveronly | Topology::Clientonly | Topology::Both
    ) || e.topologies.iter().any(|t| {
        matches!(
            t,
            Topology::Serveronly | Topology::Clientonly | Topology::Both
        )
    });
    let mode = match (e.proxy.mtls, step.peer_authentication) {
        (false, _) => PeerAuthentication::Disable,
        (true, Some(m)) => m,
        (true, None) => e
            .proxy
            .peer_authentication
            .first()
            .copied()
            .unwrap_or_default(),
    };
    Shape {
        proxy: resources(Class::Proxy, &e.limits.proxy),
        client_proxy: Resources {
            cpu_cores: e.limits.proxy.cpus.first().copied(),
            memory_mib: e.limits.proxy.memory_mib,
        },
        backend: resources(Class::Backend, &e.limits.backend),
        ambient: matches!(step.topology, Topology::Ambient | Topology::Waypoint),
        use_waypoint: step.topology == Topology::Waypoint,
        peer_authentication: sidecars.then(|| mode.name().to_ascii_uppercase()),
    }
}

/// The agents' Job, Service, ConfigMap and Secret for `e` on `section`'s cluster.
pub fn agents_of(
    e: &Experiment,
    section: &Cluster,
    system: &System,
    token: &str,
    experiment_text: &str,
) -> Plan {
    let first = first_shape(e);
    let (labels, annotations) = system.agent_pod(&first);
    let how = match section.load_anti_affinity {
        FileAntiAffinity::Preferred => AntiAffinity::Preferred,
        FileAntiAffinity::Required => AntiAffinity::Required,
        FileAntiAffinity::None => AntiAffinity::None,
    };
    Plan {
        name: AGENTS.into(),
        namespace: section.namespace.clone(),
        agents: e.agents.as_ref().and_then(|a| a.count).unwrap_or(1) as u32,
        image: section.image.clone(),
        coordinator: section.coordinator.clone(),
        token: token.to_string(),
        experiment_file_name: "experiment.yaml".into(),
        experiment: experiment_text.to_string(),
        cpu: section.agent_cpu.clone(),
        memory: section.agent_memory.clone(),
        sysctls: Vec::new(),
        anti_affinity: how,
        pod: PodExtras {
            labels,
            annotations,
            pull_policy: Some(section.image_pull_policy.name().into()),
            service_account: Some(system::AGENTS_ACCOUNT.into()),
            avoid: Some((
                BTreeMap::from([(
                    system::PART.to_string(),
                    system::SYSTEM_UNDER_TEST.to_string(),
                )]),
                how,
            )),
        },
    }
}

/// The shape of an experiment's first step.
fn first_shape(e: &Experiment) -> Shape {
    let plan = meshbench_experiment::Plan::compile(e);
    plan.steps
        .first()
        .map(|s| shape_of(e, s))
        .unwrap_or_default()
}

/// What an Envoy of the step must hold before the step's load.
enum Holds {
    Gateway(Expected),
    Sidecar(SidecarExpected),
}

impl Holds {
    fn awaited(&self) -> Awaited<'_> {
        match self {
            Holds::Gateway(e) => Awaited::Gateway(e),
            Holds::Sidecar(e) => Awaited::Sidecar(e),
        }
    }
}

/// The gateway's Istio objects, as `gen gateway --for istio` writes them for this namespace,
/// and the files the load needs (targets, CA), written under `dir`.
fn gateway_objects(
    e: &Experiment,
    namespace: &str,
    dir: &Path,
) -> Result<(Vec<Value>, PathBuf, PathBuf), SiteError> {
    let plan = GatewayPlan {
        domains: e.gateway.domains as usize,
        paths: e.gateway.paths as usize,
        tls: true,
        http2: e.load.protocol.is_http2(),
        http3: false,
        grpc: e.load.protocol == meshbench_results::Protocol::Grpc,
        certs: CertLayout::PerDomain,
        backend: SocketAddr::from(([127, 0, 0, 1], system::CAPTURED)),
        listen: SocketAddr::from(([0, 0, 0, 0], 443)),
        workers: 0,
        admin: None,
        out: dir.to_path_buf(),
    };
    let istio = Istio::within(Place {
        namespace: namespace.to_string(),
        selector: (
            system::GATEWAY_SELECTOR.0.to_string(),
            system::GATEWAY_SELECTOR.1.to_string(),
        ),
        backend_host: Some(format!("{}.{namespace}.svc.cluster.local", system::BACKEND)),
        backend_port: Some(system::CAPTURED),
    });
    let generated =
        gateway::generate(&plan, &istio).map_err(|e| SiteError::Gateway(e.to_string()))?;
    let mut objects = Vec::new();
    for file in generated.files.iter().filter(|f| {
        f.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("istio-"))
    }) {
        let text = std::fs::read_to_string(file)
            .map_err(|e| SiteError::Gateway(format!("{}: {e}", file.display())))?;
        objects.extend(
            meshbench_k8s::blocking::documents(&text)
                .map_err(|e| SiteError::Gateway(e.to_string()))?,
        );
    }
    Ok((objects, dir.join("targets.txt"), dir.join("ca.pem")))
}

/// Every object and change a run would make, for `--dry-run`: the objects of the first step,
/// then each step's changes.
pub fn describe(e: &Experiment, section: &Cluster, token_note: &str) -> String {
    let plan = meshbench_experiment::Plan::compile(e);
    let mut system = system_of(e, section);
    let mut out = String::new();
    let dir = std::env::temp_dir().join(format!("meshbench-dry-run-{}", std::process::id()));
    if system.gateway {
        match gateway_objects(e, &section.namespace, &dir) {
            Ok((objects, _, _)) => system.gateway_objects = objects,
            Err(err) => out.push_str(&format!("# the gateway's objects: {err}\n")),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    let Some(first) = plan.steps.first() else {
        return out;
    };
    let mut objects = system.render(&shape_of(e, first));
    out.push_str(&format!(
        "# on the cluster: namespace {} (created, deleted at the end), then in it:\n",
        section.namespace
    ));
    out.push_str(&system::to_yaml(&objects));
    let agents = agents_of(e, section, &system, token_note, "# the experiment file\n").render();
    out.push_str("---\n");
    out.push_str(&agents.to_yaml());
    out.push_str("# each step: what changes before it (a Deployment's rollout is waited for)\n");
    for step in &plan.steps {
        let next = system.render(&shape_of(e, step));
        let changes = system::changes(&objects, &next);
        out.push_str(&format!(
            "# step {} ({}): {}\n",
            step.index + 1,
            step.variant(),
            if step.index == 0 {
                "the objects above".to_string()
            } else if changes.is_empty() {
                "no change".to_string()
            } else {
                changes.join("; ")
            }
        ));
        objects = next;
    }
    out.push_str(&format!(
        "# at the end: namespace {} deleted, and everything in it\n",
        section.namespace
    ));
    out
}

impl ClusterSite {
    /// Sets the run up: checks the cluster, records the namespace in `journal`, creates it
    /// with the backend (and gateway), starts the agent pods and gathers them as the fleet.
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
        let mut system = system_of(e, &section);
        let files = std::env::temp_dir().join(format!("meshbench-cluster-{}", std::process::id()));
        let mut gateway = None;
        if system.gateway {
            let (objects, targets, ca) = gateway_objects(e, &section.namespace, &files)?;
            system.gateway_objects = objects;
            gateway = Some(GatewayAssets {
                targets,
                ca,
                vip: String::new(),
                domains: e.gateway.domains as usize,
                routes: (e.gateway.domains * e.gateway.paths) as usize,
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
            backend_vip: String::new(),
            gateway,
            journal: Some(journal),
        };
        match site.bring_up(e, &plan, coordinator, stop, observer) {
            Ok(fleet) => Ok((site, fleet)),
            Err(err) => {
                // Said before the cluster is put back, which takes a while.
                observer.warning(&format!("cluster: {err}; putting the cluster back"));
                drop(site);
                Err(err)
            }
        }
    }

    /// The first step's objects applied, the agent pods started and gathered as the fleet.
    fn bring_up(
        &mut self,
        e: &Experiment,
        plan: &Plan,
        coordinator: Coordinator,
        stop: &Stop,
        observer: &mut dyn Observer,
    ) -> Result<Fleet, SiteError> {
        let site = self;
        // The namespace first, then the rest of the first step's shape; the pods start while
        // the agents do.
        let first = first_shape(e);
        let objects = site.system.render(&first);
        site.client.apply(&objects[0])?;
        site.client.apply_all(objects[1..].to_vec())?;
        *site.applied.lock().expect("not poisoned") = Some((first, objects));
        site.backend_vip = site.service_ip(system::BACKEND)?;
        if let Some(g) = site.gateway.as_mut() {
            g.vip = site
                .client
                .get::<Service>(&site.section.namespace, system::GATEWAY)?
                .and_then(|s| s.spec?.cluster_ip)
                .unwrap_or_default();
        }
        observer.note(&format!(
            "cluster: applied namespace {} with the system under test; starting {} agent pod(s)",
            site.section.namespace, plan.agents
        ));
        site.client.apply_agents(&site.agents)?;
        let wanted = plan.agents as usize;
        let wait = Duration::from_secs_f64(site.section.rollout_timeout_secs);
        site.client
            .wait_agents(&site.agents, wanted, wait, || !stop.requested(), |_| {})?;
        let fleet = Fleet::gather(
            FleetReach::Listen {
                listener: coordinator.listener,
                agents: wanted,
                wait,
            },
            coordinator.token,
            None,
        )?;
        Ok(fleet)
    }

    fn service_ip(&self, name: &str) -> Result<String, ApiError> {
        Ok(self
            .client
            .get::<Service>(&self.section.namespace, name)?
            .and_then(|s| s.spec?.cluster_ip)
            .unwrap_or_default())
    }

    /// The pods of `app` (by its label) that are not going away.
    fn pods(&self, selector: &str) -> Result<Vec<Pod>, ApiError> {
        Ok(self
            .client
            .list::<Pod>(&self.section.namespace, selector)?
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect())
    }

    /// Brings the system to `shape`: applies what changed, waits for each rollout and for
    /// each Envoy of the step to hold its configuration. One line on failure.
    fn realise(&self, step: &Step, shape: &Shape, stop: &Stop) -> Result<(), String> {
        let timeout = Duration::from_secs_f64(self.section.rollout_timeout_secs);
        let mut applied = self.applied.lock().expect("not poisoned");
        let changed = applied.as_ref().is_none_or(|(s, _)| s != shape);
        if changed {
            let objects = self.system.render(shape);
            self.client
                .apply_all(objects.clone())
                .map_err(|e| e.to_string())?;
            *applied = Some((shape.clone(), objects));
        }
        drop(applied);
        for d in self.system.deployments() {
            self.client
                .wait_rollout(&self.section.namespace, d, timeout, || !stop.requested())
                .map_err(|e| e.to_string())?;
        }
        self.wait_acked(step.topology, timeout, stop)
    }

    /// The Envoys of `topology` with one pod each, by role: the pod and what it must hold.
    fn envoys(&self, topology: Topology) -> Result<Vec<(ChainRole, String, Holds)>, String> {
        let ns = &self.section.namespace;
        let backend = self.pods("app=backend").map_err(|e| e.to_string())?;
        let Some(backend_pod) = backend.first() else {
            return Err("no backend pod".into());
        };
        let backend_ip = backend_pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.clone())
            .unwrap_or_default();
        let host = format!("{}.{ns}.svc.cluster.local", system::BACKEND);
        let name = |p: &Pod| p.metadata.name.clone().unwrap_or_default();
        let mut out = Vec::new();
        for r in topology.chain() {
            match r.role {
                ChainRole::ServerProxy => out.push((
                    r.role,
                    name(backend_pod),
                    Holds::Sidecar(SidecarExpected {
                        listeners: vec!["virtualOutbound".into(), "virtualInbound".into()],
                        clusters: vec![format!("inbound|{}||", system::CAPTURED)],
                    }),
                )),
                ChainRole::ClientProxy => {
                    let agents = self
                        .pods(&self.agents.agent_selector())
                        .map_err(|e| e.to_string())?;
                    if let [only] = agents.as_slice() {
                        out.push((
                            r.role,
                            name(only),
                            Holds::Sidecar(SidecarExpected {
                                listeners: vec![
                                    "virtualOutbound".into(),
                                    "virtualInbound".into(),
                                    format!("0.0.0.0_{}", system::CAPTURED),
                                ],
                                clusters: vec![format!(
                                    "outbound|{}||{host}::{backend_ip}:{}",
                                    system::CAPTURED,
                                    system::CAPTURED
                                )],
                            }),
                        ));
                    }
                }
                ChainRole::Gateway => {
                    let g = self
                        .gateway
                        .as_ref()
                        .expect("a gateway topology has its assets");
                    let pods = self.pods("app=gateway").map_err(|e| e.to_string())?;
                    let Some(pod) = pods.first() else {
                        return Err("no gateway pod".into());
                    };
                    out.push((
                        r.role,
                        name(pod),
                        Holds::Gateway(Expected {
                            listener: "0.0.0.0_443".into(),
                            filter_chains: g.domains,
                            routes: g.routes,
                            certificates: g.domains,
                            endpoint: format!("{host}::{backend_ip}:{}::", system::CAPTURED),
                        }),
                    ));
                }
                _ => {}
            }
        }
        Ok(out)
    }

    /// Waits until every Envoy of the step holds its configuration, read from its admin
    /// through its pod; fails at once on an update it rejected.
    fn wait_acked(&self, topology: Topology, limit: Duration, stop: &Stop) -> Result<(), String> {
        let began = Instant::now();
        for (role, pod, holds) in self.envoys(topology)? {
            let forward = self
                .client
                .port_forward(&self.section.namespace, &pod, ENVOY_ADMIN)
                .map_err(|e| format!("{role}: {e}"))?;
            let admin = forward.addr();
            loop {
                let rejected = ready::rejected(admin);
                if !rejected.is_empty() {
                    return Err(format!(
                        "{role} (pod {pod}): Envoy rejected {}",
                        rejected.join(", ")
                    ));
                }
                let last = match ready::missing_at(admin, holds.awaited()) {
                    Ok(m) if m.is_empty() => break,
                    Ok(m) => m.join("; "),
                    Err(e) => e.to_string(),
                };
                if began.elapsed() >= limit || stop.requested() {
                    return Err(format!(
                        "{role} (pod {pod}): Envoy did not receive its configuration within {} s; still missing: {last}",
                        limit.as_secs()
                    ));
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        }
        Ok(())
    }

    /// The load of `step`, aimed at the system through the Services' addresses.
    fn load_options(&self, e: &Experiment, step: &Step) -> LoadOptions {
        let through = match step.topology {
            Topology::Serveronly => Through::ServerSidecar,
            Topology::Clientonly => Through::ClientSidecar,
            Topology::Both => Through::BothSidecars,
            _ => Through::Direct,
        };
        match (&self.gateway, step.topology) {
            (Some(g), Topology::Gateway) => {
                let mut o = load_for(e, step, TargetSource::File(g.targets.clone()));
                let entry: SocketAddr = format!("{}:443", g.vip)
                    .parse()
                    .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 443)));
                aim_at_gateway(&mut o, g.ca.clone(), entry, true);
                o
            }
            _ => load_for(
                e,
                step,
                TargetSource::Url(format!("http://{}:{}/", self.backend_vip, through.port())),
            ),
        }
    }

    /// The roles of `topology` and the backend, as Prometheus reads them (cAdvisor).
    ///
    /// The backend's and the gateway's pods are named as they are now: a pod of the template
    /// before (gone since the rollout) has series that end before the window, and a series
    /// that comes or goes in a window makes the role missing (`external::read`).
    fn roles(&self, topology: Topology) -> Vec<PromRole> {
        let ns = self.section.namespace.as_str();
        let now = |app: &str, fallback: &str| -> String {
            let names: Vec<String> = self
                .pods(&format!("app={app}"))
                .unwrap_or_default()
                .iter()
                .filter_map(|p| p.metadata.name.clone())
                .collect();
            match names.is_empty() {
                true => fallback.to_string(),
                // Pod names are DNS labels: nothing in them is special to a regular expression.
                false => names.join("|"),
            }
        };
        let backend_pods = now(system::BACKEND, "backend-.*");
        let gateway_pods = now(system::GATEWAY, "gateway-.*");
        let role = |r: ChainRole, preset: Preset, matches: &[(&str, &str)]| PromRole {
            name: r.name().to_string(),
            preset: Some(preset),
            matches: matches
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..PromRole::default()
        };
        let agents_pods = format!("{AGENTS}-agents-.*");
        let mut roles: Vec<PromRole> = topology
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
                ChainRole::Gateway => Some(role(
                    r.role,
                    Preset::IstioSidecar,
                    &[("namespace", ns), ("pod", &gateway_pods)],
                )),
                ChainRole::Waypoint => Some(role(
                    r.role,
                    Preset::Waypoint,
                    &[("namespace", ns), ("pod", "waypoint-.*")],
                )),
                // One DaemonSet: its pods are read once, as the client's tunnel.
                ChainRole::ZtunnelClient => Some(role(r.role, Preset::Ztunnel, &[])),
                ChainRole::ZtunnelServer | ChainRole::Backend => None,
            })
            .collect();
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

    /// Each single-pod Envoy's admin, through its pod, for the witness.
    fn admins(&self, topology: Topology) -> Vec<(ChainRole, meshbench_k8s::Forward)> {
        let Ok(envoys) = self.envoys(topology) else {
            return Vec::new();
        };
        envoys
            .into_iter()
            .filter_map(|(role, pod, _)| {
                self.client
                    .port_forward(&self.section.namespace, &pod, ENVOY_ADMIN)
                    .ok()
                    .map(|f| (role, f))
            })
            .collect()
    }

    /// Puts the cluster back: the namespace deleted and waited for, the journal removed.
    pub fn restore(&mut self, progress: impl FnMut(&str)) -> Result<(), UndoError> {
        let Some(journal) = self.journal.take() else {
            return Ok(());
        };
        undo::restore(
            &self.client,
            &[Undo::DeleteNamespace {
                name: self.section.namespace.clone(),
            }],
            GONE_WITHIN,
            progress,
        )?;
        journal.close()
    }
}

impl Drop for ClusterSite {
    /// An error or a panic between start and restore still puts the cluster back.
    fn drop(&mut self) {
        if self.journal.is_some() {
            if let Err(e) = self.restore(|line| eprintln!("meshbench: {line}")) {
                eprintln!("meshbench: warning: the cluster was not put back: {e}; `meshbench k8s restore` does it");
            }
        }
    }
}

/// The journal of a run by this process, beside the store.
pub fn journal_path(store: &Path) -> PathBuf {
    let stem = store
        .file_stem()
        .map_or_else(|| "results".into(), |s| s.to_string_lossy());
    store
        .parent()
        .unwrap_or(Path::new(""))
        .join(format!("{stem}-cluster-runs"))
        .join(format!("{}.jsonl", std::process::id()))
}

impl Lab {
    /// Runs one step on the cluster; every failure ends up in the record.
    pub(crate) fn run_cluster_step(
        &self,
        site: &ClusterSite,
        e: &Experiment,
        at: &StepAt,
        stop: &Stop,
        observer: &mut dyn Observer,
    ) -> StepRecord {
        let step = at.step;
        let mut record = self.new_record(e, step);
        let shape = shape_of(e, step);
        if let Err(why) = site.realise(step, &shape, stop) {
            record.fail(StepFailure::RigDidNotStart(why));
            return record;
        }
        let options = site.load_options(e, step);
        let load = match resolve_at(&options, at) {
            Ok(load) => load,
            Err(failure) => {
                record.fail(failure);
                return record;
            }
        };
        let admins = site.admins(step.topology);
        let read = |admins: &[(ChainRole, meshbench_k8s::Forward)]| -> BTreeMap<ChainRole, Result<ProxyCounters, AdminError>> {
            admins.iter().map(|(r, f)| (*r, admin::read(f.addr()))).collect()
        };
        let before = read(&admins);
        let measured = measure(
            self.load_source(&options),
            &load,
            None,
            ClientPlace::default(),
            stop.clone(),
            |l, roles| observer.live(at, l, roles),
        );
        let after = read(&admins);
        let measured = match measured {
            Ok(m) => m,
            Err(err) => {
                record.fail(StepFailure::LoadGeneratorFailed(err.to_string()));
                return record;
            }
        };
        let window_ms = measured.window_ms;
        record.set_result(measured.result);
        let x = site.section.prometheus();
        let reading =
            crate::external::read_window(e, &x, &site.roles(step.topology), window_ms, stop);
        for w in &reading.warnings {
            observer.warning(&format!(
                "step {}/{} ({}): {w}",
                step.index + 1,
                at.steps,
                record.variant
            ));
        }
        for mut r in reading.roles {
            let Role::Chain(chain) = r.usage.role.clone() else {
                continue;
            };
            r.usage.program = match chain {
                ChainRole::Backend => PlayedBy::Backend,
                _ => PlayedBy::Proxy(Program::Istio),
            };
            r.usage.cpu_limit = match chain.class() {
                Class::Proxy => shape.proxy.cpu_cores,
                Class::Backend => shape.backend.cpu_cores,
                Class::Tunnel => None,
            };
            if chain == ChainRole::ClientProxy {
                r.usage.cpu_limit = shape.client_proxy.cpu_cores;
            }
            if let (Some(Ok(b)), Some(Ok(a))) = (before.get(&chain), after.get(&chain)) {
                r.usage.proxy = Some(a.since(b));
            } else if let Some(Err(why)) = after.get(&chain).or(before.get(&chain)) {
                observer.warning(&format!(
                    "{chain}: {why}; its own counts are not kept (the step is)"
                ));
                r.usage.missing.insert(Figure::Proxy, why.to_string());
            }
            if !r.samples.is_empty() {
                record.samples.insert(r.usage.role.clone(), r.samples);
            }
            record.usage.push(r.usage);
        }
        record
    }
}
