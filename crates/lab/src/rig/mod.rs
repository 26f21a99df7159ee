//! A rig: the system under test for one step, every role a real process. The topology gives
//! the chain of roles (`meshbench_results::topology`); the backend starts first, then the
//! roles from the server side outwards, each played by its program ([`crate::program`]) in its
//! cgroup (or pinned with the affinity mask where cgroups cannot be written), optionally in its
//! own network namespace. The client (meshbench's engine, in this process) talks to [`Rig::entry`].
//! Dropping the rig stops every process, then removes the cgroups, the namespaces and the files.
//! Every wait of [`Rig::start`] looks at the run's stop: a stop while the rig starts ends the
//! start with [`LabError::Stopped`] and the half-started rig is dropped the same way.
//!
//! This module holds the rig, its spec and the order of things ([`Rig::start`], [`Drop`]).
//! What it starts lives beside it: `chain` the chains of processes (the hops, the backend,
//! one role started and awaited), `pods` Istio's sidecars' pods and their namespaces,
//! `control_plane` the control plane a rig runs beside the Envoys it configures, as one
//! trait ([`ControlPlane`]), and its two kinds: `istio` (the gateway's and the sidecars'
//! istiod), which calls into Istio's home, [`crate::istio`], and `contour` (the gateway's
//! Contour), which calls into [`crate::contour`].

mod chain;
mod contour;
pub mod control_plane;
mod istio;
mod pods;
mod roll;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::cgroup::{Cgroup, Cgroups, Limits};
use crate::change::{Changer, GatewayChanger, Relaunch, SidecarChanger, Written};
use crate::istio::sidecars;
use crate::netns::{Namespaces, RoleNamespace};
use crate::process::{copy_of, RoleProcess};
use crate::program::envoy::ready::Awaited;
use crate::program::{Program, ProgramSpec};
use crate::sampler::Watch;
use crate::{go_on, pki, LabError};
use chain::{backend_launch, hops};
use meshbench_results::{
    topology::RolePlan, ChainRole, Class, HaproxyReload, PeerAuthentication, PlayedBy, Stop,
    Topology,
};
use std::sync::{Arc, PoisonError};

pub use chain::backend_command;
pub use control_plane::ControlPlane;
pub use roll::{GatewayRelaunch, ReplicaRoll};
use roll::{Respawn, Respawned};

/// The gateway topology's settings.
#[derive(Debug, Clone)]
pub struct GatewaySpec {
    pub program: Program,
    pub domains: usize,
    pub paths: usize,
    /// 0: follow the CPU allotment.
    pub workers: u32,
    /// The gateway is one of a changes pair: written as it is changed (Envoy's listeners in a
    /// file of their own, [`crate::gateway::GatewayPlan::listeners_file`]), with changes or
    /// not, so that the two steps of the pair differ only by the changes.
    pub changeable: bool,
    /// How haproxy's gateway runs and is reloaded: as a master with workers (seamless), or
    /// as one process a new one replaces (plain).
    pub haproxy_reload: HaproxyReload,
}

/// Everything needed to start a rig.
#[derive(Debug, Clone)]
pub struct RigSpec {
    pub topology: Topology,
    /// The L7 proxies' program: sidecars and the waypoint.
    pub proxy: ProgramSpec,
    /// 0: follow the CPU allotment.
    pub proxy_workers: u32,
    /// Mutual TLS between the two proxies of `both`.
    pub proxy_mtls: bool,
    /// Istio's sidecars (`proxy.type: istio`): the mesh's PeerAuthentication when
    /// `proxy_mtls` is on.
    pub proxy_peer_authentication: PeerAuthentication,
    /// Envoy proxies: add the stand-ins for Istio's per-request telemetry.
    pub proxy_istio_telemetry: bool,
    /// Per-hop attribution: each L7 Envoy logs the requests the engine tagged (the lab's
    /// own through their bootstraps, istiod's through Istio's `Telemetry`).
    pub attribution: bool,
    /// The L4 tunnels' program.
    pub tunnel: ProgramSpec,
    pub tunnel_workers: u32,
    /// Mutual TLS between tunnels (and the waypoint).
    pub tunnel_mtls: bool,
    pub gateway: GatewaySpec,
    /// The meshbench binary (for `meshbench backend`).
    pub backend_exe: PathBuf,
    pub backend_args: Vec<String>,
    /// The backend's replicas behind the gateway (`backend.replicas`, 1 to
    /// [`meshbench_results::role::MAX_BACKEND_REPLICAS`]), each a role of its own; every
    /// other topology runs one.
    pub backend_replicas: u8,
    pub proxy_limits: Limits,
    pub tunnel_limits: Limits,
    pub backend_limits: Limits,
    /// The control plane's (istiod's, Contour's), where the rig runs one.
    pub control_plane_limits: Limits,
    /// Accept HTTP/2 from the client (h2c on plain listeners, ALPN h2 on TLS ones).
    pub http2: bool,
    /// gRPC end to end: every L7 hop speaks HTTP/2 on both sides.
    pub grpc: bool,
    /// HTTP/3 from the client: the entry (a caddy hop, the gateway, or the backend itself when
    /// there is no hop) listens with TLS and QUIC; what it forwards is unchanged.
    pub http3: bool,
    pub netns: bool,
    /// Unique to this rig among those alive (cgroup and namespace names).
    pub id: String,
    pub dir: PathBuf,
}

/// One running role.
#[derive(Debug)]
pub struct RunningRole {
    /// Which role of the chain it plays (its name in results, the stem of its files).
    pub name: ChainRole,
    pub class: Class,
    /// The program that plays it (nginx, haproxy, caddy, envoy, command, istio), or the
    /// backend.
    pub program: PlayedBy,
    pub listen: SocketAddr,
    pub workers: u32,
    /// The program's admin endpoint (Envoy's), read after each step as a second witness.
    pub admin: Option<SocketAddr>,
    /// The network namespace the admin endpoint is reached in (an Istio sidecar's admin is on
    /// its pod's own loopback); None: from here.
    pub admin_netns: Option<String>,
    // Field order matters: the process stops before its cgroup is removed.
    pub process: RoleProcess,
    pub cgroup: Option<Cgroup>,
    pub namespace: Option<RoleNamespace>,
}

impl RunningRole {
    /// Reads its Envoy admin endpoint with `read`, from where the endpoint is reached (inside
    /// its pod for an Istio sidecar); None when it has none.
    pub fn read_admin<T: Send>(
        &self,
        read: impl FnOnce(SocketAddr) -> T + Send,
    ) -> Option<Result<T, LabError>> {
        let admin = self.admin?;
        Some(crate::netns::within(self.admin_netns.as_deref(), || {
            read(admin)
        }))
    }
}

/// How the client reaches the gateway topology.
#[derive(Debug, Clone)]
pub struct GatewayEntry {
    pub targets: PathBuf,
    pub ca: PathBuf,
}

/// How the client checks an entry that speaks TLS to it (HTTP/3): trust this CA, ask for this
/// name (its certificate's), connect to the rig's entry address.
#[derive(Debug, Clone)]
pub struct EntryTls {
    pub ca: PathBuf,
    pub server_name: String,
}

/// A running system under test.
pub struct Rig {
    /// From the client's side to the backend.
    pub roles: Vec<RunningRole>,
    /// Where the client sends its requests.
    pub entry: SocketAddr,
    pub gateway: Option<GatewayEntry>,
    /// The entry's TLS towards the client, when it has one outside the gateway topology.
    pub entry_tls: Option<EntryTls>,
    /// What could not be done as asked, and what was done instead.
    pub warnings: Vec<String>,
    /// The control plane that configures the rig's Envoys, where it runs one (istiod for
    /// `gateway.type: istio` or `proxy.type: istio`, Contour for `gateway.type: contour`),
    /// stopped after the roles.
    pub control_plane: Option<Box<dyn ControlPlane>>,
    /// The network namespace the load leaves from (the client pod of Istio's sidecars);
    /// None: this machine's own.
    pub client_netns: Option<String>,
    /// Per-hop attribution: the roles that log the tagged requests, and where.
    pub access_logs: Vec<(ChainRole, PathBuf)>,
    /// Where the backend's replicas listen, the first the chain's last hop forwards to: the
    /// gateway balances over them all.
    backends: Vec<SocketAddr>,
    namespaces: Option<Namespaces>,
    /// The gateway the lab wrote (a standalone program's), kept to be changed under load.
    written_gateway: Option<WrittenGateway>,
    /// How each backend replica was started (a roll starts it again so), and what a roll
    /// started again.
    recipes: Vec<(ChainRole, Command)>,
    respawned: Respawned,
    /// Istio's sidecars' directories, outside `dir` ([`sidecars::pod_dir`]).
    pod_dirs: Vec<tempfile::TempDir>,
    dir: PathBuf,
}

/// A gateway's configuration as the lab wrote it (its program's files, or its control plane's
/// objects): its program, its plan, the CA that signed its domains and what it issued.
struct WrittenGateway {
    program: Program,
    haproxy_reload: HaproxyReload,
    written: Written,
}

/// The name the mesh's certificates are issued for and checked against.
const MESH_NAME: &str = "mesh.local";

/// Where a role listens: an address, and the namespace it lives in when isolated.
struct RoleAddress {
    addr: SocketAddr,
    namespace: Option<RoleNamespace>,
}

/// One role ready to start: its command line written, its address chosen.
struct Launch {
    name: ChainRole,
    class: Class,
    program: PlayedBy,
    command: Command,
    address: RoleAddress,
    workers: u32,
    admin: Option<SocketAddr>,
    /// Its configuration file, named when the program refuses it.
    config: Option<PathBuf>,
    /// When it counts as started.
    ready: Ready,
    /// The user it runs as (Istio's proxy user), when not this process's.
    user: Option<u32>,
    /// Where its admin endpoint is reached from.
    admin_netns: Option<String>,
    /// Where it writes attribution's lines, when it logs them.
    access_log: AccessLog,
}

/// Where a role writes attribution's per-request lines.
#[derive(Debug, Clone, PartialEq, Eq)]
enum AccessLog {
    /// Nowhere: attribution is off, or the role logs nothing per request.
    None,
    /// A file of its own (the Envoys the lab configures).
    File(PathBuf),
    /// Its stdout, the role's log (the Envoys istiod configures, as a container's log).
    Stdout,
}

impl AccessLog {
    /// An Envoy istiod configures: it logs to its stdout when attribution is on, as istiod's
    /// Telemetry tells it.
    fn by_istiod(attribution: bool) -> AccessLog {
        if attribution {
            AccessLog::Stdout
        } else {
            AccessLog::None
        }
    }
}

/// When a started role counts as ready.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Ready {
    /// Its listener accepts a connection.
    Accepts,
    /// Its Envoy holds all of this, sent by the rig's control plane ([`Rig::control_plane`]),
    /// and the control plane's own check passed.
    Configured(Awaited),
}

impl RigSpec {
    /// The limits of a class of roles.
    pub fn limits(&self, class: Class) -> &Limits {
        match class {
            Class::Proxy => &self.proxy_limits,
            Class::Tunnel => &self.tunnel_limits,
            Class::Backend => &self.backend_limits,
            Class::ControlPlane => &self.control_plane_limits,
        }
    }

    /// The program of a class of hops.
    fn program(&self, class: Class) -> &ProgramSpec {
        match class {
            Class::Tunnel => &self.tunnel,
            // The backend is no hop, nor the control plane: no program of their own here.
            Class::Proxy | Class::Backend | Class::ControlPlane => &self.proxy,
        }
    }

    /// The worker count of a role of the chain.
    fn workers(&self, role: &RolePlan) -> u32 {
        let set = match (self.topology, role.class) {
            (Topology::Gateway, _) => self.gateway.workers,
            (_, Class::Tunnel) => self.tunnel_workers,
            (_, Class::Proxy | Class::Backend | Class::ControlPlane) => self.proxy_workers,
        };
        workers_for(set, self.limits(role.class))
    }

    /// What istiod's mesh is started with, where the rig runs one.
    fn mesh(&self) -> crate::istio::MeshOptions {
        crate::istio::MeshOptions {
            attribution: self.attribution,
        }
    }

    /// Whether a role's links to the other hops of the mesh use mutual TLS.
    fn mtls(&self, class: Class) -> bool {
        match class {
            Class::Tunnel => self.tunnel_mtls,
            // The waypoint sits between tunnels: it speaks their TLS.
            _ if self.topology == Topology::Waypoint => self.tunnel_mtls,
            _ => self.proxy_mtls,
        }
    }
}

/// Worker count for a role: as set, else the CPU quota rounded up, else the pinned CPUs,
/// else 2 (the default concurrency of Istio's sidecar).
pub fn workers_for(set: u32, limits: &Limits) -> u32 {
    if set > 0 {
        return set;
    }
    if let Some(c) = limits.cpus {
        return c.ceil().max(1.0) as u32;
    }
    if let Some(set) = &limits.cpuset {
        return set.len().max(1) as u32;
    }
    2
}

/// Removes what a run killed with SIGKILL left behind: `meshbench-<pid>-*` cgroups of
/// processes that no longer exist (their stragglers are killed first), such network
/// namespaces, and such rig directories in the temp directory (an Istio step's etcd, keys and
/// logs).
pub fn remove_stale() {
    for controller in ["", "cpu", "cpuacct", "cpuset", "memory"] {
        let root = Path::new("/sys/fs/cgroup").join(controller);
        let Ok(dir) = std::fs::read_dir(&root) else {
            continue;
        };
        for e in dir.flatten() {
            if !of_a_dead_run(&e.file_name().to_string_lossy()) {
                continue;
            }
            let procs = std::fs::read_to_string(e.path().join("cgroup.procs")).unwrap_or_default();
            for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                // SAFETY: killing a leftover process of a dead run.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(50));
            let _ = std::fs::remove_dir(e.path());
        }
    }
    crate::netns::remove_stale();
    sidecars::remove_stale();
    for e in std::fs::read_dir(std::env::temp_dir())
        .into_iter()
        .flatten()
        .flatten()
    {
        let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
        if is_dir && of_a_dead_run(&e.file_name().to_string_lossy()) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Whether `name` is `meshbench-<pid>-...` of a process that no longer exists.
fn of_a_dead_run(name: &str) -> bool {
    name.strip_prefix("meshbench-")
        .and_then(|r| r.split('-').next())
        .and_then(|p| p.parse::<u32>().ok())
        .is_some_and(|owner| !Path::new(&format!("/proc/{owner}")).exists())
}

impl Rig {
    /// Starts every role and waits until each is ready. A `stop` asked at any time before
    /// the rig is whole ends the start within about a second with [`LabError::Stopped`]: the
    /// half-started rig is dropped, which stops and removes all it had made.
    pub fn start(spec: &RigSpec, stop: &Stop) -> Result<Rig, LabError> {
        let rig = Self::start_all(spec, stop)?;
        // A stop that came while the last wait was ending still stops the start: the step
        // that asked for the rig is to measure nothing.
        go_on(stop)?;
        Ok(rig)
    }

    fn start_all(spec: &RigSpec, stop: &Stop) -> Result<Rig, LabError> {
        go_on(stop)?;
        std::fs::create_dir_all(&spec.dir).map_err(|e| LabError::Files {
            path: spec.dir.clone(),
            source: e,
        })?;
        let mut rig = Rig {
            roles: Vec::new(),
            entry: SocketAddr::from(([127, 0, 0, 1], 0)),
            gateway: None,
            entry_tls: None,
            warnings: Vec::new(),
            control_plane: None,
            client_netns: None,
            access_logs: Vec::new(),
            backends: Vec::new(),
            pod_dirs: Vec::new(),
            written_gateway: None,
            recipes: Vec::new(),
            respawned: Respawned::default(),
            namespaces: spec
                .netns
                .then(|| Namespaces::new(&spec.id, &short_prefix(&spec.id))),
            dir: spec.dir.clone(),
        };
        if spec.proxy.program == Program::Istio && spec.topology != Topology::Gateway {
            rig.start_pods(spec, stop)?;
        } else {
            rig.start_chain(spec, stop)?;
        }
        if let Some(control_plane) = rig.control_plane.as_mut() {
            control_plane.prove(&rig.roles, stop)?;
        }
        Ok(rig)
    }

    /// The chain of processes, backend first: every topology but Istio's sidecars' pods.
    fn start_chain(&mut self, spec: &RigSpec, stop: &Stop) -> Result<(), LabError> {
        let cgroups = self.cgroups(spec);
        let chain = spec.topology.chain();
        let mut addresses = self.addresses(chain.len() + 1)?;
        let configured_by = spec.gateway.program.configured_by();
        let off_loopback = spec.topology == Topology::Gateway
            && configured_by.is_some_and(control_plane::reads_backend_from_endpoint_slices);
        if off_loopback {
            if let Some(backend) = addresses.last_mut() {
                *backend = self.backend_pod(spec, chain.len())?;
            }
        }
        let hops = hops(spec, chain, &addresses)?;
        let entry_tls = spec.http3 && spec.topology != Topology::Gateway;
        if entry_tls
            || hops
                .iter()
                .any(|h| h.listen_tls.is_some() || h.upstream_tls.is_some())
        {
            pki::write_lab_set(&spec.dir.join("pki"), &[MESH_NAME.to_string()])?;
        }
        if entry_tls {
            self.entry_tls = Some(EntryTls {
                ca: spec.dir.join("pki").join("ca.pem"),
                server_name: MESH_NAME.into(),
            });
        }
        self.entry = addresses[0].addr;
        if let Some(address) = addresses.pop() {
            let replicas = self.replica_addresses(spec, &address, chain.len())?;
            self.backends = std::iter::once(address.addr)
                .chain(replicas.iter().map(|r| r.addr))
                .collect();
            let launches: Vec<Launch> = std::iter::once((address, chain.is_empty()))
                .chain(replicas.into_iter().map(|a| (a, false)))
                .zip(1..)
                .map(|((address, entry), n)| Launch {
                    name: ChainRole::backend_replica(n),
                    ..backend_launch(spec, address, entry)
                })
                .collect();
            // The last replica first: each role started goes first in the list.
            for launch in launches.into_iter().rev() {
                go_on(stop)?;
                self.start_role(spec, cgroups.as_ref(), launch, stop)?;
            }
        }
        // The hops, server side first.
        for ((role, hop), address) in chain.iter().zip(&hops).zip(addresses).rev() {
            go_on(stop)?;
            let launch = self.hop_launch(spec, role, hop, address, stop)?;
            self.start_role(spec, cgroups.as_ref(), launch, stop)?;
        }
        Ok(())
    }

    /// The cgroup hierarchy, if it can be written; else a warning when limits were asked for.
    fn cgroups(&mut self, spec: &RigSpec) -> Option<Cgroups> {
        match Cgroups::detect() {
            Ok(k) => Some(k),
            Err(why) => {
                let limited = [
                    Class::Proxy,
                    Class::Tunnel,
                    Class::Backend,
                    Class::ControlPlane,
                ]
                .iter()
                .map(|c| spec.limits(*c))
                .any(|l| l.cpus.is_some() || l.memory_mib.is_some());
                if limited {
                    self.warnings.push(format!(
                        "{why}; CPU quotas fall back to pinning on whole CPUs, memory limits are not applied"
                    ));
                }
                None
            }
        }
    }

    /// One address per role, the backend's last: each in its own namespace when isolated,
    /// else a free loopback port.
    fn addresses(&mut self, n: usize) -> Result<Vec<RoleAddress>, LabError> {
        (0..n)
            .map(|i| match &mut self.namespaces {
                Some(ns) => {
                    let m = ns.add(i)?;
                    Ok(RoleAddress {
                        addr: SocketAddr::new(m.addr, 8080),
                        namespace: Some(m),
                    })
                }
                None => Ok(RoleAddress {
                    addr: SocketAddr::new(
                        IpAddr::V4(Ipv4Addr::LOCALHOST),
                        crate::port::free_port()?,
                    ),
                    namespace: None,
                }),
            })
            .collect()
    }

    /// The addresses of the backend's replicas after the first (`first`, the `n`-th role's):
    /// each on `first`'s port, in a namespace of its own where `first` has one, else on a
    /// loopback address of its own (127.0.0.2, ...), so that one port names them all.
    fn replica_addresses(
        &mut self,
        spec: &RigSpec,
        first: &RoleAddress,
        n: usize,
    ) -> Result<Vec<RoleAddress>, LabError> {
        let port = first.addr.port();
        (1..usize::from(spec.backend_replicas.max(1)))
            .map(|i| match (&first.namespace, self.namespaces.as_mut()) {
                (Some(_), Some(namespaces)) => {
                    let m = namespaces.add(n + i)?;
                    Ok(RoleAddress {
                        addr: SocketAddr::new(m.addr, port),
                        namespace: Some(m),
                    })
                }
                _ => Ok(RoleAddress {
                    addr: SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1 + i as u8)), port),
                    namespace: None,
                }),
            })
            .collect()
    }

    /// The control plane's cgroup, with `limits.control_plane` written, where cgroups can be
    /// written (else none: the control plane runs unlimited, as [`Rig::cgroups`] warned).
    fn control_plane_cgroup(&self, spec: &RigSpec) -> Result<Option<Cgroup>, LabError> {
        let Ok(kind) = Cgroups::detect() else {
            return Ok(None);
        };
        let name = format!("{}-control_plane", spec.id);
        Cgroup::create(&kind, &name, &spec.control_plane_limits).map(Some)
    }

    /// The backend's address as a pod's (the `n`-th role's namespace, port 8080), whatever the
    /// rig's isolation: for a control plane that reads the backend's endpoint from Kubernetes,
    /// which refuses an endpoint on loopback
    /// ([`control_plane::reads_backend_from_endpoint_slices`]). The rest of the rig stays where
    /// it is.
    fn backend_pod(&mut self, spec: &RigSpec, n: usize) -> Result<RoleAddress, LabError> {
        let namespaces = self
            .namespaces
            .get_or_insert_with(|| Namespaces::new(&spec.id, &short_prefix(&spec.id)));
        let m = namespaces.add(n)?;
        Ok(RoleAddress {
            addr: SocketAddr::new(m.addr, 8080),
            namespace: Some(m),
        })
    }

    /// What a step with changes changes under load: the gateway the lab wrote and started
    /// ([`Rig::gateway_changer`]), or the mesh of Istio's sidecars, through the client's
    /// sidecar's istiod (a ServiceEntry, [`SidecarChanger`]); `None` for what meshbench does
    /// not change.
    pub fn changer(&mut self) -> Result<Option<Box<dyn Changer>>, LabError> {
        if self.written_gateway.is_some() {
            let gateway = self.gateway_changer()?;
            return Ok(gateway.map(|c| Box::new(c) as Box<dyn Changer>));
        }
        let api = self.control_plane.as_ref().and_then(|c| c.api_kubeconfig());
        let client_sidecar = (self.roles.iter()).find(|r| {
            r.name == ChainRole::ClientProxy && r.program == PlayedBy::Proxy(Program::Istio)
        });
        let (Some(api), Some(admin)) = (api, client_sidecar.and_then(|r| r.admin)) else {
            return Ok(None);
        };
        let port = meshbench_k8s::names::SERVICE_PORT;
        let changer = SidecarChanger::new(&api, admin, port)?;
        Ok(Some(Box::new(changer)))
    }

    /// The gateway the lab wrote and started, handed over to be changed under load (once: a
    /// second call gives `None`); `None` too for a gateway meshbench does not change (a
    /// command, Envoy with its listeners in its bootstrap).
    pub fn gateway_changer(&mut self) -> Result<Option<GatewayChanger>, LabError> {
        let Some(written) = self.written_gateway.take() else {
            return Ok(None);
        };
        let Some(gateway) = self.roles.iter().find(|r| r.name == ChainRole::Gateway) else {
            return Ok(None);
        };
        let api = self.control_plane.as_ref().and_then(|c| c.api_kubeconfig());
        let relaunch = match (written.program, written.haproxy_reload) {
            (Program::Haproxy, HaproxyReload::Plain) => {
                let respawn = self.respawn_of(gateway).ok_or_else(|| {
                    crate::change::tell_failed(
                        crate::change::told_by(Program::Haproxy, HaproxyReload::Plain),
                        "the gateway's command was not kept".into(),
                    )
                })?;
                Some(
                    Box::new(GatewayRelaunch::new(respawn, Arc::clone(&self.respawned)))
                        as Box<dyn Relaunch>,
                )
            }
            _ => None,
        };
        GatewayChanger::new(
            written.program,
            written.written,
            gateway.process.pid(),
            api.as_deref(),
            relaunch,
        )
    }

    /// The gateway's (or first proxy's) admin endpoint, if it has one.
    pub fn gateway_admin(&self) -> Option<SocketAddr> {
        control_plane::gateway_admin(&self.roles)
    }

    /// What the sampler reads of the control plane the rig runs, if any: istiod (Istio's
    /// gateway or sidecars) or Contour. Not on the path, but part of what the mesh costs.
    pub fn control_plane_watch(&self) -> Option<Watch> {
        self.control_plane.as_ref().map(|c| c.watch())
    }

    /// The control plane's line for the step's record, where the rig runs one (a `stop` ends
    /// a timing it makes).
    pub fn control_plane_summary(&self, stop: &Stop) -> Option<String> {
        (self.control_plane.as_ref()).map(|c| c.summary(&self.roles, stop))
    }

    /// What the sampler should read for each role, the control plane last. A namespace two
    /// roles share (a pod: the backend and its sidecar) is read once, for the first of them
    /// from the client side.
    pub fn watches(&self) -> Vec<Watch> {
        let mut read = std::collections::HashSet::new();
        let chain = self.roles.iter().enumerate().map(|(i, r)| Watch {
            role: meshbench_results::Role::Chain(r.name),
            pgid: r.process.pid(),
            cgroup: r.cgroup.as_ref().map(Cgroup::files),
            port: Some(r.listen.port()),
            // Roles are listed client side first: the next one is this one's upstream.
            upstream_port: self.roles.get(i + 1).map(|n| n.listen.port()),
            veth: r
                .namespace
                .as_ref()
                .filter(|m| read.insert(m.host_veth.clone()))
                .map(|m| m.host_veth.clone()),
        });
        chain.chain(self.control_plane_watch()).collect()
    }

    /// The first role found dead, with the tail of its output.
    pub fn dead_role(&mut self) -> Option<(ChainRole, String)> {
        let mut rolled = (self.respawned.lock()).unwrap_or_else(PoisonError::into_inner);
        let rolled = &mut *rolled;
        // A replica a roll killed is the process it started again by now (the last started).
        let mut now: Vec<(ChainRole, &mut RoleProcess)> = Vec::new();
        for (name, p) in rolled.processes.iter_mut().rev() {
            if !now.iter().any(|(n, _)| n == name) {
                now.push((*name, p));
            }
        }
        for r in self.roles.iter_mut() {
            if !rolled.killed.contains(&r.name) {
                now.push((r.name, &mut r.process));
            }
        }
        now.into_iter().find_map(|(name, p)| {
            let status = p.exited()?;
            Some((name, format!("{status}: {}", p.log_tail(5))))
        })
    }

    /// What rolls the backend's replicas under load (`kind: backend`): each killed and started
    /// again at its address; none when the rig has no backend of its own.
    pub fn backend_roll(&self) -> Option<ReplicaRoll> {
        let replicas: Vec<Respawn> = (self.roles.iter().rev())
            .filter(|r| r.class == Class::Backend)
            .filter_map(|r| self.respawn_of(r))
            .collect();
        (!replicas.is_empty()).then(|| ReplicaRoll::new(replicas, Arc::clone(&self.respawned)))
    }

    /// How role `r` is started again the way the rig started it, if its command was kept.
    fn respawn_of(&self, r: &RunningRole) -> Option<Respawn> {
        let recipe = self.recipes.iter().find(|(n, _)| *n == r.name)?;
        Some(Respawn {
            name: r.name,
            command: copy_of(&recipe.1),
            log: self.dir.join(format!("{}.log", r.name)),
            cgroup: r.cgroup.as_ref().map(|c| c.files()),
            netns: r.namespace.as_ref().map(|m| m.netns.clone()),
            listen: r.listen,
            pgid: r.process.pid(),
        })
    }
}

/// A short tag for namespace and interface names (15 bytes at most with suffixes): a hash of
/// the rig's id, so that rigs of concurrent runs do not collide.
fn short_prefix(id: &str) -> String {
    // FNV-1a, 24 bits.
    let h = id.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ b as u32).wrapping_mul(0x0100_0193)
    });
    format!("mb{:06x}", h & 0xff_ffff)
}

impl Drop for Rig {
    fn drop(&mut self) {
        // Every process is asked to end at once, so that the waits below (each drop waits
        // for its own, at most 2 s) overlap. Then the processes (and with them their
        // cgroups), the control planes, the namespaces (and with them the capture), the files.
        for r in &self.roles {
            r.process.terminate();
        }
        // The replicas a roll started again, before the cgroups they run in.
        (self.respawned.lock())
            .unwrap_or_else(PoisonError::into_inner)
            .processes
            .clear();
        if let Some(control_plane) = &self.control_plane {
            control_plane.terminate();
        }
        while let Some(r) = self.roles.pop() {
            drop(r);
        }
        self.control_plane.take();
        self.namespaces.take();
        self.pod_dirs.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_follow_the_allotment_unless_set() {
        let quota = |c| Limits {
            cpus: Some(c),
            ..Limits::default()
        };
        assert_eq!(workers_for(3, &quota(0.5)), 3);
        assert_eq!(workers_for(0, &quota(0.25)), 1);
        assert_eq!(workers_for(0, &quota(2.5)), 3);
        let pinned = Limits {
            cpuset: Some(vec![0, 1]),
            ..Limits::default()
        };
        assert_eq!(workers_for(0, &pinned), 2);
        assert_eq!(workers_for(0, &Limits::default()), 2);
    }

    /// A baseline rig whose backend is `exe` (it never listens), on loopback (namespaces use
    /// fixed addresses, which a rig of another test may hold at the same time).
    fn silent_backend_rig(exe: PathBuf, id: &str, dir: PathBuf) -> RigSpec {
        RigSpec {
            topology: Topology::Baseline,
            proxy: ProgramSpec::from(Program::Envoy),
            proxy_workers: 1,
            proxy_mtls: false,
            proxy_peer_authentication: PeerAuthentication::default(),
            proxy_istio_telemetry: false,
            attribution: false,
            tunnel: ProgramSpec::from(Program::Envoy),
            tunnel_workers: 1,
            tunnel_mtls: false,
            gateway: GatewaySpec {
                program: Program::Envoy,
                domains: 1,
                paths: 1,
                workers: 1,
                changeable: false,
                haproxy_reload: HaproxyReload::default(),
            },
            backend_exe: exe,
            backend_replicas: 1,
            backend_args: Vec::new(),
            proxy_limits: Limits::default(),
            tunnel_limits: Limits::default(),
            backend_limits: Limits::default(),
            control_plane_limits: Limits::default(),
            http2: false,
            grpc: false,
            http3: false,
            netns: false,
            id: id.to_string(),
            dir,
        }
    }

    #[test]
    fn a_stop_while_the_rig_starts_ends_it_and_leaves_nothing_it_made() {
        let scratch = tempfile::tempdir().unwrap();
        let pid_file = scratch.path().join("backend.pid");
        let exe = scratch.path().join("silent-backend");
        std::fs::write(
            &exe,
            format!(
                "#!/bin/sh\necho $$ > {}\nexec sleep 30\n",
                pid_file.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&exe, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let id = format!("{}-stoptest-0", std::process::id());
        let dir = scratch.path().join("rig");
        let spec = silent_backend_rig(exe, &id, dir.clone());
        let stop = Stop::new();
        let asker = stop.clone();
        let pid = pid_file.clone();
        // Asked once the backend runs: the rig is waiting for it to listen.
        let t = std::thread::spawn(move || {
            let began = std::time::Instant::now();
            while !pid.exists() && began.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(10));
            }
            std::thread::sleep(Duration::from_millis(100));
            asker.request();
            std::time::Instant::now()
        });
        let started = Rig::start(&spec, &stop);
        let asked = t.join().unwrap();
        assert!(
            matches!(started, Err(LabError::Stopped)),
            "{:?}",
            started.err()
        );
        assert!(
            asked.elapsed() < Duration::from_secs(3),
            "{:?}",
            asked.elapsed()
        );
        let backend = std::fs::read_to_string(&pid_file).unwrap();
        let backend = format!("/proc/{}", backend.trim());
        assert!(!Path::new(&backend).exists(), "{backend} still runs");
        assert!(!dir.exists(), "the rig's files are removed");
        let named = |d: &str| {
            std::fs::read_dir(d)
                .into_iter()
                .flatten()
                .flatten()
                .any(|e| e.file_name().to_string_lossy().contains(&id))
        };
        assert!(!named("/var/run/netns"), "a namespace of the rig is left");
        assert!(!named("/sys/fs/cgroup"), "a cgroup of the rig is left");
    }

    #[test]
    fn namespace_prefixes_are_short_and_differ_per_rig() {
        assert_eq!(short_prefix("1234-5-6").len(), 8);
        assert_ne!(short_prefix("1234-5-6"), short_prefix("1235-5-6"));
    }
}
