//! Runs that outlive the terminal: `meshbench experiment FILE --detach` starts a cluster run's
//! coordinator in the cluster (a Job, [`meshbench_k8s::detached`]) and returns;
//! `meshbench k8s attach NS` follows it, `k8s stop NS` stops it, `k8s fetch NS` adds its
//! results to the local store and lets it remove itself. Every one of them reaches the
//! coordinator through the API server (a port-forward to its pod's loopback), as the run itself
//! reaches its agents: a kubeconfig is all the workstation needs, and it may be closed
//! between any two of them.
//!
//! NS is the run's namespace (the file's `cluster.namespace`); the coordinator lives beside it
//! in its own ([`coordinator_namespace`]), since the run deletes its namespace at its end.

mod control;
mod coordinator;

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use meshbench_k8s::detached::{self, coordinator_namespace, Detached, ISTIO_NAMESPACE};
use meshbench_k8s::k8s_openapi::api::core::v1::{Namespace, Pod};
use meshbench_k8s::{BlockingClient, Forward};
use meshbench_runner::place::cluster::{self as cluster_run, preflight};
use meshbench_store::Store;

use self::control::{RunState, CONTROL_PORT};
pub use self::coordinator::coordinator;
use super::common::experiment_file;
use super::common::signals::Signals;
use super::common::units::parse_duration;
use crate::cli::{ExperimentArgs, K8sDetachedArgs, K8sFetchArgs};
use crate::{exit, usage};

/// How long `--detach` waits for the coordinator's pod to run.
const RUNNING_WITHIN: Duration = Duration::from_secs(120);
/// How long the workstation tries to reach a coordinator whose pod is not (yet) running.
const REACH_WITHIN: Duration = Duration::from_secs(60);
/// How often `attach` asks for new lines.
const POLL_EVERY: Duration = Duration::from_secs(1);
/// How long `k8s stop` waits for the run to have put everything back.
const STOPPED_WITHIN: Duration = Duration::from_secs(15 * 60);

/// `experiment FILE --detach`: the file read as `experiment` reads it, then the coordinator's
/// namespace, account, bindings, file and Job applied; returns once its pod runs, saying how
/// to follow it.
pub fn detach(args: &ExperimentArgs) -> Result<u8> {
    let e = &experiment_file::load_args(args)?;
    let Some(section) = &e.cluster else {
        return Err(usage(format!(
            "--detach runs a cluster run's coordinator in the cluster, and {} has no `cluster:` section; run it without --detach",
            args.file.display()
        )));
    };
    let run_ns = &section.namespace;
    let namespace = coordinator_namespace(run_ns).ok_or_else(|| {
        usage(format!(
            "cluster.namespace {run_ns}: too long for --detach, whose coordinator's namespace adds 12 characters to it (63 at most); name a shorter one"
        ))
    })?;
    let keep = parse_duration("--keep-for", &args.keep_for)?;
    let file = std::fs::read_to_string(&args.file)
        .map_err(|err| usage(format!("{}: cannot read it: {err}", args.file.display())))?;
    let client = cluster_run::connect(section)
        .map_err(|err| anyhow!("the cluster cannot be reached: {err}"))?;
    let missing = cluster_run::missing_on_cluster(&client, e)
        .map_err(|err| anyhow!("the plan cannot be checked against the cluster: {err}"))?;
    if !missing.is_empty() {
        return Err(anyhow!(
            "the plan cannot run on this cluster: {}",
            missing.join("; and ")
        ));
    }
    for (ns, why) in [
        (run_ns.as_str(), "the run's namespace exists already (meshbench creates its own and deletes it at the end): name another (cluster.namespace), or delete it"),
        (namespace.as_str(), "a detached run of it is there already: follow it with `meshbench k8s attach`, or end it with `k8s stop` and `k8s fetch`"),
    ] {
        if client.get_cluster_scoped::<Namespace>(ns)?.is_some() {
            return Err(usage(format!("namespace {ns}: {why}")));
        }
    }
    let plan = Detached {
        run_namespace: run_ns.clone(),
        namespace: namespace.clone(),
        image: section.image.clone(),
        image_pull_policy: Some(section.image_pull_policy.name().to_string()),
        file,
        sets: args.set.clone(),
        keep_secs: keep.as_secs(),
    };
    client.apply(&plan.namespace_object())?;
    let uid = client
        .get_cluster_scoped::<Namespace>(&namespace)?
        .and_then(|n| n.metadata.uid)
        .ok_or_else(|| anyhow!("namespace {namespace} has no uid after its creation"))?;
    let istio = client
        .get_cluster_scoped::<Namespace>(ISTIO_NAMESPACE)?
        .is_some();
    let started = client
        .apply_all(plan.objects(&uid, istio))
        .map_err(anyhow::Error::from)
        .and_then(|_| wait_running(&client, &namespace));
    if let Err(err) = started {
        // Nothing is left of a coordinator that did not start: its namespace takes it all.
        let _ = client.delete_namespace(&namespace);
        return Err(err.context(format!(
            "the detached run's coordinator did not start (namespace {namespace} deleted)"
        )));
    }
    outln!(
        "detached: the run of {} runs in the cluster (its coordinator: Job {namespace}/{}).\n  follow it:      meshbench k8s attach {run_ns}\n  stop it:        meshbench k8s stop {run_ns}\n  its results:    meshbench k8s fetch {run_ns}   (kept {} after it ends)",
        e.name,
        detached::NAME,
        humantime::format_duration(keep)
    );
    Ok(exit::OK)
}

/// Waits until the coordinator's pod runs; an image that cannot be pulled, or a pod no node
/// takes, is said at once.
fn wait_running(client: &BlockingClient, namespace: &str) -> Result<()> {
    let began = Instant::now();
    loop {
        let pods = client.list::<Pod>(namespace, &detached::pod_selector())?;
        if let Some(pod) = pods.first() {
            if pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") {
                return Ok(());
            }
            if let Some(why) = preflight::cannot_start(pod) {
                return Err(anyhow!("its pod cannot start: {why}"));
            }
        }
        if began.elapsed() >= RUNNING_WITHIN {
            return Err(anyhow!(
                "its pod was not running after {} s",
                RUNNING_WITHIN.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The coordinator of the run in `run.namespace`, reached: a port-forward to its control port
/// (it has its own client). A run that is not there is one line (exit 1).
fn reach(run: &K8sDetachedArgs) -> Result<Forward> {
    let namespace = coordinator_namespace(&run.namespace).ok_or_else(|| {
        usage(format!(
            "{}: too long to be a run's namespace",
            run.namespace
        ))
    })?;
    let client = BlockingClient::connect(run.kubeconfig.as_deref())
        .map_err(|err| anyhow!("the cluster cannot be reached: {err}"))?;
    let began = Instant::now();
    loop {
        if client
            .get_cluster_scoped::<Namespace>(&namespace)?
            .is_none()
        {
            return Err(anyhow!(
                "no detached run of namespace {} (no namespace {namespace}): it was fetched or stopped and removed, or never started",
                run.namespace
            ));
        }
        let pods = client.list::<Pod>(&namespace, &detached::pod_selector())?;
        let running = pods.iter().find_map(|p| {
            let phase = p.status.as_ref()?.phase.as_deref()?;
            (phase == "Running").then(|| p.metadata.name.clone())?
        });
        if let Some(pod) = running {
            return Ok(client.port_forward(&namespace, &pod, CONTROL_PORT)?);
        }
        if began.elapsed() >= REACH_WITHIN {
            return Err(anyhow!(
                "the coordinator of {} has no running pod in {namespace} after {} s",
                run.namespace,
                REACH_WITHIN.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// Prints the run's lines from `from` until it has ended (or, with `until_ended` false, once);
/// the run's exit code when it has ended. A Ctrl-C leaves the run going.
fn follow(run: &K8sDetachedArgs, within: Option<Duration>) -> Result<Option<u8>> {
    let signals = Signals::install()?;
    let began = Instant::now();
    let mut printed = 0;
    let mut forward = reach(run)?;
    loop {
        let polled = control::status(forward.addr()).and_then(|status| {
            let lines = control::lines(forward.addr(), printed)?;
            Ok((status, lines))
        });
        match polled {
            Ok((status, lines)) => {
                for l in &lines {
                    outln!("{l}");
                }
                printed += lines.len();
                if status.state == RunState::Ended && printed >= status.lines {
                    return Ok(status.exit_code);
                }
            }
            // The pod restarted or the stream broke: reached again (or why not).
            Err(_) => forward = reach(run)?,
        }
        if within.is_some_and(|w| began.elapsed() >= w) {
            return Err(anyhow!(
                "the run had not ended after {} s",
                began.elapsed().as_secs()
            ));
        }
        if !signals.stop.sleep(POLL_EVERY) {
            errln!(
                "meshbench: stopped following; the run goes on (meshbench k8s attach {})",
                run.namespace
            );
            return Ok(None);
        }
    }
}

/// `k8s attach NS`: the run's lines so far and as they come, until it ends; exits with the
/// run's own code (a Ctrl-C leaves it running: exit 0).
pub fn attach(run: K8sDetachedArgs) -> Result<u8> {
    Ok(follow(&run, None)?.unwrap_or(exit::OK))
}

/// `k8s stop NS`: asks the run to stop, and follows it until it has put everything back.
pub fn stop(run: K8sDetachedArgs) -> Result<u8> {
    let forward = reach(&run)?;
    control::call(forward.addr(), "POST", "/stop").context("asking the run to stop")?;
    drop(forward);
    let code = follow(&run, Some(STOPPED_WITHIN))?;
    outln!(
        "stopped (exit {}); what it measured: meshbench k8s fetch {}",
        code.map_or("?".into(), |c| c.to_string()),
        run.namespace
    );
    Ok(exit::OK)
}

/// `k8s fetch NS`: once the run has ended, its store is added to the local one and the
/// coordinator removes itself.
pub fn fetch(args: K8sFetchArgs) -> Result<u8> {
    let store_path = args
        .store
        .clone()
        .unwrap_or_else(meshbench_store::default_path);
    let forward = reach(&args.run)?;
    let status = control::status(forward.addr())?;
    if status.state == RunState::Running {
        return Err(anyhow!(
            "the run of {} is still running: follow it with `meshbench k8s attach {}`, or stop it with `k8s stop`",
            args.run.namespace,
            args.run.namespace
        ));
    }
    let bytes = control::call(forward.addr(), "GET", "/store").context("the run's results")?;
    let fetched = fetched_path(&store_path);
    std::fs::write(&fetched, &bytes).with_context(|| format!("writing {}", fetched.display()))?;
    let imported = Store::open(&store_path).and_then(|mut s| {
        let ids = s.import(&fetched)?;
        let rows = ids
            .iter()
            .map(|id| s.experiment(&id.to_string()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    });
    let _ = std::fs::remove_file(&fetched);
    for suffix in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", fetched.display()));
    }
    for row in imported? {
        outln!(
            "fetched experiment {} '{}' ({} steps, {}) into {}",
            row.id,
            row.name,
            row.steps,
            row.status,
            store_path.display()
        );
    }
    control::call(forward.addr(), "POST", "/done").context("telling the coordinator")?;
    outln!(
        "the coordinator removes itself (namespace {}); the run ended with exit {}",
        coordinator_namespace(&args.run.namespace).unwrap_or_default(),
        status.exit_code.map_or("?".into(), |c| c.to_string())
    );
    Ok(exit::OK)
}

/// Where a fetched store is written before it is added: beside the local one.
fn fetched_path(store: &Path) -> std::path::PathBuf {
    let mut name = store.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".fetched-{}", std::process::id()));
    store.with_file_name(name)
}
