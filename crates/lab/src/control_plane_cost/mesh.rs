//! The mesh a `control_plane` step asks istiod to serve, written to the lab's API server as a
//! cluster would hold it, and the changes made to it while istiod is measured.
//!
//! - **Services** `svc-0`... in `default`, each with a cluster IP and one HTTP port, and its
//!   EndpointSlice. With sidecars, the simulated proxies are the services' pods (proxy `j`
//!   serves `svc-(j mod M)`), registered with the status a kubelet would report, so istiod
//!   keeps them as it keeps a cluster's pods; with gateways, each service has one address
//!   without a pod.
//! - **Istio objects**: a VirtualService (a route with a timeout and retries) and a
//!   DestinationRule (a connection pool and outlier detection) in turn, each on the next service.
//! - **Changes**, each recognisable in what istiod sends so its arrival can be timed: an
//!   endpoint change sets the address of a service's second EndpointSlice to one that encodes
//!   its number (10.200.0.0/12, [`endpoint_change_address`]); a configuration change points
//!   the ServiceEntry `churn` at a host and address that encode its number, which gives a new
//!   cluster (`outbound|7070||churn-N.meshbench.lab`) and, for sidecars, a new listener
//!   (`240.x.y.z_7070`).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::google::protobuf::{value::Kind, ListValue, Struct, Value as PbValue};
use meshbench_k8s::k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use meshbench_k8s::k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};
use meshbench_k8s::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use meshbench_k8s::names::{DEFAULT_NAMESPACE, SERVICE_PORT};
use meshbench_k8s::objects::istio::{
    ConnectionPool, Destination, DestinationRule, DestinationRuleSpec, HttpPool, HttpRoute,
    Location, OutlierDetection, Port, PortSelector, Resolution, Retries, RouteDestination,
    ServiceEndpoint, ServiceEntry, ServiceEntrySpec, TrafficPolicy, VirtualService,
    VirtualServiceSpec, V1,
};
use meshbench_k8s::objects::{meta, to_value as document};
use meshbench_results::{MeshScale, ProxyKind, Stop};
use serde_json::{json, Value};

use crate::istio::NAMESPACE;
use crate::kube::{workloads, ApiServer};
use crate::LabError;

/// The port of the churned ServiceEntry (TCP, so a sidecar gets a listener of its own).
pub const CHANGE_PORT: u16 = 7070;
const CHANGE_HOST_SUFFIX: &str = ".meshbench.lab";
/// The most changes of each kind a step can tell apart (20 bits of an address).
pub const MAX_CHANGES: u32 = 1 << 20;

/// One change meshbench made, by its number within its kind (endpoint or configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Change(pub u32);

/// The `i`-th service's name.
pub fn service_name(i: u32) -> String {
    format!("svc-{i}")
}

/// Its cluster IP, inside the lab API server's 10.96.0.0/16.
pub fn service_ip(i: u32) -> Ipv4Addr {
    Ipv4Addr::new(10, 96, 1 + (i / 250) as u8, 1 + (i % 250) as u8)
}

/// The `j`-th simulated proxy's pod address (10.144.0.0/12).
pub fn proxy_ip(j: u32) -> Ipv4Addr {
    let n = j + 1;
    Ipv4Addr::new(10, 144 + (n >> 16) as u8, (n >> 8) as u8, n as u8)
}

/// A gateway mesh's one address per service, with no pod.
fn gateway_service_endpoint(i: u32) -> Ipv4Addr {
    let n = i + 1;
    Ipv4Addr::new(10, 160 + (n >> 16) as u8, (n >> 8) as u8, n as u8)
}

/// The address endpoint change `n` writes (10.200.0.1 up).
pub fn endpoint_change_address(n: u32) -> Ipv4Addr {
    let m = n + 1;
    Ipv4Addr::new(10, 200 + (m >> 16) as u8, (m >> 8) as u8, m as u8)
}

/// The endpoint change an address in an endpoint assignment is, if it is one.
pub fn endpoint_change_of_address(address: &str) -> Option<Change> {
    let ip: Ipv4Addr = address.parse().ok()?;
    let [a, b, c, d] = ip.octets();
    if a != 10 || !(200..216).contains(&b) {
        return None;
    }
    let m = (u32::from(b - 200) << 16) | (u32::from(c) << 8) | u32::from(d);
    m.checked_sub(1).map(Change)
}

/// The host configuration change `n` points the ServiceEntry at.
pub fn config_change_host(n: u32) -> String {
    format!("churn-{n}{CHANGE_HOST_SUFFIX}")
}

/// The address configuration change `n` gives the ServiceEntry (240.240.0.1 up).
pub fn config_change_address(n: u32) -> Ipv4Addr {
    let m = n + 1;
    Ipv4Addr::new(240, 240 + (m >> 16) as u8, (m >> 8) as u8, m as u8)
}

/// The configuration change a cluster's name shows, if it shows one
/// (`outbound|7070||churn-N.meshbench.lab`).
pub fn config_change_of_cluster(name: &str) -> Option<Change> {
    let host = name.strip_prefix(&format!("outbound|{CHANGE_PORT}||churn-"))?;
    host.strip_suffix(CHANGE_HOST_SUFFIX)?
        .parse()
        .ok()
        .map(Change)
}

/// The configuration change a listener's name shows, if it shows one (`240.x.y.z_7070`).
pub fn config_change_of_listener(name: &str) -> Option<Change> {
    let (address, port) = name.split_once('_')?;
    if port != CHANGE_PORT.to_string() {
        return None;
    }
    let ip: Ipv4Addr = address.parse().ok()?;
    let [a, b, c, d] = ip.octets();
    if a != 240 || b < 240 {
        return None;
    }
    let m = (u32::from(b - 240) << 16) | (u32::from(c) << 8) | u32::from(d);
    m.checked_sub(1).map(Change)
}

/// A pod of the mesh: its name, namespace, ServiceAccount, address and labels.
#[derive(Debug, Clone)]
pub struct MeshPod {
    pub name: String,
    pub namespace: String,
    pub service_account: String,
    pub ip: IpAddr,
    pub labels: BTreeMap<String, String>,
    /// The service it serves, if it is one's endpoint.
    pub serves: Option<u32>,
}

impl MeshPod {
    /// The `j`-th simulated proxy's pod in a mesh of `services`.
    pub fn simulated(kind: ProxyKind, j: u32, services: u32) -> MeshPod {
        match kind {
            ProxyKind::Sidecar => {
                let i = j % services.max(1);
                MeshPod::sidecar(&format!("proxy-{j}"), i, IpAddr::V4(proxy_ip(j)))
            }
            ProxyKind::Gateway => {
                MeshPod::gateway(&format!("gateway-{j}"), IpAddr::V4(proxy_ip(j)))
            }
        }
    }

    /// A sidecar's pod serving service `i`.
    pub fn sidecar(name: &str, i: u32, ip: IpAddr) -> MeshPod {
        let app = service_name(i);
        let labels = BTreeMap::from([
            ("app".to_string(), app.clone()),
            ("service.istio.io/canonical-name".to_string(), app.clone()),
            ("security.istio.io/tlsMode".to_string(), "istio".to_string()),
        ]);
        MeshPod {
            name: name.to_string(),
            namespace: DEFAULT_NAMESPACE.into(),
            service_account: app,
            ip,
            labels,
            serves: Some(i),
        }
    }

    /// An ingress gateway's pod.
    pub fn gateway(name: &str, ip: IpAddr) -> MeshPod {
        let labels = BTreeMap::from([
            ("istio".to_string(), "ingressgateway".to_string()),
            ("app".to_string(), "istio-ingressgateway".to_string()),
        ]);
        MeshPod {
            name: name.to_string(),
            namespace: NAMESPACE.into(),
            service_account: crate::istio::GATEWAY_SERVICE_ACCOUNT.into(),
            ip,
            labels,
            serves: None,
        }
    }

    /// Its node as the proxy in it connects: `template`'s (the real Envoy's node, as its
    /// agent wrote it) with this pod's id, cluster, name, namespace, labels, address,
    /// ServiceAccount and workload.
    pub fn node(&self, kind: ProxyKind, template: &Value) -> Node {
        let word = match kind {
            ProxyKind::Sidecar => "sidecar",
            ProxyKind::Gateway => "router",
        };
        let mut metadata = template["metadata"].clone();
        if !metadata.is_object() {
            metadata = json!({});
        }
        let workload = self.labels.get("app").unwrap_or(&self.name);
        metadata["NAME"] = json!(self.name);
        metadata["NAMESPACE"] = json!(self.namespace);
        metadata["LABELS"] = self.labels_value();
        metadata["INSTANCE_IPS"] = json!(self.ip.to_string());
        metadata["SERVICE_ACCOUNT"] = json!(self.service_account);
        metadata["WORKLOAD_NAME"] = json!(workload);
        metadata["APP_CONTAINERS"] = json!(workload);
        if let Some(owner) = metadata.get_mut("OWNER") {
            *owner = json!(format!(
                "kubernetes://apis/apps/v1/namespaces/{}/deployments/{workload}",
                self.namespace
            ));
        }
        let mut node = node_of(template);
        node.id = format!(
            "{word}~{}~{}.{}~{}.svc.cluster.local",
            self.ip, self.name, self.namespace, self.namespace
        );
        node.cluster = format!("{workload}.{}", self.namespace);
        node.metadata = Some(to_struct(&metadata));
        node
    }

    /// Its labels as a JSON object (a node's `LABELS`, an agent's `ISTIO_METAJSON_LABELS`).
    pub fn labels_value(&self) -> Value {
        json!(self.labels)
    }

    /// Its Pod, with no status yet.
    fn pod(&self) -> Pod {
        let metadata = ObjectMeta {
            labels: Some(self.labels.clone()),
            ..meta(&self.name, &self.namespace)
        };
        workloads::pod(metadata, &self.service_account, "app")
    }

    /// Its Pod's status as a kubelet would report it: running and ready at its address.
    fn running(&self) -> Pod {
        Pod {
            metadata: meta(&self.name, &self.namespace),
            spec: None,
            status: Some(workloads::running(self.ip)),
        }
    }

    /// It, as an endpoint of the service it serves.
    fn endpoint(&self) -> Endpoint {
        workloads::endpoint(self.ip.to_string(), Some((&self.name, &self.namespace)))
    }
}

/// A node as Envoy's bootstrap (its config dump's JSON) gives it: id, cluster, metadata,
/// locality and user agent.
pub fn node_of(json: &Value) -> Node {
    let text = |k: &str| json[k].as_str().unwrap_or_default().to_string();
    Node {
        id: text("id"),
        cluster: text("cluster"),
        metadata: json.get("metadata").map(to_struct),
        user_agent_name: text("user_agent_name"),
        ..Node::default()
    }
}

/// A JSON object as protobuf's `Struct` (anything else: an empty one).
pub fn to_struct(v: &Value) -> Struct {
    Struct {
        fields: v
            .as_object()
            .map(|o| o.iter().map(|(k, v)| (k.clone(), to_value(v))).collect())
            .unwrap_or_default(),
    }
}

fn to_value(v: &Value) -> PbValue {
    let kind = match v {
        Value::Null => Kind::NullValue(0),
        Value::Bool(b) => Kind::BoolValue(*b),
        Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(0.0)),
        Value::String(s) => Kind::StringValue(s.clone()),
        Value::Array(a) => Kind::ListValue(ListValue {
            values: a.iter().map(to_value).collect(),
        }),
        Value::Object(_) => Kind::StructValue(to_struct(v)),
    };
    PbValue { kind: Some(kind) }
}

/// What was registered, as istiod counts it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Registered {
    pub services: u32,
    pub endpoints: u32,
    pub virtual_services: u32,
    pub destination_rules: u32,
}

/// Registers the mesh of `scale` and `pods` (the simulated proxies' and the real Envoy's):
/// ServiceAccounts, Services, Pods with their status, EndpointSlices and the Istio objects.
/// Thousands of objects take a while: a `stop` is looked at every [`APPLIED_BETWEEN_LOOKS`]
/// objects ([`LabError::Stopped`]).
pub fn register(
    api: &ApiServer,
    scale: &MeshScale,
    pods: &[MeshPod],
    stop: &Stop,
) -> Result<Registered, LabError> {
    let services = scale.services.max(1);
    let mut objects = service_objects(services);
    objects.extend(pods.iter().map(|p| document(&p.pod())));
    apply_looking(api, objects, stop)?;
    mark_running(api, pods, stop)?;
    let (slices, endpoints) = endpoint_slices(scale, services, pods);
    apply_looking(api, slices, stop)?;
    let (istio, virtual_services, destination_rules) = istio_objects(scale, services);
    apply_looking(api, istio, stop)?;
    Ok(Registered {
        // The churned ServiceEntry is one more service.
        services: services + 1,
        endpoints,
        virtual_services,
        destination_rules,
    })
}

/// Each service's ServiceAccount and Service (its cluster IP fixed by its index).
fn service_objects(services: u32) -> Vec<Value> {
    let mut objects = Vec::new();
    for i in 0..services {
        let name = service_name(i);
        objects.push(document(&ServiceAccount {
            metadata: meta(&name, DEFAULT_NAMESPACE),
            ..ServiceAccount::default()
        }));
        let metadata = ObjectMeta {
            labels: Some(BTreeMap::from([("app".to_string(), name.clone())])),
            ..meta(&name, DEFAULT_NAMESPACE)
        };
        objects.push(document(&workloads::service(
            metadata,
            &name,
            service_ip(i).to_string(),
        )));
    }
    objects
}

/// How many objects are applied between two looks at the stop (a fraction of a second's
/// work for the API server; the appliers keep their concurrency within it).
pub const APPLIED_BETWEEN_LOOKS: usize = 100;

/// Applies `objects` in order, [`APPLIED_BETWEEN_LOOKS`] at a time, looking at `stop` before
/// each share.
fn apply_looking(api: &ApiServer, objects: Vec<Value>, stop: &Stop) -> Result<(), LabError> {
    let mut rest = objects.into_iter().peekable();
    while rest.peek().is_some() {
        crate::go_on(stop)?;
        let share: Vec<Value> = rest.by_ref().take(APPLIED_BETWEEN_LOOKS).collect();
        api.client.apply_all(share)?;
    }
    Ok(())
}

/// Every pod's status: running and ready at its address, as a kubelet would report it.
fn mark_running(api: &ApiServer, pods: &[MeshPod], stop: &Stop) -> Result<(), LabError> {
    for (i, p) in pods.iter().enumerate() {
        if i % APPLIED_BETWEEN_LOOKS == 0 {
            crate::go_on(stop)?;
        }
        api.client.apply_status(&p.running())?;
    }
    Ok(())
}

/// Each service's EndpointSlice: the pods that serve it (and, for a gateway's mesh, the
/// gateway Service's endpoint); returns them and how many endpoints they hold.
fn endpoint_slices(scale: &MeshScale, services: u32, pods: &[MeshPod]) -> (Vec<Value>, u32) {
    let mut slices = Vec::new();
    let mut endpoints = 0;
    for i in 0..services {
        let name = service_name(i);
        let mut members: Vec<Endpoint> = pods
            .iter()
            .filter(|p| p.serves == Some(i))
            .map(MeshPod::endpoint)
            .collect();
        if scale.kind == ProxyKind::Gateway {
            members.push(workloads::endpoint(
                gateway_service_endpoint(i).to_string(),
                None,
            ));
        }
        endpoints += members.len() as u32;
        slices.push(document(&endpoint_slice(&name, "pods", members)));
    }
    (slices, endpoints)
}

/// The `k`-th Istio object's host: service `(k / 2) mod services`'s.
fn istio_object_host(k: u32, services: u32) -> String {
    format!(
        "{}.{DEFAULT_NAMESPACE}.svc.cluster.local",
        service_name((k / 2) % services)
    )
}

/// A VirtualService on `host`: one route to it, with a timeout and retries.
fn virtual_service(name: String, host: String) -> VirtualService<V1> {
    VirtualService {
        metadata: meta(name, DEFAULT_NAMESPACE),
        spec: VirtualServiceSpec {
            hosts: vec![host.clone()],
            gateways: Vec::new(),
            http: vec![HttpRoute {
                route: vec![RouteDestination {
                    destination: Destination {
                        host,
                        port: PortSelector {
                            number: SERVICE_PORT,
                        },
                    },
                }],
                timeout: Some("5s".into()),
                retries: Some(Retries {
                    attempts: 2,
                    per_try_timeout: "2s".into(),
                    retry_on: "5xx,reset".into(),
                }),
                ..HttpRoute::default()
            }],
        },
        version: V1,
    }
}

/// A DestinationRule on `host`: a connection pool and outlier detection.
fn destination_rule(name: String, host: String) -> DestinationRule<V1> {
    DestinationRule {
        metadata: meta(name, DEFAULT_NAMESPACE),
        spec: DestinationRuleSpec {
            host,
            traffic_policy: Some(TrafficPolicy {
                connection_pool: Some(ConnectionPool {
                    http: Some(HttpPool {
                        http2_max_requests: Some(1000),
                        max_requests_per_connection: Some(100),
                    }),
                }),
                outlier_detection: Some(OutlierDetection {
                    consecutive_5xx_errors: Some(5),
                    interval: Some("10s".into()),
                    base_ejection_time: Some("30s".into()),
                }),
            }),
        },
        version: V1,
    }
}

/// The scale's Istio objects, VirtualServices and DestinationRules in turn, one of each per
/// service; returns them and how many of each.
fn istio_objects(scale: &MeshScale, services: u32) -> (Vec<Value>, u32, u32) {
    let mut istio = Vec::new();
    let (mut virtual_services, mut destination_rules) = (0, 0);
    for k in 0..scale.istio_objects {
        let host = istio_object_host(k, services);
        if k % 2 == 0 {
            virtual_services += 1;
            istio.push(document(&virtual_service(format!("vs-{k}"), host)));
        } else {
            destination_rules += 1;
            istio.push(document(&destination_rule(format!("dr-{k}"), host)));
        }
    }
    (istio, virtual_services, destination_rules)
}

/// Service `service`'s EndpointSlice `<service>-<part>`, holding `endpoints`.
fn endpoint_slice(service: &str, part: &str, endpoints: Vec<Endpoint>) -> EndpointSlice {
    workloads::endpoint_slice(
        format!("{service}-{part}"),
        DEFAULT_NAMESPACE,
        service,
        endpoints,
        SERVICE_PORT,
    )
}

/// Endpoint change `n`: service `n mod services`'s second EndpointSlice now holds the one
/// address that encodes `n`.
pub fn write_endpoint_change(api: &ApiServer, services: u32, n: u32) -> Result<(), LabError> {
    Ok(api.client.apply_typed(&endpoint_change(services, n))?)
}

/// The EndpointSlice that endpoint change `n` writes.
fn endpoint_change(services: u32, n: u32) -> EndpointSlice {
    let service = service_name(n % services.max(1));
    let member = workloads::endpoint(endpoint_change_address(n).to_string(), None);
    endpoint_slice(&service, "churn", vec![member])
}

/// Configuration change `n`: the ServiceEntry `churn` now names the host and address that
/// encode `n`, on a TCP port.
pub fn write_config_change(api: &ApiServer, n: u32) -> Result<(), LabError> {
    Ok(api.client.apply_custom(&config_change(n))?)
}

/// The ServiceEntry that configuration change `n` writes.
fn config_change(n: u32) -> ServiceEntry<V1> {
    ServiceEntry {
        metadata: meta("churn", DEFAULT_NAMESPACE),
        spec: ServiceEntrySpec {
            hosts: vec![config_change_host(n)],
            addresses: vec![config_change_address(n).to_string()],
            location: Location::MeshInternal,
            ports: vec![Port {
                number: CHANGE_PORT,
                name: "tcp".into(),
                protocol: "TCP".into(),
            }],
            resolution: Resolution::Static,
            endpoints: vec![ServiceEndpoint {
                address: "10.250.0.1".into(),
            }],
        },
        version: V1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_change_is_read_back_from_what_istiod_names_after_it() {
        for n in [0, 1, 255, 256, 65_535, 65_536, MAX_CHANGES - 2] {
            let a = endpoint_change_address(n).to_string();
            assert_eq!(endpoint_change_of_address(&a), Some(Change(n)), "{a}");
            let cluster = format!("outbound|{CHANGE_PORT}||{}", config_change_host(n));
            assert_eq!(config_change_of_cluster(&cluster), Some(Change(n)));
            let listener = format!("{}_{CHANGE_PORT}", config_change_address(n));
            assert_eq!(
                config_change_of_listener(&listener),
                Some(Change(n)),
                "{listener}"
            );
        }
        assert_eq!(endpoint_change_of_address(&proxy_ip(7).to_string()), None);
        assert_eq!(
            config_change_of_cluster("outbound|8080||svc-1.default.svc.cluster.local"),
            None
        );
        assert_eq!(config_change_of_listener("0.0.0.0_8080"), None);
        assert_eq!(config_change_of_listener("10.96.1.1_7070"), None);
    }

    fn scale(kind: ProxyKind, istio_objects: u32) -> MeshScale {
        MeshScale {
            kind,
            proxies: 1,
            services: 1,
            istio_objects,
            endpoint_churn_per_s: 0.0,
            config_churn_per_s: 0.0,
        }
    }

    /// The objects are the documents the step wrote as JSON before they were typed.
    #[test]
    fn the_registered_objects_are_the_documents_written_by_hand_before() {
        let ready = json!({"ready": true, "serving": true, "terminating": false});
        let objects = service_objects(1);
        assert_eq!(
            objects,
            [
                json!({
                    "apiVersion": "v1", "kind": "ServiceAccount",
                    "metadata": {"name": "svc-0", "namespace": "default"},
                }),
                json!({
                    "apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": "svc-0", "namespace": "default", "labels": {"app": "svc-0"}},
                    "spec": {
                        "selector": {"app": "svc-0"},
                        "clusterIP": "10.96.1.1",
                        "ports": [{"name": "http", "port": 8080, "targetPort": 8080, "protocol": "TCP"}],
                    },
                }),
            ]
        );
        let pod = MeshPod::simulated(ProxyKind::Sidecar, 0, 1);
        let labels = json!({
            "app": "svc-0",
            "service.istio.io/canonical-name": "svc-0",
            "security.istio.io/tlsMode": "istio",
        });
        assert_eq!(
            document(&pod.pod()),
            json!({
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "proxy-0", "namespace": "default", "labels": labels},
                "spec": {
                    "nodeName": "meshbench-lab",
                    "serviceAccountName": "svc-0",
                    "containers": [{
                        "name": "app",
                        "image": "meshbench",
                        "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                    }],
                },
            })
        );
        assert_eq!(
            document(&pod.running()),
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "proxy-0", "namespace": "default"},
                "status": {
                    "phase": "Running",
                    "podIP": "10.144.0.1",
                    "podIPs": [{"ip": "10.144.0.1"}],
                    "hostIP": "10.144.0.1",
                    "conditions": [
                        {"type": "Ready", "status": "True"},
                        {"type": "ContainersReady", "status": "True"},
                    ],
                },
            })
        );
        let slice = |name: &str, service: &str, endpoints: Value| {
            json!({
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {
                    "name": name,
                    "namespace": "default",
                    "labels": {
                        "kubernetes.io/service-name": service,
                        "endpointslice.kubernetes.io/managed-by": "meshbench",
                    },
                },
                "addressType": "IPv4",
                "endpoints": endpoints,
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            })
        };
        let gateway = MeshPod::simulated(ProxyKind::Gateway, 0, 2);
        let (slices, endpoints) =
            endpoint_slices(&scale(ProxyKind::Gateway, 0), 2, &[pod, gateway]);
        assert_eq!(endpoints, 3);
        assert_eq!(
            slices[0],
            slice(
                "svc-0-pods",
                "svc-0",
                json!([
                    {
                        "addresses": ["10.144.0.1"],
                        "conditions": ready,
                        "nodeName": "meshbench-lab",
                        "targetRef": {"kind": "Pod", "name": "proxy-0", "namespace": "default"},
                    },
                    {"addresses": ["10.160.0.1"], "conditions": ready},
                ])
            )
        );
        assert_eq!(
            slices[1],
            slice(
                "svc-1-pods",
                "svc-1",
                json!([{"addresses": ["10.160.0.2"], "conditions": ready}])
            )
        );
        let (slices, endpoints) = endpoint_slices(&scale(ProxyKind::Sidecar, 0), 1, &[]);
        assert_eq!(endpoints, 0);
        assert_eq!(slices[0], slice("svc-0-pods", "svc-0", json!([])));
        assert_eq!(
            document(&endpoint_change(2, 3)),
            slice(
                "svc-1-churn",
                "svc-1",
                json!([{"addresses": ["10.200.0.4"], "conditions": ready}])
            )
        );
        let (istio, virtual_services, destination_rules) =
            istio_objects(&scale(ProxyKind::Sidecar, 3), 1);
        assert_eq!((virtual_services, destination_rules), (2, 1));
        let host = "svc-0.default.svc.cluster.local";
        assert_eq!(
            istio[0],
            json!({
                "apiVersion": "networking.istio.io/v1", "kind": "VirtualService",
                "metadata": {"name": "vs-0", "namespace": "default"},
                "spec": {
                    "hosts": [host],
                    "http": [{
                        "route": [{"destination": {"host": host, "port": {"number": 8080}}}],
                        "timeout": "5s",
                        "retries": {"attempts": 2, "perTryTimeout": "2s", "retryOn": "5xx,reset"},
                    }],
                },
            })
        );
        assert_eq!(
            istio[1],
            json!({
                "apiVersion": "networking.istio.io/v1", "kind": "DestinationRule",
                "metadata": {"name": "dr-1", "namespace": "default"},
                "spec": {
                    "host": host,
                    "trafficPolicy": {
                        "connectionPool": {"http": {"http2MaxRequests": 1000, "maxRequestsPerConnection": 100}},
                        "outlierDetection": {"consecutive5xxErrors": 5, "interval": "10s", "baseEjectionTime": "30s"},
                    },
                },
            })
        );
        assert_eq!(
            document(&config_change(0)),
            json!({
                "apiVersion": "networking.istio.io/v1",
                "kind": "ServiceEntry",
                "metadata": {"name": "churn", "namespace": "default"},
                "spec": {
                    "hosts": ["churn-0.meshbench.lab"],
                    "addresses": ["240.240.0.1"],
                    "ports": [{"number": 7070, "name": "tcp", "protocol": "TCP"}],
                    "location": "MESH_INTERNAL",
                    "resolution": "STATIC",
                    "endpoints": [{"address": "10.250.0.1"}],
                },
            })
        );
    }

    #[test]
    fn a_simulated_node_is_the_template_with_its_own_identity() {
        let template = json!({
            "id": "sidecar~10.213.0.2~real-0.default~default.svc.cluster.local",
            "cluster": "svc-0.default",
            "user_agent_name": "envoy",
            "metadata": {"CLUSTER_ID": "Kubernetes", "NAME": "real-0", "ISTIO_VERSION": "1.28"},
        });
        let pod = MeshPod::simulated(ProxyKind::Sidecar, 3, 2);
        let node = pod.node(ProxyKind::Sidecar, &template);
        assert_eq!(
            node.id,
            "sidecar~10.144.0.4~proxy-3.default~default.svc.cluster.local"
        );
        assert_eq!(node.cluster, "svc-1.default");
        let fields = &node.metadata.unwrap().fields;
        let text = |k: &str| match &fields[k].kind {
            Some(Kind::StringValue(s)) => s.clone(),
            other => panic!("{k}: {other:?}"),
        };
        assert_eq!(text("NAME"), "proxy-3");
        assert_eq!(text("CLUSTER_ID"), "Kubernetes");
        assert_eq!(text("SERVICE_ACCOUNT"), "svc-1");
        assert_eq!(node.user_agent_name, "envoy");
    }
}
