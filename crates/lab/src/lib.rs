//! The lab: preparing and starting real systems under test, every role a real process.
//!
//! - [`program`]: the proxy programs, one module each (nginx, haproxy, caddy, envoy, command):
//!   binary (installed from Debian packages when missing), version, configuration for a mesh
//!   hop and for the gateway, command line.
//! - [`gateway`]: the gateway plan (N domains x M paths), its certificates and targets file.
//! - [`change`]: a change told to a gateway the lab wrote, the way its users tell it (a
//!   reload, an admin API), and what to ask to see it served.
//! - [`rig`]: one step's system under test, a room per thing it starts: `rig/mod.rs` the rig
//!   and the order of things, `rig/chain.rs` the chains of processes (hops, the backend, one
//!   role started), `rig/pods.rs` Istio's sidecars' pods and their namespaces, `rig/istio.rs`
//!   the rig's share of Istio.
//! - [`istio`]: Istio's one home, for the rig, the cost experiment and the runner's cluster
//!   alike: istiod, the agents' command lines, Istio's objects ([`istio::objects`]) and the
//!   sidecars' pods ([`istio::sidecars`]).
//! - [`contour`]: Contour's one home (`gateway.type: contour`): its objects for the gateway
//!   plan, `contour serve` and the bootstrap it writes for Envoy.
//! - [`kube`]: the lab's stand-in for a cluster, which istiod and Contour read: the API server
//!   ([`kube::api_server`]) and the typed objects of workloads and certificates
//!   ([`kube::workloads`]).
//! - [`control_plane_cost`]: the `control_plane` experiment (what istiod costs serving a mesh
//!   of a given scale), using [`istio`]: the mesh registered, the simulated proxies, the step.
//! - [`process`]: the one process handle ([`process::RoleProcess`]), placed in its [`cgroup`]
//!   and [`netns`] namespace, ready when it accepts, stopped when dropped.
//! - [`sampler`], [`sample`], [`sockdiag`]: what each role uses, read from cgroup files, /proc
//!   and netlink, keyed by the results' `Role`.
//! - [`pki`]: the lab's certificates; [`install`]: finding and installing binaries; [`port`]:
//!   free loopback ports.
//!
//! Dependencies go one way: the results' topology and `gateway` know no program, `program`
//! renders for both, `istio` and `contour` build on `program`, `gateway` and `kube`, `rig` and
//! `control_plane_cost` join them. Every process started here is stopped, and its files removed, when its handle is
//! dropped. Failures are [`LabError`]s, with the path and the OS error where a file failed.
//!
//! Every wait takes the one stop handle (`meshbench_results::Stop`) and looks at it at least
//! every ~100 ms (a blocking call is bounded by a short timeout between two looks): a stop
//! while something starts ends the start with [`LabError::Stopped`] within seconds, and
//! what it had started is put back as its handles drop.

pub mod cgroup;
pub mod change;
pub mod contour;
pub mod control_plane_cost;
pub mod gateway;
pub mod install;
pub mod istio;
pub mod kube;
pub mod netns;
pub mod pki;
pub mod port;
pub mod process;
pub mod program;
pub mod rig;
pub mod sample;
pub mod sampler;
pub mod sockdiag;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use meshbench_results::Stop;
use thiserror::Error;

pub use process::RoleProcess;
pub use program::{Program, ProgramSpec};

/// Why a system under test could not be prepared or started.
#[derive(Debug, Error)]
pub enum LabError {
    #[error("{package} is not installed and `apt-get install -y {package}` failed ({reason}); install it by hand (Debian package {package})")]
    InstallFailed { package: String, reason: String },
    #[error("{script} failed: {reason}")]
    ScriptFailed { script: String, reason: String },
    #[error("could not prepare {path}: {source}")]
    Files {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("could not start {0}: {1}")]
    Spawn(String, std::io::Error),
    #[error("{server} did not start listening on {addr} within 10 s: {log}")]
    NotListening {
        server: String,
        addr: SocketAddr,
        log: String,
    },
    #[error("{server} rejected its configuration{}: {log}", config_note(.config.as_deref()))]
    BadConfig {
        server: String,
        /// The file it was given, when known.
        config: Option<PathBuf>,
        /// How it ended and the tail of its own output (its message).
        log: String,
    },
    #[error("{program} is not available: {hint}")]
    Missing { program: String, hint: String },
    /// A gateway could not be told of a change: how it was told, and what it answered.
    #[error("{told_by} failed: {reason}")]
    Tell {
        told_by: &'static str,
        reason: String,
    },
    #[error("certificate generation failed: {0}")]
    Pki(String),
    /// A file or directory could not be written or created: what was being done to it (a
    /// verb: `write`, `create`), which, and why.
    #[error("cannot {doing} {}: {source}", .path.display())]
    File {
        doing: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    /// Envoy's readable copy of a bootstrap (`file`) could not be written as YAML.
    #[error("cannot write {file}: {source}")]
    EnvoyYaml {
        file: &'static str,
        source: program::envoy::yaml::YamlError,
    },
    #[error("no free port on 127.0.0.1: {0}")]
    NoFreePort(#[source] std::io::Error),
    /// A gateway plan that cannot be generated (its flags: `--domains`, `--paths`, `--tls`).
    #[error("{0}")]
    Plan(#[from] gateway::PlanError),
    /// Namespaces (`isolation: netns`) could not be set up or entered.
    #[error(transparent)]
    Netns(#[from] netns::NetnsError),
    /// A server this lab started did not become ready in time: which, what it waited for
    /// beyond answering (or ""), the limit, and the tail of its output.
    #[error("{server} was not ready{awaiting} within {} s: {log}", .within.as_secs())]
    NotReady {
        server: &'static str,
        awaiting: &'static str,
        within: std::time::Duration,
        log: String,
    },
    /// An Envoy `role` did not come to hold its configuration (past its limit, or stopped).
    #[error("{role}'s {source}")]
    Ack {
        role: String,
        source: program::envoy::ready::AckError,
    },
    /// An Envoy a control plane configures was asked to start before its control plane (a
    /// bug of the caller's order).
    #[error("{0} started without its control plane")]
    NoControlPlane(meshbench_results::ChainRole),
    /// A hop of a chain asked to be played by a program a control plane configures outside
    /// the places the rig starts one (the gateway; Istio's sidecars in pods).
    #[error("{0} plays the gateway (gateway.type: {0}) or, for istio, the sidecars in pods (proxy.type: istio, isolation: netns); not a lone hop")]
    HopWithoutPods(meshbench_results::Program),
    /// Istio's parts (`gateway.type: istio`, `proxy.type: istio`).
    #[error(transparent)]
    Istio(#[from] istio::IstioError),
    /// Contour's parts (`gateway.type: contour`).
    #[error(transparent)]
    Contour(#[from] contour::ContourError),
    /// The control-plane cost experiment (`topology: control_plane`).
    #[error(transparent)]
    Cost(#[from] control_plane_cost::CostError),
    /// The lab's own Kubernetes API server (`gateway.type: istio`) refused or did not answer.
    #[error(transparent)]
    Kubernetes(#[from] meshbench_k8s::ApiError),
    /// A stop (Ctrl-C, SIGTERM) came while something was being started or awaited: what was
    /// started so far is stopped as its handles drop. Not a fault of what was started.
    #[error("stopped before it was ready")]
    Stopped,
}

/// `Err(`[`LabError::Stopped`]`)` once `stop` was asked: the check between the stages of a
/// start that has no wait of its own to look at it.
pub(crate) fn go_on(stop: &Stop) -> Result<(), LabError> {
    if stop.requested() {
        Err(LabError::Stopped)
    } else {
        Ok(())
    }
}

fn config_note(config: Option<&std::path::Path>) -> String {
    config
        .map(|c| format!(" {}", c.display()))
        .unwrap_or_default()
}

/// Writes a configuration or certificate file, creating its directory.
pub(crate) fn write_file(
    path: impl AsRef<Path>,
    contents: impl AsRef<[u8]>,
) -> Result<PathBuf, LabError> {
    let path = path.as_ref().to_path_buf();
    let written = match path.parent() {
        Some(dir) => std::fs::create_dir_all(dir),
        None => Ok(()),
    }
    .and_then(|()| std::fs::write(&path, contents));
    match written {
        Ok(()) => Ok(path),
        Err(source) => Err(LabError::Files { path, source }),
    }
}

/// Creates the directory `path` itself (its parent must exist; it must not), removed with
/// everything in it when the handle is dropped.
pub(crate) fn removed_on_drop(path: &Path) -> Result<tempfile::TempDir, LabError> {
    let failed = |source| LabError::File {
        doing: "create",
        path: path.to_path_buf(),
        source,
    };
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(failed(std::io::ErrorKind::InvalidInput.into()));
    };
    tempfile::Builder::new()
        .prefix(name)
        .rand_bytes(0)
        .tempdir_in(parent)
        .map_err(failed)
}
