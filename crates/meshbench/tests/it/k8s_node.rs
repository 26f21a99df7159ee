//! `meshbench k8s run` on a real one-node Kubernetes cluster (common/cluster.rs): the Indexed
//! Job's pods are placed by kube-scheduler and run by a kubelet through containerd and runc
//! from the meshbench image built from this test's binary and imported into containerd (never
//! pulled), with the CPU and memory limits the kubelet writes into the pod's cgroup. They dial
//! the coordinator on the pods' bridge gateway (an address of this machine) and load a backend
//! pod through its Service, which kube-proxy (iptables mode) programs; where kube-proxy cannot
//! run, the test says so and aims at the backend pod's address instead. Then everything is
//! deleted and the cluster stopped, leaving nothing behind.
//!
//! Where a kubelet cannot run (not root, no writable cgroups, nothing installed), the test
//! fails with the reason: tests/it/k8s.rs plays the node there.

use crate::common;

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::cluster::{self, TestCluster, GATEWAY, NODE};
use common::{bin, stderr};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::json;

const TOKEN: &str = "k8s-node-test-token-0123456789abcdef";
const IMAGE: &str = "localhost/meshbench:test";
const NS: &str = "load";
const RUN: &str = "nodetest";

/// What the test saw of an agent pod while it ran.
#[derive(Debug, Clone)]
struct Seen {
    node: Option<String>,
    scheduled_by_scheduler: bool,
    limits: Result<(Option<f64>, u64), String>,
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// The backend: `meshbench backend` in a pod from the same image, and a Service in front.
fn start_backend(rt: &tokio::runtime::Runtime, client: &Client) {
    let pp = PatchParams::apply("meshbench-test").force();
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}});
    rt.block_on(
        Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone()).patch(
            NS,
            &pp,
            &Patch::Apply(&ns),
        ),
    )
    .expect("the namespace");
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "backend", "labels": {"app": "backend"}},
        "spec": {
            "containers": [{
                "name": "backend", "image": IMAGE, "imagePullPolicy": "Never",
                "command": ["/meshbench"], "args": ["backend", "--listen", "0.0.0.0:8080", "--size", "64"],
                "ports": [{"containerPort": 8080}],
                "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
                "resources": {"limits": {"cpu": "500m", "memory": "128Mi"}}
            }],
            "securityContext": {"runAsNonRoot": true, "runAsUser": 65532}
        }
    }))
    .unwrap();
    rt.block_on(Api::<Pod>::namespaced(client.clone(), NS).create(&PostParams::default(), &pod))
        .expect("the backend pod");
    let svc: Service = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "backend"},
        "spec": {"selector": {"app": "backend"}, "ports": [{"port": 80, "targetPort": 8080}]}
    }))
    .unwrap();
    rt.block_on(
        Api::<Service>::namespaced(client.clone(), NS).create(&PostParams::default(), &svc),
    )
    .expect("the backend Service");
}

/// Waits (at most `limit`) until pod `name` is Ready; its IP.
/// Waits until `url` answers 200 (at most `limit`), else fails with kube-proxy's log.
fn wait_answers(url: &str, limit: Duration, c: &TestCluster) {
    let deadline = Instant::now() + limit;
    loop {
        let out = Command::new("curl")
            .args([
                "-s",
                "-o",
                "/dev/null",
                "-m",
                "2",
                "-w",
                "%{http_code}",
                url,
            ])
            .output()
            .expect("curl");
        let code = String::from_utf8_lossy(&out.stdout).to_string();
        if code == "200" {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{url} (the backend's Service) did not answer within {limit:?}: {code}\n{}",
            cluster::log_tail(&c.logs.join("kube-proxy.log"), 20)
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// The experiment: the backend's URL under the `external` topology (the agents aim at it; no
/// role is read, so Prometheus is never asked).
fn experiment(dir: &Path, url: &str) -> PathBuf {
    let file = dir.join("k8s-node-experiment.yaml");
    std::fs::write(
        &file,
        format!(
            "name: k8s-node\ntopologies: [external]\nduration_secs: 3\nwarmup_secs: 1\ncooldown_secs: 0\nload:\n  rate_rps: [200]\n  connections: [2]\nexternal:\n  prometheus_url: http://127.0.0.1:9\n  scrape_interval_secs: 0.25\n  variants:\n    - name: baseline\n      url: {url}\n"
        ),
    )
    .unwrap();
    file
}

/// Watches the agent pods while the run goes on: where each ran and the limits the kubelet
/// gave its cgroup (read while it runs: the pods are deleted at the end).
fn watch_agents(
    kubeconfig: PathBuf,
    quit: Arc<AtomicBool>,
) -> std::thread::JoinHandle<BTreeMap<String, Seen>> {
    std::thread::spawn(move || {
        let rt = runtime();
        let client = cluster::client(&kubeconfig, &rt);
        let pods: Api<Pod> = Api::namespaced(client, NS);
        let lp = ListParams::default().labels(&format!("app.kubernetes.io/instance={RUN}"));
        let mut seen: BTreeMap<String, Seen> = BTreeMap::new();
        while !quit.load(Ordering::Relaxed) {
            for p in rt
                .block_on(pods.list(&lp))
                .map(|l| l.items)
                .unwrap_or_default()
            {
                let name = p.metadata.name.clone().unwrap_or_default();
                let status = p.status.clone().unwrap_or_default();
                if status.phase.as_deref() != Some("Running")
                    || seen.get(&name).is_some_and(|s| s.limits.is_ok())
                {
                    continue;
                }
                let uid = p.metadata.uid.clone().unwrap_or_default();
                seen.insert(
                    name,
                    Seen {
                        node: p.spec.as_ref().and_then(|s| s.node_name.clone()),
                        scheduled_by_scheduler: status
                            .conditions
                            .iter()
                            .flatten()
                            .any(|c| c.type_ == "PodScheduled" && c.status == "True"),
                        limits: cluster::pod_cgroup_limits(&uid),
                    },
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        seen
    })
}

fn k8s_run(c: &TestCluster, file: &Path, store: &Path, extra: &[&str]) -> std::process::Output {
    let port = TcpListener::bind((GATEWAY, 0))
        .expect("the bridge's gateway address is this machine's")
        .local_addr()
        .unwrap()
        .port();
    let mut cmd = Command::new(bin());
    cmd.args(["k8s", "run"])
        .arg(file)
        .args([
            "--agents",
            "2",
            "--image",
            IMAGE,
            "--namespace",
            NS,
            "--name",
            RUN,
        ])
        .args(["--cpu", "250m", "--memory", "256Mi"])
        .args(["--sysctl", "net.ipv4.ip_local_port_range=1024 65535"])
        .args(["--listen", &format!("{GATEWAY}:{port}")])
        .arg("--kubeconfig")
        .arg(&c.kubeconfig)
        .arg("--store")
        .arg(store)
        .args(extra)
        .env("MESHBENCH_AGENT_TOKEN", TOKEN)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    common::wait_with_limit(&mut cmd.spawn().unwrap(), Duration::from_secs(240))
}

/// Every object of the run is gone, its pods stopped by the kubelet (a pod leaves the API only
/// once the kubelet has ended its containers).
fn all_gone(rt: &tokio::runtime::Runtime, client: &Client, c: &TestCluster, selector: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = rt.block_on(async {
            let pods = Api::<Pod>::namespaced(client.clone(), NS)
                .list(&ListParams::default().labels(selector))
                .await
                .unwrap()
                .items
                .into_iter()
                .filter_map(|p| p.metadata.name)
                .collect::<Vec<_>>();
            let job = Api::<Job>::namespaced(client.clone(), NS)
                .get_opt(&format!("{RUN}-agents"))
                .await
                .unwrap()
                .is_some();
            let svc = Api::<Service>::namespaced(client.clone(), NS)
                .get_opt(&format!("{RUN}-agents"))
                .await
                .unwrap()
                .is_some();
            let cm = Api::<ConfigMap>::namespaced(client.clone(), NS)
                .get_opt(&format!("{RUN}-experiment"))
                .await
                .unwrap()
                .is_some();
            let secret = Api::<Secret>::namespaced(client.clone(), NS)
                .get_opt(&format!("{RUN}-token"))
                .await
                .unwrap()
                .is_some();
            (pods, job, svc, cm, secret)
        });
        if left.0.is_empty() && !left.1 && !left.2 && !left.3 && !left.4 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "left in the cluster after 60 s: {left:?}\n{}",
            cluster::log_tail(&c.logs.join("kubelet.log"), 20)
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// What a stopped cluster must not leave: processes in its cgroup, mounts under its directory,
/// the bridge, KUBE-* chains, its cgroups, containerd's socket.
fn assert_nothing_left() {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let ours: Vec<&str> = mounts
        .lines()
        .filter(|l| l.contains(cluster::STATE))
        .collect();
    assert!(ours.is_empty(), "mounts left: {ours:?}");
    assert!(
        !Path::new(cluster::STATE).exists(),
        "{} left",
        cluster::STATE
    );
    assert!(
        !Path::new("/sys/class/net").join(cluster::BRIDGE).exists(),
        "bridge {} left",
        cluster::BRIDGE
    );
    for p in [
        "/var/lib/kubelet",
        "/var/lib/cni/results",
        "/var/log/containers",
    ] {
        let ours = std::fs::read_dir(p)
            .map(|rd| {
                rd.flatten()
                    .filter(|e| {
                        !p.ends_with("results")
                            || e.file_name().to_string_lossy().starts_with("meshbench-")
                    })
                    .map(|e| e.path().display().to_string())
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        assert!(ours.is_empty(), "left in {p}: {ours:?}");
    }
    assert!(
        !Path::new(cluster::CONTAINERD_SOCK).exists(),
        "containerd's socket left"
    );
    for hierarchy in std::fs::read_dir("/sys/fs/cgroup").unwrap().flatten() {
        let g = hierarchy.path().join("meshbench-k8s");
        assert!(!g.exists(), "cgroup {} left", g.display());
    }
    for table in ["filter", "nat", "mangle"] {
        let out = Command::new("iptables")
            .args(["-w", "5", "-t", table, "-S"])
            .output()
            .unwrap();
        let rules = String::from_utf8_lossy(&out.stdout);
        assert!(
            !rules.contains("KUBE-"),
            "iptables {table} still has KUBE- rules:\n{rules}"
        );
    }
}

#[test]
fn k8s_run_on_a_real_node_schedules_limits_dials_loads_a_service_and_cleans_up() {
    let began = Instant::now();
    let c = TestCluster::with_node();
    let started_in = c.started_in;
    let rt = runtime();
    let client = c.client(&rt);
    let dir = common::scratch_dir("k8s-node");
    c.load_meshbench_image(IMAGE);

    start_backend(&rt, &client);
    let backend_ip = c
        .wait_pod_ready(&rt, &client, NS, "backend", Duration::from_secs(60))
        .status
        .and_then(|s| s.pod_ip)
        .expect("a Ready pod has an IP");
    // Through the Service, which kube-proxy programs here (iptables mode; it answers from
    // this machine too, as the host's OUTPUT chain is rewritten like a pod's traffic). Only
    // where kube-proxy itself says it cannot run do the agents aim at the backend pod instead.
    let svc = rt
        .block_on(Api::<Service>::namespaced(client.clone(), NS).get("backend"))
        .unwrap();
    let cluster_ip = svc.spec.and_then(|s| s.cluster_ip).expect("a cluster IP");
    let url = match &c.kube_proxy_unavailable {
        None => {
            let url = format!("http://{cluster_ip}/");
            wait_answers(&url, Duration::from_secs(30), &c);
            url
        }
        Some(why) => {
            eprintln!("kube-proxy cannot serve Services here, so the agents aim at the backend pod: {why}");
            format!("http://{backend_ip}:8080/")
        }
    };
    let file = experiment(&dir, &url);
    let store = dir.join("results.db");

    let quit = Arc::new(AtomicBool::new(false));
    let watcher = watch_agents(c.kubeconfig.clone(), quit.clone());
    let run_began = Instant::now();
    let out = k8s_run(&c, &file, &store, &["--ready-timeout", "90s"]);
    let run_took = run_began.elapsed();
    quit.store(true, Ordering::Relaxed);
    let seen = watcher.join().unwrap();
    let err = stderr(&out);
    eprintln!(
        "meshbench k8s run ({:.1} s) said:\n{err}\nthe pods: {seen:?}",
        run_took.as_secs_f64()
    );
    assert!(
        out.status.success(),
        "{err}\n{}\n{}",
        cluster::log_tail(&c.logs.join("kubelet.log"), 20),
        cluster::log_tail(&c.logs.join("containerd.log"), 10)
    );
    assert!(err.contains("2 of 2 agent pod(s) ready"), "{err}");

    // Placed by the scheduler on the node, run with the limits asked for: 250m is a CFS quota
    // of a quarter of the period, 256Mi the memory limit, both on the pod's cgroup.
    assert_eq!(seen.len(), 2, "both agent pods seen running: {seen:?}");
    for (name, s) in &seen {
        assert_eq!(s.node.as_deref(), Some(NODE), "{name}: {s:?}");
        assert!(s.scheduled_by_scheduler, "{name}: {s:?}");
        let (cpu, memory) = s.limits.clone().unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(cpu, Some(0.25), "{name}: the pod cgroup's CPU quota");
        assert_eq!(memory, 256 << 20, "{name}: the pod cgroup's memory limit");
    }

    // The step was driven by the two agent pods against the backend, merged and stored.
    let export: serde_json::Value = common::export_json(&store);
    let text = export.to_string();
    assert!(
        text.contains("\"agents\"")
            && text.contains(&format!("{RUN}-agents-0"))
            && text.contains(&format!("{RUN}-agents-1")),
        "{text:.3000}"
    );
    let agents = export
        .pointer("/steps/0/result/agents/agents")
        .and_then(|a| a.as_array())
        .cloned()
        .unwrap_or_default();
    let requests: u64 = agents.iter().filter_map(|a| a["requests"].as_u64()).sum();
    let errors: u64 = agents.iter().filter_map(|a| a["errors"].as_u64()).sum();
    assert!(
        requests >= 500 && errors == 0,
        "200/s for 3 s from two agents, none failed: {requests} requests, {errors} errors"
    );
    let agents = format!("app.kubernetes.io/instance={RUN}");
    all_gone(&rt, &client, &c, &agents);

    // The real scheduler honours the rendered anti-affinity: `required` puts at most one agent
    // on a node, so on one node the second stays Pending and `k8s run` says why, then cleans up.
    let out = k8s_run(
        &c,
        &file,
        &store,
        &["--anti-affinity", "required", "--ready-timeout", "8s"],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("only 1 of 2 agent pods were ready") && err.contains("anti-affinity"),
        "{err}"
    );
    all_gone(&rt, &client, &c, &agents);

    // The kubelet's cAdvisor serves container-level series (containerd found at its default
    // socket), labelled by namespace, pod and container: what Prometheus scrapes (item 3).
    let port = c.kubelet_port.expect("the kubelet's port");
    let out = Command::new("curl")
        .args(["-sk", "-m", "10"])
        .arg(format!("https://127.0.0.1:{port}/metrics/cadvisor"))
        .output()
        .expect("curl");
    let metrics = String::from_utf8_lossy(&out.stdout);
    let backend_cpu: Vec<&str> = metrics
        .lines()
        .filter(|l| {
            l.starts_with("container_cpu_usage_seconds_total{")
                && l.contains("container=\"backend\"")
                && l.contains("pod=\"backend\"")
                && l.contains(&format!("namespace=\"{NS}\""))
        })
        .collect();
    eprintln!("cadvisor: {backend_cpu:?}");
    assert!(
        !backend_cpu.is_empty(),
        "no container-level CPU series for the backend in /metrics/cadvisor:\n{:.3000}",
        metrics
            .lines()
            .filter(|l| l.starts_with("container_cpu_usage_seconds_total"))
            .collect::<Vec<_>>()
            .join("\n")
    );

    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let _ = rt.block_on(pods.delete("backend", &DeleteParams::default()));
    let _ = rt.block_on(
        Api::<Service>::namespaced(client.clone(), NS).delete("backend", &DeleteParams::default()),
    );
    all_gone(&rt, &client, &c, "app=backend");
    drop(client);
    let stopped_in = c.stop();
    assert_nothing_left();
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!(
        "cluster start {:.1} s, k8s run {:.1} s, stop {:.1} s, test {:.1} s",
        started_in.as_secs_f64(),
        run_took.as_secs_f64(),
        stopped_in.as_secs_f64(),
        began.elapsed().as_secs_f64()
    );
    assert!(
        stopped_in < Duration::from_secs(60),
        "stop took {stopped_in:?}"
    );
}

/// A test killed with SIGKILL leaves running pods behind (containerd's shims and the containers
/// outlive the daemons); the next start sweeps them, starts a node that works, and its stop
/// leaves nothing.
#[test]
fn a_cluster_killed_with_pods_running_is_swept_by_the_next_start() {
    let c = TestCluster::with_node();
    let rt = runtime();
    let client = c.client(&rt);
    let dir = common::scratch_dir("k8s-node-killed");
    c.load_meshbench_image(IMAGE);
    start_backend(&rt, &client);
    c.wait_pod_ready(&rt, &client, NS, "backend", Duration::from_secs(60));
    drop(client);
    c.abandon();
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        mounts.contains(cluster::STATE)
            && Path::new("/sys/class/net").join(cluster::BRIDGE).exists(),
        "the killed run left its containers' mounts and the bridge (else this test shows nothing)"
    );

    let began = Instant::now();
    let c = TestCluster::with_node();
    let swept_and_started = began.elapsed();
    let rt2 = runtime();
    let client = c.client(&rt2);
    let pods = rt2
        .block_on(Api::<Pod>::namespaced(client.clone(), NS).list(&ListParams::default()))
        .unwrap();
    assert!(pods.items.is_empty(), "a new cluster starts empty");
    drop(client);
    let stopped_in = c.stop();
    assert_nothing_left();
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!(
        "swept and started again in {:.1} s, stopped in {:.1} s",
        swept_and_started.as_secs_f64(),
        stopped_in.as_secs_f64()
    );
}
