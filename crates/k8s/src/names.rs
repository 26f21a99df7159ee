//! The names and numbers that more than one place gives Kubernetes, each written once: the
//! field manager of every apply, the namespace an object lands in when it names none, the node
//! the lab's pods claim to run on, and the HTTP port of a service (the lab's and a cluster's
//! backend alike). A name here means one thing; a name used in one place stays beside its use.

/// The field manager of every server-side apply meshbench makes (the engine's objects, the
/// system under test, the lab's API server).
pub const MANAGER: &str = "meshbench";

/// The namespace of an object that names none, as Kubernetes' own default; also where the
/// lab's workloads and simulated services live.
pub const DEFAULT_NAMESPACE: &str = "default";

/// The node every pod the lab registers claims to run on (no kubelet runs there: the lab
/// writes each pod's status itself).
pub const NODE: &str = "meshbench-lab";

/// A service's HTTP port: the lab's services and the backend's port Istio captures on a
/// cluster. Named [`HTTP`] so that Istio reads it as HTTP.
pub const SERVICE_PORT: u16 = 8080;

/// The name of an HTTP port (Istio's protocol selection reads the `http` prefix).
pub const HTTP: &str = "http";

/// The label that ties an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// The label that says who keeps an EndpointSlice (no controller manager runs in the lab).
pub const ENDPOINT_SLICE_MANAGED_BY: (&str, &str) =
    ("endpointslice.kubernetes.io/managed-by", "meshbench");

/// The label that names a pod's app: on the system under test's pods (the backend's, the
/// gateway's) and on Istio's own (istiod's, ztunnel's).
pub const APP_LABEL: &str = "app";

/// The selector of the backend's pods (label [`APP_LABEL`] = `system::BACKEND`).
pub const BACKEND_PODS: &str = "app=backend";

/// The selector of the Istio gateway's pods (label [`APP_LABEL`] = `system::GATEWAY`).
pub const GATEWAY_PODS: &str = "app=gateway";

/// The selector of istiod's pods, as Istio labels them.
pub const ISTIOD_PODS: &str = "app=istiod";

/// The selector of ambient's ztunnel DaemonSet, as Istio labels it.
pub const ZTUNNEL_PODS: &str = "app=ztunnel";

/// How Istio names the waypoint's pods: its Deployment is named after its Gateway
/// (`system::WAYPOINT`).
pub const WAYPOINT_POD_PREFIX: &str = "waypoint-";

/// The waypoint's pods as a Prometheus label pattern ([`WAYPOINT_POD_PREFIX`], then anything).
pub const WAYPOINT_PODS: &str = "waypoint-.*";

/// The gateway's HTTPS port: its pods' and its Service's (Istio's listener `0.0.0.0_443`).
pub const GATEWAY_HTTPS_PORT: u16 = 443;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::system::{BACKEND, GATEWAY, WAYPOINT};

    #[test]
    fn selectors_and_patterns_spell_the_names_they_select() {
        assert_eq!(BACKEND_PODS, format!("{APP_LABEL}={BACKEND}"));
        assert_eq!(GATEWAY_PODS, format!("{APP_LABEL}={GATEWAY}"));
        assert_eq!(WAYPOINT_POD_PREFIX, format!("{WAYPOINT}-"));
        assert_eq!(WAYPOINT_PODS, format!("{WAYPOINT_POD_PREFIX}.*"));
    }
}
