//! Before the first step, and in `--dry-run`: what would otherwise fail a cluster run late,
//! found within a minute and said in one line with what to do. The nodes the plan can use are
//! listed (Ready, schedulable, their taints tolerated, the system under test's node selector
//! matched), one short-lived pod of meshbench's image goes to each of them with the run's pull
//! policy (an image that cannot be pulled, a quota or an RBAC rule that forbids a pod, a
//! selector that matches nothing), and the path each role's figures are read through is asked
//! once (each node's kubelet through the API server, or Prometheus).
//!
//! Each pod prints its node's kernel, CPU model and CPUs ([`NodeFacts`]); with the API server's
//! version they are what a cluster step says ran there ([`Preflight::versions`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{
    Affinity, Container, Node, NodeAffinity, NodeSelector, NodeSelectorRequirement,
    NodeSelectorTerm, Pod, PodSecurityContext, PodSpec, ResourceRequirements, SecurityContext,
    Taint, Toleration,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use meshbench_engine::Stop;
use meshbench_experiment::cluster::{AntiAffinity, ClusterSection, UsageFrom};
use meshbench_experiment::config::Experiment;
use meshbench_k8s::blocking::ApiError;
use meshbench_k8s::k8s_openapi;
use meshbench_k8s::BlockingClient;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::kubelet::cadvisor_path;
use super::render::tolerations_of;
use crate::place::external::prometheus::Prometheus;

/// The longest the probe pods may take, from their creation to their end.
pub const PROBES_WITHIN: Duration = Duration::from_secs(60);
/// At most this many nodes are probed (the system under test's first, then the agents').
pub const MAX_PROBED_NODES: usize = 10;
/// The probe pods' label.
const PROBE_LABEL: (&str, &str) = ("meshbench.io/part", "preflight");
/// Container waiting reasons that will not clear by themselves.
const IMAGE_FAILURES: [&str; 5] = [
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
    "CreateContainerConfigError",
];

/// What a probe pod says of its node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct NodeFacts {
    /// `uname -r`.
    pub kernel: String,
    /// `/proc/cpuinfo`'s first `model name`.
    pub cpu_model: String,
    /// Logical CPUs in `/proc/cpuinfo`.
    pub cpus: usize,
}

impl NodeFacts {
    /// This machine's (the probe pod's node: the kernel and `/proc/cpuinfo` are the node's).
    pub fn here() -> NodeFacts {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let model = cpuinfo
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == "model name").then(|| v.trim().to_string())
            })
            .unwrap_or_default();
        NodeFacts {
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .unwrap_or_default()
                .trim()
                .to_string(),
            cpu_model: model,
            cpus: cpuinfo
                .lines()
                .filter(|l| l.starts_with("processor"))
                .count(),
        }
    }
}

/// Why a cluster run cannot start, found before it did.
#[derive(Debug, Error)]
pub enum PreflightError {
    #[error(transparent)]
    Api(#[from] ApiError),
    /// The file asks what this cluster cannot give (exit 2: a change of the file fixes it).
    #[error("{0}")]
    Impossible(String),
    /// What the cluster refused or could not do, one line each.
    #[error("{}", .0.join("; and "))]
    Refused(Vec<String>),
    #[error("stopped while checking the cluster")]
    Stopped,
}

/// What the checks found: the nodes probed, with what their pods said, and the cluster's
/// version.
#[derive(Debug, Clone, Default)]
pub struct Preflight {
    pub kubernetes: String,
    pub nodes: BTreeMap<String, NodeReport>,
}

/// A node as the API server and its probe pod describe it.
#[derive(Debug, Clone, Default)]
pub struct NodeReport {
    pub container_runtime: String,
    pub kubelet: String,
    pub facts: Option<NodeFacts>,
}

impl Preflight {
    /// What a cluster step stores as what ran there (besides the pods' images).
    pub fn versions(&self) -> BTreeMap<String, String> {
        let mut v = BTreeMap::from([("kubernetes".to_string(), self.kubernetes.clone())]);
        for (name, n) in &self.nodes {
            let facts = n.facts.clone().unwrap_or_default();
            v.insert(
                format!("node:{name}"),
                format!(
                    "kernel {}, {} x {}, {}, kubelet {}",
                    facts.kernel, facts.cpus, facts.cpu_model, n.container_runtime, n.kubelet
                ),
            );
        }
        v
    }
}

/// A node the plan can use.
struct Usable {
    name: String,
    for_system: bool,
    for_agents: bool,
}

/// Checks the cluster for `e` in `namespace` (which exists: the probe pods go there, and are
/// deleted before this returns), within [`PROBES_WITHIN`] for the pods.
pub fn check(
    client: &BlockingClient,
    e: &Experiment,
    section: &ClusterSection,
    stop: &Stop,
) -> Result<Preflight, PreflightError> {
    let kubernetes = client.server_version()?;
    let nodes = client.list_cluster_scoped::<Node>()?;
    let usable = usable_nodes(&nodes, section)?;
    let agents = e.agents.as_ref().and_then(|a| a.count).unwrap_or(1);
    check_anti_affinity(&usable, section, agents)?;
    let mut preflight = Preflight {
        kubernetes,
        nodes: BTreeMap::new(),
    };
    for n in &nodes {
        let name = n.metadata.name.clone().unwrap_or_default();
        if usable.iter().any(|u| u.name == name) {
            let info = n
                .status
                .as_ref()
                .and_then(|s| s.node_info.clone())
                .unwrap_or_default();
            preflight.nodes.insert(
                name,
                NodeReport {
                    container_runtime: info.container_runtime_version,
                    kubelet: info.kubelet_version,
                    facts: None,
                },
            );
        }
    }
    let mut refused = Vec::new();
    let probed = probe_pods(client, section, &usable, stop, &mut preflight, &mut refused);
    let _ = client.delete_pods(
        &section.namespace,
        &format!("{}={}", PROBE_LABEL.0, PROBE_LABEL.1),
        Duration::ZERO,
    );
    probed?;
    refused.extend(usage_path_missing(client, section, &usable));
    match refused.is_empty() {
        true => Ok(preflight),
        false => Err(PreflightError::Refused(refused)),
    }
}

/// The nodes the plan can use: Ready and schedulable, for the system under test also matching
/// its node selector with its taints tolerated, for the agents untainted.
fn usable_nodes(nodes: &[Node], section: &ClusterSection) -> Result<Vec<Usable>, PreflightError> {
    let placement = &section.system_under_test;
    let mut usable = Vec::new();
    let mut seen = Vec::new();
    for n in nodes {
        let name = n.metadata.name.clone().unwrap_or_default();
        let spec = n.spec.clone().unwrap_or_default();
        let ready = n
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        seen.push(name.clone());
        if !ready || spec.unschedulable == Some(true) {
            continue;
        }
        let labels = n.metadata.labels.clone().unwrap_or_default();
        let taints = spec.taints.unwrap_or_default();
        let selected = placement
            .node_selector
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v));
        let tolerations = tolerations_of(section);
        let for_system = selected && taints.iter().all(|t| tolerated(t, &tolerations));
        let for_agents = taints.iter().all(|t| tolerated(t, &[]));
        if for_system || for_agents {
            usable.push(Usable {
                name,
                for_system,
                for_agents,
            });
        }
    }
    if !usable.iter().any(|u| u.for_system) {
        let selector: Vec<String> = placement
            .node_selector
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        return Err(PreflightError::Impossible(format!(
            "no node can run the system under test: cluster.system_under_test.node_selector {{{}}} with its tolerations matches none of the Ready, schedulable nodes ({}): label a node (kubectl label node NODE KEY=VALUE), or change the selector",
            selector.join(", "),
            seen.join(", ")
        )));
    }
    if !usable.iter().any(|u| u.for_agents) {
        return Err(PreflightError::Impossible(format!(
            "no node can run the agent pods: every Ready, schedulable node is tainted ({}); the agents tolerate no taint",
            seen.join(", ")
        )));
    }
    Ok(usable)
}

/// Whether `taint` keeps no pod with `tolerations` off its node (a `PreferNoSchedule` taint
/// keeps none off).
fn tolerated(taint: &Taint, tolerations: &[Toleration]) -> bool {
    if taint.effect == "PreferNoSchedule" {
        return true;
    }
    tolerations.iter().any(|t| {
        let effect = t.effect.as_deref().is_none_or(|e| e == taint.effect);
        let key = t.key.as_deref().is_none_or(|k| k == taint.key);
        let value = match t.operator.as_deref() {
            Some("Exists") => true,
            _ => t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""),
        };
        effect && key && value
    })
}

/// `load_anti_affinity: required` needs a node for each agent besides the system under
/// test's: with fewer, the agent pods would stay Pending for the whole rollout limit.
fn check_anti_affinity(
    usable: &[Usable],
    section: &ClusterSection,
    agents: usize,
) -> Result<(), PreflightError> {
    if section.load_anti_affinity != AntiAffinity::Required {
        return Ok(());
    }
    let for_agents = usable.iter().filter(|u| u.for_agents).count();
    let shared = usable
        .iter()
        .filter(|u| u.for_agents && u.for_system)
        .count();
    let system_only = usable.iter().any(|u| u.for_system && !u.for_agents);
    // The system under test takes at least one node; if it can go where no agent can, it
    // need not take an agent's.
    let free = match system_only {
        true => for_agents,
        false => for_agents - shared.min(1),
    };
    if free < agents {
        return Err(PreflightError::Impossible(format!(
            "cluster.load_anti_affinity: required keeps each of the {agents} agent pod(s) on a node of its own, away from the system under test, and this cluster has {} usable node(s) ({}): the agents would stay Pending; use preferred, fewer agents (agents.count), or more nodes",
            usable.len(),
            usable.iter().map(|u| u.name.as_str()).collect::<Vec<_>>().join(", ")
        )));
    }
    Ok(())
}

/// One probe pod per node the plan can use (at most [`MAX_PROBED_NODES`]), each waited for
/// until it ended, or failed in a way that will not clear; what each said goes into
/// `preflight`, each failure into `refused`.
fn probe_pods(
    client: &BlockingClient,
    section: &ClusterSection,
    usable: &[Usable],
    stop: &Stop,
    preflight: &mut Preflight,
    refused: &mut Vec<String>,
) -> Result<(), PreflightError> {
    let mut order: Vec<&Usable> = usable.iter().filter(|u| u.for_system).collect();
    order.extend(usable.iter().filter(|u| !u.for_system));
    let mut pods: BTreeMap<String, String> = BTreeMap::new();
    for (i, node) in order.iter().take(MAX_PROBED_NODES).enumerate() {
        let name = format!("meshbench-preflight-{i}");
        let pod = probe_pod(section, &name, node);
        match client.apply_typed(&pod) {
            Ok(()) => {
                pods.insert(name, node.name.clone());
            }
            Err(ApiError::Refused { code, message, .. }) if code == 403 || code == 422 => {
                refused.push(format!(
                    "the API server refused meshbench's pod in namespace {} ({code}: {message}): check the RBAC that runs meshbench (deploy/cluster-experiment-rbac.yaml) and the namespace's quota and pod security",
                    section.namespace
                ));
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        }
    }
    let began = Instant::now();
    while !pods.is_empty() {
        if stop.requested() {
            return Err(PreflightError::Stopped);
        }
        let listed = client.list::<Pod>(
            &section.namespace,
            &format!("{}={}", PROBE_LABEL.0, PROBE_LABEL.1),
        )?;
        for pod in listed {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let Some(node) = pods.get(&name).cloned() else {
                continue;
            };
            match judge(&pod) {
                Probe::Waiting => continue,
                Probe::Ended => {
                    let log = client
                        .container_log(&section.namespace, &name, "probe", Duration::from_secs(600))
                        .unwrap_or_default();
                    let facts = log.lines().rev().find_map(|l| serde_json::from_str(l).ok());
                    if let Some(report) = preflight.nodes.get_mut(&node) {
                        report.facts = facts;
                    }
                }
                Probe::Failed(why) => refused.push(format!(
                    "meshbench's image {} on node {node}: {why}",
                    section.image
                )),
                Probe::Unschedulable(why) => refused.push(format!(
                    "a pod of meshbench's image cannot be scheduled on node {node}: {why}"
                )),
            }
            pods.remove(&name);
        }
        if began.elapsed() >= PROBES_WITHIN && !pods.is_empty() {
            for (name, node) in &pods {
                let why = client
                    .get::<Pod>(&section.namespace, name)
                    .ok()
                    .flatten()
                    .map_or_else(|| "gone".to_string(), |p| pending_reason(&p));
                refused.push(format!(
                    "meshbench's pod on node {node} did not run within {} s ({why}): check that the node can pull {} (cluster.image, cluster.image_pull_policy)",
                    PROBES_WITHIN.as_secs(),
                    section.image
                ));
            }
            break;
        }
        if !stop.sleep(Duration::from_millis(500)) {
            return Err(PreflightError::Stopped);
        }
    }
    Ok(())
}

/// A probe pod for `node`: meshbench's image with the run's pull policy, printing its node's
/// facts, with the system under test's tolerations when it goes to one of its nodes.
fn probe_pod(section: &ClusterSection, name: &str, node: &Usable) -> Pod {
    let small = BTreeMap::from([
        ("cpu".to_string(), Quantity("50m".into())),
        ("memory".to_string(), Quantity("32Mi".into())),
    ]);
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(section.namespace.clone()),
            labels: Some(BTreeMap::from([
                (PROBE_LABEL.0.to_string(), PROBE_LABEL.1.to_string()),
                (
                    "app.kubernetes.io/managed-by".to_string(),
                    "meshbench".to_string(),
                ),
                ("sidecar.istio.io/inject".to_string(), "false".to_string()),
            ])),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "probe".into(),
                image: Some(section.image.clone()),
                image_pull_policy: Some(section.image_pull_policy.name().into()),
                command: Some(vec!["/meshbench".into()]),
                args: Some(vec!["k8s".into(), "node-facts".into()]),
                resources: Some(ResourceRequirements {
                    requests: Some(small.clone()),
                    limits: Some(small),
                    ..ResourceRequirements::default()
                }),
                security_context: Some(SecurityContext {
                    allow_privilege_escalation: Some(false),
                    read_only_root_filesystem: Some(true),
                    ..SecurityContext::default()
                }),
                ..Container::default()
            }],
            restart_policy: Some("Never".into()),
            automount_service_account_token: Some(false),
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(true),
                run_as_user: Some(65532),
                run_as_group: Some(65532),
                ..PodSecurityContext::default()
            }),
            tolerations: node.for_system.then(|| tolerations_of(section)),
            affinity: Some(Affinity {
                node_affinity: Some(NodeAffinity {
                    required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                        node_selector_terms: vec![NodeSelectorTerm {
                            match_fields: Some(vec![NodeSelectorRequirement {
                                key: "metadata.name".into(),
                                operator: "In".into(),
                                values: Some(vec![node.name.clone()]),
                            }]),
                            ..NodeSelectorTerm::default()
                        }],
                    }),
                    ..NodeAffinity::default()
                }),
                ..Affinity::default()
            }),
            ..PodSpec::default()
        }),
        ..Pod::default()
    }
}

/// Where a probe pod is.
#[derive(Debug, PartialEq)]
enum Probe {
    Waiting,
    Ended,
    /// Its image or container cannot start, and will not by itself: the kubelet's reason.
    Failed(String),
    /// The scheduler will not place it: its message.
    Unschedulable(String),
}

/// Why `pod` will not start by itself (an image that cannot be pulled, a container that cannot
/// be made, no node that takes it), if so: for a pod of meshbench's image other than a probe.
pub fn cannot_start(pod: &Pod) -> Option<String> {
    match judge(pod) {
        Probe::Failed(why) | Probe::Unschedulable(why) => Some(why),
        _ => None,
    }
}

fn judge(pod: &Pod) -> Probe {
    let status = pod.status.clone().unwrap_or_default();
    match status.phase.as_deref() {
        Some("Succeeded") => return Probe::Ended,
        Some("Failed") => {
            let why = status
                .container_statuses
                .iter()
                .flatten()
                .find_map(|c| c.state.as_ref()?.terminated.as_ref())
                .map_or_else(
                    || status.message.clone().unwrap_or_default(),
                    |t| {
                        format!(
                            "the container ended with {} ({})",
                            t.exit_code,
                            t.reason.clone().unwrap_or_default()
                        )
                    },
                );
            return Probe::Failed(format!(
                "{why}: is it meshbench's image (deploy/Containerfile)?"
            ));
        }
        _ => {}
    }
    for cs in status.container_statuses.iter().flatten() {
        if let Some(w) = cs.state.as_ref().and_then(|s| s.waiting.as_ref()) {
            let reason = w.reason.clone().unwrap_or_default();
            if IMAGE_FAILURES.contains(&reason.as_str()) {
                return Probe::Failed(format!(
                    "{reason}: {}",
                    w.message.clone().unwrap_or_default()
                ));
            }
        }
    }
    let unschedulable = status.conditions.iter().flatten().find(|c| {
        c.type_ == "PodScheduled"
            && c.status == "False"
            && c.reason.as_deref() == Some("Unschedulable")
    });
    match unschedulable {
        Some(c) => Probe::Unschedulable(c.message.clone().unwrap_or_default()),
        None => Probe::Waiting,
    }
}

/// Why a pod is still pending, in a few words.
fn pending_reason(pod: &Pod) -> String {
    let status = pod.status.clone().unwrap_or_default();
    let waiting = status
        .container_statuses
        .iter()
        .flatten()
        .find_map(|c| c.state.as_ref()?.waiting.as_ref())
        .map(|w| {
            format!(
                "{}: {}",
                w.reason.clone().unwrap_or_default(),
                w.message.clone().unwrap_or_default()
            )
        });
    waiting.unwrap_or_else(|| status.phase.unwrap_or_else(|| "Pending".into()))
}

/// Whether the path each role is read through answers: each probed node's kubelet through the
/// API server, or Prometheus; one line for what does not.
fn usage_path_missing(
    client: &BlockingClient,
    section: &ClusterSection,
    usable: &[Usable],
) -> Vec<String> {
    let timeout = Duration::from_secs_f64(section.query_timeout_secs);
    match section.usage_from() {
        UsageFrom::Kubelet => {
            let mut missing = Vec::new();
            let nodes: BTreeSet<&str> = usable.iter().map(|u| u.name.as_str()).collect();
            for node in nodes.into_iter().take(MAX_PROBED_NODES) {
                let what = format!("node {node}'s /metrics/cadvisor");
                let why = match client.get_through(&cadvisor_path(node), &what, timeout, 64 << 20) {
                    Ok(page)
                        if page.status == 200
                            && page.text.contains("container_cpu_usage_seconds_total") =>
                    {
                        continue
                    }
                    Ok(page) if page.status == 200 => {
                        "it has no container_cpu_usage_seconds_total series".to_string()
                    }
                    Ok(page) => format!(
                        "HTTP {}: {}",
                        page.status,
                        page.text.chars().take(160).collect::<String>().trim()
                    ),
                    Err(e) => e.to_string(),
                };
                missing.push(format!(
                    "the kubelet of node {node} does not serve /metrics/cadvisor through the API server ({why}): grant get on nodes/proxy (deploy/cluster-experiment-rbac.yaml), or name a Prometheus (cluster.prometheus_url, cluster.prometheus.service)"
                ));
            }
            missing
        }
        UsageFrom::PrometheusUrl(url) => prometheus_missing(
            Prometheus::new(&url, timeout, 2 * timeout),
            &format!("cluster.prometheus_url {url}"),
        ),
        UsageFrom::PrometheusService {
            namespace,
            name,
            port,
        } => match client.another() {
            Ok(c) => prometheus_missing(
                Prometheus::through_api_server(c, (&namespace, &name, port), timeout, 2 * timeout),
                &format!("cluster.prometheus.service {namespace}/{name}"),
            ),
            Err(e) => vec![e.to_string()],
        },
    }
}

/// One line when `prom` does not answer a query of the kubelets' cAdvisor series.
fn prometheus_missing(prom: Prometheus, named: &str) -> Vec<String> {
    let now = meshbench_lab::sampler::now_ms() as f64 / 1000.0;
    match prom.query("count(container_cpu_usage_seconds_total)", now) {
        Ok(series) if !series.is_empty() => Vec::new(),
        Ok(_) => vec![format!(
            "{named}: Prometheus has no container_cpu_usage_seconds_total series: have it scrape each kubelet's /metrics/cadvisor, or leave Prometheus out (the kubelets are then read through the API server)"
        )],
        Err(e) => vec![format!(
            "{named}: {e}; or leave Prometheus out (the kubelets are then read through the API server)"
        )],
    }
}

/// The images `pods` run, by container, as the kubelet reports them (`image`, and the digest
/// it resolved), for a step's record.
pub fn images_of(pods: &[Pod]) -> Vec<(String, String)> {
    let mut out = BTreeSet::new();
    for p in pods {
        let statuses = p.status.as_ref().and_then(|s| s.container_statuses.clone());
        for cs in statuses.unwrap_or_default() {
            let digest = cs
                .image_id
                .rsplit_once('@')
                .map_or(String::new(), |(_, d)| format!(" ({d})"));
            out.insert((cs.name, format!("{}{digest}", cs.image)));
        }
    }
    out.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateWaiting, ContainerStatus, NodeCondition, NodeSpec,
        NodeStatus, PodCondition, PodStatus,
    };

    fn node(name: &str, labels: &[(&str, &str)], taints: Vec<Taint>) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec {
                taints: Some(taints),
                ..NodeSpec::default()
            }),
            status: Some(NodeStatus {
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    ..NodeCondition::default()
                }]),
                ..NodeStatus::default()
            }),
        }
    }

    fn section(text: &str) -> ClusterSection {
        let file =
            format!("name: t\ntopologies: [baseline]\ncluster:\n  image: meshbench:1\n{text}");
        meshbench_experiment::parse("t.yaml", &file, &[])
            .unwrap()
            .cluster
            .unwrap()
    }

    #[test]
    fn a_selector_that_matches_no_node_is_one_line_naming_the_nodes() {
        let s = section("  system_under_test:\n    node_selector: {pool: gateways}\n");
        let err = usable_nodes(&[node("a", &[], vec![])], &s)
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("{pool=gateways}") && err.contains("(a)"),
            "{err}"
        );
        assert!(!err.contains('\n'));
    }

    #[test]
    fn a_tainted_pool_is_the_system_under_tests_when_it_tolerates_it() {
        let s = section("  system_under_test:\n    node_selector: {pool: sut}\n    tolerations: [{key: dedicated, operator: Exists, effect: NoSchedule}]\n");
        let taint = Taint {
            key: "dedicated".into(),
            value: Some("sut".into()),
            effect: "NoSchedule".into(),
            ..Taint::default()
        };
        let usable = usable_nodes(
            &[
                node("sut", &[("pool", "sut")], vec![taint]),
                node("load", &[], vec![]),
            ],
            &s,
        )
        .unwrap();
        let pairs: Vec<(&str, bool, bool)> = usable
            .iter()
            .map(|u| (u.name.as_str(), u.for_system, u.for_agents))
            .collect();
        assert_eq!(pairs, [("sut", true, false), ("load", false, true)]);
        // Required anti-affinity: one agent fits on `load`, two do not.
        let s = section("  load_anti_affinity: required\n");
        assert!(check_anti_affinity(&usable, &s, 1).is_ok());
        let err = check_anti_affinity(&usable, &s, 2).unwrap_err().to_string();
        assert!(
            err.contains("2 agent pod(s)") && err.contains("use preferred"),
            "{err}"
        );
    }

    #[test]
    fn required_anti_affinity_on_one_node_is_refused() {
        let s = section("  load_anti_affinity: required\n");
        let usable = usable_nodes(&[node("only", &[], vec![])], &s).unwrap();
        let err = check_anti_affinity(&usable, &s, 1).unwrap_err().to_string();
        assert!(err.contains("1 usable node(s) (only)"), "{err}");
    }

    #[test]
    fn an_image_that_cannot_be_pulled_is_said_with_the_kubelets_reason() {
        let waiting = |reason: &str| Pod {
            status: Some(PodStatus {
                phase: Some("Pending".into()),
                container_statuses: Some(vec![ContainerStatus {
                    name: "probe".into(),
                    state: Some(ContainerState {
                        waiting: Some(ContainerStateWaiting {
                            reason: Some(reason.into()),
                            message: Some("pull access denied".into()),
                        }),
                        ..ContainerState::default()
                    }),
                    ..ContainerStatus::default()
                }]),
                ..PodStatus::default()
            }),
            ..Pod::default()
        };
        assert_eq!(
            judge(&waiting("ErrImagePull")),
            Probe::Failed("ErrImagePull: pull access denied".into())
        );
        assert_eq!(judge(&waiting("ContainerCreating")), Probe::Waiting);
        let unschedulable = Pod {
            status: Some(PodStatus {
                conditions: Some(vec![PodCondition {
                    type_: "PodScheduled".into(),
                    status: "False".into(),
                    reason: Some("Unschedulable".into()),
                    message: Some("0/1 nodes are available".into()),
                    ..PodCondition::default()
                }]),
                ..PodStatus::default()
            }),
            ..Pod::default()
        };
        assert_eq!(
            judge(&unschedulable),
            Probe::Unschedulable("0/1 nodes are available".into())
        );
    }

    #[test]
    fn a_node_says_its_kernel_and_cpus() {
        let facts = NodeFacts::here();
        assert!(!facts.kernel.is_empty() && facts.cpus >= 1, "{facts:?}");
    }
}
