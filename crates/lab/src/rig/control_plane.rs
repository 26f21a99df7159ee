//! The control plane a rig runs beside the Envoys it configures, as one idea: istiod for
//! Istio's gateway or its sidecars (`rig/istio.rs`, `Istiod`),
//! Contour for its gateway (`rig/contour.rs`, `ContourGateway`). The rig holds at most one
//! ([`Rig::control_plane`]), asks it the same questions whichever it is ([`ControlPlane`]),
//! and starts every Envoy it configures the same way ([`Rig::start_configured_envoy`]).
//!
//! A third control plane (Envoy Gateway, another Gateway API implementation) is a module of
//! its own beside `rig/istio.rs` (its objects, its start, its [`ControlPlane`] impl), a
//! [`ControlPlaneKind`] variant, and one arm in `Rig::configured_gateway` (`rig/chain.rs`,
//! where a gateway's launch is made).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::{AccessLog, Rig, RunningRole};
use crate::process::{Placement, RoleProcess};
use crate::program::envoy::ready::{self, Awaited, ConfiguredBy};
use crate::sampler::Watch;
use crate::LabError;
use meshbench_results::{ChainRole, Class, ControlPlaneKind, Stop};

/// What the rig asks of the control plane it runs, whichever it is.
pub trait ControlPlane: Send {
    /// Which control plane it is.
    fn kind(&self) -> ControlPlaneKind;

    /// How a failure names the process started for an Envoy it configures, and itself.
    fn configures(&self) -> ConfiguredBy;

    /// Why it ended, when it has: the failure of the Envoy it was configuring.
    fn exited(&mut self) -> Option<LabError>;

    /// An Envoy it configures (`role`) held all it was to hold, `took` after its start: kept
    /// for the record, then its own last check (Contour's: each HTTPProxy valid in its
    /// status; a `stop` ends that wait).
    fn configured(&mut self, role: ChainRole, took: Duration, stop: &Stop) -> Result<(), LabError>;

    /// Once every role runs (`roles`, client side first): a proof that the traffic goes
    /// where it configured (Istio's sidecars' probe). Nothing to prove by default.
    fn prove(&mut self, roles: &[RunningRole], stop: &Stop) -> Result<(), LabError> {
        let _ = (roles, stop);
        Ok(())
    }

    /// What the sampler reads of it: the `control_plane` role, not on the path but part of
    /// what the mesh costs.
    fn watch(&self) -> Watch;

    /// Asks its processes to end now (the rig's drop then waits for them after its roles).
    fn terminate(&self);

    /// The kubeconfig of the API server it reads its objects from, where a change to the
    /// gateway or the mesh is written.
    fn api_kubeconfig(&self) -> Option<std::path::PathBuf>;

    /// One line for the step's record: what its start and its configuration took (`roles`,
    /// client side first, to read their Envoys' admin; a `stop` ends a timing it makes).
    fn summary(&self, roles: &[RunningRole], stop: &Stop) -> String;
}

/// A gateway whose Envoy a control plane configures, ready to start: its command, the file
/// named when it is refused, what it must hold, and where it logs attribution's lines.
pub(super) struct ConfiguredGateway {
    pub command: Command,
    pub config: PathBuf,
    pub awaited: Awaited,
    pub access_log: AccessLog,
}

/// Whether `kind` reads the backend's endpoint from Kubernetes' EndpointSlices, which refuse
/// an address on loopback (Contour's does): the rig then runs the backend in a pod's
/// namespace whatever its isolation. istiod is given the endpoint in a ServiceEntry.
pub(super) fn reads_backend_from_endpoint_slices(kind: ControlPlaneKind) -> bool {
    match kind {
        ControlPlaneKind::Contour => true,
        ControlPlaneKind::Istio => false,
    }
}

/// The admin endpoint of the gateway (the first proxy from the client side) among `roles`.
pub(super) fn gateway_admin(roles: &[RunningRole]) -> Option<SocketAddr> {
    roles
        .iter()
        .find(|r| r.class == Class::Proxy)
        .and_then(|r| r.admin)
}

impl Rig {
    /// Starts an Envoy the rig's control plane configures (`command`: Istio's agent, or
    /// Envoy itself) and waits until it holds all of `awaited` (its admin at `admin`, reached
    /// in `admin_netns`): a minute, and a second more per 1,000 routes. The control plane's
    /// own exit is the failure when it comes first; a `stop` ends the wait
    /// ([`LabError::Stopped`], the process stopped).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn start_configured_envoy(
        &mut self,
        name: ChainRole,
        command: Command,
        log: &Path,
        place: &Placement,
        admin: Option<SocketAddr>,
        admin_netns: Option<&str>,
        awaited: &Awaited,
        stop: &Stop,
    ) -> Result<RoleProcess, LabError> {
        let (Some(control_plane), Some(admin)) = (self.control_plane.as_mut(), admin) else {
            return Err(LabError::NoControlPlane(name));
        };
        let mut envoy = RoleProcess::spawn(name.name(), command, log, place)?;
        let limit = Duration::from_secs(60 + awaited.routes() as u64 / 1000);
        let waited = ready::wait_agent_acked(
            &mut envoy,
            admin,
            admin_netns,
            awaited,
            limit,
            stop,
            control_plane.configures(),
        );
        if let Some(ended) = control_plane.exited() {
            return Err(ended);
        }
        control_plane.configured(name, waited?, stop)?;
        Ok(envoy)
    }
}
