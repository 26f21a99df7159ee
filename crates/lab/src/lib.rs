//! The lab: preparing and starting real systems under test. nginx (installed from Debian
//! packages when missing) as a reverse proxy in front of the backend or as a fixed-body server,
//! the backend as its own process, certificates ([`pki`]), and gateway configurations for
//! nginx, haproxy, caddy, Envoy and Istio ([`gateway`]). Every process started here is stopped, and its files removed,
//! when its handle is dropped.

pub mod backend;
pub mod cgroup;
pub mod envoy_hop;
pub mod gateway;
pub mod hop;
pub mod install;
pub mod netns;
pub mod nginx;
pub mod pki;
pub mod process;
pub mod rig;
pub mod sample;
pub mod sampler;
pub mod sockdiag;

use std::net::SocketAddr;
use std::path::PathBuf;

use thiserror::Error;

pub use backend::BackendProcess;
pub use nginx::{Nginx, NginxSite};

/// Why a system under test could not be prepared or started.
#[derive(Debug, Error)]
pub enum LabError {
    #[error("{package} is not installed and `apt-get install -y {package}` failed ({reason}); install it by hand (Debian package {package})")]
    InstallFailed { package: String, reason: String },
    #[error("could not prepare {path}: {source}")]
    Files {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("could not start {0}: {1}")]
    Spawn(String, std::io::Error),
    #[error("the backend did not print its address (got {0:?})")]
    BackendBanner(String),
    #[error("{server} did not start listening on {addr} within 10 s: {log}")]
    NotListening {
        server: String,
        addr: SocketAddr,
        log: String,
    },
    #[error("{server} rejected its configuration: {log}")]
    BadConfig { server: String, log: String },
    #[error("{program} is not available: {hint}")]
    Missing { program: String, hint: String },
    #[error("certificate generation failed: {0}")]
    Pki(String),
    #[error("{0}")]
    Io(String),
}
