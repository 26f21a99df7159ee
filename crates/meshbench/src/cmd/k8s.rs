//! `meshbench gen k8s` (the objects of a run from agents, as YAML), `meshbench k8s run`
//! (apply them, wait for the agent pods, run the experiment from them as their coordinator,
//! delete them, also after a failure or Ctrl-C), `k8s restore` (put back what a killed
//! cluster run left, from its journal) and the hidden `k8s node-facts`. The objects are
//! `meshbench_k8s::render`'s; the pods are gathered as the fleet by the runner's one bring-up
//! (a cluster experiment's, `cluster::agent_pods`) through the one blocking client, the
//! experiment run as every other (`common::session`).

use std::io::Read;
use std::net::TcpListener;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use meshbench_k8s::{AntiAffinity, BlockingClient, DistributedRun};
use meshbench_runner::agents::Token;
use meshbench_runner::place::cluster::agent_pods::{self, AgentsError, Coordinator};
use meshbench_runner::place::cluster::journal_dir;
use meshbench_runner::place::cluster::preflight::NodeFacts;
use meshbench_runner::setup::Provision;

use super::common::experiment_file;
use super::common::fleet::token_for_pods;
use super::common::journal::{ended_journals, restore_one};
use super::common::session;
use super::common::signals::Signals;
use super::common::units::parse_duration;
use crate::cli::{AntiAffinityArg, K8sGenArgs, K8sPlanFlags, K8sRestoreArgs, K8sRunArgs};
use crate::{exit, usage};

/// The plan the flags describe, every mistake found (bad input: exit 2).
fn plan(flags: &K8sPlanFlags, coordinator: &str) -> Result<DistributedRun> {
    let experiment = std::fs::read_to_string(&flags.file)
        .map_err(|e| usage(format!("{}: cannot read it: {e}", flags.file.display())))?;
    // The file must be a valid experiment before anything is rendered from it.
    experiment_file::load(&flags.file, &[], Provision::Plan)?;
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
    let anti_affinity = match flags.anti_affinity {
        AntiAffinityArg::Preferred => AntiAffinity::Preferred,
        AntiAffinityArg::Required => AntiAffinity::Required,
        AntiAffinityArg::None => AntiAffinity::None,
    };
    let plan = DistributedRun {
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
    let e = experiment_file::load(&a.plan.file, &[], Provision::Install)?;
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
    let client = BlockingClient::connect(a.kubeconfig.as_deref())?;
    let objects = plan.render();
    client.apply_agents(&objects)?;
    errln!(
        "meshbench: applied {} agent(s) as Job {}/{}-agents; agents dial {advertise}",
        plan.agents,
        plan.namespace,
        plan.name
    );
    let coordinator = Coordinator {
        listener: Some(listener),
        token,
        token_text: plan.token.clone(),
    };
    let outcome = coordinate(
        &client,
        &objects,
        &plan,
        coordinator,
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
    } else if let Err(err) = client.delete_agents(&objects) {
        errln!("meshbench: warning: could not delete everything: {err}");
    } else {
        errln!("meshbench: deleted the Job, its pods, the Service, the ConfigMap and the Secret");
    }
    outcome
}

/// The agent pods gathered as the fleet (the runner's one bring-up, a cluster experiment's
/// too), then the experiment run from them.
#[allow(clippy::too_many_arguments)]
fn coordinate(
    client: &BlockingClient,
    objects: &meshbench_k8s::Objects,
    plan: &DistributedRun,
    coordinator: Coordinator,
    ready_timeout: Duration,
    e: &meshbench_experiment::Experiment,
    store_path: &Path,
    signals: &Signals,
) -> Result<u8> {
    let wanted = plan.agents as usize;
    let gathered = agent_pods::gather(
        client,
        objects,
        wanted,
        ready_timeout,
        coordinator,
        &signals.stop,
        |n| errln!("meshbench: {n} of {wanted} agent pod(s) ready"),
    );
    let gathered = match gathered {
        Err(AgentsError::Stopped(during)) => {
            return Err(signals.interrupted(format_args!(
                "before the load ({during}): nothing was measured"
            )))
        }
        gathered => gathered?,
    };
    errln!(
        "meshbench: agent pods ready: {}",
        (gathered.pods.iter())
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let site = meshbench_runner::Site::Here;
    let fleet = Some(gathered.fleet);
    let (_, code) = session::run(e, store_path, false, None, site, fleet, signals)?;
    Ok(code)
}

/// `meshbench k8s restore`.
pub fn restore(a: K8sRestoreArgs) -> Result<u8> {
    if a.when_stdin_closes {
        // Until the run that started this ends, however it ends.
        let mut sink = [0u8; 64];
        let mut stdin = std::io::stdin();
        while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
    }
    let paths = if a.journals.is_empty() {
        let store = a
            .store
            .clone()
            .unwrap_or_else(meshbench_store::default_path);
        ended_journals(&journal_dir(&store))
    } else {
        a.journals.clone()
    };
    let mut failed = 0;
    for path in paths.iter().filter(|p| p.exists()) {
        if let Err(err) = restore_one(path) {
            errln!("meshbench: {}: {err:#}", path.display());
            failed += 1;
        }
    }
    Ok(if failed == 0 { exit::OK } else { exit::FAILED })
}

/// `meshbench k8s node-facts`: this node's kernel, CPU model and CPUs as one JSON line (what
/// a cluster run's check pods print, read back through the API server).
pub fn node_facts() -> Result<u8> {
    out!("{}", serde_json::to_string(&NodeFacts::here())?);
    Ok(exit::OK)
}
