//! A cluster step's set-up against a stop, without a cluster (issue 47): an API server that
//! answers the few reads the set-up makes (a Deployment, its pods) and a Prometheus that never
//! has the roles' series, both played on loopback. A stop while the step waits (for its
//! rollout, for Prometheus) ends the wait within a tenth of a second, and the step fails as
//! stopped before its load: not measured as if it were ready, not failed as if the system had.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use meshbench_engine::Stop;
use meshbench_experiment::config::{parse, Experiment};
use meshbench_experiment::{Plan, Work};
use meshbench_results::StepFailure;
use serde_json::json;

use super::{agents_of, connect, shape_of, system_of, ClusterSite};
use crate::measured::{Place, StepContext};
use crate::observer::{Quiet, StepAt};

/// An HTTP server on loopback (keep-alive, GETs only) that answers each request line with
/// `answer`'s status and JSON; returns its URL.
fn serve(answer: impl Fn(&str) -> (u16, String) + Send + Sync + 'static) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let url = format!("http://{}", listener.local_addr().expect("bound"));
    let answer = Arc::new(answer);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let answer = answer.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().expect("a clone"));
                let mut writer = stream;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let mut header = String::new();
                    while reader.read_line(&mut header).unwrap_or(0) > 2 {
                        header.clear();
                    }
                    let (code, body) = answer(line.trim_end());
                    let sent = write!(
                        writer,
                        "HTTP/1.1 {code} X\r\ncontent-type: application/json\r\n\
                         content-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if sent.is_err() {
                        return;
                    }
                }
            });
        }
    });
    url
}

/// The backend's Deployment (its rollout done or not) and its one pod, ready, at an address.
fn api_server(rollout_done: bool) -> String {
    serve(move |line| {
        let path = line.split(' ').nth(1).unwrap_or_default();
        if path.contains("/deployments/backend") {
            let available = if rollout_done { 1 } else { 0 };
            let d = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "backend", "namespace": "stopped", "generation": 1},
                "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "backend"}},
                    "template": {}},
                "status": {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1,
                    "availableReplicas": available}});
            (200, d.to_string())
        } else if path.contains("/pods") {
            let ready = if rollout_done { "True" } else { "False" };
            let pod = json!({"metadata": {"name": "backend-1", "namespace": "stopped",
                    "creationTimestamp": "2026-11-27T10:00:00Z"},
                "spec": {"containers": []},
                "status": {"phase": "Running", "podIP": "10.0.0.5",
                    "conditions": [{"type": "Ready", "status": ready}]}});
            let list = json!({"kind": "PodList", "apiVersion": "v1", "metadata": {},
                "items": [pod]});
            (200, list.to_string())
        } else {
            let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                "reason": "NotFound", "code": 404, "message": "not found"});
            (404, status.to_string())
        }
    })
}

/// A Prometheus that answers every query with no series; and how many it was asked.
fn prometheus() -> (String, Arc<AtomicUsize>) {
    let asked = Arc::new(AtomicUsize::new(0));
    let count = asked.clone();
    let url = serve(move |_| {
        count.fetch_add(1, Ordering::Relaxed);
        let empty = json!({"status": "success", "data": {"resultType": "vector", "result": []}});
        (200, empty.to_string())
    });
    (url, asked)
}

/// A baseline experiment on the cluster `api` with Prometheus at `prom`.
fn experiment(dir: &Path, api: &str, prom: &str) -> Experiment {
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: t\n  cluster:\n    server: {api}\n\
             users:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: t\n  context: \
             {{cluster: t, user: u}}\ncurrent-context: t\n"
        ),
    )
    .expect("a kubeconfig");
    let text = format!(
        "name: stopped\ntopologies: [baseline]\ncluster:\n  namespace: stopped\n  \
         image: meshbench:test\n  coordinator: 127.0.0.1:7700\n  prometheus_url: {prom}\n  \
         kubeconfig: {}\n",
        kubeconfig.display()
    );
    parse("stopped.yaml", &text, &[]).expect("a valid experiment")
}

/// The site as the bring-up leaves it: the first step's shape applied.
fn site(e: &Experiment, stop: &Stop) -> ClusterSite {
    let section = e.cluster.clone().expect("a cluster section");
    let system = system_of(e, &section);
    let agents = agents_of(e, &section, &system, "a-token-of-twenty-chars", "").render();
    let plan = Plan::compile(e);
    let Work::Chain(variant, _) = &plan.steps[0].work else {
        panic!("a chain");
    };
    ClusterSite {
        client: connect(&section).expect("a client"),
        applied: Mutex::new(Some(shape_of(e, variant))),
        section,
        system,
        agents,
        backend_vip: [10, 96, 0, 10].into(),
        gateway: None,
        journal: Mutex::new(None),
        borrowed: Mutex::new(Vec::new()),
        stop: stop.clone(),
        agent_forwards: Vec::new(),
        preflight: super::preflight::Preflight::default(),
        _scratch: tempfile::tempdir().expect("a scratch directory"),
    }
}

/// Realises the first step with a stop asked `after` from now: how it ended, and how long
/// after the stop.
fn realise_stopped(e: &Experiment, after: Duration) -> (Result<(), StepFailure>, Duration) {
    let stop = Stop::new();
    let site = site(e, &stop);
    let plan = Plan::compile(e);
    let at = StepAt::only(&plan.steps[0]);
    let step = StepContext {
        e,
        at: &at,
        experiment_id: 1,
        stop: &stop,
    };
    if after.is_zero() {
        stop.request();
    }
    let asker = stop.clone();
    let asked = std::thread::spawn(move || {
        std::thread::sleep(after);
        asker.request();
        Instant::now()
    });
    let Work::Chain(variant, load) = &plan.steps[0].work else {
        panic!("a chain");
    };
    let place = super::ClusterPlace {
        site: &site,
        variant,
        load,
    };
    let realised = place.realise(&step, &mut Quiet).map(drop);
    let ended = Instant::now();
    let asked = asked.join().expect("the asker");
    (realised, ended.saturating_duration_since(asked))
}

#[test]
fn a_stop_while_a_cluster_step_is_set_up_fails_it_as_stopped_at_once() {
    let dir = tempfile::tempdir().expect("a directory");
    // The rollout is done; Prometheus never has the roles: the stop comes in its wait, which
    // used to end in a warning and a measured step.
    let (prom, asked) = prometheus();
    let e = experiment(dir.path(), &api_server(true), &prom);
    let (realised, after) = realise_stopped(&e, Duration::from_millis(800));
    assert!(
        matches!(realised, Err(StepFailure::StoppedBeforeLoad)),
        "{:?}",
        realised.err()
    );
    assert!(
        after < Duration::from_millis(100),
        "{after:?} after the stop"
    );
    assert!(
        asked.load(Ordering::Relaxed) > 0,
        "stopped in the wait for Prometheus"
    );

    // The rollout never ends: the stop in its wait is no failure of the system either.
    let (prom, asked) = prometheus();
    let e = experiment(dir.path(), &api_server(false), &prom);
    let (realised, after) = realise_stopped(&e, Duration::from_millis(800));
    assert!(
        matches!(realised, Err(StepFailure::StoppedBeforeLoad)),
        "{:?}",
        realised.err()
    );
    assert!(
        after < Duration::from_millis(100),
        "{after:?} after the stop"
    );
    assert_eq!(
        asked.load(Ordering::Relaxed),
        0,
        "stopped in the rollout's wait"
    );

    // A stop before the step began: nothing is asked of the cluster.
    let (realised, _) = realise_stopped(&e, Duration::ZERO);
    assert!(matches!(realised, Err(StepFailure::StoppedBeforeLoad)));
}

/// A sweep of `limits.control_plane.cpus` on a cluster: each gateway step's shape gives the
/// cluster's Contour that step's CPU (and the file's memory), the proxy its one value; the
/// baseline runs once, with the first value (nothing of Contour is on its path).
#[test]
fn a_control_plane_sweep_shapes_each_steps_contour() {
    let text = "name: t\ntopologies: [baseline, gateway]\ngateway:\n  type: contour\nlimits:\n  proxy:\n    cpus: [1]\n  control_plane:\n    cpus: [0.25, 0.5]\n    memory_mib: 256\ncluster:\n  image: meshbench:1\n  coordinator: 10.0.0.1:7700\n  prometheus_url: http://prometheus:9090\n";
    let e = parse("t.yaml", text, &[]).unwrap();
    let plan = Plan::compile(&e);
    let shapes: Vec<String> = plan
        .steps
        .iter()
        .filter_map(|s| match &s.work {
            Work::Chain(v, _) => {
                let shape = shape_of(&e, v);
                Some(format!(
                    "{}: contour {:?} cpu {:?} MiB, envoy {:?} cpu",
                    s.variant(),
                    shape.control_plane.cpu_cores,
                    shape.control_plane.memory_mib,
                    shape.proxy.cpu_cores,
                ))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        shapes,
        [
            "baseline: contour Some(0.25) cpu Some(256) MiB, envoy Some(1.0) cpu",
            "gateway control_plane=0.25cpu: contour Some(0.25) cpu Some(256) MiB, envoy Some(1.0) cpu",
            "gateway control_plane=0.5cpu: contour Some(0.5) cpu Some(256) MiB, envoy Some(1.0) cpu",
        ]
    );
}
