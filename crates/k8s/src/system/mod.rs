//! The system under test on a cluster, rendered from a [`System`] and a step's [`Shape`]:
//! pure, so `meshbench experiment --dry-run` prints exactly what a run applies, and tests
//! parse every object back into its Kubernetes type.
//!
//! Everything lives in one namespace that meshbench creates and deletes at the end. One
//! backend and, with a client sidecar, the agent pods serve every sidecar topology without a
//! redeploy, as istio/tools' twopods does: the backend runs twice in its pod, on a port
//! Istio captures and on one it leaves alone, and the Service maps four ports onto those two,
//! each excluded or not from the client's capture:
//!
//! | Service port | client's sidecar | server's sidecar | topology |
//! | --- | --- | --- | --- |
//! | 8077 -> 8077 | excluded | excluded | baseline |
//! | 8078 -> 8080 | excluded | captured | serveronly |
//! | 8079 -> 8077 | captured | excluded | clientonly |
//! | 8080 -> 8080 | captured | captured | both |
//!
//! The gateway is Istio's ingress gateway as Istio's own `gateway` chart deploys one (a
//! Deployment whose `istio-proxy` container istiod's injector fills with its `gateway`
//! template, and the Role and RoleBinding that let its ServiceAccount read the namespace's
//! Secrets, without which istiod serves it no certificate), configured by the Gateways, VirtualServices and Secrets `meshbench gen gateway
//! --for istio` writes. Ambient and waypoint are the namespace's labels (`istio.io/
//! dataplane-mode`, `istio.io/use-waypoint`), set for their steps only, and a waypoint
//! Gateway. A step's limits are the rendered Deployments' resources (requests = limits: the
//! kubelet's CFS quota is the limit), or for a sidecar Istio's `sidecar.istio.io/proxy*`
//! annotations on the pod template; applying the objects of the next step's shape is the
//! patch, and a changed pod template is a rollout.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, Namespace, PodSecurityContext, PodSpec, PodTemplateSpec, Probe,
    ResourceRequirements, SecurityContext, Service, ServiceAccount, ServicePort, ServiceSpec,
    Sysctl, TCPSocketAction, Toleration,
};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::Value;

use crate::borrowed::{Borrowed, WorkloadKind};
use crate::names::{APP_LABEL, GATEWAY_HTTPS_PORT, SERVICE_PORT};
use crate::objects::gateway_api::{self, Infrastructure, Listener};
use crate::objects::istio::{PeerAuthentication, Telemetry};
use crate::objects::to_value;

/// The pods' label that says which part of the run they are.
pub const PART: &str = "meshbench.io/part";
/// The value of [`PART`] on every pod of the system under test.
pub const SYSTEM_UNDER_TEST: &str = "system-under-test";
/// The label on everything meshbench creates.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "meshbench");
pub const BACKEND: &str = "backend";

/// The backend's Service in `namespace` as the mesh names it (a sidecar's and a gateway's
/// outbound cluster, Istio's objects' host).
pub fn backend_host(namespace: &str) -> String {
    format!("{BACKEND}.{namespace}.svc.cluster.local")
}
/// The agent pods' ServiceAccount (their sidecars' identity).
pub const AGENTS_ACCOUNT: &str = "agents";
pub const GATEWAY: &str = "gateway";
pub const WAYPOINT: &str = "waypoint";
/// The gateway pods' label the rendered Istio Gateways select.
pub const GATEWAY_SELECTOR: (&str, &str) = ("istio", "meshbench-gateway");
/// The port of the backend Istio captures.
pub const CAPTURED: u16 = SERVICE_PORT;
/// The port of the backend Istio leaves alone.
pub const UNCAPTURED: u16 = 8077;
/// The uid the meshbench containers run as.
const NONROOT: i64 = 65532;

/// Which proxies a request from the agents to the backend's Service passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    Direct,
    ServerSidecar,
    ClientSidecar,
    BothSidecars,
}

impl Path {
    /// The Service's port that takes this path.
    pub fn port(self) -> u16 {
        match self {
            Path::Direct => 8077,
            Path::ServerSidecar => 8078,
            Path::ClientSidecar => 8079,
            Path::BothSidecars => 8080,
        }
    }

    /// The backend's port the Service sends it to.
    pub fn target_port(self) -> u16 {
        match self {
            Path::Direct | Path::ClientSidecar => UNCAPTURED,
            Path::ServerSidecar | Path::BothSidecars => CAPTURED,
        }
    }

    fn port_name(self) -> &'static str {
        match self {
            Path::Direct => "http-direct",
            Path::ServerSidecar => "http-server-sidecar",
            Path::ClientSidecar => "http-client-sidecar",
            Path::BothSidecars => "http",
        }
    }

    pub const ALL: [Path; 4] = [
        Path::Direct,
        Path::ServerSidecar,
        Path::ClientSidecar,
        Path::BothSidecars,
    ];
}

/// CPU and memory of a container, as both its request and its limit.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Resources {
    pub cpu_cores: Option<f64>,
    pub memory_mib: Option<u64>,
}

impl Resources {
    /// Kubernetes' quantities: `1500m`, `256Mi`.
    pub fn quantities(&self) -> BTreeMap<&'static str, String> {
        let mut q = BTreeMap::new();
        if let Some(c) = self.cpu_cores {
            q.insert("cpu", format!("{}m", (c * 1000.0).round() as u64));
        }
        if let Some(m) = self.memory_mib {
            q.insert("memory", format!("{m}Mi"));
        }
        q
    }

    fn requirements(&self) -> ResourceRequirements {
        let q: BTreeMap<String, Quantity> = self
            .quantities()
            .into_iter()
            .map(|(k, v)| (k.to_string(), Quantity(v)))
            .collect();
        if q.is_empty() {
            return ResourceRequirements::default();
        }
        ResourceRequirements {
            requests: Some(q.clone()),
            limits: Some(q),
            ..ResourceRequirements::default()
        }
    }

    /// Istio's annotations that give an injected sidecar these resources.
    fn sidecar_annotations(&self) -> BTreeMap<String, String> {
        let mut a = BTreeMap::new();
        if let Some(cpu) = self.quantities().get("cpu") {
            a.insert("sidecar.istio.io/proxyCPU".into(), cpu.clone());
            a.insert("sidecar.istio.io/proxyCPULimit".into(), cpu.clone());
        }
        if let Some(mem) = self.quantities().get("memory") {
            a.insert("sidecar.istio.io/proxyMemory".into(), mem.clone());
            a.insert("sidecar.istio.io/proxyMemoryLimit".into(), mem.clone());
        }
        a
    }
}

/// What a run deploys, whatever the step.
#[derive(Debug, Clone, PartialEq)]
pub struct System {
    pub namespace: String,
    /// meshbench's image (the backend).
    pub image: String,
    /// Of meshbench's image and of the gateway's proxy.
    pub pull_policy: String,
    /// `meshbench backend`'s arguments besides `--listen`.
    pub backend_args: Vec<String>,
    /// The backend's pod has an Istio sidecar (serveronly, both).
    pub server_sidecar: bool,
    /// The agent pods have one (clientonly, both).
    pub client_sidecar: bool,
    /// Istio's ingress gateway (topology gateway).
    pub gateway: bool,
    /// A waypoint (topology waypoint).
    pub waypoint: bool,
    /// Istio's revision; none: the default injector.
    pub revision: Option<String>,
    /// Node labels the system under test's pods need.
    pub node_selector: BTreeMap<String, String>,
    /// Taints they tolerate.
    pub tolerations: Vec<Toleration>,
    /// The port of the agents' control connection (the coordinator's, which they dial; or
    /// their own, reached through a port-forward), which their capture must leave alone.
    pub coordinator_port: u16,
    /// The gateway's Istio objects (`gen gateway --for istio`, in this namespace), as the
    /// documents it wrote.
    pub gateway_objects: Vec<Value>,
    /// Per-hop attribution: every proxy of the namespace logs the engine's tagged requests.
    pub proxy_logging: Option<ProxyLogging>,
    /// The cluster's Contour as the gateway (`gateway.type: contour`): not deployed, its
    /// limits changed and put back; `gateway_objects` are then its Secrets and HTTPProxies.
    pub contour: Option<ContourInstall>,
}

/// Where the cluster's Contour is: its namespace, its Deployment (container [`CONTOUR`]), its
/// Envoy's workload (container [`ENVOY`]) and the Service in front of that.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContourInstall {
    pub namespace: String,
    pub deployment: String,
    pub envoy: String,
    /// A Deployment, or a DaemonSet (one Envoy per node, as Contour's own example has it).
    pub envoy_kind: WorkloadKind,
    pub service: String,
}

/// Contour's container in its Deployment, as Contour's manifests name it.
pub const CONTOUR: &str = "contour";
/// Envoy's container in Contour's Envoy Deployment.
pub const ENVOY: &str = "envoy";

/// A limit set on a container the run does not own, for a step.
#[derive(Debug, Clone, PartialEq)]
pub struct BorrowedLimit {
    pub container: Borrowed,
    /// The container's whole `resources` for the step.
    pub resources: Value,
}

impl ContourInstall {
    /// Envoy's container.
    pub fn envoy_container(&self) -> Borrowed {
        self.borrowed(self.envoy_kind, &self.envoy, ENVOY)
    }

    /// Contour's container.
    pub fn contour_container(&self) -> Borrowed {
        self.borrowed(WorkloadKind::Deployment, &self.deployment, CONTOUR)
    }

    /// Contour's workloads, Envoy's first: each step waits for both rollouts.
    pub fn workloads(&self) -> [(WorkloadKind, &str); 2] {
        [
            (self.envoy_kind, &self.envoy),
            (WorkloadKind::Deployment, &self.deployment),
        ]
    }

    fn borrowed(&self, kind: WorkloadKind, name: &str, container: &str) -> Borrowed {
        Borrowed {
            namespace: self.namespace.clone(),
            kind,
            name: name.to_string(),
            container: container.to_string(),
        }
    }
}

/// How the namespace's proxies log the engine's tagged requests (per-hop attribution): a
/// `Telemetry` applied before any pod starts, and each proxy's ProxyConfig annotation with
/// how often its Envoy flushes the log (Envoy's default is 10 s).
#[derive(Debug, Clone, PartialEq)]
pub struct ProxyLogging {
    pub telemetry: Telemetry,
    /// ProxyConfig's `fileFlushInterval` (`0.2s`).
    pub flush_interval: String,
}

/// What changes from step to step.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Shape {
    /// The gateway's and the server sidecar's resources (`limits.proxy`).
    pub proxy: Resources,
    /// The control plane's (`limits.control_plane`): Contour's, when it is the gateway's.
    pub control_plane: Resources,
    /// The client sidecar's (the first of `limits.proxy`: the agents stay for the run).
    pub client_proxy: Resources,
    pub backend: Resources,
    /// The namespace is in Istio's ambient data plane.
    pub ambient: bool,
    /// ... and its traffic goes through the waypoint.
    pub use_waypoint: bool,
    /// The mesh's mTLS mode for the namespace (`PERMISSIVE`, `STRICT`), when sidecars run.
    pub peer_authentication: Option<String>,
}

impl System {
    fn istio(&self) -> bool {
        self.server_sidecar || self.client_sidecar || self.gateway
    }

    /// The namespace's labels for a step of `shape`.
    pub fn namespace_labels(&self, shape: &Shape) -> BTreeMap<String, String> {
        let mut l = BTreeMap::from([(MANAGED_BY.0.to_string(), MANAGED_BY.1.to_string())]);
        if self.istio() {
            match &self.revision {
                Some(rev) => l.insert("istio.io/rev".into(), rev.clone()),
                None => l.insert("istio-injection".into(), "enabled".into()),
            };
        }
        if shape.ambient {
            l.insert("istio.io/dataplane-mode".into(), "ambient".into());
        }
        if shape.use_waypoint {
            l.insert("istio.io/use-waypoint".into(), WAYPOINT.into());
        }
        l
    }

    /// The namespace (created first, deleted last).
    pub fn namespace_object(&self, shape: &Shape) -> Namespace {
        Namespace {
            metadata: ObjectMeta {
                name: Some(self.namespace.clone()),
                labels: Some(self.namespace_labels(shape)),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        }
    }

    /// Every object of a step of `shape` in the order they are applied, the namespace first,
    /// as the documents the apply path, the plan's YAML and its diff take.
    pub fn render(&self, shape: &Shape) -> Vec<Value> {
        let mut out = vec![to_value(&self.namespace_object(shape))];
        out.push(to_value(&self.service_account(BACKEND)));
        out.push(to_value(&self.service_account(AGENTS_ACCOUNT)));
        // Before any pod: each proxy's first configuration has the log.
        if let Some(logging) = &self.proxy_logging {
            let mut telemetry = logging.telemetry.clone();
            telemetry.metadata.namespace = Some(self.namespace.clone());
            telemetry.metadata.labels = Some(managed());
            out.push(to_value(&telemetry));
        }
        out.push(to_value(&self.backend(shape)));
        out.push(to_value(&self.backend_service()));
        if self.gateway {
            out.push(to_value(&self.service_account(GATEWAY)));
            // As Istio's gateway chart grants it: istiod serves a gateway the certificates of
            // the Secrets its ServiceAccount may read (a SubjectAccessReview per credential).
            out.push(to_value(&self.gateway_secrets_role()));
            out.push(to_value(&self.gateway_secrets_binding()));
            out.extend(self.gateway_objects.iter().cloned());
            out.push(to_value(&self.gateway_deployment(shape)));
            out.push(to_value(&self.gateway_service()));
        } else if self.contour.is_some() {
            // Contour's Secrets and HTTPProxies; its Envoy is the cluster's.
            out.extend(self.gateway_objects.iter().cloned());
        }
        if self.waypoint {
            out.push(to_value(&self.waypoint_gateway()));
        }
        if let (true, Some(mode)) = (
            self.server_sidecar || self.client_sidecar,
            &shape.peer_authentication,
        ) {
            out.push(to_value(&PeerAuthentication::new(
                self.meta("default"),
                mode.clone(),
            )));
        }
        out
    }

    /// The Deployments a step waits for, by name.
    pub fn deployments(&self) -> Vec<&'static str> {
        let mut d = vec![BACKEND];
        if self.gateway {
            d.push(GATEWAY);
        }
        d
    }

    /// The limits a step of `shape` sets on containers the run does not own (Contour's
    /// Envoy and Contour), each only when the file gives one.
    pub fn borrowed_limits(&self, shape: &Shape) -> Vec<BorrowedLimit> {
        let Some(contour) = &self.contour else {
            return Vec::new();
        };
        [
            (contour.envoy_container(), shape.proxy),
            (contour.contour_container(), shape.control_plane),
        ]
        .into_iter()
        .filter(|(_, r)| *r != Resources::default())
        .map(|(container, r)| BorrowedLimit {
            container,
            resources: serde_json::to_value(r.requirements()).expect("resources serialise"),
        })
        .collect()
    }

    /// The labels and annotations of the agent pods: Istio's injection, and what their capture
    /// leaves alone (the Service's ports that skip the client's sidecar, the coordinator's).
    pub fn agent_pod(&self, shape: &Shape) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
        let labels = BTreeMap::from([(
            "sidecar.istio.io/inject".to_string(),
            self.client_sidecar.to_string(),
        )]);
        let mut annotations = BTreeMap::new();
        if self.client_sidecar {
            let excluded = [
                Path::Direct.port(),
                Path::ServerSidecar.port(),
                self.coordinator_port,
            ]
            .map(|p| p.to_string())
            .join(",");
            annotations.insert(
                "traffic.sidecar.istio.io/excludeOutboundPorts".to_string(),
                excluded,
            );
            annotations.insert(
                "traffic.sidecar.istio.io/excludeInboundPorts".to_string(),
                self.coordinator_port.to_string(),
            );
            annotations.extend(self.proxy_config(true));
            annotations.extend(ready_every_second());
            annotations.extend(shape.client_proxy.sidecar_annotations());
        }
        (labels, annotations)
    }

    /// Istio's `proxy.istio.io/config` annotation of a pod whose proxy meshbench configures:
    /// the application held until the proxy is up (`hold`: the agents, whose first
    /// connection is to the coordinator), and attribution's log flushed often. None: nothing
    /// to say (Istio's defaults).
    fn proxy_config(&self, hold: bool) -> Option<(String, String)> {
        let mut config = serde_json::Map::new();
        if hold {
            config.insert("holdApplicationUntilProxyStarts".into(), true.into());
        }
        if let Some(logging) = &self.proxy_logging {
            config.insert(
                "fileFlushInterval".into(),
                logging.flush_interval.clone().into(),
            );
        }
        (!config.is_empty()).then(|| {
            (
                "proxy.istio.io/config".to_string(),
                Value::Object(config).to_string(),
            )
        })
    }

    /// The metadata of an object of the namespace: its name, the namespace, meshbench's label.
    fn meta(&self, name: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(self.namespace.clone()),
            labels: Some(managed()),
            ..ObjectMeta::default()
        }
    }

    /// Reading the namespace's Secrets, which Istio's gateway chart gives its gateway.
    fn gateway_secrets_role(&self) -> Role {
        Role {
            metadata: self.meta(GATEWAY),
            rules: Some(vec![PolicyRule {
                api_groups: Some(vec![String::new()]),
                resources: Some(vec!["secrets".into()]),
                verbs: ["get", "watch", "list"].map(String::from).to_vec(),
                ..PolicyRule::default()
            }]),
        }
    }

    /// [`System::gateway_secrets_role`] bound to the gateway's ServiceAccount.
    fn gateway_secrets_binding(&self) -> RoleBinding {
        RoleBinding {
            metadata: self.meta(GATEWAY),
            role_ref: RoleRef {
                api_group: "rbac.authorization.k8s.io".into(),
                kind: "Role".into(),
                name: GATEWAY.into(),
            },
            subjects: Some(vec![Subject {
                kind: "ServiceAccount".into(),
                name: GATEWAY.into(),
                namespace: Some(self.namespace.clone()),
                ..Subject::default()
            }]),
        }
    }

    fn service_account(&self, name: &str) -> ServiceAccount {
        ServiceAccount {
            metadata: self.meta(name),
            ..ServiceAccount::default()
        }
    }

    fn pod_labels(&self, app: &str) -> BTreeMap<String, String> {
        labels([(APP_LABEL, app), (PART, SYSTEM_UNDER_TEST)])
    }

    /// The pod's node selector and tolerations, when the system has them.
    fn placement(&self, spec: PodSpec) -> PodSpec {
        PodSpec {
            node_selector: (!self.node_selector.is_empty()).then(|| self.node_selector.clone()),
            tolerations: (!self.tolerations.is_empty()).then(|| self.tolerations.clone()),
            ..spec
        }
    }

    fn backend_container(&self, name: &str, port: u16, shape: &Shape) -> Container {
        let mut args = vec![
            "backend".to_string(),
            "--listen".into(),
            format!("0.0.0.0:{port}"),
        ];
        args.extend(self.backend_args.iter().cloned());
        Container {
            name: name.into(),
            image: Some(self.image.clone()),
            image_pull_policy: Some(self.pull_policy.clone()),
            command: Some(vec!["/meshbench".into()]),
            args: Some(args),
            ports: Some(vec![container_port(
                if port == CAPTURED {
                    "http"
                } else {
                    "http-direct"
                },
                port,
            )]),
            readiness_probe: Some(Probe {
                tcp_socket: Some(TCPSocketAction {
                    port: IntOrString::Int(port.into()),
                    ..TCPSocketAction::default()
                }),
                period_seconds: Some(1),
                ..Probe::default()
            }),
            resources: Some(shape.backend.requirements()),
            security_context: Some(SecurityContext {
                run_as_user: Some(NONROOT),
                run_as_group: Some(NONROOT),
                allow_privilege_escalation: Some(false),
                read_only_root_filesystem: Some(true),
                ..SecurityContext::default()
            }),
            ..Container::default()
        }
    }

    /// The backend: `meshbench backend` on the captured port and on the one left alone.
    fn backend(&self, shape: &Shape) -> Deployment {
        let mut labels = self.pod_labels(BACKEND);
        labels.insert(
            "sidecar.istio.io/inject".into(),
            self.server_sidecar.to_string(),
        );
        let mut annotations = BTreeMap::from([(
            "traffic.sidecar.istio.io/excludeInboundPorts".to_string(),
            UNCAPTURED.to_string(),
        )]);
        if self.server_sidecar {
            annotations.extend(shape.proxy.sidecar_annotations());
            annotations.extend(ready_every_second());
            annotations.extend(self.proxy_config(false));
        }
        let spec = self.placement(PodSpec {
            service_account_name: Some(BACKEND.into()),
            termination_grace_period_seconds: Some(2),
            containers: vec![
                self.backend_container("backend", CAPTURED, shape),
                self.backend_container("backend-direct", UNCAPTURED, shape),
            ],
            ..PodSpec::default()
        });
        self.deployment(BACKEND, labels, annotations, spec)
    }

    fn deployment(
        &self,
        name: &str,
        labels: BTreeMap<String, String>,
        annotations: BTreeMap<String, String>,
        spec: PodSpec,
    ) -> Deployment {
        Deployment {
            metadata: self.meta(name),
            spec: Some(DeploymentSpec {
                replicas: Some(1),
                selector: LabelSelector {
                    match_labels: Some(self::labels([(APP_LABEL, name)])),
                    ..LabelSelector::default()
                },
                // One pod at a time: a step never measures two generations side by side.
                strategy: Some(DeploymentStrategy {
                    type_: Some("Recreate".into()),
                    ..DeploymentStrategy::default()
                }),
                template: PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(labels),
                        annotations: Some(annotations),
                        ..ObjectMeta::default()
                    }),
                    spec: Some(spec),
                },
                ..DeploymentSpec::default()
            }),
            ..Deployment::default()
        }
    }

    fn service(&self, name: &str, ports: Vec<ServicePort>) -> Service {
        Service {
            metadata: self.meta(name),
            spec: Some(ServiceSpec {
                selector: Some(labels([(APP_LABEL, name)])),
                ports: Some(ports),
                ..ServiceSpec::default()
            }),
            ..Service::default()
        }
    }

    fn backend_service(&self) -> Service {
        let ports = Path::ALL
            .iter()
            .map(|p| service_port(p.port_name(), p.port(), p.target_port()))
            .collect();
        self.service(BACKEND, ports)
    }

    /// Istio's ingress gateway as Istio's `gateway` chart deploys it: the injector's `gateway`
    /// template fills the `istio-proxy` container (`image: auto`).
    fn gateway_deployment(&self, shape: &Shape) -> Deployment {
        let mut labels = self.pod_labels(GATEWAY);
        labels.insert(GATEWAY_SELECTOR.0.into(), GATEWAY_SELECTOR.1.into());
        labels.insert("sidecar.istio.io/inject".into(), "true".into());
        let mut annotations = self::labels([("inject.istio.io/templates", "gateway")]);
        annotations.extend(self.proxy_config(false));
        let spec = self.placement(PodSpec {
            service_account_name: Some(GATEWAY.into()),
            termination_grace_period_seconds: Some(2),
            // Envoy binds 443 as Istio's user.
            security_context: Some(PodSecurityContext {
                sysctls: Some(vec![Sysctl {
                    name: "net.ipv4.ip_unprivileged_port_start".into(),
                    value: "0".into(),
                }]),
                ..PodSecurityContext::default()
            }),
            containers: vec![Container {
                // Filled in by the injector; an untagged `auto` would otherwise be pulled
                // `Always`, and a cluster without a registry has the proxy's image loaded.
                name: "istio-proxy".into(),
                image: Some("auto".into()),
                image_pull_policy: Some(self.pull_policy.clone()),
                ports: Some(vec![
                    container_port("https", GATEWAY_HTTPS_PORT),
                    container_port("http", 80),
                ]),
                resources: Some(shape.proxy.requirements()),
                ..Container::default()
            }],
            ..PodSpec::default()
        });
        self.deployment(GATEWAY, labels, annotations, spec)
    }

    fn gateway_service(&self) -> Service {
        let ports = vec![
            service_port("https", GATEWAY_HTTPS_PORT, GATEWAY_HTTPS_PORT),
            service_port("http", 80, 80),
        ];
        self.service(GATEWAY, ports)
    }

    /// Istio's waypoint for the namespace's services (Gateway API, class `istio-waypoint`).
    fn waypoint_gateway(&self) -> gateway_api::Gateway {
        // Istio renders the waypoint's Deployment; its placement is Istio's to set (a
        // GatewayClass' parametersRef), not the Gateway's.
        let placed = !self.node_selector.is_empty() || !self.tolerations.is_empty();
        let annotations: BTreeMap<String, String> = self.proxy_config(false).into_iter().collect();
        gateway_api::Gateway {
            metadata: ObjectMeta {
                labels: Some(labels([("istio.io/waypoint-for", "service"), MANAGED_BY])),
                ..self.meta(WAYPOINT)
            },
            spec: gateway_api::GatewaySpec {
                gateway_class_name: "istio-waypoint".into(),
                listeners: vec![Listener {
                    name: "mesh".into(),
                    port: 15008,
                    protocol: "HBONE".into(),
                }],
                infrastructure: (placed || !annotations.is_empty()).then(|| Infrastructure {
                    labels: match placed {
                        true => labels([(PART, SYSTEM_UNDER_TEST)]),
                        false => BTreeMap::new(),
                    },
                    annotations,
                }),
            },
        }
    }
}

/// A container's port, by name.
fn container_port(name: &str, port: u16) -> ContainerPort {
    ContainerPort {
        name: Some(name.into()),
        container_port: port.into(),
        ..ContainerPort::default()
    }
}

/// A Service's TCP port, by name, to the pods' `target`.
fn service_port(name: &str, port: u16, target: u16) -> ServicePort {
    ServicePort {
        name: Some(name.into()),
        port: port.into(),
        target_port: Some(IntOrString::Int(target.into())),
        protocol: Some("TCP".into()),
        ..ServicePort::default()
    }
}

/// A sidecar's readiness probed every second (Istio's default is 15 s): a rollout is over as
/// soon as the proxy is.
fn ready_every_second() -> [(String, String); 1] {
    [(
        "readiness.status.sidecar.istio.io/periodSeconds".to_string(),
        "1".to_string(),
    )]
}

fn managed() -> BTreeMap<String, String> {
    labels([MANAGED_BY])
}

fn labels<const N: usize>(pairs: [(&str, &str); N]) -> BTreeMap<String, String> {
    pairs
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Multi-document YAML, as `kubectl apply -f` takes it.
pub fn to_yaml(objects: &[Value]) -> String {
    objects
        .iter()
        .map(|o| serde_yaml_ng::to_string(o).expect("JSON values serialise"))
        .collect::<Vec<_>>()
        .join("---\n")
}

/// One line per object, `Kind namespace/name`, for a plan a person reads.
pub fn describe(object: &Value) -> String {
    let m = &object["metadata"];
    let name = m["name"].as_str().unwrap_or("?");
    let kind = object["kind"].as_str().unwrap_or("?");
    match m["namespace"].as_str() {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    }
}

/// What applying `next` changes of `now` (the same system's objects for two shapes), one
/// line each: a namespace's labels, a pod template's resources or annotations.
pub fn changes(now: &[Value], next: &[Value]) -> Vec<String> {
    let mut out = Vec::new();
    for n in next {
        let what = describe(n);
        let Some(o) = now.iter().find(|o| describe(o) == what) else {
            out.push(format!("{what}: created"));
            continue;
        };
        if o == n {
            continue;
        }
        let mut parts = Vec::new();
        if o["metadata"]["labels"] != n["metadata"]["labels"] {
            parts.push(format!("labels {}", n["metadata"]["labels"]));
        }
        let (ot, nt) = (&o["spec"]["template"], &n["spec"]["template"]);
        if ot["metadata"]["annotations"] != nt["metadata"]["annotations"] {
            parts.push(format!("annotations {}", nt["metadata"]["annotations"]));
        }
        let resources = |t: &Value| -> Vec<(String, Value)> {
            t["spec"]["containers"]
                .as_array()
                .map(|cs| {
                    cs.iter()
                        .map(|c| {
                            (
                                c["name"].as_str().unwrap_or("").to_string(),
                                c["resources"].clone(),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default()
        };
        for ((name, r), (_, was)) in resources(nt).into_iter().zip(resources(ot)) {
            if r != was {
                parts.push(format!("{name} resources {r}"));
            }
        }
        if parts.is_empty() {
            parts.push("changed".into());
        }
        let rollout = if n["kind"] == "Deployment" && ot != nt {
            ", then its rollout"
        } else {
            ""
        };
        out.push(format!("{what}: {}{rollout}", parts.join("; ")));
    }
    for o in now {
        if !next.iter().any(|n| describe(n) == describe(o)) {
            out.push(format!("{}: deleted", describe(o)));
        }
    }
    out
}

#[cfg(test)]
mod tests;
