//! Contour on the real test node (common/cluster.rs), deployed the way Contour's own example
//! manifests shape it (examples/render/contour-deployment.yaml of its module at v1.33.8), for
//! the tests of `gateway.type: contour` on a cluster (tests/it/cluster_contour.rs):
//!
//! - Contour's CRDs (scripts/install-contour.sh takes them from the same module) and the
//!   namespace `projectcontour`;
//! - Deployment `contour`: `contour serve`, one replica, container `contour`;
//! - Deployment `envoy`: an initContainer running `contour bootstrap` into an emptyDir, then the
//!   `envoy` container on that bootstrap (its admin a unix socket in another emptyDir, its stats
//!   and readiness on 8002 as Contour configures them), one replica; or, [`EnvoyAs::DaemonSet`],
//!   DaemonSet `envoy` with the same pod on every node, as Contour's own
//!   examples/contour/03-envoy.yaml runs it (rolled one node at a time);
//! - Service `envoy` (ClusterIP here: the node has no load balancer) with `http` 80 -> 8080 and
//!   `https` 443 -> 8443.
//!
//! The images are built here, without a registry: `localhost/meshbench-contour:1` holds the
//! `contour` binary scripts/install-contour.sh builds, `localhost/meshbench-envoy:1` the Envoy
//! scripts/install-envoy.sh installs, each with what `ldd` lists; both imported into the node's
//! containerd (`imagePullPolicy: Never`).
//!
//! Where this differs from Contour's manifests, and why: xDS is plain gRPC (`--insecure`, no
//! certgen Job: the test's node is one machine); Contour's pod uses the host's network and a
//! kubeconfig from a Secret, since the test's API server listens on loopback only (the node's
//! pods reach nothing else of this machine but the bridge's address, where Contour's xDS
//! listens) and so its Deployment is `Recreate` (two Contours cannot hold one host port) and
//! its readiness probe dials that address (on the second node the pod's IP is the other
//! bridge's);
//! Envoy has no shutdown-manager sidecar (nothing drains here) and a grace period of 2 s; one
//! replica each and no anti-affinity (one node). The contract: [`ContourOnNode::install`]
//! returns once both rollouts are done (every Envoy pod Ready: Contour serves it). The images
//! go to every node's containerd, so a DaemonSet's pods start on each.

use std::path::Path;
use std::time::Duration;

use meshbench_engine::Stop;
use meshbench_k8s::borrowed::WorkloadKind;
use meshbench_k8s::BlockingClient;
use serde_json::{json, Value};

use super::cluster::{TestCluster, GATEWAY};

/// Contour's namespace, as its manifests name it.
pub const CONTOUR_NS: &str = "projectcontour";
pub const CONTOUR_IMAGE: &str = "localhost/meshbench-contour:1";
pub const ENVOY_IMAGE: &str = "localhost/meshbench-envoy:1";
/// The uid Contour's manifests run both as.
const NOBODY: i64 = 65534;
/// How long the first rollouts may take.
const READY_WITHIN: Duration = Duration::from_secs(120);

/// Contour deployed on the node.
pub struct ContourOnNode {
    /// Where Contour serves xDS (the bridge's address: Envoy's pods reach it there).
    pub xds_port: u16,
}

/// How Envoy is deployed: as Contour's Deployment manifest has it, or as its DaemonSet one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnvoyAs {
    Deployment,
    DaemonSet,
}

impl EnvoyAs {
    pub fn kind(self) -> WorkloadKind {
        match self {
            EnvoyAs::Deployment => WorkloadKind::Deployment,
            EnvoyAs::DaemonSet => WorkloadKind::DaemonSet,
        }
    }
}

impl ContourOnNode {
    /// Everything the module's header lists, on the node `c`; scratch files under `dir`.
    pub fn install(c: &TestCluster, k: &BlockingClient, dir: &Path) -> ContourOnNode {
        ContourOnNode::install_as(c, k, dir, EnvoyAs::Deployment)
    }

    /// The same, Envoy deployed `envoy_as`.
    pub fn install_as(
        c: &TestCluster,
        k: &BlockingClient,
        dir: &Path,
        envoy_as: EnvoyAs,
    ) -> ContourOnNode {
        if let Some(e) = meshbench_lab::contour::unavailable() {
            panic!("{e}");
        }
        let contour_bin = meshbench_lab::contour::binary();
        let root = dir.join("contour-rootfs");
        super::copy_with_libraries(&root, &contour_bin, "/bin/contour");
        c.load_image(&root, CONTOUR_IMAGE, "/bin/contour", "65534:65534", &[]);
        let root = dir.join("envoy-rootfs");
        let envoy = std::fs::canonicalize(super::envoy_binary()).unwrap();
        super::copy_with_libraries(&root, &envoy, "/usr/local/bin/envoy");
        std::fs::create_dir_all(root.join("tmp")).unwrap();
        c.load_image(
            &root,
            ENVOY_IMAGE,
            "/usr/local/bin/envoy",
            "65534:65534",
            &[],
        );

        let crds = std::fs::read_to_string(meshbench_lab::contour::cache().join("crds.yaml"))
            .expect("run scripts/install-contour.sh");
        k.apply_all(meshbench_k8s::blocking::documents(&crds).unwrap())
            .unwrap();
        let xds_port = std::net::TcpListener::bind((GATEWAY, 0))
            .expect("the bridge's address is this machine's")
            .local_addr()
            .unwrap()
            .port();
        let kubeconfig = std::fs::read_to_string(&c.kubeconfig).unwrap();
        for object in objects(xds_port, &kubeconfig, envoy_as) {
            k.apply(&object).unwrap();
        }
        let stop = Stop::new();
        for (kind, name) in [
            (WorkloadKind::Deployment, "contour"),
            (envoy_as.kind(), "envoy"),
        ] {
            k.wait_rollout_of(kind, CONTOUR_NS, name, READY_WITHIN, &stop)
                .unwrap_or_else(|e| panic!("{e}\n{}", logs(k)));
        }
        ContourOnNode { xds_port }
    }
}

/// The logs of every pod in [`CONTOUR_NS`], for a failure's message.
pub fn logs(k: &BlockingClient) -> String {
    k.list::<k8s_openapi::api::core::v1::Pod>(CONTOUR_NS, "")
        .unwrap_or_default()
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .map(|pod| {
            format!(
                "{pod}:\n{}",
                super::cluster::container_log(CONTOUR_NS, &pod)
            )
        })
        .collect()
}

/// The containers' `resources` of Deployment `projectcontour/name`, as the API server holds
/// them, by container name.
pub fn resources(k: &BlockingClient, name: &str) -> Vec<(String, Value)> {
    resources_of(k, WorkloadKind::Deployment, name)
}

/// The containers' `resources` of the workload `projectcontour/name` of `kind`, as the API
/// server holds them, by container name.
pub fn resources_of(k: &BlockingClient, kind: WorkloadKind, name: &str) -> Vec<(String, Value)> {
    let d = k
        .get_raw(&kind.path(CONTOUR_NS, name), name)
        .unwrap()
        .unwrap_or_else(|| panic!("no {} {CONTOUR_NS}/{name}", kind.name()));
    d["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                c.get("resources").cloned().unwrap_or(json!({})),
            )
        })
        .collect()
}

/// Contour's objects on the node, in the order they are applied.
fn objects(xds_port: u16, kubeconfig: &str, envoy_as: EnvoyAs) -> Vec<Value> {
    let ns = CONTOUR_NS;
    let free = || super::free_addr().port();
    let env_namespace = json!({"name": "CONTOUR_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}});
    vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "contour", "namespace": ns}}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "envoy", "namespace": ns}}),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "contour-kubeconfig", "namespace": ns},
               "stringData": {"kubeconfig": kubeconfig}}),
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "contour", "namespace": ns, "labels": {"app": "contour"}},
            "spec": {
                "replicas": 1,
                "strategy": {"type": "Recreate"},
                "selector": {"matchLabels": {"app": "contour"}},
                "template": {
                    "metadata": {"labels": {"app": "contour"}},
                    "spec": {
                        "serviceAccountName": "contour",
                        "hostNetwork": true,
                        "terminationGracePeriodSeconds": 2,
                        "securityContext": {"runAsNonRoot": true, "runAsUser": NOBODY, "runAsGroup": NOBODY},
                        "containers": [{
                            "name": "contour",
                            "image": CONTOUR_IMAGE,
                            "imagePullPolicy": "Never",
                            "command": ["/bin/contour"],
                            "args": [
                                "serve",
                                "--kubeconfig=/kube/kubeconfig",
                                "--insecure",
                                "--disable-leader-election",
                                format!("--xds-address={GATEWAY}"),
                                format!("--xds-port={xds_port}"),
                                "--http-address=127.0.0.1", format!("--http-port={}", free()),
                                "--health-address=127.0.0.1", format!("--health-port={}", free()),
                                "--debug-http-address=127.0.0.1", format!("--debug-http-port={}", free()),
                            ],
                            "env": [env_namespace.clone()],
                            "ports": [{"name": "xds", "containerPort": xds_port}],
                            "readinessProbe": {"tcpSocket": {"host": GATEWAY, "port": xds_port}, "periodSeconds": 1},
                            "volumeMounts": [{"name": "kubeconfig", "mountPath": "/kube", "readOnly": true}],
                        }],
                        "volumes": [{"name": "kubeconfig", "secret": {"secretName": "contour-kubeconfig", "defaultMode": 0o444}}],
                    },
                },
            },
        }),
        envoy_workload(
            envoy_as,
            json!({
                "metadata": {"labels": {"app": "envoy"}},
                "spec": {
                    "serviceAccountName": "envoy",
                    "automountServiceAccountToken": false,
                    "terminationGracePeriodSeconds": 2,
                    "securityContext": {"runAsNonRoot": true, "runAsUser": NOBODY, "runAsGroup": NOBODY},
                    "initContainers": [{
                        "name": "envoy-initconfig",
                        "image": CONTOUR_IMAGE,
                        "imagePullPolicy": "Never",
                        "command": ["/bin/contour"],
                        "args": [
                            "bootstrap", "/config/envoy.json",
                            format!("--xds-address={GATEWAY}"),
                            format!("--xds-port={xds_port}"),
                            "--xds-resource-version=v3",
                            "--resources-dir=/config/resources",
                            "--admin-address=/admin/admin.sock",
                        ],
                        "env": [env_namespace.clone()],
                        "volumeMounts": [{"name": "envoy-config", "mountPath": "/config"}],
                    }],
                    "containers": [{
                        "name": "envoy",
                        "image": ENVOY_IMAGE,
                        "imagePullPolicy": "Never",
                        "command": ["/usr/local/bin/envoy"],
                        "args": [
                            "-c", "/config/envoy.json",
                            "--service-cluster", "$(CONTOUR_NAMESPACE)",
                            "--service-node", "$(ENVOY_POD_NAME)",
                            "--log-level", "info",
                        ],
                        "env": [
                            env_namespace,
                            {"name": "ENVOY_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                        ],
                        "ports": [
                            {"name": "http", "containerPort": 8080},
                            {"name": "https", "containerPort": 8443},
                            {"name": "metrics", "containerPort": 8002},
                        ],
                        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8002}, "periodSeconds": 1},
                        "volumeMounts": [
                            {"name": "envoy-config", "mountPath": "/config", "readOnly": true},
                            {"name": "envoy-admin", "mountPath": "/admin"},
                        ],
                    }],
                    "volumes": [
                        {"name": "envoy-admin", "emptyDir": {}},
                        {"name": "envoy-config", "emptyDir": {}},
                    ],
                },
            }),
        ),
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "envoy", "namespace": ns},
            "spec": {
                "selector": {"app": "envoy"},
                "ports": [
                    {"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"},
                    {"name": "https", "port": 443, "targetPort": 8443, "protocol": "TCP"},
                ],
            },
        }),
    ]
}

/// Envoy's workload around its pod `template`: a Deployment of one replica, or a DaemonSet
/// (Contour's example rolls it 10 % of the nodes at a time: one node here).
fn envoy_workload(envoy_as: EnvoyAs, template: Value) -> Value {
    let selector = json!({"matchLabels": {"app": "envoy"}});
    let metadata = json!({"name": "envoy", "namespace": CONTOUR_NS, "labels": {"app": "envoy"}});
    match envoy_as {
        EnvoyAs::Deployment => json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": metadata,
            "spec": {
                "replicas": 1,
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "10%"}},
                "selector": selector,
                "template": template,
            },
        }),
        EnvoyAs::DaemonSet => json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": metadata,
            "spec": {
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%"}},
                "selector": selector,
                "template": template,
            },
        }),
    }
}

/// Field by field: every container of `before` has the `resources` it had (each of
/// `requests` and `limits`, and any other field, with the same keys and values) in `now`;
/// both as (workload, container, resources).
pub fn assert_resources_put_back(
    before: &[(String, String, Value)],
    now: &[(String, String, Value)],
) {
    assert_eq!(now.len(), before.len(), "{now:?} vs {before:?}");
    for ((w, c, was), (w2, c2, is)) in before.iter().zip(now) {
        assert_eq!((w, c), (w2, c2));
        let fields = |v: &Value| -> Vec<String> {
            v.as_object()
                .map(|o| o.keys().cloned().collect())
                .unwrap_or_default()
        };
        assert_eq!(fields(was), fields(is), "{w}/{c}: {was} vs {is}");
        for field in fields(was) {
            assert_eq!(
                was[&field], is[&field],
                "{w}/{c}: resources.{field}: {was} vs {is}"
            );
        }
    }
}
