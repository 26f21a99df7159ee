//! `gateway.type: istio` and `proxy.type: istio`: the gateway and the sidecars as Istio runs
//! them. Envoy takes its listeners, routes, clusters and certificates from istiod over ADS, not
//! from a file this project wrote. This is Istio's one home: the lab's rig, the control-plane
//! cost experiment (`crate::control_plane_cost`) and the runner's cluster all use it. The
//! sidecars' pods are [`sidecars`], Istio's objects for the gateway plan [`objects`]; the API
//! server and the typed objects of a workload are the lab's stand-in for a cluster
//! ([`crate::kube`], which Contour reads too), readiness and the one wait for Envoy's ACK
//! [`crate::program::envoy::ready`]; istiod and its API server start in `control_plane.rs`
//! ([`ControlPlane`]), the agents' command lines are `agent.rs`'s
//! ([`ControlPlane::agent_command`]).
//!
//! The control plane ([`ControlPlane`]) is the smallest one istiod runs against. It has etcd
//! and a kube-apiserver ([`ApiServer`]) with Istio's CRDs, and istiod (`pilot-discovery`)
//! on loopback. Both are built by scripts/install-k8s.sh and scripts/install-istio.sh. The
//! gateway role is `pilot-agent proxy router`, with the identity a pod would have mounted: a
//! ServiceAccount token and the mesh's root certificate. The agent gets its workload
//! certificate from istiod's CA and starts the project's upstream Envoy. Its CPU and memory are
//! the role's, agent and Envoy together, as the `istio-proxy` container's are in a pod. The
//! generated objects are applied before the agent starts. The role counts as started only once
//! Envoy has accepted all of them ([`crate::program::envoy::ready::wait_agent_acked`]).
//!
//! Upstream Envoy has none of Istio's own filters, so istiod runs with [`ISTIOD_ENV`]
//! (docs/istio.md lists what Envoy refuses otherwise). Every server binds loopback, except
//! istiod's port for the agents, which pods reach on the node's side of a veth. The Gateway
//! binds its servers to the hop's address, not to Istio's wildcard (`servers[].bind`).

mod agent;
mod control_plane;
pub mod objects;
pub mod sidecars;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

pub use crate::kube::ApiServer;
use crate::program::envoy::ready::{Expected, RouteConfigs};
use crate::LabError;
pub use agent::{AgentPorts, AgentRole, Workload};
pub use control_plane::{istiod_command, ControlPlane, IstiodAddrs, MeshOptions, PROBE_PATH};

/// The istio.io/istio pseudo-version scripts/install-istio.sh builds.
pub const VERSION: &str = "v0.0.0-20260827124520-eed52ebb66ad";
/// Istio's own namespace: istiod, the gateway, its Secrets and the routes.
pub const NAMESPACE: &str = "istio-system";
/// How a failure names an Envoy istiod configures: its agent runs it.
pub const BY_ISTIOD: crate::program::envoy::ready::ConfiguredBy =
    crate::program::envoy::ready::ConfiguredBy {
        process: "pilot-agent",
        control_plane: "istiod",
    };
/// Envoy's admin port in Istio's proxies, on the pod's loopback (a cluster's gateway and
/// sidecars are read through a port-forward to it).
pub const ADMIN_PORT: u16 = 15000;
/// The Kubernetes cluster id istiod and the proxy agree on.
pub const CLUSTER_ID: &str = "Kubernetes";
/// How the gateway identifies itself: its pod and its ServiceAccount.
pub const GATEWAY_POD: &str = "istio-ingressgateway-0";
pub const GATEWAY_SERVICE_ACCOUNT: &str = "istio-ingressgateway";
/// istiod's environment: upstream Envoy refuses clusters and listeners that carry Istio's
/// metadata exchange filters, and listeners that carry its ALPN filter.
pub const ISTIOD_ENV: &[(&str, &str)] = &[
    ("PILOT_ENABLE_ALPN_FILTER", "false"),
    ("PILOT_ENABLE_METADATA_EXCHANGE", "false"),
];

/// What a gateway's Envoy holds once istiod has sent it the gateway plan's objects: the one
/// rule the lab's gateway and a cluster's are awaited by. Its listener at `listen` (Istio's
/// `IP_PORT` name), a filter chain and a certificate per domain with TLS (else one chain),
/// `routes` routes, and the backend's outbound cluster of `backend_host` on the port of
/// `backends` with each of them as an endpoint.
pub fn gateway_expected(
    listen: SocketAddr,
    domains: usize,
    routes: usize,
    tls: bool,
    backend_host: &str,
    backends: Vec<SocketAddr>,
) -> Expected {
    let port = backends.first().map_or(0, SocketAddr::port);
    Expected {
        listener: crate::program::envoy::istio_shape::listener_name(listen),
        filter_chains: if tls { domains } else { 1 },
        route_configs: RouteConfigs::All,
        routes,
        certificates: if tls { domains } else { 0 },
        backend: (format!("outbound|{port}||{backend_host}"), backends),
    }
}

/// What went wrong in Istio's parts, beyond starting a process ([`LabError`] says that).
#[derive(Debug, thiserror::Error)]
pub enum IstioError {
    #[error("Istio's sidecars run in pods: use isolation: netns")]
    NeedsNetns,
    #[error("the Istio gateway has no admin port")]
    NoAdminPort,
    /// The mesh configuration could not be written (a bug: its types always serialise).
    #[error("istiod's mesh configuration: {0}")]
    MeshConfig(String),
    /// istiod ended: its status and the tail of its output.
    #[error("{0}")]
    IstiodExited(String),
    #[error("istiod's metrics at {at}: {reason}")]
    IstiodMetrics { at: SocketAddr, reason: String },
    #[error("the probe request to {url}: {source}")]
    Probe {
        url: String,
        source: Box<ureq::Error>,
    },
    #[error("the probe request through Istio's sidecars answered {0}")]
    ProbeStatus(u16),
    /// The probe passed, but a sidecar's own counters did not see it.
    #[error("the probe request answered 200, but {role}'s Envoy did not count it ({why})")]
    ProbeUncounted {
        role: meshbench_results::ChainRole,
        why: String,
    },
    #[error("{}: no VirtualService", .0.display())]
    NoVirtualService(PathBuf),
    #[error("{PROBE_PATH} is already routed")]
    AlreadyRouted,
    #[error("istiod's change (a route on {domain}) did not reach Envoy within {} s", .limit.as_secs())]
    RouteChangeNotServed { domain: String, limit: Duration },
    /// Istio's objects could not be written as YAML, or read back.
    #[error(transparent)]
    Yaml(#[from] serde_yaml_ng::Error),
    /// A document read back is not of the type asked for, or lacks its fields.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// A document read back is of another kind than the one asked for.
    #[error("a document of {found}, where {expected} was expected")]
    NotKind { expected: String, found: String },
}

/// Where scripts/install-istio.sh puts what it builds and extracts (`$ISTIO_CACHE` if set).
pub fn cache() -> PathBuf {
    std::env::var_os("ISTIO_CACHE").map_or_else(
        || PathBuf::from(format!("/var/cache/meshbench/istio/{VERSION}")),
        PathBuf::from,
    )
}

/// What the Istio gateway needs that is not installed here, as one error naming it all and
/// the scripts that install it; None when everything is there.
pub fn unavailable() -> Option<LabError> {
    let cache = cache();
    let own: Vec<PathBuf> = [
        "bin/pilot-discovery",
        "bin/pilot-agent",
        "crd-all.gen.yaml",
        "envoy_bootstrap_tmpl.json",
    ]
    .iter()
    .map(|f| cache.join(f))
    .collect();
    let missing = crate::kube::missing_beside(&own);
    (!missing.is_empty()).then(|| LabError::Missing {
        program: "istio".into(),
        hint: crate::kube::missing_hint(&own, &missing, "scripts/install-istio.sh"),
    })
}

/// `pilot-agent version -s`, or why it could not be read.
pub fn version() -> String {
    let agent = cache().join("bin/pilot-agent");
    let mut probe = Command::new(&agent);
    probe.args(["version", "-s"]);
    crate::process::output_within(probe, crate::process::VERSION_WITHIN)
        .ok()
        .flatten()
        .filter(|o| o.status.success())
        .map(|o| format!("istio {}", String::from_utf8_lossy(&o.stdout).trim()))
        .unwrap_or_else(|| format!("istio {VERSION} ({} did not answer)", agent.display()))
}

#[cfg(test)]
mod tests {
    /// The versions the lab looks for are those scripts/build-go.sh builds from deploy/go.
    #[test]
    fn the_versions_are_deploy_gos() {
        let go_mod = include_str!("../../../../deploy/go/go.mod");
        let required = |module: &str| {
            go_mod
                .lines()
                .map(str::split_whitespace)
                .find_map(|mut words| (words.next() == Some(module)).then(|| words.next()))
                .flatten()
                .unwrap_or_else(|| panic!("deploy/go/go.mod requires no {module}"))
        };
        assert_eq!(required("k8s.io/kubernetes"), crate::kube::K8S_VERSION);
        assert_eq!(required("istio.io/istio"), super::VERSION);
    }
}
