//! The Kubernetes objects of the lab's workloads, typed (k8s-openapi's), as a cluster would
//! hold them for a control plane to read: a Service with one HTTP port, a Pod with one
//! container on that port and the status a kubelet would report of it, an EndpointSlice of
//! ready endpoints, kept by meshbench since no controller manager runs, and a domain's
//! `kubernetes.io/tls` Secret. Istio's sidecars' pods (`crate::istio::sidecars`), the
//! control-plane cost step's mesh (`crate::control_plane_cost::mesh`) and the gateways' objects
//! (Istio's and Contour's) build theirs here, so that all write one shape.
//!
//! Every port is [`SERVICE_PORT`], named [`HTTP`] so that Istio reads it as HTTP; every pod
//! claims [`NODE`].

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::pki::Issued;
use meshbench_k8s::k8s_openapi::api::core::v1::{
    Container, ContainerPort, ObjectReference, Pod, PodCondition, PodIP, PodSpec, PodStatus,
    Secret, Service, ServicePort, ServiceSpec,
};
use meshbench_k8s::k8s_openapi::api::discovery::v1::{
    Endpoint, EndpointConditions, EndpointPort, EndpointSlice,
};
use meshbench_k8s::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use meshbench_k8s::k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use meshbench_k8s::k8s_openapi::ByteString;
use meshbench_k8s::names::{
    ENDPOINT_SLICE_MANAGED_BY, HTTP, NODE, SERVICE_NAME_LABEL, SERVICE_PORT,
};

/// The protocol of every port.
const TCP: &str = "TCP";

/// The Service `metadata` names, selecting the pods labelled `app`, at `cluster_ip`.
pub fn service(metadata: ObjectMeta, app: &str, cluster_ip: String) -> Service {
    Service {
        metadata,
        spec: Some(ServiceSpec {
            selector: Some(BTreeMap::from([("app".to_string(), app.to_string())])),
            cluster_ip: Some(cluster_ip),
            ports: Some(vec![ServicePort {
                name: Some(HTTP.into()),
                port: SERVICE_PORT.into(),
                target_port: Some(IntOrString::Int(SERVICE_PORT.into())),
                protocol: Some(TCP.into()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

/// The Pod `metadata` names, on [`NODE`], as `service_account`, its one container
/// `container` (image `meshbench`) serving the HTTP port; no status yet.
pub fn pod(metadata: ObjectMeta, service_account: &str, container: &str) -> Pod {
    Pod {
        metadata,
        spec: Some(PodSpec {
            node_name: Some(NODE.into()),
            service_account_name: Some(service_account.into()),
            containers: vec![Container {
                name: container.into(),
                image: Some("meshbench".into()),
                ports: Some(vec![ContainerPort {
                    name: Some(HTTP.into()),
                    container_port: SERVICE_PORT.into(),
                    protocol: Some(TCP.into()),
                    ..ContainerPort::default()
                }]),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        status: None,
    }
}

/// A pod's status as the kubelet would report it: running and ready at `ip` (its host's
/// address too).
pub fn running(ip: IpAddr) -> PodStatus {
    let ready = |kind: &str| PodCondition {
        type_: kind.into(),
        status: "True".into(),
        ..PodCondition::default()
    };
    PodStatus {
        phase: Some("Running".into()),
        pod_ip: Some(ip.to_string()),
        pod_ips: Some(vec![PodIP { ip: ip.to_string() }]),
        host_ip: Some(ip.to_string()),
        conditions: Some(vec![ready("Ready"), ready("ContainersReady")]),
        ..PodStatus::default()
    }
}

/// A ready endpoint at `address`; with `pod` (its name and namespace), that pod's on
/// [`NODE`], else an address with no pod.
pub fn endpoint(address: String, pod: Option<(&str, &str)>) -> Endpoint {
    let (node_name, target_ref) = match pod {
        Some((name, namespace)) => (
            Some(NODE.to_string()),
            Some(ObjectReference {
                kind: Some("Pod".into()),
                name: Some(name.into()),
                namespace: Some(namespace.into()),
                ..ObjectReference::default()
            }),
        ),
        None => (None, None),
    };
    Endpoint {
        addresses: vec![address],
        conditions: Some(EndpointConditions {
            ready: Some(true),
            serving: Some(true),
            terminating: Some(false),
        }),
        node_name,
        target_ref,
        ..Endpoint::default()
    }
}

/// The EndpointSlice `name` in `namespace` of Service `service`, holding `endpoints` (IPv4)
/// on the HTTP port `port` (the workloads' is [`SERVICE_PORT`]), kept by meshbench.
pub fn endpoint_slice(
    name: String,
    namespace: &str,
    service: &str,
    endpoints: Vec<Endpoint>,
    port: u16,
) -> EndpointSlice {
    let (managed_by, meshbench) = ENDPOINT_SLICE_MANAGED_BY;
    EndpointSlice {
        metadata: ObjectMeta {
            labels: Some(BTreeMap::from([
                (SERVICE_NAME_LABEL.to_string(), service.to_string()),
                (managed_by.to_string(), meshbench.to_string()),
            ])),
            ..meshbench_k8s::objects::meta(name, namespace)
        },
        address_type: "IPv4".into(),
        endpoints,
        ports: Some(vec![EndpointPort {
            name: Some(HTTP.into()),
            port: Some(port.into()),
            protocol: Some(TCP.into()),
            ..EndpointPort::default()
        }]),
    }
}

/// The `kubernetes.io/tls` Secret `name` in `namespace`, holding what was `issued`.
pub fn tls_secret(name: &str, issued: &Issued, namespace: &str) -> Secret {
    let bytes = |pem: &str| ByteString(pem.as_bytes().to_vec());
    Secret {
        metadata: meshbench_k8s::objects::meta(name, namespace),
        type_: Some("kubernetes.io/tls".into()),
        data: Some(BTreeMap::from([
            ("tls.crt".to_string(), bytes(&issued.cert_pem)),
            ("tls.key".to_string(), bytes(&issued.key_pem)),
        ])),
        ..Secret::default()
    }
}
