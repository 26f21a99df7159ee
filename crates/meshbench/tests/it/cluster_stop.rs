//! Issue 47: Ctrl-C is answered while a cluster run's agent pods are Pending. The real test node
//! (common/cluster.rs), whose checks before the first step pass (meshbench's image runs there),
//! and agent pods that ask for more CPU than the node has, so they are created and stay
//! Pending, as on a cluster whose nodes cannot take them. `meshbench experiment` runs the
//! twopods preset (baseline only: no Istio needed) as a user runs it, in a process group of its
//! own; the signal goes to the group, as a terminal sends it. The run exits with the signal's
//! code within 10 s, says in one line that it stopped in the bring-up and deleted its
//! namespace, leaves no namespace and no journal, and stores nothing: the store is not even
//! created (no experiment row: nothing was measured). SIGINT (130), then SIGTERM (143).

use crate::common;

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::cluster::TestCluster;
use k8s_openapi::api::core::v1::Pod;
use meshbench_k8s::BlockingClient;

use crate::cluster_experiment::{assert_gone, IMAGE};

const TOKEN: &str = "cluster-stop-test-token-0123456789abcdef";
/// How long the run may take to answer the signal, the namespace's deletion included.
const ANSWERED_WITHIN: Duration = Duration::from_secs(10);

/// `meshbench experiment` of the twopods preset on `c`, namespace `ns`, in a process group of
/// its own; its stderr read as it comes.
fn start(c: &TestCluster, ns: &str, store: &Path) -> (Child, std::thread::JoinHandle<String>) {
    let preset = format!(
        "{}/../../examples/cluster-twopods.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    let sets = [
        format!("cluster.kubeconfig={}", c.kubeconfig.display()),
        format!("cluster.namespace={ns}"),
        format!("cluster.image={IMAGE}"),
        "cluster.image_pull_policy=Never".into(),
        // More than the node has: the agent pods stay Pending.
        "cluster.agent_cpu=\"64\"".into(),
        "cluster.rollout_timeout_secs=300".into(),
        "topologies=[baseline]".into(),
    ];
    let mut cmd = Command::new(common::bin());
    cmd.args(["experiment", &preset, "--quiet", "--store"])
        .arg(store)
        .env("MESHBENCH_AGENT_TOKEN", TOKEN)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for s in &sets {
        cmd.args(["--set", s]);
    }
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = cmd.spawn().expect("meshbench experiment");
    let mut err = child.stderr.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = err.read_to_string(&mut text);
        text
    });
    (child, reader)
}

/// Waits until the run's agent pods exist and are Pending (the run then waits for them); the
/// run's exit status if it ended first.
fn wait_pending(
    k: &BlockingClient,
    ns: &str,
    child: &mut Child,
) -> Result<(), std::process::ExitStatus> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let pods = k
            .list::<Pod>(ns, "app.kubernetes.io/component=agent")
            .unwrap_or_default();
        let phase = |p: &Pod| p.status.as_ref().and_then(|s| s.phase.clone());
        if !pods.is_empty() && pods.iter().all(|p| phase(p).as_deref() == Some("Pending")) {
            return Ok(());
        }
        if let Some(status) = child.try_wait().unwrap() {
            return Err(status);
        }
        assert!(Instant::now() < deadline, "no Pending agent pod in {ns}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_signal_while_the_agent_pods_are_pending_is_answered_at_once_and_leaves_nothing() {
    let began = Instant::now();
    let c = TestCluster::with_node();
    let k = BlockingClient::from_kubeconfig(&c.kubeconfig).unwrap();
    c.load_meshbench_image(IMAGE);
    let dir = common::scratch_dir("cluster-stop");
    for (signal, name, code, ns) in [
        (libc::SIGINT, "SIGINT", 130, "stop-int"),
        (libc::SIGTERM, "SIGTERM", 143, "stop-term"),
    ] {
        let store = dir.join(ns).join("results.db");
        std::fs::create_dir_all(store.parent().unwrap()).unwrap();
        let (mut child, stderr) = start(&c, ns, &store);
        if let Err(status) = wait_pending(&k, ns, &mut child) {
            panic!(
                "the run ended before its agent pods were Pending: {status}: {}",
                stderr.join().unwrap()
            );
        }
        // The run is well into its wait for the pods (it used to sit there for the whole
        // rollout timeout, then exit 1).
        std::thread::sleep(Duration::from_secs(2));
        let group = child.id() as i32;
        let signalled = Instant::now();
        // SAFETY: a signal to the process group this test started.
        assert_eq!(unsafe { libc::kill(-group, signal) }, 0);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if signalled.elapsed() > ANSWERED_WITHIN + Duration::from_secs(20) {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "{name}: still running {:?} after the signal: {}",
                    signalled.elapsed(),
                    stderr.join().unwrap()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let answered = signalled.elapsed();
        let err = stderr.join().unwrap();
        eprintln!("{name}: exit {status} {answered:?} after the signal; stderr:\n{err}");
        assert_eq!(status.code(), Some(code), "{err}");
        assert!(answered < ANSWERED_WITHIN, "{name}: {answered:?}\n{err}");
        let stopped: Vec<&str> = err.lines().filter(|l| l.contains("stopped")).collect();
        assert_eq!(stopped.len(), 1, "one line says it stopped: {err}");
        let line = stopped[0];
        let said =
            format!("meshbench: stopped by {name} in the bring-up (agent pods 0 of 1 ready)");
        assert!(
            line.starts_with(&said) && line.contains(&format!(": namespace {ns} deleted (")),
            "{line}"
        );
        assert!(
            !err.contains("error") && !err.contains("panicked") && !err.contains("warning"),
            "{err}"
        );
        assert!(err.lines().all(|l| l.chars().count() <= 120), "{err}");
        assert_gone(&k, ns, &store);
        assert!(!store.exists(), "nothing measured, nothing stored");
    }
    eprintln!(
        "cluster stop: both signals answered; the test took {:.1} s",
        began.elapsed().as_secs_f64()
    );
    c.stop();
    let _ = std::fs::remove_dir_all(dir);
}
