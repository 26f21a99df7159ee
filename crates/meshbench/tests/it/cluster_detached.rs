//! Issue 57: runs that outlive the terminal. `meshbench experiment FILE --detach` on the
//! suite's node, as a user whom RBAC alone allows (deploy/cluster-experiment-rbac.yaml bound by
//! deploy/cluster-experiment-binding.yaml): the coordinator runs in the cluster as a Job, with
//! its own account (an in-cluster client, reaching the API server through the `kubernetes`
//! Service), and the workstation follows, stops and fetches it through port-forwards.
//!
//! 1. Bad input in one line, exit 2: `--detach` of a file without `cluster:`.
//! 2. A run started from a "terminal" (a process group of its own) that is then killed with
//!    SIGKILL, an `attach` killed the same way mid-run: the run goes on; a second `attach`
//!    follows it to its end and exits with its code; `fetch` adds to the local store exactly
//!    the steps the run printed, and the coordinator then removes itself: no namespace, no
//!    binding left.
//! 3. A second run stopped mid-step with `k8s stop`: it puts back what it made (its namespace
//!    gone), what it measured is fetched, and nothing is left.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use meshbench_k8s::BlockingClient;

use crate::cluster_experiment::{wait_with_limit, IMAGE};
use crate::common::{self, cluster, cluster::TestCluster};

const TOKEN: &str = "detached-test-token";

fn preset() -> String {
    format!(
        "{}/../../examples/cluster-twopods.yaml",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// The twopods preset at a small scale without Istio (the baseline only): `steps` steps of
/// `secs` seconds, in `namespace`.
fn sets(kubeconfig: &Path, namespace: &str, rates: &str, secs: u32) -> Vec<String> {
    vec![
        format!("cluster.kubeconfig={}", kubeconfig.display()),
        format!("cluster.namespace={namespace}"),
        format!("cluster.image={IMAGE}"),
        "cluster.image_pull_policy=Never".into(),
        "cluster.agent_cpu=200m".into(),
        "cluster.agent_memory=256Mi".into(),
        "cluster.rollout_timeout_secs=90".into(),
        "topologies=[baseline]".into(),
        "agents.count=1".into(),
        format!("duration_secs={secs}"),
        "warmup_secs=2".into(),
        "cooldown_secs=0".into(),
        "sample_interval_ms=1000".into(),
        format!("load.rate_rps={rates}"),
        "load.connections=[2]".into(),
    ]
}

fn meshbench(args: &[&str]) -> Command {
    let mut cmd = Command::new(common::bin());
    cmd.args(args)
        .env("MESHBENCH_AGENT_TOKEN", TOKEN)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Starts `cmd` in a process group of its own, as a terminal starts a command.
fn in_own_group(mut cmd: Command) -> Child {
    use std::os::unix::process::CommandExt;
    cmd.process_group(0).spawn().unwrap()
}

/// SIGKILL to the whole group of `child`, as a closed terminal or a killed CI job does.
fn kill_group(child: &mut Child) {
    // SAFETY: kill on the group of a child this process started.
    unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
    let _ = child.wait();
}

/// `meshbench k8s VERB NAMESPACE --kubeconfig USER ...`, as the user types it.
fn k8s(verb: &str, namespace: &str, user: &Path, extra: &[&str]) -> Command {
    let kubeconfig = user.display().to_string();
    let mut args = vec!["k8s", verb, namespace, "--kubeconfig", &kubeconfig];
    args.extend_from_slice(extra);
    meshbench(&args)
}

fn detach(user_kubeconfig: &Path, namespace: &str, rates: &str, secs: u32) -> Output {
    let mut cmd = meshbench(&["experiment", &preset(), "--detach", "--keep-for", "10m"]);
    for s in sets(user_kubeconfig, namespace, rates, secs) {
        cmd.args(["--set", &s]);
    }
    let mut child = in_own_group(cmd);
    let out = common::wait_with_limit(&mut child, Duration::from_secs(150));
    // The terminal is closed: whatever is left of the group goes.
    kill_group(&mut child);
    out
}

/// Waits until namespace `ns` is gone.
fn wait_namespace_gone(k: &BlockingClient, ns: &str, within: Duration) {
    let deadline = Instant::now() + within;
    while k.get_cluster_scoped::<Namespace>(ns).unwrap().is_some() {
        assert!(
            Instant::now() < deadline,
            "namespace {ns} still there after {within:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn a_detached_run_outlives_its_terminal_and_is_followed_stopped_and_fetched() {
    if let Some(why) = cluster::node_unavailable() {
        panic!("a real Kubernetes node cannot run here: {why}");
    }
    let dir = common::scratch_dir("cluster-detached");
    // 1. A file without `cluster:`.
    let lab_file = format!(
        "{}/../../examples/sidecar-overhead.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    let out = meshbench(&["experiment", &lab_file, "--detach"])
        .output()
        .unwrap();
    let (_, err) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("--detach") && err.contains("cluster:"),
        "{err}"
    );

    let c = TestCluster::with_node();
    let k = BlockingClient::from_kubeconfig(&c.kubeconfig).unwrap();
    common::bind_user_to_shipped_rbac(&k);
    c.load_meshbench_image(IMAGE);
    let user = &c.user_kubeconfig;

    // 2. Started, its terminal killed, an attach killed mid-run.
    let began = Instant::now();
    let out = detach(user, "detached-done", "[100, 200]", 8);
    let (said, err) = text(&out);
    assert!(out.status.success(), "--detach: {said}{err}");
    assert!(
        said.contains("meshbench k8s attach detached-done"),
        "{said}"
    );
    eprintln!("detached in {:.1} s: {said}", began.elapsed().as_secs_f64());
    let mut first = in_own_group(k8s("attach", "detached-done", user, &[]));
    std::thread::sleep(Duration::from_secs(15));
    kill_group(&mut first);
    let attached = wait_with_limit(
        k8s("attach", "detached-done", user, &[]).spawn().unwrap(),
        Duration::from_secs(300),
    );
    let (lines, err) = text(&attached);
    assert!(attached.status.success(), "attach: {lines}{err}");
    assert!(
        lines.contains("meshbench: the run ended (exit 0)"),
        "{lines}"
    );
    eprintln!("the run as attach showed it:\n{lines}");
    // The run's namespace is gone with the run; the coordinator's waits for the fetch.
    wait_namespace_gone(&k, "detached-done", Duration::from_secs(60));
    assert!(k
        .get_cluster_scoped::<Namespace>("detached-done-coordinator")
        .unwrap()
        .is_some());

    let home = dir.join("home.db");
    let fetched = k8s(
        "fetch",
        "detached-done",
        user,
        &["--store", &home.display().to_string()],
    )
    .output()
    .unwrap();
    let (said, err) = text(&fetched);
    assert!(fetched.status.success(), "fetch: {said}{err}");
    assert!(said.contains("(2 steps, done)"), "{said}");
    let doc = common::export_json(&home);
    let steps = doc["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 2, "{doc}");
    for s in steps {
        assert_eq!(s["status"], "ok", "{}", s["error"]);
        // Each step as the run printed it: its row of the run's own table (rate, p50, p99).
        let ms = |key: &str| format!("{:.3}", s["summary"][key].as_f64().unwrap() / 1000.0);
        let rate = s["params"]["rate_rps"].as_f64().unwrap();
        let (p50, p99) = (ms("p50_us"), ms("p99_us"));
        assert!(
            lines
                .lines()
                .any(|l| l.contains(&format!("baseline {rate} rps"))
                    && l.contains(&p50)
                    && l.contains(&p99)),
            "no row at {rate} with p50 {p50} and p99 {p99} ms in what the run printed:\n{lines}"
        );
    }
    wait_namespace_gone(&k, "detached-done-coordinator", Duration::from_secs(120));
    assert!(k
        .get_cluster_scoped::<ClusterRoleBinding>("detached-done-coordinator")
        .unwrap()
        .is_none());

    // 3. Stopped mid-step.
    let out = detach(user, "detached-stop", "[100, 200]", 20);
    let (said, err) = text(&out);
    assert!(out.status.success(), "--detach: {said}{err}");
    let deadline = Instant::now() + Duration::from_secs(180);
    while k
        .get_cluster_scoped::<Namespace>("detached-stop")
        .unwrap()
        .is_none()
    {
        assert!(Instant::now() < deadline, "the run's namespace never came");
        std::thread::sleep(Duration::from_millis(500));
    }
    // In its first step (the bring-up takes about 10 s here).
    std::thread::sleep(Duration::from_secs(18));
    let stopped = k8s("stop", "detached-stop", user, &[]).output().unwrap();
    let (said, err) = text(&stopped);
    assert!(stopped.status.success(), "stop: {said}{err}");
    assert!(said.contains("stopped (exit 130)"), "{said}");
    wait_namespace_gone(&k, "detached-stop", Duration::from_secs(60));
    let fetched = k8s(
        "fetch",
        "detached-stop",
        user,
        &["--store", &home.display().to_string()],
    )
    .output()
    .unwrap();
    let (said, err) = text(&fetched);
    assert!(fetched.status.success(), "fetch: {said}{err}");
    assert!(said.contains("interrupted"), "{said}");
    wait_namespace_gone(&k, "detached-stop-coordinator", Duration::from_secs(120));
    let attach_gone = k8s("attach", "detached-stop", user, &[]).output().unwrap();
    let (_, err) = text(&attach_gone);
    assert_eq!(attach_gone.status.code(), Some(1), "{err}");
    assert!(
        err.contains("no detached run of namespace detached-stop"),
        "{err}"
    );
}
