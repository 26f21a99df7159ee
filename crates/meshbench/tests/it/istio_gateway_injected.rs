//! An Istio ingress gateway as Istio's own `gateway` helm chart deploys one, on the real test
//! node (common/cluster.rs) with Istio installed by common/istio_node.rs: a Deployment whose
//! pod asks istiod's webhook for the `gateway` template (label `sidecar.istio.io/inject:
//! "true"`, annotation `inject.istio.io/templates: gateway`) and holds a container
//! `istio-proxy` with `image: auto`, which the template fills in (`imagePullPolicy: Never` as
//! the chart's value of that name sets it: the image is in no registry).
//!
//! Checked: the pod's `istio-proxy` is the gateway's (the image built here, `pilot-agent proxy
//! router`, no `istio-init`: a gateway captures nothing), the pod becomes Ready (its readiness
//! is pilot-agent's, Envoy's configuration from istiod included), and its Envoy took istiod's
//! clusters and listeners (its Prometheus port 15090, read across the bridge).
//!
//! Where a kubelet cannot run, the test fails with `node_unavailable()`'s reason.

use crate::common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::cluster::{self, TestCluster};
use common::istio_node::{http_get, IstioOnNode};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use meshbench_k8s::BlockingClient;
use serde_json::json;

const NS: &str = "ingress";
/// How long the gateway's pod may take to be Ready: the template's readiness probe runs every
/// 15 s (`global.proxy.readinessPeriodSeconds`, which no annotation overrides).
const READY_WITHIN: Duration = Duration::from_secs(60);

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// An Envoy's Prometheus text, read from its port 15090 at `ip` (across the bridge).
fn envoy_prometheus(ip: &str) -> String {
    let addr: SocketAddr = format!("{ip}:15090").parse().unwrap();
    http_get(addr, "/stats/prometheus")
        .map(|(_, body)| body)
        .unwrap_or_default()
}

/// The value of the series `metric` without labels (`name{} value` or `name value`) in
/// Prometheus text; 0 when it is not there.
fn unlabelled(text: &str, metric: &str) -> f64 {
    text.lines()
        .find_map(|l| {
            let rest = l.strip_prefix(metric)?;
            let value = rest
                .strip_prefix("{} ")
                .or_else(|| rest.strip_prefix(' '))?;
            value.parse().ok()
        })
        .unwrap_or(0.0)
}

#[test]
fn istiod_injects_the_gateway_template_into_a_deployment_on_the_node_and_its_envoy_is_ready() {
    if let Some(why) = cluster::node_unavailable() {
        panic!("a real Kubernetes node cannot run here: {why}");
    }
    let began = Instant::now();
    let dir = common::scratch_dir("istio-gateway-injected");
    let c = TestCluster::with_node();
    let rt = rt();
    let client = c.client(&rt);
    let k = BlockingClient::from_kubeconfig(&c.kubeconfig).unwrap();
    let istio = IstioOnNode::install(&c, &k, &dir);

    k.apply(&json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": NS, "labels": {"istio-injection": "enabled"}}
    }))
    .unwrap();
    k.apply(&json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "gateway", "namespace": NS}}))
        .unwrap();
    istio.wait_root_in(&k, NS);
    // As Istio's `gateway` chart renders its Deployment (the parts injection reads).
    k.apply(&json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "gateway", "namespace": NS,
                     "labels": {"app": "gateway", "istio": "meshbench-gateway"}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "gateway", "istio": "meshbench-gateway"}},
            "template": {
                "metadata": {
                    "labels": {"app": "gateway", "istio": "meshbench-gateway",
                               "sidecar.istio.io/inject": "true"},
                    "annotations": {"inject.istio.io/templates": "gateway"}
                },
                "spec": {
                    "serviceAccountName": "gateway",
                    "containers": [{
                        "name": "istio-proxy", "image": "auto",
                        // The chart's `imagePullPolicy` value: an `auto` image is pulled
                        // `Always` by default, and this image is in no registry.
                        "imagePullPolicy": "Never",
                        // The chart's default.
                        "securityContext": {
                            "capabilities": {"drop": ["ALL"]},
                            "allowPrivilegeEscalation": false,
                            "privileged": false,
                            "readOnlyRootFilesystem": true,
                            "runAsNonRoot": true
                        }
                    }]
                }
            }
        }
    }))
    .unwrap();

    // The ReplicaSet's pod, as the API server stored it after the webhook.
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let deadline = Instant::now() + Duration::from_secs(30);
    let pod = loop {
        let listed = rt
            .block_on(pods.list(&ListParams::default().labels("app=gateway")))
            .unwrap();
        if let Some(pod) = listed.items.into_iter().next() {
            break pod;
        }
        assert!(
            Instant::now() < deadline,
            "no gateway pod: {}",
            cluster::log_tail(&c.logs.join("kube-controller-manager.log"), 10)
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    let name = pod.metadata.name.clone().unwrap();
    let spec = pod.spec.clone().unwrap();
    assert!(
        spec.init_containers.as_ref().is_none_or(|i| i.is_empty()),
        "a gateway has no istio-init: {spec:?}"
    );
    let [proxy] = spec.containers.as_slice() else {
        panic!("one container expected: {spec:?}");
    };
    assert_eq!(proxy.name, "istio-proxy");
    assert_eq!(proxy.image.as_deref(), Some(istio.proxy_image), "{proxy:?}");
    assert_eq!(
        proxy.args.as_deref().unwrap_or_default()[..2],
        ["proxy", "router"],
        "{proxy:?}"
    );
    // istiod's record of what it injected: the proxy alone.
    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    let status: serde_json::Value = annotations
        .get("sidecar.istio.io/status")
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_else(|| panic!("no injection status: {annotations:?}"));
    assert_eq!(
        (&status["containers"], &status["initContainers"]),
        (&json!(["istio-proxy"]), &json!(null)),
        "{status}"
    );
    eprintln!(
        "the gateway's istio-proxy as injected: {:?} {:?}",
        proxy.image,
        proxy.args.as_deref().unwrap_or_default()
    );

    let ready = c.wait_pod_ready(&rt, &client, NS, &name, READY_WITHIN);
    let ip = ready.status.and_then(|s| s.pod_ip).unwrap();
    let text = envoy_prometheus(&ip);
    let (cds, lds, clusters) = (
        unlabelled(&text, "envoy_cluster_manager_cds_update_success"),
        unlabelled(&text, "envoy_listener_manager_lds_update_success"),
        unlabelled(&text, "envoy_cluster_manager_active_clusters"),
    );
    assert!(
        cds >= 1.0 && lds >= 1.0 && clusters >= 1.0,
        "the gateway's Envoy: cds {cds} lds {lds} clusters {clusters}\n{}\n{}",
        text.lines()
            .filter(|l| l.contains("_manager_"))
            .collect::<Vec<_>>()
            .join("\n"),
        cluster::container_log(NS, &name)
    );
    eprintln!(
        "gateway pod {name} Ready in {:.0} s from the start: {clusters} clusters from istiod",
        began.elapsed().as_secs_f64()
    );

    drop(istio);
    c.stop();
    let _ = std::fs::remove_dir_all(dir);
}
