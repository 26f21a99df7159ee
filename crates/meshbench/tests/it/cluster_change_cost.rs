//! Issue 60 on the suite's node (common/cluster.rs: a kubelet with containerd, the Deployment
//! controller, kube-proxy) with Istio installed as common/istio_node.rs does it: the preset
//! examples/cluster-changes-istio.yaml runs as a user runs it, shortened. Its changed step adds
//! and removes a route of the gateway's VirtualServices every 2 s through the API server
//! (istiod pushing to the gateway's Envoy), issues the first domain's certificate again (its
//! Secret, pushed over SDS), then rolls the backend's Deployment; its still step
//! beside it changes nothing. Read from the cluster: every route change served (a probe through
//! a port-forward to the gateway's pod), the roll done (every replica new and ready, the
//! Deployment controller's own word), each change's errors; the objects are put back after the
//! changed step and everything is gone at the end.

use crate::changes::{errors_of, show};
use crate::cluster_experiment::{
    assert_gone, node_sets, start, wait_with_limit, IMAGE, RUN_WITHIN,
};
use crate::common;

use common::cluster::{self, TestCluster};
use common::istio_node::IstioOnNode;
use common::prometheus::{Prometheus, PrometheusOptions};
use meshbench_k8s::BlockingClient;

const PRESET: &str = "cluster-changes-istio.yaml";

#[test]
fn an_istio_gateway_on_the_node_serves_a_route_every_2_s_and_a_backend_roll_read_from_the_cluster()
{
    if let Some(why) = cluster::node_unavailable() {
        panic!("a real Kubernetes node cannot run here: {why}");
    }
    let dir = common::scratch_dir("cluster-changes");
    let c = TestCluster::with_node();
    let k = BlockingClient::from_kubeconfig(&c.kubeconfig).unwrap();
    let prom = Prometheus::start(&PrometheusOptions {
        kubelet_cadvisor: Some(c.kubelet_port.expect("the kubelet's port")),
        ..PrometheusOptions::default()
    });
    c.load_meshbench_image(IMAGE);
    let _istio = IstioOnNode::install(&c, &k, &dir);
    let store = dir.join("results.db");

    let mut sets = node_sets(&c, &prom, "changes");
    sets.extend([
        "duration_secs=16".to_string(),
        "gateway.domains=2".into(),
        "gateway.paths=2".into(),
        "load.rate_rps=[200]".into(),
        "load.connections=[4]".into(),
        "changes=[{kind: route, at_secs: [2, 4, 6, 8]}, {kind: certificate, at_secs: [7]}, {kind: backend, at_secs: [10]}]".into(),
    ]);
    let out = wait_with_limit(start(PRESET, &store, &sets), RUN_WITHIN);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{err}");
    let doc = common::export_json(&store);
    let steps = doc["steps"].as_array().unwrap();
    let variants: Vec<&str> = (steps.iter())
        .map(|s| s["variant"].as_str().unwrap())
        .collect();
    assert_eq!(variants, ["gateway", "gateway changes"], "{err}");
    for s in steps {
        assert_eq!(s["status"], "ok", "{}: {}", s["variant"], s["error"]);
    }
    let (still, changed) = (&steps[0], &steps[1]);
    assert_eq!(
        still["changes"]["changes"].as_array().map(Vec::len),
        Some(0),
        "{}",
        still["changes"]
    );
    assert_eq!(still["summary"]["errors"], 0, "{}", still["summary"]);
    let told_by = changed["changes"]["told_by"].as_str().unwrap();
    assert!(
        told_by.contains("istiod pushes") && told_by.contains("rolling update"),
        "{told_by}"
    );
    let changes = changed["changes"]["changes"].as_array().unwrap();
    let kinds: Vec<&str> = changes
        .iter()
        .map(|c| c["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["route", "route", "route", "certificate", "route", "backend"],
        "{}",
        changed["changes"]
    );
    for (i, change) in changes.iter().enumerate() {
        assert!(change.get("failed").is_none(), "{change}");
        let served = change["served_ms"].as_f64();
        assert!(served.is_some_and(|ms| ms > 0.0), "not served: {change}");
        let errors = errors_of(change);
        eprintln!(
            "change {i}: {} served in {:.0} ms, {} requests, {errors} errors {}",
            change["what"],
            served.unwrap(),
            change["requests"],
            change["errors"]
        );
        if kinds[i] == "route" || kinds[i] == "certificate" {
            assert!(change["probes"].as_u64().unwrap() > 0, "{change}");
            // A route or a Secret istiod pushes (the certificate over SDS) is served by the
            // gateway's Envoy without one error.
            assert_eq!(errors, 0, "{change}");
        }
    }
    // Every error of the changed step fell in a change's seconds.
    let in_changes: u64 = changes.iter().map(errors_of).sum();
    assert_eq!(
        changed["summary"]["errors"].as_u64(),
        Some(in_changes),
        "{}",
        changed["summary"]
    );
    // The objects were put back: the gateway's Envoy was ready for its routes again, and the
    // results say what each change cost.
    let shown = show(&store);
    assert!(
        shown.contains("route /get/3 added on every domain")
            && shown.contains("backend Deployment changes/backend rolled"),
        "{shown}"
    );
    assert_gone(&k, "changes", &store);
}
