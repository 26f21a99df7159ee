//! The rig's share of Contour (`gateway.type: contour`): Contour and its API server started
//! with the gateway plan's objects applied, and Contour's Envoy started on the bootstrap
//! Contour writes and awaited until it holds every route, with every HTTPProxy `valid` in
//! Contour's own status. What Contour is lives in [`crate::contour`].

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::{Rig, RigSpec};
use crate::contour::{self, objects, ContourError};
use crate::process::{Placement, RoleProcess};
use crate::program::envoy::ready::{self, ConfiguredBy};
use crate::program::Hop;
use crate::LabError;
use meshbench_results::Stop;

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
    /// One line for the record: how long each part of the configuration took to reach Envoy
    /// (admin at `admin`), and how large Envoy's config dump is.
    pub fn summary(&self, admin: Option<SocketAddr>) -> String {
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
        if let Some(admin) = admin {
            line.push_str(&crate::program::envoy::admin::config_dump_note(admin));
        }
        line
    }
}

impl Rig {
    /// The Contour gateway: the plan's objects written, Contour and its API server started
    /// with them applied, and Envoy's command on the bootstrap Contour writes.
    pub(super) fn prepare_contour_gateway(
        &mut self,
        spec: &RigSpec,
        hop: &Hop,
        stop: &Stop,
    ) -> Result<Command, LabError> {
        let out = spec.dir.join("gateway");
        let (plan, generated) = self.write_gateway_plan(spec, hop, &out)?;
        let control_plane = contour::ControlPlane::start(
            &spec.dir.join("contour"),
            &generated.objects(),
            hop.listen,
            self.control_plane_cgroup(spec)?,
            stop,
        )?;
        let admin = hop.admin.ok_or(ContourError::NoAdminPort)?;
        let command =
            control_plane.envoy_command(&spec.dir.join("gateway-envoy"), admin, hop.workers)?;
        self.contour_gateway = Some(ContourGateway {
            control_plane,
            expected: objects::expected(&plan),
            proxies: plan.domains,
            pushed_in: None,
        });
        Ok(command)
    }

    /// Starts Contour's Envoy and waits until it holds all Contour should have sent (a minute,
    /// and a second more per 1,000 routes), then until Contour has said each HTTPProxy is
    /// valid; a `stop` ends either wait ([`LabError::Stopped`], Envoy stopped).
    pub(super) fn start_contour_envoy(
        &mut self,
        name: &str,
        command: Command,
        log: &Path,
        place: &Placement,
        admin: Option<SocketAddr>,
        stop: &Stop,
    ) -> Result<RoleProcess, LabError> {
        let (Some(gateway), Some(admin)) = (self.contour_gateway.as_mut(), admin) else {
            return Err(ContourError::NoControlPlane.into());
        };
        let mut envoy = RoleProcess::spawn(name, command, log, place)?;
        let limit = Duration::from_secs(60 + gateway.expected.routes as u64 / 1000);
        let waited = ready::wait_agent_acked(
            &mut envoy,
            admin,
            None,
            &ready::Awaited::Gateway(gateway.expected.clone()),
            limit,
            stop,
            BY_CONTOUR,
        );
        if let Some(why) = gateway.control_plane.contour_exited() {
            return Err(ContourError::Exited(why).into());
        }
        gateway.pushed_in = Some(waited?);
        let refused = gateway
            .control_plane
            .invalid_proxies(gateway.proxies, stop)?;
        if !refused.is_empty() {
            return Err(ContourError::NotValid(refused).into());
        }
        Ok(envoy)
    }
}
