//! Kubernetes as the engine of many agents: `render` turns a plan into the objects of one run
//! (a Secret with the token, a ConfigMap with the experiment, a headless Service, an Indexed
//! Job of agents that dial the coordinator), pure; `cluster` applies them with server-side
//! apply, waits until every agent pod is ready (never forever: the error names each pod that
//! is not, and why), and deletes them. The coordinator itself is the runner's, in the process
//! that called `meshbench k8s run`.

pub mod cluster;
pub mod render;

pub use cluster::{AgentPod, Cluster, ClusterError};
pub use render::{AntiAffinity, Objects, Plan, PlanError};
