//! When a Deployment's rollout is done: the controller has seen its newest template, every
//! replica runs it and is ready, and no pod of an older one is left (a step never measures two
//! generations side by side). Waiting is bounded; a rollout that does not finish names the
//! reason of the pod that holds it up, in the kubelet's and the scheduler's own words
//! (`Pending: 0/1 nodes are available: 1 Insufficient cpu`, `ImagePullBackOff`...).

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use meshbench_results::Stop;
use thiserror::Error;

use crate::blocking::{ApiError, BlockingClient};
use crate::cluster::{why_not_ready, POLL_EVERY};

/// Where a rollout is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rollout {
    Done,
    /// Not yet, and why.
    Waiting(String),
}

/// Why a rollout was not waited out.
#[derive(Debug, Error)]
pub enum RolloutError {
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error("deployment {namespace}/{name}: its rollout did not finish within {} s: {why}", waited.as_secs())]
    NotDone {
        namespace: String,
        name: String,
        waited: Duration,
        why: String,
    },
    #[error("deployment {namespace}/{name}: no such Deployment")]
    Missing { namespace: String, name: String },
    #[error("stopped while waiting for the rollout of {0}")]
    Stopped(String),
}

/// Where the rollout of `d` is, its pods being `pods` (those its selector matches).
pub fn progress(d: &Deployment, pods: &[Pod]) -> Rollout {
    let wanted = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let status = d.status.clone().unwrap_or_default();
    let generation = d.metadata.generation.unwrap_or(0);
    if status.observed_generation.unwrap_or(0) < generation {
        return Rollout::Waiting("the controller has not seen the new template yet".into());
    }
    let updated = status.updated_replicas.unwrap_or(0);
    let available = status.available_replicas.unwrap_or(0);
    let total = status.replicas.unwrap_or(0);
    let live: Vec<&Pod> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    let terminating = pods.len() - live.len();
    if updated >= wanted && available >= wanted && total == wanted && terminating == 0 {
        let ready = live.iter().filter(|p| is_ready(p)).count();
        if ready as i32 >= wanted {
            return Rollout::Done;
        }
    }
    // The newest pod that is not ready says why.
    let mut waiting: Vec<&&Pod> = live.iter().filter(|p| !is_ready(p)).collect();
    waiting.sort_by_key(|p| p.metadata.creation_timestamp.clone());
    match waiting.last() {
        Some(p) => Rollout::Waiting(format!(
            "pod {} {}",
            p.metadata.name.clone().unwrap_or_default(),
            why_not_ready(p)
        )),
        None if terminating > 0 => Rollout::Waiting(format!(
            "{terminating} pod(s) of the old template still terminating"
        )),
        None => Rollout::Waiting(format!(
            "{updated} of {wanted} replica(s) updated, {available} available (no pod yet: a quota, an admission webhook?)"
        )),
    }
}

/// The label selector (`k=v,...`) of a Deployment's pods.
pub fn selector_of(d: &Deployment) -> String {
    d.spec
        .as_ref()
        .and_then(|s| s.selector.match_labels.clone())
        .unwrap_or_default()
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Whether a pod says it is Ready.
pub fn is_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

impl BlockingClient {
    /// Waits until the rollout of Deployment `namespace/name` is done, at most `timeout`; a
    /// `stop` ends the wait within 20 ms ([`RolloutError::Stopped`]).
    pub fn wait_rollout(
        &self,
        namespace: &str,
        name: &str,
        timeout: Duration,
        stop: &Stop,
    ) -> Result<(), RolloutError> {
        let started = Instant::now();
        loop {
            let Some(d) = self.get::<Deployment>(namespace, name)? else {
                return Err(RolloutError::Missing {
                    namespace: namespace.into(),
                    name: name.into(),
                });
            };
            let selector = selector_of(&d);
            let pods = self.list::<Pod>(namespace, &selector)?;
            match progress(&d, &pods) {
                Rollout::Done => return Ok(()),
                Rollout::Waiting(why) if started.elapsed() >= timeout => {
                    return Err(RolloutError::NotDone {
                        namespace: namespace.into(),
                        name: name.into(),
                        waited: timeout,
                        why,
                    })
                }
                Rollout::Waiting(_) => {}
            }
            if !stop.sleep(POLL_EVERY) {
                return Err(RolloutError::Stopped(format!("{namespace}/{name}")));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(generation: i64, status: serde_json::Value) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "gateway", "generation": generation},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "gateway"}}, "template": {}},
            "status": status
        }))
        .unwrap()
    }

    fn pod(name: &str, ready: bool, extra: serde_json::Value) -> Pod {
        let mut p = json!({
            "metadata": {"name": name, "creationTimestamp": "2026-11-27T10:00:00Z"},
            "spec": {"containers": [], "nodeName": "node"},
            "status": {"phase": if ready { "Running" } else { "Pending" },
                       "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}
        });
        if let Some(m) = extra.as_object() {
            for (k, v) in m {
                p["status"][k] = v.clone();
            }
        }
        serde_json::from_value(p).unwrap()
    }

    #[test]
    fn done_only_when_the_new_template_runs_ready_and_nothing_old_is_left() {
        let settled = json!({"observedGeneration": 2, "replicas": 1, "updatedReplicas": 1, "availableReplicas": 1, "readyReplicas": 1});
        assert_eq!(
            progress(
                &deployment(2, settled.clone()),
                &[pod("g-1", true, json!({}))]
            ),
            Rollout::Done
        );
        // The controller has not seen generation 3 yet: the old pod being ready says nothing.
        assert!(matches!(
            progress(&deployment(3, settled), &[pod("g-1", true, json!({}))]),
            Rollout::Waiting(w) if w.contains("not seen")
        ));
        // The new pod cannot be scheduled: the scheduler's words come back.
        let stuck = pod(
            "g-2",
            false,
            json!({"conditions": [{"type": "PodScheduled", "status": "False", "message": "0/1 nodes are available: 1 Insufficient cpu."}]}),
        );
        let waiting = progress(
            &deployment(
                3,
                json!({"observedGeneration": 3, "replicas": 1, "updatedReplicas": 1, "availableReplicas": 0}),
            ),
            &[stuck],
        );
        assert!(
            matches!(&waiting, Rollout::Waiting(w) if w.contains("pod g-2") && w.contains("Insufficient cpu")),
            "{waiting:?}"
        );
    }
}
