//! Chains of processes: each hop's settings ([`hops`]), the backend, the gateway's plan, and
//! one role started in its cgroup and namespace and awaited ([`Rig::start_role`]), the one
//! place every role of a rig starts.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

use super::contour::ContourGateway;
use super::control_plane::{ConfiguredGateway, ControlPlane};
use super::istio::IstioGateway;
use super::{
    AccessLog, GatewayEntry, Launch, Ready, Rig, RigSpec, RoleAddress, RunningRole, WrittenGateway,
    MESH_NAME,
};
use crate::cgroup::{Cgroup, Cgroups};
use crate::change::Written;
use crate::gateway::{self, CertLayout, GatewayPlan};
use crate::pki::Ca;
use crate::process::{copy_of, Placement, RoleProcess};
use crate::program::{Hop, ListenTls, Program, Standalone, UpstreamTls, WrittenProgram};
use crate::LabError;
use meshbench_results::{
    topology::{Duty, RolePlan},
    ChainRole, Class, Configuration, ControlPlaneKind, HaproxyReload, PlayedBy, Stop, Topology,
};

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
pub(super) fn hops(
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
            // Every Envoy: the lab's own and those a control plane configures.
            let admin = match program.configuration() {
                Configuration::Written(Standalone::Envoy) | Configuration::ByControlPlane(_) => {
                    Some(SocketAddr::new(
                        addresses[i].addr.ip(),
                        admin_port(addresses[i].addr)?,
                    ))
                }
                Configuration::Written(_) => None,
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
pub(super) fn admin_port(listen: SocketAddr) -> Result<u16, LabError> {
    if listen.ip().is_loopback() {
        crate::port::free_port()
    } else {
        Ok(15000)
    }
}

/// The backend, last in the chain.
pub(super) fn backend_launch(spec: &RigSpec, address: RoleAddress, entry: bool) -> Launch {
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
        access_log: AccessLog::None,
    }
}

impl Rig {
    /// A role of the chain: the gateway's configuration for the gateway (written here, or
    /// sent by its control plane), else the hop's.
    pub(super) fn hop_launch(
        &mut self,
        spec: &RigSpec,
        role: &RolePlan,
        hop: &Hop,
        address: RoleAddress,
        stop: &Stop,
    ) -> Result<Launch, LabError> {
        let (program, template) = match spec.topology {
            Topology::Gateway => (spec.gateway.program, None),
            _ => {
                let p = spec.program(role.class);
                (p.program, Some(&p.command))
            }
        };
        let launch = |command, config, ready, access_log| Launch {
            name: role.role,
            class: role.class,
            program: PlayedBy::Proxy(program),
            command,
            address,
            workers: hop.workers,
            admin: hop.admin,
            config: Some(config),
            ready,
            user: None,
            admin_netns: None,
            access_log,
        };
        let access_log = (hop.access_log.clone()).map_or(AccessLog::None, AccessLog::File);
        match (program.configuration(), template) {
            (Configuration::ByControlPlane(kind), None) => {
                let gateway = self.configured_gateway(kind, spec, hop, stop)?;
                let ready = Ready::Configured(gateway.awaited);
                Ok(launch(
                    gateway.command,
                    gateway.config,
                    ready,
                    gateway.access_log,
                ))
            }
            // Istio's sidecars start in pods (`rig/pods.rs`); no other hop has a control plane.
            (Configuration::ByControlPlane(kind), Some(_)) => {
                Err(LabError::HopWithoutPods(kind.program()))
            }
            (Configuration::Written(written), None) => {
                let command = self.prepare_gateway(spec, written, hop)?;
                let config = written.gateway_config(&spec.dir.join("gateway"));
                Ok(launch(command, config, Ready::Accepts, access_log))
            }
            (Configuration::Written(written), Some(template)) => {
                let command = written.prepare_hop(template, hop)?;
                let config = written.hop_config(hop);
                Ok(launch(command, config, Ready::Accepts, access_log))
            }
        }
    }

    /// The gateway configured by `kind`: its control plane started with the gateway plan's
    /// objects applied and kept on the rig, and its Envoy's launch. The one place that knows
    /// which control planes there are.
    pub(super) fn configured_gateway(
        &mut self,
        kind: ControlPlaneKind,
        spec: &RigSpec,
        hop: &Hop,
        stop: &Stop,
    ) -> Result<ConfiguredGateway, LabError> {
        let (control_plane, gateway): (Box<dyn ControlPlane>, _) = match kind {
            ControlPlaneKind::Istio => {
                let (cp, gateway) = IstioGateway::start(self, spec, hop, stop)?;
                (Box::new(cp), gateway)
            }
            ControlPlaneKind::Contour => {
                let (cp, gateway) = ContourGateway::start(self, spec, hop, stop)?;
                (Box::new(cp), gateway)
            }
        };
        self.control_plane = Some(control_plane);
        Ok(gateway)
    }

    /// Writes the gateway plan (TLS, a certificate per domain) for the gateway role at the
    /// hop's addresses, and notes how the client reaches it.
    pub(super) fn prepare_gateway(
        &mut self,
        spec: &RigSpec,
        program: Standalone,
        hop: &Hop,
    ) -> Result<Command, LabError> {
        let out = spec.dir.join("gateway");
        self.write_gateway_plan(spec, hop, &out)?;
        let mut command = program.gateway_command(&out, hop.workers)?;
        if program == Standalone::Haproxy && spec.gateway.haproxy_reload == HaproxyReload::Seamless
        {
            // A master whose workers a reload replaces, as its users run a gateway they reload.
            command.arg(crate::program::haproxy::MASTER_WORKER);
        }
        if program == Standalone::Envoy && hop.access_log.is_some() {
            command.args(crate::program::envoy::access_log::FLUSH_ARGS);
        }
        Ok(command)
    }

    /// The gateway plan for the hop, written into `out`, and how the client reaches it.
    pub(super) fn write_gateway_plan(
        &mut self,
        spec: &RigSpec,
        hop: &Hop,
        out: &Path,
    ) -> Result<(GatewayPlan, gateway::Generated), LabError> {
        let ca = Ca::new(gateway::CA_NAME)?;
        let plan = GatewayPlan {
            domains: spec.gateway.domains,
            paths: spec.gateway.paths,
            tls: true,
            http2: spec.http2,
            http3: spec.http3,
            grpc: spec.grpc,
            certs: CertLayout::PerDomain,
            backends: match self.backends.is_empty() {
                true => vec![hop.upstream],
                false => self.backends.clone(),
            },
            listen: hop.listen,
            workers: hop.workers as usize,
            admin: hop.admin,
            out: out.to_path_buf(),
            access_log: hop.access_log.clone(),
            listeners_file: spec.gateway.changeable,
            rotated: Default::default(),
        };
        let generated = gateway::generate_by(&plan, &spec.gateway.program, &ca)?;
        let plan = GatewayPlan {
            out: generated.dir.clone(),
            ..plan
        };
        // Kept to be changed under load, with what signed it.
        self.written_gateway = Some(WrittenGateway {
            program: spec.gateway.program,
            haproxy_reload: spec.gateway.haproxy_reload,
            written: Written {
                plan: plan.clone(),
                ca: std::sync::Arc::new(ca),
                certs: generated.certs.clone(),
            },
        });
        self.gateway = Some(GatewayEntry {
            targets: out.join("targets.txt"),
            ca: out.join("ca.pem"),
        });
        Ok((plan, generated))
    }

    /// Starts one role in its cgroup (or pinned to CPUs) and namespace, waits until it is
    /// ready, and puts it first in the list (roles start from the server side). A `stop` ends
    /// the wait ([`LabError::Stopped`]): the process and its cgroup are gone on return.
    pub(super) fn start_role(
        &mut self,
        spec: &RigSpec,
        cgroups: Option<&Cgroups>,
        launch: Launch,
        stop: &Stop,
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
            cgroup: cgroup.as_deref(),
            affinity,
            netns: namespace.as_ref().map(|m| m.netns.clone()),
            user: launch.user,
        };
        let log = spec.dir.join(format!("{}.log", launch.name));
        match &launch.access_log {
            AccessLog::None => {}
            AccessLog::File(file) => self.access_logs.push((launch.name, file.clone())),
            AccessLog::Stdout => self.access_logs.push((launch.name, log.clone())),
        }
        let listen = launch.address.addr;
        if launch.class == Class::Backend || launch.name == ChainRole::Gateway {
            self.recipes.push((launch.name, copy_of(&launch.command)));
        }
        let process = match &launch.ready {
            Ready::Accepts => RoleProcess::start(
                launch.name.name(),
                launch.command,
                &log,
                &place,
                listen,
                stop,
            ),
            Ready::Configured(awaited) => self.start_configured_envoy(
                launch.name,
                launch.command,
                &log,
                &place,
                launch.admin,
                launch.admin_netns.as_deref(),
                awaited,
                stop,
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
            RunningRole {
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
}
