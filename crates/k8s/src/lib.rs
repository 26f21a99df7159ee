//! Kubernetes as the engine of many agents: `render` turns a plan into the objects of one run
//! (a Secret with the token, a ConfigMap with the experiment, a headless Service, an Indexed
//! Job of agents that dial the coordinator), pure; `cluster` applies them with server-side
//! apply, waits until every agent pod is ready (never forever: the error names each pod that
//! is not, and why), and deletes them. The coordinator itself is the runner's, in the process
//! that called `meshbench k8s run`.
//!
//! This crate is also the project's one Kubernetes client (kube-rs): `blocking` is the same
//! client behind a small synchronous façade, for the lab's own API server (`gateway.type:
//! istio`); `forward` reaches a pod's port (its loopback included) at a local address, as
//! `kubectl port-forward` does, for synchronous callers too. `k8s_openapi` is re-exported so
//! that its callers build typed objects with the one Kubernetes API version this crate is
//! built for; `objects` types the custom resources meshbench writes (Istio's, the Gateway
//! API's, Contour's) the same way, and `names` holds the names given in more than one place.
//! `borrowed` reads and sets a container's `resources` in a workload a run does not own (the
//! cluster's Contour), which `undo` puts back. `detached` renders a run whose coordinator
//! itself runs in the cluster (`--detach`).

pub mod blocking;
pub mod borrowed;
pub mod cluster;
pub mod detached;
pub mod forward;
pub mod names;
pub mod objects;
pub mod render;
pub mod rollout;
pub mod system;
pub mod undo;

pub use blocking::{ApiError, BlockingClient};
pub use cluster::{AgentPod, Cluster, ClusterError, ConfigError};
pub use forward::{Forward, StreamError};
pub use k8s_openapi;
pub use render::{AgentsReach, AntiAffinity, DistributedRun, DistributedRunError, Objects};
