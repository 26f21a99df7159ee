//! The `cluster` section of an experiment file: the file's lab topologies realised on a
//! Kubernetes cluster instead of this machine. The rest of the file keeps its meaning (the
//! topologies, the load matrix, `limits.<class>.cpus` as the CPU sweep, `proxy.type: istio`
//! for Istio's sidecars, `gateway.type: istio` for its ingress gateway, `agents.count` for how
//! many agent pods send the load); this section says where and with what: the namespace
//! meshbench creates (and deletes), the image of meshbench itself (backend and agents), how the
//! coordinator meets its agents (through the API server by default, or an address the pods
//! dial), where each role's CPU and memory are read (the kubelets through the API server by
//! default, or a Prometheus by URL or by Service), how long a rollout may take, and where the
//! pods go on a cluster of many nodes.
//! Pure: nothing here talks to a cluster; every rule is checked here, every mistake at once.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::external::External;

/// The `cluster` section.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterSection {
    /// How to reach the cluster; else `$KUBECONFIG`, `~/.kube/config` or the pod's service
    /// account. A relative path is beside the experiment file.
    pub kubeconfig: Option<PathBuf>,
    /// The namespace meshbench creates for the run and deletes at the end; it must not exist
    /// before (meshbench never changes what it did not create).
    pub namespace: String,
    /// meshbench's image: the backend pods and the agent pods run it.
    pub image: String,
    /// The pull policy of meshbench's image and of the gateway's proxy (Istio's).
    pub image_pull_policy: PullPolicy,
    /// `HOST:PORT` where the agent pods reach this process (the coordinator), which listens on
    /// `agents.listen` (by default every address at that port). None: the agents listen in
    /// their pods and the coordinator reaches each through a port-forward (the API server is
    /// the only route needed).
    pub coordinator: Option<String>,
    /// CPU and memory of each agent pod (requests = limits), e.g. "2", "1Gi".
    pub agent_cpu: Option<String>,
    pub agent_memory: Option<String>,
    /// Prometheus' base URL, as this machine reaches it; it must scrape the kubelets'
    /// cAdvisor. None (and no `prometheus`): each role is read from its node's kubelet
    /// through the API server.
    pub prometheus_url: Option<String>,
    /// Prometheus as a Service of the cluster, asked through the API server's service proxy
    /// (for a Prometheus this machine cannot reach by URL).
    pub prometheus: Option<PrometheusService>,
    /// How often Prometheus scrapes cAdvisor.
    pub scrape_interval_secs: f64,
    /// The longest one query may take.
    pub query_timeout_secs: f64,
    /// The longest a rollout (a changed limit, the first start) may take before its step
    /// fails.
    pub rollout_timeout_secs: f64,
    /// Istio's revision (`istio.io/rev`) that injects the sidecars; none: the default one
    /// (`istio-injection: enabled`).
    pub istio_revision: Option<String>,
    /// Where the system under test's pods go (backend, gateway, waypoint): node labels and
    /// the taints they tolerate, as seed 000 gave the gateway a machine of its own.
    pub system_under_test: Placement,
    /// How strictly the agent pods keep off the nodes of the system under test.
    pub load_anti_affinity: AntiAffinity,
    /// Where the cluster's Contour is (`gateway.type: contour`): the run does not deploy it,
    /// it changes the limits of its Deployments and puts them back.
    pub contour: ClusterContour,
}

/// `cluster.contour`: the Contour a user installed, named as Contour's own example manifests
/// (examples/render/contour-deployment.yaml) name it. Its containers are Contour's: `contour`
/// in Contour's Deployment, `envoy` in Envoy's.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterContour {
    /// Contour's namespace.
    pub namespace: String,
    /// Contour's Deployment (container `contour`): `limits.control_plane` sets it.
    pub deployment: String,
    /// Envoy's workload (container `envoy`): `limits.proxy` sets it.
    pub envoy: String,
    /// What kind of workload Envoy is: a Deployment, or a DaemonSet (one Envoy per node, as
    /// Contour's examples/contour/03-envoy.yaml deploys it); either's template takes the step's
    /// limits, and each node's Envoy is read.
    pub envoy_kind: EnvoyKind,
    /// The Service in front of Envoy that the agents dial, on its `https` port.
    pub service: String,
    /// Its HTTPS port.
    pub service_port: u16,
    /// Envoy's stats listener in its pods (Contour's `--stats-port`): Envoy's own counts, the
    /// witness, are read there through a port-forward (its admin is a unix socket).
    pub stats_port: u16,
}

impl Default for ClusterContour {
    fn default() -> Self {
        ClusterContour {
            namespace: "projectcontour".into(),
            deployment: "contour".into(),
            envoy: "envoy".into(),
            envoy_kind: EnvoyKind::Deployment,
            service: "envoy".into(),
            service_port: 443,
            stats_port: 8002,
        }
    }
}

/// The kind of workload Contour's Envoy runs as.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub enum EnvoyKind {
    /// As Contour's examples/render/contour-deployment.yaml deploys it.
    Deployment,
    /// Contour's default example (examples/contour/03-envoy.yaml): a pod on every node, all of
    /// them behind the Service, each changed by a step's limits and read.
    DaemonSet,
}

impl Default for ClusterSection {
    fn default() -> Self {
        ClusterSection {
            kubeconfig: None,
            namespace: "meshbench".into(),
            image: String::new(),
            image_pull_policy: PullPolicy::IfNotPresent,
            coordinator: None,
            agent_cpu: None,
            agent_memory: None,
            prometheus_url: None,
            prometheus: None,
            scrape_interval_secs: 15.0,
            query_timeout_secs: 10.0,
            rollout_timeout_secs: 180.0,
            istio_revision: None,
            system_under_test: Placement::default(),
            load_anti_affinity: AntiAffinity::Preferred,
            contour: ClusterContour::default(),
        }
    }
}

/// `cluster.prometheus`: a Prometheus Service, `NAMESPACE/NAME` and its port.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PrometheusService {
    /// `NAMESPACE/NAME`, e.g. `monitoring/prometheus`.
    pub service: String,
    pub port: u16,
}

impl Default for PrometheusService {
    fn default() -> Self {
        PrometheusService {
            service: String::new(),
            port: 9090,
        }
    }
}

impl PrometheusService {
    /// The Service's namespace and name (checked by [`ClusterSection::validate`]).
    pub fn namespace_and_name(&self) -> (&str, &str) {
        self.service.split_once('/').unwrap_or(("", &self.service))
    }
}

/// Where a cluster run reads each role's CPU, memory and bytes.
#[derive(Debug, Clone, PartialEq)]
pub enum UsageFrom {
    /// The kubelet of each role's node, through the API server's node proxy
    /// (`/api/v1/nodes/NODE/proxy/metrics/cadvisor`), polled every second while the step runs.
    Kubelet,
    /// A Prometheus this machine reaches at this base URL.
    PrometheusUrl(String),
    /// A Prometheus Service, asked through the API server's service proxy.
    PrometheusService {
        namespace: String,
        name: String,
        port: u16,
    },
}

/// How the coordinator meets the agent pods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentsReach {
    /// The agents listen in their pods, on their own loopback; the coordinator dials each
    /// through a port-forward (the API server is the only route).
    PortForward,
    /// The agents dial the coordinator at `HOST:PORT`.
    Coordinator(String),
}

/// Kubernetes' image pull policy, as Kubernetes spells it.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub enum PullPolicy {
    Always,
    IfNotPresent,
    Never,
}

impl PullPolicy {
    pub fn name(self) -> &'static str {
        match self {
            PullPolicy::Always => "Always",
            PullPolicy::IfNotPresent => "IfNotPresent",
            PullPolicy::Never => "Never",
        }
    }
}

/// How strictly pods keep apart.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum AntiAffinity {
    /// Preferably (a one-node cluster still runs).
    #[default]
    Preferred,
    /// Strictly (pods stay Pending when the nodes run out: the step says so).
    Required,
    None,
}

/// Node labels and tolerations of a group of pods.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Placement {
    pub node_selector: BTreeMap<String, String>,
    pub tolerations: Vec<Toleration>,
}

/// A Kubernetes toleration, as the pod spec spells it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Toleration {
    pub key: Option<String>,
    /// `Equal` (the default) or `Exists`.
    pub operator: Option<String>,
    pub value: Option<String>,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`; none: every effect.
    pub effect: Option<String>,
}

impl ClusterSection {
    /// A relative kubeconfig is beside the experiment file.
    pub fn resolve_paths(&mut self, dir: &Path) {
        if let Some(k) = &self.kubeconfig {
            if k.is_relative() {
                self.kubeconfig = Some(dir.join(k));
            }
        }
    }

    /// The coordinator's port (from `coordinator`, checked by [`ClusterSection::validate`]), when the
    /// agents dial it.
    pub fn coordinator_port(&self) -> Option<u16> {
        self.coordinator.as_ref()?.rsplit_once(':')?.1.parse().ok()
    }

    /// How the coordinator meets the agent pods.
    pub fn agents_reach(&self) -> AgentsReach {
        match &self.coordinator {
            Some(c) => AgentsReach::Coordinator(c.clone()),
            None => AgentsReach::PortForward,
        }
    }

    /// Where each role's figures are read.
    pub fn usage_from(&self) -> UsageFrom {
        match (&self.prometheus_url, &self.prometheus) {
            (Some(url), _) => UsageFrom::PrometheusUrl(url.clone()),
            (None, Some(s)) => {
                let (namespace, name) = s.namespace_and_name();
                UsageFrom::PrometheusService {
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                    port: s.port,
                }
            }
            (None, None) => UsageFrom::Kubelet,
        }
    }

    /// How the roles are read from Prometheus, in the words of an `external` section (the
    /// same reader reads both); `base` is the URL the queries go to.
    pub fn prometheus_at(&self, base: &str) -> External {
        External {
            prometheus_url: base.to_string(),
            scrape_interval_secs: self.scrape_interval_secs,
            query_timeout_secs: self.query_timeout_secs,
            variants: Vec::new(),
        }
    }

    /// The section's own rules (what of the rest of the file a cluster cannot do is
    /// `Experiment::validate`'s).
    pub fn validate(&self, p: &mut Vec<String>) {
        let ClusterSection {
            kubeconfig: _, // read when the run starts: a file that is not there is one line then
            namespace,
            image,
            image_pull_policy: _,
            coordinator,
            agent_cpu,
            agent_memory,
            prometheus_url,
            prometheus,
            scrape_interval_secs,
            query_timeout_secs,
            rollout_timeout_secs,
            istio_revision,
            system_under_test,
            load_anti_affinity: _,
            contour: _, // ClusterContour::validate, when the gateway is Contour
        } = self;
        if !is_dns_label(namespace, 63) {
            p.push(format!("cluster.namespace '{namespace}': use at most 63 lowercase letters, digits and '-' (a DNS label)"));
        }
        if image.trim().is_empty() || image.contains(char::is_whitespace) {
            p.push("cluster.image: give meshbench's image (it runs the backend and the agents), e.g. ghcr.io/you/meshbench:0.1".into());
        }
        if let Some(coordinator) = coordinator {
            match coordinator.rsplit_once(':') {
                Some((host, port))
                    if !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0) => {}
                _ => p.push(format!(
                    "cluster.coordinator '{coordinator}': give HOST:PORT where the agent pods reach this machine, or leave it out (the coordinator then reaches the agents through the API server)"
                )),
            }
        }
        for (key, q) in [("agent_cpu", agent_cpu), ("agent_memory", agent_memory)] {
            if let Some(q) = q {
                if !is_quantity(q) {
                    p.push(format!("cluster.{key} '{q}': not a Kubernetes quantity; give one like 500m, 2, 512Mi or 1Gi"));
                }
            }
        }
        if let Some(url) = prometheus_url {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                p.push(format!("cluster.prometheus_url '{url}': give Prometheus' base URL (http:// or https://), or leave it out (each role is then read from its kubelet through the API server)"));
            }
        }
        if let Some(s) = prometheus {
            if prometheus_url.is_some() {
                p.push("cluster.prometheus: give Prometheus by URL (prometheus_url) or by Service (prometheus.service), not both".into());
            }
            let (ns, name) = s.namespace_and_name();
            if !is_dns_label(ns, 63) || !is_dns_label(name, 63) {
                p.push(format!("cluster.prometheus.service '{}': give NAMESPACE/NAME, e.g. monitoring/prometheus", s.service));
            }
            if s.port == 0 {
                p.push("cluster.prometheus.port: expected a port from 1 to 65535, found 0".into());
            }
        }
        for (key, v) in [
            ("scrape_interval_secs", scrape_interval_secs),
            ("query_timeout_secs", query_timeout_secs),
            ("rollout_timeout_secs", rollout_timeout_secs),
        ] {
            if !(v.is_finite() && *v > 0.0) {
                p.push(format!(
                    "cluster.{key}: expected a number above 0, found {v}"
                ));
            }
        }
        if let Some(rev) = istio_revision {
            if !is_dns_label(rev, 63) {
                p.push(format!(
                    "cluster.istio_revision '{rev}': not a revision name"
                ));
            }
        }
        for (i, t) in system_under_test.tolerations.iter().enumerate() {
            if let Some(op) = &t.operator {
                if op != "Equal" && op != "Exists" {
                    p.push(format!("cluster.system_under_test.tolerations[{i}].operator: expected Equal or Exists, found {op}"));
                }
            }
            if let Some(effect) = &t.effect {
                if !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&effect.as_str()) {
                    p.push(format!("cluster.system_under_test.tolerations[{i}].effect: expected NoSchedule, PreferNoSchedule or NoExecute, found {effect}"));
                }
            }
        }
    }
}

impl ClusterContour {
    /// Its names are Kubernetes names, its ports ports (read when the gateway is Contour).
    pub(crate) fn validate(&self, p: &mut Vec<String>) {
        let ClusterContour {
            namespace,
            deployment,
            envoy,
            envoy_kind: _, // either kind is realised
            service,
            service_port,
            stats_port,
        } = self;
        if !is_dns_label(namespace, 63) {
            p.push(format!("cluster.contour.namespace '{namespace}': not a namespace name (at most 63 lowercase letters, digits and '-')"));
        }
        for (key, name) in [("deployment", deployment), ("envoy", envoy)] {
            if !is_dns_subdomain(name) {
                p.push(format!("cluster.contour.{key} '{name}': not a workload's name (lowercase letters, digits, '-' and '.', at most 253)"));
            }
        }
        if !is_dns_label(service, 63) {
            p.push(format!("cluster.contour.service '{service}': not a Service's name (at most 63 lowercase letters, digits and '-')"));
        }
        for (key, port) in [("service_port", service_port), ("stats_port", stats_port)] {
            if *port == 0 {
                p.push(format!(
                    "cluster.contour.{key}: expected a port from 1 to 65535, found 0"
                ));
            }
        }
    }
}

/// A DNS-1123 subdomain (a Deployment's name): labels joined by dots, at most 253 characters.
pub fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(|l| is_dns_label(l, 63))
}

/// A DNS-1123 label of at most `max` characters.
pub fn is_dns_label(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// A Kubernetes quantity such as 500m, 2, 512Mi or 1Gi.
pub fn is_quantity(q: &str) -> bool {
    let digits = q.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let suffix = &q[digits.len()..];
    let known = ["", "m", "k", "M", "G", "T", "Ki", "Mi", "Gi", "Ti"];
    digits.parse::<f64>().is_ok_and(|v| v > 0.0) && known.contains(&suffix)
}

#[cfg(test)]
mod tests {
    use crate::config::parse;

    const TWOPODS: &str = "name: t\ntopologies: [baseline, serveronly, both]\nproxy:\n  type: istio\ncluster:\n  image: meshbench:1\n  coordinator: 10.0.0.1:7700\n  prometheus_url: http://prometheus:9090\n";

    #[test]
    fn a_cluster_file_takes_istios_sidecars_without_netns_and_reads_its_defaults() {
        let e = parse("t.yaml", TWOPODS, &[]).unwrap();
        let c = e.cluster.unwrap();
        assert_eq!(c.namespace, "meshbench");
        assert_eq!(c.coordinator_port(), Some(7700));
        assert_eq!(c.rollout_timeout_secs, 180.0);
        assert_eq!(
            c.usage_from(),
            super::UsageFrom::PrometheusUrl("http://prometheus:9090".into())
        );
        assert_eq!(
            c.agents_reach(),
            super::AgentsReach::Coordinator("10.0.0.1:7700".into())
        );
    }

    #[test]
    fn without_a_coordinator_or_prometheus_the_api_server_is_the_only_route() {
        let text = "name: t\ntopologies: [baseline, serveronly]\nproxy:\n  type: istio\ncluster:\n  image: meshbench:1\n";
        let c = parse("t.yaml", text, &[]).unwrap().cluster.unwrap();
        assert_eq!(c.agents_reach(), super::AgentsReach::PortForward);
        assert_eq!(c.usage_from(), super::UsageFrom::Kubelet);
        assert_eq!(c.coordinator_port(), None);
        let by_service = parse(
            "t.yaml",
            text,
            &["cluster.prometheus.service=monitoring/prometheus".into()],
        )
        .unwrap()
        .cluster
        .unwrap();
        assert_eq!(
            by_service.usage_from(),
            super::UsageFrom::PrometheusService {
                namespace: "monitoring".into(),
                name: "prometheus".into(),
                port: 9090
            }
        );
        let both = parse(
            "c.yaml",
            text,
            &[
                "cluster.prometheus.service=prometheus".into(),
                "cluster.prometheus_url=http://p:9090".into(),
            ],
        )
        .unwrap_err()
        .to_string();
        assert!(both.contains("not both"), "{both}");
        assert!(both.contains("give NAMESPACE/NAME"), "{both}");
    }

    #[test]
    fn what_a_cluster_cannot_do_is_named_at_once() {
        let text = "name: t\ntopologies: [both, external, ambient]\nisolation: netns\nload:\n  protocol: http3\n  response_bytes: [64, 1024]\nlimits:\n  proxy:\n    cpus: [1, 2]\n    cpuset: '0'\n  client:\n    cpus: [1]\ncluster:\n  namespace: Bad_Name\n  coordinator: nowhere\n  agent_cpu: lots\n  system_under_test:\n    tolerations: [{key: k, operator: Maybe}]\n";
        let err = parse("c.yaml", text, &[]).unwrap_err().to_string();
        for expected in [
            "cluster.namespace 'Bad_Name'",
            "cluster.image: give meshbench's image",
            "cluster.coordinator 'nowhere'",
            "cluster.agent_cpu 'lots'",
            "tolerations[0].operator: expected Equal or Exists",
            "proxy.type: nginx has no sidecar on a cluster",
            "isolation: on a cluster",
            "load.protocol: http3",
            "limits.proxy.cpuset: a pod's CPUs are the kubelet's",
            "limits.client: on a cluster the agent pods send the load",
            "limits.proxy.cpus: on a cluster a sweep restarts",
            "cluster: realises the lab's topologies",
            "a pod with a sidecar is never in ambient",
            "load.response_bytes: on a cluster the backend is deployed once",
        ] {
            assert!(err.contains(expected), "{expected}: {err}");
        }
        assert!(err.lines().all(|l| l.starts_with("c.yaml: ")), "{err}");
    }

    const CONTOUR: &str = "name: t\ntopologies: [baseline, gateway]\ngateway:\n  type: contour\nlimits:\n  proxy:\n    cpus: [1, 2]\n  control_plane:\n    cpus: [1]\ncluster:\n  image: meshbench:1\n  coordinator: 10.0.0.1:7700\n  prometheus_url: http://prometheus:9090\n";

    #[test]
    fn contour_on_a_cluster_takes_its_manifests_names_and_a_control_plane_limit() {
        let e = parse("t.yaml", CONTOUR, &[]).unwrap();
        let c = e.cluster.unwrap().contour;
        assert_eq!(
            (
                c.namespace.as_str(),
                c.deployment.as_str(),
                c.envoy.as_str()
            ),
            ("projectcontour", "contour", "envoy")
        );
        assert_eq!(
            (c.service.as_str(), c.service_port, c.stats_port),
            ("envoy", 443, 8002)
        );
        assert_eq!(c.envoy_kind, super::EnvoyKind::Deployment);
        // Contour's own example runs Envoy as a DaemonSet: taken as it is.
        let e = parse(
            "t.yaml",
            CONTOUR,
            &["cluster.contour.envoy_kind=DaemonSet".into()],
        )
        .unwrap();
        assert_eq!(
            e.cluster.unwrap().contour.envoy_kind,
            super::EnvoyKind::DaemonSet
        );
    }

    #[test]
    fn what_contour_on_a_cluster_cannot_take_is_named_at_once() {
        let sets = [
            "topologies=[baseline, gateway, both, ambient]".to_string(),
            "cluster.contour.deployment=Contour!".into(),
            "cluster.contour.service=a.b".into(),
            "limits.control_plane.cpuset=0".into(),
            "attribution.sample=0.1".into(),
        ];
        let err = parse("c.yaml", CONTOUR, &sets).unwrap_err().to_string();
        for expected in [
            "topologies: gateway.type: contour on a cluster runs baseline and gateway only",
            "run both, ambient in a file of its own",
            "cluster.contour.deployment 'Contour!'",
            "cluster.contour.service 'a.b'",
            "limits.control_plane.cpuset: a pod's CPUs are the kubelet's",
            "attribution: on a cluster the proxies log through Istio's Telemetry",
        ] {
            assert!(err.contains(expected), "{expected}: {err}");
        }
        let istio = parse("c.yaml", CONTOUR, &["gateway.type=istio".into()])
            .unwrap_err()
            .to_string();
        assert!(
            istio.contains("limits.control_plane: on a cluster it limits the cluster's Contour"),
            "{istio}"
        );
    }
}
