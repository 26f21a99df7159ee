//! Istio's custom resources as meshbench writes them: a `Gateway` with its servers, a
//! `VirtualService` with its HTTP routes, a `DestinationRule` with a traffic policy, a
//! `ServiceEntry` with static endpoints (networking.istio.io), and a `PeerAuthentication`
//! (security.istio.io). Only the fields meshbench uses; each is a typed object (see
//! [`crate::objects`]).
//!
//! The networking kinds are served as `v1` and, by older Istios, `v1beta1` with the same
//! schema: the version is a type parameter ([`V1`] when not said, or [`V1beta1`]), so one
//! struct writes either and the compiler knows which.

use std::collections::BTreeMap;
use std::fmt::Debug;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

use super::namespaced_resource;

/// Istio's networking API group.
pub const NETWORKING: &str = "networking.istio.io";
/// Istio's security API group.
pub const SECURITY: &str = "security.istio.io";

/// A version of Istio's networking API.
pub trait Version: Debug + Clone + Copy + Default + PartialEq + Eq {
    /// `v1`, `v1beta1`.
    const VERSION: &'static str;
    /// `networking.istio.io/` and the version.
    const API_VERSION: &'static str;
}

/// `networking.istio.io/v1` (Istio 1.22 and later).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct V1;

/// `networking.istio.io/v1beta1`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct V1beta1;

impl Version for V1 {
    const VERSION: &'static str = "v1";
    const API_VERSION: &'static str = "networking.istio.io/v1";
}

impl Version for V1beta1 {
    const VERSION: &'static str = "v1beta1";
    const API_VERSION: &'static str = "networking.istio.io/v1beta1";
}

/// An Istio ingress `Gateway`: the servers of the gateway pods its selector picks.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Gateway<V: Version = V1> {
    pub metadata: ObjectMeta,
    pub spec: GatewaySpec,
    #[serde(skip)]
    pub version: V,
}

namespaced_resource!(Gateway<V: Version>, group: NETWORKING, version: V::VERSION,
    api_version: V::API_VERSION, kind: "Gateway", plural: "gateways");

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GatewaySpec {
    /// The gateway pods' labels.
    pub selector: BTreeMap<String, String>,
    pub servers: Vec<Server>,
}

/// One listener of a Gateway.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Server {
    pub port: Port,
    /// The address the gateway's listener binds (Istio's default: every address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<ServerTls>,
    pub hosts: Vec<String>,
}

/// A port of a Gateway's server or of a ServiceEntry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Port {
    pub number: u16,
    pub name: String,
    /// `HTTP`, `HTTPS`, `GRPC`, `TCP`...
    pub protocol: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerTls {
    /// `SIMPLE`: the gateway ends TLS with the credential's certificate.
    pub mode: String,
    /// The `kubernetes.io/tls` Secret in the gateway's namespace.
    pub credential_name: String,
}

/// A `VirtualService`: the HTTP routes of some hosts, at some gateways or in the mesh.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct VirtualService<V: Version = V1> {
    pub metadata: ObjectMeta,
    pub spec: VirtualServiceSpec,
    #[serde(skip)]
    pub version: V,
}

namespaced_resource!(VirtualService<V: Version>, group: NETWORKING, version: V::VERSION,
    api_version: V::API_VERSION, kind: "VirtualService", plural: "virtualservices");

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VirtualServiceSpec {
    pub hosts: Vec<String>,
    /// `namespace/name` of the Gateways it is bound to; none: the mesh's sidecars.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gateways: Vec<String>,
    pub http: Vec<HttpRoute>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpRoute {
    /// None: every request.
    #[serde(rename = "match", default, skip_serializing_if = "Vec::is_empty")]
    pub matches: Vec<HttpMatch>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewrite: Option<Rewrite>,
    pub route: Vec<RouteDestination>,
    /// A request's deadline (`5s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<Retries>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpMatch {
    pub uri: StringMatch,
}

/// How a string is matched: one of Istio's three, given (a struct, not an enum: YAML writes an
/// enum as a tag, where Istio reads a one-key map).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StringMatch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exact: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regex: Option<String>,
}

impl StringMatch {
    /// Exactly `s`.
    pub fn exact(s: impl Into<String>) -> StringMatch {
        StringMatch {
            exact: Some(s.into()),
            ..StringMatch::default()
        }
    }

    /// Anything that begins with `s`.
    pub fn prefix(s: impl Into<String>) -> StringMatch {
        StringMatch {
            prefix: Some(s.into()),
            ..StringMatch::default()
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rewrite {
    pub uri: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteDestination {
    pub destination: Destination,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Destination {
    pub host: String,
    pub port: PortSelector,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortSelector {
    pub number: u16,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Retries {
    pub attempts: u32,
    pub per_try_timeout: String,
    /// `5xx,reset`...
    pub retry_on: String,
}

/// A `DestinationRule`: the traffic policy toward one host.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct DestinationRule<V: Version = V1> {
    pub metadata: ObjectMeta,
    pub spec: DestinationRuleSpec,
    #[serde(skip)]
    pub version: V,
}

namespaced_resource!(DestinationRule<V: Version>, group: NETWORKING, version: V::VERSION,
    api_version: V::API_VERSION, kind: "DestinationRule", plural: "destinationrules");

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DestinationRuleSpec {
    pub host: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_policy: Option<TrafficPolicy>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TrafficPolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection_pool: Option<ConnectionPool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outlier_detection: Option<OutlierDetection>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ConnectionPool {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpPool>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HttpPool {
    #[serde(
        rename = "http2MaxRequests",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub http2_max_requests: Option<u32>,
    #[serde(
        rename = "maxRequestsPerConnection",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub max_requests_per_connection: Option<u32>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OutlierDetection {
    #[serde(
        rename = "consecutive5xxErrors",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub consecutive_5xx_errors: Option<u32>,
    /// Between two sweeps (`10s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<String>,
    #[serde(
        rename = "baseEjectionTime",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub base_ejection_time: Option<String>,
}

/// A `ServiceEntry`: a service the mesh knows by host name, at the endpoints given.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ServiceEntry<V: Version = V1> {
    pub metadata: ObjectMeta,
    pub spec: ServiceEntrySpec,
    #[serde(skip)]
    pub version: V,
}

namespaced_resource!(ServiceEntry<V: Version>, group: NETWORKING, version: V::VERSION,
    api_version: V::API_VERSION, kind: "ServiceEntry", plural: "serviceentries");

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServiceEntrySpec {
    pub hosts: Vec<String>,
    /// Virtual addresses of the hosts (a sidecar gets a listener on each).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<String>,
    pub location: Location,
    pub ports: Vec<Port>,
    pub resolution: Resolution,
    pub endpoints: Vec<ServiceEndpoint>,
}

/// Whether a ServiceEntry's endpoints are in the mesh.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Location {
    /// Outside: no sidecar, spoken to in the clear.
    #[default]
    MeshExternal,
    MeshInternal,
}

/// How a ServiceEntry's endpoints are found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Resolution {
    /// The endpoints are addresses, not names to resolve.
    #[default]
    Static,
    Dns,
    None,
}

/// One endpoint of a ServiceEntry (Istio's `WorkloadEntry` inline).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceEndpoint {
    pub address: String,
}

/// A `PeerAuthentication`: the mutual TLS a namespace's (or, in Istio's root namespace, the
/// mesh's) sidecars accept.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct PeerAuthentication {
    pub metadata: ObjectMeta,
    pub spec: PeerAuthenticationSpec,
}

namespaced_resource!(PeerAuthentication, group: SECURITY, version: "v1",
    api_version: "security.istio.io/v1", kind: "PeerAuthentication",
    plural: "peerauthentications");

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PeerAuthenticationSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtls: Option<Mtls>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mtls {
    /// `PERMISSIVE`, `STRICT`, `DISABLE`.
    pub mode: String,
}

impl PeerAuthentication {
    /// Mutual TLS in `mode` for what `metadata` names (`default`: the whole namespace).
    pub fn new(metadata: ObjectMeta, mode: impl Into<String>) -> PeerAuthentication {
        PeerAuthentication {
            metadata,
            spec: PeerAuthenticationSpec {
                mtls: Some(Mtls { mode: mode.into() }),
            },
        }
    }
}
