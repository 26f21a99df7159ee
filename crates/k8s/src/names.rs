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
