//! One way to build Kubernetes objects: typed. Built-in kinds are k8s-openapi's types (this
//! crate's `k8s_openapi`, one API version for the whole project); the custom resources
//! meshbench writes are typed here, with only the fields meshbench uses: Istio's
//! ([`istio`]: Gateway, VirtualService, DestinationRule, ServiceEntry, PeerAuthentication),
//! the Gateway API's Gateway ([`gateway_api`], Istio's waypoint) and Contour's HTTPProxy
//! ([`contour`]).
//!
//! Each custom resource implements k8s-openapi's `Resource` and `Metadata` (group, version,
//! kind and plural written with its type, as k8s-openapi does for the built-in ones), so that
//! kube's typed `Api<K>` and [`BlockingClient::apply_typed`](crate::BlockingClient::apply_typed)
//! take it as they take a Pod. It serialises as the API server reads it: `apiVersion`, `kind`,
//! `metadata`, `spec` (and `status` where the kind has one) in that order, each field in
//! camelCase, every field not given left out.
//!
//! [`to_value`] turns any typed object into the JSON document that the document paths take
//! ([`BlockingClient::apply`](crate::BlockingClient::apply), `apply_all`, a plan's YAML and
//! its diff). serde_json's maps are sorted, so a document is the same whichever way its object
//! was built.

pub mod contour;
pub mod gateway_api;
pub mod istio;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::ser::SerializeStruct;
use serde::{Serialize, Serializer};
use serde_json::Value;

/// A custom resource typed here (not one of Kubernetes' own kinds): the API server serves it
/// only once its definition is applied and established, which
/// [`BlockingClient::apply_custom`](crate::BlockingClient::apply_custom) waits for.
pub trait CustomResource:
    k8s_openapi::Resource + k8s_openapi::Metadata<Ty = ObjectMeta> + Serialize
{
}

/// A typed object as the JSON document the apply path, a plan's YAML and its diff take.
pub fn to_value<K>(object: &K) -> Value
where
    K: k8s_openapi::Resource + Serialize,
{
    serde_json::to_value(object).expect("a Kubernetes object serialises to JSON")
}

/// The metadata of a namespaced object: its name and namespace, nothing else.
pub fn meta(name: impl Into<String>, namespace: impl Into<String>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some(namespace.into()),
        ..ObjectMeta::default()
    }
}

/// A custom resource as the API server reads it: `apiVersion`, `kind`, `metadata`, `spec`,
/// and `status` when there is one.
fn serialize_object<K, S>(
    serializer: S,
    metadata: &ObjectMeta,
    spec: &impl Serialize,
    status: Option<&impl Serialize>,
) -> Result<S::Ok, S::Error>
where
    K: k8s_openapi::Resource,
    S: Serializer,
{
    let mut state = serializer.serialize_struct(K::KIND, 4 + usize::from(status.is_some()))?;
    state.serialize_field("apiVersion", K::API_VERSION)?;
    state.serialize_field("kind", K::KIND)?;
    state.serialize_field("metadata", metadata)?;
    state.serialize_field("spec", spec)?;
    if let Some(status) = status {
        state.serialize_field("status", status)?;
    }
    state.end()
}

/// `Resource`, `Metadata` and `Serialize` of a namespaced custom resource whose fields are
/// `metadata` and `spec` (and, with `status`, an optional `status`).
macro_rules! namespaced_resource {
    (@status $object:ident) => {
        None::<&()>
    };
    (@status $object:ident, $status:ident) => {
        $object.$status.as_ref()
    };
    (
        $type:ident $(<$v:ident: $bound:path>)?,
        group: $group:expr, version: $version:expr, api_version: $api_version:expr,
        kind: $kind:literal, plural: $plural:literal $(, $status:ident)?
    ) => {
        impl$(<$v: $bound>)? k8s_openapi::Resource for $type$(<$v>)? {
            const API_VERSION: &'static str = $api_version;
            const GROUP: &'static str = $group;
            const KIND: &'static str = $kind;
            const VERSION: &'static str = $version;
            const URL_PATH_SEGMENT: &'static str = $plural;
            type Scope = k8s_openapi::NamespaceResourceScope;
        }

        impl$(<$v: $bound>)? k8s_openapi::Metadata for $type$(<$v>)? {
            type Ty = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

            fn metadata(&self) -> &Self::Ty {
                &self.metadata
            }

            fn metadata_mut(&mut self) -> &mut Self::Ty {
                &mut self.metadata
            }
        }

        impl$(<$v: $bound>)? $crate::objects::CustomResource for $type$(<$v>)? {}

        impl$(<$v: $bound>)? serde::Serialize for $type$(<$v>)? {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                $crate::objects::serialize_object::<Self, S>(
                    serializer,
                    &self.metadata,
                    &self.spec,
                    $crate::objects::namespaced_resource!(@status self $(, $status)?),
                )
            }
        }
    };
}
pub(crate) use namespaced_resource;

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::Namespace;
    use kube::core::{ApiResource, Resource};
    use serde_json::json;

    use super::contour::{
        Condition, HttpProxy, HttpProxySpec, PathRewritePolicy, ReplacePrefix, Route, RouteService,
        Tls, VirtualHost,
    };
    use super::istio::{
        ConnectionPool, Destination, DestinationRule, DestinationRuleSpec, Gateway, GatewaySpec,
        HttpMatch, HttpPool, HttpRoute, Location, OutlierDetection, PeerAuthentication, Port,
        PortSelector, Resolution, Retries, Rewrite, RouteDestination, Server, ServerTls,
        ServiceEndpoint, ServiceEntry, ServiceEntrySpec, StringMatch, TrafficPolicy, V1beta1,
        VirtualService, VirtualServiceSpec, V1,
    };
    use super::*;

    fn route(host: &str) -> RouteDestination {
        RouteDestination {
            destination: Destination {
                host: host.into(),
                port: PortSelector { number: 8080 },
            },
        }
    }

    #[test]
    fn istio_objects_are_the_documents_the_lab_writes_by_hand_today() {
        let vs = VirtualService::<V1> {
            metadata: meta("vs-0", "default"),
            spec: VirtualServiceSpec {
                hosts: vec!["svc-0.default.svc.cluster.local".into()],
                gateways: Vec::new(),
                http: vec![HttpRoute {
                    route: vec![route("svc-0.default.svc.cluster.local")],
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
        };
        let host = "svc-0.default.svc.cluster.local";
        assert_eq!(
            to_value(&vs),
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
        let dr = DestinationRule::<V1> {
            metadata: meta("dr-1", "default"),
            spec: DestinationRuleSpec {
                host: host.into(),
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
        };
        assert_eq!(
            to_value(&dr),
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
        let churn = ServiceEntry::<V1> {
            metadata: meta("churn", "default"),
            spec: ServiceEntrySpec {
                hosts: vec!["churn-1.meshbench.lab".into()],
                addresses: vec!["240.0.0.1".into()],
                location: Location::MeshInternal,
                ports: vec![Port {
                    number: 7070,
                    name: "tcp".into(),
                    protocol: "TCP".into(),
                }],
                resolution: Resolution::Static,
                endpoints: vec![ServiceEndpoint {
                    address: "10.250.0.1".into(),
                }],
            },
            version: V1,
        };
        assert_eq!(
            to_value(&churn),
            json!({
                "apiVersion": "networking.istio.io/v1",
                "kind": "ServiceEntry",
                "metadata": {"name": "churn", "namespace": "default"},
                "spec": {
                    "hosts": ["churn-1.meshbench.lab"],
                    "addresses": ["240.0.0.1"],
                    "ports": [{"number": 7070, "name": "tcp", "protocol": "TCP"}],
                    "location": "MESH_INTERNAL",
                    "resolution": "STATIC",
                    "endpoints": [{"address": "10.250.0.1"}],
                },
            })
        );
        assert_eq!(
            to_value(&PeerAuthentication::new(
                meta("default", "istio-system"),
                "STRICT"
            )),
            json!({
                "apiVersion": "security.istio.io/v1",
                "kind": "PeerAuthentication",
                "metadata": {"name": "default", "namespace": "istio-system"},
                "spec": {"mtls": {"mode": "STRICT"}},
            })
        );
    }

    /// `gen gateway --for istio`'s YAML, field for field and in its order.
    #[test]
    fn a_v1beta1_gateway_and_virtual_service_print_as_gen_gateway_prints_them() {
        let gateway = Gateway::<V1beta1> {
            metadata: meta("workspace-1-gateway", "istio-system"),
            spec: GatewaySpec {
                selector: BTreeMap::from([("istio".into(), "ingressgateway".into())]),
                servers: vec![Server {
                    port: Port {
                        number: 443,
                        name: "https-a.com".into(),
                        protocol: "HTTPS".into(),
                    },
                    bind: None,
                    tls: Some(ServerTls {
                        mode: "SIMPLE".into(),
                        credential_name: "a.com-cert".into(),
                    }),
                    hosts: vec!["a.com".into()],
                }],
            },
            version: V1beta1,
        };
        assert_eq!(
            serde_yaml_ng::to_string(&gateway).unwrap(),
            "apiVersion: networking.istio.io/v1beta1\nkind: Gateway\nmetadata:\n  name: workspace-1-gateway\n  namespace: istio-system\nspec:\n  selector:\n    istio: ingressgateway\n  servers:\n  - port:\n      number: 443\n      name: https-a.com\n      protocol: HTTPS\n    tls:\n      mode: SIMPLE\n      credentialName: a.com-cert\n    hosts:\n    - a.com\n"
        );
        let vs = VirtualService::<V1beta1> {
            metadata: meta("a.com", "istio-system"),
            spec: VirtualServiceSpec {
                hosts: vec!["a.com".into()],
                gateways: vec!["istio-system/workspace-1-gateway".into()],
                http: vec![HttpRoute {
                    matches: vec![HttpMatch {
                        uri: StringMatch::exact("/p1"),
                    }],
                    rewrite: Some(Rewrite { uri: "/".into() }),
                    route: vec![route("meshbench-backend.internal")],
                    ..HttpRoute::default()
                }],
            },
            version: V1beta1,
        };
        let yaml = serde_yaml_ng::to_string(&vs).unwrap();
        assert_eq!(
            yaml,
            "apiVersion: networking.istio.io/v1beta1\nkind: VirtualService\nmetadata:\n  name: a.com\n  namespace: istio-system\nspec:\n  hosts:\n  - a.com\n  gateways:\n  - istio-system/workspace-1-gateway\n  http:\n  - match:\n    - uri:\n        exact: /p1\n    rewrite:\n      uri: /\n    route:\n    - destination:\n        host: meshbench-backend.internal\n        port:\n          number: 8080\n"
        );
        let back: VirtualService<V1beta1> = serde_yaml_ng::from_str(&yaml).unwrap();
        assert_eq!(back, vs);
    }

    #[test]
    fn each_kind_names_its_resource_as_the_api_server_serves_it() {
        let names = |r: ApiResource| (r.api_version, r.kind, r.plural);
        let of = |v: &str, k: &str, p: &str| (v.to_string(), k.to_string(), p.to_string());
        assert_eq!(
            names(ApiResource::erase::<VirtualService<V1beta1>>(&())),
            of(
                "networking.istio.io/v1beta1",
                "VirtualService",
                "virtualservices"
            )
        );
        assert_eq!(
            names(ApiResource::erase::<ServiceEntry>(&())),
            of("networking.istio.io/v1", "ServiceEntry", "serviceentries")
        );
        assert_eq!(
            names(ApiResource::erase::<HttpProxy>(&())),
            of("projectcontour.io/v1", "HTTPProxy", "httpproxies")
        );
        assert_eq!(
            names(ApiResource::erase::<gateway_api::Gateway>(&())),
            of("gateway.networking.k8s.io/v1", "Gateway", "gateways")
        );
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some("x".into()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        assert_eq!(
            to_value(&ns),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}})
        );
        let pa = PeerAuthentication::new(meta("default", "n"), "STRICT");
        assert_eq!(pa.meta().namespace.as_deref(), Some("n"));
    }

    #[test]
    fn an_http_proxy_is_contours_and_its_status_says_whether_contour_took_it() {
        let proxy = HttpProxy {
            metadata: meta("a", "projectcontour"),
            spec: HttpProxySpec {
                virtualhost: Some(VirtualHost {
                    fqdn: "a.com".into(),
                    tls: Some(Tls {
                        secret_name: "a.com-cert".into(),
                    }),
                }),
                routes: vec![Route {
                    conditions: vec![Condition {
                        prefix: Some("/".into()),
                    }],
                    services: vec![RouteService {
                        name: "backend".into(),
                        port: 8080,
                        protocol: Some("h2c".into()),
                    }],
                    path_rewrite_policy: Some(PathRewritePolicy {
                        replace_prefix: vec![ReplacePrefix {
                            prefix: None,
                            replacement: "/".into(),
                        }],
                    }),
                }],
            },
            status: None,
        };
        let written = json!({
            "apiVersion": "projectcontour.io/v1", "kind": "HTTPProxy",
            "metadata": {"name": "a", "namespace": "projectcontour"},
            "spec": {
                "virtualhost": {"fqdn": "a.com", "tls": {"secretName": "a.com-cert"}},
                "routes": [{"conditions": [{"prefix": "/"}],
                    "services": [{"name": "backend", "port": 8080, "protocol": "h2c"}],
                    "pathRewritePolicy": {"replacePrefix": [{"replacement": "/"}]}}],
            },
        });
        assert_eq!(to_value(&proxy), written);
        let mut read = written;
        read["status"] = json!({"currentStatus": "valid", "description": "Valid HTTPProxy"});
        let read: HttpProxy = serde_json::from_value(read).unwrap();
        assert!(read.is_valid() && !proxy.is_valid());
        assert_eq!(read.spec, proxy.spec);
    }
}
