//! A change made under load and how to see it served: what the runner applies on a step's
//! schedule ([`Changer`]) and what it asks afterwards ([`Probe`]). Two things are changed, each
//! the way its users change it: a gateway's configuration ([`gateway`]: nginx reloaded, haproxy
//! reloaded, caddy's admin API, Envoy's file-based xDS, Istio's and Contour's objects on the
//! API server), and the mesh Istio's sidecars are in ([`sidecars`]: a ServiceEntry on the API
//! server, istiod pushing every sidecar). The backend's roll is a third, which goes on beside
//! the other changes ([`BackendRoll`]). The runner times them (`meshbench_runner`).

pub mod gateway;
pub mod sidecars;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Instant;

use meshbench_results::{ChangeKind, HaproxyReload, Program};

use crate::LabError;

pub use gateway::{GatewayChanger, OnCluster, Written};
pub use sidecars::SidecarChanger;

/// What the runner changes under load: a gateway or a mesh, told its own way.
pub trait Changer: Send {
    /// How it is told of a change, as a result names it.
    fn told_by(&self) -> &'static str;

    /// Makes a change of `kind` and tells it. On a failure the configuration may be as before
    /// or after the change; the next change is made from it as it now stands.
    fn apply(&mut self, kind: ChangeKind) -> Result<Told, LabError>;

    /// Puts the configuration back as it was before the first change, where it outlives the
    /// step (objects on a cluster).
    fn put_back(&mut self) -> Result<(), LabError> {
        Ok(())
    }
}

/// What to ask to see a change served, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// A request through the gateway, on a new TLS connection each time.
    Gateway(GatewayProbe),
    /// An Envoy's clusters, read from its admin (plain HTTP, from the load's network
    /// namespace), until they name `cluster`: a ServiceEntry's host pushed to a sidecar.
    Holds { admin: SocketAddr, cluster: String },
}

/// A request through the gateway: this route on this name, until it answers (`Answers`), no
/// longer does (`Stops`), or presents a certificate (`Presents`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayProbe {
    /// Where the gateway is reached (where it listens, or a port-forward to it).
    pub at: SocketAddr,
    /// The CA that signs the gateway's names.
    pub ca: PathBuf,
    /// The host name asked for (the TLS name and the `Host` header).
    pub host: String,
    pub path: String,
    pub served_when: ServedWhen,
}

/// When a probe's answer shows the change served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServedWhen {
    /// A 2xx from the backend: the route or domain was added.
    Answers,
    /// Anything but a 2xx: the route was removed.
    Stops,
    /// An answer on a connection whose handshake presented this certificate (DER): the
    /// certificate was rotated.
    Presents(Vec<u8>),
}

/// A change made and told: what it was, in words, and how to see it served.
#[derive(Debug, Clone)]
pub struct Told {
    pub what: String,
    pub probe: Probe,
    /// When the configuration (the gateway's, or the mesh's) began to be written: its first
    /// file, or its first object sent to the API server (after the objects that differ were
    /// found).
    pub written: Instant,
}

/// The backend's replicas restarted in turn, the way the place does it: the lab's processes
/// killed and started again at their addresses (`crate::rig::ReplicaRoll`), a cluster's
/// Deployment's rolling update. A roll goes on beside the changes after it: it is begun, then
/// asked whether it is done between them.
pub trait BackendRoll: Send {
    /// How the backend is rolled, as a result names it.
    fn told_by(&self) -> &'static str;

    /// Begins a roll: what it is, in words, and when its first replica was stopped or its
    /// first object written.
    fn begin(&mut self) -> Result<(String, Instant), String>;

    /// Whether the roll begun last is done: every replica new and ready. Between two asks it
    /// may go on a step (the next replica restarted).
    fn done(&mut self) -> Result<bool, String>;
}

/// A gateway started again beside the running one, which it tells to finish (haproxy's plain
/// reload, `crate::rig::GatewayRelaunch`): the new process is the gateway from then on.
pub trait Relaunch: Send {
    fn relaunch(&mut self) -> Result<(), String>;
}

/// How `program` is told of a change (haproxy: reloaded as `reload` says).
pub fn told_by(program: Program, reload: HaproxyReload) -> &'static str {
    match program {
        Program::Nginx => "nginx -s reload",
        Program::Haproxy if reload == HaproxyReload::Plain => {
            "haproxy plain reload (a new process, -sf)"
        }
        Program::Haproxy => "haproxy master-worker reload (SIGUSR2)",
        Program::Caddy => "caddy admin API (POST /load)",
        Program::Envoy => "envoy file-based xDS (lds.pb renamed into place)",
        Program::Istio => "istio objects on the API server (istiod pushes)",
        Program::Contour => "HTTPProxy objects on the API server (Contour translates)",
        Program::Command => "not changed by meshbench",
    }
}

pub(crate) fn tell_failed(told_by: &'static str, reason: String) -> LabError {
    LabError::Tell { told_by, reason }
}
