//! Issue 57 item 5: the seeds' placement on a cluster of two nodes, the suite's cluster grown a
//! second node on this machine (common/cluster.rs, `TestCluster::with_two_nodes`: a second
//! kubelet with its own containerd, node name, bridge and pods' subnet, routed through this
//! machine). Contour is deployed as its own example deploys it, Envoy a DaemonSet, one pod on
//! each node (common/contour_node.rs, `EnvoyAs::DaemonSet`). examples/cluster-contour.yaml runs
//! as a user runs it, in a process group of its own, with no coordinator and no Prometheus
//! named: the agents are reached through port-forwards and each role is read from the kubelet
//! of its own node through the API server.
//!
//! 0. Before Contour is there, `--dry-run` describes each step's change of Envoy's DaemonSet and
//!    fails naming it.
//! 1. The system under test is held to the second node (`system_under_test.node_selector` on a
//!    label only it has) and the agents kept off it (`load_anti_affinity: required`): read back
//!    from the pods' `spec.nodeName` while the run goes, the agents are on the first node, the
//!    backend on the second, an Envoy on each.
//! 2. Each kubelet's `/metrics/cadvisor` names its own node's pods only (so a role summed over
//!    both kubelets counts each container once).
//! 3. A sweep of Envoy's CPU limit (0.5, then 1) on the DaemonSet, killed with SIGKILL once the
//!    first step is stored (the DaemonSet then holds the second step's limit): while it runs,
//!    the CFS quota of the container `envoy` on both nodes is the step's limit; the run's
//!    watcher puts the `resources` of the DaemonSet and of Contour's Deployment back, field by
//!    field, and rolls every node's Envoy back; the stored step has read the backend from the
//!    second node's kubelet and the gateway from both (its CPU the sum of two Envoys), and
//!    counted both Envoys' requests (`proxy.pods` 2, at least every request sent).
//! 4. Per-hop attribution across the nodes (a test of its own, Istio installed as
//!    common/istio_node.rs does it): twopods at `[both]`, the agent and its sidecar on the
//!    first node, the backend and its sidecar on the second, every request tagged: each hop's
//!    clock is its pod's node, and the offset estimated between the two nodes' clocks (one
//!    machine, one clock) holds 0 within its bound.
//!
//! Where a kubelet cannot run, the tests fail with `node_unavailable()`'s reason.

use crate::cluster_experiment::{assert_gone, command, dry_run, IMAGE, RUN_WITHIN};
use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::cluster::{self, TestCluster, NODE, NODE2};
use common::contour_node::{self, ContourOnNode, EnvoyAs, CONTOUR_NS};
use common::istio_node::IstioOnNode;
use k8s_openapi::api::core::v1::{Node, Pod};
use meshbench_k8s::borrowed::WorkloadKind;
use meshbench_k8s::BlockingClient;
use meshbench_results::attribution::{Attribution, Node as Hop, Seen};
use meshbench_results::ChainRole;
use serde_json::{json, Value};

const PRESET: &str = "cluster-contour.yaml";
/// The label only the second node has; the system under test's node selector names it.
const POOL: (&str, &str) = ("meshbench-test/pool", "sut");

/// Where every run here puts its pods, and how it reaches them: the system under test on the
/// second node, the agents kept off it, no coordinator and no Prometheus (port-forwards, the
/// kubelets through the API server).
fn placed_sets(c: &TestCluster, namespace: &str) -> Vec<String> {
    vec![
        format!("cluster.kubeconfig={}", c.kubeconfig.display()),
        format!("cluster.namespace={namespace}"),
        format!("cluster.image={IMAGE}"),
        "cluster.image_pull_policy=Never".into(),
        "cluster.agent_cpu=500m".into(),
        "cluster.agent_memory=256Mi".into(),
        "cluster.load_anti_affinity=required".into(),
        format!(
            "cluster.system_under_test.node_selector={{{}: {}}}",
            POOL.0, POOL.1
        ),
        "cluster.rollout_timeout_secs=90".into(),
        "agents.count=1".into(),
        "cooldown_secs=0".into(),
        "sample_interval_ms=1000".into(),
        "limits.proxy.memory_mib=256".into(),
    ]
}

/// The two nodes, the second labelled for the system under test.
fn two_nodes() -> (TestCluster, BlockingClient) {
    let c = TestCluster::with_two_nodes();
    let k = BlockingClient::from_kubeconfig(&c.kubeconfig).unwrap();
    let nodes: BTreeSet<String> = k
        .list_cluster_scoped::<Node>()
        .unwrap()
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    assert_eq!(
        nodes,
        BTreeSet::from([NODE.to_string(), NODE2.to_string()]),
        "the cluster's nodes"
    );
    eprintln!(
        "two nodes Ready in {:.1} s (the cluster's start)",
        c.started_in.as_secs_f64()
    );
    // `/` in a label's key is `~1` in a JSON pointer.
    k.json_patch(
        &format!("/api/v1/nodes/{NODE2}"),
        "the second node's labels",
        &json!([{"op": "add", "path": format!("/metadata/labels/{}", POOL.0.replace('/', "~1")), "value": POOL.1}]),
    )
    .unwrap();
    (c, k)
}

/// The two nodes' settings and a small sweep of Envoy's CPU: 2 domains x 2 paths, an open
/// loop over 16 connections (Services spread connections, not requests, over the Envoys).
fn sets(c: &TestCluster, namespace: &str, cpus: &str) -> Vec<String> {
    let mut sets = placed_sets(c, namespace);
    sets.extend([
        "cluster.contour.envoy_kind=DaemonSet".to_string(),
        "duration_secs=8".into(),
        "warmup_secs=3".into(),
        "gateway.domains=2".into(),
        "gateway.paths=2".into(),
        "load.mode=open".into(),
        "load.rate_rps=[200]".into(),
        "load.connections=[16]".into(),
        "load.timeout_ms=2000".into(),
        format!("limits.proxy.cpus={cpus}"),
        "limits.control_plane.cpus=[0.5]".into(),
        "limits.control_plane.memory_mib=256".into(),
    ]);
    sets
}

/// Envoy's DaemonSet's and Contour's Deployment's containers' `resources`, by workload and
/// container.
fn contour_resources(k: &BlockingClient) -> Vec<(String, String, Value)> {
    [
        (WorkloadKind::DaemonSet, "envoy"),
        (WorkloadKind::Deployment, "contour"),
    ]
    .iter()
    .flat_map(|(kind, name)| {
        contour_node::resources_of(k, *kind, name)
            .into_iter()
            .map(move |(c, r)| (format!("{} {name}", kind.name()), c, r))
    })
    .collect()
}

/// Field by field: every container of both workloads has the `resources` it had before.
fn assert_put_back(k: &BlockingClient, before: &[(String, String, Value)]) {
    contour_node::assert_resources_put_back(before, &contour_resources(k));
}

/// What a role lacks besides the connection count (cAdvisor has none).
fn missing_but_connections(u: &Value) -> Vec<String> {
    u["missing"]
        .as_object()
        .map(|m| m.keys().filter(|k| *k != "connections").cloned().collect())
        .unwrap_or_default()
}

/// Every pod's node as the API server has it (`spec.nodeName`), by the pod's part: `agents`,
/// `backend` (the run's namespace), `envoy` (Contour's).
type Placed = BTreeMap<&'static str, BTreeMap<String, String>>;

/// Records where the pods of `namespace` and Contour's Envoy are, every 300 ms, until `done`.
fn watch_placement(
    kubeconfig: &Path,
    namespace: &str,
    placed: Arc<Mutex<Placed>>,
    done: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    let k = BlockingClient::from_kubeconfig(kubeconfig).unwrap();
    let namespace = namespace.to_string();
    std::thread::spawn(move || {
        while !done.load(Ordering::Relaxed) {
            let mut seen: Vec<(&'static str, Pod)> = Vec::new();
            for p in k.list::<Pod>(&namespace, "").unwrap_or_default() {
                let name = p.metadata.name.clone().unwrap_or_default();
                let part = match name.as_str() {
                    n if n.starts_with("meshbench-agents-") => "agents",
                    n if n.starts_with("backend-") => "backend",
                    _ => continue,
                };
                seen.push((part, p));
            }
            for p in k.list::<Pod>(CONTOUR_NS, "app=envoy").unwrap_or_default() {
                seen.push(("envoy", p));
            }
            let mut placed = placed.lock().unwrap();
            for (part, p) in seen {
                let node = p.spec.and_then(|s| s.node_name);
                if let (Some(name), Some(node)) = (p.metadata.name, node) {
                    placed.entry(part).or_default().insert(name, node);
                }
            }
            drop(placed);
            std::thread::sleep(Duration::from_millis(300));
        }
    })
}

/// The pods a kubelet's `/metrics/cadvisor` names in its CPU series (read on loopback, as
/// Prometheus scrapes it), and how many of its CPU series name no pod but a cgroup of
/// `other_node_cgroup`.
fn cadvisor_pods(port: u16, other_node_cgroup: &str) -> (BTreeSet<String>, usize) {
    let out = Command::new("curl")
        .args(["-sk", "-m", "10"])
        .arg(format!("https://127.0.0.1:{port}/metrics/cadvisor"))
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout);
    let label = |line: &str, name: &str| -> Option<String> {
        let at = line.find(&format!("{name}=\""))? + name.len() + 2;
        Some(line[at..].split('"').next()?.to_string())
    };
    let mut pods = BTreeSet::new();
    let mut other = 0;
    for line in text
        .lines()
        .filter(|l| l.starts_with("container_cpu_usage_seconds_total{"))
    {
        match label(line, "pod").filter(|p| !p.is_empty()) {
            Some(pod) => {
                pods.insert(pod);
            }
            None => {
                if label(line, "id").is_some_and(|id| id.starts_with(other_node_cgroup)) {
                    other += 1;
                }
            }
        }
    }
    (pods, other)
}

/// The CFS quota (cores; None: unlimited) of container `envoy` in every running Envoy pod, by
/// node.
fn envoy_quotas(k: &BlockingClient) -> BTreeMap<String, Option<f64>> {
    let mut out = BTreeMap::new();
    for p in k.list::<Pod>(CONTOUR_NS, "app=envoy").unwrap_or_default() {
        let uid = p.metadata.uid.clone().unwrap_or_default();
        let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
        let id = p
            .status
            .and_then(|s| s.container_statuses)
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.name == "envoy")
            .and_then(|c| c.container_id);
        if let (Some(node), Some(Ok(cores))) =
            (node, id.map(|id| cluster::container_cpu_quota(&uid, &id)))
        {
            out.insert(node, cores);
        }
    }
    out
}

#[test]
fn on_two_nodes_the_agents_and_the_system_under_test_part_and_each_nodes_envoy_is_swept_and_put_back(
) {
    if let Some(why) = cluster::node_unavailable() {
        panic!("a real Kubernetes node cannot run here: {why}");
    }
    let dir = common::scratch_dir("cluster-two-nodes");
    let (c, k) = two_nodes();
    let store = dir.join("results.db");

    // 0. Before Contour is there: each step's change of the DaemonSet, and what is missing.
    let (code, text, err) = dry_run(PRESET, &store, &sets(&c, "two-dry", "[0.5, 1]"));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        text.contains("step 1 (gateway proxy=0.5cpu): the objects above; DaemonSet projectcontour/envoy (container envoy): resources {\"limits\":{\"cpu\":\"500m\",\"memory\":\"256Mi\"}")
            && text.contains("(DaemonSet envoy, Deployment contour) put back as they were"),
        "{text}"
    );
    assert!(
        err.contains("no DaemonSet projectcontour/envoy")
            && err.contains("no Deployment projectcontour/contour"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");

    c.load_meshbench_image(IMAGE);
    let began = Instant::now();
    ContourOnNode::install_as(&c, &k, &dir, EnvoyAs::DaemonSet);
    eprintln!(
        "Contour and its Envoy DaemonSet ready on both nodes in {:.0} s",
        began.elapsed().as_secs_f64()
    );
    let before = contour_resources(&k);
    assert_eq!(before.len(), 2, "{before:?}");

    // 1-3. The sweep, its pods' nodes watched, killed with SIGKILL once the first step is
    // stored.
    let namespace = "two-nodes";
    let placed = Arc::new(Mutex::new(Placed::new()));
    let done = Arc::new(AtomicBool::new(false));
    let watcher = watch_placement(&c.kubeconfig, namespace, placed.clone(), done.clone());
    let began = Instant::now();
    let mut cmd = command(PRESET, &store, &sets(&c, namespace, "[0.5, 1]"));
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = cmd.spawn().expect("meshbench experiment");
    let envoy_cpu = |k: &BlockingClient| -> Value {
        contour_node::resources_of(k, WorkloadKind::DaemonSet, "envoy")
            .into_iter()
            .find(|(c, _)| c == "envoy")
            .map(|(_, r)| r["limits"]["cpu"].clone())
            .unwrap_or(Value::Null)
    };
    let deadline = Instant::now() + RUN_WITHIN;
    let mut quotas_at_half: BTreeMap<String, f64> = BTreeMap::new();
    let mut kubelets_read = None;
    // The second step's limit on the DaemonSet: the first step is stored.
    while envoy_cpu(&k) != json!("1") && envoy_cpu(&k) != json!("1000m") {
        if envoy_cpu(&k) == json!("500m") {
            for (node, cores) in envoy_quotas(&k) {
                if cores == Some(0.5) {
                    quotas_at_half.insert(node, 0.5);
                }
            }
            // Once the load runs (both nodes' pods up): what each kubelet names.
            let agents_up = placed.lock().unwrap().contains_key("agents");
            if kubelets_read.is_none() && agents_up && quotas_at_half.len() == 2 {
                let second = "/meshbench-k8s/node2/".to_string();
                let read: Vec<(&str, BTreeSet<String>, usize)> = c
                    .kubelets
                    .iter()
                    .map(|(node, port)| {
                        let other = match *node == NODE {
                            true => second.clone(),
                            // The first node's pods' cgroups, seen from the second.
                            false => "/meshbench-k8s/kubepods/".to_string(),
                        };
                        let (pods, raw) = cadvisor_pods(*port, &other);
                        (*node, pods, raw)
                    })
                    .collect();
                kubelets_read = Some(read);
            }
        }
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            panic!(
                "the run ended early ({status}): {}\n{}",
                String::from_utf8_lossy(&out.stderr),
                contour_node::logs(&k)
            );
        }
        assert!(Instant::now() < deadline, "the second step never began");
        std::thread::sleep(Duration::from_millis(300));
    }
    child.kill().unwrap();
    let out = child.wait_with_output().unwrap();
    eprintln!(
        "killed after {:.0} s: {}",
        began.elapsed().as_secs_f64(),
        String::from_utf8_lossy(&out.stderr)
    );
    done.store(true, Ordering::Relaxed);
    watcher.join().unwrap();

    // Placement, from `spec.nodeName`.
    let placed = placed.lock().unwrap().clone();
    let nodes_of = |part: &str| -> BTreeSet<String> {
        placed
            .get(part)
            .map(|p| p.values().cloned().collect())
            .unwrap_or_default()
    };
    eprintln!("placed: {placed:?}");
    assert_eq!(
        nodes_of("agents"),
        BTreeSet::from([NODE.to_string()]),
        "{placed:?}"
    );
    assert_eq!(
        nodes_of("backend"),
        BTreeSet::from([NODE2.to_string()]),
        "{placed:?}"
    );
    assert_eq!(
        nodes_of("envoy"),
        BTreeSet::from([NODE.to_string(), NODE2.to_string()]),
        "{placed:?}"
    );
    // The step's limit on each node's Envoy.
    assert_eq!(
        quotas_at_half,
        BTreeMap::from([(NODE.to_string(), 0.5), (NODE2.to_string(), 0.5)]),
        "the CFS quota of each node's envoy container during the first step"
    );
    // Each kubelet names its own node's pods only.
    let read = kubelets_read.expect("the kubelets were read while the first step ran");
    for (node, pods, raw) in &read {
        let here: BTreeSet<String> = placed
            .values()
            .flat_map(|p| p.iter())
            .filter(|(_, n)| n == node)
            .map(|(p, _)| p.clone())
            .collect();
        let elsewhere: BTreeSet<String> = placed
            .values()
            .flat_map(|p| p.iter())
            .filter(|(_, n)| n != node)
            .map(|(p, _)| p.clone())
            .collect();
        eprintln!(
            "kubelet of {node}: CPU series of {} pod(s), {raw} series of the other node's cgroups without a pod: {pods:?}",
            pods.len()
        );
        assert!(
            pods.is_disjoint(&elsewhere),
            "{node}: {pods:?} vs the other node's {elsewhere:?}"
        );
        assert!(
            here.iter()
                .any(|p| p.starts_with("envoy-") && pods.contains(p)),
            "{node}'s kubelet does not name its Envoy: {pods:?} (here: {here:?})"
        );
        assert_eq!(*raw, 0, "{node}'s kubelet reports the other node's cgroups");
    }

    // Put back, field by field, every node's Envoy rolled back.
    cluster::wait_journal_gone(&store, Duration::from_secs(240));
    assert_put_back(&k, &before);
    assert_gone(&k, namespace, &store);
    let stop = meshbench_engine::Stop::new();
    k.wait_rollout_of(
        WorkloadKind::DaemonSet,
        CONTOUR_NS,
        "envoy",
        Duration::from_secs(5),
        &stop,
    )
    .unwrap();
    let journals = store.with_file_name("results-cluster-runs");
    let said = cluster::files_ending(&journals, "log");
    assert!(
        said.contains("put back the resources of DaemonSet projectcontour/envoy (container envoy) as they were: {}")
            && said.contains("put back the resources of Deployment projectcontour/contour (container contour) as they were: {}"),
        "{said}"
    );
    // Rolled back: each node's Envoy unlimited again, as it was.
    let back = envoy_quotas(&k);
    assert_eq!(
        back,
        BTreeMap::from([(NODE.to_string(), None), (NODE2.to_string(), None)]),
        "every node's Envoy back"
    );

    // The stored step: read from each role's node, both Envoys counted.
    let doc = common::export_json(&store);
    let steps = doc["steps"].as_array().unwrap();
    assert!(!steps.is_empty(), "no step stored");
    let s = &steps[0];
    assert_eq!(s["status"], "ok", "{}", s["error"]);
    assert_eq!(
        s["usage_source"]["reader"], "kubelet",
        "{}",
        s["usage_source"]
    );
    let sent = s["summary"]["requests"].as_u64().unwrap();
    assert!(sent >= 200 * 7, "{}", s["summary"]);
    assert_eq!(s["summary"]["errors"], 0, "{}", s["summary"]);
    let g = common::usage_of(s, "gateway");
    assert_eq!(g["program"], "contour", "{g}");
    assert_eq!(g["cpu_limit"].as_f64(), Some(0.5), "{g}");
    assert!(missing_but_connections(g).is_empty(), "{g}");
    let cpu = g["cpu_millicores_avg"].as_f64().unwrap();
    // Two Envoys at half a core each.
    assert!(
        cpu > 5.0 && cpu <= 1050.0,
        "the Envoys used {cpu} millicores: {g}"
    );
    assert_eq!(g["proxy"]["pods"], 2, "{g}");
    let counted = g["proxy"]["requests"]["total"].as_u64().unwrap_or(0);
    assert!(
        counted >= sent,
        "the Envoys counted {counted} < {sent} sent: {g}"
    );
    let backend = common::usage_of(s, "backend");
    assert!(missing_but_connections(backend).is_empty(), "{backend}");
    assert!(
        backend["cpu_millicores_avg"].as_f64().unwrap_or(0.0) > 1.0,
        "the backend, on {NODE2}, read from its kubelet: {backend}"
    );
    let contour = common::usage_of(s, "contour");
    assert!(missing_but_connections(contour).is_empty(), "{contour}");
    assert!(
        contour["working_set_mib_avg"].as_f64().unwrap_or(0.0) > 1.0,
        "{contour}"
    );
    eprintln!(
        "killed run: step 1 ok, {sent} requests, two Envoys {cpu:.0} millicores and {counted} requests counted, the backend {:.0} millicores on {NODE2}; put back in {:.0} s in all",
        backend["cpu_millicores_avg"].as_f64().unwrap_or(0.0),
        began.elapsed().as_secs_f64()
    );
    c.stop();
    let _ = std::fs::remove_dir_all(dir);
}

/// Each hop's clock is its pod's node: the agent's sidecar on the first node, the backend's on
/// the second, and the offset estimated between them from the crossings of the link between
/// the sidecars holds 0 within its bound (one machine, one clock).
#[test]
fn attribution_across_two_nodes_names_each_nodes_clock_and_finds_them_one() {
    if let Some(why) = cluster::node_unavailable() {
        panic!("a real Kubernetes node cannot run here: {why}");
    }
    let dir = common::scratch_dir("cluster-two-nodes-attribution");
    let (c, k) = two_nodes();
    c.load_meshbench_image(IMAGE);
    let began = Instant::now();
    let _istio = IstioOnNode::install(&c, &k, &dir);
    eprintln!("istiod ready in {:.0} s", began.elapsed().as_secs_f64());
    let store = dir.join("results.db");
    let namespace = "two-nodes-attr";
    let mut sets = placed_sets(&c, namespace);
    sets.extend([
        "topologies=[both]".to_string(),
        "attribution.sample=1".into(),
        "load.rate_rps=[100]".into(),
        "load.connections=[4]".into(),
        "duration_secs=5".into(),
        "warmup_secs=2".into(),
        "limits.proxy.cpus=[0.5]".into(),
        "backend.threads=1".into(),
    ]);
    let began = Instant::now();
    let out = crate::cluster_experiment::wait_with_limit(
        crate::cluster_experiment::start("cluster-twopods.yaml", &store, &sets),
        RUN_WITHIN,
    );
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{err}");
    assert_gone(&k, namespace, &store);
    let doc = common::export_json(&store);
    let step = &doc["steps"][0];
    assert_eq!(step["status"], "ok", "{}", step["error"]);
    let a: Attribution = serde_json::from_value(step["attribution"].clone())
        .unwrap_or_else(|e| panic!("its attribution: {e}: {}", step["attribution"]));
    let seen: Vec<(ChainRole, Seen)> = a.path.iter().map(|h| (h.role, h.seen)).collect();
    assert_eq!(
        seen,
        [
            (ChainRole::ClientProxy, Seen::PerRequest),
            (ChainRole::ServerProxy, Seen::PerRequest)
        ]
    );
    assert!(a.sampled >= 450, "{} sampled", a.sampled);
    for k in &a.clocks {
        eprintln!(
            "clock {:?} ({}) -> {:?} ({}): {} ns ± {} ns over {} requests",
            k.from, k.from_clock, k.to, k.to_clock, k.offset_ns, k.bound_ns, k.requests
        );
    }
    let apart = a
        .clocks
        .iter()
        .find(|k| k.to == Hop::Hop(ChainRole::ServerProxy))
        .unwrap_or_else(|| panic!("no clock estimate to the server sidecar: {:?}", a.clocks));
    assert_eq!(apart.from, Hop::Hop(ChainRole::ClientProxy));
    assert_eq!(
        (apart.from_clock.as_str(), apart.to_clock.as_str()),
        (NODE, NODE2),
        "each hop's clock is its pod's node"
    );
    assert!(
        apart.offset_ns.unsigned_abs() <= apart.bound_ns && apart.bound_ns <= 1_000_000,
        "one machine's clock, seen from two nodes: {apart:?}"
    );
    eprintln!(
        "attribution across two nodes in {:.0} s: {} requests split",
        began.elapsed().as_secs_f64(),
        a.sampled
    );
    c.stop();
    let _ = std::fs::remove_dir_all(dir);
}
