//! `gateway.type: contour`: the ingress gateway as Contour runs it. Envoy takes its listeners,
//! routes, clusters and certificates from Contour over xDS; Contour builds them from
//! `HTTPProxy` objects, the backend's Service and EndpointSlice and the domains' Secrets, read
//! from a Kubernetes API server. This is Contour's one home, the lab's and a cluster run's: its
//! objects for the gateway plan ([`objects`]), what its Envoy holds read from its stats
//! ([`stats`]: a cluster's Envoy, whose admin is out of reach), and its control plane
//! ([`ControlPlane`]: the lab's API server with Contour's CRDs, `contour serve`, and the Envoy
//! bootstrap `contour bootstrap` writes).
//!
//! Contour is built by scripts/install-contour.sh from its Go module at [`VERSION`], the API
//! server by scripts/install-k8s.sh ([`crate::kube`]), Envoy by scripts/install-envoy.sh. Every
//! server binds loopback on a free port. The one change made to what Contour writes: Envoy's
//! admin listens on the hop's admin address instead of Contour's unix socket, so that the lab
//! reads its counters, memory and configuration as it reads every Envoy role's.

mod control_plane;
pub mod objects;
pub mod stats;

use std::path::PathBuf;

use crate::LabError;
pub use control_plane::ControlPlane;

/// The Contour release scripts/install-contour.sh builds.
pub const VERSION: &str = "v1.33.8";
/// Where the gateway plan's objects live: the HTTPProxies, the Secrets they name and the
/// backend's Service (a user's application namespace; Contour itself has none here).
pub const NAMESPACE: &str = "meshbench";

/// What went wrong in Contour's parts, beyond starting a process ([`LabError`] says that).
#[derive(Debug, thiserror::Error)]
pub enum ContourError {
    #[error("the Contour gateway has no admin port")]
    NoAdminPort,
    /// `contour bootstrap` failed, or wrote what is not an Envoy bootstrap.
    #[error("contour bootstrap: {0}")]
    Bootstrap(String),
    /// Contour ended: its status and the tail of its output.
    #[error("{0}")]
    Exited(String),
    /// Contour did not take every HTTPProxy: each one it refused, with its reason.
    #[error("Contour did not take every HTTPProxy: {}", .0.join("; "))]
    NotValid(Vec<String>),
    /// The objects could not be written as YAML.
    #[error(transparent)]
    Yaml(#[from] serde_yaml_ng::Error),
}

/// Where scripts/install-contour.sh puts what it builds and extracts (`$CONTOUR_CACHE` if set).
pub fn cache() -> PathBuf {
    std::env::var_os("CONTOUR_CACHE").map_or_else(
        || PathBuf::from(format!("/var/cache/meshbench/contour/{VERSION}")),
        PathBuf::from,
    )
}

/// The `contour` binary.
pub fn binary() -> PathBuf {
    cache().join("bin/contour")
}

/// Contour's CRDs, from its module.
fn crds() -> PathBuf {
    cache().join("crds.yaml")
}

/// What the Contour gateway needs that is not installed here, as one error naming it all and
/// the scripts that install it; None when everything is there.
pub fn unavailable() -> Option<LabError> {
    let own = [binary(), crds()];
    let missing = crate::kube::missing_beside(&own);
    (!missing.is_empty()).then(|| LabError::Missing {
        program: "contour".into(),
        hint: crate::kube::missing_hint(&own, &missing, "scripts/install-contour.sh"),
    })
}

/// The version `contour version` prints, or why it could not be read.
pub fn version() -> String {
    let bin = binary();
    let mut probe = std::process::Command::new(&bin);
    probe.arg("version");
    crate::process::output_within(probe, crate::process::VERSION_WITHIN)
        .ok()
        .flatten()
        .filter(|o| o.status.success())
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout).lines().find_map(|l| {
                l.trim()
                    .strip_prefix("version:")
                    .map(|v| v.trim().to_string())
            })
        })
        .map(|v| format!("contour {v}"))
        .unwrap_or_else(|| format!("contour {VERSION} ({} did not answer)", bin.display()))
}

#[cfg(test)]
mod tests {
    /// The version the lab looks for is the one scripts/install-contour.sh builds.
    #[test]
    fn the_version_is_the_install_scripts() {
        let script = include_str!("../../../../scripts/install-contour.sh");
        let pinned = script
            .lines()
            .find_map(|l| l.strip_prefix("VERSION="))
            .expect("scripts/install-contour.sh pins VERSION=");
        assert_eq!(pinned, super::VERSION);
    }
}
