//! `meshbench k8s run` against a real Kubernetes control plane with a *played* node, for
//! machines where a real kubelet cannot run (tests/it/k8s_node.rs runs the real node where it
//! can; this test is quick, so it runs everywhere). etcd, kube-apiserver and
//! kube-controller-manager (built by scripts/install-k8s.sh from k8s.io/kubernetes v1.36.1) on
//! loopback, from common/cluster.rs; no scheduler and no kubelet: the test plays the node. It starts each
//! agent pod's container command as a local process (the image's `/meshbench` is this build's
//! binary; the token resolved from the Secret the pod names, `$(POD_NAME)` expanded), reports
//! the pod Running and Ready, and Succeeded or Failed when the process exits, so the Job
//! controller sees its pods end. Everything else (server-side apply and validation, the Indexed
//! Job's pods and completion indexes, the coordinator, the deletes) is the real thing.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::cluster::{client, TestCluster};
use common::{bin, free_addr, stderr};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::Client;
use serde_json::json;

const TOKEN: &str = "k8s-test-token-0123456789abcdef";

/// Plays the node for the pods of `namespace`: starts each one's agent as a local process,
/// reports it Running and Ready, then Succeeded or Failed with the process. Pods named in
/// `refuse` are left Pending, as a full cluster would.
struct Node {
    quit: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Vec<String>>>,
}

impl Node {
    fn play(cp: &TestCluster, namespace: &str, refuse: Vec<u32>) -> Node {
        let quit = Arc::new(AtomicBool::new(false));
        let q = quit.clone();
        let ns = namespace.to_string();
        let kubeconfig = cp.kubeconfig.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let client = client(&kubeconfig, &rt);
            let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
            let secrets: Api<Secret> = Api::namespaced(client, &ns);
            let mut running: BTreeMap<String, Child> = BTreeMap::new();
            let mut seen = Vec::new();
            let logs = Arc::new(Mutex::new(Vec::new()));
            // Once told to quit, the agents still running get a few seconds to end by
            // themselves (they end with their session), as a kubelet's grace period.
            let mut drain_until: Option<Instant> = None;
            loop {
                if q.load(Ordering::Relaxed) {
                    let until =
                        *drain_until.get_or_insert(Instant::now() + Duration::from_secs(10));
                    if running.is_empty() || Instant::now() > until {
                        break;
                    }
                }
                let list = if drain_until.is_some() {
                    Ok(Vec::new())
                } else {
                    rt.block_on(pods.list(&ListParams::default()))
                        .map(|l| l.items)
                };
                for pod in list.unwrap_or_default() {
                    let name = pod.metadata.name.clone().unwrap_or_default();
                    if seen.contains(&name) {
                        continue;
                    }
                    let index: Option<u32> = pod
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get("batch.kubernetes.io/job-completion-index"))
                        .and_then(|i| i.parse().ok());
                    if index.is_some_and(|i| refuse.contains(&i)) {
                        continue;
                    }
                    seen.push(name.clone());
                    let child = start_container(&rt, &pod, &secrets);
                    let ready = json!({"status": {"phase": "Running", "podIP": "127.0.0.1",
                        "conditions": [{"type": "Ready", "status": "True"}]}});
                    rt.block_on(pods.patch_status(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(&ready),
                    ))
                    .expect("the pod's status is writable");
                    running.insert(name, child);
                }
                let ended: Vec<String> = running
                    .iter_mut()
                    .filter_map(|(n, c)| c.try_wait().ok().flatten().map(|_| n.clone()))
                    .collect();
                for name in ended {
                    let mut child = running.remove(&name).unwrap();
                    let code = child.wait().unwrap().code().unwrap_or(137);
                    let mut err = String::new();
                    if let Some(mut e) = child.stderr.take() {
                        let _ = std::io::Read::read_to_string(&mut e, &mut err);
                    }
                    logs.lock()
                        .unwrap()
                        .push(format!("{name} exit {code}: {err}"));
                    let phase = if code == 0 { "Succeeded" } else { "Failed" };
                    let done = json!({"status": {"phase": phase, "conditions": [{"type": "Ready", "status": "False"}],
                        "containerStatuses": [{"name": "agent", "image": "meshbench", "imageID": "", "ready": false, "restartCount": 0,
                            "state": {"terminated": {"exitCode": code, "reason": phase}}}]}});
                    let _ = rt.block_on(pods.patch_status(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(&done),
                    ));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            for (name, mut c) in running {
                let _ = c.kill();
                let _ = c.wait();
                logs.lock()
                    .unwrap()
                    .push(format!("{name} killed: still running"));
            }
            let logs = logs.lock().unwrap().clone();
            logs
        });
        Node {
            quit,
            thread: Some(thread),
        }
    }

    fn stop(mut self) -> Vec<String> {
        self.quit.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.quit.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The pod's container as a local process: `/meshbench` is this build, env resolved.
fn start_container(rt: &tokio::runtime::Runtime, pod: &Pod, secrets: &Api<Secret>) -> Child {
    let spec = pod.spec.as_ref().expect("a pod spec");
    let c = &spec.containers[0];
    assert_eq!(c.command.as_deref(), Some(&["/meshbench".to_string()][..]));
    let mut env = BTreeMap::new();
    for e in c.env.iter().flatten() {
        let value = match (&e.value, &e.value_from) {
            (Some(v), _) => v.clone(),
            (None, Some(from)) => {
                if let Some(s) = &from.secret_key_ref {
                    let secret = rt
                        .block_on(secrets.get(&s.name))
                        .expect("the Secret exists");
                    let bytes = secret.data.unwrap()[&s.key].0.clone();
                    String::from_utf8(bytes).unwrap()
                } else if let Some(f) = &from.field_ref {
                    field(pod, &f.field_path)
                } else {
                    panic!("an env source the test node does not know: {from:?}")
                }
            }
            (None, None) => String::new(),
        };
        env.insert(e.name.clone(), value);
    }
    let args: Vec<String> = c
        .args
        .iter()
        .flatten()
        .map(|a| {
            env.iter()
                .fold(a.clone(), |a, (k, v)| a.replace(&format!("$({k})"), v))
        })
        .collect();
    Command::new(bin())
        .args(&args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(&env)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the agent starts")
}

/// A downward-API field of the pod, as the kubelet resolves it (the pod's IP is loopback here).
fn field(pod: &Pod, path: &str) -> String {
    let m = &pod.metadata;
    let keyed = |prefix: &str, map: &Option<BTreeMap<String, String>>| {
        let key = path.strip_prefix(prefix)?.strip_suffix("']")?;
        map.as_ref()?.get(key).cloned()
    };
    match path {
        "metadata.name" => m.name.clone().unwrap_or_default(),
        "metadata.namespace" => m.namespace.clone().unwrap_or_default(),
        "status.podIP" => "127.0.0.1".into(),
        _ => keyed("metadata.labels['", &m.labels)
            .or_else(|| keyed("metadata.annotations['", &m.annotations))
            .unwrap_or_else(|| panic!("a field the test node does not know: {path}")),
    }
}

fn experiment(dir: &Path) -> PathBuf {
    let file = dir.join("k8s-experiment.yaml");
    std::fs::write(
        &file,
        "name: k8s-agents\ntopologies: [baseline]\nduration_secs: 2\nwarmup_secs: 0.5\ncooldown_secs: 0\nload:\n  rate_rps: [400]\n  connections: [4]\n",
    )
    .unwrap();
    file
}

fn k8s_run(
    cp: &TestCluster,
    file: &Path,
    store: &Path,
    agents: &str,
    extra: &[&str],
) -> std::process::Output {
    let listen = format!("127.0.0.1:{}", free_addr().port());
    let mut cmd = Command::new(bin());
    cmd.args(["k8s", "run"])
        .arg(file)
        .args([
            "--agents",
            agents,
            "--image",
            "meshbench:test",
            "--namespace",
            "load",
            "--name",
            "itest",
        ])
        .args(["--listen", &listen, "--kubeconfig"])
        .arg(&cp.kubeconfig)
        .arg("--store")
        .arg(store)
        .args(extra)
        .env("MESHBENCH_AGENT_TOKEN", TOKEN)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    common::wait_with_limit(&mut cmd.spawn().unwrap(), Duration::from_secs(180))
}

fn all_gone(rt: &tokio::runtime::Runtime, client: &Client) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = rt.block_on(async {
            let ns = "load";
            let pods = Api::<Pod>::namespaced(client.clone(), ns)
                .list(&ListParams::default().labels("app.kubernetes.io/instance=itest"))
                .await
                .unwrap()
                .items
                .len();
            let job = Api::<Job>::namespaced(client.clone(), ns)
                .get_opt("itest-agents")
                .await
                .unwrap()
                .is_some();
            let svc = Api::<Service>::namespaced(client.clone(), ns)
                .get_opt("itest-agents")
                .await
                .unwrap()
                .is_some();
            let cm = Api::<ConfigMap>::namespaced(client.clone(), ns)
                .get_opt("itest-experiment")
                .await
                .unwrap()
                .is_some();
            let secret = Api::<Secret>::namespaced(client.clone(), ns)
                .get_opt("itest-token")
                .await
                .unwrap()
                .is_some();
            (pods, job, svc, cm, secret)
        });
        if left == (0, false, false, false, false) {
            return;
        }
        assert!(Instant::now() < deadline, "left in the cluster: {left:?}");
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn k8s_run_applies_waits_coordinates_collects_and_deletes() {
    let cp = TestCluster::control_plane();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = cp.client(&rt);
    let dir = common::scratch_dir("k8s");
    let file = experiment(&dir);
    let store = dir.join("results.db");

    // `gen k8s` renders what `k8s run` applies; every object parses back into its type.
    let out = common::meshbench(
        &[
            "gen",
            "k8s",
            file.to_str().unwrap(),
            "--agents",
            "2",
            "--image",
            "meshbench:test",
            "--coordinator",
            "10.0.0.1:7700",
            "--cpu",
            "1",
            "--memory",
            "256Mi",
            "--sysctl",
            "net.ipv4.ip_local_port_range=1024 65535",
        ],
        Duration::from_secs(20),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let yaml = String::from_utf8_lossy(&out.stdout).to_string();
    let docs: Vec<&str> = yaml.split("---\n").collect();
    assert_eq!(docs.len(), 4, "{yaml}");
    let _: Secret = serde_yaml_ng::from_str(docs[0]).unwrap();
    let _: ConfigMap = serde_yaml_ng::from_str(docs[1]).unwrap();
    let _: Service = serde_yaml_ng::from_str(docs[2]).unwrap();
    let job: Job = serde_yaml_ng::from_str(docs[3]).unwrap();
    assert_eq!(
        job.spec.unwrap().completion_mode.as_deref(),
        Some("Indexed")
    );

    let node = Node::play(&cp, "load", Vec::new());
    let out = k8s_run(&cp, &file, &store, "2", &["--ready-timeout", "60s"]);
    let logs = node.stop();
    let err = stderr(&out);
    eprintln!("meshbench k8s run said:\n{err}\nthe node saw: {logs:?}");
    assert!(out.status.success(), "{err}\nnode: {logs:?}");
    assert!(err.contains("2 of 2 agent pod(s) ready"), "{err}");
    assert!(
        err.contains("itest-agents-0") && err.contains("itest-agents-1"),
        "pods of both indexes: {err}"
    );
    assert!(err.contains("deleted the Job"), "{err}");
    assert_eq!(logs.len(), 2, "both agents ended: {logs:?}");
    assert!(
        logs.iter().all(|l| l.contains("exit 0")),
        "agents end with their session: {logs:?}"
    );
    // The step was driven by the two agents and stored.
    let export: serde_json::Value = common::export_json(&store);
    let text = export.to_string();
    assert!(
        text.contains("\"agents\"") && text.contains("itest-agents-0"),
        "{text:.2000}"
    );
    all_gone(&rt, &client);

    // Not enough pods become ready: one line naming the pod left Pending, and nothing left.
    let node = Node::play(&cp, "load", vec![1]);
    let out = k8s_run(&cp, &file, &store, "2", &["--ready-timeout", "5s"]);
    node.stop();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("only 1 of 2 agent pods were ready") && err.contains("Pending"),
        "{err}"
    );
    all_gone(&rt, &client);
}
