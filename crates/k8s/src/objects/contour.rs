//! Contour's `HTTPProxy` (projectcontour.io/v1): a virtual host (its FQDN and the TLS Secret
//! it is served with) and its routes, each a path prefix sent to Services by name and port
//! (and protocol), the prefix optionally replaced; and the status Contour writes back (whether it took the proxy, and why not). Only the
//! fields meshbench uses; a typed object (see [`crate::objects`]).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

use super::namespaced_resource;

/// Contour's API group.
pub const GROUP: &str = "projectcontour.io";

/// An HTTPProxy: one virtual host and its routes.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct HttpProxy {
    pub metadata: ObjectMeta,
    pub spec: HttpProxySpec,
    /// What Contour says of it (never written by meshbench: left out when none).
    #[serde(default)]
    pub status: Option<HttpProxyStatus>,
}

namespaced_resource!(HttpProxy, group: GROUP, version: "v1",
    api_version: "projectcontour.io/v1", kind: "HTTPProxy", plural: "httpproxies", status);

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HttpProxySpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtualhost: Option<VirtualHost>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<Route>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VirtualHost {
    /// The host name the proxy serves.
    pub fqdn: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<Tls>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Tls {
    /// The `kubernetes.io/tls` Secret (`name` or `namespace/name`).
    pub secret_name: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Route {
    /// All must hold; none: every request.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    pub services: Vec<RouteService>,
    /// How the path is rewritten before it is sent on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_rewrite_policy: Option<PathRewritePolicy>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PathRewritePolicy {
    /// Prefixes replaced; Contour takes the one equal to the route's prefix condition, else
    /// the one without a prefix.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replace_prefix: Vec<ReplacePrefix>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplacePrefix {
    /// The prefix replaced; none: the route's whole prefix condition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    pub replacement: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Condition {
    /// The path begins with this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
}

/// A Service a route sends to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteService {
    pub name: String,
    pub port: u16,
    /// `h2c`, `h2` or `tls`; none: HTTP/1.1 in the clear.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpProxyStatus {
    /// `valid`, `invalid`, `orphaned`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

impl HttpProxy {
    /// Whether Contour has judged it: a status other than the `NotReconciled` ("Waiting for
    /// controller") it first writes on every HTTPProxy it sees, before it builds them.
    pub fn is_reconciled(&self) -> bool {
        self.status
            .as_ref()
            .and_then(|s| s.current_status.as_deref())
            .is_some_and(|s| s != "NotReconciled")
    }

    /// Whether Contour took it (`currentStatus: valid`).
    pub fn is_valid(&self) -> bool {
        self.status
            .as_ref()
            .and_then(|s| s.current_status.as_deref())
            == Some("valid")
    }
}
