//! A step's changes on a cluster, told the way the cluster's users tell them: the gateway's
//! objects (Istio's Gateways, VirtualServices and Secrets, Contour's HTTPProxies) applied to the
//! API server for istiod or Contour to push, only those that differ, and put back after the
//! step; the backend rolled as its Deployment's rolling update (`kubectl rollout restart`: a
//! new annotation on its pod template), served once every replica is new and ready. The probe
//! asks the gateway's pod through a port-forward, as the load reaches it from outside.

use std::time::Instant;

use k8s_openapi::api::apps::v1::Deployment;
use meshbench_k8s::borrowed::WorkloadKind;
use meshbench_k8s::k8s_openapi;
use meshbench_k8s::rollout::{Rollout, Workload};
use meshbench_k8s::{system, BlockingClient};
use meshbench_lab::change::{self, BackendRoll, GatewayChanger, OnCluster};
use meshbench_results::change::schedule;
use meshbench_results::Configuration;
use serde_json::json;

use super::ClusterSite;
use crate::changes::{Changes, StepChanges};

/// The pod template's annotation a roll sets (as `kubectl rollout restart` sets its own).
const ROLLED_AT: &str = "meshbench.io/rolled-at";

impl ClusterSite {
    /// What a gateway step of a changes pair does: the still step says how changes would be
    /// told; the changed one gets the gateway's objects to change (a copy of those the run
    /// applied), a port-forward to its pod for the probe, and the backend's Deployment to roll.
    pub(super) fn step_changes(
        &self,
        e: &meshbench_experiment::config::Experiment,
        apply: bool,
    ) -> Result<StepChanges, String> {
        let g = self.gateway.as_ref().ok_or("no gateway on this cluster")?;
        let program = g.runs.program();
        if !apply {
            return Ok(StepChanges::Still {
                told_by: change::told_by(program, Default::default()),
            });
        }
        let Configuration::ByControlPlane(kind) = program.configuration() else {
            return Err(format!(
                "{program} on a cluster is not changed by meshbench"
            ));
        };
        let (namespace, pod, port) = g.runs.probed(&self.client).map_err(|e| e.to_string())?;
        let forward = (self.client)
            .port_forward(&namespace, &pod, port)
            .map_err(|e| format!("the probe's port-forward to {namespace}/{pod}:{port}: {e}"))?;
        let another = || self.client.another().map_err(|e| e.to_string());
        let changer = GatewayChanger::on_cluster(
            OnCluster {
                kind,
                api: another()?,
                target: g.runs.target(),
                files: g.files.clone(),
                probe_at: forward.addr(),
            },
            g.written.clone(),
        )
        .map_err(|e| e.to_string())?;
        let window = std::time::Duration::from_secs_f64(e.duration_secs);
        Ok(StepChanges::Apply(Box::new(Changes {
            changer: Box::new(changer),
            backend: Some(Box::new(DeploymentRoll {
                client: another()?,
                namespace: self.section.namespace.clone(),
                name: system::BACKEND.to_string(),
            })),
            schedule: schedule(
                &e.change_streams(meshbench_results::Topology::Gateway),
                window,
            ),
            netns: None,
            forward: Some(forward),
        })))
    }
}

/// The backend's Deployment, rolled as `kubectl rollout restart` rolls one.
struct DeploymentRoll {
    client: BlockingClient,
    namespace: String,
    name: String,
}

impl BackendRoll for DeploymentRoll {
    fn told_by(&self) -> &'static str {
        "the Deployment's rolling update"
    }

    /// Sets [`ROLLED_AT`] on the pod template: the Deployment controller replaces every pod,
    /// as its strategy says (a JSON patch, so nothing the run applied changes owner).
    fn begin(&mut self) -> Result<(String, Instant), String> {
        let (ns, name) = (&self.namespace, &self.name);
        let d = (self.client.get::<Deployment>(ns, name))
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("no Deployment {ns}/{name}"))?;
        let replicas = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        let has_annotations = (d.spec.as_ref())
            .and_then(|s| s.template.metadata.as_ref())
            .is_some_and(|m| m.annotations.is_some());
        let now = meshbench_results::usage::now_ms().to_string();
        let patch = match has_annotations {
            true => json!([{
                "op": "add",
                "path": format!("/spec/template/metadata/annotations/{}", ROLLED_AT.replace('/', "~1")),
                "value": now,
            }]),
            false => json!([{
                "op": "add",
                "path": "/spec/template/metadata/annotations",
                "value": {ROLLED_AT: now},
            }]),
        };
        let path = format!("/apis/apps/v1/namespaces/{ns}/deployments/{name}");
        let written = Instant::now();
        (self.client)
            .json_patch(&path, &format!("Deployment {ns}/{name}"), &patch)
            .map_err(|e| e.to_string())?;
        Ok((
            format!("backend Deployment {ns}/{name} rolled ({replicas} replica(s))"),
            written,
        ))
    }

    fn done(&mut self) -> Result<bool, String> {
        let (ns, name) = (&self.namespace, &self.name);
        let w = Workload::get(&self.client, WorkloadKind::Deployment, ns, name)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("no Deployment {ns}/{name}"))?;
        let pods = (self.client.list(ns, &w.selector())).map_err(|e| e.to_string())?;
        Ok(matches!(w.progress(&pods), Rollout::Done))
    }
}
