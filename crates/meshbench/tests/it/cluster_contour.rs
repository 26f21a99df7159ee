//! Issue 49 item 5: `gateway.type: contour` on a cluster uses the cluster's Contour, on the
//! real test node (common/cluster.rs) with Contour deployed there as its manifests shape it
//! (common/contour_node.rs) and Prometheus scraping the kubelet's cAdvisor. The preset
//! examples/cluster-contour.yaml runs as a user runs it, in a process group of its own:
//!
//! 0. before Contour is there, `--dry-run` prints the objects and each step's change of
//!    Contour's Deployments, and fails naming the HTTPProxy CRD, both Deployments and the
//!    Service;
//! 1. a sweep of Envoy's CPU limit (0.5, then 1) with Contour limited too, killed with SIGKILL
//!    once the first step is stored (Envoy's Deployment then holds the second step's limit);
//!    while it runs the CFS quota of the containers `contour` and `envoy` is the step's limit;
//!    the run's watcher puts the `resources` of both Deployments back (checked field by field
//!    against what they were before the run) and deletes the namespace; the store keeps the
//!    measured step: requests served through Contour's Envoy, no error, Envoy's own count of
//!    them through its stats port (the witness), Envoy's and Contour's CPU from cAdvisor with
//!    their limits;
//! 2. Ctrl-C (SIGINT to the run's process group) while the first step runs: the run puts them
//!    back itself before it exits 130;
//! 3. a run that ends by itself puts them back the same way;
//! 4. `meshbench k8s restore JOURNAL` by hand puts back what a journal holds.
//!
//! Where a kubelet cannot run, the test fails with `node_unavailable()`'s reason.

use crate::cluster_experiment::{
    assert_gone, command, dry_run, node_sets, wait_with_limit, IMAGE, RUN_WITHIN,
};
use crate::common;

use std::time::{Duration, Instant};

use common::cluster::{self, TestCluster};
use common::contour_node::{self, ContourOnNode, CONTOUR_NS};
use common::prometheus::{Prometheus, PrometheusOptions};
use meshbench_k8s::BlockingClient;
use serde_json::{json, Value};

const PRESET: &str = "cluster-contour.yaml";

/// The node's settings, and a small sweep: 2 domains x 2 paths, an open loop.
fn sets(c: &TestCluster, prom: &Prometheus, namespace: &str, cpus: &str) -> Vec<String> {
    let mut sets = node_sets(c, prom, namespace);
    sets.extend([
        "gateway.domains=2".to_string(),
        "gateway.paths=2".into(),
        "load.mode=open".into(),
        "load.rate_rps=[200]".into(),
        "load.connections=[4]".into(),
        "load.timeout_ms=2000".into(),
        format!("limits.proxy.cpus={cpus}"),
        "limits.control_plane.cpus=[0.5]".into(),
        "limits.control_plane.memory_mib=256".into(),
    ]);
    sets
}

/// Both Deployments' containers' `resources`, by Deployment and container.
fn contour_resources(k: &BlockingClient) -> Vec<(String, String, Value)> {
    ["contour", "envoy"]
        .iter()
        .flat_map(|d| {
            contour_node::resources(k, d)
                .into_iter()
                .map(move |(c, r)| (d.to_string(), c, r))
        })
        .collect()
}

/// Field by field: every container of both Deployments has the `resources` it had before,
/// each of `requests` and `limits` (and any other field) with the same keys and values.
fn assert_put_back(k: &BlockingClient, before: &[(String, String, Value)]) {
    contour_node::assert_resources_put_back(before, &contour_resources(k));
}

#[test]
fn contours_envoy_swept_on_the_node_is_put_back_after_a_sigkill_and_at_the_end() {
    if let Some(why) = cluster::node_unavailable() {
        panic!("a real Kubernetes node cannot run here: {why}");
    }
    let dir = common::scratch_dir("cluster-contour");
    let c = TestCluster::with_node();
    let k = BlockingClient::from_kubeconfig(&c.kubeconfig).unwrap();
    let prom = Prometheus::start(&PrometheusOptions {
        kubelet_cadvisor: Some(c.kubelet_port.expect("the kubelet's port")),
        ..PrometheusOptions::default()
    });
    let store = dir.join("results.db");

    // 0. Before Contour is there: the plan, and what is missing, named.
    let (code, text, err) = dry_run(PRESET, &store, &sets(&c, &prom, "contour-dry", "[0.5, 1]"));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        text.contains("kind: HTTPProxy")
            && text.contains("kind: Secret")
            && text.contains("step 1 (gateway proxy=0.5cpu): the objects above; Deployment projectcontour/envoy (container envoy): resources")
            && text.contains("Deployment projectcontour/contour (container contour): resources {\"limits\":{\"cpu\":\"500m\",\"memory\":\"256Mi\"}")
            && text.contains("put back as they were"),
        "{text}"
    );
    for missing in [
        "no CustomResourceDefinition httpproxies.projectcontour.io",
        "no Deployment projectcontour/contour",
        "no Deployment projectcontour/envoy",
        "no Service projectcontour/envoy",
    ] {
        assert!(err.contains(missing), "{missing}: {err}");
    }
    assert_eq!(err.trim().lines().count(), 1, "{err}");

    c.load_meshbench_image(IMAGE);
    let began = Instant::now();
    ContourOnNode::install(&c, &k, &dir);
    eprintln!(
        "Contour and its Envoy ready on the node in {:.0} s",
        began.elapsed().as_secs_f64()
    );
    let before = contour_resources(&k);
    assert_eq!(before.len(), 2, "{before:?}");

    // 1. The sweep, killed with SIGKILL once the first step is stored.
    let began = Instant::now();
    let mut cmd = command(
        PRESET,
        &store,
        &sets(&c, &prom, "contour-killed", "[0.5, 1]"),
    );
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = cmd.spawn().expect("meshbench experiment");
    let envoy_cpu = |k: &BlockingClient| -> Value {
        contour_node::resources(k, "envoy")
            .into_iter()
            .find(|(c, _)| c == "envoy")
            .map(|(_, r)| r["limits"]["cpu"].clone())
            .unwrap_or(Value::Null)
    };
    let deadline = Instant::now() + RUN_WITHIN;
    let mut first_limit_seen = false;
    let mut quotas: std::collections::BTreeMap<(&str, String), f64> = Default::default();
    // The second step's limit on Envoy's Deployment: the first step is stored (a step is stored
    // before the next one is realised).
    while envoy_cpu(&k) != json!("1") && envoy_cpu(&k) != json!("1000m") {
        first_limit_seen |= envoy_cpu(&k) == json!("500m");
        // The kubelet's CFS quota of each of Contour's and its Envoy's pods, as the run goes.
        for app in ["envoy", "contour"] {
            for p in k
                .list::<k8s_openapi::api::core::v1::Pod>(CONTOUR_NS, &format!("app={app}"))
                .unwrap_or_default()
            {
                // The container's own cgroup: Envoy's init container has no limit, so its pod
                // has no quota at the pod's level.
                let uid = p.metadata.uid.clone().unwrap_or_default();
                let id = p
                    .status
                    .and_then(|s| s.container_statuses)
                    .unwrap_or_default()
                    .into_iter()
                    .find(|c| c.name == app)
                    .and_then(|c| c.container_id);
                if let Some(Ok(Some(cores))) = id.map(|id| cluster::container_cpu_quota(&uid, &id))
                {
                    quotas.insert((app, uid), cores);
                }
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
    assert!(first_limit_seen, "the first step's limit was never seen");
    let quota_of = |app: &str| -> Vec<f64> {
        let mut q: Vec<f64> = quotas
            .iter()
            .filter(|((a, _), _)| *a == app)
            .map(|(_, c)| *c)
            .collect();
        q.sort_by(f64::total_cmp);
        q.dedup();
        q
    };
    // Contour's pod at 0.5 CPU; Envoy's at 0.5 (the first step), perhaps 1 already (the second).
    assert_eq!(quota_of("contour"), [0.5], "{quotas:?}");
    assert!(quota_of("envoy").contains(&0.5), "{quotas:?}");
    child.kill().unwrap();
    let out = child.wait_with_output().unwrap();
    eprintln!(
        "killed after {:.0} s: {}",
        began.elapsed().as_secs_f64(),
        String::from_utf8_lossy(&out.stderr)
    );
    cluster::wait_journal_gone(&store, Duration::from_secs(240));
    assert_put_back(&k, &before);
    assert_gone(&k, "contour-killed", &store);
    // Put back means rolled back: Envoy's pods run the template as it was.
    let stop = meshbench_engine::Stop::new();
    k.wait_rollout(CONTOUR_NS, "envoy", Duration::from_secs(5), &stop)
        .unwrap();
    let doc = common::export_json(&store);
    let steps = doc["steps"].as_array().unwrap();
    assert!(!steps.is_empty(), "no step stored");
    let s = &steps[0];
    assert_eq!(s["status"], "ok", "{}", s["error"]);
    let sent = s["summary"]["requests"].as_u64().unwrap();
    assert!(sent >= 200 * 7, "{}", s["summary"]);
    assert_eq!(s["summary"]["errors"], 0, "{}", s["summary"]);
    let g = common::usage_of(s, "gateway");
    assert_eq!(g["program"], "contour", "{g}");
    assert_eq!(g["cpu_limit"].as_f64(), Some(0.5), "{g}");
    let cpu = g["cpu_millicores_avg"].as_f64().unwrap();
    assert!(
        cpu > 5.0 && cpu <= 525.0,
        "Envoy used {cpu} millicores: {g}"
    );
    let counted = g["proxy"]["requests"]["total"].as_u64().unwrap_or(0);
    assert!(
        counted >= sent,
        "Envoy counted {counted} < {sent} sent: {g}"
    );
    let contour = common::usage_of(s, "contour");
    assert_eq!(contour["program"], "contour", "{contour}");
    assert_eq!(contour["cpu_limit"].as_f64(), Some(0.5), "{contour}");
    assert!(
        contour["working_set_mib_avg"].as_f64().unwrap_or(0.0) > 1.0,
        "{contour}"
    );
    eprintln!(
        "killed run: step 1 ok, {sent} requests, Envoy {cpu:.0} millicores, counted {counted}; put back in {:.0} s in all",
        began.elapsed().as_secs_f64()
    );

    // The watcher said what it put back, the last recorded first: Contour, Envoy, the namespace.
    let journals = store.with_file_name("results-cluster-runs");
    let said = cluster::files_ending(&journals, "log");
    let envoy_line = said.find("put back the resources of Deployment projectcontour/envoy (container envoy) as they were: {}");
    let contour_line = said.find("put back the resources of Deployment projectcontour/contour (container contour) as they were: {}");
    let namespace_line = said.find("deleted namespace contour-killed");
    assert!(
        contour_line.is_some() && envoy_line.is_some() && namespace_line.is_some(),
        "{said}"
    );
    assert!(
        contour_line < envoy_line && envoy_line < namespace_line,
        "{said}"
    );

    // 2. Ctrl-C (SIGINT to the run's process group) while the first step runs: the run puts
    // them back before it exits.
    let began = Instant::now();
    let mut cmd = command(
        PRESET,
        &store,
        &sets(&c, &prom, "contour-interrupted", "[0.5]"),
    );
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = cmd.spawn().unwrap();
    let group = child.id() as i32;
    let deadline = Instant::now() + RUN_WITHIN;
    while envoy_cpu(&k) != json!("500m") {
        assert!(child.try_wait().unwrap().is_none(), "the run ended early");
        assert!(Instant::now() < deadline, "the step's limit was never set");
        std::thread::sleep(Duration::from_millis(300));
    }
    std::thread::sleep(Duration::from_secs(8));
    // SAFETY: a signal to the process group this test started.
    assert_eq!(unsafe { libc::kill(-group, libc::SIGINT) }, 0);
    let out = wait_with_limit(child, Duration::from_secs(240));
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(
        err.contains("put back the resources of Deployment projectcontour/envoy"),
        "{err}"
    );
    assert_put_back(&k, &before);
    assert_gone(&k, "contour-interrupted", &store);
    eprintln!(
        "interrupted run: exit 130, put back, in {:.0} s",
        began.elapsed().as_secs_f64()
    );

    // 3. A run that ends by itself puts them back too.
    let began = Instant::now();
    let done_store = dir.join("done").join("results.db");
    std::fs::create_dir_all(done_store.parent().unwrap()).unwrap();
    let mut cmd = command(
        PRESET,
        &done_store,
        &sets(&c, &prom, "contour-done", "[0.5]"),
    );
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let out = wait_with_limit(cmd.spawn().unwrap(), RUN_WITHIN);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{err}");
    assert_put_back(&k, &before);
    assert_gone(&k, "contour-done", &done_store);
    let doc = common::export_json(&done_store);
    let s = &doc["steps"][0];
    assert_eq!(s["status"], "ok", "{}", s["error"]);
    assert_eq!(s["summary"]["errors"], 0, "{}", s["summary"]);
    eprintln!(
        "run to its end: ok, put back, in {:.0} s",
        began.elapsed().as_secs_f64()
    );

    // 4. `meshbench k8s restore JOURNAL` by hand (a machine that died with the run): a journal
    // as a run writes it, Envoy's limit changed after it was recorded.
    let hand = dir.join("hand.jsonl");
    let mut journal = meshbench_k8s::undo::Journal::create(
        &hand,
        &meshbench_k8s::undo::Header {
            pid: std::process::id(),
            kubeconfig: Some(c.kubeconfig.clone()),
        },
    )
    .unwrap();
    let envoy = meshbench_k8s::borrowed::Borrowed {
        namespace: CONTOUR_NS.into(),
        kind: meshbench_k8s::borrowed::WorkloadKind::Deployment,
        name: "envoy".into(),
        container: "envoy".into(),
    };
    journal
        .record(&meshbench_k8s::undo::Undo::RestoreResources {
            namespace: envoy.namespace.clone(),
            kind: envoy.kind,
            name: envoy.name.clone(),
            container: envoy.container.clone(),
            before: envoy.resources(&k).unwrap(),
        })
        .unwrap();
    drop(journal);
    envoy
        .set_resources(
            &k,
            &json!({"limits": {"cpu": "300m", "memory": "200Mi"}, "requests": {"cpu": "300m"}}),
        )
        .unwrap();
    assert_eq!(envoy_cpu(&k), json!("300m"));
    let out = common::meshbench(
        &["k8s", "restore", hand.to_str().unwrap()],
        Duration::from_secs(200),
    );
    let err = common::stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("put back the resources of Deployment projectcontour/envoy (container envoy)"),
        "{err}"
    );
    assert!(!hand.exists(), "the journal is removed once undone");
    assert_put_back(&k, &before);

    drop(prom);
    c.stop();
    let _ = std::fs::remove_dir_all(dir);
}
