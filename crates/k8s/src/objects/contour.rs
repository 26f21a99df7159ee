//! Contour's `HTTPProxy` (projectcontour.io/v1): a virtual host (its FQDN and the TLS Secret
//! it is served with) and its routes, each a path prefix sent to Services by name and port
//! (and protocol), the prefix optionally replaced; and the status Contour writes back
//! (whether it took the proxy, and why not). Only the fields meshbench uses; a typed object
//! (see [`crate::objects`]).
//!
//! Whether Contour has taken a namespace's HTTPProxies is judged here once
//! ([`taken`], [`wait_taken`]), for the lab's Contour and a cluster's alike.

use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use meshbench_results::Stop;
use serde::{Deserialize, Serialize};

use super::namespaced_resource;
use crate::{ApiError, BlockingClient};

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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_status: Option<ProxyStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// What Contour says of an HTTPProxy (`status.currentStatus`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum ProxyStatus {
    /// "Waiting for controller": what Contour first writes on every HTTPProxy it sees,
    /// before it builds them.
    NotReconciled,
    /// Taken: served.
    Valid,
    /// Refused: its description says why.
    Invalid,
    /// Refused: included by no root HTTPProxy.
    Orphaned,
    /// A word of a later Contour's.
    Other(String),
}

impl ProxyStatus {
    /// The word Contour writes.
    pub fn word(&self) -> &str {
        match self {
            ProxyStatus::NotReconciled => "NotReconciled",
            ProxyStatus::Valid => "valid",
            ProxyStatus::Invalid => "invalid",
            ProxyStatus::Orphaned => "orphaned",
            ProxyStatus::Other(word) => word,
        }
    }

    /// Whether Contour refused it: it will not be served as it stands.
    pub fn is_refused(&self) -> bool {
        matches!(self, ProxyStatus::Invalid | ProxyStatus::Orphaned)
    }
}

impl From<String> for ProxyStatus {
    fn from(word: String) -> Self {
        match word.as_str() {
            "NotReconciled" => ProxyStatus::NotReconciled,
            "valid" => ProxyStatus::Valid,
            "invalid" => ProxyStatus::Invalid,
            "orphaned" => ProxyStatus::Orphaned,
            _ => ProxyStatus::Other(word),
        }
    }
}

impl From<ProxyStatus> for String {
    fn from(status: ProxyStatus) -> Self {
        status.word().to_string()
    }
}

impl HttpProxy {
    /// What Contour says of it, if it said anything yet.
    pub fn current_status(&self) -> Option<&ProxyStatus> {
        self.status.as_ref()?.current_status.as_ref()
    }

    /// Whether Contour took it (`currentStatus: valid`).
    pub fn is_valid(&self) -> bool {
        self.current_status() == Some(&ProxyStatus::Valid)
    }

    /// `name: status, description`, as a failure lists it.
    fn said(&self) -> String {
        let status = self.status.clone().unwrap_or_default();
        format!(
            "{}: {}, {}",
            self.metadata.name.as_deref().unwrap_or("?"),
            status
                .current_status
                .as_ref()
                .map_or("no status", |s| s.word()),
            status.description.as_deref().unwrap_or("")
        )
    }
}

/// What Contour has said of the HTTPProxies of a namespace, `wanted` of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Taken {
    /// At least `wanted` of them valid.
    All,
    /// Some refused (invalid or orphaned): each as `name: status, description`.
    Refused(Vec<String>),
    /// Still being judged: `valid` of them taken so far.
    Waiting { valid: usize },
}

/// Judges what Contour has said of `proxies` against `wanted`: a refused one ends the wait at
/// once; `wanted` valid ones end it well.
pub fn taken(proxies: &[HttpProxy], wanted: usize) -> Taken {
    let refused: Vec<String> = proxies
        .iter()
        .filter(|p| p.current_status().is_some_and(ProxyStatus::is_refused))
        .map(HttpProxy::said)
        .collect();
    if !refused.is_empty() {
        return Taken::Refused(refused);
    }
    let valid = proxies.iter().filter(|p| p.is_valid()).count();
    match valid >= wanted {
        true => Taken::All,
        false => Taken::Waiting { valid },
    }
}

/// Why Contour did not take a namespace's HTTPProxies.
#[derive(Debug, thiserror::Error)]
pub enum NotTaken {
    #[error(transparent)]
    Api(#[from] ApiError),
    /// It refused some: each as `name: status, description`.
    #[error("Contour did not take every HTTPProxy: {}", .0.join("; "))]
    Refused(Vec<String>),
    /// `valid` of `wanted` valid after `waited`; `not_valid` lists the others as `name:
    /// status, description`, and those missing.
    #[error("Contour had said `valid` of {valid} of {wanted} HTTPProxies after {} s", waited.as_secs())]
    TimedOut {
        valid: usize,
        wanted: usize,
        waited: Duration,
        not_valid: Vec<String>,
    },
    #[error("stopped while waiting for Contour")]
    Stopped,
}

/// Waits until Contour has taken `wanted` HTTPProxies of `namespace` ([`taken`]), looking
/// every `poll` for at most `within`; a `stop` ends the wait.
pub fn wait_taken(
    client: &BlockingClient,
    namespace: &str,
    wanted: usize,
    (within, poll): (Duration, Duration),
    stop: &Stop,
) -> Result<(), NotTaken> {
    let began = Instant::now();
    loop {
        let proxies: Vec<HttpProxy> = client.list(namespace, "")?;
        let valid = match taken(&proxies, wanted) {
            Taken::All => return Ok(()),
            Taken::Refused(refused) => return Err(NotTaken::Refused(refused)),
            Taken::Waiting { valid } => valid,
        };
        if began.elapsed() >= within {
            let mut not_valid: Vec<String> = proxies
                .iter()
                .filter(|p| !p.is_valid())
                .map(HttpProxy::said)
                .collect();
            if proxies.len() < wanted {
                not_valid.push(format!("{} of {wanted} HTTPProxies found", proxies.len()));
            }
            return Err(NotTaken::TimedOut {
                valid,
                wanted,
                waited: within,
                not_valid,
            });
        }
        if !stop.sleep(poll) {
            return Err(NotTaken::Stopped);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proxy(name: &str, status: Option<&str>) -> HttpProxy {
        HttpProxy {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            spec: HttpProxySpec::default(),
            status: status.map(|s| HttpProxyStatus {
                current_status: Some(ProxyStatus::from(s.to_string())),
                description: Some(format!("{s} proxy")),
            }),
        }
    }

    #[test]
    fn a_refused_proxy_ends_the_wait_and_enough_valid_ones_end_it_well() {
        let waiting = [proxy("a", Some("valid")), proxy("b", Some("NotReconciled"))];
        assert_eq!(taken(&waiting, 2), Taken::Waiting { valid: 1 });
        assert_eq!(taken(&waiting, 1), Taken::All);
        let refused = [proxy("a", Some("valid")), proxy("b", Some("orphaned"))];
        assert_eq!(
            taken(&refused, 1),
            Taken::Refused(vec!["b: orphaned, orphaned proxy".into()])
        );
        assert_eq!(taken(&[proxy("c", None)], 1), Taken::Waiting { valid: 0 });
        let later = ProxyStatus::from("someday".to_string());
        assert_eq!((later.word(), later.is_refused()), ("someday", false));
    }
}
