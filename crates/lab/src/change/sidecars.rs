//! The mesh Istio's sidecars are in, changed under load the way its users change it: an object
//! on the API server istiod reads, here one ServiceEntry whose host is the next name at each
//! change (the one before it gone), on the Service's port. istiod pushes every sidecar (a new
//! cluster, and the route configuration of that port, which carries the load's own route, sent
//! again); the change is served when the client's sidecar holds the new host's cluster, read
//! from its admin in the client pod, where the load (and so the probe) leaves from. The entry's
//! one endpoint is in a documentation range: nothing asks it.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::Instant;

use meshbench_k8s::blocking::BlockingClient;
use meshbench_k8s::names::DEFAULT_NAMESPACE;
use meshbench_k8s::objects::istio::{
    Location, Port, Resolution, ServiceEndpoint, ServiceEntrySpec, V1beta1,
};
use meshbench_k8s::objects::meta;
use meshbench_results::ChangeKind;
use serde_json::Value;

use super::{tell_failed, Changer, Probe, Told};
use crate::istio::objects::ServiceEntry;
use crate::LabError;

/// The ServiceEntry the changes rewrite, in the applications' namespace.
pub const ENTRY: &str = "meshbench-changes";

/// How the sidecars' mesh is told of a change, as a result names it.
pub const TOLD_BY: &str = "a ServiceEntry on the API server (istiod pushes every sidecar)";

/// The host of the entry after `n` changes.
pub fn host(n: u32) -> String {
    format!("entry-{n}.changes.meshbench.example")
}

/// The cluster a client sidecar holds for `host` on `port`: Istio's outbound cluster's name.
pub fn cluster(port: u16, host: &str) -> String {
    format!("outbound|{port}||{host}")
}

/// Istio's sidecars' mesh, ready to be changed: the API server istiod reads, and the client
/// sidecar's admin.
pub struct SidecarChanger {
    api: BlockingClient,
    /// The client sidecar's admin, in the client pod.
    admin: SocketAddr,
    /// The Service's port, which the entry's host shares.
    port: u16,
    /// Changes made so far.
    made: u32,
}

impl SidecarChanger {
    /// The mesh whose istiod reads the API server of `kubeconfig`, its client sidecar's admin
    /// at `admin` (in the client pod), its Service on `port`.
    pub fn new(
        kubeconfig: &Path,
        admin: SocketAddr,
        port: u16,
    ) -> Result<SidecarChanger, LabError> {
        let api = BlockingClient::from_kubeconfig(kubeconfig)
            .map_err(|e| tell_failed(TOLD_BY, e.to_string()))?;
        Ok(SidecarChanger {
            api,
            admin,
            port,
            made: 0,
        })
    }

    /// The entry after `n` changes: [`host`] of `n` on the Service's port, one endpoint that
    /// nothing asks (192.0.2.0/24, for documentation).
    fn entry(&self, n: u32) -> Result<Value, LabError> {
        let entry = ServiceEntry {
            metadata: meta(ENTRY, DEFAULT_NAMESPACE),
            spec: ServiceEntrySpec {
                hosts: vec![host(n)],
                addresses: Vec::new(),
                location: Location::MeshExternal,
                ports: vec![Port {
                    number: self.port,
                    name: "http".into(),
                    protocol: "HTTP".into(),
                }],
                resolution: Resolution::Static,
                endpoints: vec![ServiceEndpoint {
                    address: Ipv4Addr::new(192, 0, 2, (n % 254 + 1) as u8).to_string(),
                }],
            },
            version: V1beta1,
        };
        serde_json::to_value(&entry).map_err(|e| tell_failed(TOLD_BY, e.to_string()))
    }
}

impl Changer for SidecarChanger {
    fn told_by(&self) -> &'static str {
        TOLD_BY
    }

    /// The entry's host the next name, applied to the API server.
    fn apply(&mut self, kind: ChangeKind) -> Result<Told, LabError> {
        if kind != ChangeKind::ServiceEntry {
            return Err(tell_failed(
                TOLD_BY,
                format!("a {kind} change is no change of the sidecars' mesh"),
            ));
        }
        let n = self.made + 1;
        let entry = self.entry(n)?;
        let written = Instant::now();
        self.api
            .apply(&entry)
            .map_err(|e| tell_failed(TOLD_BY, e.to_string()))?;
        self.made = n;
        let what = match n {
            1 => format!("ServiceEntry {ENTRY} added for {}", host(n)),
            _ => format!("ServiceEntry {ENTRY}: {} for {}", host(n), host(n - 1)),
        };
        Ok(Told {
            what,
            probe: Probe::Holds {
                admin: self.admin,
                cluster: cluster(self.port, &host(n)),
            },
            written,
        })
    }

    /// Deletes the entry: the mesh as it was before the first change.
    fn put_back(&mut self) -> Result<(), LabError> {
        if self.made == 0 {
            return Ok(());
        }
        let entry = self.entry(self.made)?;
        self.api
            .delete(&entry)
            .map_err(|e| tell_failed(TOLD_BY, e.to_string()))?;
        self.made = 0;
        Ok(())
    }
}
