//! The lab's stand-in for a Kubernetes cluster, which the control planes it runs read: the
//! smallest API server ([`api_server`]: etcd and kube-apiserver on loopback, from the binaries
//! scripts/install-k8s.sh builds, no node) and the typed objects of the workloads and
//! certificates a cluster would hold for them ([`workloads`]). istiod ([`crate::istio`]) and
//! Contour ([`crate::contour`]) both run against it.

pub mod api_server;
pub mod workloads;

use std::path::PathBuf;

use serde::Serialize;

pub use api_server::ApiServer;

/// The Kubernetes release scripts/install-k8s.sh builds.
pub const K8S_VERSION: &str = "v1.36.1";

/// Where scripts/install-k8s.sh puts the Kubernetes binaries (`$K8S_CACHE/bin` if set).
pub fn k8s_bin() -> PathBuf {
    std::env::var_os("K8S_CACHE")
        .map_or_else(
            || PathBuf::from(format!("/var/cache/meshbench/k8s/{K8S_VERSION}")),
            PathBuf::from,
        )
        .join("bin")
}

/// What a control plane in the lab needs that is not here: those of `own` (its binaries and
/// files) that are missing, then the API server's (kube-apiserver, etcd) and Envoy; each named
/// as the message that asks for it names it.
/// What a program the lab runs beside an API server lacks, in one short line: the first file
/// missing and how many more, and the scripts that install them (`script` for its own files,
/// scripts/install-k8s.sh too when the API server's parts are among them).
pub fn missing_hint(own: &[PathBuf], missing: &[String], script: &str) -> String {
    let first = match missing {
        [] => String::new(),
        [one] => one.clone(),
        [first, rest @ ..] => format!("{first} and {} more", rest.len()),
    };
    let k8s_too = missing
        .iter()
        .any(|m| !own.iter().any(|o| o.display().to_string() == *m));
    let k8s = if k8s_too {
        " and scripts/install-k8s.sh"
    } else {
        ""
    };
    format!("missing {first}; run {script}{k8s}")
}

pub fn missing_beside(own: &[PathBuf]) -> Vec<String> {
    let mut missing: Vec<String> = own
        .iter()
        .cloned()
        .chain([k8s_bin().join("kube-apiserver")])
        .filter(|p| !p.is_file())
        .map(|p| p.display().to_string())
        .collect();
    if crate::install::find("etcd", &["/usr/bin/etcd"]).is_none() {
        missing.push("etcd".into());
    }
    if let Err(e) = crate::program::envoy::binary() {
        missing.push(format!("envoy ({e})"));
    }
    missing
}

/// Typed objects as one YAML stream, each document after `---`, as `kubectl apply -f` reads it.
pub fn yaml_stream<T: Serialize>(docs: &[T]) -> Result<String, serde_yaml_ng::Error> {
    let mut out = String::new();
    for d in docs {
        out.push_str("---\n");
        out.push_str(&serde_yaml_ng::to_string(d)?);
    }
    Ok(out)
}

/// `kubectl apply` of `files`, in order, as one shell line.
pub fn apply_line(files: &[PathBuf]) -> String {
    let mut line = String::from("kubectl apply");
    for file in files {
        line.push_str(" -f ");
        line.push_str(&crate::gateway::shell_word(&file.display().to_string()));
    }
    line
}
