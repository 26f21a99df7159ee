//! The objects of one distributed run, from a [`DistributedRun`]: pure, so `meshbench gen k8s` prints
//! exactly what `meshbench k8s run` applies, and tests parse every object back.
//!
//! - Secret `NAME-token`: the shared token, handed to each agent as `MESHBENCH_AGENT_TOKEN`
//!   (never on its command line, which any pod reader sees).
//! - ConfigMap `NAME-experiment`: the experiment file, mounted read-only at /etc/meshbench (a
//!   record of what ran, and the place for files its options name).
//! - Service `NAME-agents`: headless, selecting the agents; with the Job's pods' subdomain it
//!   gives each agent a stable DNS name (`NAME-agents-0.NAME-agents`).
//! - Job `NAME-agents`: Indexed, `completions = parallelism = agents`, each pod one
//!   `meshbench agent --coordinator ADDR --name POD` (the agents dial the coordinator), or
//!   `meshbench agent --listen 127.0.0.1:PORT --name POD` (the coordinator reaches each through
//!   a port-forward: only the API server needs to be reachable, and nothing on the pod
//!   network can reach the agent). `backoffLimit: 0` and restart policy
//!   `Never`: an agent that dies mid-step is reported lost by the coordinator, not silently
//!   replaced by a pod that would join with half a step gone. Requests equal limits (Guaranteed
//!   QoS: the CPU an agent measures with is the CPU it was given), pods spread over nodes by
//!   anti-affinity, optional sysctls (the local port range for many connections), a non-root
//!   user and a read-only root filesystem.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Affinity, ConfigMap, ConfigMapVolumeSource, Container, EnvVar, EnvVarSource,
    ObjectFieldSelector, PodAffinityTerm, PodAntiAffinity, PodSecurityContext, PodSpec,
    PodTemplateSpec, ResourceRequirements, Secret, SecretKeySelector, SecurityContext, Service,
    ServiceSpec, Sysctl, Volume, VolumeMount, WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::ByteString;
use thiserror::Error;

/// Where the experiment is mounted in each agent.
pub const EXPERIMENT_DIR: &str = "/etc/meshbench";
const TOKEN_KEY: &str = "token";

/// How agents spread over nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AntiAffinity {
    /// Preferably one agent per node (the default: a small cluster still runs).
    #[default]
    Preferred,
    /// Strictly one per node (pods stay Pending when nodes run out: `k8s run` says so).
    Required,
    None,
}

/// How agent pods and their coordinator meet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentsReach {
    /// The agents dial the coordinator at `HOST:PORT` (which the pods must reach).
    Coordinator(String),
    /// The agents listen on their pod's loopback at this port; the coordinator comes through
    /// a port-forward (the API server is the only route needed).
    PortForward(u16),
}

/// One distributed run, as the user asked for it.
#[derive(Debug, Clone)]
pub struct DistributedRun {
    /// Prefix of every object's name (DNS-1123 label, at most 40 characters).
    pub name: String,
    pub namespace: String,
    pub agents: u32,
    pub image: String,
    /// How the agents and their coordinator meet.
    pub reach: AgentsReach,
    pub token: String,
    pub experiment_file_name: String,
    pub experiment: String,
    /// CPU and memory of each agent (requests = limits), e.g. "2", "1Gi".
    pub cpu: Option<String>,
    pub memory: Option<String>,
    pub sysctls: Vec<(String, String)>,
    pub anti_affinity: AntiAffinity,
    /// What the pod template carries besides the agent (an experiment on a cluster: Istio's
    /// injection and capture, the pods to keep away from).
    pub pod: PodExtras,
}

/// Labels and annotations of the agent pods beyond their own, the image's pull policy, and
/// other pods to keep off the agents' nodes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodExtras {
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// `IfNotPresent` when not given.
    pub pull_policy: Option<String>,
    /// The pods' ServiceAccount (an Istio sidecar's identity); none: the namespace's default.
    pub service_account: Option<String>,
    /// Pods with these labels (the system under test) kept off the agents' nodes, this
    /// strictly.
    pub avoid: Option<(BTreeMap<String, String>, AntiAffinity)>,
}

/// What is wrong with a plan: one line each.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("{0}")]
pub struct DistributedRunError(pub String);

/// The rendered objects, in the order they are applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Objects {
    pub secret: Secret,
    pub config_map: ConfigMap,
    pub service: Service,
    pub job: Job,
}

impl Objects {
    /// The namespace they are in (the API server's default when the Job names none).
    pub fn namespace(&self) -> String {
        (self.job.metadata.namespace.clone())
            .unwrap_or_else(|| crate::names::DEFAULT_NAMESPACE.into())
    }

    /// Multi-document YAML, as `kubectl apply -f` takes it.
    pub fn to_yaml(&self) -> String {
        let docs = [
            serde_yaml_ng::to_string(&self.secret),
            serde_yaml_ng::to_string(&self.config_map),
            serde_yaml_ng::to_string(&self.service),
            serde_yaml_ng::to_string(&self.job),
        ];
        docs.into_iter()
            .map(|d| d.expect("Kubernetes objects serialise"))
            .collect::<Vec<_>>()
            .join("---\n")
    }

    /// The label selector of the agent pods.
    pub fn agent_selector(&self) -> String {
        let labels = self.job.metadata.labels.clone().unwrap_or_default();
        format!(
            "app.kubernetes.io/instance={},app.kubernetes.io/component=agent",
            labels
                .get("app.kubernetes.io/instance")
                .cloned()
                .unwrap_or_default()
        )
    }
}

fn dns_label(what: &str, s: &str, max: usize) -> Result<(), DistributedRunError> {
    let ok = !s.is_empty()
        && s.len() <= max
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(DistributedRunError(format!(
            "{what} '{s}': use at most {max} lowercase letters, digits and '-' (a DNS label)"
        )))
    }
}

fn quantity(what: &str, q: &str) -> Result<(), DistributedRunError> {
    let digits = q.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let suffix = &q[digits.len()..];
    let known = ["", "m", "k", "M", "G", "T", "Ki", "Mi", "Gi", "Ti"];
    if digits.parse::<f64>().is_ok_and(|v| v > 0.0) && known.contains(&suffix) {
        Ok(())
    } else {
        Err(DistributedRunError(format!(
            "{what} '{q}': not a Kubernetes quantity; give one like 500m, 2, 512Mi or 1Gi"
        )))
    }
}

impl DistributedRun {
    /// Every mistake, one line each.
    pub fn check(&self) -> Result<(), Vec<DistributedRunError>> {
        let mut problems = Vec::new();
        let mut note = |r: Result<(), DistributedRunError>| {
            if let Err(e) = r {
                problems.push(e)
            }
        };
        note(dns_label("--name", &self.name, 40));
        note(dns_label("--namespace", &self.namespace, 63));
        if self.agents == 0 || self.agents > 10_000 {
            note(Err(DistributedRunError(format!(
                "--agents {}: give 1 to 10000 agents",
                self.agents
            ))));
        }
        if self.image.is_empty() || self.image.contains(char::is_whitespace) {
            note(Err(DistributedRunError(format!(
                "--image '{}': not an image reference",
                self.image
            ))));
        }
        match &self.reach {
            AgentsReach::Coordinator(c) => match c.rsplit_once(':') {
                Some((host, port))
                    if !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0) => {}
                _ => note(Err(DistributedRunError(format!(
                    "--coordinator '{c}': give HOST:PORT the agents can reach"
                )))),
            },
            AgentsReach::PortForward(0) => note(Err(DistributedRunError(
                "the agents' port: give one from 1 to 65535".into(),
            ))),
            AgentsReach::PortForward(_) => {}
        }
        if let Some(c) = &self.cpu {
            note(quantity("--cpu", c));
        }
        if let Some(m) = &self.memory {
            note(quantity("--memory", m));
        }
        for (k, _) in &self.sysctls {
            let ok = !k.is_empty()
                && k.split('.').all(|p| {
                    !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                });
            if !ok {
                note(Err(DistributedRunError(format!(
                    "--sysctl '{k}': not a sysctl name"
                ))));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems)
        }
    }

    fn meta(&self, suffix: &str, component: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(format!("{}-{suffix}", self.name)),
            namespace: Some(self.namespace.clone()),
            labels: Some(self.labels(component)),
            ..Default::default()
        }
    }

    fn labels(&self, component: &str) -> BTreeMap<String, String> {
        BTreeMap::from([
            (
                "app.kubernetes.io/name".to_string(),
                "meshbench".to_string(),
            ),
            ("app.kubernetes.io/instance".to_string(), self.name.clone()),
            (
                "app.kubernetes.io/component".to_string(),
                component.to_string(),
            ),
        ])
    }

    /// The objects of this plan (check it first).
    pub fn render(&self) -> Objects {
        Objects {
            secret: self.secret(),
            config_map: self.config_map(),
            service: self.service(),
            job: self.job(),
        }
    }

    /// The Secret holding the agents' shared token.
    fn secret(&self) -> Secret {
        Secret {
            metadata: self.meta("token", "token"),
            data: Some(BTreeMap::from([(
                TOKEN_KEY.to_string(),
                ByteString(self.token.as_bytes().to_vec()),
            )])),
            type_: Some("Opaque".into()),
            ..Default::default()
        }
    }

    /// The ConfigMap holding the experiment file.
    fn config_map(&self) -> ConfigMap {
        ConfigMap {
            metadata: self.meta("experiment", "experiment"),
            data: Some(BTreeMap::from([(
                self.experiment_file_name.clone(),
                self.experiment.clone(),
            )])),
            ..Default::default()
        }
    }

    /// The headless Service that gives each agent pod a DNS name.
    fn service(&self) -> Service {
        Service {
            metadata: self.meta("agents", "agent"),
            spec: Some(ServiceSpec {
                cluster_ip: Some("None".into()),
                selector: Some(self.labels("agent")),
                publish_not_ready_addresses: Some(true),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// The agent container's CPU and memory, as both requests and limits, if any is set.
    fn resources(&self) -> Option<ResourceRequirements> {
        {
            let mut r = BTreeMap::new();
            if let Some(c) = &self.cpu {
                r.insert("cpu".to_string(), Quantity(c.clone()));
            }
            if let Some(m) = &self.memory {
                r.insert("memory".to_string(), Quantity(m.clone()));
            }
            (!r.is_empty()).then(|| ResourceRequirements {
                requests: Some(r.clone()),
                limits: Some(r),
                ..Default::default()
            })
        }
    }

    /// How agent pods avoid sharing a node, if they should.
    fn anti_affinity(&self) -> Option<PodAntiAffinity> {
        let same_job = PodAffinityTerm {
            label_selector: Some(LabelSelector {
                match_labels: Some(self.labels("agent")),
                ..Default::default()
            }),
            topology_key: "kubernetes.io/hostname".into(),
            ..Default::default()
        };
        let mut terms = vec![(same_job, self.anti_affinity)];
        if let Some((labels, how)) = &self.pod.avoid {
            terms.push((
                PodAffinityTerm {
                    label_selector: Some(LabelSelector {
                        match_labels: Some(labels.clone()),
                        ..Default::default()
                    }),
                    topology_key: "kubernetes.io/hostname".into(),
                    ..Default::default()
                },
                *how,
            ));
        }
        let mut a = PodAntiAffinity::default();
        for (term, how) in terms {
            match how {
                AntiAffinity::None => {}
                AntiAffinity::Preferred => a
                    .preferred_during_scheduling_ignored_during_execution
                    .get_or_insert_with(Vec::new)
                    .push(WeightedPodAffinityTerm {
                        weight: 100,
                        pod_affinity_term: term,
                    }),
                AntiAffinity::Required => a
                    .required_during_scheduling_ignored_during_execution
                    .get_or_insert_with(Vec::new)
                    .push(term),
            }
        }
        (a != PodAntiAffinity::default()).then_some(a)
    }

    /// The agent container: `meshbench agent` dialing the coordinator with the Secret's token.
    fn container(&self) -> Container {
        Container {
            name: "agent".into(),
            image: Some(self.image.clone()),
            image_pull_policy: Some(
                self.pod
                    .pull_policy
                    .clone()
                    .unwrap_or_else(|| "IfNotPresent".into()),
            ),
            command: Some(vec!["/meshbench".into()]),
            args: Some(self.agent_args()),
            env: Some(vec![
                EnvVar {
                    name: "MESHBENCH_AGENT_TOKEN".into(),
                    value_from: Some(EnvVarSource {
                        secret_key_ref: Some(SecretKeySelector {
                            name: format!("{}-token", self.name),
                            key: TOKEN_KEY.into(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                EnvVar {
                    name: "POD_NAME".into(),
                    value_from: Some(EnvVarSource {
                        field_ref: Some(ObjectFieldSelector {
                            field_path: "metadata.name".into(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            ]),
            resources: self.resources(),
            security_context: Some(SecurityContext {
                allow_privilege_escalation: Some(false),
                read_only_root_filesystem: Some(true),
                ..Default::default()
            }),
            volume_mounts: Some(vec![VolumeMount {
                name: "experiment".into(),
                mount_path: EXPERIMENT_DIR.into(),
                read_only: Some(true),
                ..Default::default()
            }]),
            ..Default::default()
        }
    }

    /// `meshbench agent`'s arguments: how it meets its coordinator, and its name.
    fn agent_args(&self) -> Vec<String> {
        let meet = match &self.reach {
            AgentsReach::Coordinator(c) => ["--coordinator".to_string(), c.clone()],
            AgentsReach::PortForward(port) => ["--listen".to_string(), format!("127.0.0.1:{port}")],
        };
        let mut args = vec!["agent".to_string()];
        args.extend(meet);
        args.extend(["--name".to_string(), "$(POD_NAME)".to_string()]);
        args
    }

    /// The agent pod: non-root, its sysctls, the experiment mounted, never restarted.
    fn pod(&self) -> PodSpec {
        PodSpec {
            containers: vec![self.container()],
            restart_policy: Some("Never".into()),
            service_account_name: self.pod.service_account.clone(),
            subdomain: Some(format!("{}-agents", self.name)),
            affinity: self.anti_affinity().map(|a| Affinity {
                pod_anti_affinity: Some(a),
                ..Default::default()
            }),
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(true),
                run_as_user: Some(65532),
                run_as_group: Some(65532),
                sysctls: (!self.sysctls.is_empty()).then(|| {
                    self.sysctls
                        .iter()
                        .map(|(name, value)| Sysctl {
                            name: name.clone(),
                            value: value.clone(),
                        })
                        .collect()
                }),
                ..Default::default()
            }),
            volumes: Some(vec![Volume {
                name: "experiment".into(),
                config_map: Some(ConfigMapVolumeSource {
                    name: format!("{}-experiment", self.name),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            ..Default::default()
        }
    }

    /// The Indexed Job that runs one pod per agent.
    fn job(&self) -> Job {
        Job {
            metadata: self.meta("agents", "agent"),
            spec: Some(JobSpec {
                completion_mode: Some("Indexed".into()),
                completions: Some(self.agents as i32),
                parallelism: Some(self.agents as i32),
                backoff_limit: Some(0),
                template: PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(
                            self.pod
                                .labels
                                .clone()
                                .into_iter()
                                .chain(self.labels("agent"))
                                .collect(),
                        ),
                        annotations: (!self.pod.annotations.is_empty())
                            .then(|| self.pod.annotations.clone()),
                        ..Default::default()
                    }),
                    spec: Some(self.pod()),
                },
                ..Default::default()
            }),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> DistributedRun {
        DistributedRun {
            name: "gw-test".into(),
            namespace: "load".into(),
            agents: 3,
            image: "meshbench:0.1.0".into(),
            reach: AgentsReach::Coordinator("10.0.0.1:7700".into()),
            token: "0123456789abcdef0123".into(),
            experiment_file_name: "experiment.yaml".into(),
            experiment: "name: x\n".into(),
            cpu: Some("2".into()),
            memory: Some("1Gi".into()),
            sysctls: vec![("net.ipv4.ip_local_port_range".into(), "1024 65535".into())],
            anti_affinity: AntiAffinity::Preferred,
            pod: PodExtras::default(),
        }
    }

    #[test]
    fn every_object_parses_back_from_the_yaml() {
        let objects = plan().render();
        let yaml = objects.to_yaml();
        let docs: Vec<&str> = yaml.split("---\n").collect();
        assert_eq!(docs.len(), 4);
        let secret: Secret = serde_yaml_ng::from_str(docs[0]).unwrap();
        let config_map: ConfigMap = serde_yaml_ng::from_str(docs[1]).unwrap();
        let service: Service = serde_yaml_ng::from_str(docs[2]).unwrap();
        let job: Job = serde_yaml_ng::from_str(docs[3]).unwrap();
        assert_eq!(
            Objects {
                secret,
                config_map,
                service,
                job: job.clone()
            },
            objects
        );
        let spec = job.spec.unwrap();
        assert_eq!(spec.completion_mode.as_deref(), Some("Indexed"));
        assert_eq!((spec.completions, spec.parallelism), (Some(3), Some(3)));
        let pod = spec.template.spec.unwrap();
        let c = &pod.containers[0];
        assert!(
            !c.args
                .as_ref()
                .unwrap()
                .iter()
                .any(|a| a.contains("0123456789")),
            "no token on argv"
        );
        let r = c.resources.as_ref().unwrap();
        assert_eq!(r.requests, r.limits, "Guaranteed QoS");
        assert_eq!(
            pod.security_context.unwrap().sysctls.unwrap()[0].value,
            "1024 65535"
        );
        assert!(yaml.contains("kind: Job") && yaml.contains("apiVersion: batch/v1"));
    }

    #[test]
    fn every_mistake_is_one_line() {
        let mut p = plan();
        p.name = "Bad_Name".into();
        p.agents = 0;
        p.reach = AgentsReach::Coordinator("nohost".into());
        p.cpu = Some("two".into());
        p.sysctls = vec![("net..x".into(), "1".into())];
        let problems = p.check().unwrap_err();
        assert_eq!(problems.len(), 5, "{problems:?}");
        assert!(plan().check().is_ok());
    }
}
