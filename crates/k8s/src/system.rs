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
//! template), configured by the Gateways, VirtualServices and Secrets `meshbench gen gateway
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
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::Value;

use crate::names::SERVICE_PORT;
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
    /// The coordinator's port, which the agents' capture must leave alone.
    pub coordinator_port: u16,
    /// The gateway's Istio objects (`gen gateway --for istio`, in this namespace), as the
    /// documents it wrote.
    pub gateway_objects: Vec<Value>,
    /// Per-hop attribution: every proxy of the namespace logs the engine's tagged requests.
    pub proxy_logging: Option<ProxyLogging>,
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
            out.extend(self.gateway_objects.iter().cloned());
            out.push(to_value(&self.gateway_deployment(shape)));
            out.push(to_value(&self.gateway_service()));
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

    fn service_account(&self, name: &str) -> ServiceAccount {
        ServiceAccount {
            metadata: self.meta(name),
            ..ServiceAccount::default()
        }
    }

    fn pod_labels(&self, app: &str) -> BTreeMap<String, String> {
        labels([("app", app), (PART, SYSTEM_UNDER_TEST)])
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
                    match_labels: Some(self::labels([("app", name)])),
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
                selector: Some(labels([("app", name)])),
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
                    container_port("https", 443),
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
            service_port("https", 443, 443),
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
mod tests {
    use super::*;

    fn system() -> System {
        System {
            namespace: "bench".into(),
            image: "meshbench:1".into(),
            pull_policy: "IfNotPresent".into(),
            backend_args: vec!["--size".into(), "64".into()],
            server_sidecar: true,
            client_sidecar: true,
            gateway: true,
            waypoint: false,
            revision: None,
            node_selector: BTreeMap::from([("role".into(), "sut".into())]),
            tolerations: vec![Toleration {
                key: Some("dedicated".into()),
                operator: Some("Equal".into()),
                value: Some("sut".into()),
                effect: Some("NoSchedule".into()),
                ..Toleration::default()
            }],
            coordinator_port: 7700,
            gateway_objects: Vec::new(),
            proxy_logging: None,
        }
    }

    fn shape(cpu: f64) -> Shape {
        Shape {
            proxy: Resources {
                cpu_cores: Some(cpu),
                memory_mib: Some(256),
            },
            client_proxy: Resources {
                cpu_cores: Some(1.0),
                memory_mib: None,
            },
            backend: Resources::default(),
            ambient: false,
            use_waypoint: false,
            peer_authentication: Some("STRICT".into()),
        }
    }

    /// Three systems' objects as YAML, against the files under `testdata/` (written by the
    /// json! renderer before the objects were typed: the typed ones must print the same).
    /// `MESHBENCH_UPDATE_GOLDEN=1` writes them anew.
    #[test]
    fn the_rendered_yaml_is_the_golden_files() {
        let full = system();
        let mut ambient = system();
        ambient.waypoint = true;
        ambient.gateway = false;
        let mut ambient_shape = shape(1.0);
        ambient_shape.ambient = true;
        ambient_shape.use_waypoint = true;
        let plain = System {
            server_sidecar: false,
            client_sidecar: false,
            gateway: false,
            revision: Some("canary".into()),
            node_selector: BTreeMap::new(),
            tolerations: Vec::new(),
            ..system()
        };
        let plain_shape = Shape {
            backend: Resources {
                cpu_cores: Some(0.5),
                memory_mib: Some(128),
            },
            ..Shape::default()
        };
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/testdata");
        for (name, yaml) in [
            ("system-full.yaml", to_yaml(&full.render(&shape(1.5)))),
            (
                "system-ambient.yaml",
                to_yaml(&ambient.render(&ambient_shape)),
            ),
            ("system-plain.yaml", to_yaml(&plain.render(&plain_shape))),
        ] {
            let path = dir.join(name);
            if std::env::var_os("MESHBENCH_UPDATE_GOLDEN").is_some() {
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(&path, &yaml).unwrap();
            }
            let golden = std::fs::read_to_string(&path).unwrap();
            assert_eq!(yaml, golden, "{name}");
        }
    }

    /// Attribution adds its Telemetry to the namespace before any pod, and the flush to every
    /// proxy's ProxyConfig (the agents keep being held until theirs is up); nothing else.
    #[test]
    fn attribution_adds_a_telemetry_before_the_pods_and_a_flush_to_each_proxy() {
        let mut plain = system();
        plain.waypoint = true;
        let logging = System {
            proxy_logging: Some(ProxyLogging {
                telemetry: Telemetry::access_log(
                    ObjectMeta {
                        name: Some("meshbench-attribution".into()),
                        ..ObjectMeta::default()
                    },
                    "meshbench-attribution",
                    "'x' in request.headers",
                ),
                flush_interval: "0.2s".into(),
            }),
            ..plain.clone()
        };
        let (before, after) = (plain.render(&shape(1.0)), logging.render(&shape(1.0)));
        let at = |objects: &[Value], kind: &str| objects.iter().position(|o| o["kind"] == kind);
        assert_eq!(at(&before, "Telemetry"), None);
        let telemetry = at(&after, "Telemetry").expect("a Telemetry");
        assert!(telemetry < at(&after, "Deployment").unwrap());
        let t = &after[telemetry];
        assert_eq!(t["apiVersion"], "telemetry.istio.io/v1");
        assert_eq!(t["metadata"]["namespace"], "bench");
        assert_eq!(
            t["spec"]["accessLogging"][0]["providers"][0]["name"],
            "meshbench-attribution"
        );
        assert_eq!(
            t["spec"]["accessLogging"][0]["filter"]["expression"],
            "'x' in request.headers"
        );
        let config = |o: &Value| -> Option<Value> {
            let a = o
                .pointer("/spec/template/metadata/annotations/proxy.istio.io~1config")
                .or_else(|| o.pointer("/spec/infrastructure/annotations/proxy.istio.io~1config"))?;
            serde_json::from_str(a.as_str()?).ok()
        };
        let flushed = |objects: &[Value]| -> Vec<String> {
            objects
                .iter()
                .filter(|o| config(o).is_some_and(|c| c["fileFlushInterval"] == "0.2s"))
                .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(flushed(&after), ["backend", "gateway", "waypoint"]);
        assert!(flushed(&before).is_empty());
        let (_, agents) = logging.agent_pod(&shape(1.0));
        let agents: Value = serde_json::from_str(&agents["proxy.istio.io/config"]).unwrap();
        assert_eq!(
            agents,
            serde_json::json!({"holdApplicationUntilProxyStarts": true, "fileFlushInterval": "0.2s"})
        );
        let (_, agents) = plain.agent_pod(&shape(1.0));
        assert_eq!(
            agents["proxy.istio.io/config"],
            r#"{"holdApplicationUntilProxyStarts":true}"#
        );
        // Everything else is as it was.
        let others = |objects: &[Value]| -> Vec<Value> {
            objects
                .iter()
                .filter(|o| o["kind"] != "Telemetry")
                .map(|o| {
                    let mut o = o.clone();
                    for (parent, key) in [
                        ("/spec/template/metadata", "annotations"),
                        ("/spec/infrastructure", "annotations"),
                    ] {
                        if let Some(Value::Object(m)) = o.pointer_mut(parent) {
                            if let Some(Value::Object(a)) = m.get_mut(key) {
                                a.remove("proxy.istio.io/config");
                                // The waypoint's annotations were only the flush.
                                if a.is_empty() && parent == "/spec/infrastructure" {
                                    m.remove(key);
                                }
                            }
                        }
                    }
                    o
                })
                .collect()
        };
        assert_eq!(others(&before), others(&after));
    }

    #[test]
    fn every_object_is_its_kubernetes_type() {
        for o in system().render(&shape(1.5)) {
            let kind = o["kind"].as_str().unwrap();
            let ok = match kind {
                "Namespace" => serde_json::from_value::<Namespace>(o.clone()).is_ok(),
                "ServiceAccount" => serde_json::from_value::<ServiceAccount>(o.clone()).is_ok(),
                "Deployment" => serde_json::from_value::<Deployment>(o.clone()).is_ok(),
                "Service" => serde_json::from_value::<Service>(o.clone()).is_ok(),
                "PeerAuthentication" => o["spec"]["mtls"]["mode"] == "STRICT",
                other => panic!("unexpected {other}"),
            };
            assert!(ok, "{o}");
        }
    }

    #[test]
    fn the_service_maps_each_path_onto_the_captured_or_the_uncaptured_port() {
        let s = system();
        let svc: Service = s.backend_service();
        let ports = svc.spec.unwrap().ports.unwrap();
        let pairs: Vec<(i32, String)> = ports
            .iter()
            .map(|p| {
                (
                    p.port,
                    match p.target_port.clone().unwrap() {
                        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(i) => {
                            i.to_string()
                        }
                        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(s) => s,
                    },
                )
            })
            .collect();
        assert_eq!(
            pairs,
            [
                (8077, "8077".to_string()),
                (8078, "8080".to_string()),
                (8079, "8077".to_string()),
                (8080, "8080".to_string())
            ]
        );
        // The client's capture skips the ports whose path has no client sidecar, and the
        // coordinator's; the server's skips its uncaptured port.
        let (labels, annotations) = s.agent_pod(&shape(1.0));
        assert_eq!(labels["sidecar.istio.io/inject"], "true");
        assert_eq!(
            annotations["traffic.sidecar.istio.io/excludeOutboundPorts"],
            "8077,8078,7700"
        );
        assert_eq!(annotations["sidecar.istio.io/proxyCPULimit"], "1000m");
        let backend: Deployment = s.backend(&shape(1.0));
        let meta = backend.spec.unwrap().template.metadata.unwrap();
        assert_eq!(
            meta.annotations.unwrap()["traffic.sidecar.istio.io/excludeInboundPorts"],
            "8077"
        );
    }

    #[test]
    fn a_new_cpu_limit_changes_the_gateway_and_the_server_sidecar_and_nothing_else() {
        let s = system();
        let c = changes(&s.render(&shape(1.0)), &s.render(&shape(2.0)));
        assert_eq!(c.len(), 2, "{c:?}");
        assert!(
            c[0].starts_with("Deployment bench/backend: annotations"),
            "{c:?}"
        );
        assert!(
            c[0].contains("\"sidecar.istio.io/proxyCPULimit\":\"2000m\""),
            "{c:?}"
        );
        assert!(c[0].ends_with(", then its rollout"), "{c:?}");
        assert!(
            c[1].starts_with(
                "Deployment bench/gateway: istio-proxy resources {\"limits\":{\"cpu\":\"2000m\""
            ),
            "{c:?}"
        );
        assert!(changes(&s.render(&shape(1.0)), &s.render(&shape(1.0))).is_empty());
    }

    #[test]
    fn ambient_steps_label_the_namespace_and_the_waypoint_is_a_gateway_api_gateway() {
        let mut s = system();
        s.waypoint = true;
        let mut sh = shape(1.0);
        sh.ambient = true;
        sh.use_waypoint = true;
        let objects = s.render(&sh);
        let labels = &objects[0]["metadata"]["labels"];
        assert_eq!(labels["istio.io/dataplane-mode"], "ambient");
        assert_eq!(labels["istio.io/use-waypoint"], "waypoint");
        let w = objects.iter().find(|o| o["kind"] == "Gateway").unwrap();
        assert_eq!(w["spec"]["gatewayClassName"], "istio-waypoint");
        let plain = s.render(&shape(1.0));
        assert!(changes(&objects, &plain)[0].starts_with("Namespace bench: labels"));
    }
}
