//! A step's gateway on the cluster, whoever runs it: Istio's ingress gateway, which the run
//! deploys in its namespace and istiod configures ([`istio`]), or the cluster's Contour, which
//! the run borrows and configures through HTTPProxies ([`contour`]). What differs between them
//! is one [`ClusterGateway`]: what the cluster must have, where the load enters, when it is
//! ready, which roles are read of it, where its counters are, which images run it. The site
//! and the step hold one and never ask which it is; another gateway (Envoy Gateway, a Gateway
//! API implementation) is a module beside these and an arm in [`of`].

mod contour;
mod istio;

use std::net::SocketAddr;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use meshbench_engine::Stop;
use meshbench_experiment::cluster::{ClusterSection, EnvoyKind};
use meshbench_experiment::config::Experiment;
use meshbench_experiment::external::ExternalRole;
use meshbench_k8s::blocking::ApiError;
use meshbench_k8s::borrowed::WorkloadKind;
use meshbench_k8s::k8s_openapi;
use meshbench_k8s::rollout::RolloutError;
use meshbench_k8s::system::ContourInstall;
use meshbench_k8s::{BlockingClient, Forward};
use meshbench_lab::gateway::Target;
use meshbench_lab::program::envoy::ready::AckError;
use meshbench_results::{Program, Role, StepKind, Topology};
use thiserror::Error;

pub use contour::ContourNotReady;

/// A custom resource a gateway is configured through, and what lacking it means.
pub(super) struct NeededCrd {
    /// The CustomResourceDefinition's name.
    pub crd: &'static str,
    /// What needs it, as the missing line says.
    pub what: &'static str,
    /// What installs it.
    pub install: &'static str,
}

/// Why a step's gateway was not ready (the step fails with it).
#[derive(Debug, Error)]
pub enum GatewayNotReady {
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error(transparent)]
    Rollout(#[from] RolloutError),
    #[error("no gateway pod")]
    NoPod,
    #[error("gateway: {0}")]
    Forward(ApiError),
    #[error("gateway (pod {pod}): {source}")]
    NotAcked { pod: String, source: AckError },
    #[error(transparent)]
    Contour(#[from] ContourNotReady),
}

/// A gateway a cluster run loads, as the site and its steps see it.
pub(super) trait ClusterGateway: Send + Sync {
    /// Who plays the gateway role, as the record says.
    fn program(&self) -> Program;

    /// The custom resource the run's objects for it are written in.
    fn crd(&self) -> NeededCrd;

    /// What else the cluster lacks for it, one line each (read only; `--dry-run` asks too).
    fn missing(&self, client: &BlockingClient) -> Result<Vec<String>, ApiError>;

    /// Whether its Envoy is injected by Istio's sidecar injector.
    fn injected(&self) -> bool;

    /// The Service the load enters by: its namespace, name and port.
    fn entry(&self) -> (&str, &str, u16);

    /// Waits for the rollouts of what runs it that the run does not deploy itself (the site
    /// waits for its own Deployments); on every step, whose limits may have changed them.
    fn wait_rollouts(
        &self,
        client: &BlockingClient,
        limit: Duration,
        stop: &Stop,
    ) -> Result<(), GatewayNotReady>;

    /// Waits until its Envoy holds the run's routes, with `backend` as an endpoint of the
    /// backend's cluster; fails at once on what it refused.
    fn wait_ready(
        &self,
        client: &BlockingClient,
        backend: SocketAddr,
        limit: Duration,
        stop: &Stop,
    ) -> Result<(), GatewayNotReady>;

    /// The roles a gateway step reads of it: its Envoy, and the control plane the run limits.
    fn roles(&self, client: &BlockingClient) -> Vec<ExternalRole>;

    /// The control plane among [`ClusterGateway::roles`], and who plays it: the run limits
    /// it (`limits.control_plane`). None when it is the cluster's own, not read (istiod).
    fn control_plane(&self) -> Option<(Role, Program)>;

    /// A pod of its Envoy and the container port it serves the load's TLS on: where a probe
    /// of a change asks, through a port-forward.
    fn probed(&self, client: &BlockingClient) -> Result<(String, String, u16), GatewayNotReady>;

    /// A port-forward to the counters of each pod of its Envoy, for the witness.
    fn counters(&self, client: &BlockingClient) -> Vec<Forward>;

    /// Whether its counts are a sum over pods (the record then says how many).
    fn sums_pods(&self) -> bool;

    /// Its pods, by the name the record's versions give their images.
    fn pods(&self, client: &BlockingClient) -> Vec<(&'static str, Vec<Pod>)>;

    /// What writes its objects for the gateway plan, in the run's namespace.
    fn target(&self) -> Box<dyn Target>;

    /// Whether the run applies the file `name` the target wrote (the rest is the lab's).
    fn applies(&self, name: &str) -> bool;

    /// What the end of the run puts back of it beyond the namespace, as `--dry-run` says it.
    fn put_back(&self) -> Option<String>;
}

/// The gateway of `e`'s gateway steps on the cluster, when it has any.
pub(super) fn of(e: &Experiment, section: &ClusterSection) -> Option<Box<dyn ClusterGateway>> {
    if !e.topologies.contains(&StepKind::Chain(Topology::Gateway)) {
        return None;
    }
    let domains = e.gateway.domains as usize;
    let routes = domains * e.gateway.paths as usize;
    match e.gateway.of(None) {
        Program::Istio => Some(Box::new(istio::IstioGateway {
            namespace: section.namespace.clone(),
            domains,
            routes,
        })),
        Program::Contour => Some(Box::new(contour::ContourGateway {
            install: contour_install(e, section)?,
            namespace: section.namespace.clone(),
            domains,
            stats_port: section.contour.stats_port,
            service_port: section.contour.service_port,
        })),
        _ => None,
    }
}

/// The cluster's Contour as the file names it, when the file's gateway is it (the system
/// under test borrows its workloads' limits).
pub(super) fn contour_install(e: &Experiment, section: &ClusterSection) -> Option<ContourInstall> {
    let gateway = e.topologies.contains(&StepKind::Chain(Topology::Gateway));
    let c = &section.contour;
    (gateway && e.gateway.of(None) == Program::Contour).then(|| ContourInstall {
        namespace: c.namespace.clone(),
        deployment: c.deployment.clone(),
        envoy: c.envoy.clone(),
        envoy_kind: match c.envoy_kind {
            EnvoyKind::Deployment => WorkloadKind::Deployment,
            EnvoyKind::DaemonSet => WorkloadKind::DaemonSet,
        },
        service: c.service.clone(),
    })
}
