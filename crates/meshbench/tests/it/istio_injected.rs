//! Issue 34, part 2: Istio's sidecars as Istio injects them into pods, on the real test node
//! (common/cluster.rs: kube-apiserver, kubelet, containerd, kube-proxy, a bridge network).
//!
//! - istiod (`pilot-discovery`, scripts/install-istio.sh) runs on this machine against the
//!   node's API server. It serves the pods' agents on the bridge's address, 10.217.0.1, with
//!   that address in its serving certificate (`ISTIOD_CUSTOM_HOST`), and its injection webhook
//!   on loopback, where the API server calls it. The injector's configuration is Istio's own
//!   chart template and values from the same module (`injection-template.yaml`,
//!   `injection-values.yaml`), with the image and the CA's address set as a user's values set
//!   them.
//! - The image `istio-proxy` is built here, from pilot-agent, the project's Envoy, Istio's
//!   bootstrap template and Debian's nf_tables iptables, each with what `ldd` lists: no registry.
//! - In a namespace labelled `istio-injection: enabled`, the API server has istiod inject a
//!   backend pod (`meshbench backend`) and a client pod (`meshbench run` against the Service's
//!   address). Each gets `istio-init`, which writes Istio's capture in the pod, and
//!   `istio-proxy`, which istiod configures; the kubelet on Kubernetes 1.34 runs it as a native
//!   sidecar.
//! - Checked: the injection as Istio writes it, `istio-init` ended 0, both Envoys counted the
//!   client's requests (each one's Prometheus port 15090, which the capture leaves alone), the
//!   client ended 0, and each `istio-proxy` container's CPU and memory read through Prometheus
//!   from the kubelet's cAdvisor.
//!
//! Where a kubelet cannot run, the test fails with `node_unavailable()`'s reason.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine as _;
use common::cluster::{self, TestCluster, GATEWAY};
use common::prometheus::{Prometheus, PrometheusOptions};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use kube::api::{Api, DeleteParams, PostParams};
use kube::Client;
use meshbench_k8s::BlockingClient;
use meshbench_lab::control_plane::{self, ISTIOD_ENV};
use meshbench_lab::process::{Placement, RoleProcess};
use meshbench_lab::program::envoy::admin::STATS_NEEDED;
use serde_json::{json, Value};

const NS: &str = "mesh";
const ISTIO_NS: &str = "istio-system";
const PROXY_IMAGE: &str = "localhost/meshbench-istio-proxy:1";
const MESHBENCH_IMAGE: &str = "localhost/meshbench:test";
/// The image has no base to inherit a PATH from; istio-init runs iptables by name.
const PATH: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
const XTABLES: &str = "/usr/lib/x86_64-linux-gnu/xtables";
/// The client's load: 200 requests a second over 4 connections for 25 s.
const RATE: u64 = 200;
const SECS: u64 = 25;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// The `istio-proxy` image's root filesystem, as Istio's proxyv2 image holds it: pilot-agent
/// (the entrypoint, for both containers), Envoy, the bootstrap template where pilot-agent
/// looks, and nf_tables iptables with its extensions for `istio-init`.
fn istio_proxy_rootfs(dir: &Path) -> PathBuf {
    let root = dir.join("istio-proxy-rootfs");
    for d in [
        "etc/istio/proxy",
        "tmp",
        "var/lib/istio/envoy",
        "var/lib/istio/data",
        "var/run/secrets",
        "usr/sbin",
    ] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::set_permissions(
        root.join("tmp"),
        std::os::unix::fs::PermissionsExt::from_mode(0o1777),
    )
    .unwrap();
    let cache = control_plane::cache();
    let envoy = std::fs::canonicalize(common::envoy_binary()).unwrap();
    common::copy_with_libraries(&root, &envoy, "/usr/local/bin/envoy");
    common::copy_with_libraries(
        &root,
        &cache.join("bin/pilot-agent"),
        "/usr/local/bin/pilot-agent",
    );
    std::fs::copy(
        cache.join("envoy_bootstrap_tmpl.json"),
        root.join("var/lib/istio/envoy/envoy_bootstrap_tmpl.json"),
    )
    .unwrap();
    common::copy_with_libraries(
        &root,
        Path::new("/usr/sbin/xtables-nft-multi"),
        "/usr/sbin/xtables-nft-multi",
    );
    for name in [
        "iptables",
        "iptables-save",
        "iptables-restore",
        "iptables-nft",
        "iptables-nft-save",
        "iptables-nft-restore",
    ] {
        std::os::unix::fs::symlink("xtables-nft-multi", root.join("usr/sbin").join(name)).unwrap();
    }
    for ext in std::fs::read_dir(XTABLES).unwrap().flatten() {
        let path = ext.path();
        common::copy_with_libraries(&root, &path, &path.display().to_string());
    }
    std::fs::write(
        root.join("etc/passwd"),
        "root:x:0:0:root:/tmp:/bin/false\nistio-proxy:x:1337:1337:istio-proxy:/tmp:/bin/false\n",
    )
    .unwrap();
    std::fs::write(root.join("etc/group"), "root:x:0:\nistio-proxy:x:1337:\n").unwrap();
    root
}

/// The injector's ConfigMap, as Istio's chart renders it: the sidecar template, and the
/// chart's default values with the image and the CA's address set.
fn injector_config_map(ca: &str) -> Value {
    let cache = control_plane::cache();
    let template = std::fs::read_to_string(cache.join("injection-template.yaml")).unwrap();
    let chart: serde_yaml_ng::Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(cache.join("injection-values.yaml")).unwrap(),
    )
    .unwrap();
    let defaults = serde_json::to_value(&chart["_internal_defaults_do_not_set"]).unwrap();
    let mut values = json!({
        "global": defaults["global"],
        "sidecarInjectorWebhook": defaults["sidecarInjectorWebhook"],
        "revision": defaults["revision"],
        // The chart is istiod's own: its top-level values are `pilot`'s.
        "pilot": {"cni": defaults["cni"], "env": {}},
        "gateways": {
            "securityContext": defaults["gateways"]["securityContext"],
            "seccompProfile": defaults["gateways"]["seccompProfile"],
        },
    });
    values["global"]["proxy"]["image"] = PROXY_IMAGE.into();
    values["global"]["proxy_init"]["image"] = PROXY_IMAGE.into();
    values["global"]["caAddress"] = ca.into();
    values["global"]["imagePullPolicy"] = "Never".into();
    let config = json!({
        "policy": "enabled",
        "defaultTemplates": ["sidecar"],
        "alwaysInjectSelector": [],
        "neverInjectSelector": [],
        "injectedAnnotations": {},
        "templates": {"sidecar": template},
    });
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "istio-sidecar-injector", "namespace": ISTIO_NS},
        "data": {
            "config": serde_yaml_ng::to_string(&config).unwrap(),
            "values": values.to_string(),
        },
    })
}

/// `GET path` over HTTP/1.1 on a connection closed after it (Envoy refuses HTTP/1.0): the
/// status and the body, de-chunked.
fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let (head, mut rest) = text.split_once("\r\n\r\n")?;
    if !head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return Some((status, rest.to_string()));
    }
    let mut body = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).ok()?;
        if n == 0 || after.len() < n {
            break;
        }
        body.push_str(&after[..n]);
        rest = after[n..].trim_start_matches("\r\n");
    }
    Some((status, body))
}

/// istiod on this machine against the node's API server: xDS and the CA for the pods on the
/// bridge's address, everything else on loopback; returns it, the webhook's address and the
/// mesh's root certificate.
fn start_istiod(
    dir: &Path,
    c: &TestCluster,
    k: &BlockingClient,
    xds: SocketAddr,
) -> (RoleProcess, SocketAddr, String) {
    let (grpc, http, https, monitoring) = (
        common::free_addr(),
        common::free_addr(),
        common::free_addr(),
        common::free_addr(),
    );
    let stats: Vec<String> = STATS_NEEDED.iter().map(|p| format!("\"{p}\"")).collect();
    let cwd = dir.join("istiod");
    std::fs::create_dir_all(&cwd).unwrap();
    let mesh = cwd.join("mesh.yaml");
    std::fs::write(
        &mesh,
        format!(
            "defaultConfig:\n  discoveryAddress: {xds}\n  proxyStatsMatcher:\n    inclusionPrefixes: [{}]\n",
            stats.join(", ")
        ),
    )
    .unwrap();
    let addrs = control_plane::IstiodAddrs {
        grpc,
        secure_grpc: xds,
        http,
        https,
        monitoring,
    };
    let mut cmd = control_plane::istiod_command(&cwd, &c.kubeconfig, &mesh, &addrs);
    cmd.env("ISTIOD_CUSTOM_HOST", format!("127.0.0.1,{GATEWAY}"))
        .envs(ISTIOD_ENV.iter().copied());
    let log = dir.join("istiod.log");
    let mut istiod = RoleProcess::spawn("istiod", cmd, &log, &Placement::default()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(90);
    let root = loop {
        if http_get(http, "/ready").is_some_and(|(s, _)| s == 200) {
            if let Some(pem) = k
                .get::<ConfigMap>(ISTIO_NS, "istio-ca-root-cert")
                .unwrap()
                .and_then(|cm| cm.data?.remove("root-cert.pem"))
            {
                break pem;
            }
        }
        assert!(istiod.exited().is_none(), "istiod: {}", istiod.log_tail(10));
        assert!(
            Instant::now() < deadline,
            "istiod not ready: {}",
            istiod.log_tail(10)
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        !text.contains("Skipping sidecar injector"),
        "istiod found no injector configuration: {}",
        istiod.log_tail(10)
    );
    (istiod, https, root)
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
    if let Some(e) = control_plane::unavailable() {
        panic!("{e}");
    }
    for f in ["injection-template.yaml", "injection-values.yaml"] {
        let p = control_plane::cache().join(f);
        assert!(
            p.is_file(),
            "no {}: run scripts/install-istio.sh",
            p.display()
        );
    }
    let dir = common::scratch_dir("istio-injected");
    let c = TestCluster::with_node();
    let rt = rt();
    let client = c.client(&rt);
    let k = BlockingClient::from_kubeconfig(&c.kubeconfig).unwrap();

    c.load_meshbench_image(MESHBENCH_IMAGE);
    c.load_image(
        &istio_proxy_rootfs(&dir),
        PROXY_IMAGE,
        "/usr/local/bin/pilot-agent",
        "0:0",
        &[PATH],
    );

    // Istio's CRDs and namespace, and the injector's configuration before istiod starts.
    let crds = std::fs::read_to_string(control_plane::cache().join("crd-all.gen.yaml")).unwrap();
    k.apply_all(meshbench_k8s::blocking::documents(&crds).unwrap())
        .unwrap();
    k.apply(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ISTIO_NS}}))
        .unwrap();
    let xds: SocketAddr = TcpListener::bind((GATEWAY, 0))
        .expect("the bridge's address is this machine's")
        .local_addr()
        .unwrap();
    k.apply(&injector_config_map(&xds.to_string())).unwrap();
    let (istiod, webhook, root) = start_istiod(&dir, &c, &k, xds);

    // The webhook, as Istio's chart declares it, at istiod's loopback address.
    k.apply(&json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "meshbench-sidecar-injector"},
        "webhooks": [{
            "name": "namespace.sidecar-injector.istio.io",
            "clientConfig": {
                "url": format!("https://{webhook}/inject"),
                "caBundle": base64::engine::general_purpose::STANDARD.encode(&root),
            },
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
            "namespaceSelector": {"matchLabels": {"istio-injection": "enabled"}},
            "sideEffects": "None",
            "failurePolicy": "Fail",
            "admissionReviewVersions": ["v1"],
            "reinvocationPolicy": "Never",
            "timeoutSeconds": 10
        }]
    }))
    .unwrap();
    k.apply(&json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": NS, "labels": {"istio-injection": "enabled"}}
    }))
    .unwrap();
    for sa in ["backend", "client"] {
        k.apply(&json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa, "namespace": NS}}))
            .unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while k
        .get::<ConfigMap>(NS, "istio-ca-root-cert")
        .unwrap()
        .is_none()
    {
        assert!(
            Instant::now() < deadline,
            "istiod did not publish its root in {NS}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }

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
    drop(istiod);
    c.stop();
    let _ = std::fs::remove_dir_all(dir);
}
