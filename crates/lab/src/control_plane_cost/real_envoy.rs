//! The one real Envoy of a control-plane step: its pod, its agent (pilot-agent's sidecar or
//! gateway, as Istio's proxy user in a network namespace of its own) and the wait until it
//! holds its configuration, from which its bootstrap node is read for the simulated proxies.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use meshbench_results::{MeshScale, ProxyKind, Stop};
use serde_json::Value;

use super::{mesh, CostError, CostSpec};
use crate::istio::sidecars;
use crate::istio::{AgentPorts, AgentRole, ControlPlane, Workload};
use crate::netns::RoleNamespace;
use crate::process::{Placement, RoleProcess};
use crate::program::envoy::admin;
use crate::program::envoy::ready::{self, Awaited, SidecarExpected};
use crate::LabError;
use mesh::MeshPod;

/// How long the real Envoy may take to accept its configuration.
const REAL_WITHIN: Duration = Duration::from_secs(120);

/// The real Envoy's pod, at `ip` in its namespace: a sidecar of the first service, or a
/// gateway.
pub(super) fn real_pod(kind: ProxyKind, ip: IpAddr) -> MeshPod {
    match kind {
        ProxyKind::Sidecar => MeshPod::sidecar("real-0", 0, ip),
        ProxyKind::Gateway => MeshPod::gateway(crate::istio::GATEWAY_POD, ip),
    }
}

/// The real Envoy: its admin on Istio's port, on the loopback of its namespace.
pub(super) struct RealEnvoy {
    pub admin: SocketAddr,
    pub netns: String,
}

impl RealEnvoy {
    /// Waits until the Envoy run by `agent` holds its configuration (the capture's listeners
    /// for a sidecar, and the last service's cluster); returns its bootstrap node. A `stop`
    /// ends the wait ([`LabError::Stopped`]).
    pub fn await_configured(
        &self,
        agent: &mut RoleProcess,
        scale: MeshScale,
        stop: &Stop,
        note: &mut dyn FnMut(&str),
    ) -> Result<Value, LabError> {
        let last_service = format!(
            "outbound|{}||{}.{}.svc.cluster.local",
            meshbench_k8s::names::SERVICE_PORT,
            mesh::service_name(scale.services - 1),
            meshbench_k8s::names::DEFAULT_NAMESPACE
        );
        let expected = SidecarExpected {
            listeners: match scale.kind {
                ProxyKind::Sidecar => vec!["virtualOutbound".into(), "virtualInbound".into()],
                ProxyKind::Gateway => Vec::new(),
            },
            clusters: vec![last_service],
        };
        let took = ready::wait_agent_acked(
            agent,
            self.admin,
            Some(&self.netns),
            &Awaited::Sidecar(expected),
            REAL_WITHIN,
            stop,
            crate::istio::BY_ISTIOD,
        )?;
        note(&format!(
            "the real Envoy accepted its configuration {:.1} s after its agent started",
            took.as_secs_f64()
        ));
        bootstrap_node(&self.config_dump()?).ok_or_else(|| CostError::NoBootstrapNode.into())
    }

    /// Its whole config dump, read inside its namespace.
    pub fn config_dump(&self) -> Result<Value, LabError> {
        let admin = self.admin;
        crate::netns::within(Some(&self.netns), || admin::config_dump_all(admin))?
            .map_err(|e| CostError::RealEnvoyConfig(e).into())
    }
}

/// Starts pilot-agent and its Envoy for the real pod in its namespace `ns`, as Istio's proxy
/// user, in `dir`; Envoy's admin is Istio's 15000 on the namespace's loopback.
pub(super) fn start_real(
    cp: &ControlPlane,
    spec: &CostSpec,
    pod: &MeshPod,
    dir: &Path,
    ns: &RoleNamespace,
) -> Result<RoleProcess, LabError> {
    let role = match spec.scale.kind {
        ProxyKind::Sidecar => AgentRole::Sidecar,
        ProxyKind::Gateway => AgentRole::Gateway,
    };
    let workload = Workload {
        namespace: &pod.namespace,
        pod: &pod.name,
        service_account: &pod.service_account,
        ip: pod.ip,
        labels: pod.labels_value().to_string(),
    };
    let command = cp.agent_command(role, &workload, dir, AgentPorts::ISTIO, 1)?;
    sidecars::hand_to_proxy_user(dir)?;
    let place = Placement {
        netns: Some(ns.netns.clone()),
        user: Some(sidecars::PROXY_UID),
        ..Placement::default()
    };
    RoleProcess::spawn(
        "real-envoy",
        command,
        &spec.dir.join("real-envoy.log"),
        &place,
    )
}

/// The node of a config dump's bootstrap, as JSON.
fn bootstrap_node(dump: &Value) -> Option<Value> {
    dump["configs"]
        .as_array()?
        .iter()
        .find_map(|c| c["bootstrap"].get("node").cloned())
}
