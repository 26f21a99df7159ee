//! `meshbench gen k8s` (the objects of a run from agents, as YAML) and `meshbench k8s run`
//! (apply them, wait for the agent pods, run the experiment from them as their coordinator,
//! delete them, also after a failure or Ctrl-C). The objects are `meshbench_k8s::render`'s;
//! the coordinator is the runner's `Fleet`, the experiment `experiment::run`'s.

use std::net::TcpListener;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use meshbench_k8s::{AntiAffinity, Cluster, ClusterError, Plan};
use meshbench_runner::agents::{Fleet, FleetError, FleetReach, Token};

use super::parse_duration;
use super::signals::Signals;
use crate::cli::{K8sGenArgs, K8sPlanFlags, K8sRunArgs};
use crate::{exit, usage};
use meshbench_runner::setup::Provision;

/// The plan the flags describe, every mistake found (bad input: exit 2).
fn plan(flags: &K8sPlanFlags, coordinator: &str) -> Result<Plan> {
    let experiment = std::fs::read_to_string(&flags.file)
        .map_err(|e| usage(format!("{}: cannot read it: {e}", flags.file.display())))?;
    // The file must be a valid experiment before anything is rendered from it.
    super::experiment::load(&flags.file, &[], Provision::Plan)?;
    let (_, token) = token_for_pods(flags.token_file.as_deref())?;
    let sysctls = flags
        .sysctls
        .iter()
        .map(|s| {
            s.split_once('=')
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .ok_or_else(|| usage(format!("--sysctl '{s}': give KEY=VALUE")))
        })
        .collect::<Result<Vec<_>>>()?;
    let anti_affinity = match flags.anti_affinity.as_str() {
        "preferred" => AntiAffinity::Preferred,
        "required" => AntiAffinity::Required,
        "none" => AntiAffinity::None,
        other => {
            return Err(usage(format!(
                "--anti-affinity {other}: give preferred, required or none"
            )))
        }
    };
    let plan = Plan {
        name: flags.name.clone(),
        namespace: flags.namespace.clone(),
        agents: flags.agents,
        image: flags.image.clone(),
        reach: meshbench_k8s::AgentsReach::Coordinator(coordinator.to_string()),
        token,
        experiment_file_name: flags.file.file_name().map_or_else(
            || "experiment.yaml".into(),
            |n| n.to_string_lossy().to_string(),
        ),
        experiment,
        cpu: flags.cpu.clone(),
        memory: flags.memory.clone(),
        sysctls,
        anti_affinity,
        pod: meshbench_k8s::render::PodExtras::default(),
    };
    plan.check().map_err(|problems| {
        usage(
            problems
                .iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join("; "),
        )
    })?;
    Ok(plan)
}

/// The agents' shared token, and its text for their Secret: from `file`, else
/// `MESHBENCH_AGENT_TOKEN`, else a new one (said in one line).
pub fn token_for_pods(file: Option<&Path>) -> Result<(Token, String)> {
    let text = match Token::load(file) {
        Ok(_) if file.is_some() => std::fs::read_to_string(file.expect("given"))?
            .trim()
            .to_string(),
        Ok(_) => std::env::var(meshbench_runner::agents::TOKEN_ENV)?
            .trim()
            .to_string(),
        Err(meshbench_runner::agents::TokenError::Missing) => {
            errln!("meshbench: no agent token given; a new one is in the Secret");
            new_token()
        }
        Err(e) => return Err(usage(e.to_string())),
    };
    let token = Token::new(text.clone()).map_err(|e| usage(e.to_string()))?;
    Ok((token, text))
}

fn new_token() -> String {
    let mut bytes = [0u8; 32];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        let _ = std::io::Read::read_exact(&mut f, &mut bytes);
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn gen(a: K8sGenArgs) -> Result<u8> {
    let yaml = plan(&a.plan, &a.coordinator)?.render().to_yaml();
    match &a.out {
        Some(path) => {
            std::fs::write(path, yaml).with_context(|| format!("writing {}", path.display()))?
        }
        None => out!("{yaml}"),
    }
    Ok(exit::OK)
}

pub fn run(a: K8sRunArgs) -> Result<u8> {
    let e = super::experiment::load(&a.plan.file, &[], Provision::Install)?;
    let ready_timeout = parse_duration("--ready-timeout", &a.ready_timeout)?;
    let listener = TcpListener::bind(&a.listen)
        .map_err(|err| usage(format!("--listen {}: cannot listen there: {err}", a.listen)))?;
    let port = listener.local_addr()?.port();
    let advertise = match &a.advertise {
        Some(addr) => addr.clone(),
        None if !listener.local_addr()?.ip().is_unspecified() => listener.local_addr()?.to_string(),
        None => {
            return Err(usage(format!(
                "--listen {} is every address: give --advertise HOST:{port}, the address the agent pods reach this process at",
                a.listen
            )))
        }
    };
    let plan = plan(&a.plan, &advertise)?;
    let token = Token::new(plan.token.clone()).map_err(|e| usage(e.to_string()))?;
    let store_path = a
        .store
        .clone()
        .unwrap_or_else(meshbench_store::default_path);
    let signals = Signals::install()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let cluster = rt.block_on(Cluster::connect(a.kubeconfig.as_deref()))?;
    let objects = plan.render();
    rt.block_on(cluster.apply(&objects))?;
    errln!(
        "meshbench: applied {} agent(s) as Job {}/{}-agents; agents dial {advertise}",
        plan.agents,
        plan.namespace,
        plan.name
    );
    let outcome = coordinate(
        &rt,
        &cluster,
        &objects,
        &plan,
        listener,
        token,
        ready_timeout,
        &e,
        &store_path,
        &signals,
    );
    if a.keep {
        errln!(
            "meshbench: --keep: the objects stay in namespace {}",
            plan.namespace
        );
    } else if let Err(err) = rt.block_on(cluster.delete(&objects)) {
        errln!("meshbench: warning: could not delete everything: {err}");
    } else {
        errln!("meshbench: deleted the Job, its pods, the Service, the ConfigMap and the Secret");
    }
    outcome
}

#[allow(clippy::too_many_arguments)]
fn coordinate(
    rt: &tokio::runtime::Runtime,
    cluster: &Cluster,
    objects: &meshbench_k8s::Objects,
    plan: &Plan,
    listener: TcpListener,
    token: Token,
    ready_timeout: Duration,
    e: &meshbench_experiment::Experiment,
    store_path: &Path,
    signals: &Signals,
) -> Result<u8> {
    let wanted = plan.agents as usize;
    let pods =
        rt.block_on(
            cluster.wait_ready(objects, wanted, ready_timeout, &signals.stop, |n| {
                errln!("meshbench: {n} of {wanted} agent pod(s) ready")
            }),
        );
    let pods = match pods {
        Err(ClusterError::Stopped { ready, wanted }) => {
            return Err(signals.interrupted(format_args!(
                "before the load (agent pods {ready} of {wanted} ready): nothing was measured"
            )))
        }
        pods => pods?,
    };
    errln!(
        "meshbench: agent pods ready: {}",
        pods.iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let fleet = Fleet::gather(
        FleetReach::Listen {
            listener,
            agents: wanted,
            wait: ready_timeout,
        },
        token,
        None,
        &signals.stop,
    );
    let fleet = match fleet {
        Err(FleetError::Stopped { joined, wanted }) => {
            return Err(signals.interrupted(format_args!(
                "before the load (agents {joined} of {wanted} dialled in): nothing was measured"
            )))
        }
        fleet => fleet?,
    };
    let site = meshbench_runner::Site::Here;
    let (_, code) = super::experiment::run(e, store_path, false, None, site, Some(fleet), signals)?;
    Ok(code)
}
