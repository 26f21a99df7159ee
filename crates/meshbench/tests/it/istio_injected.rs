//! Issue 34, part 2: Istio's sidecars as Istio injects them into pods, on the real test node
//! (common/cluster.rs: kube-apiserver, kubelet, containerd, kube-proxy, a bridge network).
//!
//! - Istio as common/istio_node.rs installs it: istiod (`pilot-discovery`) on this machine
//!   against the node's API server, serving the pods' agents on the bridge's address and its
//!   injection webhook on loopback; the injector's configuration is Istio's own chart
//!   templates and values; the image `istio-proxy` is built here, no registry.
//! - In a namespace labelled `istio-injection: enabled`, the API server has istiod inject a
//!   backend pod (`meshbench backend`) and a client pod (`meshbench run` against the Service's
//!   address). Each gets `istio-init`, which writes Istio's capture in the pod, and
//!   `istio-proxy`, which istiod configures; the kubelet on Kubernetes 1.36 runs it as a native
//!   sidecar.
//! - Checked: the injection as Istio writes it, `istio-init` ended 0, both Envoys counted the
//!   client's requests (each one's Prometheus port 15090, which the capture leaves alone), the
//!   client ended 0, and each `istio-proxy` container's CPU and memory read through Prometheus
//!   from the kubelet's cAdvisor.
//!
//! Where a kubelet cannot run, the test fails with `node_unavailable()`'s reason.

use crate::common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::cluster::{self, TestCluster};
use common::istio_node::{http_get, IstioOnNode};
use common::prometheus::{Prometheus, PrometheusOptions};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, DeleteParams, PostParams};
use kube::Client;
use meshbench_k8s::BlockingClient;
use serde_json::{json, Value};

const NS: &str = "mesh";
const MESHBENCH_IMAGE: &str = "localhost/meshbench:test";
/// The client's load: 200 requests a second over 4 connections for 25 s.
const RATE: u64 = 200;
const SECS: u64 = 25;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Creates `pod` until the API server answers it injected (the webhook's configuration takes
/// a moment to reach the API server); returns the pod as stored.
fn create_injected(rt: &tokio::runtime::Runtime, client: &Client, pod: &Value) -> Pod {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let name = pod["metadata"]["name"].as_str().unwrap().to_string();
    let object: Pod = serde_json::from_value(pod.clone()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let created = rt
            .block_on(pods.create(&PostParams::default(), &object))
            .unwrap_or_else(|e| panic!("creating pod {name}: {e}"));
        let injected = created.spec.as_ref().is_some_and(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
                .any(|c| c.name == "istio-proxy")
        });
        if injected {
            return created;
        }
        assert!(
            Instant::now() < deadline,
            "pod {name} is not injected: {created:?}"
        );
        rt.block_on(pods.delete(&name, &DeleteParams::default().grace_period(0)))
            .unwrap();
        while rt.block_on(pods.get_opt(&name)).unwrap().is_some() {
            std::thread::sleep(Duration::from_millis(200));
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// A workload pod in the mesh: its ServiceAccount, its sidecar's CPU and memory (as the
/// `sidecar.istio.io/proxy*` annotations set them), one container.
fn workload(name: &str, container: Value, restart: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "namespace": NS, "labels": {"app": name},
            "annotations": {
                "sidecar.istio.io/proxyCPU": "500m",
                "sidecar.istio.io/proxyCPULimit": "500m",
                "sidecar.istio.io/proxyMemory": "256Mi",
                "sidecar.istio.io/proxyMemoryLimit": "256Mi",
                "readiness.status.sidecar.istio.io/periodSeconds": "1",
                // As Istio's users keep a client from sending before its sidecar is ready.
                "proxy.istio.io/config": "{\"holdApplicationUntilProxyStarts\": true}"
            }
        },
        "spec": {"serviceAccountName": name, "restartPolicy": restart, "containers": [container]}
    })
}

/// The sum of an Envoy's Prometheus counter `metric` over the series whose labels contain
/// `labelled`, read from its port 15090 at `ip`.
fn envoy_counter(ip: &str, metric: &str, labelled: &str) -> (u64, String) {
    let addr: SocketAddr = format!("{ip}:15090").parse().unwrap();
    let (_, body) = http_get(addr, "/stats/prometheus").unwrap_or_default();
    let lines: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with(&format!("{metric}{{")) && l.contains(labelled))
        .collect();
    let sum = lines
        .iter()
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64;
    (sum, lines.join("\n"))
}

#[test]
fn istiod_injects_sidecars_into_pods_on_the_node_and_cadvisor_reads_each_istio_proxy() {
    if let Some(why) = cluster::node_unavailable() {
        panic!("a real Kubernetes node cannot run here: {why}");
    }
    let dir = common::scratch_dir("istio-injected");
    let c = TestCluster::with_node();
    let rt = rt();
    let client = c.client(&rt);
    let k = BlockingClient::from_kubeconfig(&c.kubeconfig).unwrap();

    c.load_meshbench_image(MESHBENCH_IMAGE);
    let istio = IstioOnNode::install(&c, &k, &dir);
    k.apply(&json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": NS, "labels": {"istio-injection": "enabled"}}
    }))
    .unwrap();
    for sa in ["backend", "client"] {
        k.apply(&json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa, "namespace": NS}}))
            .unwrap();
    }
    istio.wait_root_in(&k, NS);

    // The backend behind a Service (port `http`, so Istio treats it as HTTP).
    let backend = create_injected(
        &rt,
        &client,
        &workload(
            "backend",
            json!({
                "name": "backend", "image": MESHBENCH_IMAGE, "imagePullPolicy": "Never",
                "command": ["/meshbench"],
                "args": ["backend", "--listen", "0.0.0.0:8080", "--size", "64"],
                "ports": [{"name": "http", "containerPort": 8080}],
                "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
                "securityContext": {"runAsUser": 65532, "runAsGroup": 65532}
            }),
            "Always",
        ),
    );
    let spec = backend.spec.clone().unwrap();
    let inits = spec.init_containers.clone().unwrap_or_default();
    assert_eq!(inits[0].name, "istio-init", "{spec:?}");
    let init = &inits[0];
    let init_caps = init
        .security_context
        .as_ref()
        .and_then(|s| s.capabilities.as_ref())
        .and_then(|c| c.add.clone())
        .unwrap_or_default();
    assert!(
        init_caps.contains(&"NET_ADMIN".to_string()) && init_caps.contains(&"NET_RAW".to_string()),
        "{init:?}"
    );
    // A native sidecar (an init container that keeps running) where istiod finds the node's
    // kubelet new enough, else beside the application.
    let proxy = inits
        .iter()
        .chain(&spec.containers)
        .find(|c| c.name == "istio-proxy")
        .unwrap();
    eprintln!(
        "istio-proxy injected {}",
        if proxy.restart_policy.as_deref() == Some("Always") {
            "as a native sidecar"
        } else {
            "beside the application"
        }
    );
    assert_eq!(
        proxy.security_context.as_ref().and_then(|s| s.run_as_user),
        Some(1337)
    );
    rt.block_on(Api::<Service>::namespaced(client.clone(), NS).create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "backend", "namespace": NS},
            "spec": {"selector": {"app": "backend"}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}
        }))
        .unwrap(),
    ))
    .unwrap();
    let backend = c.wait_pod_ready(&rt, &client, NS, "backend", Duration::from_secs(120));
    let backend_ip = backend.status.as_ref().unwrap().pod_ip.clone().unwrap();
    let vip = rt
        .block_on(Api::<Service>::namespaced(client.clone(), NS).get("backend"))
        .unwrap()
        .spec
        .and_then(|s| s.cluster_ip)
        .unwrap();

    // Prometheus scraping the kubelet's cAdvisor, before the load.
    let prom = Prometheus::start(&PrometheusOptions {
        kubelet_cadvisor: Some(c.kubelet_port.expect("the kubelet's port")),
        ..PrometheusOptions::default()
    });

    // The client: the Service's address, as an application dials it.
    let duration = format!("{SECS}s");
    let rate = RATE.to_string();
    create_injected(
        &rt,
        &client,
        &workload(
            "client",
            json!({
                "name": "client", "image": MESHBENCH_IMAGE, "imagePullPolicy": "Never",
                "command": ["/meshbench"],
                "args": ["run", "-q", "-r", rate, "-c", "4", "--duration", duration,
                         format!("http://{vip}:80/")],
                "securityContext": {"runAsUser": 65532, "runAsGroup": 65532}
            }),
            "Never",
        ),
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let pod = rt.block_on(pods.get("client")).unwrap();
        let running = pod
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .is_some_and(|cs| {
                cs.iter().any(|c| {
                    c.name == "client" && c.state.as_ref().is_some_and(|s| s.running.is_some())
                })
            });
        if running {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the client did not start: {:?}\n{}",
            pod.status,
            cluster::container_log(NS, "client")
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    // Mid-run: each istio-proxy container's CPU and working set, as cAdvisor reports them.
    std::thread::sleep(Duration::from_secs(SECS / 2 + 3));
    for pod in ["backend", "client"] {
        let sel = format!("container=\"istio-proxy\",namespace=\"{NS}\",pod=\"{pod}\"");
        let cpu = prom.query_now(&format!(
            "rate(container_cpu_usage_seconds_total{{{sel}}}[8s])"
        ));
        let ws = prom.query_now(&format!("container_memory_working_set_bytes{{{sel}}}"));
        let value = |v: &[Value]| -> f64 {
            v.first()
                .and_then(|s| s["value"][1].as_str()?.parse().ok())
                .unwrap_or(0.0)
        };
        let (cores, bytes) = (value(&cpu), value(&ws));
        eprintln!(
            "{pod}'s istio-proxy at {RATE} req/s, read from cAdvisor: {:.0} millicores, {:.1} MiB",
            cores * 1000.0,
            bytes / f64::from(1 << 20)
        );
        assert!(
            cores > 0.01 && bytes > 8.0 * f64::from(1 << 20),
            "{pod}: cpu {cpu:?} memory {ws:?}; target {}",
            prom.target_health()
        );
    }
    // The end: the client's own exit, and each Envoy's count of the requests.
    let deadline = Instant::now() + Duration::from_secs(120);
    let exit = loop {
        let pod = rt.block_on(pods.get("client")).unwrap();
        let ended = pod
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.name == "client"))
            .and_then(|c| c.state.as_ref()?.terminated.as_ref().map(|t| t.exit_code));
        if let Some(code) = ended {
            break code;
        }
        assert!(
            Instant::now() < deadline,
            "the client did not end: {:?}",
            pod.status
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    let client_log = cluster::container_log(NS, "client");
    assert_eq!(exit, 0, "the client: {client_log}");
    eprintln!("the client's run:\n{client_log}");
    let client_ip = rt
        .block_on(pods.get("client"))
        .unwrap()
        .status
        .and_then(|s| s.pod_ip)
        .unwrap();
    let at_least = RATE * (SECS - 5);
    let (outbound, lines) = envoy_counter(
        &client_ip,
        "envoy_cluster_upstream_rq_total",
        "outbound|80||backend.mesh.svc.cluster.local",
    );
    assert!(
        outbound >= at_least,
        "the client's sidecar sent {outbound}: {lines}"
    );
    let (inbound, lines) = envoy_counter(
        &backend_ip,
        "envoy_cluster_upstream_rq_total",
        "inbound|8080||",
    );
    assert!(
        inbound >= at_least,
        "the backend's sidecar passed on {inbound}: {lines}"
    );
    eprintln!("the client's sidecar sent {outbound} requests, the backend's passed on {inbound}");

    drop(prom);
    drop(istio);
    c.stop();
    let _ = std::fs::remove_dir_all(dir);
}
