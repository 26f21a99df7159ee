//! Issue 27, item 3: the seed's shape on a real node. An Envoy ingress gateway pod (the
//! project's Envoy 1.40, in an image built here from the binary and what `ldd` lists, run as a
//! non-root user) with a CPU and memory limit, configured by `meshbench gen gateway --for envoy`
//! through a ConfigMap and a TLS Secret, its container named `istio-proxy` in `istio-system` as
//! Istio's ingress gateway is; a `meshbench backend` pod behind a Service; `meshbench k8s run`
//! loading the gateway from two agent pods through the `external` topology, whose role
//! `gateway` (preset `istio-ingressgateway`) is read from a Prometheus this test starts on
//! loopback, scraping the kubelet's own cAdvisor endpoint (`/metrics/cadvisor`).
//!
//! The contract guarded: the CPU (millicores) and working set (MiB) stored for the role agree
//! within 10 % with what the gateway container's cgroup (the one the kubelet made) says over the
//! same window, sampled by this test; the kubelet enforced the CPU limit (CFS quota) and memory
//! limit; Envoy carried the load (requests, no errors).
//!
//! One knob differs from a default kubelet: cAdvisor's housekeeping (how often the kubelet
//! refreshes container stats, 10 s by default) is 1 s on the test cluster's kubelet
//! (common/cluster.rs, [`HOUSEKEEPING`]), so that a load of a few seconds has fresh points under
//! a 1 s scrape. On a real cluster the same queries work with `scrape_interval_secs` >= 20 and a
//! warm-up of at least four times that (docs/kubernetes.md).
//!
//! Where a kubelet cannot run, the test fails with `node_unavailable()`'s reason.

use crate::common;

use std::collections::BTreeSet;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::cluster::{self, TestCluster, GATEWAY, HOUSEKEEPING};
use common::prometheus::{Prometheus, PrometheusOptions};
use common::{bin, stderr};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret, Service};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::{json, Value};

const TOKEN: &str = "k8s-gateway-cadvisor-token-0123456789ab";
const MESHBENCH_IMAGE: &str = "localhost/meshbench:test";
const ENVOY_IMAGE: &str = "localhost/meshbench-envoy:1.40.0";
/// Istio's proxy user.
const PROXY_UID: u32 = 1337;
const NS: &str = "load";
const GATEWAY_NS: &str = "istio-system";
const GATEWAY_POD: &str = "istio-ingressgateway-0";
const RUN: &str = "gwload";
const DOMAIN: &str = "workspace-1-domain-1.com";
/// The gateway's limits (requests = limits: Guaranteed QoS, as the kubelet's cgroup shows).
const GATEWAY_CPU_MILLI: u64 = 500;
const GATEWAY_MEMORY: u64 = 256 << 20;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// A root filesystem for Envoy without a registry or a base image: the binary at
/// /usr/local/bin/envoy, every shared library `ldd` lists and the loader, user and group 1337
/// (`istio-proxy`), and a /tmp.
fn envoy_rootfs(dir: &Path) -> PathBuf {
    let root = dir.join("envoy-rootfs");
    for d in ["etc", "tmp"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::set_permissions(
        root.join("tmp"),
        std::os::unix::fs::PermissionsExt::from_mode(0o1777),
    )
    .unwrap();
    let envoy = std::fs::canonicalize(common::envoy_binary()).unwrap();
    common::copy_with_libraries(&root, &envoy, "/usr/local/bin/envoy");
    std::fs::write(
        root.join("etc/passwd"),
        format!("istio-proxy:x:{PROXY_UID}:{PROXY_UID}:istio-proxy:/tmp:/usr/local/bin/envoy\n"),
    )
    .unwrap();
    std::fs::write(
        root.join("etc/group"),
        format!("istio-proxy:x:{PROXY_UID}:\n"),
    )
    .unwrap();
    root
}

/// `meshbench gen gateway --for envoy` for `backend`, made ready for the pod: the certificate's
/// paths are where the Secret is mounted, and the listener gets a default filter chain (domain
/// 1's chain without its SNI match). The agents dial an address, and a client sends no SNI to an
/// address, so without it no chain would match; Istio renders such a chain for a Gateway server
/// whose host is `*`. Returns envoy.yaml's text, the certificate and the key.
fn gateway_config(dir: &Path, backend: &str) -> (String, String, String) {
    let out = dir.join("gw");
    let gen = common::meshbench(
        &[
            "gen",
            "gateway",
            "--for",
            "envoy",
            "--domains",
            "2",
            "--paths",
            "4",
            "--tls",
            "--certs",
            "shared",
            "--backend",
            backend,
            "--listen",
            "0.0.0.0:8443",
            "--workers",
            "1",
            "--out",
            out.to_str().unwrap(),
        ],
        Duration::from_secs(30),
    );
    assert!(gen.status.success(), "gen gateway: {}", stderr(&gen));
    let text = std::fs::read_to_string(out.join("envoy.yaml")).unwrap();
    let certs = format!("{}/certs/shared", out.display());
    let text = text
        .replace(
            &format!("{certs}.crt"),
            "/etc/istio/ingressgateway-certs/tls.crt",
        )
        .replace(
            &format!("{certs}.key"),
            "/etc/istio/ingressgateway-certs/tls.key",
        );
    assert!(
        !text.contains(out.to_str().unwrap()),
        "envoy.yaml names another file of {}",
        out.display()
    );
    let mut doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).expect("envoy.yaml");
    let listener = &mut doc["static_resources"]["listeners"][0];
    let mut chain = listener["filter_chains"][0].clone();
    let m = chain.as_mapping_mut().expect("a filter chain");
    m.remove("filter_chain_match");
    m.insert("name".into(), "default".into());
    listener
        .as_mapping_mut()
        .unwrap()
        .insert("default_filter_chain".into(), chain);
    let yaml = serde_yaml_ng::to_string(&doc).unwrap();
    let crt = std::fs::read_to_string(out.join("certs/shared.crt")).unwrap();
    let key = std::fs::read_to_string(out.join("certs/shared.key")).unwrap();
    (yaml, crt, key)
}

fn apply_namespace(rt: &tokio::runtime::Runtime, client: &Client, name: &str) {
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
    rt.block_on(Api::<Namespace>::all(client.clone()).patch(
        name,
        &PatchParams::apply("meshbench-test").force(),
        &Patch::Apply(&ns),
    ))
    .unwrap_or_else(|e| panic!("namespace {name}: {e}"));
}

fn create<K>(rt: &tokio::runtime::Runtime, client: &Client, ns: &str, v: Value)
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
    <K as kube::Resource>::DynamicType: Default,
{
    let obj: K = serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{e}: {v}"));
    rt.block_on(Api::<K>::namespaced(client.clone(), ns).create(&PostParams::default(), &obj))
        .unwrap_or_else(|e| panic!("creating {v}: {e}"));
}

/// The backend pod (`meshbench backend`, 64-byte answers) and its Service.
fn start_backend(rt: &tokio::runtime::Runtime, client: &Client) {
    create::<Pod>(
        rt,
        client,
        NS,
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "backend", "labels": {"app": "backend"}},
            "spec": {
                "containers": [{
                    "name": "backend", "image": MESHBENCH_IMAGE, "imagePullPolicy": "Never",
                    "command": ["/meshbench"],
                    "args": ["backend", "--listen", "0.0.0.0:8080", "--size", "64"],
                    "ports": [{"containerPort": 8080}],
                    "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
                    "resources": {"limits": {"cpu": "500m", "memory": "128Mi"}}
                }],
                "securityContext": {"runAsNonRoot": true, "runAsUser": 65532}
            }
        }),
    );
    create::<Service>(
        rt,
        client,
        NS,
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "backend"},
            "spec": {"selector": {"app": "backend"}, "ports": [{"port": 80, "targetPort": 8080}]}
        }),
    );
}

/// The gateway: its configuration as a ConfigMap, its certificate as a TLS Secret, the pod
/// (container `istio-proxy`, limits = requests) and a Service on 443.
fn start_gateway(rt: &tokio::runtime::Runtime, client: &Client, yaml: &str, crt: &str, key: &str) {
    create::<ConfigMap>(
        rt,
        client,
        GATEWAY_NS,
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "istio-ingressgateway-envoy"},
            "data": {"envoy.yaml": yaml}
        }),
    );
    create::<Secret>(
        rt,
        client,
        GATEWAY_NS,
        json!({
            "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": "istio-ingressgateway-certs"},
            "stringData": {"tls.crt": crt, "tls.key": key}
        }),
    );
    let limits =
        json!({"cpu": format!("{GATEWAY_CPU_MILLI}m"), "memory": GATEWAY_MEMORY.to_string()});
    create::<Pod>(
        rt,
        client,
        GATEWAY_NS,
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": GATEWAY_POD, "labels": {"app": "istio-ingressgateway", "istio": "ingressgateway"}},
            "spec": {
                "containers": [{
                    "name": "istio-proxy", "image": ENVOY_IMAGE, "imagePullPolicy": "Never",
                    "command": ["/usr/local/bin/envoy"],
                    "args": ["--config-path", "/etc/istio/proxy/envoy.yaml", "--concurrency", "1",
                             "--log-level", "warn", "--disable-hot-restart"],
                    "ports": [{"containerPort": 8443}],
                    "readinessProbe": {"tcpSocket": {"port": 8443}, "periodSeconds": 1},
                    "resources": {"requests": limits, "limits": limits},
                    "volumeMounts": [
                        {"name": "config", "mountPath": "/etc/istio/proxy", "readOnly": true},
                        {"name": "certs", "mountPath": "/etc/istio/ingressgateway-certs", "readOnly": true}
                    ],
                    "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true}
                }],
                "securityContext": {"runAsNonRoot": true, "runAsUser": PROXY_UID, "runAsGroup": PROXY_UID},
                "volumes": [
                    {"name": "config", "configMap": {"name": "istio-ingressgateway-envoy"}},
                    {"name": "certs", "secret": {"secretName": "istio-ingressgateway-certs"}}
                ]
            }
        }),
    );
    create::<Service>(
        rt,
        client,
        GATEWAY_NS,
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "istio-ingressgateway"},
            "spec": {"selector": {"istio": "ingressgateway"}, "ports": [{"name": "https", "port": 443, "targetPort": 8443}]}
        }),
    );
}

/// The gateway container's cgroups, as the kubelet made them (cgroup v1: the cpuacct and
/// memory hierarchies; v2: one directory).
#[derive(Debug, Clone)]
struct ContainerCgroup {
    cpu: PathBuf,
    memory: PathBuf,
    v2: bool,
}

impl ContainerCgroup {
    /// The directory named after the container's id under the cluster's `kubepods`.
    fn find(container_id: &str) -> Result<ContainerCgroup, String> {
        let find = |root: &str| -> Option<PathBuf> {
            let mut stack = vec![Path::new(root).join("meshbench-k8s/kubepods")];
            while let Some(d) = stack.pop() {
                for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                    if e.file_type().is_ok_and(|t| t.is_dir()) {
                        if e.file_name().to_string_lossy().contains(container_id) {
                            return Some(e.path());
                        }
                        stack.push(e.path());
                    }
                }
            }
            None
        };
        if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
            let g = find("/sys/fs/cgroup").ok_or("no container cgroup under /sys/fs/cgroup")?;
            return Ok(ContainerCgroup {
                cpu: g.clone(),
                memory: g,
                v2: true,
            });
        }
        Ok(ContainerCgroup {
            cpu: find("/sys/fs/cgroup/cpuacct").ok_or("no container cgroup under cpuacct")?,
            memory: find("/sys/fs/cgroup/memory").ok_or("no container cgroup under memory")?,
            v2: false,
        })
    }

    fn read(p: &Path) -> Result<String, String> {
        std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))
    }

    /// CPU used so far, nanoseconds.
    fn cpu_ns(&self) -> Result<u64, String> {
        if self.v2 {
            let stat = Self::read(&self.cpu.join("cpu.stat"))?;
            return stat_field(&stat, "usage_usec")
                .map(|us| us * 1000)
                .ok_or_else(|| "no usage_usec in cpu.stat".into());
        }
        Self::read(&self.cpu.join("cpuacct.usage"))?
            .trim()
            .parse()
            .map_err(|e| format!("cpuacct.usage: {e}"))
    }

    /// The working set as cAdvisor computes it: usage less inactive file pages.
    fn working_set(&self) -> Result<u64, String> {
        let stat = Self::read(&self.memory.join("memory.stat"))?;
        let (usage, inactive) = if self.v2 {
            (
                Self::read(&self.memory.join("memory.current"))?,
                stat_field(&stat, "inactive_file"),
            )
        } else {
            (
                Self::read(&self.memory.join("memory.usage_in_bytes"))?,
                stat_field(&stat, "total_inactive_file"),
            )
        };
        let usage: u64 = usage.trim().parse().map_err(|e| format!("usage: {e}"))?;
        Ok(usage.saturating_sub(inactive.unwrap_or(0)))
    }

    /// The CPU quota in cores the kubelet wrote on the container's cgroup (None: unlimited).
    fn cpu_quota(&self) -> Result<Option<f64>, String> {
        if self.v2 {
            let max = Self::read(&self.cpu.join("cpu.max"))?;
            let mut w = max.split_whitespace();
            let q = w.next().and_then(|q| q.parse::<f64>().ok());
            let period: f64 = w.next().and_then(|p| p.parse().ok()).unwrap_or(100_000.0);
            return Ok(q.map(|q| q / period));
        }
        // The quota lives in the cpu hierarchy (cpu,cpuacct where they are mounted together).
        let cpu = PathBuf::from(self.cpu.to_string_lossy().replacen(
            "/sys/fs/cgroup/cpuacct/",
            "/sys/fs/cgroup/cpu/",
            1,
        ));
        let quota: i64 = Self::read(&cpu.join("cpu.cfs_quota_us"))?
            .trim()
            .parse()
            .map_err(|e| format!("cpu.cfs_quota_us: {e}"))?;
        let period: f64 = Self::read(&cpu.join("cpu.cfs_period_us"))?
            .trim()
            .parse()
            .map_err(|e| format!("cpu.cfs_period_us: {e}"))?;
        Ok((quota > 0).then(|| quota as f64 / period))
    }
}

fn stat_field(stat: &str, name: &str) -> Option<u64> {
    stat.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == name).then(|| v.trim().parse().ok()).flatten()
    })
}

/// One reading of the container's cgroup.
#[derive(Debug, Clone, Copy)]
struct CgroupSample {
    t_ms: u64,
    cpu_ns: u64,
    working_set: u64,
}

/// Reads the cgroup every 100 ms until told to stop.
fn sample_cgroup(
    g: ContainerCgroup,
    quit: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Vec<CgroupSample>> {
    std::thread::spawn(move || {
        let mut out = Vec::new();
        while !quit.load(Ordering::Relaxed) {
            if let (Ok(cpu_ns), Ok(working_set)) = (g.cpu_ns(), g.working_set()) {
                out.push(CgroupSample {
                    t_ms: now_ms(),
                    cpu_ns,
                    working_set,
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        out
    })
}

/// CPU used by `t_ms`, interpolated between the two readings around it.
fn cpu_at(s: &[CgroupSample], t_ms: u64) -> f64 {
    let i = s.partition_point(|x| x.t_ms <= t_ms);
    assert!(
        i > 0 && i < s.len(),
        "the cgroup was not sampled around {t_ms} ({} .. {})",
        s.first().map_or(0, |x| x.t_ms),
        s.last().map_or(0, |x| x.t_ms)
    );
    let (a, b) = (s[i - 1], s[i]);
    let f = (t_ms - a.t_ms) as f64 / (b.t_ms - a.t_ms).max(1) as f64;
    a.cpu_ns as f64 + f * (b.cpu_ns as f64 - a.cpu_ns as f64)
}

fn close(a: f64, b: f64, tolerance: f64) -> bool {
    (a - b).abs() <= tolerance * b.abs().max(f64::MIN_POSITIVE)
}

/// The experiment: the gateway's URL (an address, the domain's Host), its role read through
/// the test's Prometheus with the `istio-ingressgateway` preset (its default `match`:
/// namespace istio-system, pods istio-ingressgateway-.*). `scrape_interval_secs` is how often a
/// series gets a new point: Prometheus scrapes every second, but cAdvisor refreshes a container
/// every 1 to 2 s (housekeeping of 1 s plus up to as much jitter), so it is 2, making the rate
/// window 8 s and the warm-up as long. With 1 (a 4-s window holding two or three points,
/// the newest up to 2 s old), rate()'s extrapolation read 10 % low. The measured window is
/// 16 s, two rate windows: with 8 s, one run in about eight still read 10 % off the cgroup.
/// The rate window the experiment's `scrape_interval_secs: 2` gives (four scrape intervals).
const RATE_WINDOW_MS: u64 = 8_000;

fn experiment(dir: &Path, url: &str, prometheus: SocketAddr) -> PathBuf {
    let file = dir.join("k8s-gateway-cadvisor.yaml");
    std::fs::write(
        &file,
        format!(
            "name: k8s-gateway-cadvisor
topologies: [external]
warmup_secs: 8
duration_secs: 16
cooldown_secs: 0
sample_interval_ms: 500
load:
  rate_rps: [500]
  connections: [8]
external:
  prometheus_url: http://{prometheus}
  scrape_interval_secs: 2
  variants:
    - name: ingress
      url: {url}
      headers: {{Host: {DOMAIN}}}
      insecure: true
      roles:
        - name: gateway
          preset: istio-ingressgateway
"
        ),
    )
    .unwrap();
    file
}

fn k8s_run(c: &TestCluster, file: &Path, store: &Path) -> std::process::Output {
    let port = TcpListener::bind((GATEWAY, 0))
        .expect("the bridge's gateway address is this machine's")
        .local_addr()
        .unwrap()
        .port();
    let mut cmd = Command::new(bin());
    cmd.args(["k8s", "run"])
        .arg(file)
        .args(["--agents", "2", "--image", MESHBENCH_IMAGE])
        .args(["--namespace", NS, "--name", RUN])
        .args(["--cpu", "500m", "--memory", "256Mi"])
        .args(["--listen", &format!("{GATEWAY}:{port}")])
        .args(["--ready-timeout", "90s"])
        .arg("--kubeconfig")
        .arg(&c.kubeconfig)
        .arg("--store")
        .arg(store)
        .env("MESHBENCH_AGENT_TOKEN", TOKEN)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    common::wait_with_limit(&mut cmd.spawn().unwrap(), Duration::from_secs(240))
}

#[test]
fn envoy_gateway_pod_read_through_kubelet_cadvisor_matches_its_cgroup_within_10_percent() {
    let began = Instant::now();
    if let Some(why) = cluster::node_unavailable() {
        panic!("a real Kubernetes node cannot run here: {why}");
    }
    let dir = common::scratch_dir("k8s-gateway-cadvisor");
    let c = TestCluster::with_node();
    let rt = rt();
    let client = c.client(&rt);

    // Images: meshbench (agents, backend) and Envoy, packaged here and imported, never pulled.
    c.load_meshbench_image(MESHBENCH_IMAGE);
    c.load_image(
        &envoy_rootfs(&dir),
        ENVOY_IMAGE,
        "/usr/local/bin/envoy",
        &format!("{PROXY_UID}:{PROXY_UID}"),
        &[],
    );

    apply_namespace(&rt, &client, NS);
    apply_namespace(&rt, &client, GATEWAY_NS);
    start_backend(&rt, &client);
    let backend = c.wait_pod_ready(&rt, &client, NS, "backend", Duration::from_secs(60));
    let service_ip = |ns: &str, name: &str| -> String {
        rt.block_on(Api::<Service>::namespaced(client.clone(), ns).get(name))
            .unwrap()
            .spec
            .and_then(|s| s.cluster_ip)
            .expect("a cluster IP")
    };
    let backend_addr = match &c.kube_proxy_unavailable {
        None => format!("{}:80", service_ip(NS, "backend")),
        Some(why) => {
            eprintln!("kube-proxy cannot serve Services here, so pods are reached by their addresses: {why}");
            format!("{}:8080", backend.status.unwrap().pod_ip.unwrap())
        }
    };
    let (yaml, crt, key) = gateway_config(&dir, &backend_addr);
    start_gateway(&rt, &client, &yaml, &crt, &key);
    let gw = c.wait_pod_ready(
        &rt,
        &client,
        GATEWAY_NS,
        GATEWAY_POD,
        Duration::from_secs(90),
    );
    let gw_status = gw.status.clone().unwrap();
    let gw_uid = gw.metadata.uid.clone().unwrap();
    let container_id = gw_status.container_statuses.as_ref().unwrap()[0]
        .container_id
        .clone()
        .expect("a container id")
        .rsplit("://")
        .next()
        .unwrap()
        .to_string();
    let url = match &c.kube_proxy_unavailable {
        None => format!(
            "https://{}/get/1",
            service_ip(GATEWAY_NS, "istio-ingressgateway")
        ),
        Some(_) => format!("https://{}:8443/get/1", gw_status.pod_ip.clone().unwrap()),
    };

    // The limits the kubelet wrote: the pod's cgroup and the container's.
    let (pod_cpu, pod_mem) = cluster::pod_cgroup_limits(&gw_uid).expect("the pod's cgroup");
    assert_eq!(
        pod_cpu,
        Some(GATEWAY_CPU_MILLI as f64 / 1000.0),
        "the pod cgroup's CPU quota"
    );
    assert_eq!(pod_mem, GATEWAY_MEMORY, "the pod cgroup's memory limit");
    let cg = ContainerCgroup::find(&container_id).expect("the gateway container's cgroup");
    assert_eq!(
        cg.cpu_quota().unwrap(),
        Some(GATEWAY_CPU_MILLI as f64 / 1000.0),
        "{cg:?}: the container cgroup's CPU quota"
    );
    eprintln!("gateway container cgroup: {cg:?}");

    // Prometheus scraping the kubelet's cAdvisor; wait for the gateway's container series.
    let prom = Prometheus::start(&PrometheusOptions {
        kubelet_cadvisor: Some(c.kubelet_port.expect("the kubelet's port")),
        ..PrometheusOptions::default()
    });
    let sel = format!("container=\"istio-proxy\",namespace=\"{GATEWAY_NS}\",pod=\"{GATEWAY_POD}\"");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let cpu = prom.query_now(&format!("container_cpu_usage_seconds_total{{{sel}}}"));
        let ws = prom.query_now(&format!("container_memory_working_set_bytes{{{sel}}}"));
        if !cpu.is_empty() && !ws.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no cAdvisor series for {sel} after 60 s; target: {}; the pod's series: {:?}\n{}",
            prom.target_health(),
            prom.query_now(&format!(
                "container_cpu_usage_seconds_total{{namespace=\"{GATEWAY_NS}\"}}"
            )),
            prom.log()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    // Which labels cAdvisor gives, container-level and pod-level.
    let series = prom.query_now(&format!(
        "container_cpu_usage_seconds_total{{namespace=\"{GATEWAY_NS}\"}}"
    ));
    let mut label_names = BTreeSet::new();
    let mut containers = BTreeSet::new();
    for s in &series {
        for (k, v) in s["metric"].as_object().unwrap() {
            label_names.insert(k.clone());
            if k == "container" {
                containers.insert(v.as_str().unwrap_or_default().to_string());
            }
        }
    }
    eprintln!(
        "cAdvisor series of {GATEWAY_NS}: {} of container_cpu_usage_seconds_total, labels {label_names:?}, containers {containers:?}",
        series.len()
    );
    for l in ["container", "pod", "namespace", "id", "image", "name"] {
        assert!(label_names.contains(l), "no {l} label: {series:?}");
    }
    assert!(containers.contains("istio-proxy"), "{series:?}");

    for s in &series {
        let m = &s["metric"];
        eprintln!(
            "  container={} pod={} id={}",
            m["container"], m["pod"], m["id"]
        );
    }
    // cAdvisor stamps its samples with when it read the cgroup: with housekeeping at 1 s, a
    // few seconds hold several distinct points.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let stamps: Vec<f64> = prom
            .query_now(&format!("container_cpu_usage_seconds_total{{{sel}}}[5s]"))
            .iter()
            .flat_map(|s| s["values"].as_array().cloned().unwrap_or_default())
            .filter_map(|v| v[0].as_f64())
            .collect();
        if stamps.len() >= 3 {
            eprintln!("cAdvisor's sample times of the gateway's CPU over 5 s: {stamps:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "housekeeping is not {HOUSEKEEPING}: cAdvisor's sample times over 5 s: {stamps:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }

    // The load, with the gateway's cgroup sampled meanwhile.
    let file = experiment(&dir, &url, prom.addr);
    let store = dir.join("results.db");
    let quit = Arc::new(AtomicBool::new(false));
    let sampler = sample_cgroup(cg.clone(), quit.clone());
    let run_began = Instant::now();
    let out = k8s_run(&c, &file, &store);
    let run_took = run_began.elapsed();
    quit.store(true, Ordering::Relaxed);
    let cgroup = sampler.join().unwrap();
    let err = stderr(&out);
    eprintln!(
        "meshbench k8s run ({:.1} s) said:\n{err}",
        run_took.as_secs_f64()
    );
    assert!(
        out.status.success(),
        "{err}\n{}\n{}\n{}",
        cluster::log_tail(&c.logs.join("kubelet.log"), 20),
        cluster::container_log(GATEWAY_NS, GATEWAY_POD),
        prom.log()
    );
    assert!(err.contains("2 of 2 agent pod(s) ready"), "{err}");

    // What was stored: the step's load and the role's figures, and the role's points.
    let export: Value = common::export_json(&store);
    let step = &export["steps"][0];
    let summary = &step["summary"];
    let usage = step["usage"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["role"] == "gateway")
        .unwrap_or_else(|| panic!("no gateway role: {step}"))
        .clone();
    eprintln!("the step's summary: {summary}\nthe gateway role: {usage}");
    assert_eq!(step["status"], "ok", "{step}");
    // Every figure but connections, which cAdvisor does not have (by design).
    let missing: Vec<&String> = usage["missing"]
        .as_object()
        .map(|m| m.keys().collect())
        .unwrap_or_default();
    assert_eq!(missing, ["connections"], "figures missing: {usage}");
    assert_eq!(usage["program"], "istio-ingressgateway");

    // Envoy carried the load.
    let requests = summary["requests"].as_u64().unwrap();
    let errors = summary["errors"].as_u64().unwrap();
    let rps = summary["throughput_rps"].as_f64().unwrap();
    assert!(requests > 1000, "{summary}");
    assert!(
        errors * 1000 <= requests,
        "errors through the gateway: {summary}"
    );

    let st = meshbench_store::Store::open(&store).unwrap();
    let exp = st.experiment("latest").unwrap();
    let steps = st.steps(exp.id).unwrap();
    let samples = st.samples(steps[0].id).unwrap();
    let points = samples
        .get(&meshbench_results::Role::Chain(
            meshbench_results::ChainRole::Gateway,
        ))
        .expect("the gateway's points");
    let (from, to) = (points[0].t_ms, points[points.len() - 1].t_ms);
    assert!(to > from, "{points:?}");

    // The cgroup as the stored figure sees it: each stored point is a rate over the rate
    // window ending at the point's instant, and the figure is their mean, so the cgroup's CPU
    // is the mean over the same instants of its counter's change over the same window (the
    // warm-up covers the first one). The working set is the window's mean.
    let cg_mc = points
        .iter()
        .map(|p| {
            (cpu_at(&cgroup, p.t_ms) - cpu_at(&cgroup, p.t_ms - RATE_WINDOW_MS))
                / (RATE_WINDOW_MS as f64 * 1e6)
                * 1000.0
        })
        .sum::<f64>()
        / points.len() as f64;
    let inside: Vec<&CgroupSample> = cgroup
        .iter()
        .filter(|s| s.t_ms >= from && s.t_ms <= to)
        .collect();
    assert!(!inside.is_empty(), "no cgroup reading inside the window");
    let cg_ws_mib = inside.iter().map(|s| s.working_set as f64).sum::<f64>()
        / inside.len() as f64
        / (1u64 << 20) as f64;
    // cAdvisor's own counter against the cgroup at the instants cAdvisor stamped: the same
    // CPU, so the kubelet reads the container's cgroup (what follows is Prometheus' windowing).
    let raw: Vec<(u64, f64)> = prom
        .query(
            &format!(
                "container_cpu_usage_seconds_total{{{sel}}}[{}ms]",
                to - from + 1000
            ),
            to as f64 / 1000.0,
        )
        .iter()
        .flat_map(|s| s["values"].as_array().cloned().unwrap_or_default())
        .filter_map(|v| {
            let t = (v[0].as_f64()? * 1000.0).round() as u64;
            Some((t, v[1].as_str()?.parse().ok()?))
        })
        .filter(|(t, _)| *t >= from)
        .collect();
    assert!(raw.len() >= 3, "cAdvisor's points in the window: {raw:?}");
    let ((t0, v0), (t1, v1)) = (raw[0], raw[raw.len() - 1]);
    let counter_mc = (v1 - v0) / ((t1 - t0) as f64 / 1000.0) * 1000.0;
    let cgroup_then_mc =
        (cpu_at(&cgroup, t1) - cpu_at(&cgroup, t0)) / ((t1 - t0) as f64 * 1e6) * 1000.0;
    eprintln!(
        "cAdvisor's counter from {t0} to {t1} ({} points): {counter_mc:.1} m; the cgroup between the same instants: {cgroup_then_mc:.1} m (ratio {:.3})",
        raw.len(),
        counter_mc / cgroup_then_mc
    );
    assert!(
        close(counter_mc, cgroup_then_mc, 0.05),
        "cAdvisor's counter {counter_mc} m vs the cgroup {cgroup_then_mc} m between {t0} and {t1}"
    );
    let prom_mc = usage["cpu_millicores_avg"].as_f64().unwrap();
    let prom_ws_mib = usage["working_set_mib_avg"].as_f64().unwrap();
    eprintln!(
        "window {:.1} s; gateway CPU: Prometheus (cAdvisor) {prom_mc:.1} m, cgroup {cg_mc:.1} m (ratio {:.3}); working set: Prometheus {prom_ws_mib:.2} MiB, cgroup {cg_ws_mib:.2} MiB (ratio {:.3}); load {rps:.0} RPS, {requests} requests, {errors} errors",
        (to - from) as f64 / 1000.0,
        prom_mc / cg_mc,
        prom_ws_mib / cg_ws_mib
    );
    assert!(cg_mc > 10.0, "the gateway barely worked: {cg_mc} m");
    assert!(
        cg_mc <= GATEWAY_CPU_MILLI as f64 * 1.05,
        "above its limit: {cg_mc} m"
    );
    assert!(
        close(prom_mc, cg_mc, 0.10),
        "CPU: Prometheus {prom_mc} m vs cgroup {cg_mc} m"
    );
    assert!(
        close(prom_ws_mib, cg_ws_mib, 0.10),
        "working set: Prometheus {prom_ws_mib} MiB vs cgroup {cg_ws_mib} MiB"
    );

    drop(prom);
    drop(client);
    let stopped_in = c.stop();
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!(
        "k8s run {:.1} s, stop {:.1} s, test {:.1} s",
        run_took.as_secs_f64(),
        stopped_in.as_secs_f64(),
        began.elapsed().as_secs_f64()
    );
}
