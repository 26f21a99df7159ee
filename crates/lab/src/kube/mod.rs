//! The lab's stand-in for a Kubernetes cluster, which the control planes it runs read: the
//! smallest API server ([`api_server`]: etcd and kube-apiserver on loopback, from the binaries
//! scripts/install-k8s.sh builds, no node) and the typed objects of the workloads and
//! certificates a cluster would hold for them ([`workloads`]). istiod ([`crate::istio`]) and
//! Contour ([`crate::contour`]) both run against it.

pub mod api_server;
pub mod workloads;

use std::path::PathBuf;

pub use api_server::ApiServer;

/// The Kubernetes release scripts/install-k8s.sh builds.
pub const K8S_VERSION: &str = "v1.36.1";

/// Where scripts/install-k8s.sh puts the Kubernetes binaries (`$K8S_CACHE/bin` if set).
pub fn k8s_bin() -> PathBuf {
    std::env::var_os("K8S_CACHE")
        .map_or_else(
            || PathBuf::from(format!("/var/cache/meshbench/k8s/{K8S_VERSION}")),
            PathBuf::from,
        )
        .join("bin")
}
