//! The rig's share of Contour (`gateway.type: contour`), as a [`ControlPlane`]: Contour and
//! its API server started with the gateway plan's objects applied, its Envoy's launch on the
//! bootstrap Contour writes, awaited until it holds every route, then every HTTPProxy `valid`
//! in Contour's own status. What Contour is lives in [`crate::contour`].

use std::time::Duration;

use super::control_plane::{gateway_admin, ConfiguredGateway, ControlPlane};
use super::{AccessLog, Rig, RigSpec, RunningRole};
use crate::contour::{self, objects, ContourError};
use crate::program::envoy::ready::{self, Awaited, ConfiguredBy};
use crate::program::Hop;
use crate::sampler::Watch;
use crate::LabError;
use meshbench_results::{ChainRole, ControlPlaneKind, Stop};

/// How errors name the Envoy Contour configures.
const BY_CONTOUR: ConfiguredBy = ConfiguredBy {
    process: "envoy",
    control_plane: "contour",
};

/// The control plane of a Contour gateway, and what its start cost.
pub struct ContourGateway {
    pub control_plane: contour::ControlPlane,
    /// What its Envoy must hold before the role counts as started.
    pub expected: ready::Expected,
    /// HTTPProxies applied (one per domain).
    pub proxies: usize,
    /// From Envoy's start until it had accepted everything Contour sent.
    pub pushed_in: Option<Duration>,
}

impl ContourGateway {
    /// The Contour gateway: the plan's objects written, Contour and its API server started
    /// with them applied, and its Envoy's launch on the bootstrap Contour writes.
    pub(super) fn start(
        rig: &mut Rig,
        spec: &RigSpec,
        hop: &Hop,
        stop: &Stop,
    ) -> Result<(ContourGateway, ConfiguredGateway), LabError> {
        let out = spec.dir.join("gateway");
        let (plan, generated) = rig.write_gateway_plan(spec, hop, &out)?;
        let control_plane = contour::ControlPlane::start(
            &spec.dir.join("contour"),
            &generated.objects(),
            hop.listen,
            rig.control_plane_cgroup(spec)?,
            stop,
        )?;
        let admin = hop.admin.ok_or(ContourError::NoAdminPort)?;
        let envoy_dir = spec.dir.join("gateway-envoy");
        let command = control_plane.envoy_command(&envoy_dir, admin, hop.workers)?;
        let expected = objects::expected(&plan);
        let gateway = ConfiguredGateway {
            command,
            config: envoy_dir.join("envoy.json"),
            awaited: Awaited::Gateway(expected.clone()),
            // Attribution's lines come from the Envoys the lab or istiod configures.
            access_log: AccessLog::None,
        };
        let control_plane = ContourGateway {
            control_plane,
            expected,
            proxies: plan.domains,
            pushed_in: None,
        };
        Ok((control_plane, gateway))
    }
}

impl ControlPlane for ContourGateway {
    fn kind(&self) -> ControlPlaneKind {
        ControlPlaneKind::Contour
    }

    fn api_kubeconfig(&self) -> Option<std::path::PathBuf> {
        Some(self.control_plane.api.kubeconfig.clone())
    }

    fn configures(&self) -> ConfiguredBy {
        BY_CONTOUR
    }

    fn exited(&mut self) -> Option<LabError> {
        (self.control_plane.contour_exited()).map(|why| ContourError::Exited(why).into())
    }

    /// Then until Contour has said each HTTPProxy is valid.
    fn configured(&mut self, _: ChainRole, took: Duration, stop: &Stop) -> Result<(), LabError> {
        self.pushed_in = Some(took);
        self.control_plane.await_valid(self.proxies, stop)
    }

    fn watch(&self) -> Watch {
        self.control_plane.watch()
    }

    fn terminate(&self) {
        self.control_plane.terminate();
    }

    /// How long each part of the configuration took to reach Envoy, and how large Envoy's
    /// config dump is.
    fn summary(&self, roles: &[RunningRole], _: &Stop) -> String {
        let cp = &self.control_plane;
        let mut line = format!(
            "contour: {} HTTPProxies applied in {:.2} s, every one valid in Contour's status; Contour served them {:.1} s after its start; Envoy held all {} routes {} after its start",
            self.proxies,
            cp.applied_in.as_secs_f64(),
            cp.contour_ready_in.as_secs_f64(),
            self.expected.routes,
            self.pushed_in
                .map_or("?".to_string(), |d| format!("{:.1} s", d.as_secs_f64())),
        );
        if let Some(admin) = gateway_admin(roles) {
            line.push_str(&crate::program::envoy::admin::config_dump_note(admin));
        }
        line
    }
}
