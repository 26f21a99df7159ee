//! The rig's share of Istio, one [`ControlPlane`] ([`Istiod`]) serving one of two things:
//! the gateway, its objects applied (`gateway.type: istio`, [`IstioGateway`]), or the
//! sidecars, their pods registered (`proxy.type: istio`, [`IstioSidecars`], started by
//! `rig/pods.rs`). What Istio is (istiod, the API server, the agents' command lines,
//! readiness) lives in [`crate::istio`]; this file only says what the rig keeps of it.

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::Duration;

use super::control_plane::{gateway_admin, ConfiguredGateway, ControlPlane};
use super::{AccessLog, Rig, RigSpec, RunningRole};
use crate::istio::{self, sidecars, IstioError, BY_ISTIOD};
use crate::program::envoy::ready::{self, Awaited, ConfiguredBy};
use crate::program::Hop;
use crate::sampler::Watch;
use crate::{go_on, LabError};
use meshbench_results::{ChainRole, Class, ControlPlaneKind, Stop};

/// istiod as a rig runs it, and what it serves.
pub struct Istiod {
    pub control_plane: istio::ControlPlane,
    pub serves: Serves,
}

/// What a rig's istiod configures, and what that cost.
pub enum Serves {
    Gateway(IstioGateway),
    Sidecars(IstioSidecars),
}

/// What an Istio gateway's start cost.
pub struct IstioGateway {
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
    /// The Istio gateway: its control plane started, the plan's objects (Secrets, the
    /// backend's ServiceEntry, Gateways bound to the hop's address, VirtualServices) applied
    /// to it, and its agent's launch.
    pub(super) fn start(
        rig: &mut Rig,
        spec: &RigSpec,
        hop: &Hop,
        stop: &Stop,
    ) -> Result<(Istiod, ConfiguredGateway), LabError> {
        let out = spec.dir.join("gateway");
        let (plan, generated) = rig.write_gateway_plan(spec, hop, &out)?;
        let objects = generated.objects();
        let control_plane = istio::ControlPlane::start(
            &spec.dir.join("istio"),
            IpAddr::V4(Ipv4Addr::LOCALHOST),
            spec.mesh(),
            rig.control_plane_cgroup(spec)?,
            stop,
        )?;
        let began = std::time::Instant::now();
        control_plane.api.apply_files(&objects)?;
        let applied_in = began.elapsed();
        let admin = hop.admin.ok_or(IstioError::NoAdminPort)?;
        let command =
            control_plane.gateway_command(&spec.dir.join("gateway-agent"), admin, hop.workers)?;
        let expected = istio::gateway_expected(
            hop.listen,
            plan.domains,
            plan.domains * plan.routes_per_domain(),
            plan.tls,
            istio::objects::BACKEND_HOST,
            plan.backends.clone(),
        );
        let gateway = ConfiguredGateway {
            command,
            config: out.clone(),
            awaited: Awaited::Gateway(expected.clone()),
            access_log: AccessLog::by_istiod(spec.attribution),
        };
        let istiod = Istiod {
            control_plane,
            serves: Serves::Gateway(IstioGateway {
                expected,
                applied_in,
                pushed_in: None,
                virtual_services: out.join(istio::objects::VIRTUAL_SERVICES_FILE),
            }),
        };
        Ok((istiod, gateway))
    }

    /// How long each part of the configuration took to reach Envoy, how large Envoy's config
    /// dump is, and `istiod`'s push time for one route added (measured here, before the
    /// load; a `stop` ends that wait).
    fn summary(&self, istiod: &istio::ControlPlane, roles: &[RunningRole], stop: &Stop) -> String {
        let admin = gateway_admin(roles);
        let mut line = format!(
            "istio: istiod ready in {:.1} s; {} routes applied in {:.2} s; Envoy held all of them {} after its agent started",
            istiod.istiod_ready_in.as_secs_f64(),
            self.expected.routes,
            self.applied_in.as_secs_f64(),
            self.pushed_in
                .map_or("?".to_string(), |d| format!("{:.1} s", d.as_secs_f64())),
        );
        let Some(admin) = admin else {
            return line;
        };
        line.push_str(&crate::program::envoy::admin::config_dump_note(admin));
        match istiod.time_route_change(admin, &self.virtual_services, Duration::from_secs(60), stop)
        {
            Ok(d) => line.push_str(&format!(
                "; one route added reached Envoy in {:.0} ms",
                d.as_secs_f64() * 1e3
            )),
            Err(e) => line.push_str(&format!("; a route change: {e}")),
        }
        line
    }
}

impl ControlPlane for Istiod {
    fn kind(&self) -> ControlPlaneKind {
        ControlPlaneKind::Istio
    }

    /// The gateway's objects are changed on it, and the sidecars' mesh (a ServiceEntry).
    fn api_kubeconfig(&self) -> Option<std::path::PathBuf> {
        Some(self.control_plane.api.kubeconfig.clone())
    }

    fn configures(&self) -> ConfiguredBy {
        BY_ISTIOD
    }

    fn exited(&mut self) -> Option<LabError> {
        (self.control_plane.istiod_exited()).map(|why| IstioError::IstiodExited(why).into())
    }

    fn configured(&mut self, role: ChainRole, took: Duration, _: &Stop) -> Result<(), LabError> {
        match &mut self.serves {
            Serves::Gateway(gateway) => gateway.pushed_in = Some(took),
            Serves::Sidecars(sidecars) => sidecars.pushed_in.push((role, took)),
        }
        Ok(())
    }

    fn prove(&mut self, roles: &[RunningRole], stop: &Stop) -> Result<(), LabError> {
        if let Serves::Sidecars(sidecars) = &mut self.serves {
            sidecars.probe_status = probe_sidecars(roles, &sidecars.client_netns, stop)?;
        }
        Ok(())
    }

    fn watch(&self) -> Watch {
        self.control_plane.watch()
    }

    fn terminate(&self) {
        self.control_plane.terminate();
    }

    fn summary(&self, roles: &[RunningRole], stop: &Stop) -> String {
        match &self.serves {
            Serves::Gateway(gateway) => gateway.summary(&self.control_plane, roles, stop),
            Serves::Sidecars(sidecars) => sidecars.summary(&self.control_plane, roles),
        }
    }
}

/// What Istio's sidecars' start cost.
pub struct IstioSidecars {
    /// Per sidecar: from its agent's start until its Envoy had accepted everything.
    pub pushed_in: Vec<(ChainRole, Duration)>,
    /// The client pod's namespace, where the probe leaves from.
    pub client_netns: String,
    /// The probe request's status, through every sidecar (0 until it answered).
    pub probe_status: u16,
}

impl IstioSidecars {
    /// `istiod`'s start, each sidecar's first configuration, the probe, and each sidecar's
    /// config dump size (their admin among `roles`).
    fn summary(&self, istiod: &istio::ControlPlane, roles: &[RunningRole]) -> String {
        let mut line = format!(
            "istio sidecars: istiod ready in {:.1} s",
            istiod.istiod_ready_in.as_secs_f64()
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

/// One request from the client pod (`client_netns`) to the Service, until it answers 200 (at
/// most 30 s, each try at most a second, a `stop` looked at between two); then the own
/// counters of each sidecar among `roles` must show it went through. Its status.
fn probe_sidecars(roles: &[RunningRole], client_netns: &str, stop: &Stop) -> Result<u16, LabError> {
    let began = std::time::Instant::now();
    let status = loop {
        go_on(stop)?;
        let answer = sidecars::probe(client_netns, Duration::from_secs(1));
        match answer {
            Ok(200) => break 200,
            _ if began.elapsed() < Duration::from_secs(30) => {
                if !stop.sleep(Duration::from_millis(250)) {
                    return Err(LabError::Stopped);
                }
            }
            Ok(status) => return Err(IstioError::ProbeStatus(status).into()),
            Err(e) => return Err(e),
        }
    };
    for r in roles.iter().filter(|r| r.class == Class::Proxy) {
        let Some(read) = r.read_admin(crate::program::envoy::admin::read) else {
            continue;
        };
        let read = read?;
        let ok = read
            .as_ref()
            .ok()
            .and_then(|c| c.requests.as_ref())
            .map_or(0, |q| q.status_2xx);
        if ok == 0 {
            return Err(IstioError::ProbeUncounted {
                role: r.name,
                why: read
                    .err()
                    .map_or("no 2xx in its stats".into(), |e| e.to_string()),
            }
            .into());
        }
    }
    Ok(status)
}
