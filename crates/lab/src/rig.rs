//! A rig: the system under test for one step, every role a real process. The backend starts
//! first, then the hops from the server side outwards, each in its cgroup (or pinned with the
//! affinity mask where cgroups cannot be written), optionally in its own network namespace.
//! The client (meshbench's engine, in this process) talks to [`Rig::entry`]. Dropping the rig
//! stops every process, then removes the cgroups, the namespaces and the files.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::cgroup::{Cgroup, Cgroups, Limits};
use crate::gateway::{self, CertLayout, Flavor, GatewayPlan};
use crate::hop::{self, Hop, Layer, ListenTls, ProxyKind, UpstreamTls};
use crate::netns::{Member, Namespaces};
use crate::process::{accepts, Placement, RoleProcess};
use crate::sampler::Watch;
use crate::{pki, LabError};

/// Who talks to whom.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Baseline,
    Serveronly,
    Clientonly,
    Both,
    Gateway,
    Ambient,
    Waypoint,
}

/// What kind of role a process plays (limits are set per class).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// L7 proxies: sidecars, the gateway, the waypoint.
    Proxy,
    /// L4 tunnels.
    Tunnel,
    Backend,
}

/// The gateway topology's settings.
#[derive(Debug, Clone)]
pub struct GatewaySpec {
    pub flavor: Flavor,
    pub domains: usize,
    pub paths: usize,
    pub workers: u32,
}

/// Everything needed to start a rig.
#[derive(Debug, Clone)]
pub struct RigSpec {
    pub shape: Shape,
    pub proxy: ProxyKind,
    /// 0: follow the CPU allotment.
    pub proxy_workers: u32,
    /// Mutual TLS between the two proxies of `both`.
    pub proxy_mtls: bool,
    pub tunnel: ProxyKind,
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
    pub netns: bool,
    /// Unique to this rig among those alive (cgroup and namespace names).
    pub id: String,
    pub dir: PathBuf,
}

/// One running role.
#[derive(Debug)]
pub struct Role {
    pub name: String,
    pub class: Class,
    /// nginx, haproxy, caddy, command, backend.
    pub program: String,
    pub listen: SocketAddr,
    pub workers: u32,
    // Field order matters: the process stops before its cgroup is removed.
    pub process: RoleProcess,
    pub cgroup: Option<Cgroup>,
    pub member: Option<Member>,
}

/// How the client reaches the gateway topology.
#[derive(Debug, Clone)]
pub struct GatewayEntry {
    pub targets: PathBuf,
    pub ca: PathBuf,
}

/// A running system under test.
pub struct Rig {
    /// From the client's side to the backend.
    pub roles: Vec<Role>,
    /// Where the client sends its requests.
    pub entry: SocketAddr,
    pub gateway: Option<GatewayEntry>,
    /// What could not be done as asked, and what was done instead.
    pub warnings: Vec<String>,
    namespaces: Option<Namespaces>,
    dir: PathBuf,
}

/// One hop to build, before addresses are known.
struct Planned {
    name: &'static str,
    class: Class,
    layer: Layer,
}

fn chain(shape: Shape) -> Vec<Planned> {
    let l7 = |name| Planned {
        name,
        class: Class::Proxy,
        layer: Layer::L7,
    };
    let l4 = |name| Planned {
        name,
        class: Class::Tunnel,
        layer: Layer::L4,
    };
    match shape {
        Shape::Baseline => vec![],
        Shape::Serveronly => vec![l7("server_proxy")],
        Shape::Clientonly => vec![l7("client_proxy")],
        Shape::Both => vec![l7("client_proxy"), l7("server_proxy")],
        Shape::Gateway => vec![l7("gateway")],
        Shape::Ambient => vec![l4("ztunnel_client"), l4("ztunnel_server")],
        Shape::Waypoint => vec![l4("ztunnel_client"), l7("waypoint"), l4("ztunnel_server")],
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

fn free_port() -> Result<u16, LabError> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| LabError::Io(format!("no free port on 127.0.0.1: {e}")))
}

/// Removes what a run killed with SIGKILL left behind: `meshbench-<pid>-*` cgroups of
/// processes that no longer exist (their stragglers are killed first).
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
            warnings: Vec::new(),
            namespaces: spec.netns.then(|| Namespaces::new(&short_prefix(&spec.id))),
            dir: spec.dir.clone(),
        };
        let cgroups = match Cgroups::detect() {
            Ok(k) => Some(k),
            Err(why) => {
                let limited = [
                    &spec.proxy_limits,
                    &spec.tunnel_limits,
                    &spec.backend_limits,
                ]
                .iter()
                .any(|l| l.cpus.is_some() || l.memory_mib.is_some());
                if limited {
                    rig.warnings.push(format!(
                        "{why}; CPU quotas fall back to pinning on whole CPUs, memory limits are not applied"
                    ));
                }
                None
            }
        };
        let planned = chain(spec.shape);
        let tls_needed = spec.shape == Shape::Gateway
            || (spec.proxy_mtls && spec.shape == Shape::Both)
            || (spec.tunnel_mtls && matches!(spec.shape, Shape::Ambient | Shape::Waypoint));
        let pki_dir = spec.dir.join("pki");
        if tls_needed && spec.shape != Shape::Gateway {
            pki::write_lab_set(&pki_dir, &["mesh.local".to_string()])?;
        }
        // Addresses: the backend last in the chain.
        let total = planned.len() + 1;
        let mut addrs = Vec::with_capacity(total);
        let mut members = Vec::with_capacity(total);
        for i in 0..total {
            match &mut rig.namespaces {
                Some(ns) => {
                    let m = ns.add(i)?;
                    addrs.push(SocketAddr::new(m.addr, 8080));
                    members.push(Some(m));
                }
                None => {
                    addrs.push(SocketAddr::new(
                        IpAddr::V4(Ipv4Addr::LOCALHOST),
                        free_port()?,
                    ));
                    members.push(None);
                }
            }
        }
        // The backend.
        let backend_at = addrs[total - 1];
        let limits = &spec.backend_limits;
        let mut cmd = Command::new(&spec.backend_exe);
        cmd.args(["backend", "--listen", &backend_at.to_string()])
            .args(&spec.backend_args);
        if spec.http2 {
            cmd.arg("--http2");
        }
        let role = rig.start_role(
            spec,
            cgroups.as_ref(),
            "backend",
            Class::Backend,
            "backend".into(),
            cmd,
            backend_at,
            limits,
            0,
            members[total - 1].clone(),
        )?;
        rig.roles.push(role);
        // The hops, server side first.
        for i in (0..planned.len()).rev() {
            let p = &planned[i];
            let listen = addrs[i];
            let upstream = addrs[i + 1];
            let (kind, set_workers, limits) = match p.class {
                Class::Tunnel => (&spec.tunnel, spec.tunnel_workers, &spec.tunnel_limits),
                _ => (&spec.proxy, spec.proxy_workers, &spec.proxy_limits),
            };
            let workers = workers_for(set_workers, limits);
            let (cmd, program) = if spec.shape == Shape::Gateway {
                let flavor = spec.gateway.flavor;
                let out = spec.dir.join("gateway");
                let plan = GatewayPlan {
                    flavor,
                    domains: spec.gateway.domains,
                    paths: spec.gateway.paths,
                    tls: true,
                    http2: spec.http2,
                    certs: CertLayout::PerDomain,
                    backend: upstream,
                    listen,
                    workers: workers_for(spec.gateway.workers, limits) as usize,
                    out: out.clone(),
                };
                gateway::generate(&plan)?;
                rig.gateway = Some(GatewayEntry {
                    targets: out.join("targets.txt"),
                    ca: out.join("ca.pem"),
                });
                (
                    gateway::run::command(flavor, &out)?,
                    flavor.name().to_string(),
                )
            } else {
                let mtls = match p.class {
                    Class::Tunnel => spec.tunnel_mtls,
                    _ if spec.shape == Shape::Waypoint => spec.tunnel_mtls,
                    _ => spec.proxy_mtls,
                };
                // TLS on a link between two hops of the mesh (never towards the client or
                // the backend).
                let tls_in = i > 0 && mtls;
                let tls_out = i + 1 < planned.len() && mtls;
                let hop = Hop {
                    name: p.name.to_string(),
                    layer: p.layer,
                    listen,
                    listen_tls: tls_in.then(|| ListenTls {
                        cert: pki_dir.join("server.pem"),
                        key: pki_dir.join("server-key.pem"),
                        client_ca: Some(pki_dir.join("ca.pem")),
                    }),
                    upstream,
                    upstream_tls: tls_out.then(|| UpstreamTls {
                        ca: pki_dir.join("ca.pem"),
                        server_name: "mesh.local".into(),
                        client: Some((pki_dir.join("client.pem"), pki_dir.join("client-key.pem"))),
                    }),
                    http2: spec.http2 && i == 0,
                    workers,
                    dir: spec.dir.clone(),
                };
                (hop::prepare(kind, &hop)?.command, kind.name().to_string())
            };
            let role = rig.start_role(
                spec,
                cgroups.as_ref(),
                p.name,
                p.class,
                program,
                cmd,
                listen,
                limits,
                workers,
                members[i].clone(),
            )?;
            rig.roles.insert(0, role);
        }
        rig.entry = addrs[0];
        Ok(rig)
    }

    #[allow(clippy::too_many_arguments)]
    fn start_role(
        &mut self,
        spec: &RigSpec,
        cgroups: Option<&Cgroups>,
        name: &str,
        class: Class,
        program: String,
        cmd: Command,
        listen: SocketAddr,
        limits: &Limits,
        workers: u32,
        member: Option<Member>,
    ) -> Result<Role, LabError> {
        let limited =
            limits.cpus.is_some() || limits.cpuset.is_some() || limits.memory_mib.is_some();
        let cgroup = match cgroups {
            // Always a group when possible: its usage is the cleanest CPU reading.
            Some(kind) => Some(Cgroup::create(
                kind,
                &format!("{}-{name}", spec.id),
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
        let place = Placement {
            cgroup: cgroup.as_ref(),
            affinity,
            netns: member.as_ref().map(|m| m.netns.clone()),
        };
        let log = spec.dir.join(format!("{name}.log"));
        let mut process = RoleProcess::spawn(name, cmd, &log, &place)?;
        process.wait_listening(listen, Duration::from_secs(30), &accepts)?;
        Ok(Role {
            name: name.to_string(),
            class,
            program,
            listen,
            workers,
            process,
            cgroup,
            member,
        })
    }

    /// What the sampler should read for each role.
    pub fn watches(&self) -> Vec<Watch> {
        self.roles
            .iter()
            .enumerate()
            .map(|(i, r)| Watch {
                role: r.name.clone(),
                pgid: r.process.pid(),
                cgroup: r.cgroup.as_ref().map(Cgroup::files),
                port: Some(r.listen.port()),
                // Roles are listed client side first: the next one is this one's upstream.
                upstream_port: self.roles.get(i + 1).map(|n| n.listen.port()),
                veth: r.member.as_ref().map(|m| m.host_veth.clone()),
            })
            .collect()
    }

    /// The first role found dead, with the tail of its output.
    pub fn dead_role(&mut self) -> Option<(String, String)> {
        self.roles.iter_mut().find_map(|r| {
            let status = r.process.exited()?;
            Some((
                r.name.clone(),
                format!("{status}: {}", r.process.log_tail(5)),
            ))
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
        // Processes (and with them their cgroups) first, then the namespaces, then the files.
        while let Some(r) = self.roles.pop() {
            drop(r);
        }
        self.namespaces.take();
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
    fn topologies_are_chains_of_hops() {
        let names = |s| chain(s).iter().map(|p| p.name).collect::<Vec<_>>();
        assert!(names(Shape::Baseline).is_empty());
        assert_eq!(names(Shape::Both), ["client_proxy", "server_proxy"]);
        assert_eq!(
            names(Shape::Waypoint),
            ["ztunnel_client", "waypoint", "ztunnel_server"]
        );
        assert!(chain(Shape::Ambient).iter().all(|p| p.layer == Layer::L4));
        assert_eq!(short_prefix("1234-5-6").len(), 8);
        assert_ne!(short_prefix("1234-5-6"), short_prefix("1235-5-6"));
    }
}
