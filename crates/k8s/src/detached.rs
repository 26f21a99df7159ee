//! The objects of a run that outlives the terminal (`meshbench experiment FILE --detach`): the
//! coordinator itself runs in the cluster, as a Job, and the workstation only starts it, follows
//! it, stops it and brings its store home, each through the API server (a port-forward to the
//! coordinator's pod).
//!
//! A run deletes its own namespace at its end (that is what makes its put-back total), so the
//! coordinator cannot live there: it lives in a namespace of its own, [`coordinator_namespace`]
//! of the run's, which stays until its store has been fetched or kept for its time. Its
//! ServiceAccount is bound to the ClusterRole users bind for a cluster run
//! (deploy/cluster-experiment-rbac.yaml, [`CLUSTER_ROLE`]) by a ClusterRoleBinding (and, where
//! Istio is installed, to the Role in `istio-system`), each owned by that namespace, so that
//! deleting the namespace deletes them too (the garbage collector follows owners across scopes
//! from a cluster-scoped owner).
//!
//! The pod's API credentials are declared here as the ServiceAccount admission plugin would
//! add them (a projected token, the cluster's root CA, the namespace), so that the coordinator
//! finds them where in-cluster configuration looks, on any cluster.
//!
//! Pure: the objects as JSON; applying and waiting is the caller's.

use serde_json::{json, Value};

use crate::names::MANAGER;

/// The ClusterRole the coordinator's ServiceAccount is bound to: the one a user binds to run a
/// cluster experiment from a workstation.
pub const CLUSTER_ROLE: &str = "meshbench-cluster-experiment";
/// The Role in Istio's namespace the same file defines.
pub const ISTIO_ROLE: &str = "meshbench-cluster-experiment";
/// Istio's namespace, where [`ISTIO_ROLE`] is.
pub const ISTIO_NAMESPACE: &str = "istio-system";
/// The Job, its ServiceAccount and its ConfigMap are all named so, in their namespace.
pub const NAME: &str = "meshbench-coordinator";
/// Where the coordinator answers the workstation (its pod's loopback: reached by port-forward
/// only, never by another pod).
pub const CONTROL_PORT: u16 = 7701;
/// The ConfigMap's keys: the experiment file as given, and the `--set`s, one per line.
pub const FILE_KEY: &str = "experiment.yaml";
pub const SETS_KEY: &str = "sets";
/// Where the ConfigMap is mounted in the coordinator's pod.
pub const CONFIG_DIR: &str = "/etc/meshbench";
/// The coordinator's volume: its store, the run's journal and its watcher's log.
pub const DATA_DIR: &str = "/var/lib/meshbench";
/// The label that names the run's namespace on the coordinator's.
pub const RUN_NAMESPACE_LABEL: &str = "meshbench.dev/run-namespace";
/// Kubernetes' limit on a namespace's name.
const NAME_MAX: usize = 63;
/// What is added to the run's namespace to name the coordinator's.
const SUFFIX: &str = "-coordinator";
/// A stop asks the coordinator to put everything back; the pod's own deletion gives it this
/// long (SIGTERM, then SIGKILL), as long as a run's put-back is allowed.
const TERMINATION_GRACE_SECS: i64 = 600;

/// The namespace of the coordinator of the run in `run_namespace`; None when the name would be
/// too long for Kubernetes.
pub fn coordinator_namespace(run_namespace: &str) -> Option<String> {
    (run_namespace.len() + SUFFIX.len() <= NAME_MAX).then(|| format!("{run_namespace}{SUFFIX}"))
}

/// What a detached run is made of.
#[derive(Debug, Clone)]
pub struct Detached {
    /// The run's namespace (the file's `cluster.namespace`).
    pub run_namespace: String,
    /// The coordinator's ([`coordinator_namespace`]).
    pub namespace: String,
    /// meshbench's image (the file's `cluster.image`) and its pull policy.
    pub image: String,
    pub image_pull_policy: Option<String>,
    /// The experiment file's text, and the `--set`s the run was started with.
    pub file: String,
    pub sets: Vec<String>,
    /// How long a finished run's store waits to be fetched before the coordinator deletes its
    /// namespace itself.
    pub keep_secs: u64,
}

impl Detached {
    /// The coordinator's namespace, labelled with the run's.
    pub fn namespace_object(&self) -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": self.namespace,
                "labels": {
                    "app.kubernetes.io/managed-by": MANAGER,
                    RUN_NAMESPACE_LABEL: self.run_namespace,
                }
            }
        })
    }

    /// Everything else, each owned by the namespace (its `uid`, as the API server gave it):
    /// the ServiceAccount and its bindings, the ConfigMap, the Job. `istio` adds the binding in
    /// Istio's namespace.
    pub fn objects(&self, namespace_uid: &str, istio: bool) -> Vec<Value> {
        let owner = json!([{
            "apiVersion": "v1",
            "kind": "Namespace",
            "name": self.namespace,
            "uid": namespace_uid,
        }]);
        let labels = json!({
            "app.kubernetes.io/managed-by": MANAGER,
            "app.kubernetes.io/name": NAME,
        });
        let subject = json!([{
            "kind": "ServiceAccount",
            "name": NAME,
            "namespace": self.namespace,
        }]);
        let mut out = vec![
            json!({
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": NAME, "namespace": self.namespace, "labels": labels},
                "automountServiceAccountToken": false,
            }),
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": self.namespace, "labels": labels, "ownerReferences": owner},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": CLUSTER_ROLE},
                "subjects": subject,
            }),
        ];
        if istio {
            out.push(json!({
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": self.namespace, "namespace": ISTIO_NAMESPACE, "labels": labels, "ownerReferences": owner},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ISTIO_ROLE},
                "subjects": subject,
            }));
        }
        out.push(json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": NAME, "namespace": self.namespace, "labels": labels},
            "data": {FILE_KEY: self.file, SETS_KEY: self.sets.join("\n")},
        }));
        out.push(self.job(&labels));
        out
    }

    /// One pod, restarted in place when its container fails (its volume, and so the journal,
    /// survive: the new container puts the run back and keeps the store), never run twice.
    fn job(&self, labels: &Value) -> Value {
        let mut container = json!({
            "name": "coordinator",
            "image": self.image,
            "args": ["k8s", "coordinator", "--keep-secs", self.keep_secs.to_string()],
            "env": [
                {"name": "HOME", "value": DATA_DIR},
                {"name": "TMPDIR", "value": DATA_DIR},
            ],
            "volumeMounts": [
                {"name": "experiment", "mountPath": CONFIG_DIR, "readOnly": true},
                {"name": "data", "mountPath": DATA_DIR},
                {"name": "api", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true},
            ],
            "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true},
        });
        if let Some(policy) = &self.image_pull_policy {
            container["imagePullPolicy"] = json!(policy);
        }
        json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": NAME, "namespace": self.namespace, "labels": labels},
            "spec": {
                "backoffLimit": 0,
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": NAME,
                        "automountServiceAccountToken": false,
                        "restartPolicy": "OnFailure",
                        "terminationGracePeriodSeconds": TERMINATION_GRACE_SECS,
                        "containers": [container],
                        "volumes": [
                            {"name": "experiment", "configMap": {"name": NAME}},
                            {"name": "data", "emptyDir": {}},
                            {"name": "api", "projected": {"sources": [
                                {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
                                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
                            ]}},
                        ],
                    }
                }
            }
        })
    }
}

/// The label selector of the coordinator's pod.
pub fn pod_selector() -> String {
    format!("app.kubernetes.io/name={NAME}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn detached() -> Detached {
        Detached {
            run_namespace: "run".into(),
            namespace: coordinator_namespace("run").unwrap(),
            image: "img:1".into(),
            image_pull_policy: Some("Never".into()),
            file: "name: x\n".into(),
            sets: vec!["duration_secs=3".into(), "load.rate_rps=[1]".into()],
            keep_secs: 60,
        }
    }

    #[test]
    fn a_long_run_namespace_has_no_coordinator_namespace() {
        assert_eq!(
            coordinator_namespace("run").as_deref(),
            Some("run-coordinator")
        );
        assert_eq!(coordinator_namespace(&"n".repeat(52)), None);
        assert!(coordinator_namespace(&"n".repeat(51)).is_some());
    }

    #[test]
    fn every_object_outside_the_namespace_is_owned_by_it() {
        let d = detached();
        let objects = d.objects("uid-1", true);
        let kinds: Vec<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
        assert_eq!(
            kinds,
            [
                "ServiceAccount",
                "ClusterRoleBinding",
                "RoleBinding",
                "ConfigMap",
                "Job"
            ]
        );
        for o in &objects {
            let ns = o["metadata"]["namespace"].as_str();
            if ns != Some(d.namespace.as_str()) {
                assert_eq!(o["metadata"]["ownerReferences"][0]["uid"], "uid-1", "{o}");
            }
        }
        let cm = &objects[3];
        assert_eq!(cm["data"][SETS_KEY], "duration_secs=3\nload.rate_rps=[1]");
        let pod = &objects[4]["spec"]["template"]["spec"];
        assert_eq!(pod["serviceAccountName"], NAME);
        assert_eq!(pod["containers"][0]["imagePullPolicy"], "Never");
        assert_eq!(d.objects("uid-1", false).len(), 4);
    }
}
