//! Istio's custom resources as meshbench writes them: a `Gateway` with its servers, a
//! `VirtualService` with its HTTP routes, a `DestinationRule` with a traffic policy, a
//! `ServiceEntry` with static endpoints (networking.istio.io), a `PeerAuthentication`
//! (security.istio.io), a `Telemetry` with access logging (telemetry.istio.io), and the mesh
//! configuration's extension providers it names ([`MeshConfig`]). Only the fields meshbench
//! uses; each is a typed object (see [`crate::objects`]).
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
/// Istio's telemetry API group.
pub const TELEMETRY: &str = "telemetry.istio.io";

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

/// A `Telemetry`: which of the mesh configuration's providers the proxies of its namespace
/// (in Istio's root namespace: of the whole mesh) log requests to, and which requests.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Telemetry {
    pub metadata: ObjectMeta,
    pub spec: TelemetrySpec,
}

namespaced_resource!(Telemetry, group: TELEMETRY, version: "v1",
    api_version: "telemetry.istio.io/v1", kind: "Telemetry", plural: "telemetries");

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TelemetrySpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub access_logging: Vec<AccessLogging>,
}

/// One access log: its providers (by name, from the mesh configuration) and its filter.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AccessLogging {
    pub providers: Vec<ProviderRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<AccessLogFilter>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderRef {
    pub name: String,
}

/// A CEL expression over Envoy's attributes: only the requests it holds for are logged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessLogFilter {
    pub expression: String,
}

impl Telemetry {
    /// Access logging to `provider` for the requests `expression` holds for, as `metadata`
    /// names it.
    pub fn access_log(metadata: ObjectMeta, provider: &str, expression: &str) -> Telemetry {
        Telemetry {
            metadata,
            spec: TelemetrySpec {
                access_logging: vec![AccessLogging {
                    providers: vec![ProviderRef {
                        name: provider.into(),
                    }],
                    filter: Some(AccessLogFilter {
                        expression: expression.into(),
                    }),
                }],
            },
        }
    }
}

/// Istio's mesh configuration (istiod's `--meshConfig` file, the `mesh` key of the `istio`
/// ConfigMap): the part meshbench writes and reads, its extension providers. Every other key
/// is Istio's default when written, and ignored when read.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MeshConfig {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extension_providers: Vec<ExtensionProvider>,
}

/// A named provider a `Telemetry` refers to; only Envoy's file access log is modelled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExtensionProvider {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub envoy_file_access_log: Option<FileAccessLogProvider>,
}

/// `envoyFileAccessLog`: the file each proxy writes (`/dev/stdout`: its container's log) and
/// the line's format.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileAccessLogProvider {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_format: Option<LogFormat>,
}

/// A text format with Envoy's command operators.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogFormat {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

impl MeshConfig {
    /// The ConfigMap istiod reads its mesh configuration from, in Istio's namespace:
    /// `istio`, or `istio-<revision>`; the configuration is its [`MeshConfig::KEY`].
    pub fn config_map_name(revision: Option<&str>) -> String {
        revision.map_or_else(|| "istio".to_string(), |r| format!("istio-{r}"))
    }

    /// The key of that ConfigMap that holds the configuration (YAML).
    pub const KEY: &'static str = "mesh";

    /// A mesh configuration as YAML (every key meshbench does not model ignored).
    pub fn parse(yaml: &str) -> Result<MeshConfig, serde_yaml_ng::Error> {
        serde_yaml_ng::from_str(yaml)
    }

    /// Whether it has an extension provider named `name`.
    pub fn has_provider(&self, name: &str) -> bool {
        self.extension_providers.iter().any(|p| p.name == name)
    }
}
