//! The proxy programs the lab starts, one module each: [`nginx`], [`haproxy`], [`caddy`],
//! [`envoy`] and [`command`] (any program, from an argv and a configuration template). Each
//! module knows how to find (or install) its binary, which flag prints its version, how to
//! render its configuration for a mesh hop ([`Hop`]: L7 or L4, TLS in and out, mutual TLS, h2,
//! workers) and for the gateway (a [`GatewayPlan`] of N domains x M paths), and its command
//! line. [`Program`] dispatches to them with one match per question, so what nginx needs is
//! known in `nginx.rs` alone.
//!
//! Every program is ready once its listener accepts a connection:
//! [`RoleProcess::start`](crate::process::RoleProcess::start) waits for that, whatever started.

pub mod caddy;
pub mod command;
pub mod envoy;
pub mod haproxy;
pub mod nginx;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use prost::Message;

use crate::gateway::{self, GatewayPlan};
use crate::pki::Issued;
use crate::{install, write_file, LabError};
use meshbench_results::{topology::Duty, ChainRole, Configuration, ControlPlaneKind, Layer};

/// The program that plays a proxy role: the results crate's, the `type:` of the experiment
/// file's `proxy`, `tunnel` and `gateway` sections. What the lab does with each is
/// [`LabProgram`]'s; those a control plane configures (Istio's, Contour's) are started by the
/// rig with their control plane (`crate::rig::control_plane`), the others are
/// [`Standalone`]: the lab writes their configuration and command line here.
pub use meshbench_results::{Program, Standalone};

/// For [`Program::Command`]: the program and its arguments, and its configuration file's text.
/// Both may hold `{config}` (the written file's path), `{listen}`, `{listen_port}`,
/// `{upstream}`, `{upstream_port}`, `{workers}` and `{dir}`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CommandTemplate {
    pub argv: Vec<String>,
    pub config: String,
}

/// A program with what it needs to play a role: for `command`, its template (ignored otherwise).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProgramSpec {
    pub program: Program,
    pub command: CommandTemplate,
}

impl From<Program> for ProgramSpec {
    fn from(program: Program) -> Self {
        ProgramSpec {
            program,
            command: CommandTemplate::default(),
        }
    }
}

/// The listening side's TLS.
#[derive(Debug, Clone)]
pub struct ListenTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Require a client certificate signed by this CA (mutual TLS).
    pub client_ca: Option<PathBuf>,
}

/// The forwarding side's TLS.
#[derive(Debug, Clone)]
pub struct UpstreamTls {
    pub ca: PathBuf,
    /// The name the upstream's certificate is checked against (and sent as SNI).
    pub server_name: String,
    /// Client certificate and key (mutual TLS).
    pub client: Option<(PathBuf, PathBuf)>,
}

/// What one hop of a mesh does: listen here (plain, TLS, or TLS that requires a client
/// certificate), forward there (plain, or TLS with a client certificate), at L7 or L4.
#[derive(Debug, Clone)]
pub struct Hop {
    /// The role's name, also the stem of its files.
    pub name: String,
    /// The duty it takes on in the mesh (Envoy configures itself as Istio's for that duty).
    pub duty: Duty,
    pub layer: Layer,
    pub listen: SocketAddr,
    pub listen_tls: Option<ListenTls>,
    pub upstream: SocketAddr,
    pub upstream_tls: Option<UpstreamTls>,
    /// Accept HTTP/2 from the client: h2c on a plain listener, ALPN h2 with TLS (L7 only).
    pub http2: bool,
    /// Carry gRPC (L7): HTTP/2 in and HTTP/2 out, trailers kept.
    pub grpc: bool,
    /// Accept HTTP/3 from the client: QUIC on the listener's port over UDP (a TLS listener;
    /// caddy only). What it forwards is HTTP/1.1 (or HTTP/2 for gRPC) as usual.
    pub http3: bool,
    pub workers: u32,
    /// Where its configuration, logs and temporary files go.
    pub dir: PathBuf,
    /// The workload at the end of the chain (the backend): the authority a tunnel asks for.
    pub destination: SocketAddr,
    /// The mesh's tunnels (ambient) are HBONE (HTTP CONNECT over HTTP/2 over mutual TLS, as
    /// ztunnel's): this hop terminates the tunnel on its listener (Envoy only).
    pub hbone_in: bool,
    /// ... and originates one towards its upstream (Envoy only).
    pub hbone_out: bool,
    /// Where the program's own admin endpoint listens (Envoy's, read after each step).
    pub admin: Option<SocketAddr>,
    /// Envoy only: the stand-ins for Istio's per-request telemetry (`envoy::telemetry`).
    pub istio_telemetry: bool,
    /// Envoy only, L7 hops only: per-hop attribution's log of the tagged requests
    /// (`envoy::access_log`), written here; `None`: attribution is off.
    pub access_log: Option<PathBuf>,
}

/// A written configuration and how to run it: what a program's command line is built from.
#[derive(Debug, Clone, Copy)]
pub struct Run<'a> {
    pub config: &'a Path,
    /// The working directory (logs, temporary files, caddy's storage).
    pub dir: &'a Path,
    /// The role's name (the stem of its logs).
    pub name: &'a str,
    pub workers: u32,
}

/// What the lab knows of running a program: where it is installed and whether it can run here.
pub trait LabProgram {
    /// Whether the program can run here: the Debian packages are installed when missing, a
    /// command is the user's own; Envoy only where it is installed (scripts/install-envoy.sh).
    fn runs_here(self) -> bool;

    /// Where the program is installed, without installing it; `None` when it is not.
    fn installed(self) -> Option<PathBuf>;
}

/// What the lab writes for a program it configures itself: a gateway's configuration file and
/// command line, a hop's.
pub trait WrittenProgram {
    /// The configuration file of a gateway written into `dir`.
    fn gateway_config(self, dir: &Path) -> PathBuf;

    /// The command line that runs a gateway whose configuration [`gateway::generate`] wrote
    /// into `dir` for this program, in the foreground.
    fn gateway_command(self, dir: &Path, workers: u32) -> Result<Command, LabError>;

    /// Where a hop's configuration is written.
    fn hop_config(self, hop: &Hop) -> PathBuf;

    /// Writes the hop's configuration into its directory and builds the command that runs it
    /// (`template`: a command's, ignored for the others).
    fn prepare_hop(self, template: &CommandTemplate, hop: &Hop) -> Result<Command, LabError>;
}

/// The name of its configuration file (a hop's is prefixed with the role's name).
fn config_file(program: Standalone) -> &'static str {
    match program {
        Standalone::Nginx => nginx::CONFIG,
        Standalone::Haproxy => haproxy::CONFIG,
        Standalone::Caddy => caddy::CONFIG,
        Standalone::Envoy => envoy::CONFIG,
        Standalone::Command => command::CONFIG,
    }
}

/// Its command line on a written configuration.
fn command_line(program: Standalone, bin: &Path, run: &Run) -> Command {
    let mut cmd = match program {
        Standalone::Nginx => nginx::command(bin, run),
        Standalone::Haproxy => haproxy::command(bin, run),
        Standalone::Caddy => caddy::command(bin, run),
        Standalone::Envoy => envoy::command(bin, run),
        // Its arguments come from its template (see `command::prepare`).
        Standalone::Command => Command::new(bin),
    };
    cmd.current_dir(run.dir);
    cmd
}

fn gateway_command_with(program: Standalone, bin: &Path, dir: &Path, workers: u32) -> Command {
    let config = dir.join(config_file(program));
    let run = Run {
        config: &config,
        dir,
        name: ChainRole::Gateway.name(),
        workers,
    };
    command_line(program, bin, &run)
}

impl LabProgram for Program {
    fn runs_here(self) -> bool {
        match self {
            Program::Envoy => envoy::available(),
            Program::Istio => crate::istio::unavailable().is_none(),
            Program::Contour => crate::contour::unavailable().is_none(),
            Program::Nginx | Program::Haproxy | Program::Caddy | Program::Command => true,
        }
    }

    fn installed(self) -> Option<PathBuf> {
        match self {
            Program::Nginx => install::find("nginx", nginx::LOCATIONS),
            Program::Haproxy => install::find("haproxy", haproxy::LOCATIONS),
            Program::Caddy => install::find("caddy", caddy::LOCATIONS),
            Program::Envoy => envoy::binary().ok(),
            Program::Command => None,
            Program::Istio => Some(crate::istio::cache().join("bin/pilot-agent"))
                .filter(|_| crate::istio::unavailable().is_none()),
            Program::Contour => {
                Some(crate::contour::binary()).filter(|_| crate::contour::unavailable().is_none())
            }
        }
    }
}

fn no_gateway() -> LabError {
    LabError::Missing {
        program: "a command gateway".into(),
        hint: "the gateway is rendered for nginx, haproxy, caddy, envoy, istio or contour".into(),
    }
}

/// A program renders the gateway's configuration for itself; [`gateway::generate`] writes the
/// certificates and the targets file around it.
impl gateway::Target for Program {
    fn name(&self) -> &'static str {
        Program::name(*self)
    }

    fn speaks_http3(&self) -> bool {
        match self {
            Program::Caddy | Program::Envoy => true,
            Program::Nginx
            | Program::Haproxy
            | Program::Command
            | Program::Istio
            | Program::Contour => false,
        }
    }

    fn no_http3(&self) -> String {
        match self {
            Program::Nginx => "Debian's nginx (1.22) is built without QUIC (nginx 1.25+ has it); use caddy for HTTP/3 (meshbench gen gateway: caddy or envoy)".into(),
            Program::Haproxy => "Debian's haproxy is built without QUIC (it needs a QUIC-capable TLS library); use caddy for HTTP/3 (meshbench gen gateway: caddy or envoy)".into(),
            Program::Caddy
            | Program::Envoy
            | Program::Command
            | Program::Istio
            | Program::Contour => {
                format!("{} renders no HTTP/3 listener; use caddy or envoy", self.name())
            }
        }
    }

    fn write(
        &self,
        plan: &GatewayPlan,
        certs: &[(String, Issued)],
    ) -> Result<Vec<PathBuf>, LabError> {
        match self {
            Program::Nginx => nginx::write_gateway(plan),
            Program::Haproxy => haproxy::write_gateway(plan),
            Program::Caddy => caddy::write_gateway(plan),
            Program::Envoy => envoy::write_gateway(plan),
            Program::Command => Err(no_gateway()),
            Program::Istio => crate::istio::objects::Istio::lab().write(plan, certs),
            Program::Contour => crate::contour::objects::Contour::default().write(plan, certs),
        }
    }

    /// The command the lab runs the gateway with, as one shell line: the binary where it is
    /// installed (its bare name when it is not), its environment, every path absolute.
    fn start(&self, plan: &GatewayPlan, written: &[PathBuf]) -> Result<Vec<String>, LabError> {
        let program = match self.configuration() {
            Configuration::Written(Standalone::Command) => return Err(no_gateway()),
            Configuration::Written(program) => program,
            Configuration::ByControlPlane(ControlPlaneKind::Istio) => {
                return crate::istio::objects::Istio::lab().start(plan, written)
            }
            Configuration::ByControlPlane(ControlPlaneKind::Contour) => {
                return crate::contour::objects::Contour::default().start(plan, written)
            }
        };
        let bin = self
            .installed()
            .unwrap_or_else(|| PathBuf::from(self.name()));
        let workers = u32::try_from(plan.workers).unwrap_or(u32::MAX);
        let mut cmd = gateway_command_with(program, &bin, &plan.out, workers);
        if program == Standalone::Haproxy {
            // As its users run a gateway they reload: a master whose workers are replaced.
            cmd.arg(haproxy::MASTER_WORKER);
        }
        Ok(vec![gateway::shell_line(&cmd)])
    }
}

impl ProgramSpec {
    /// The program's path, installed from Debian packages where missing.
    pub fn binary(&self) -> Result<PathBuf, LabError> {
        match self.program.configuration() {
            Configuration::Written(program) => written_binary(program, &self.command),
            Configuration::ByControlPlane(ControlPlaneKind::Istio) => {
                match crate::istio::unavailable() {
                    Some(e) => Err(e),
                    None => Ok(crate::istio::cache().join("bin/pilot-agent")),
                }
            }
            Configuration::ByControlPlane(ControlPlaneKind::Contour) => {
                match crate::contour::unavailable() {
                    Some(e) => Err(e),
                    None => Ok(crate::contour::binary()),
                }
            }
        }
    }

    /// Why the program cannot run here, found without installing or starting anything (for
    /// `--dry-run`): Envoy neither installed nor installable, a command's program not found.
    /// `None` for the Debian packages and an installable Envoy, which a run installs when they
    /// are missing.
    pub fn unavailable(&self) -> Option<LabError> {
        match self.program {
            Program::Envoy => self
                .binary()
                .err()
                .filter(|_| envoy::not_installable().is_some()),
            Program::Command | Program::Istio | Program::Contour => self.binary().err(),
            Program::Nginx | Program::Haproxy | Program::Caddy => None,
        }
    }

    /// The version line the program prints (stored with the results); a command's path.
    pub fn version(&self) -> String {
        let Ok(bin) = self.binary() else {
            return "unavailable".into();
        };
        let flag = match self.program {
            Program::Nginx => nginx::VERSION_FLAG,
            Program::Haproxy => haproxy::VERSION_FLAG,
            Program::Caddy => caddy::VERSION_FLAG,
            Program::Envoy => envoy::VERSION_FLAG,
            Program::Command => return bin.display().to_string(),
            Program::Istio => return crate::istio::version(),
            Program::Contour => return crate::contour::version(),
        };
        let mut probe = Command::new(&bin);
        probe.arg(flag);
        match crate::process::output_within(probe, crate::process::VERSION_WITHIN) {
            Ok(Some(o)) => {
                let text = format!(
                    "{}{}",
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                );
                // The first line that says something (Envoy prints an empty one first).
                text.lines()
                    .map(str::trim)
                    .find(|l| !l.is_empty())
                    .unwrap_or("")
                    .to_string()
            }
            Ok(None) => format!(
                "unknown (no answer to {flag} within {} s)",
                crate::process::VERSION_WITHIN.as_secs()
            ),
            Err(_) => "unknown".into(),
        }
    }
}

/// The program's path, installed from Debian packages where missing (`template`: a
/// command's).
fn written_binary(program: Standalone, template: &CommandTemplate) -> Result<PathBuf, LabError> {
    match program {
        Standalone::Nginx => nginx::binary(),
        Standalone::Haproxy => haproxy::binary(),
        Standalone::Caddy => caddy::binary(),
        Standalone::Envoy => envoy::binary(),
        Standalone::Command => command::binary(template),
    }
}

impl WrittenProgram for Standalone {
    fn gateway_config(self, dir: &Path) -> PathBuf {
        dir.join(config_file(self))
    }

    fn gateway_command(self, dir: &Path, workers: u32) -> Result<Command, LabError> {
        if self == Standalone::Command {
            return Err(no_gateway());
        }
        let bin = written_binary(self, &CommandTemplate::default())?;
        Ok(gateway_command_with(self, &bin, dir, workers))
    }

    fn hop_config(self, hop: &Hop) -> PathBuf {
        hop.dir.join(format!("{}.{}", hop.name, config_file(self)))
    }

    fn prepare_hop(self, template: &CommandTemplate, hop: &Hop) -> Result<Command, LabError> {
        let bin = written_binary(self, template)?;
        let config = self.hop_config(hop);
        if hop.http3 && self != Standalone::Caddy {
            return Err(LabError::Missing {
                program: format!("{} with HTTP/3 in front", self.program().name()),
                hint: match self {
                    Standalone::Nginx | Standalone::Haproxy => {
                        gateway::Target::no_http3(&self.program())
                    }
                    Standalone::Caddy | Standalone::Envoy | Standalone::Command => {
                        "the lab's HTTP/3 entry hop is caddy; set proxy.kind: caddy".into()
                    }
                },
            });
        }
        if (hop.hbone_in || hop.hbone_out) && self != Standalone::Envoy {
            return Err(LabError::Missing {
                program: format!("{} between Envoy tunnels", self.program().name()),
                hint: "Envoy's tunnels speak HBONE (HTTP CONNECT over HTTP/2), which only Envoy terminates here; set proxy.type: envoy for the waypoint, or another tunnel.type".into(),
            });
        }
        let text: Vec<u8> = match self {
            Standalone::Nginx => nginx::hop_config(hop)?.into_bytes(),
            Standalone::Haproxy => haproxy::hop_config(hop)?.into_bytes(),
            Standalone::Caddy => caddy::hop_config(hop)?.into_bytes(),
            Standalone::Envoy => envoy::hop_bootstrap(hop).encode_to_vec(),
            Standalone::Command => return command::prepare(&bin, template, hop, &config),
        };
        write_file(&config, text)?;
        let run = Run {
            config: &config,
            dir: &hop.dir,
            name: &hop.name,
            workers: hop.workers,
        };
        let mut command = command_line(self, &bin, &run);
        if self == Standalone::Envoy && hop.access_log.is_some() {
            command.args(envoy::access_log::FLUSH_ARGS);
        }
        Ok(command)
    }
}

/// A path as configuration text.
fn p(path: &Path) -> String {
    path.display().to_string()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A server-side L7 or L4 hop, with mutual TLS on its listener when `tls`.
    pub(crate) fn hop(layer: Layer, tls: bool) -> Hop {
        let dir = PathBuf::from("/tmp/x");
        Hop {
            name: "server_proxy".into(),
            duty: Duty::ServerSidecar,
            layer,
            listen: "127.0.0.1:8001".parse().unwrap(),
            listen_tls: tls.then(|| ListenTls {
                cert: dir.join("s.pem"),
                key: dir.join("s-key.pem"),
                client_ca: Some(dir.join("ca.pem")),
            }),
            upstream: "127.0.0.1:8002".parse().unwrap(),
            upstream_tls: None,
            http2: false,
            grpc: false,
            http3: false,
            workers: 2,
            dir,
            destination: "127.0.0.1:8002".parse().unwrap(),
            hbone_in: false,
            hbone_out: false,
            admin: None,
            istio_telemetry: false,
            access_log: None,
        }
    }

    /// A client-side gRPC hop: plain h2c in, mutual TLS out to the next proxy.
    pub(crate) fn grpc_hop(tls_out: bool) -> Hop {
        let mut h = hop(Layer::L7, false);
        h.http2 = true;
        h.grpc = true;
        h.upstream_tls = tls_out.then(|| UpstreamTls {
            ca: PathBuf::from("/tmp/x/ca.pem"),
            server_name: "mesh.local".into(),
            client: Some(("/tmp/x/c.pem".into(), "/tmp/x/c-key.pem".into())),
        });
        h
    }

    #[test]
    fn only_caddy_takes_http3_in_front() {
        let mut h = hop(Layer::L7, false);
        h.http3 = true;
        h.listen_tls = Some(ListenTls {
            cert: "/tmp/x/s.pem".into(),
            key: "/tmp/x/s-key.pem".into(),
            client_ca: None,
        });
        let caddy = caddy::hop_config(&h).unwrap();
        assert!(caddy.contains("protocols h1 h2 h3"), "{caddy}");
        assert!(caddy.contains("https://:8001"), "{caddy}");
        for program in [Standalone::Nginx, Standalone::Haproxy] {
            let err = program
                .prepare_hop(&CommandTemplate::default(), &h)
                .unwrap_err();
            assert!(err.to_string().contains("without QUIC"), "{err}");
        }
        let plan = GatewayPlan {
            domains: 1,
            paths: 1,
            tls: true,
            http2: true,
            http3: true,
            grpc: false,
            certs: gateway::CertLayout::Shared,
            backends: vec!["127.0.0.1:9000".parse().unwrap()],
            listen: "127.0.0.1:8443".parse().unwrap(),
            workers: 1,
            admin: None,
            out: std::env::temp_dir().join(format!("meshbench-h3-plan-{}", std::process::id())),
            access_log: None,
            listeners_file: false,
            rotated: Default::default(),
        };
        let err = gateway::generate(&plan, &Program::Nginx).unwrap_err();
        assert!(err.to_string().contains("nginx with HTTP/3"), "{err}");
        let plain = GatewayPlan { tls: false, ..plan };
        let err = gateway::generate(&plain, &Program::Caddy).unwrap_err();
        assert!(err.to_string().contains("needs --tls"), "{err}");
    }

    #[test]
    fn every_program_forwards_grpc_over_http2() {
        let nginx = nginx::hop_config(&grpc_hop(true)).unwrap();
        assert!(nginx.contains("grpc_pass grpcs://next;"), "{nginx}");
        assert!(
            nginx.contains("grpc_ssl_certificate /tmp/x/c.pem;"),
            "{nginx}"
        );
        assert!(!nginx.contains("proxy_ssl_"), "{nginx}");
        assert!(nginx.contains(" http2 reuseport;"), "{nginx}");
        let plain = nginx::hop_config(&grpc_hop(false)).unwrap();
        assert!(plain.contains("grpc_pass grpc://next;"), "{plain}");

        // haproxy reads the client certificate to combine it with its key: none here.
        let mut no_client = grpc_hop(true);
        no_client.upstream_tls.as_mut().expect("TLS out").client = None;
        let haproxy = haproxy::hop_config(&no_client).unwrap();
        assert!(haproxy.contains(" alpn h2 maxconn"), "{haproxy}");
        assert!(
            haproxy.contains("bind 127.0.0.1:8001 proto h2"),
            "{haproxy}"
        );
        let plain = haproxy::hop_config(&grpc_hop(false)).unwrap();
        assert!(plain.contains(" proto h2 maxconn"), "{plain}");

        let caddy = caddy::hop_config(&grpc_hop(true)).unwrap();
        assert!(caddy.contains("versions 2"), "{caddy}");
        assert!(caddy.contains("header_up Host mesh.local"), "{caddy}");
        let plain = caddy::hop_config(&grpc_hop(false)).unwrap();
        assert!(plain.contains("versions h2c 2"), "{plain}");
        assert!(plain.contains("protocols h1 h2c"), "{plain}");
    }

    #[test]
    fn the_file_names_the_programs_in_lowercase() {
        let p: Program = serde_yaml_ng::from_str("haproxy").unwrap();
        assert_eq!(p, Program::Haproxy);
        assert_eq!(Program::default().name(), "nginx");
        assert_eq!(Program::Command.to_string(), "command");
    }
}
