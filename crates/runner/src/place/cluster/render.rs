//! What an experiment deploys on a cluster, from its file: the system under test
//! (`meshbench_k8s::system::System`), each step's shape (its limits, ambient labels, mTLS
//! mode), the agents' Job, the gateway's objects as `gen gateway` writes them, and `--dry-run`'s description of all of it, step by step.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use meshbench_experiment::cluster::{
    AgentsReach as FileReach, AntiAffinity as FileAntiAffinity, ClusterSection,
};
use meshbench_experiment::config::Experiment;
use meshbench_experiment::{ChainVariant, Step};
use meshbench_k8s::k8s_openapi::api::core::v1::Toleration;
use meshbench_k8s::render::PodExtras;
use meshbench_k8s::system::{self, ProxyLogging, Resources, Shape, System};
use meshbench_k8s::{AgentsReach, AntiAffinity, DistributedRun};
use meshbench_lab::change::Written;
use meshbench_lab::gateway::{self as lab_gateway, CertLayout, GatewayPlan};
use meshbench_lab::pki::Ca;
use meshbench_lab::program::envoy::access_log;
use meshbench_results::{Class, PeerAuthentication, Program, StepKind, Topology};
use serde_json::Value;

use super::gateway::{self, ClusterGateway};
use super::{SiteError, AGENTS, AGENT_PORT};

/// The system an experiment deploys (its gateway objects come later).
pub fn system_of(e: &Experiment, section: &ClusterSection) -> System {
    let has = |t: Topology| e.topologies.contains(&StepKind::Chain(t));
    let chains = || e.topologies.iter().filter_map(|k| k.chain());
    // A pod's CPUs are not this machine's: the backend's own default when the file gives none.
    let mut backend_args = crate::setup::backend_args(
        e,
        e.load.response_bytes.first().copied().unwrap_or(1024),
        (e.backend.threads > 0).then_some(e.backend.threads as usize),
    );
    if e.load.protocol.is_http2() {
        backend_args.push("--http2".into());
    }
    let tolerations = tolerations_of(section);
    System {
        namespace: section.namespace.clone(),
        image: section.image.clone(),
        pull_policy: section.image_pull_policy.name().into(),
        backend_args,
        server_sidecar: chains().any(Topology::has_server_sidecar),
        client_sidecar: chains().any(Topology::has_client_sidecar),
        gateway: has(Topology::Gateway) && e.gateway.of(None) == Program::Istio,
        waypoint: has(Topology::Waypoint),
        revision: section.istio_revision.clone(),
        node_selector: section.system_under_test.node_selector.clone(),
        tolerations,
        coordinator_port: section.coordinator_port().unwrap_or(AGENT_PORT),
        gateway_objects: Vec::new(),
        proxy_logging: e.attribution.map(|_| ProxyLogging {
            telemetry: access_log::istio_telemetry(&section.namespace),
            flush_interval: access_log::ISTIO_FLUSH_INTERVAL.into(),
        }),
        contour: gateway::contour_install(e, section),
    }
}

/// The taints the system under test's pods tolerate, as their pods carry them.
pub(super) fn tolerations_of(section: &ClusterSection) -> Vec<Toleration> {
    section
        .system_under_test
        .tolerations
        .iter()
        .map(|t| Toleration {
            key: t.key.clone(),
            operator: t.operator.clone(),
            value: t.value.clone(),
            effect: t.effect.clone(),
            ..Toleration::default()
        })
        .collect()
}

/// The shape of `variant`'s system: its limits (the swept one at the step's value), its
/// ambient labels, its mTLS mode.
pub fn shape_of(e: &Experiment, variant: &ChainVariant) -> Shape {
    let swept = |class: Class| variant.cpu.filter(|(c, _)| *c == class).map(|(_, c)| c);
    let resources = |class: Class, r: &meshbench_experiment::config::RoleLimits| Resources {
        cpu_cores: swept(class).or_else(|| r.cpus.first().copied()),
        memory_mib: r.memory_mib,
    };
    let sidecars = variant.topology.has_sidecars()
        || e.topologies
            .iter()
            .any(|k| k.chain().is_some_and(Topology::has_sidecars));
    let mode = match (e.proxy.mtls, variant.peer_authentication) {
        (false, _) => PeerAuthentication::Disable,
        (true, Some(m)) => m,
        (true, None) => e
            .proxy
            .peer_authentication
            .first()
            .copied()
            .unwrap_or_default(),
    };
    Shape {
        proxy: resources(Class::Proxy, &e.limits.proxy),
        client_proxy: Resources {
            cpu_cores: e.limits.proxy.cpus.first().copied(),
            memory_mib: e.limits.proxy.memory_mib,
        },
        // The cluster's Contour (its Deployment's container), swept like the proxies.
        control_plane: resources(Class::ControlPlane, &e.limits.control_plane),
        backend: resources(Class::Backend, &e.limits.backend),
        ambient: variant.topology.is_ambient(),
        use_waypoint: variant.topology == Topology::Waypoint,
        peer_authentication: sidecars.then(|| mode.name().to_ascii_uppercase()),
    }
}

/// The agents' Job, Service, ConfigMap and Secret for `e` on `section`'s cluster.
pub fn agents_of(
    e: &Experiment,
    section: &ClusterSection,
    system: &System,
    token: &str,
    experiment_text: &str,
) -> DistributedRun {
    let first = first_shape(e);
    let (labels, annotations) = system.agent_pod(&first);
    let how = match section.load_anti_affinity {
        FileAntiAffinity::Preferred => AntiAffinity::Preferred,
        FileAntiAffinity::Required => AntiAffinity::Required,
        FileAntiAffinity::None => AntiAffinity::None,
    };
    DistributedRun {
        name: AGENTS.into(),
        namespace: section.namespace.clone(),
        agents: e.agents.as_ref().and_then(|a| a.count).unwrap_or(1) as u32,
        image: section.image.clone(),
        reach: match section.agents_reach() {
            FileReach::Coordinator(c) => AgentsReach::Coordinator(c),
            FileReach::PortForward => AgentsReach::PortForward(AGENT_PORT),
        },
        token: token.to_string(),
        experiment_file_name: "experiment.yaml".into(),
        experiment: experiment_text.to_string(),
        cpu: section.agent_cpu.clone(),
        memory: section.agent_memory.clone(),
        sysctls: Vec::new(),
        anti_affinity: how,
        pod: PodExtras {
            labels,
            annotations,
            pull_policy: Some(section.image_pull_policy.name().into()),
            service_account: Some(system::AGENTS_ACCOUNT.into()),
            avoid: Some((
                BTreeMap::from([(
                    system::PART.to_string(),
                    system::SYSTEM_UNDER_TEST.to_string(),
                )]),
                how,
            )),
        },
    }
}

/// The shape of an experiment's first step.
pub(super) fn first_shape(e: &Experiment) -> Shape {
    let plan = meshbench_experiment::Plan::compile(e);
    plan.steps
        .first()
        .map(|s| step_shape(e, s))
        .unwrap_or_default()
}

/// The shape of `step`'s system: its chain's (a cluster realises chains only, as the file's
/// checks make sure).
fn step_shape(e: &Experiment, step: &Step) -> Shape {
    step.chain().map(|v| shape_of(e, v)).unwrap_or_default()
}

/// A gateway's objects as a run renders them, and what it keeps of them.
pub(super) struct GatewayRendered {
    pub objects: Vec<Value>,
    /// The files the load needs: its targets and the CA it trusts.
    pub targets: PathBuf,
    pub ca: PathBuf,
    /// What they were written from, for a step that changes them under load, and the files
    /// of them the run applies.
    pub written: Written,
    pub files: Vec<String>,
}

/// The gateway's objects, as `gen gateway` writes them for the run's namespace, and the files
/// the load needs (targets, CA), written under `dir`.
pub(super) fn gateway_objects(
    e: &Experiment,
    gateway: &dyn ClusterGateway,
    dir: &Path,
) -> Result<GatewayRendered, SiteError> {
    let plan = GatewayPlan {
        domains: e.gateway.domains as usize,
        paths: e.gateway.paths as usize,
        tls: true,
        http2: e.load.protocol.is_http2(),
        http3: false,
        grpc: e.load.protocol == meshbench_results::Protocol::Grpc,
        certs: CertLayout::PerDomain,
        backends: vec![SocketAddr::from(([127, 0, 0, 1], system::CAPTURED))],
        listen: SocketAddr::from(([0, 0, 0, 0], 443)),
        workers: 0,
        admin: None,
        out: dir.to_path_buf(),
        access_log: None,
        listeners_file: false,
        rotated: Default::default(),
    };
    let ca = Ca::new(lab_gateway::CA_NAME).map_err(|e| SiteError::Gateway(e.to_string()))?;
    let generated = lab_gateway::generate_by(&plan, gateway.target().as_ref(), &ca)
        .map_err(|e| SiteError::Gateway(e.to_string()))?;
    let mut objects = Vec::new();
    let mut files = Vec::new();
    for file in &generated.files {
        let Some(name) = file.file_name().map(|n| n.to_string_lossy().to_string()) else {
            continue;
        };
        if !gateway.applies(&name) {
            continue;
        }
        let text = std::fs::read_to_string(file)
            .map_err(|e| SiteError::Gateway(format!("{}: {e}", file.display())))?;
        objects.extend(
            meshbench_k8s::blocking::documents(&text)
                .map_err(|e| SiteError::Gateway(e.to_string()))?,
        );
        files.push(name);
    }
    Ok(GatewayRendered {
        objects,
        targets: dir.join("targets.txt"),
        ca: dir.join("ca.pem"),
        written: Written {
            plan: GatewayPlan {
                out: generated.dir.clone(),
                ..plan
            },
            ca: std::sync::Arc::new(ca),
            certs: generated.certs,
        },
        files,
    })
}

/// Every object and change a run would make, for `--dry-run`: the objects of the first step,
/// then each step's changes.
pub fn describe(e: &Experiment, section: &ClusterSection, token_note: &str) -> String {
    let plan = meshbench_experiment::Plan::compile(e);
    let mut system = system_of(e, section);
    let mut out = String::new();
    let dir = std::env::temp_dir().join(format!("meshbench-dry-run-{}", std::process::id()));
    let gateway = gateway::of(e, section);
    if let Some(g) = &gateway {
        match gateway_objects(e, g.as_ref(), &dir) {
            Ok(rendered) => system.gateway_objects = rendered.objects,
            Err(err) => out.push_str(&format!("# the gateway's objects: {err}\n")),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    let Some(first) = plan.steps.first() else {
        return out;
    };
    let mut objects = system.render(&step_shape(e, first));
    out.push_str(&format!(
        "# on the cluster: namespace {} (created, deleted at the end), then in it:\n",
        section.namespace
    ));
    out.push_str(&system::to_yaml(&objects));
    let agents = agents_of(e, section, &system, token_note, "# the experiment file\n").render();
    out.push_str("---\n");
    out.push_str(&agents.to_yaml());
    out.push_str(
        "# each step: what changes before it (a Deployment's or a DaemonSet's rollout is waited for)\n",
    );
    let mut borrowed = Vec::new();
    for step in &plan.steps {
        let shape = step_shape(e, step);
        let next = system.render(&shape);
        let mut changes = match step.index {
            0 => vec!["the objects above".to_string()],
            _ => system::changes(&objects, &next),
        };
        let limits = system.borrowed_limits(&shape);
        for limit in limits.iter().filter(|l| !borrowed.contains(*l)) {
            changes.push(format!(
                "{}: resources {} (the cluster's: its resources as they were are journaled first, put back at the end), then its rollout",
                limit.container, limit.resources
            ));
        }
        borrowed = limits;
        if changes.is_empty() {
            changes.push("no change".into());
        }
        out.push_str(&format!(
            "# step {} ({}): {}\n",
            step.index + 1,
            step.variant(),
            changes.join("; ")
        ));
        objects = next;
    }
    if let Some(line) = gateway.and_then(|g| g.put_back()) {
        out.push_str(&format!("# at the end: {line}\n"));
    }
    out.push_str(&format!(
        "# at the end: namespace {} deleted, and everything in it\n",
        section.namespace
    ));
    out
}
