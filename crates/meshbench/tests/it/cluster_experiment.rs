//! Issue 35: an experiment file run on a cluster, end to end, on the real test node
//! (common/cluster.rs: kube-apiserver, the Deployment, ReplicaSet and Job controllers, a
//! kubelet with containerd, kube-proxy) with Istio installed as common/istio_node.rs does it
//! (istiod on this machine, its injector with Istio's sidecar and gateway templates) and
//! Prometheus scraping the kubelet's cAdvisor. The presets in examples/ run as a user runs
//! them, `meshbench experiment FILE --set ...` (the image, this machine's address on the
//! bridge, Prometheus, shorter steps):
//!
//! 1. istio/tools' twopods (`cluster-twopods.yaml`): baseline, serveronly and both from one
//!    backend and one agent pod, each step ok, each sidecar's CPU read from cAdvisor and its
//!    own request count through a port-forward to its admin; everything gone at the end.
//! 2. seed 000's gateway (`cluster-gateway-cpu-sweep.yaml`) at 10 domains, the gateway pod
//!    swept over 0.5 and 1 CPU: the kubelet's CFS quota of each gateway pod is the step's
//!    limit, the CPU measured is at or under it; a third limit no node can give fails its step
//!    in one line with the scheduler's reason, and the others stay; everything gone.
//! 3. A coordinator killed (SIGKILL) in the middle of a step: its watcher deletes the
//!    namespace and removes the run's local scratch directory (both in its journal), and
//!    nothing meshbench made is left on the cluster or in the run's temp directory.
//! 4. Ctrl-C (SIGINT to the run's process group) in the middle of a step: the run deletes its
//!    namespace before it exits (130).
//!
//! Where a kubelet cannot run, the test fails with `node_unavailable()`'s reason.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::cluster::{self, TestCluster, GATEWAY};
use common::istio_node::IstioOnNode;
use common::prometheus::{Prometheus, PrometheusOptions};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use meshbench_k8s::BlockingClient;
use serde_json::Value;

pub(crate) const IMAGE: &str = "localhost/meshbench:test";
const TOKEN: &str = "cluster-experiment-test-token-0123456789";
/// The longest one run may take (its steps, rollouts and the deletion at the end).
pub(crate) const RUN_WITHIN: Duration = Duration::from_secs(420);

fn preset(name: &str) -> String {
    format!("{}/../../examples/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// `meshbench experiment` of a preset on the node: `--set` each of `sets`, but a flag
/// (`--dry-run`) as it is.
pub(crate) fn command(preset_file: &str, store: &Path, sets: &[String]) -> Command {
    let mut cmd = Command::new(common::bin());
    cmd.args(["experiment", &preset(preset_file), "--quiet", "--store"])
        .arg(store)
        .env("MESHBENCH_AGENT_TOKEN", TOKEN)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for s in sets {
        match s.starts_with("--") {
            true => cmd.arg(s),
            false => cmd.args(["--set", s]),
        };
    }
    cmd
}

/// [`command`], started.
pub(crate) fn start(preset_file: &str, store: &Path, sets: &[String]) -> Child {
    command(preset_file, store, sets)
        .spawn()
        .expect("meshbench experiment")
}

/// A `--dry-run` of a preset with `sets`: its exit code, stdout and stderr.
pub(crate) fn dry_run(
    preset_file: &str,
    store: &Path,
    sets: &[String],
) -> (Option<i32>, String, String) {
    let mut sets = sets.to_vec();
    sets.push("--dry-run".into());
    let out = wait_with_limit(start(preset_file, store, &sets), Duration::from_secs(60));
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// The node's settings of every preset, and shorter steps.
pub(crate) fn node_sets(c: &TestCluster, prom: &Prometheus, namespace: &str) -> Vec<String> {
    let port = free_port_on_bridge();
    [
        format!("cluster.kubeconfig={}", c.kubeconfig.display()),
        format!("cluster.namespace={namespace}"),
        format!("cluster.image={IMAGE}"),
        "cluster.image_pull_policy=Never".into(),
        format!("cluster.coordinator={GATEWAY}:{port}"),
        format!("cluster.prometheus_url=http://{}", prom.addr),
        "cluster.scrape_interval_secs=1".into(),
        "cluster.agent_cpu=500m".into(),
        "cluster.agent_memory=256Mi".into(),
        "cluster.load_anti_affinity=preferred".into(),
        "cluster.rollout_timeout_secs=90".into(),
        "agents.count=1".into(),
        "duration_secs=8".into(),
        "warmup_secs=3".into(),
        "cooldown_secs=0".into(),
        "sample_interval_ms=1000".into(),
        "limits.proxy.memory_mib=256".into(),
    ]
    .into()
}

/// A port free on the bridge's address, for the coordinator.
fn free_port_on_bridge() -> u16 {
    std::net::TcpListener::bind((GATEWAY, 0))
        .expect("the bridge's address is this machine's")
        .local_addr()
        .unwrap()
        .port()
}

pub(crate) fn wait_with_limit(mut child: Child, limit: Duration) -> Output {
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "the run did not end within {limit:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    child.wait_with_output().unwrap()
}

/// Nothing meshbench made is on the cluster: not its namespace, not a journal (beside a store
/// named `results.db`).
pub(crate) fn assert_gone(k: &BlockingClient, namespace: &str, store: &Path) {
    assert!(
        k.get_cluster_scoped::<Namespace>(namespace)
            .unwrap()
            .is_none(),
        "namespace {namespace} is still there"
    );
    let journals = store.with_file_name("results-cluster-runs");
    let left: Vec<PathBuf> = std::fs::read_dir(&journals)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    assert!(left.is_empty(), "journals left: {left:?}");
}

fn usage<'a>(step: &'a Value, role: &str) -> Option<&'a Value> {
    step["usage"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["role"] == role)
}

#[test]
fn experiment_files_run_on_the_node_sweep_its_limits_and_leave_it_as_it_was() {
    if let Some(why) = cluster::node_unavailable() {
        panic!("a real Kubernetes node cannot run here: {why}");
    }
    let dir = common::scratch_dir("cluster-experiment");
    let c = TestCluster::with_node();
    let k = BlockingClient::from_kubeconfig(&c.kubeconfig).unwrap();
    let prom = Prometheus::start(&PrometheusOptions {
        kubelet_cadvisor: Some(c.kubelet_port.expect("the kubelet's port")),
        ..PrometheusOptions::default()
    });
    let store = dir.join("results.db");

    // 0. Before Istio is installed, the dry run prints every object and names what is
    // missing; the RBAC docs/kubernetes.md gives is accepted by the API server.
    let mut sets = node_sets(&c, &prom, "twopods");
    sets.push("limits.proxy.cpus=[0.5]".into());
    let (code, text, err) = dry_run("cluster-twopods.yaml", &store, &sets);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        text.contains("kind: Deployment")
            && text.contains("excludeOutboundPorts")
            && text.contains("# at the end: namespace twopods deleted"),
        "{text}"
    );
    assert!(
        err.contains("no CustomResourceDefinition peerauthentications.security.istio.io")
            && err.contains("sidecar injector is not installed")
            && err.lines().count() == 1,
        "{err}"
    );
    let mut ambient = node_sets(&c, &prom, "ambient");
    ambient.push("topologies=[baseline, ambient, waypoint]".into());
    let (code, text, err) = dry_run("cluster-twopods.yaml", &store, &ambient);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        text.contains("gatewayClassName: istio-waypoint")
            && text.contains("step 2 (ambient): Namespace ambient: labels")
            && text.contains("istio.io/dataplane-mode"),
        "{text}"
    );
    assert!(
        err.contains("no CustomResourceDefinition gateways.gateway.networking.k8s.io")
            && err.contains("no ztunnel DaemonSet in istio-system"),
        "{err}"
    );
    let rbac = std::fs::read_to_string(format!(
        "{}/../../deploy/cluster-experiment-rbac.yaml",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let rbac = meshbench_k8s::blocking::documents(&rbac).unwrap();
    k.apply(&serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "istio-system"}}))
        .unwrap();
    assert_eq!(k.apply_all(rbac).unwrap(), 2);

    c.load_meshbench_image(IMAGE);
    let istio = IstioOnNode::install(&c, &k, &dir);

    // Ambient cannot run here (no ztunnel, no Istio CNI): what meshbench renders for an
    // ambient and a waypoint step is checked against the API server, with the Gateway API's
    // CRD as Istio's go.mod pins it.
    let crd =
        std::fs::read_to_string(meshbench_lab::istio::cache().join("gateway-api-gateways.yaml"))
            .expect("run scripts/install-istio.sh");
    k.apply_all(meshbench_k8s::blocking::documents(&crd).unwrap())
        .unwrap();
    let system = meshbench_k8s::system::System {
        namespace: "ambient-check".into(),
        image: IMAGE.into(),
        pull_policy: "Never".into(),
        backend_args: vec![],
        server_sidecar: false,
        client_sidecar: false,
        gateway: false,
        waypoint: true,
        revision: None,
        node_selector: BTreeMap::from([("kubernetes.io/os".into(), "linux".into())]),
        tolerations: vec![meshbench_k8s::k8s_openapi::api::core::v1::Toleration {
            key: Some("meshbench.io/node".into()),
            operator: Some("Exists".into()),
            effect: Some("NoSchedule".into()),
            ..Default::default()
        }],
        coordinator_port: 7700,
        gateway_objects: vec![],
        proxy_logging: None,
        contour: None,
    };
    let shape = meshbench_k8s::system::Shape {
        ambient: true,
        use_waypoint: true,
        ..Default::default()
    };
    let objects = system.render(&shape);
    k.apply(&objects[0]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        // The Gateway API's CRD is served once established.
        match k.apply_all(objects[1..].to_vec()) {
            Ok(n) => break assert_eq!(n, objects.len() - 1),
            Err(e) => assert!(Instant::now() < deadline, "{e}"),
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let ns = k
        .get_cluster_scoped::<Namespace>("ambient-check")
        .unwrap()
        .unwrap();
    let labels = ns.metadata.labels.unwrap();
    assert_eq!(labels["istio.io/dataplane-mode"], "ambient");
    assert_eq!(labels["istio.io/use-waypoint"], "waypoint");
    k.delete_namespace("ambient-check").unwrap();

    // 1. twopods: baseline, serveronly, both.
    let began = Instant::now();
    sets.extend([
        "load.rate_rps=[200]".to_string(),
        "load.connections=[4]".into(),
    ]);
    let out = wait_with_limit(start("cluster-twopods.yaml", &store, &sets), RUN_WITHIN);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "twopods: {err}");
    let doc = common::export_json(&store);
    let steps = doc["steps"].as_array().unwrap();
    let variants: Vec<&str> = steps
        .iter()
        .map(|s| s["variant"].as_str().unwrap())
        .collect();
    assert_eq!(variants, ["baseline", "serveronly", "both"], "{err}");
    for s in steps {
        let topology = s["topology"].as_str().unwrap();
        assert_eq!(s["status"], "ok", "{topology}: {}", s["error"]);
        let sent = s["summary"]["requests"].as_u64().unwrap();
        assert!(sent >= 200 * 7, "{topology}: {}", s["summary"]);
        assert_eq!(s["summary"]["errors"], 0, "{topology}");
        let backend = usage(s, "backend").expect("the backend's use");
        assert!(
            backend["cpu_millicores_avg"].as_f64().unwrap() > 0.0,
            "{backend}"
        );
        let proxies: Vec<&str> = match topology {
            "baseline" => vec![],
            "serveronly" => vec!["server_proxy"],
            _ => vec!["client_proxy", "server_proxy"],
        };
        for role in proxies {
            let r =
                usage(s, role).unwrap_or_else(|| panic!("{topology}: no {role}: {}", s["usage"]));
            assert_eq!(r["program"], "istio", "{r}");
            let cpu = r["cpu_millicores_avg"].as_f64().unwrap();
            assert!(
                cpu > 5.0 && cpu <= 550.0,
                "{topology}/{role}: {cpu} mc: {r}"
            );
            assert!(
                r["working_set_mib_avg"].as_f64().unwrap_or(0.0) > 8.0,
                "{r}"
            );
            // Its Envoy's own count, through a port-forward to its admin: every request sent
            // in the measured window (and the warm-up's) went through it.
            let counted = r["proxy"]["requests"]["status_2xx"].as_u64().unwrap_or(0);
            assert!(
                counted >= sent,
                "{topology}/{role}: {counted} < {sent}: {r}"
            );
        }
        if topology == "baseline" {
            assert!(usage(s, "server_proxy").is_none(), "{}", s["usage"]);
        }
    }
    assert_gone(&k, "twopods", &store);
    eprintln!(
        "twopods: 3 steps ok in {:.0} s",
        began.elapsed().as_secs_f64()
    );

    // 2. the gateway at 10 domains, over two CPU limits, then one no node can give.
    let began = Instant::now();
    let mut sets = node_sets(&c, &prom, "gateway");
    sets.extend([
        "gateway.domains=10".to_string(),
        "gateway.paths=10".into(),
        "load.connections=[8]".into(),
        "limits.proxy.cpus=[0.5, 1, 64]".into(),
        "cluster.rollout_timeout_secs=60".into(),
    ]);
    let child = start("cluster-gateway-cpu-sweep.yaml", &store, &sets);
    // The kubelet's quota of every gateway pod, read while the run goes on.
    let mut quotas: BTreeMap<String, f64> = BTreeMap::new();
    let deadline = Instant::now() + RUN_WITHIN;
    let mut child = Some(child);
    let out = loop {
        if let Ok(pods) = k.list::<Pod>("gateway", "app=gateway") {
            for p in pods {
                let uid = p.metadata.uid.clone().unwrap_or_default();
                if let Ok((Some(cores), _)) = cluster::pod_cgroup_limits(&uid) {
                    quotas.insert(uid, cores);
                }
            }
        }
        let running = child.as_mut().unwrap();
        if running.try_wait().unwrap().is_some() {
            break child.take().unwrap().wait_with_output().unwrap();
        }
        assert!(Instant::now() < deadline, "the gateway run did not end");
        std::thread::sleep(Duration::from_millis(500));
    };
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    // One step failed (the limit no node gives): exit 1, the others stored ok.
    assert_eq!(out.status.code(), Some(1), "gateway: {err}");
    let doc = common::export_json(&store);
    let steps = doc["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 3, "{err}");
    for (s, limit) in steps.iter().zip([0.5, 1.0]) {
        assert_eq!(s["status"], "ok", "{limit} CPU: {}", s["error"]);
        let g = usage(s, "gateway").expect("the gateway's use");
        assert_eq!(g["cpu_limit"].as_f64(), Some(limit), "{g}");
        let cpu = g["cpu_millicores_avg"].as_f64().unwrap();
        assert!(
            cpu > 10.0 && cpu <= limit * 1000.0 * 1.05,
            "{limit} CPU: the gateway used {cpu} millicores: {g}"
        );
        let counted = g["proxy"]["requests"]["total"].as_u64().unwrap_or(0);
        assert!(counted >= s["summary"]["requests"].as_u64().unwrap(), "{g}");
        eprintln!(
            "gateway at {limit} CPU: {cpu:.0} millicores, {} req/s",
            s["summary"]["throughput_rps"]
        );
    }
    let mut seen: Vec<f64> = quotas.values().copied().collect();
    seen.sort_by(f64::total_cmp);
    seen.dedup();
    assert_eq!(
        seen,
        [0.5, 1.0],
        "the kubelet's quotas of the gateway pods: {quotas:?}"
    );
    let failed = &steps[2];
    assert_eq!(failed["status"], "failed");
    let why = failed["error"].to_string();
    assert!(
        why.contains("did not finish within 60 s")
            && why.contains("Insufficient cpu")
            && !why.contains("\\n"),
        "{why}"
    );
    assert_gone(&k, "gateway", &store);
    // The gateway's keys and certificates on this machine went with the run.
    let left: Vec<PathBuf> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("meshbench-cluster-"))
        })
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    eprintln!(
        "gateway: 2 limits ok, 1 refused, in {:.0} s",
        began.elapsed().as_secs_f64()
    );

    // 3. the coordinator killed in the middle of a step.
    let mut sets = node_sets(&c, &prom, "killed");
    sets.extend([
        "load.rate_rps=[100]".to_string(),
        "load.connections=[2]".into(),
        "duration_secs=60".into(),
        "limits.proxy.cpus=[0.5]".into(),
    ]);
    // A temp directory of its own, to see the run's scratch directory made and removed.
    let tmp = common::scratch_dir("killed-tmp");
    let scratch_dirs = || -> Vec<String> {
        std::fs::read_dir(&tmp)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("meshbench-cluster-"))
            .collect()
    };
    let mut child = command("cluster-twopods.yaml", &store, &sets)
        .env("TMPDIR", &tmp)
        .spawn()
        .expect("meshbench experiment");
    let deadline = Instant::now() + Duration::from_secs(240);
    // Halfway: the agent pod runs the first step's load.
    loop {
        let running = k
            .list::<Pod>("killed", "app.kubernetes.io/component=agent")
            .unwrap_or_default()
            .iter()
            .any(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"));
        if running {
            break;
        }
        if child.try_wait().unwrap().is_some() {
            let out = child.wait_with_output().unwrap();
            panic!(
                "the run ended early: {:?} {} {}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert!(Instant::now() < deadline, "the agent pod did not start");
        std::thread::sleep(Duration::from_millis(500));
    }
    std::thread::sleep(Duration::from_secs(15));
    assert_eq!(scratch_dirs().len(), 1, "the run's scratch directory");
    child.kill().unwrap();
    child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(180);
    while k
        .get_cluster_scoped::<Namespace>("killed")
        .unwrap()
        .is_some()
    {
        assert!(
            Instant::now() < deadline,
            "the watcher did not delete the namespace: {}",
            std::fs::read_to_string(store.with_file_name("results-cluster-runs"))
                .unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    // The watcher removes the journal once the namespace is gone.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let journals = store.with_file_name("results-cluster-runs");
        let left = std::fs::read_dir(&journals)
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| e.path().extension().is_some_and(|x| x == "jsonl"));
        if !left {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a journal is left in {}",
            journals.display()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_gone(&k, "killed", &store);
    assert_eq!(
        scratch_dirs(),
        Vec::<String>::new(),
        "left in {}",
        tmp.display()
    );

    // 4. Ctrl-C from a terminal: SIGINT to the run's whole process group, mid-step. The run
    // stores the step as partial, deletes its namespace before it exits, and says so.
    let mut sets = node_sets(&c, &prom, "interrupted");
    sets.extend([
        "load.rate_rps=[100]".to_string(),
        "load.connections=[2]".into(),
        "duration_secs=60".into(),
        "limits.proxy.cpus=[0.5]".into(),
    ]);
    let mut cmd = command("cluster-twopods.yaml", &store, &sets);
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let child = cmd.spawn().unwrap();
    let group = child.id() as i32;
    let deadline = Instant::now() + Duration::from_secs(240);
    while !k
        .list::<Pod>("interrupted", "app.kubernetes.io/component=agent")
        .unwrap_or_default()
        .iter()
        .any(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
    {
        assert!(Instant::now() < deadline, "the agent pod did not start");
        std::thread::sleep(Duration::from_millis(500));
    }
    std::thread::sleep(Duration::from_secs(15));
    // SAFETY: a signal to the process group this test started.
    assert_eq!(unsafe { libc::kill(-group, libc::SIGINT) }, 0);
    let out = wait_with_limit(child, Duration::from_secs(240));
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(err.contains("deleted namespace interrupted"), "{err}");
    assert_gone(&k, "interrupted", &store);

    drop(prom);
    drop(istio);
    c.stop();
    let _ = std::fs::remove_dir_all(dir);
}
