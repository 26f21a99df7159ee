//! The pods a cluster step reads, and how a reader of figures selects them: the live pods of
//! a label selector or of a workload (not those going away after a rollout), and a role as
//! the reader's matchers name it. The site and each kind of gateway select through these.

use k8s_openapi::api::core::v1::Pod;
use meshbench_experiment::external::{ExternalRole, Preset};
use meshbench_k8s::blocking::ApiError;
use meshbench_k8s::borrowed::WorkloadKind;
use meshbench_k8s::k8s_openapi;
use meshbench_k8s::rollout::Workload;
use meshbench_k8s::BlockingClient;

/// The pods of `selector` in `namespace` that are not going away.
pub(super) fn live(
    client: &BlockingClient,
    namespace: &str,
    selector: &str,
) -> Result<Vec<Pod>, ApiError> {
    Ok(client
        .list::<Pod>(namespace, selector)?
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect())
}

/// The pods of the workload `namespace/name` of `kind` that are not going away (none when it
/// is not there).
pub(super) fn of_workload(
    client: &BlockingClient,
    kind: WorkloadKind,
    namespace: &str,
    name: &str,
) -> Result<Vec<Pod>, ApiError> {
    match Workload::get(client, kind, namespace, name)? {
        Some(w) => w.pods(client, namespace),
        None => Ok(Vec::new()),
    }
}

/// The name of a pod as the API server gave it.
pub(super) fn name(pod: &Pod) -> String {
    pod.metadata.name.clone().unwrap_or_default()
}

/// A `pod` matcher for the pods listed: their names as alternatives (pod names are DNS
/// labels: nothing in them is special to a regular expression), or `fallback` when there are
/// none (or they could not be listed).
pub(super) fn pattern(pods: Option<Vec<Pod>>, fallback: &str) -> String {
    let names: Vec<String> = pods
        .unwrap_or_default()
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    match names.is_empty() {
        true => fallback.to_string(),
        false => names.join("|"),
    }
}

/// A role named `name`, read as `preset` reads a container, from the series `matches` select.
pub(super) fn reader_role(name: &str, preset: Preset, matches: &[(&str, &str)]) -> ExternalRole {
    ExternalRole {
        name: name.to_string(),
        preset: Some(preset),
        matches: matches
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..ExternalRole::default()
    }
}
