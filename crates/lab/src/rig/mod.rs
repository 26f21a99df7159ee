//! A rig: the system under test for one step, every role a real process. The topology gives
//! the chain of roles ([`crate::topology`]); the backend starts first, then the roles from the
//! server side outwards, each played by its program ([`crate::program`]) in its cgroup (or
//! pinned with the affinity mask where cgroups cannot be written), optionally in its own network
//! namespace. The client (meshbench's engine, in this process) talks to [`Rig::entry`].
//! Dropping the rig stops every process, then removes the cgroups, the namespaces and the files.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::cgroup::{Cgroup, Cgroups, Limits};
use crate::gateway::{self, CertLayout, GatewayPlan};
use crate::istio::sidecars::{self, LabPod};
use crate::istio::{ready, AgentPorts, AgentRole, ControlPlane, Workload};
use crate::netns::{Namespaces, RoleNamespace};
use crate::process::{Placement, RoleProcess};
use crate::program::{Hop, LabProgram, ListenTls, Program, ProgramSpec, UpstreamTls};
use crate::sampler::Watch;
use crate::{pki, LabError};
use meshbench_results::{
    topology::{Duty, RolePlan},
    ChainRole, Class, PeerAuthentication, PlayedBy, Topology,
};

/// The gateway topology's settings.
#[derive(Debug, Clone)]
pub struct GatewaySpec {
    pub program: Program,
    pub domains: usize,
    pub paths: usize,
    /// 0: follow the CPU allotment.
    pub workers: u32,
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
    /// Per-hop attribution: each L7 Envoy logs the requests the engine tagged.
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
    pub proxy_limits: Limits,
    pub tunnel_limits: Limits,
    pub backend_limits: Limits,
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
pub struct Role {
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

impl Role {
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
    pub roles: Vec<Role>,
    /// Where the client sends its requests.
    pub entry: SocketAddr,
    pub gateway: Option<GatewayEntry>,
    /// The entry's TLS towards the client, when it has one outside the gateway topology.
    pub entry_tls: Option<EntryTls>,
    /// What could not be done as asked, and what was done instead.
    pub warnings: Vec<String>,
    /// The Istio gateway's control plane (`gateway.type: istio`), stopped after the roles.
    pub istio: Option<IstioGateway>,
    /// Istio's sidecars' control plane (`proxy.type: istio`), stopped after the roles.
    pub mesh: Option<IstioMesh>,
    /// The network namespace the load leaves from (the client pod of Istio's sidecars);
    /// None: this machine's own.
    pub client_netns: Option<String>,
    /// Per-hop attribution: the roles that log the tagged requests, and where.
    pub access_logs: Vec<(ChainRole, PathBuf)>,
    namespaces: Option<Namespaces>,
    /// Istio's sidecars' directories, outside `dir` ([`sidecars::pod_dir`]).
    pod_dirs: Vec<PathBuf>,
    dir: PathBuf,
}

/// The control plane of an Istio gateway, and what its start cost.
pub struct IstioGateway {
    pub control_plane: ControlPlane,
    /// What its Envoy must hold before the role counts as started.
    pub expected: ready::Expected,
    /// From applying the generated objects until Envoy had accepted all of them.
    pub applied_in: Duration,
    /// From the agent's start until its Envoy had accepted everything (istiod's first push).
    pub pushed_in: Option<Duration>,
    /// The VirtualServices' file, for a change to time.
    virtual_services: PathBuf,
}

impl IstioGateway {
    /// One line for the record: how long each part of the configuration took to reach Envoy
    /// (admin at `admin`), how large Envoy's config dump is, and istiod's push time for one
    /// route added (measured here, before the load).
    pub fn summary(&self, admin: Option<SocketAddr>) -> String {
        let mut line = format!(
            "istio: istiod ready in {:.1} s; {} routes applied in {:.2} s; Envoy held all of them {} after its agent started",
            self.control_plane.istiod_ready_in.as_secs_f64(),
            self.expected.routes,
            self.applied_in.as_secs_f64(),
            self.pushed_in
                .map_or("?".to_string(), |d| format!("{:.1} s", d.as_secs_f64())),
        );
        let Some(admin) = admin else {
            return line;
        };
        match crate::program::envoy::admin::config_dump_bytes(admin) {
            Ok(bytes) => line.push_str(&format!("; config dump {:.1} MB", bytes as f64 / 1e6)),
            Err(e) => line.push_str(&format!("; config dump: {e}")),
        }
        match self.control_plane.time_route_change(
            admin,
            &self.virtual_services,
            Duration::from_secs(60),
        ) {
            Ok(d) => line.push_str(&format!(
                "; one route added reached Envoy in {:.0} ms",
                d.as_secs_f64() * 1e3
            )),
            Err(e) => line.push_str(&format!("; a route change: {e}")),
        }
        line
    }
}

/// The control plane of Istio's sidecars, and what their start cost.
pub struct IstioMesh {
    pub control_plane: ControlPlane,
    /// Per sidecar: from its agent's start until its Envoy had accepted everything.
    pub pushed_in: Vec<(ChainRole, Duration)>,
    /// The probe request's status, through every sidecar.
    pub probe_status: u16,
}

impl IstioMesh {
    /// One line for the record: istiod's start, each sidecar's first configuration, the
    /// probe, and each sidecar's config dump size (its admin in `roles`).
    pub fn summary(&self, roles: &[Role]) -> String {
        let mut line = format!(
            "istio sidecars: istiod ready in {:.1} s",
            self.control_plane.istiod_ready_in.as_secs_f64()
        );
        for (role, took) in &self.pushed_in {
            line.push_str(&format!(
                "; {role} configured {:.1} s after its agent started",
                took.as_secs_f64()
            ));
        }
        line.push_str(&format!(
            "; a probe through them answered {}",
            self.probe_status
        ));
        for r in roles {
            let bytes = r.read_admin(crate::program::envoy::admin::config_dump_bytes);
            if let Some(Ok(Ok(bytes))) = bytes {
                line.push_str(&format!(
                    "; {} config dump {:.0} KB",
                    r.name,
                    bytes as f64 / 1e3
                ));
            }
        }
        line
    }
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
}

/// When a started role counts as ready.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Ready {
    /// Its listener accepts a connection.
    Accepts,
    /// Its Envoy holds all that istiod should send ([`Rig::istio`]'s `expected`).
    ConfiguredByIstio,
    /// Its Envoy, a sidecar, holds all of this.
    SidecarConfigured(ready::SidecarExpected),
}

impl RigSpec {
    /// The limits of a class of roles.
    pub fn limits(&self, class: Class) -> &Limits {
        match class {
            Class::Proxy => &self.proxy_limits,
            Class::Tunnel => &self.tunnel_limits,
            Class::Backend => &self.backend_limits,
        }
    }

    /// The program of a class of hops.
    fn program(&self, class: Class) -> &ProgramSpec {
        match class {
            Class::Tunnel => &self.tunnel,
            // The backend is no hop: it has no program of its own.
            Class::Proxy | Class::Backend => &self.proxy,
        }
    }

    /// The worker count of a role of the chain.
    fn workers(&self, role: &RolePlan) -> u32 {
        let set = match (self.topology, role.class) {
            (Topology::Gateway, _) => self.gateway.workers,
            (_, Class::Tunnel) => self.tunnel_workers,
            (_, Class::Proxy | Class::Backend) => self.proxy_workers,
        };
        workers_for(set, self.limits(role.class))
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
/// processes that no longer exist (their stragglers are killed first), then such network
/// namespaces.
pub fn remove_stale() {
    for controller in ["", "cpu", "cpuacct", "cpuset", "memory"] {
        let root = Path::new("/sys/fs/cgroup").join(controller);
        let Ok(dir) = std::fs::read_dir(&root) else {
            continue;
        };
        for e in dir.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            let Some(owner) = name
                .strip_prefix("meshbench-")
                .and_then(|r| r.split('-').next())
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            if Path::new(&format!("/proc/{owner}")).exists() {
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
}

/// The command line that runs the built-in backend (`meshbench backend`) on `listen`.
pub fn backend_command(exe: &Path, listen: SocketAddr, args: &[String]) -> Command {
    let mut cmd = Command::new(exe);
    cmd.args(["backend", "--listen", &listen.to_string()])
        .args(args);
    cmd
}

/// What each role of the chain does: its addresses, mutual TLS on the links between two hops
/// of the mesh (never towards the client or the backend), HTTP/2 from the client. Envoy
/// tunnels speak HBONE to their neighbours (the waypoint between them too), and every Envoy
/// role gets an admin endpoint on its listener's address.
fn hops(
    spec: &RigSpec,
    chain: &[RolePlan],
    addresses: &[RoleAddress],
) -> Result<Vec<Hop>, LabError> {
    let pki = spec.dir.join("pki");
    let listen_tls = |client_ca: bool| ListenTls {
        cert: pki.join("server.pem"),
        key: pki.join("server-key.pem"),
        client_ca: client_ca.then(|| pki.join("ca.pem")),
    };
    let upstream_tls = || UpstreamTls {
        ca: pki.join("ca.pem"),
        server_name: MESH_NAME.into(),
        client: Some((pki.join("client.pem"), pki.join("client-key.pem"))),
    };
    let hbone = spec.tunnel.program == Program::Envoy;
    let destination = addresses[chain.len()].addr;
    chain
        .iter()
        .enumerate()
        .map(|(i, role)| {
            let mtls = spec.mtls(role.class);
            // The client's HTTP/3 ends at the entry hop, over TLS without a client certificate.
            let http3 = spec.http3 && i == 0;
            let listen_tls = if http3 {
                Some(listen_tls(false))
            } else {
                (i > 0 && mtls).then(|| listen_tls(true))
            };
            let program = match spec.topology {
                Topology::Gateway => spec.gateway.program,
                _ => spec.program(role.class).program,
            };
            let admin = match program {
                Program::Envoy | Program::Istio => Some(SocketAddr::new(
                    addresses[i].addr.ip(),
                    admin_port(addresses[i].addr)?,
                )),
                Program::Nginx | Program::Haproxy | Program::Caddy | Program::Command => None,
            };
            Ok(Hop {
                name: role.role.name().to_string(),
                duty: role.duty,
                layer: role.layer,
                listen: addresses[i].addr,
                listen_tls,
                upstream: addresses[i + 1].addr,
                upstream_tls: (i + 1 < chain.len() && mtls).then(upstream_tls),
                http2: spec.grpc || (spec.http2 && i == 0),
                grpc: spec.grpc,
                http3,
                workers: spec.workers(role),
                dir: spec.dir.clone(),
                destination,
                hbone_in: hbone && matches!(role.duty, Duty::ServerTunnel | Duty::Waypoint),
                hbone_out: hbone && matches!(role.duty, Duty::ClientTunnel | Duty::Waypoint),
                admin,
                istio_telemetry: spec.proxy_istio_telemetry && role.class == Class::Proxy,
                access_log: (spec.attribution
                    && program == Program::Envoy
                    && role.layer == meshbench_results::Layer::L7)
                    .then(|| spec.dir.join(format!("{}.access.log", role.role.name()))),
            })
        })
        .collect()
}

/// A port for a role's admin endpoint: Envoy's own (15000) inside a role's namespace, a free
/// loopback port otherwise.
fn admin_port(listen: SocketAddr) -> Result<u16, LabError> {
    if listen.ip().is_loopback() {
        crate::port::free_port()
    } else {
        Ok(15000)
    }
}

/// The backend, last in the chain.
fn backend_launch(spec: &RigSpec, address: RoleAddress, entry: bool) -> Launch {
    let mut args = spec.backend_args.clone();
    if spec.http2 {
        args.push("--http2".into());
    }
    if spec.http3 && entry {
        // No hop in front: the backend itself answers the client's HTTP/3.
        let pki = spec.dir.join("pki");
        args.extend(["--tls".into(), "--http3".into(), "--cert".into()]);
        args.push(pki.join("server.pem").display().to_string());
        args.push("--key".into());
        args.push(pki.join("server-key.pem").display().to_string());
    }
    Launch {
        name: ChainRole::Backend,
        class: Class::Backend,
        program: PlayedBy::Backend,
        command: backend_command(&spec.backend_exe, address.addr, &args),
        address,
        workers: 0,
        admin: None,
        config: None,
        ready: Ready::Accepts,
        user: None,
        admin_netns: None,
    }
}

impl Rig {
    /// Starts every role and waits until each accepts connections.
    pub fn start(spec: &RigSpec) -> Result<Rig, LabError> {
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
            istio: None,
            mesh: None,
            client_netns: None,
            access_logs: Vec::new(),
            pod_dirs: Vec::new(),
            namespaces: spec
                .netns
                .then(|| Namespaces::new(&spec.id, &short_prefix(&spec.id))),
            dir: spec.dir.clone(),
        };
        if spec.proxy.program == Program::Istio && spec.topology != Topology::Gateway {
            rig.start_pods(spec)?;
            return Ok(rig);
        }
        let cgroups = rig.cgroups(spec);
        let chain = spec.topology.chain();
        let mut addresses = rig.addresses(chain.len() + 1)?;
        let hops = hops(spec, chain, &addresses)?;
        rig.access_logs = chain
            .iter()
            .zip(&hops)
            .filter_map(|(role, hop)| Some((role.role, hop.access_log.clone()?)))
            .collect();
        let entry_tls = spec.http3 && spec.topology != Topology::Gateway;
        if entry_tls
            || hops
                .iter()
                .any(|h| h.listen_tls.is_some() || h.upstream_tls.is_some())
        {
            pki::write_lab_set(&spec.dir.join("pki"), &[MESH_NAME.to_string()])?;
        }
        if entry_tls {
            rig.entry_tls = Some(EntryTls {
                ca: spec.dir.join("pki").join("ca.pem"),
                server_name: MESH_NAME.into(),
            });
        }
        rig.entry = addresses[0].addr;
        if let Some(address) = addresses.pop() {
            rig.start_role(
                spec,
                cgroups.as_ref(),
                backend_launch(spec, address, chain.is_empty()),
            )?;
        }
        // The hops, server side first.
        for ((role, hop), address) in chain.iter().zip(&hops).zip(addresses).rev() {
            let launch = rig.hop_launch(spec, role, hop, address)?;
            rig.start_role(spec, cgroups.as_ref(), launch)?;
        }
        Ok(rig)
    }

    /// The cgroup hierarchy, if it can be written; else a warning when limits were asked for.
    fn cgroups(&mut self, spec: &RigSpec) -> Option<Cgroups> {
        match Cgroups::detect() {
            Ok(k) => Some(k),
            Err(why) => {
                let limited = [Class::Proxy, Class::Tunnel, Class::Backend]
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

    /// A role of the chain: the gateway's configuration for the gateway, else the hop's.
    fn hop_launch(
        &mut self,
        spec: &RigSpec,
        role: &RolePlan,
        hop: &Hop,
        address: RoleAddress,
    ) -> Result<Launch, LabError> {
        let (command, program, config) = match spec.topology {
            Topology::Gateway if spec.gateway.program == Program::Istio => (
                self.prepare_istio_gateway(spec, hop)?,
                Program::Istio,
                spec.dir.join("gateway"),
            ),
            Topology::Gateway => (
                self.prepare_gateway(spec, hop)?,
                spec.gateway.program,
                spec.gateway
                    .program
                    .gateway_config(&spec.dir.join("gateway")),
            ),
            _ => {
                let p = spec.program(role.class);
                (p.prepare_hop(hop)?, p.program, p.hop_config(hop))
            }
        };
        Ok(Launch {
            name: role.role,
            class: role.class,
            program: PlayedBy::Proxy(program),
            command,
            address,
            workers: hop.workers,
            admin: hop.admin,
            config: Some(config),
            ready: if self.istio.is_some() && role.class == Class::Proxy {
                Ready::ConfiguredByIstio
            } else {
                Ready::Accepts
            },
            user: None,
            admin_netns: None,
        })
    }

    /// Istio's sidecars (`proxy.type: istio`), in pods: the client pod (where the load
    /// leaves from) and the backend's pod, each a network namespace; a sidecar in each pod
    /// the topology puts one in, configured by istiod, its traffic captured by Istio's
    /// iptables. The load goes to the Service's address, as an application's would. The
    /// baseline has the same pods, no sidecar and no control plane.
    fn start_pods(&mut self, spec: &RigSpec) -> Result<(), LabError> {
        let cgroups = self.cgroups(spec);
        let Some(namespaces) = self.namespaces.as_mut() else {
            return Err(LabError::Io(
                "Istio's sidecars run in pods: use isolation: netns".into(),
            ));
        };
        let (client_ns, server_ns) = (namespaces.add(0)?, namespaces.add(1)?);
        let chain = spec.topology.chain();
        let sidecar = |duty| chain.iter().find(|r| r.duty == duty).copied();
        let (client_sidecar, server_sidecar) =
            (sidecar(Duty::ClientSidecar), sidecar(Duty::ServerSidecar));
        let client = LabPod {
            app: "client",
            ip: client_ns.addr,
            sidecar: client_sidecar.is_some(),
        };
        let server = LabPod {
            app: sidecars::SERVICE,
            ip: server_ns.addr,
            sidecar: server_sidecar.is_some(),
        };
        let backend = SocketAddr::new(server.ip, sidecars::SERVICE_PORT);
        self.entry = SocketAddr::new(IpAddr::V4(sidecars::SERVICE_IP), sidecars::SERVICE_PORT);
        self.client_netns = Some(client_ns.netns.clone());
        let address = RoleAddress {
            addr: backend,
            namespace: Some(server_ns.clone()),
        };
        self.start_role(spec, cgroups.as_ref(), backend_launch(spec, address, false))?;
        if !client.sidecar {
            sidecars::service_rule(
                &client_ns.netns,
                backend,
                &spec.dir.join("service-rule.log"),
            )?;
        }
        if !client.sidecar && !server.sidecar {
            return Ok(());
        }
        if let Some(what) = sidecars::iptables_missing() {
            return Err(LabError::Missing {
                program: "iptables".into(),
                hint: format!("Istio's capture needs {what}"),
            });
        }
        // istiod serves the pods' agents on the client pod's way to this machine.
        let control_plane = ControlPlane::start(&spec.dir.join("istio"), client_ns.host_addr)?;
        let mtls = if spec.proxy_mtls {
            spec.proxy_peer_authentication
        } else {
            PeerAuthentication::Disable
        };
        sidecars::register(&control_plane.api, &[&client, &server], &server, mtls)?;
        self.mesh = Some(IstioMesh {
            control_plane,
            pushed_in: Vec::new(),
            probe_status: 0,
        });
        let port = sidecars::SERVICE_PORT;
        if let Some(role) = server_sidecar {
            let expected = ready::SidecarExpected::server(port);
            let launch = self.sidecar_launch(spec, &role, &server, &server_ns, expected)?;
            self.start_role(spec, cgroups.as_ref(), launch)?;
        }
        if let Some(role) = client_sidecar {
            let host = format!(
                "{}.{}.svc.cluster.local",
                sidecars::SERVICE,
                sidecars::APP_NAMESPACE
            );
            let expected = ready::SidecarExpected::client(port, &host, backend);
            let launch = self.sidecar_launch(spec, &role, &client, &client_ns, expected)?;
            self.start_role(spec, cgroups.as_ref(), launch)?;
        }
        self.probe_sidecars(&client_ns.netns)
    }

    /// The sidecar of `pod` (in namespace `ns`), playing `role`: its agent's command, its
    /// directory handed to Istio's proxy user, and its pod's capture written.
    fn sidecar_launch(
        &mut self,
        spec: &RigSpec,
        role: &RolePlan,
        pod: &LabPod,
        ns: &crate::netns::RoleNamespace,
        expected: ready::SidecarExpected,
    ) -> Result<Launch, LabError> {
        let Some(mesh) = self.mesh.as_ref() else {
            return Err(LabError::Io(
                "a sidecar started without its control plane".into(),
            ));
        };
        let dir = sidecars::pod_dir(&spec.id, pod.app)?;
        self.pod_dirs.push(dir.clone());
        let workers = spec.workers(role);
        let name = pod.name();
        let workload = Workload {
            namespace: sidecars::APP_NAMESPACE,
            pod: &name,
            service_account: pod.app,
            ip: pod.ip,
            labels: pod.labels_json(),
        };
        let command = mesh.control_plane.agent_command(
            AgentRole::Sidecar,
            &workload,
            &dir,
            AgentPorts::ISTIO,
            workers,
        )?;
        sidecars::hand_to_proxy_user(&dir)?;
        // As istio-init does, before the pod's containers start.
        sidecars::capture(
            &ns.netns,
            &spec.dir.join(format!("{}-capture.log", pod.app)),
        )?;
        let listen = match role.duty {
            Duty::ClientSidecar => sidecars::OUTBOUND_CAPTURE,
            _ => sidecars::INBOUND_CAPTURE,
        };
        Ok(Launch {
            name: role.role,
            class: role.class,
            program: PlayedBy::Proxy(Program::Istio),
            command,
            address: RoleAddress {
                addr: SocketAddr::new(pod.ip, listen),
                namespace: Some(ns.clone()),
            },
            workers,
            admin: Some(SocketAddr::from(([127, 0, 0, 1], AgentPorts::ISTIO.admin))),
            config: None,
            ready: Ready::SidecarConfigured(expected),
            user: Some(sidecars::PROXY_UID),
            admin_netns: Some(ns.netns.clone()),
        })
    }

    /// One request from the client pod to the Service, until it answers 200 (at most 30 s);
    /// then each sidecar's own counters must show it went through.
    fn probe_sidecars(&mut self, client_netns: &str) -> Result<(), LabError> {
        let began = std::time::Instant::now();
        let status = loop {
            let answer = sidecars::probe(client_netns, Duration::from_secs(5));
            match answer {
                Ok(200) => break 200,
                _ if began.elapsed() < Duration::from_secs(30) => {
                    std::thread::sleep(Duration::from_millis(250))
                }
                Ok(status) => {
                    return Err(LabError::Io(format!(
                        "the probe request through Istio's sidecars answered {status}"
                    )))
                }
                Err(e) => return Err(e),
            }
        };
        for r in self.roles.iter().filter(|r| r.class == Class::Proxy) {
            let Some(read) = r.read_admin(crate::program::envoy::admin::read) else {
                continue;
            };
            let read = read?;
            let ok = read
                .as_ref()
                .ok()
                .and_then(|c| c.requests.as_ref())
                .map_or(0, |q| q.status_2xx);
            if ok == 0 {
                return Err(LabError::Io(format!(
                    "the probe request answered 200, but {}'s Envoy did not count it ({})",
                    r.name,
                    read.err()
                        .map_or("no 2xx in its stats".into(), |e| e.to_string())
                )));
            }
        }
        if let Some(mesh) = self.mesh.as_mut() {
            mesh.probe_status = status;
        }
        Ok(())
    }

    /// Writes the gateway plan (TLS, a certificate per domain) for the gateway role at the
    /// hop's addresses, and notes how the client reaches it.
    fn prepare_gateway(&mut self, spec: &RigSpec, hop: &Hop) -> Result<Command, LabError> {
        let out = spec.dir.join("gateway");
        self.write_gateway_plan(spec, hop, &out)?;
        let mut command = spec.gateway.program.gateway_command(&out, hop.workers)?;
        if spec.gateway.program == Program::Envoy && hop.access_log.is_some() {
            command.args(crate::program::envoy::access_log::FLUSH_ARGS);
        }
        Ok(command)
    }

    /// The Istio gateway: its control plane started, the plan's objects (Secrets, the
    /// backend's ServiceEntry, Gateways bound to the hop's address, VirtualServices) applied
    /// to it, and the agent's command.
    fn prepare_istio_gateway(&mut self, spec: &RigSpec, hop: &Hop) -> Result<Command, LabError> {
        let out = spec.dir.join("gateway");
        let (plan, generated) = self.write_gateway_plan(spec, hop, &out)?;
        // The objects, in the order they are applied (what one names exists before it).
        let objects: Vec<PathBuf> = generated
            .files
            .into_iter()
            .filter(|f| f.extension().is_some_and(|e| e == "yaml"))
            .collect();
        let control_plane =
            ControlPlane::start(&spec.dir.join("istio"), IpAddr::V4(Ipv4Addr::LOCALHOST))?;
        let began = std::time::Instant::now();
        control_plane.api.apply_files(&objects)?;
        let applied_in = began.elapsed();
        let admin = hop
            .admin
            .ok_or_else(|| LabError::Io("the Istio gateway has no admin port".into()))?;
        let command =
            control_plane.gateway_command(&spec.dir.join("gateway-agent"), admin, hop.workers)?;
        let tls = plan.tls;
        self.istio = Some(IstioGateway {
            control_plane,
            expected: ready::Expected {
                listener: format!("{}_{}", hop.listen.ip(), hop.listen.port()),
                filter_chains: if tls { plan.domains } else { 1 },
                routes: plan.domains * plan.routes_per_domain(),
                certificates: if tls { plan.domains } else { 0 },
                endpoint: format!(
                    "{}::{}::",
                    crate::istio::objects::BACKEND_HOST,
                    hop.upstream
                ),
            },
            applied_in,
            pushed_in: None,
            virtual_services: out.join(crate::istio::objects::VIRTUAL_SERVICES_FILE),
        });
        Ok(command)
    }

    /// The gateway plan for the hop, written into `out`, and how the client reaches it.
    fn write_gateway_plan(
        &mut self,
        spec: &RigSpec,
        hop: &Hop,
        out: &Path,
    ) -> Result<(GatewayPlan, gateway::Generated), LabError> {
        let plan = GatewayPlan {
            domains: spec.gateway.domains,
            paths: spec.gateway.paths,
            tls: true,
            http2: spec.http2,
            http3: spec.http3,
            grpc: spec.grpc,
            certs: CertLayout::PerDomain,
            backend: hop.upstream,
            listen: hop.listen,
            workers: hop.workers as usize,
            admin: hop.admin,
            out: out.to_path_buf(),
            access_log: hop.access_log.clone(),
        };
        let generated = gateway::generate(&plan, &spec.gateway.program)?;
        self.gateway = Some(GatewayEntry {
            targets: out.join("targets.txt"),
            ca: out.join("ca.pem"),
        });
        Ok((plan, generated))
    }

    /// Starts one role in its cgroup (or pinned to CPUs) and namespace, waits until it accepts,
    /// and puts it first in the list (roles start from the server side).
    fn start_role(
        &mut self,
        spec: &RigSpec,
        cgroups: Option<&Cgroups>,
        launch: Launch,
    ) -> Result<(), LabError> {
        let limits = spec.limits(launch.class);
        let limited =
            limits.cpus.is_some() || limits.cpuset.is_some() || limits.memory_mib.is_some();
        let cgroup = match cgroups {
            // Always a group when possible: its usage is the cleanest CPU reading.
            Some(kind) => Some(Cgroup::create(
                kind,
                &format!("{}-{}", spec.id, launch.name),
                limits,
            )?),
            None => None,
        };
        let affinity = if cgroup.is_none() && limited {
            match (&limits.cpuset, limits.cpus) {
                (Some(set), _) => Some(set.clone()),
                (None, Some(c)) => Some((0..c.ceil().max(1.0) as usize).collect()),
                _ => None,
            }
        } else {
            None
        };
        let namespace = launch.address.namespace;
        let place = Placement {
            cgroup: cgroup.as_ref(),
            affinity,
            netns: namespace.as_ref().map(|m| m.netns.clone()),
            user: launch.user,
        };
        let log = spec.dir.join(format!("{}.log", launch.name));
        let listen = launch.address.addr;
        let process = match launch.ready {
            Ready::Accepts => {
                RoleProcess::start(launch.name.name(), launch.command, &log, &place, listen)
            }
            Ready::ConfiguredByIstio => self.start_istio_agent(
                launch.name.name(),
                launch.command,
                &log,
                &place,
                launch.admin,
            ),
            Ready::SidecarConfigured(expected) => self.start_sidecar(
                launch.name,
                launch.command,
                &log,
                &place,
                launch.admin,
                &expected,
            ),
        }
        .map_err(|e| match e {
            LabError::BadConfig { server, log, .. } => LabError::BadConfig {
                server: format!("{server} ({})", launch.program),
                config: launch.config.clone(),
                log,
            },
            other => other,
        })?;
        self.roles.insert(
            0,
            Role {
                name: launch.name,
                class: launch.class,
                program: launch.program,
                listen,
                workers: launch.workers,
                admin: launch.admin,
                admin_netns: launch.admin_netns,
                process,
                cgroup,
                namespace,
            },
        );
        Ok(())
    }

    /// Starts an Istio sidecar's agent and waits until its Envoy holds `expected` (a minute).
    fn start_sidecar(
        &mut self,
        name: ChainRole,
        command: Command,
        log: &Path,
        place: &Placement,
        admin: Option<SocketAddr>,
        expected: &ready::SidecarExpected,
    ) -> Result<RoleProcess, LabError> {
        let (Some(mesh), Some(admin)) = (self.mesh.as_mut(), admin) else {
            return Err(LabError::Io(
                "an Istio sidecar started without its control plane".into(),
            ));
        };
        let mut agent = RoleProcess::spawn(name.name(), command, log, place)?;
        let waited = ready::wait_acked(
            &mut agent,
            admin,
            place.netns.as_deref(),
            ready::Awaited::Sidecar(expected),
            Duration::from_secs(60),
        );
        if let Some(why) = mesh.control_plane.istiod_exited() {
            return Err(LabError::Io(why));
        }
        mesh.pushed_in.push((name, waited?));
        Ok(agent)
    }

    /// Starts the Istio gateway's agent and waits until its Envoy holds all the control plane
    /// should have sent (a minute, and a second more per 1,000 routes).
    fn start_istio_agent(
        &mut self,
        name: &str,
        command: Command,
        log: &Path,
        place: &Placement,
        admin: Option<SocketAddr>,
    ) -> Result<RoleProcess, LabError> {
        let (Some(istio), Some(admin)) = (self.istio.as_mut(), admin) else {
            return Err(LabError::Io(
                "the Istio gateway started without its control plane".into(),
            ));
        };
        let mut agent = RoleProcess::spawn(name, command, log, place)?;
        let limit = Duration::from_secs(60 + istio.expected.routes as u64 / 1000);
        let waited = ready::wait_acked(
            &mut agent,
            admin,
            None,
            ready::Awaited::Gateway(&istio.expected),
            limit,
        );
        if let Some(why) = istio.control_plane.istiod_exited() {
            return Err(LabError::Io(why));
        }
        istio.pushed_in = Some(waited?);
        Ok(agent)
    }

    /// The gateway's (or first proxy's) admin endpoint, if it has one.
    pub fn gateway_admin(&self) -> Option<SocketAddr> {
        self.roles
            .iter()
            .find(|r| r.class == Class::Proxy)
            .and_then(|r| r.admin)
    }

    /// What the sampler should read for each role. A namespace two roles share (a pod: the
    /// backend and its sidecar) is read once, for the first of them from the client side.
    pub fn watches(&self) -> Vec<Watch> {
        let mut read = std::collections::HashSet::new();
        self.roles
            .iter()
            .enumerate()
            .map(|(i, r)| Watch {
                role: r.name.name().to_string(),
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
            })
            .collect()
    }

    /// The first role found dead, with the tail of its output.
    pub fn dead_role(&mut self) -> Option<(ChainRole, String)> {
        self.roles.iter_mut().find_map(|r| {
            let status = r.process.exited()?;
            Some((r.name, format!("{status}: {}", r.process.log_tail(5))))
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
        // Processes (and with them their cgroups) first, then the control planes, then the
        // namespaces (and with them the capture), then the files.
        while let Some(r) = self.roles.pop() {
            drop(r);
        }
        self.istio.take();
        self.mesh.take();
        self.namespaces.take();
        for d in self.pod_dirs.drain(..) {
            let _ = std::fs::remove_dir_all(d);
        }
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

    #[test]
    fn namespace_prefixes_are_short_and_differ_per_rig() {
        assert_eq!(short_prefix("1234-5-6").len(), 8);
        assert_ne!(short_prefix("1234-5-6"), short_prefix("1235-5-6"));
    }
}
