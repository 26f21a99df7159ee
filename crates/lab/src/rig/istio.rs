//! The rig's share of Istio: the gateway's control plane with its objects applied and its
//! agent awaited (`gateway.type: istio`), and the sidecars' control plane and their agents
//! (`proxy.type: istio`). What Istio is (istiod, the API server, the agents' command lines,
//! readiness) lives in [`crate::istio`]; this file only says what the rig keeps of it.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::{Rig, RigSpec, RunningRole};
use crate::istio::{ControlPlane, IstioError, BY_ISTIOD};
use crate::process::{Placement, RoleProcess};
use crate::program::envoy::ready;
use crate::program::Hop;
use crate::LabError;
use meshbench_results::{ChainRole, Stop};

/// The control plane of an Istio gateway, and what its start cost.
pub struct IstioGateway {
    pub control_plane: ControlPlane,
    /// What its Envoy must hold before the role counts as started.
    pub expected: ready::Expected,
    /// From applying the generated objects until Envoy had accepted all of them.
    pub applied_in: Duration,
    /// From the agent's start until its Envoy had accepted everything (istiod's first push).
    pub pushed_in: Option<Duration>,
    /// The VirtualServices' file, for a change to time.
    virtual_services: PathBuf,
}

impl IstioGateway {
    /// One line for the record: how long each part of the configuration took to reach Envoy
    /// (admin at `admin`), how large Envoy's config dump is, and istiod's push time for one
    /// route added (measured here, before the load; a `stop` ends that wait).
    pub fn summary(&self, admin: Option<SocketAddr>, stop: &Stop) -> String {
        let mut line = format!(
            "istio: istiod ready in {:.1} s; {} routes applied in {:.2} s; Envoy held all of them {} after its agent started",
            self.control_plane.istiod_ready_in.as_secs_f64(),
            self.expected.routes,
            self.applied_in.as_secs_f64(),
            self.pushed_in
                .map_or("?".to_string(), |d| format!("{:.1} s", d.as_secs_f64())),
        );
        let Some(admin) = admin else {
            return line;
        };
        line.push_str(&crate::program::envoy::admin::config_dump_note(admin));
        match self.control_plane.time_route_change(
            admin,
            &self.virtual_services,
            Duration::from_secs(60),
            stop,
        ) {
            Ok(d) => line.push_str(&format!(
                "; one route added reached Envoy in {:.0} ms",
                d.as_secs_f64() * 1e3
            )),
            Err(e) => line.push_str(&format!("; a route change: {e}")),
        }
        line
    }
}

/// The control plane of Istio's sidecars, and what their start cost.
pub struct IstioSidecars {
    pub control_plane: ControlPlane,
    /// Per sidecar: from its agent's start until its Envoy had accepted everything.
    pub pushed_in: Vec<(ChainRole, Duration)>,
    /// The probe request's status, through every sidecar.
    pub probe_status: u16,
}

impl IstioSidecars {
    /// One line for the record: istiod's start, each sidecar's first configuration, the
    /// probe, and each sidecar's config dump size (its admin in `roles`).
    pub fn summary(&self, roles: &[RunningRole]) -> String {
        let mut line = format!(
            "istio sidecars: istiod ready in {:.1} s",
            self.control_plane.istiod_ready_in.as_secs_f64()
        );
        for (role, took) in &self.pushed_in {
            line.push_str(&format!(
                "; {role} configured {:.1} s after its agent started",
                took.as_secs_f64()
            ));
        }
        line.push_str(&format!(
            "; a probe through them answered {}",
            self.probe_status
        ));
        for r in roles {
            let bytes = r.read_admin(crate::program::envoy::admin::config_dump_bytes);
            if let Some(Ok(Ok(bytes))) = bytes {
                line.push_str(&format!(
                    "; {} config dump {:.0} KB",
                    r.name,
                    bytes as f64 / 1e3
                ));
            }
        }
        line
    }
}

impl Rig {
    /// The Istio gateway: its control plane started, the plan's objects (Secrets, the
    /// backend's ServiceEntry, Gateways bound to the hop's address, VirtualServices) applied
    /// to it, and the agent's command.
    pub(super) fn prepare_istio_gateway(
        &mut self,
        spec: &RigSpec,
        hop: &Hop,
        stop: &Stop,
    ) -> Result<Command, LabError> {
        let out = spec.dir.join("gateway");
        let (plan, generated) = self.write_gateway_plan(spec, hop, &out)?;
        let objects = generated.objects();
        let control_plane = ControlPlane::start(
            &spec.dir.join("istio"),
            IpAddr::V4(Ipv4Addr::LOCALHOST),
            spec.mesh(),
            self.control_plane_cgroup(spec)?,
            stop,
        )?;
        let began = std::time::Instant::now();
        control_plane.api.apply_files(&objects)?;
        let applied_in = began.elapsed();
        let admin = hop.admin.ok_or(IstioError::NoAdminPort)?;
        let command =
            control_plane.gateway_command(&spec.dir.join("gateway-agent"), admin, hop.workers)?;
        let tls = plan.tls;
        self.istio_gateway = Some(IstioGateway {
            control_plane,
            expected: ready::Expected {
                listener: format!("{}_{}", hop.listen.ip(), hop.listen.port()),
                filter_chains: if tls { plan.domains } else { 1 },
                route_configs: "",
                routes: plan.domains * plan.routes_per_domain(),
                certificates: if tls { plan.domains } else { 0 },
                backend: (
                    format!(
                        "outbound|{}||{}",
                        plan.backend().port(),
                        crate::istio::objects::BACKEND_HOST
                    ),
                    plan.backends.clone(),
                ),
            },
            applied_in,
            pushed_in: None,
            virtual_services: out.join(crate::istio::objects::VIRTUAL_SERVICES_FILE),
        });
        Ok(command)
    }

    /// Starts an Istio sidecar's agent and waits until its Envoy holds `expected` (a minute);
    /// a `stop` ends the wait ([`LabError::Stopped`], the agent stopped).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn start_sidecar(
        &mut self,
        name: ChainRole,
        command: Command,
        log: &Path,
        place: &Placement,
        admin: Option<SocketAddr>,
        expected: ready::SidecarExpected,
        stop: &Stop,
    ) -> Result<RoleProcess, LabError> {
        let (Some(mesh), Some(admin)) = (self.istio_sidecars.as_mut(), admin) else {
            return Err(IstioError::NoControlPlane("an Istio sidecar").into());
        };
        let mut agent = RoleProcess::spawn(name.name(), command, log, place)?;
        let waited = ready::wait_agent_acked(
            &mut agent,
            admin,
            place.netns.as_deref(),
            &ready::Awaited::Sidecar(expected),
            Duration::from_secs(60),
            stop,
            BY_ISTIOD,
        );
        if let Some(why) = mesh.control_plane.istiod_exited() {
            return Err(IstioError::IstiodExited(why).into());
        }
        mesh.pushed_in.push((name, waited?));
        Ok(agent)
    }

    /// Starts the Istio gateway's agent and waits until its Envoy holds all the control plane
    /// should have sent (a minute, and a second more per 1,000 routes); a `stop` ends the wait
    /// ([`LabError::Stopped`], the agent stopped).
    pub(super) fn start_istio_agent(
        &mut self,
        name: &str,
        command: Command,
        log: &Path,
        place: &Placement,
        admin: Option<SocketAddr>,
        stop: &Stop,
    ) -> Result<RoleProcess, LabError> {
        let (Some(istio), Some(admin)) = (self.istio_gateway.as_mut(), admin) else {
            return Err(IstioError::NoControlPlane("the Istio gateway").into());
        };
        let mut agent = RoleProcess::spawn(name, command, log, place)?;
        let limit = Duration::from_secs(60 + istio.expected.routes as u64 / 1000);
        let waited = ready::wait_agent_acked(
            &mut agent,
            admin,
            None,
            &ready::Awaited::Gateway(istio.expected.clone()),
            limit,
            stop,
            BY_ISTIOD,
        );
        if let Some(why) = istio.control_plane.istiod_exited() {
            return Err(IstioError::IstiodExited(why).into());
        }
        istio.pushed_in = Some(waited?);
        Ok(agent)
    }
}
