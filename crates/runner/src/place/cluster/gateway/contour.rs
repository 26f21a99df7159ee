//! The cluster's Contour as a step's gateway (`gateway.type: contour`): the run deploys none
//! of it, only its HTTPProxies and their Secrets in the run's namespace. A step's gateway is
//! ready when Contour has taken every HTTPProxy of the run's namespace (its own status says
//! `valid`, the rule the lab's Contour is awaited by; one it refused fails the step with its
//! reason at once) and every ready pod of its Envoy (a Deployment's, or one per node of a
//! DaemonSet) holds what Contour should send it, read from Envoy's stats through its stats
//! listener (Contour's `--stats-port`, 8002 in its manifests; Envoy's admin is a unix socket
//! there) by [`meshbench_lab::contour::stats`].

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use meshbench_engine::Stop;
use meshbench_experiment::external::{ExternalRole, Preset};
use meshbench_k8s::blocking::ApiError;
use meshbench_k8s::borrowed::WorkloadKind;
use meshbench_k8s::k8s_openapi;
use meshbench_k8s::objects::contour::{self, NotTaken};
use meshbench_k8s::rollout::{self, Workload};
use meshbench_k8s::system::{self, ContourInstall};
use meshbench_k8s::{BlockingClient, Forward};
use meshbench_lab::contour::objects::{self, Contour};
use meshbench_lab::contour::stats;
use meshbench_lab::gateway::Target;
use meshbench_lab::program::envoy::admin;
use meshbench_results::{ChainRole, Program, Role};
use thiserror::Error;

use super::{ClusterGateway, GatewayNotReady, NeededCrd};
use crate::place::cluster::pods;

/// Between two looks at Contour's status or Envoy's stats.
const POLL: Duration = Duration::from_millis(500);

/// Why Contour's gateway was not ready for a step (the step fails with it).
#[derive(Debug, Error)]
pub enum ContourNotReady {
    #[error("Contour did not take every HTTPProxy: {}", .0.join("; "))]
    Refused(Vec<String>),
    #[error("Contour had said `valid` of {valid} of {wanted} HTTPProxies after {} s", waited.as_secs())]
    NotValid {
        valid: usize,
        wanted: usize,
        waited: Duration,
    },
    #[error("no pod of Contour's Envoy {0} is ready")]
    NoEnvoy(String),
    #[error("Contour's Envoy (pod {pod}): its stats port: {source}")]
    Forward { pod: String, source: ApiError },
    #[error("Contour's Envoy (pod {pod}) refused updates: {}", .rejected.join(", "))]
    Rejected { pod: String, rejected: Vec<String> },
    #[error("Contour's Envoy (pod {pod}) did not hold the run's routes within {} s: {waiting}", waited.as_secs())]
    NotHeld {
        pod: String,
        waited: Duration,
        waiting: String,
    },
    #[error("stopped while waiting for Contour")]
    Stopped,
}

/// The cluster's Contour, configured by the run's HTTPProxies.
pub(super) struct ContourGateway {
    /// Where Contour and its Envoy are, as the file names them.
    pub install: ContourInstall,
    /// The run's namespace, which holds the HTTPProxies and the backend.
    pub namespace: String,
    pub domains: usize,
    /// Envoy's stats listener in its pods.
    pub stats_port: u16,
    /// The port of the Service in front of Envoy.
    pub service_port: u16,
}

impl ContourGateway {
    /// The pods of Contour's Envoy: one, a few (a Deployment's replicas), or one per node (a
    /// DaemonSet).
    fn envoy_pods(&self, client: &BlockingClient) -> Result<Vec<Pod>, ApiError> {
        let c = &self.install;
        pods::of_workload(client, c.envoy_kind, &c.namespace, &c.envoy)
    }

    /// The pods of Contour itself (its Deployment).
    fn contour_pods(&self, client: &BlockingClient) -> Result<Vec<Pod>, ApiError> {
        let c = &self.install;
        pods::of_workload(
            client,
            WorkloadKind::Deployment,
            &c.namespace,
            &c.deployment,
        )
    }

    /// Waits until Contour has said `valid` of every HTTPProxy of the run.
    fn wait_taken(
        &self,
        client: &BlockingClient,
        limit: Duration,
        stop: &Stop,
    ) -> Result<(), GatewayNotReady> {
        let taken = contour::wait_taken(client, &self.namespace, self.domains, (limit, POLL), stop);
        Err(match taken {
            Ok(()) => return Ok(()),
            Err(NotTaken::Api(e)) => GatewayNotReady::Api(e),
            Err(NotTaken::Refused(refused)) => ContourNotReady::Refused(refused).into(),
            Err(NotTaken::TimedOut {
                valid,
                wanted,
                waited,
                ..
            }) => ContourNotReady::NotValid {
                valid,
                wanted,
                waited,
            }
            .into(),
            Err(NotTaken::Stopped) => ContourNotReady::Stopped.into(),
        })
    }

    /// Waits until Envoy's pod `pod` holds the run's routes, by its stats, until `limit`
    /// after `began`.
    fn wait_held(
        &self,
        client: &BlockingClient,
        pod: String,
        (began, limit): (Instant, Duration),
        stop: &Stop,
    ) -> Result<(), ContourNotReady> {
        let c = &self.install;
        let forward = client
            .port_forward(&c.namespace, &pod, self.stats_port)
            .map_err(|source| ContourNotReady::Forward {
                pod: pod.clone(),
                source,
            })?;
        let filter = stats::held_filter(&self.namespace, system::BACKEND);
        loop {
            let waiting = match admin::stats(forward.addr(), &filter) {
                Ok(text) => {
                    let h = stats::held(&text);
                    if !h.rejected.is_empty() {
                        let rejected = h.rejected;
                        return Err(ContourNotReady::Rejected { pod, rejected });
                    }
                    if h.holds(self.domains) {
                        return Ok(());
                    }
                    format!(
                        "{} of {} route configurations, {} healthy backend member(s)",
                        h.route_configs, self.domains, h.backend_members
                    )
                }
                Err(e) => e.to_string(),
            };
            if began.elapsed() >= limit {
                return Err(ContourNotReady::NotHeld {
                    pod,
                    waited: limit,
                    waiting,
                });
            }
            if !stop.sleep(POLL) {
                return Err(ContourNotReady::Stopped);
            }
        }
    }
}

impl ClusterGateway for ContourGateway {
    fn program(&self) -> Program {
        Program::Contour
    }

    fn crd(&self) -> NeededCrd {
        NeededCrd {
            crd: "httpproxies.projectcontour.io",
            what: "Contour's gateway (HTTPProxy)",
            install: "Contour",
        }
    }

    /// Its Deployment, its Envoy's Deployment or DaemonSet, the Service in front of Envoy
    /// (the run uses them; it deploys none of them).
    fn missing(&self, client: &BlockingClient) -> Result<Vec<String>, ApiError> {
        let c = &self.install;
        let ns = &c.namespace;
        let mut missing = Vec::new();
        let said = [
            format!(
                "Contour's Envoy {} (cluster.contour.envoy, .envoy_kind)",
                c.envoy_kind.name()
            ),
            "Contour's Deployment (cluster.contour.deployment)".to_string(),
        ];
        for ((kind, name), what) in c.workloads().into_iter().zip(said) {
            if Workload::get(client, kind, ns, name)?.is_none() {
                missing.push(format!(
                    "{what}: no {} {ns}/{name}: install Contour (its examples/render/contour-deployment.yaml, or examples/contour with Envoy as a DaemonSet), or name where it is in cluster.contour",
                    kind.name()
                ));
            }
        }
        if client.get::<Service>(ns, &c.service)?.is_none() {
            missing.push(format!(
                "the Service in front of Contour's Envoy (cluster.contour.service): no Service {ns}/{}",
                c.service
            ));
        }
        Ok(missing)
    }

    fn injected(&self) -> bool {
        false
    }

    fn entry(&self) -> (&str, &str, u16) {
        let c = &self.install;
        (&c.namespace, &c.service, self.service_port)
    }

    /// Contour's and its Envoy's: a step's limits change their containers' resources.
    fn wait_rollouts(
        &self,
        client: &BlockingClient,
        limit: Duration,
        stop: &Stop,
    ) -> Result<(), GatewayNotReady> {
        let c = &self.install;
        for (kind, name) in c.workloads() {
            client.wait_rollout_of(kind, &c.namespace, name, limit, stop)?;
        }
        Ok(())
    }

    /// Every HTTPProxy taken, then each ready pod of its Envoy holding the run's routes;
    /// `limit` is for all of it. The backend is seen as a healthy member of its cluster.
    fn wait_ready(
        &self,
        client: &BlockingClient,
        _backend: SocketAddr,
        limit: Duration,
        stop: &Stop,
    ) -> Result<(), GatewayNotReady> {
        let began = Instant::now();
        self.wait_taken(client, limit, stop)?;
        let ready: Vec<String> = self
            .envoy_pods(client)?
            .iter()
            .filter(|p| rollout::is_ready(p))
            .map(pods::name)
            .collect();
        if ready.is_empty() {
            let c = &self.install;
            let envoy = format!("{}/{}", c.namespace, c.envoy);
            return Err(ContourNotReady::NoEnvoy(envoy).into());
        }
        for pod in ready {
            self.wait_held(client, pod, (began, limit), stop)?;
        }
        Ok(())
    }

    /// Container `envoy` of Contour's Envoy pods in Contour's namespace (every pod of a
    /// DaemonSet's, their figures summed), and Contour beside it, as the lab samples it.
    fn roles(&self, client: &BlockingClient) -> Vec<ExternalRole> {
        let c = &self.install;
        let envoy_pods = pods::pattern(self.envoy_pods(client).ok(), &format!("{}-.*", c.envoy));
        let contour_pods = pods::pattern(
            self.contour_pods(client).ok(),
            &format!("{}-.*", c.deployment),
        );
        vec![
            pods::reader_role(
                ChainRole::Gateway.name(),
                Preset::Contour,
                &[("namespace", &c.namespace), ("pod", &envoy_pods)],
            ),
            pods::reader_role(
                Role::Contour.name(),
                Preset::IstioSidecar,
                &[
                    ("namespace", c.namespace.as_str()),
                    ("pod", &contour_pods),
                    ("container", system::CONTOUR),
                ],
            ),
        ]
    }

    fn control_plane(&self) -> Option<(Role, Program)> {
        Some((Role::Contour, Program::Contour))
    }

    /// A ready pod of its Envoy, and the port its Service sends the load to there (the
    /// Service port's target: a number, or a container port's name).
    fn probed(&self, client: &BlockingClient) -> Result<(String, String, u16), GatewayNotReady> {
        let c = &self.install;
        let pod = (self.envoy_pods(client)?.into_iter())
            .find(rollout::is_ready)
            .ok_or(GatewayNotReady::NoPod)?;
        let target = (client.get::<Service>(&c.namespace, &c.service)?)
            .and_then(|s| s.spec)
            .and_then(|s| s.ports)
            .and_then(|ports| {
                ports
                    .into_iter()
                    .find(|p| p.port == i32::from(self.service_port))
            })
            .and_then(|p| p.target_port);
        let port = match target {
            Some(IntOrString::Int(n)) => u16::try_from(n).ok(),
            Some(IntOrString::String(name)) => (pod.spec.iter())
                .flat_map(|s| s.containers.iter())
                .flat_map(|c| c.ports.iter().flatten())
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .and_then(|p| u16::try_from(p.container_port).ok()),
            None => Some(self.service_port),
        }
        .unwrap_or(self.service_port);
        Ok((c.namespace.clone(), pods::name(&pod), port))
    }

    /// The stats listener of every pod of its Envoy (its admin is a unix socket).
    fn counters(&self, client: &BlockingClient) -> Vec<Forward> {
        let c = &self.install;
        (self.envoy_pods(client).unwrap_or_default().iter())
            .filter_map(|p| {
                client
                    .port_forward(&c.namespace, &pods::name(p), self.stats_port)
                    .ok()
            })
            .collect()
    }

    fn sums_pods(&self) -> bool {
        true
    }

    fn pods(&self, client: &BlockingClient) -> Vec<(&'static str, Vec<Pod>)> {
        vec![
            ("contour", self.contour_pods(client).unwrap_or_default()),
            ("envoy", self.envoy_pods(client).unwrap_or_default()),
        ]
    }

    /// Contour's Secrets and HTTPProxies (its backend's Service is the run's own).
    fn target(&self) -> Box<dyn Target> {
        Box::new(Contour {
            namespace: self.namespace.clone(),
        })
    }

    fn applies(&self, name: &str) -> bool {
        [objects::SECRETS_FILE, objects::HTTP_PROXIES_FILE].contains(&name)
    }

    /// The resources of its workloads, journaled before their first change.
    fn put_back(&self) -> Option<String> {
        let c = &self.install;
        let workloads: Vec<String> = (c.workloads().iter())
            .map(|(kind, name)| format!("{} {name}", kind.name()))
            .collect();
        Some(format!(
            "the resources of Contour's workloads in {} ({}) put back as they were, each rollout waited for",
            c.namespace,
            workloads.join(", ")
        ))
    }
}
