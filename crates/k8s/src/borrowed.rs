//! Workloads a run changes but does not own: the cluster's Contour and its Envoy (a
//! Deployment, or a DaemonSet as Contour's own example deploys it), whose containers' limits a
//! `gateway.type: contour` run sweeps. The run owns nothing of them, so
//! each change is one container's whole `resources`, read as the API server holds it before
//! the first change (the journal keeps it, [`crate::undo::Undo::RestoreResources`]) and set
//! back whole at the end: a JSON patch that replaces the one field (after a test of the
//! container's name at that index), never a merge that would leave a field the run added.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use thiserror::Error;

use crate::blocking::{ApiError, BlockingClient};

/// The kinds of workload whose limits a run changes (as a journal spells them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum WorkloadKind {
    Deployment,
    /// One pod per node: a change of its template rolls every node's pod.
    DaemonSet,
}

impl WorkloadKind {
    /// The API path of the object `namespace/name` of this kind.
    pub fn path(self, namespace: &str, name: &str) -> String {
        match self {
            WorkloadKind::Deployment => {
                format!("/apis/apps/v1/namespaces/{namespace}/deployments/{name}")
            }
            WorkloadKind::DaemonSet => {
                format!("/apis/apps/v1/namespaces/{namespace}/daemonsets/{name}")
            }
        }
    }

    /// As the API spells the kind.
    pub fn name(self) -> &'static str {
        match self {
            WorkloadKind::Deployment => "Deployment",
            WorkloadKind::DaemonSet => "DaemonSet",
        }
    }

    /// As a sentence begins with it (`deployment ns/name: ...`).
    pub fn noun(self) -> &'static str {
        match self {
            WorkloadKind::Deployment => "deployment",
            WorkloadKind::DaemonSet => "daemonset",
        }
    }
}

/// One container of a workload the run does not own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Borrowed {
    pub namespace: String,
    pub kind: WorkloadKind,
    pub name: String,
    pub container: String,
}

impl std::fmt::Display for Borrowed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}/{} (container {})",
            self.kind.name(),
            self.namespace,
            self.name,
            self.container
        )
    }
}

/// Why a borrowed container's resources could not be read or set.
#[derive(Debug, Error)]
pub enum BorrowedError {
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error("{0}: no such {kind}", kind = .0.kind.name())]
    NoWorkload(Borrowed),
    #[error("{0}: the pod template has no such container")]
    NoContainer(Borrowed),
}

impl Borrowed {
    fn path(&self) -> String {
        self.kind.path(&self.namespace, &self.name)
    }

    /// The container's index in the pod template and its `resources` as the API server holds
    /// them (an empty object when it has none).
    fn read(&self, client: &BlockingClient) -> Result<(usize, Value), BorrowedError> {
        let what = format!("{self}");
        let object = client
            .get_raw(&self.path(), &what)?
            .ok_or_else(|| BorrowedError::NoWorkload(self.clone()))?;
        let containers = object["spec"]["template"]["spec"]["containers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        containers
            .iter()
            .position(|c| c["name"] == self.container.as_str())
            .map(|i| {
                let resources = containers[i]
                    .get("resources")
                    .cloned()
                    .unwrap_or_else(|| json!({}));
                (i, resources)
            })
            .ok_or_else(|| BorrowedError::NoContainer(self.clone()))
    }

    /// The container's `resources` now, whole.
    pub fn resources(&self, client: &BlockingClient) -> Result<Value, BorrowedError> {
        self.read(client).map(|(_, r)| r)
    }

    /// Sets the container's `resources` to exactly `resources` (a change of the pod template:
    /// a rollout, unless it is what is there).
    pub fn set_resources(
        &self,
        client: &BlockingClient,
        resources: &Value,
    ) -> Result<(), BorrowedError> {
        let (index, _) = self.read(client)?;
        client.json_patch(
            &self.path(),
            &format!("{self}"),
            &patch(index, &self.container, resources),
        )?;
        Ok(())
    }
}

/// The JSON patch that sets container `index`'s `resources`, if it is still `container`.
pub fn patch(index: usize, container: &str, resources: &Value) -> Value {
    let at = format!("/spec/template/spec/containers/{index}");
    json!([
        {"op": "test", "path": format!("{at}/name"), "value": container},
        {"op": "add", "path": format!("{at}/resources"), "value": resources},
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_patch_tests_the_container_and_replaces_its_resources_whole() {
        let p = patch(1, "envoy", &json!({}));
        assert_eq!(
            p,
            json!([
                {"op": "test", "path": "/spec/template/spec/containers/1/name", "value": "envoy"},
                {"op": "add", "path": "/spec/template/spec/containers/1/resources", "value": {}},
            ])
        );
        assert_eq!(
            WorkloadKind::Deployment.path("projectcontour", "envoy"),
            "/apis/apps/v1/namespaces/projectcontour/deployments/envoy"
        );
        assert_eq!(
            WorkloadKind::DaemonSet.path("projectcontour", "envoy"),
            "/apis/apps/v1/namespaces/projectcontour/daemonsets/envoy"
        );
        // A journal names the kind as the API does.
        assert_eq!(
            serde_json::to_value(WorkloadKind::DaemonSet).unwrap(),
            json!("DaemonSet")
        );
    }
}
