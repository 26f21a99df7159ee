//! Pods and their namespaces (`proxy.type: istio`): the client pod and the backend's pod,
//! each a network namespace, a sidecar in each pod the topology puts one in, and the probe
//! that proves the traffic goes through them.

use std::net::{IpAddr, SocketAddr};

use super::{
    chain::backend_launch,
    istio::{IstioSidecars, Istiod, Serves},
    AccessLog, Launch, Ready, Rig, RigSpec, RoleAddress,
};
use crate::istio::sidecars::{self, LabPod};
use crate::istio::{AgentPorts, AgentRole, ControlPlane, IstioError, Workload};
use crate::program::envoy::ready::{self, Awaited};
use crate::{go_on, LabError};
use meshbench_k8s::names::{DEFAULT_NAMESPACE, SERVICE_PORT};
use meshbench_results::{
    topology::{Duty, RolePlan},
    PeerAuthentication, PlayedBy, Program, Stop,
};

impl Rig {
    /// Istio's sidecars (`proxy.type: istio`), in pods: the client pod (where the load
    /// leaves from) and the backend's pod, each a network namespace; a sidecar in each pod
    /// the topology puts one in, configured by istiod, its traffic captured by Istio's
    /// iptables. The load goes to the Service's address, as an application's would. The
    /// baseline has the same pods, no sidecar and no control plane. A `stop` ends the start
    /// at its next wait or stage ([`LabError::Stopped`]).
    pub(super) fn start_pods(&mut self, spec: &RigSpec, stop: &Stop) -> Result<(), LabError> {
        let cgroups = self.cgroups(spec);
        let Some(namespaces) = self.namespaces.as_mut() else {
            return Err(IstioError::NeedsNetns.into());
        };
        let (client_ns, server_ns) = (namespaces.add(0)?, namespaces.add(1)?);
        let chain = spec.topology.chain();
        let sidecar = |duty| chain.iter().find(|r| r.duty == duty).copied();
        let (client_sidecar, server_sidecar) =
            (sidecar(Duty::ClientSidecar), sidecar(Duty::ServerSidecar));
        let client = LabPod {
            app: "client",
            ip: client_ns.addr,
            sidecar: client_sidecar.is_some(),
        };
        let server = LabPod {
            app: sidecars::SERVICE,
            ip: server_ns.addr,
            sidecar: server_sidecar.is_some(),
        };
        let backend = SocketAddr::new(server.ip, SERVICE_PORT);
        self.entry = SocketAddr::new(IpAddr::V4(sidecars::SERVICE_IP), SERVICE_PORT);
        self.client_netns = Some(client_ns.netns.clone());
        let address = RoleAddress {
            addr: backend,
            namespace: Some(server_ns.clone()),
        };
        self.start_role(
            spec,
            cgroups.as_ref(),
            backend_launch(spec, address, false),
            stop,
        )?;
        if !client.sidecar {
            sidecars::service_rule(
                &client_ns.netns,
                backend,
                &spec.dir.join("service-rule.log"),
            )?;
        }
        if !client.sidecar && !server.sidecar {
            return Ok(());
        }
        if let Some(what) = sidecars::iptables_missing() {
            return Err(LabError::Missing {
                program: "iptables".into(),
                hint: format!("Istio's capture needs {what}"),
            });
        }
        go_on(stop)?;
        // istiod serves the pods' agents on the client pod's way to this machine.
        let control_plane = ControlPlane::start(
            &spec.dir.join("istio"),
            client_ns.host_addr,
            spec.mesh(),
            self.control_plane_cgroup(spec)?,
            stop,
        )?;
        let mtls = if spec.proxy_mtls {
            spec.proxy_peer_authentication
        } else {
            PeerAuthentication::Disable
        };
        sidecars::register(&control_plane.api, &[&client, &server], &server, mtls)?;
        let port = SERVICE_PORT;
        // The server's sidecar first: the client's is configured towards it.
        let mut launches = Vec::new();
        if let Some(role) = server_sidecar {
            let expected = ready::SidecarExpected::server(port);
            let pod = (&server, &server_ns);
            launches.push(self.sidecar_launch(spec, &control_plane, &role, pod, expected)?);
        }
        if let Some(role) = client_sidecar {
            let host = format!(
                "{}.{}.svc.cluster.local",
                sidecars::SERVICE,
                DEFAULT_NAMESPACE
            );
            let expected = ready::SidecarExpected::client(port, &host, backend);
            let pod = (&client, &client_ns);
            launches.push(self.sidecar_launch(spec, &control_plane, &role, pod, expected)?);
        }
        self.control_plane = Some(Box::new(Istiod {
            control_plane,
            serves: Serves::Sidecars(IstioSidecars {
                pushed_in: Vec::new(),
                client_netns: client_ns.netns.clone(),
                probe_status: 0,
            }),
        }));
        for launch in launches {
            self.start_role(spec, cgroups.as_ref(), launch, stop)?;
        }
        Ok(())
    }

    /// The sidecar of `pod` (in its namespace), playing `role`: its agent's command from
    /// `control_plane`, its directory handed to Istio's proxy user, and its pod's capture
    /// written.
    pub(super) fn sidecar_launch(
        &mut self,
        spec: &RigSpec,
        control_plane: &ControlPlane,
        role: &RolePlan,
        (pod, ns): (&LabPod, &crate::netns::RoleNamespace),
        expected: ready::SidecarExpected,
    ) -> Result<Launch, LabError> {
        let pod_dir = crate::removed_on_drop(&sidecars::pod_dir(&spec.id, pod.app)?)?;
        let dir = pod_dir.path().to_path_buf();
        self.pod_dirs.push(pod_dir);
        let workers = spec.workers(role);
        let name = pod.name();
        let workload = Workload {
            namespace: DEFAULT_NAMESPACE,
            pod: &name,
            service_account: pod.app,
            ip: pod.ip,
            labels: pod.labels_json(),
        };
        let command = control_plane.agent_command(
            AgentRole::Sidecar,
            &workload,
            &dir,
            AgentPorts::ISTIO,
            workers,
        )?;
        sidecars::hand_to_proxy_user(&dir)?;
        // As istio-init does, before the pod's containers start.
        sidecars::capture(
            &ns.netns,
            &spec.dir.join(format!("{}-capture.log", pod.app)),
        )?;
        let listen = match role.duty {
            Duty::ClientSidecar => sidecars::OUTBOUND_CAPTURE,
            _ => sidecars::INBOUND_CAPTURE,
        };
        Ok(Launch {
            name: role.role,
            class: role.class,
            program: PlayedBy::Proxy(Program::Istio),
            command,
            address: RoleAddress {
                addr: SocketAddr::new(pod.ip, listen),
                namespace: Some(ns.clone()),
            },
            workers,
            admin: Some(SocketAddr::from(([127, 0, 0, 1], AgentPorts::ISTIO.admin))),
            config: None,
            ready: Ready::Configured(Awaited::Sidecar(expected)),
            user: Some(sidecars::PROXY_UID),
            admin_netns: Some(ns.netns.clone()),
            access_log: AccessLog::by_istiod(spec.attribution),
        })
    }
}
