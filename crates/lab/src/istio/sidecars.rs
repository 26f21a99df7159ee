//! `proxy.type: istio`: Istio's sidecars as Istio runs them, in pods. Each workload is a pod:
//! a network namespace of its own with a veth and an address ([`crate::netns`]), the
//! application in it and, when the pod is in the mesh, `pilot-agent proxy sidecar` beside it
//! as Istio's proxy user (1337), with Envoy's traffic captured by Istio's own
//! `pilot-agent istio-iptables`: inbound to 15006 (`virtualInbound`), outbound to 15001
//! (`virtualOutbound`), the proxy's own user excluded.
//!
//! istiod knows the pods as it knows them on Kubernetes, from the API server: a ServiceAccount
//! per workload, the Service `backend`, each Pod with its status as a kubelet would report it
//! (Running, Ready, its address), and the Service's EndpointSlice, written here because no
//! controller manager runs. The mesh's mutual TLS is a mesh-wide PeerAuthentication.
//!
//! No kube-proxy runs either: in a pod without a sidecar, a rule in the pod's own namespace
//! stands in for kube-proxy's, sending the Service's address to the backend pod. With a
//! sidecar, the capture takes the connection first, as in a pod.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use meshbench_k8s::k8s_openapi::api::core::v1::{Pod, Service, ServiceAccount};
use meshbench_k8s::k8s_openapi::api::discovery::v1::EndpointSlice;
use meshbench_k8s::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use meshbench_k8s::names::{DEFAULT_NAMESPACE, SERVICE_PORT};
use meshbench_k8s::objects::istio::PeerAuthentication as MeshPeerAuthentication;
use meshbench_k8s::objects::meta;
use meshbench_results::PeerAuthentication;

use super::{cache, ApiServer, IstioError, NAMESPACE};
use crate::kube::workloads;
use crate::{write_file, LabError};

/// The backend's Service (in [`DEFAULT_NAMESPACE`], on [`SERVICE_PORT`], as every workload).
pub const SERVICE: &str = "backend";
/// The Service's address: fixed, inside the lab API server's service range, so that a step
/// without a control plane (the baseline) reaches the backend the same way.
pub const SERVICE_IP: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 80);
/// Istio's proxy user and group: the capture lets its own traffic through.
pub const PROXY_UID: u32 = 1337;
/// Where Istio's capture sends a pod's outbound and inbound TCP.
pub const OUTBOUND_CAPTURE: u16 = 15001;
pub const INBOUND_CAPTURE: u16 = 15006;

/// One workload of the lab's mesh.
#[derive(Debug, Clone)]
pub struct LabPod {
    /// Its app label, ServiceAccount and workload name (`client`, `backend`).
    pub app: &'static str,
    /// Its address in its namespace.
    pub ip: IpAddr,
    /// Whether Istio injected a sidecar into it.
    pub sidecar: bool,
}

impl LabPod {
    /// Its Pod's name.
    pub fn name(&self) -> String {
        format!("{}-0", self.app)
    }

    /// Its labels, as istiod reads them from the Pod and the agent from its environment.
    fn labels(&self) -> BTreeMap<String, String> {
        let mut labels = BTreeMap::from([
            ("app".to_string(), self.app.to_string()),
            (
                "service.istio.io/canonical-name".to_string(),
                self.app.to_string(),
            ),
        ]);
        if self.sidecar {
            // Set by Istio's injection: it tells a client sidecar to use mutual TLS.
            labels.insert("security.istio.io/tlsMode".into(), "istio".into());
        }
        labels
    }

    /// Its labels as `ISTIO_METAJSON_LABELS` carries them.
    pub fn labels_json(&self) -> String {
        serde_json::to_string(&self.labels()).expect("labels serialise to JSON")
    }
}

/// Registers the pods with the API server as a cluster would hold them, and the mesh's mutual
/// TLS; `server` is the Service's backend.
pub fn register(
    api: &ApiServer,
    pods: &[&LabPod],
    server: &LabPod,
    mtls: PeerAuthentication,
) -> Result<(), LabError> {
    for pod in pods {
        api.client.apply_typed(&ServiceAccount {
            metadata: app_meta(pod.app),
            ..ServiceAccount::default()
        })?;
    }
    api.client.apply_typed(&service(server))?;
    for pod in pods {
        register_pod(api, pod)?;
    }
    api.client.apply_typed(&endpoint_slice(server))?;
    api.client.apply_custom(&mesh_mtls(mtls))?;
    Ok(())
}

/// The mesh's mutual TLS: a PeerAuthentication in Istio's root namespace.
fn mesh_mtls(mtls: PeerAuthentication) -> MeshPeerAuthentication {
    MeshPeerAuthentication::new(meta("default", NAMESPACE), mtls.istio_mode())
}

/// An object's metadata in the applications' namespace.
fn app_meta(name: &str) -> ObjectMeta {
    meta(name, DEFAULT_NAMESPACE)
}

/// The Service in front of `server`, at its fixed cluster IP.
fn service(server: &LabPod) -> Service {
    workloads::service(app_meta(SERVICE), server.app, SERVICE_IP.to_string())
}

/// `pod`'s Pod, with its labels; no status yet.
fn pod_object(pod: &LabPod) -> Pod {
    let metadata = ObjectMeta {
        labels: Some(pod.labels()),
        ..app_meta(&pod.name())
    };
    workloads::pod(metadata, pod.app, pod.app)
}

/// One pod, then its status as the kubelet would report it: running and ready at its address.
fn register_pod(api: &ApiServer, pod: &LabPod) -> Result<(), LabError> {
    let object = pod_object(pod);
    api.client.apply_typed(&object)?;
    api.client.apply_status(&Pod {
        status: Some(workloads::running(pod.ip)),
        ..object
    })?;
    Ok(())
}

/// The Service's EndpointSlice: the server pod, ready.
fn endpoint_slice(server: &LabPod) -> EndpointSlice {
    let endpoint = workloads::endpoint(
        server.ip.to_string(),
        Some((&server.name(), DEFAULT_NAMESPACE)),
    );
    workloads::endpoint_slice(
        format!("{SERVICE}-lab"),
        DEFAULT_NAMESPACE,
        SERVICE,
        vec![endpoint],
        SERVICE_PORT,
    )
}

/// Runs `ip netns exec NETNS` with `argv`, its output kept in `log`; fails with its last lines.
fn in_namespace(netns: &str, argv: &[&str], log: &Path, what: &str) -> Result<(), LabError> {
    let out = Command::new("ip")
        .args(["netns", "exec", netns])
        .args(argv)
        .output()
        .map_err(|e| LabError::Spawn(what.into(), e))?;
    let mut text = out.stdout;
    text.extend_from_slice(&out.stderr);
    write_file(log, &text)?;
    if out.status.success() {
        return Ok(());
    }
    let text = String::from_utf8_lossy(&text);
    let tail: Vec<&str> = text.lines().rev().take(3).collect();
    Err(LabError::ScriptFailed {
        script: what.into(),
        reason: format!(
            "{}: {}",
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        ),
    })
}

/// Writes Istio's capture into pod namespace `netns` with Istio's own `istio-iptables`, as
/// `istio-init` does in a pod: inbound TCP to [`INBOUND_CAPTURE`], outbound to
/// [`OUTBOUND_CAPTURE`], the proxy user's own traffic and the agent's ports left alone. Its
/// output goes to `log`.
pub fn capture(netns: &str, log: &Path) -> Result<(), LabError> {
    let agent = cache().join("bin/pilot-agent");
    let agent = agent.to_string_lossy();
    let (outbound, inbound, uid) = (
        OUTBOUND_CAPTURE.to_string(),
        INBOUND_CAPTURE.to_string(),
        PROXY_UID.to_string(),
    );
    in_namespace(
        netns,
        &[
            &agent,
            "istio-iptables",
            "-p",
            &outbound,
            "-z",
            &inbound,
            "-u",
            &uid,
            "-m",
            "REDIRECT",
            "-i",
            "*",
            "-b",
            "*",
            "-d",
            "15090,15021,15020",
        ],
        log,
        "istio-iptables",
    )
}

/// kube-proxy's rule for the Service, in pod namespace `netns` (a pod without a sidecar):
/// the Service's address and port go to the backend pod at `backend`.
pub fn service_rule(netns: &str, backend: SocketAddr, log: &Path) -> Result<(), LabError> {
    in_namespace(
        netns,
        &[
            "iptables",
            "-t",
            "nat",
            "-A",
            "OUTPUT",
            "-p",
            "tcp",
            "-d",
            &format!("{SERVICE_IP}/32"),
            "--dport",
            &SERVICE_PORT.to_string(),
            "-j",
            "DNAT",
            "--to-destination",
            &backend.to_string(),
        ],
        log,
        "iptables (the Service's rule)",
    )
}

/// Where the pods' sidecars keep their files: a directory every user can pass through, since
/// Envoy resolves its paths from `/` and runs as the proxy user, which a private temporary
/// directory (a test suite's, mode 0700) would shut out.
pub const POD_DIRS: &str = "/run/meshbench/pods";

/// The directory of `app`'s sidecar in the rig `owner` (a rig's id, which starts with this
/// process's id), made with every directory above it passable.
pub fn pod_dir(owner: &str, app: &str) -> Result<std::path::PathBuf, LabError> {
    use std::os::unix::fs::PermissionsExt;
    let base = Path::new(POD_DIRS);
    std::fs::create_dir_all(base)
        .and_then(|()| {
            for d in [Path::new("/run/meshbench"), base] {
                std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755))?;
            }
            Ok(())
        })
        .map_err(|e| LabError::Files {
            path: base.to_path_buf(),
            source: e,
        })?;
    Ok(base.join(format!("{}{owner}-{app}", crate::netns::NAME_PREFIX)))
}

/// Removes the pods' directories that a run killed outright left: `meshbench-<pid>-*` of
/// processes that no longer exist.
pub fn remove_stale() {
    for e in std::fs::read_dir(POD_DIRS).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let owner = name
            .strip_prefix(crate::netns::NAME_PREFIX)
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<u32>().ok());
        if owner.is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists()) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Makes `dir` and everything in it Istio's proxy user's, as a pod's volumes are.
pub fn hand_to_proxy_user(dir: &Path) -> Result<(), LabError> {
    fn walk(p: &Path) -> std::io::Result<()> {
        std::os::unix::fs::chown(p, Some(PROXY_UID), Some(PROXY_UID))?;
        if p.is_dir() {
            for e in std::fs::read_dir(p)? {
                walk(&e?.path())?;
            }
        }
        Ok(())
    }
    walk(dir).map_err(|e| LabError::Files {
        path: dir.to_path_buf(),
        source: e,
    })
}

/// One GET from inside `netns` to the Service, as the application would send it; its status.
pub fn probe(netns: &str, limit: Duration) -> Result<u16, LabError> {
    let url = format!("http://{SERVICE_IP}:{SERVICE_PORT}/");
    crate::netns::within(Some(netns), || {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(limit))
            .http_status_as_error(false)
            .user_agent("meshbench-probe")
            .build()
            .into();
        agent
            .get(&url)
            .call()
            .map(|answer| answer.status().as_u16())
            .map_err(|source| {
                LabError::from(IstioError::Probe {
                    url: url.clone(),
                    source: Box::new(source),
                })
            })
    })?
}

/// Why Istio's capture cannot be written here (the iptables tools it runs are missing).
pub fn iptables_missing() -> Option<String> {
    let found = ["iptables", "iptables-restore", "iptables-save"]
        .iter()
        .all(|b| crate::install::find(b, &[&format!("/usr/sbin/{b}")]).is_some());
    (!found)
        .then(|| "iptables (Debian's package iptables; scripts/install-k8s.sh installs it)".into())
}

#[cfg(test)]
mod tests {
    use meshbench_k8s::objects::to_value;
    use serde_json::json;

    use super::*;

    /// The objects are the documents the lab wrote as JSON before they were typed.
    #[test]
    fn the_registered_objects_are_the_documents_written_by_hand_before() {
        let server = LabPod {
            app: SERVICE,
            ip: "10.213.1.3".parse().unwrap(),
            sidecar: true,
        };
        assert_eq!(
            to_value(&endpoint_slice(&server)),
            json!({
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {
                    "name": "backend-lab",
                    "namespace": "default",
                    "labels": {
                        "kubernetes.io/service-name": "backend",
                        "endpointslice.kubernetes.io/managed-by": "meshbench",
                    },
                },
                "addressType": "IPv4",
                "endpoints": [{
                    "addresses": ["10.213.1.3"],
                    "conditions": {"ready": true, "serving": true, "terminating": false},
                    "nodeName": "meshbench-lab",
                    "targetRef": {"kind": "Pod", "name": "backend-0", "namespace": "default"},
                }],
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            })
        );
        assert_eq!(
            to_value(&mesh_mtls(PeerAuthentication::Strict)),
            json!({
                "apiVersion": "security.istio.io/v1",
                "kind": "PeerAuthentication",
                "metadata": {"name": "default", "namespace": "istio-system"},
                "spec": {"mtls": {"mode": "STRICT"}},
            })
        );
        assert_eq!(
            server.labels_json(),
            r#"{"app":"backend","security.istio.io/tlsMode":"istio","service.istio.io/canonical-name":"backend"}"#
        );
        let pod = to_value(&pod_object(&server));
        assert_eq!(
            pod["metadata"]["labels"]["security.istio.io/tlsMode"],
            "istio"
        );
        assert_eq!(pod["spec"]["containers"][0]["name"], "backend");
        assert_eq!(pod["spec"]["nodeName"], "meshbench-lab");
        let service = to_value(&service(&server));
        assert_eq!(
            service["spec"]["ports"],
            json!([{"name": "http", "port": 8080, "targetPort": 8080, "protocol": "TCP"}])
        );
        assert_eq!(service["spec"]["clusterIP"], "10.96.0.80");
    }
}
