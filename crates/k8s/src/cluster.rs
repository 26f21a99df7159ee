//! The rendered objects on a real cluster: applied with server-side apply (field manager
//! `meshbench`), the agent pods waited for with a deadline, everything deleted at the end.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::config::{InferConfigError, KubeConfigOptions, Kubeconfig, KubeconfigError};
use kube::{Client, Config};
use meshbench_results::Stop;
use thiserror::Error;

use crate::names::MANAGER;
use crate::render::Objects;

/// Why the cluster could not do what was asked.
#[derive(Debug, Error)]
pub enum ClusterError {
    #[error("kubeconfig: {0}")]
    Config(ConfigError),
    #[error("the API server refused {what}: {why}")]
    Api { what: String, why: String },
    #[error("only {ready} of {wanted} agent pods were ready after {waited:?}: {pods}")]
    NotReady {
        ready: usize,
        wanted: usize,
        waited: Duration,
        pods: String,
    },
    #[error("agent pod {pod} failed before the run: {why}")]
    PodFailed { pod: String, why: String },
    /// A stop (Ctrl-C, SIGTERM) ended the wait for the agent pods.
    #[error("stopped while waiting for the agent pods ({ready} of {wanted} ready)")]
    Stopped { ready: usize, wanted: usize },
}

/// How often a wait of this crate reads the cluster again.
pub(crate) const POLL_EVERY: Duration = Duration::from_millis(500);

/// Sleeps `d` on the client's runtime, looking at `stop` every 20 ms or less (as
/// [`Stop::sleep`] does on a thread); `false` when a stop was asked.
pub(crate) async fn pause(d: Duration, stop: &Stop) -> bool {
    const LOOK_EVERY: Duration = Duration::from_millis(20);
    let end = Instant::now() + d;
    loop {
        if stop.requested() {
            return false;
        }
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return true;
        }
        tokio::time::sleep(left.min(LOOK_EVERY)).await;
    }
}

fn api_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> ClusterError {
    let what = what.into();
    move |e| ClusterError::Api {
        what,
        why: e.to_string(),
    }
}

/// Why no client was made for the API server: said as one line (the kube error's own words,
/// its file first when a kubeconfig was named), as the errors that wrap it print it.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The kubeconfig named could not be read.
    #[error("{}: {error}", path.display())]
    Read {
        path: PathBuf,
        error: KubeconfigError,
    },
    /// It was read, and says nothing a client can be made of.
    #[error("{0}")]
    Load(KubeconfigError),
    /// No kubeconfig named, and neither `$KUBECONFIG`, `~/.kube/config` nor a pod's service
    /// account gave one.
    #[error("{0}")]
    Infer(InferConfigError),
    /// A client could not be made of it (its TLS, its proxy).
    #[error("{0}")]
    Client(kube::Error),
}

/// How to reach the cluster: as `kubeconfig` says, else `$KUBECONFIG`, `~/.kube/config` or
/// the pod's service account.
pub(crate) async fn config_from(kubeconfig: Option<&Path>) -> Result<Config, ConfigError> {
    match kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path).map_err(|error| ConfigError::Read {
                path: path.to_path_buf(),
                error,
            })?;
            Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .map_err(ConfigError::Load)
        }
        None => Config::infer().await.map_err(ConfigError::Infer),
    }
}

/// An agent pod that is ready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentPod {
    pub name: String,
    /// Its completion index in the Indexed Job.
    pub index: Option<u32>,
    pub ip: Option<String>,
}

/// A cluster, reached as a kubeconfig says.
pub struct Cluster {
    pub(crate) client: Client,
}

impl Cluster {
    /// From `kubeconfig`, else `$KUBECONFIG`, `~/.kube/config` or the pod's service account.
    pub async fn connect(kubeconfig: Option<&Path>) -> Result<Cluster, ClusterError> {
        let config = config_from(kubeconfig)
            .await
            .map_err(ClusterError::Config)?;
        let client =
            Client::try_from(config).map_err(|e| ClusterError::Config(ConfigError::Client(e)))?;
        Ok(Cluster { client })
    }

    /// Applies every object (and the namespace, if missing), server-side.
    pub async fn apply(&self, o: &Objects) -> Result<(), ClusterError> {
        let ns = o.namespace();
        let pp = PatchParams::apply(MANAGER).force();
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        if namespaces
            .get_opt(&ns)
            .await
            .map_err(api_err("reading the namespace"))?
            .is_none()
        {
            let n = Namespace {
                metadata: ObjectMeta {
                    name: Some(ns.clone()),
                    ..ObjectMeta::default()
                },
                ..Namespace::default()
            };
            namespaces
                .patch(&ns, &pp, &Patch::Apply(&n))
                .await
                .map_err(api_err(format!("namespace {ns}")))?;
        }
        let name = |m: &kube::api::ObjectMeta| m.name.clone().unwrap_or_default();
        Api::<Secret>::namespaced(self.client.clone(), &ns)
            .patch(&name(&o.secret.metadata), &pp, &Patch::Apply(&o.secret))
            .await
            .map_err(api_err("the token Secret"))?;
        Api::<ConfigMap>::namespaced(self.client.clone(), &ns)
            .patch(
                &name(&o.config_map.metadata),
                &pp,
                &Patch::Apply(&o.config_map),
            )
            .await
            .map_err(api_err("the experiment ConfigMap"))?;
        Api::<Service>::namespaced(self.client.clone(), &ns)
            .patch(&name(&o.service.metadata), &pp, &Patch::Apply(&o.service))
            .await
            .map_err(api_err("the agents' Service"))?;
        Api::<Job>::namespaced(self.client.clone(), &ns)
            .patch(&name(&o.job.metadata), &pp, &Patch::Apply(&o.job))
            .await
            .map_err(api_err("the agents' Job"))?;
        Ok(())
    }

    /// Waits until `wanted` agent pods are ready, at most `timeout`; `progress` hears how
    /// many are ready. A pod that fails meanwhile is an error at once, and so is a `stop`
    /// (within 20 ms: [`ClusterError::Stopped`], with how many were ready).
    pub async fn wait_ready(
        &self,
        o: &Objects,
        wanted: usize,
        timeout: Duration,
        stop: &Stop,
        mut progress: impl FnMut(usize),
    ) -> Result<Vec<AgentPod>, ClusterError> {
        let ns = o.namespace();
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        let lp = ListParams::default().labels(&o.agent_selector());
        let started = Instant::now();
        let mut last_ready = usize::MAX;
        loop {
            let list = pods
                .list(&lp)
                .await
                .map_err(api_err("listing the agent pods"))?;
            let mut ready = Vec::new();
            let mut waiting = Vec::new();
            for p in &list.items {
                let name = p.metadata.name.clone().unwrap_or_default();
                let status = p.status.clone().unwrap_or_default();
                if status.phase.as_deref() == Some("Failed") {
                    return Err(ClusterError::PodFailed {
                        pod: name,
                        why: status
                            .message
                            .or(status.reason)
                            .unwrap_or_else(|| "Failed".into()),
                    });
                }
                let is_ready = status
                    .conditions
                    .iter()
                    .flatten()
                    .any(|c| c.type_ == "Ready" && c.status == "True");
                if is_ready {
                    ready.push(AgentPod {
                        name,
                        index: p
                            .metadata
                            .annotations
                            .as_ref()
                            .and_then(|a| a.get("batch.kubernetes.io/job-completion-index"))
                            .and_then(|i| i.parse().ok()),
                        ip: status.pod_ip.clone(),
                    });
                } else {
                    waiting.push(format!("{name} {}", why_not_ready(p)));
                }
            }
            if ready.len() != last_ready {
                last_ready = ready.len();
                progress(ready.len());
            }
            if ready.len() >= wanted {
                ready.sort_by_key(|p| p.index);
                return Ok(ready);
            }
            if started.elapsed() >= timeout {
                let missing = wanted.saturating_sub(list.items.len());
                if missing > 0 {
                    waiting.push(format!(
                        "{missing} not created yet (is the Job controller running? a quota?)"
                    ));
                }
                return Err(ClusterError::NotReady {
                    ready: ready.len(),
                    wanted,
                    waited: timeout,
                    pods: waiting.join("; "),
                });
            }
            if !pause(POLL_EVERY, stop).await {
                return Err(ClusterError::Stopped {
                    ready: ready.len(),
                    wanted,
                });
            }
        }
    }

    /// Deletes the Job (its pods with it), the Service, the ConfigMap and the Secret; what is
    /// already gone is not an error.
    pub async fn delete(&self, o: &Objects) -> Result<(), ClusterError> {
        let ns = o.namespace();
        let name = |m: &kube::api::ObjectMeta| m.name.clone().unwrap_or_default();
        let dp = DeleteParams::background();
        let gone = |r: Result<(), kube::Error>, what: &str| match r {
            Ok(()) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(api_err(what)(e)),
        };
        let c = &self.client;
        gone(
            Api::<Job>::namespaced(c.clone(), &ns)
                .delete(&name(&o.job.metadata), &dp)
                .await
                .map(|_| ()),
            "deleting the Job",
        )?;
        // The garbage collector would take the pods too; deleting them now ends the run here.
        gone(
            Api::<Pod>::namespaced(c.clone(), &ns)
                .delete_collection(
                    &DeleteParams::default(),
                    &ListParams::default().labels(&o.agent_selector()),
                )
                .await
                .map(|_| ()),
            "deleting the agent pods",
        )?;
        gone(
            Api::<Service>::namespaced(c.clone(), &ns)
                .delete(&name(&o.service.metadata), &dp)
                .await
                .map(|_| ()),
            "deleting the Service",
        )?;
        gone(
            Api::<ConfigMap>::namespaced(c.clone(), &ns)
                .delete(&name(&o.config_map.metadata), &dp)
                .await
                .map(|_| ()),
            "deleting the ConfigMap",
        )?;
        gone(
            Api::<Secret>::namespaced(c.clone(), &ns)
                .delete(&name(&o.secret.metadata), &dp)
                .await
                .map(|_| ()),
            "deleting the Secret",
        )
    }
}

/// Why a pod is not ready, in its own words: its phase, a condition's message, a container's
/// waiting reason (ImagePullBackOff, ...).
pub(crate) fn why_not_ready(p: &Pod) -> String {
    let status = p.status.clone().unwrap_or_default();
    let mut why = status.phase.unwrap_or_else(|| "Pending".into());
    if let Some(c) = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.status != "True" && c.message.is_some())
    {
        why.push_str(&format!(": {}", c.message.clone().unwrap_or_default()));
    }
    for cs in status.container_statuses.iter().flatten() {
        if let Some(w) = cs.state.as_ref().and_then(|s| s.waiting.as_ref()) {
            why.push_str(&format!(
                ", {}: {}",
                cs.name,
                w.reason.clone().unwrap_or_default()
            ));
        }
    }
    if p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none() && why == "Pending" {
        why.push_str(" (not scheduled)");
    }
    why
}
