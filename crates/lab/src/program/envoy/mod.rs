//! Envoy: no Debian package, so it runs only where an `envoy` binary is on PATH (without one,
//! the step fails with one line saying so). Its configuration is a static bootstrap built from
//! the typed Envoy API (the envoy-types crate), so its structure is checked by the compiler
//! rather than by a YAML template, written as binary protobuf and run with `--config-path`.
//!
//! A hop is one listener (plain, TLS, or TLS requiring a client certificate signed by the mesh
//! CA) whose filter is an HTTP connection manager routing everything to the `next` cluster (L7)
//! or a TCP proxy to it (L4); the cluster reaches the next hop plain or over TLS with a client
//! certificate and SNI. The gateway is one listener; per domain a filter chain matched by SNI
//! with that domain's certificate, an HTTP connection manager whose virtual host holds one
//! exact-path route per path, rewritten to `/` and sent to a static `backend` cluster. No
//! Envoy binary exists on the machines this is built on: both are tested by decoding them back.

pub mod admin;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use envoy_types::pb::envoy::config::bootstrap::v3::{bootstrap::StaticResources, Bootstrap};
use envoy_types::pb::envoy::config::cluster::v3::{cluster, Cluster};
use envoy_types::pb::envoy::config::core::v3::{
    address, data_source, socket_address, transport_socket, Address, DataSource, SocketAddress,
    TransportSocket,
};
use envoy_types::pb::envoy::config::endpoint::v3::{
    lb_endpoint, ClusterLoadAssignment, Endpoint, LbEndpoint, LocalityLbEndpoints,
};
use envoy_types::pb::envoy::config::listener::v3::{
    filter, Filter, FilterChain, FilterChainMatch, Listener, QuicProtocolOptions, UdpListenerConfig,
};
use envoy_types::pb::envoy::config::route::v3::{
    route, route_action, route_match, Route, RouteAction, RouteConfiguration, RouteMatch,
    VirtualHost,
};
use envoy_types::pb::envoy::extensions::filters::http::router::v3::Router;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    http_connection_manager, http_filter, HttpConnectionManager, HttpFilter,
};
use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3::{tcp_proxy, TcpProxy};
use envoy_types::pb::envoy::extensions::transport_sockets::quic::v3::QuicDownstreamTransport;
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
    common_tls_context, CertificateValidationContext, CommonTlsContext, DownstreamTlsContext,
    TlsCertificate, UpstreamTlsContext,
};
use envoy_types::pb::envoy::extensions::upstreams::http::v3::{
    http_protocol_options, HttpProtocolOptions,
};
use envoy_types::pb::google::protobuf::Any;
use envoy_types::pb::google::protobuf::{BoolValue, Duration};
use envoy_types::util::pack_any;
use prost::Message;

use super::{Hop, Run};
use crate::gateway::GatewayPlan;
use crate::topology::Layer;
use crate::{install, write_file, LabError};

/// The gateway's configuration file.
pub const CONFIG: &str = "envoy.pb";
pub const VERSION_FLAG: &str = "--version";

/// The envoy binary on PATH.
pub fn binary() -> Result<PathBuf, LabError> {
    install::find("envoy", &[]).ok_or_else(|| LabError::Missing {
        program: "envoy".into(),
        hint: "Envoy has no Debian package; put an envoy binary on PATH (e.g. from the envoyproxy/envoy release images)".into(),
    })
}

/// `--concurrency` is the role's worker count.
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

/// The cluster every hop forwards to.
pub const NEXT: &str = "next";

fn p(path: &Path) -> Option<DataSource> {
    file(path.display().to_string())
}

fn tls_socket<M: prost::Name>(context: M) -> TransportSocket {
    TransportSocket {
        name: "envoy.transport_sockets.tls".into(),
        config_type: Some(transport_socket::ConfigType::TypedConfig(pack_any(context))),
    }
}

/// The bootstrap of one hop.
pub fn hop_bootstrap(hop: &Hop) -> Bootstrap {
    let filter = match hop.layer {
        Layer::L7 => http_connection_manager(
            &hop.name,
            NEXT,
            vec![VirtualHost {
                name: "all".into(),
                domains: vec!["*".into()],
                routes: vec![Route {
                    r#match: Some(RouteMatch {
                        path_specifier: Some(route_match::PathSpecifier::Prefix("/".into())),
                        ..Default::default()
                    }),
                    action: Some(route::Action::Route(RouteAction {
                        cluster_specifier: Some(route_action::ClusterSpecifier::Cluster(
                            NEXT.into(),
                        )),
                        ..Default::default()
                    })),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            http_connection_manager::CodecType::Auto,
        ),
        Layer::L4 => Filter {
            name: "envoy.filters.network.tcp_proxy".into(),
            config_type: Some(filter::ConfigType::TypedConfig(pack_any(TcpProxy {
                stat_prefix: hop.name.clone(),
                cluster_specifier: Some(tcp_proxy::ClusterSpecifier::Cluster(NEXT.into())),
                ..Default::default()
            }))),
        },
    };
    let downstream = hop.listen_tls.as_ref().map(|t| {
        tls_socket(DownstreamTlsContext {
            common_tls_context: Some(CommonTlsContext {
                tls_certificates: vec![TlsCertificate {
                    certificate_chain: p(&t.cert),
                    private_key: p(&t.key),
                    ..Default::default()
                }],
                validation_context_type: t.client_ca.as_ref().map(|ca| {
                    common_tls_context::ValidationContextType::ValidationContext(
                        CertificateValidationContext {
                            trusted_ca: p(ca),
                            ..Default::default()
                        },
                    )
                }),
                alpn_protocols: if hop.http2 && hop.layer == Layer::L7 {
                    vec!["h2".into(), "http/1.1".into()]
                } else {
                    Vec::new()
                },
                ..Default::default()
            }),
            require_client_certificate: Some(BoolValue {
                value: t.client_ca.is_some(),
            }),
            ..Default::default()
        })
    });
    let grpc = hop.grpc && hop.layer == Layer::L7;
    let mut cluster = static_cluster(NEXT, hop.upstream);
    if grpc {
        cluster.typed_extension_protocol_options = http2_upstream();
    }
    cluster.transport_socket = hop.upstream_tls.as_ref().map(|t| {
        tls_socket(UpstreamTlsContext {
            common_tls_context: Some(CommonTlsContext {
                // gRPC: HTTP/2 to the next hop, by ALPN over TLS.
                alpn_protocols: if grpc { vec!["h2".into()] } else { Vec::new() },
                tls_certificates: t
                    .client
                    .iter()
                    .map(|(cert, key)| TlsCertificate {
                        certificate_chain: p(cert),
                        private_key: p(key),
                        ..Default::default()
                    })
                    .collect(),
                validation_context_type: Some(
                    common_tls_context::ValidationContextType::ValidationContext(
                        CertificateValidationContext {
                            trusted_ca: p(&t.ca),
                            ..Default::default()
                        },
                    ),
                ),
                ..Default::default()
            }),
            sni: t.server_name.clone(),
            ..Default::default()
        })
    });
    Bootstrap {
        static_resources: Some(StaticResources {
            listeners: vec![Listener {
                name: hop.name.clone(),
                address: Some(socket(hop.listen)),
                filter_chains: vec![FilterChain {
                    filters: vec![filter],
                    transport_socket: downstream,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            clusters: vec![cluster],
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The cluster every route goes to.
pub const BACKEND_CLUSTER: &str = "backend";

/// The gateway: `envoy.pb` and a README that says how to run it.
pub fn write_gateway(plan: &GatewayPlan) -> Result<Vec<PathBuf>, LabError> {
    let path = write_file(plan.path(CONFIG), gateway_bootstrap(plan).encode_to_vec())?;
    let readme = format!(
        "envoy.pb is an Envoy v3 bootstrap in binary protobuf ({} domains x {} paths -> {}).\nRun it with: envoy --config-path {} --concurrency {}\n",
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
    Bootstrap {
        static_resources: Some(StaticResources {
            listeners: std::iter::once(listener(plan))
                .chain(plan.http3.then(|| quic_listener(plan)))
                .collect(),
            clusters: vec![backend_cluster(plan)],
            ..Default::default()
        }),
        ..Default::default()
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

fn file(path: String) -> Option<DataSource> {
    Some(DataSource {
        specifier: Some(data_source::Specifier::Filename(path)),
        ..Default::default()
    })
}

fn listener(plan: &GatewayPlan) -> Listener {
    let filter_chains = if plan.tls {
        plan.domain_names()
            .map(|domain| {
                let tls = domain_tls(plan, &domain, plan.alpn());
                FilterChain {
                    filter_chain_match: Some(FilterChainMatch {
                        server_names: vec![domain.clone()],
                        ..Default::default()
                    }),
                    filters: vec![http_manager(plan, vec![virtual_host(plan, &domain)])],
                    transport_socket: Some(TransportSocket {
                        name: "envoy.transport_sockets.tls".into(),
                        config_type: Some(transport_socket::ConfigType::TypedConfig(pack_any(tls))),
                    }),
                    ..Default::default()
                }
            })
            .collect()
    } else {
        let hosts = plan
            .domain_names()
            .map(|d| virtual_host(plan, &d))
            .collect();
        vec![FilterChain {
            filters: vec![http_manager(plan, hosts)],
            ..Default::default()
        }]
    };
    Listener {
        name: "gateway".into(),
        address: Some(socket(plan.listen)),
        filter_chains,
        ..Default::default()
    }
}

/// A domain's certificate, offering `alpn`.
fn domain_tls(plan: &GatewayPlan, domain: &str, alpn: &[&str]) -> DownstreamTlsContext {
    let (crt, key) = plan.cert_files(domain);
    DownstreamTlsContext {
        common_tls_context: Some(CommonTlsContext {
            tls_certificates: vec![TlsCertificate {
                certificate_chain: file(plan.path(&crt).display().to_string()),
                private_key: file(plan.path(&key).display().to_string()),
                ..Default::default()
            }],
            alpn_protocols: alpn.iter().map(|p| p.to_string()).collect(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// HTTP/3: a second listener on the same port over UDP, QUIC with each domain's certificate
/// (chosen by SNI, ALPN h3), the same routes behind an HTTP/3 connection manager.
fn quic_listener(plan: &GatewayPlan) -> Listener {
    let filter_chains = plan
        .domain_names()
        .map(|domain| {
            let quic = QuicDownstreamTransport {
                downstream_tls_context: Some(domain_tls(plan, &domain, &["h3"])),
                ..Default::default()
            };
            FilterChain {
                filter_chain_match: Some(FilterChainMatch {
                    server_names: vec![domain.clone()],
                    ..Default::default()
                }),
                filters: vec![http_connection_manager(
                    "gateway_quic",
                    &format!("routes-quic-{}", plan.listen.port()),
                    vec![virtual_host(plan, &domain)],
                    http_connection_manager::CodecType::Http3,
                )],
                transport_socket: Some(TransportSocket {
                    name: "envoy.transport_sockets.quic".into(),
                    config_type: Some(transport_socket::ConfigType::TypedConfig(pack_any(quic))),
                }),
                ..Default::default()
            }
        })
        .collect();
    Listener {
        name: "gateway-quic".into(),
        address: Some(socket_of(plan.listen, socket_address::Protocol::Udp)),
        udp_listener_config: Some(UdpListenerConfig {
            quic_options: Some(QuicProtocolOptions::default()),
            ..Default::default()
        }),
        filter_chains,
        ..Default::default()
    }
}

fn http_manager(plan: &GatewayPlan, virtual_hosts: Vec<VirtualHost>) -> Filter {
    http_connection_manager(
        "gateway",
        &format!("routes-{}", plan.listen.port()),
        virtual_hosts,
        http_connection_manager::CodecType::Auto,
    )
}

/// An HTTP connection manager (codec AUTO: HTTP/1.1, h2, and h2c with prior knowledge; or
/// HTTP3 on a QUIC listener) with inline routes and the router filter: the L7 filter of the
/// gateway and of every Envoy hop.
fn http_connection_manager(
    stat_prefix: &str,
    route_name: &str,
    virtual_hosts: Vec<VirtualHost>,
    codec: http_connection_manager::CodecType,
) -> Filter {
    let hcm = HttpConnectionManager {
        stat_prefix: stat_prefix.into(),
        codec_type: codec as i32,
        route_specifier: Some(http_connection_manager::RouteSpecifier::RouteConfig(
            RouteConfiguration {
                name: route_name.into(),
                virtual_hosts,
                ..Default::default()
            },
        )),
        http_filters: vec![HttpFilter {
            name: "envoy.filters.http.router".into(),
            config_type: Some(http_filter::ConfigType::TypedConfig(pack_any(
                Router::default(),
            ))),
            ..Default::default()
        }],
        ..Default::default()
    };
    Filter {
        name: "envoy.filters.network.http_connection_manager".into(),
        config_type: Some(filter::ConfigType::TypedConfig(pack_any(hcm))),
    }
}

fn virtual_host(plan: &GatewayPlan, domain: &str) -> VirtualHost {
    VirtualHost {
        name: domain.to_string(),
        domains: vec![
            domain.to_string(),
            format!("{domain}:{}", plan.listen.port()),
        ],
        routes: plan
            .path_list()
            .map(|path| Route {
                r#match: Some(RouteMatch {
                    path_specifier: Some(route_match::PathSpecifier::Path(path)),
                    ..Default::default()
                }),
                action: Some(route::Action::Route(RouteAction {
                    cluster_specifier: Some(route_action::ClusterSpecifier::Cluster(
                        BACKEND_CLUSTER.into(),
                    )),
                    // gRPC: the method's path is the route, unchanged.
                    prefix_rewrite: if plan.grpc { String::new() } else { "/".into() },
                    ..Default::default()
                })),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

fn backend_cluster(plan: &GatewayPlan) -> Cluster {
    let mut cluster = static_cluster(BACKEND_CLUSTER, plan.backend);
    if plan.grpc {
        cluster.typed_extension_protocol_options = http2_upstream();
    }
    cluster
}

/// A cluster's options for HTTP/2 to its endpoints (h2c in the clear, ALPN h2 over TLS): what
/// gRPC needs.
fn http2_upstream() -> std::collections::HashMap<String, Any> {
    let options = HttpProtocolOptions {
        upstream_protocol_options: Some(
            http_protocol_options::UpstreamProtocolOptions::ExplicitHttpConfig(
                http_protocol_options::ExplicitHttpConfig {
                    protocol_config: Some(
                        http_protocol_options::explicit_http_config::ProtocolConfig::Http2ProtocolOptions(
                            Default::default(),
                        ),
                    ),
                },
            ),
        ),
        ..Default::default()
    };
    std::collections::HashMap::from([(
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions".to_string(),
        pack_any(options),
    )])
}

/// A cluster of one static endpoint.
fn static_cluster(name: &str, backend: SocketAddr) -> Cluster {
    Cluster {
        name: name.into(),
        connect_timeout: Some(Duration {
            seconds: 5,
            nanos: 0,
        }),
        cluster_discovery_type: Some(cluster::ClusterDiscoveryType::Type(
            cluster::DiscoveryType::Static as i32,
        )),
        load_assignment: Some(ClusterLoadAssignment {
            cluster_name: name.into(),
            endpoints: vec![LocalityLbEndpoints {
                lb_endpoints: vec![LbEndpoint {
                    host_identifier: Some(lb_endpoint::HostIdentifier::Endpoint(Endpoint {
                        address: Some(socket(backend)),
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
