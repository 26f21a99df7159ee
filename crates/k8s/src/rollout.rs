//! When a workload's rollout is done: the controller has seen its newest template, every
//! replica (a Deployment's) or every node's pod (a DaemonSet's) runs it and is ready, and no
//! pod of an older one is left (a step never measures two generations side by side). Waiting
//! is bounded; a rollout that does not finish names the reason of the pod that holds it up, in
//! the kubelet's and the scheduler's own words (`Pending: 0/1 nodes are available: 1
//! Insufficient cpu`, `ImagePullBackOff`...).

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use meshbench_results::Stop;
use thiserror::Error;

use crate::blocking::{ApiError, BlockingClient};
use crate::borrowed::WorkloadKind;
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
    #[error("{} {namespace}/{name}: its rollout did not finish within {} s: {why}", kind.noun(), waited.as_secs())]
    NotDone {
        kind: WorkloadKind,
        namespace: String,
        name: String,
        waited: Duration,
        why: String,
    },
    #[error("{} {namespace}/{name}: no such {}", kind.noun(), kind.name())]
    Missing {
        kind: WorkloadKind,
        namespace: String,
        name: String,
    },
    #[error("stopped while waiting for the rollout of {0}")]
    Stopped(String),
}

/// Where the rollout of a workload is: its object as the API server holds it now, and the
/// pods its selector matches.
pub enum Workload {
    Deployment(Deployment),
    DaemonSet(DaemonSet),
}

impl Workload {
    /// The workload `namespace/name` of `kind`, if it is there.
    pub fn get(
        client: &BlockingClient,
        kind: WorkloadKind,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Workload>, ApiError> {
        Ok(match kind {
            WorkloadKind::Deployment => client
                .get::<Deployment>(namespace, name)?
                .map(Workload::Deployment),
            WorkloadKind::DaemonSet => client
                .get::<DaemonSet>(namespace, name)?
                .map(Workload::DaemonSet),
        })
    }

    /// The label selector (`k=v,...`) of its pods.
    pub fn selector(&self) -> String {
        let selector = match self {
            Workload::Deployment(d) => d.spec.as_ref().map(|s| &s.selector),
            Workload::DaemonSet(d) => d.spec.as_ref().map(|s| &s.selector),
        };
        selector.map(match_labels).unwrap_or_default()
    }

    /// Where its rollout is, its pods being `pods` (those its selector matches).
    pub fn progress(&self, pods: &[Pod]) -> Rollout {
        match self {
            Workload::Deployment(d) => progress(d, pods),
            Workload::DaemonSet(d) => daemon_set_progress(d, pods),
        }
    }

    /// Its pods that are not going away.
    pub fn pods(&self, client: &BlockingClient, namespace: &str) -> Result<Vec<Pod>, ApiError> {
        Ok(client
            .list::<Pod>(namespace, &self.selector())?
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect())
    }
}

/// Where the rollout of DaemonSet `d` is, its pods being `pods`: done when the controller has
/// seen its newest template, every node it should run on has a pod of it (updated, available,
/// ready), and no pod is left beside them (one of an older template, or one terminating).
pub fn daemon_set_progress(d: &DaemonSet, pods: &[Pod]) -> Rollout {
    let status = d.status.clone().unwrap_or_default();
    let generation = d.metadata.generation.unwrap_or(0);
    if status.observed_generation.unwrap_or(0) < generation {
        return Rollout::Waiting("the controller has not seen the new template yet".into());
    }
    let wanted = status.desired_number_scheduled;
    let updated = status.updated_number_scheduled.unwrap_or(0);
    let available = status.number_available.unwrap_or(0);
    let live: Vec<&Pod> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    let terminating = pods.len() - live.len();
    let ready = live.iter().filter(|p| is_ready(p)).count() as i32;
    if updated >= wanted
        && available >= wanted
        && live.len() as i32 == wanted
        && ready >= wanted
        && terminating == 0
    {
        return Rollout::Done;
    }
    waiting_on(
        &live,
        terminating,
        format!(
            "{updated} of {wanted} node(s) run the new template, {available} available, {} pod(s) in all",
            live.len()
        ),
    )
}

/// Why a rollout waits: the newest pod that is not ready says it, else the pods of the old
/// template still terminating, else `otherwise`.
fn waiting_on(live: &[&Pod], terminating: usize, otherwise: String) -> Rollout {
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
        None => Rollout::Waiting(otherwise),
    }
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
    waiting_on(
        &live,
        terminating,
        format!(
            "{updated} of {wanted} replica(s) updated, {available} available (no pod yet: a quota, an admission webhook?)"
        ),
    )
}

/// The label selector (`k=v,...`) of a Deployment's pods.
pub fn selector_of(d: &Deployment) -> String {
    d.spec
        .as_ref()
        .map(|s| match_labels(&s.selector))
        .unwrap_or_default()
}

/// A selector's `matchLabels` as `k=v,...`.
fn match_labels(selector: &LabelSelector) -> String {
    selector
        .match_labels
        .clone()
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
        self.wait_rollout_of(WorkloadKind::Deployment, namespace, name, timeout, stop)
    }

    /// Waits until the rollout of the workload `namespace/name` of `kind` is done, at most
    /// `timeout`; a `stop` ends the wait within 20 ms ([`RolloutError::Stopped`]).
    pub fn wait_rollout_of(
        &self,
        kind: WorkloadKind,
        namespace: &str,
        name: &str,
        timeout: Duration,
        stop: &Stop,
    ) -> Result<(), RolloutError> {
        let started = Instant::now();
        loop {
            let Some(w) = Workload::get(self, kind, namespace, name)? else {
                return Err(RolloutError::Missing {
                    kind,
                    namespace: namespace.into(),
                    name: name.into(),
                });
            };
            let pods = self.list::<Pod>(namespace, &w.selector())?;
            match w.progress(&pods) {
                Rollout::Done => return Ok(()),
                Rollout::Waiting(why) if started.elapsed() >= timeout => {
                    return Err(RolloutError::NotDone {
                        kind,
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

    fn daemon_set(generation: i64, status: serde_json::Value) -> DaemonSet {
        serde_json::from_value(json!({
            "metadata": {"name": "envoy", "generation": generation},
            "spec": {"selector": {"matchLabels": {"app": "envoy"}}, "template": {}},
            "status": status
        }))
        .unwrap()
    }

    #[test]
    fn a_daemon_set_is_done_when_every_node_runs_the_new_template_ready_and_alone() {
        let two = json!({"observedGeneration": 2, "desiredNumberScheduled": 2, "currentNumberScheduled": 2,
                         "numberMisscheduled": 0, "numberReady": 2, "updatedNumberScheduled": 2, "numberAvailable": 2});
        let pods = [pod("e-1", true, json!({})), pod("e-2", true, json!({}))];
        assert_eq!(
            daemon_set_progress(&daemon_set(2, two.clone()), &pods),
            Rollout::Done
        );
        // A new template not yet seen.
        assert!(matches!(
            daemon_set_progress(&daemon_set(3, two.clone()), &pods),
            Rollout::Waiting(w) if w.contains("not seen")
        ));
        // Halfway: one node's pod replaced, the other's still of the old template.
        let half = json!({"observedGeneration": 3, "desiredNumberScheduled": 2, "numberReady": 2,
                          "updatedNumberScheduled": 1, "numberAvailable": 2});
        let w = daemon_set_progress(&daemon_set(3, half), &pods);
        assert!(
            matches!(&w, Rollout::Waiting(w) if w.contains("1 of 2 node(s) run the new template")),
            "{w:?}"
        );
        // Every node updated, but an old pod still terminating beside them.
        let going: Pod = serde_json::from_value(json!({
            "metadata": {"name": "e-0", "deletionTimestamp": "2026-11-27T10:00:01Z"},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .unwrap();
        let three = [pods[0].clone(), pods[1].clone(), going];
        let w = daemon_set_progress(&daemon_set(2, two), &three);
        assert!(
            matches!(&w, Rollout::Waiting(w) if w.contains("1 pod(s) of the old template still terminating")),
            "{w:?}"
        );
        // The new pod on a node not ready: its reason comes back.
        let stuck = pod(
            "e-3",
            false,
            json!({"containerStatuses": [{"name": "envoy", "ready": false, "restartCount": 0, "image": "e", "imageID": "",
            "state": {"waiting": {"reason": "ErrImageNeverPull"}}}]}),
        );
        let w = daemon_set_progress(
            &daemon_set(
                3,
                json!({"observedGeneration": 3, "desiredNumberScheduled": 2, "updatedNumberScheduled": 2, "numberAvailable": 1}),
            ),
            &[pods[0].clone(), stuck],
        );
        assert!(
            matches!(&w, Rollout::Waiting(w) if w.contains("pod e-3")),
            "{w:?}"
        );
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
