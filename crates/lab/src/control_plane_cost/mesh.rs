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

use std::net::{IpAddr, Ipv4Addr};

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::google::protobuf::{value::Kind, ListValue, Struct, Value as PbValue};
use meshbench_results::{MeshScale, ProxyKind};
use serde_json::{json, Value};

use super::CostError;
use crate::istio::{ApiServer, NAMESPACE};
use crate::LabError;

/// The namespace of the services and their pods.
pub const APPS: &str = "default";
/// Every service's port (named `http`, so Istio reads it as HTTP).
pub const SERVICE_PORT: u16 = 8080;
/// The port of the churned ServiceEntry (TCP, so a sidecar gets a listener of its own).
pub const CHANGE_PORT: u16 = 7070;
const CHANGE_HOST_SUFFIX: &str = ".meshbench.lab";
/// The node every pod claims to run on.
const NODE: &str = "meshbench-lab";
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
    pub labels: serde_json::Map<String, Value>,
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
        let mut labels = serde_json::Map::new();
        labels.insert("app".into(), json!(app));
        labels.insert("service.istio.io/canonical-name".into(), json!(app));
        labels.insert("security.istio.io/tlsMode".into(), json!("istio"));
        MeshPod {
            name: name.to_string(),
            namespace: APPS.into(),
            service_account: app,
            ip,
            labels,
            serves: Some(i),
        }
    }

    /// An ingress gateway's pod.
    pub fn gateway(name: &str, ip: IpAddr) -> MeshPod {
        let mut labels = serde_json::Map::new();
        labels.insert("istio".into(), json!("ingressgateway"));
        labels.insert("app".into(), json!("istio-ingressgateway"));
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
        let workload = self
            .labels
            .get("app")
            .and_then(Value::as_str)
            .unwrap_or(&self.name);
        metadata["NAME"] = json!(self.name);
        metadata["NAMESPACE"] = json!(self.namespace);
        metadata["LABELS"] = Value::Object(self.labels.clone());
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

fn pod_object(p: &MeshPod) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": p.name, "namespace": p.namespace, "labels": p.labels},
        "spec": {
            "nodeName": NODE,
            "serviceAccountName": p.service_account,
            "containers": [{
                "name": "app",
                "image": "meshbench",
                "ports": [{"name": "http", "containerPort": SERVICE_PORT, "protocol": "TCP"}],
            }],
        },
    })
}

/// Registers the mesh of `scale` and `pods` (the simulated proxies' and the real Envoy's):
/// ServiceAccounts, Services, Pods with their status, EndpointSlices and the Istio objects.
pub fn register(
    api: &ApiServer,
    scale: &MeshScale,
    pods: &[MeshPod],
) -> Result<Registered, LabError> {
    let services = scale.services.max(1);
    let mut objects = service_objects(services);
    objects.extend(pods.iter().map(pod_object));
    api.client.apply_all(objects)?;
    mark_running(api, pods)?;
    let (slices, endpoints) = endpoint_slices(scale, services, pods);
    api.client.apply_all(slices)?;
    let (istio, virtual_services, destination_rules) = istio_objects(scale, services);
    api.client.apply_all(istio)?;
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
        objects.push(json!({
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": name, "namespace": APPS},
        }));
        objects.push(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": APPS, "labels": {"app": name}},
            "spec": {
                "selector": {"app": name},
                "clusterIP": service_ip(i).to_string(),
                "ports": [{"name": "http", "port": SERVICE_PORT, "targetPort": SERVICE_PORT, "protocol": "TCP"}],
            },
        }));
    }
    objects
}

/// Every pod's status: running and ready at its address, as a kubelet would report it.
fn mark_running(api: &ApiServer, pods: &[MeshPod]) -> Result<(), LabError> {
    for p in pods {
        let status = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": p.name, "namespace": p.namespace},
            "status": {
                "phase": "Running",
                "podIP": p.ip.to_string(),
                "podIPs": [{"ip": p.ip.to_string()}],
                "hostIP": p.ip.to_string(),
                "conditions": [
                    {"type": "Ready", "status": "True"},
                    {"type": "ContainersReady", "status": "True"},
                ],
            },
        });
        let pod: meshbench_k8s::k8s_openapi::api::core::v1::Pod =
            serde_json::from_value(status).map_err(CostError::PodStatus)?;
        api.client.apply_status(&pod)?;
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
        let mut members: Vec<Value> = pods
            .iter()
            .filter(|p| p.serves == Some(i))
            .map(|p| {
                json!({
                    "addresses": [p.ip.to_string()],
                    "conditions": {"ready": true, "serving": true, "terminating": false},
                    "nodeName": NODE,
                    "targetRef": {"kind": "Pod", "name": p.name, "namespace": p.namespace},
                })
            })
            .collect();
        if scale.kind == ProxyKind::Gateway {
            members.push(json!({
                "addresses": [gateway_service_endpoint(i).to_string()],
                "conditions": {"ready": true, "serving": true, "terminating": false},
            }));
        }
        endpoints += members.len() as u32;
        slices.push(endpoint_slice(&name, "pods", members));
    }
    (slices, endpoints)
}

/// The scale's Istio objects, VirtualServices and DestinationRules in turn, one of each per
/// service; returns them and how many of each.
fn istio_objects(scale: &MeshScale, services: u32) -> (Vec<Value>, u32, u32) {
    let mut istio = Vec::new();
    let (mut virtual_services, mut destination_rules) = (0, 0);
    for k in 0..scale.istio_objects {
        let host = format!(
            "{}.{APPS}.svc.cluster.local",
            service_name((k / 2) % services)
        );
        if k % 2 == 0 {
            virtual_services += 1;
            istio.push(json!({
                "apiVersion": "networking.istio.io/v1", "kind": "VirtualService",
                "metadata": {"name": format!("vs-{k}"), "namespace": APPS},
                "spec": {
                    "hosts": [host],
                    "http": [{
                        "route": [{"destination": {"host": host, "port": {"number": SERVICE_PORT}}}],
                        "timeout": "5s",
                        "retries": {"attempts": 2, "perTryTimeout": "2s", "retryOn": "5xx,reset"},
                    }],
                },
            }));
        } else {
            destination_rules += 1;
            istio.push(json!({
                "apiVersion": "networking.istio.io/v1", "kind": "DestinationRule",
                "metadata": {"name": format!("dr-{k}"), "namespace": APPS},
                "spec": {
                    "host": host,
                    "trafficPolicy": {
                        "connectionPool": {"http": {"http2MaxRequests": 1000, "maxRequestsPerConnection": 100}},
                        "outlierDetection": {"consecutive5xxErrors": 5, "interval": "10s", "baseEjectionTime": "30s"},
                    },
                },
            }));
        }
    }
    (istio, virtual_services, destination_rules)
}

fn endpoint_slice(service: &str, part: &str, endpoints: Vec<Value>) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": format!("{service}-{part}"),
            "namespace": APPS,
            "labels": {
                "kubernetes.io/service-name": service,
                "endpointslice.kubernetes.io/managed-by": "meshbench",
            },
        },
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [{"name": "http", "port": SERVICE_PORT, "protocol": "TCP"}],
    })
}

/// Endpoint change `n`: service `n mod services`'s second EndpointSlice now holds the one
/// address that encodes `n`.
pub fn write_endpoint_change(api: &ApiServer, services: u32, n: u32) -> Result<(), LabError> {
    let service = service_name(n % services.max(1));
    let member = json!({
        "addresses": [endpoint_change_address(n).to_string()],
        "conditions": {"ready": true, "serving": true, "terminating": false},
    });
    api.apply(&endpoint_slice(&service, "churn", vec![member]))
}

/// Configuration change `n`: the ServiceEntry `churn` now names the host and address that
/// encode `n`, on a TCP port.
pub fn write_config_change(api: &ApiServer, n: u32) -> Result<(), LabError> {
    api.apply(&json!({
        "apiVersion": "networking.istio.io/v1",
        "kind": "ServiceEntry",
        "metadata": {"name": "churn", "namespace": APPS},
        "spec": {
            "hosts": [config_change_host(n)],
            "addresses": [config_change_address(n).to_string()],
            "ports": [{"number": CHANGE_PORT, "name": "tcp", "protocol": "TCP"}],
            "location": "MESH_INTERNAL",
            "resolution": "STATIC",
            "endpoints": [{"address": "10.250.0.1"}],
        },
    }))
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
