//! Envoy as Istio's ingress gateway renders it for a Gateway with one server per domain and a
//! VirtualService per domain: one listener with `tls_inspector` (without it no filter chain
//! ever sees a server name), one filter chain per server matched by SNI with that domain's
//! certificate (ALPN h2/http/1.1, 15 s to finish the handshake) and its own connection
//! manager (the client's address used, client certificate details sanitised, the sidecar's
//! filters) and route configuration: one virtual host for the domain whose routes match each
//! path exactly and rewrite it to `/` (gRPC: the method's path unchanged). Without TLS, one
//! chain holds every virtual host. HTTP/3 adds a QUIC listener on the same port over UDP with
//! the same chains.

use std::path::Path;

use envoy_types::pb::envoy::config::bootstrap::v3::bootstrap::{DynamicResources, StaticResources};
use envoy_types::pb::envoy::config::bootstrap::v3::Bootstrap;
use envoy_types::pb::envoy::config::core::v3::config_source::ConfigSourceSpecifier;
use envoy_types::pb::envoy::config::core::v3::{ApiVersion, ConfigSource, PathConfigSource};
use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::core::v3::{socket_address, transport_socket, TransportSocket};
use envoy_types::pb::envoy::config::listener::v3::{
    FilterChain, FilterChainMatch, Listener, QuicProtocolOptions, UdpListenerConfig,
};
use envoy_types::pb::envoy::config::route::v3::{RouteConfiguration, VirtualHost};
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::http_connection_manager::CodecType;
use envoy_types::pb::envoy::extensions::transport_sockets::quic::v3::QuicDownstreamTransport;
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
    CommonTlsContext, DownstreamTlsContext, TlsCertificate,
};
use envoy_types::util::pack_any;

use super::istio_shape::{self, Direction};
use super::sidecar::hcm_filter;
use super::{file, socket, socket_of, static_cluster_of, tls_socket, BACKEND_CLUSTER};
use crate::gateway::GatewayPlan;

/// The gateway's connection managers' stat prefix (Istio's gateway: `outbound_0.0.0.0_<port>`).
fn stat_prefix(plan: &GatewayPlan) -> String {
    format!("outbound_{}", istio_shape::port_name(plan.listen.port()))
}

/// The gateway's listeners: TLS (or plain) over TCP, and QUIC when HTTP/3 is asked.
pub fn listeners(plan: &GatewayPlan) -> Vec<Listener> {
    let mut listeners = vec![listener(plan)];
    if plan.http3 {
        listeners.push(quic_listener(plan));
    }
    listeners
}

/// The gateway's whole bootstrap: its listeners in it, or, with
/// [`GatewayPlan::listeners_file`], read from `listeners` through file-based xDS.
pub fn bootstrap(plan: &GatewayPlan, listeners_file: &Path) -> Bootstrap {
    let (listeners, dynamic_resources) = if plan.listeners_file {
        let lds = ConfigSource {
            resource_api_version: ApiVersion::V3 as i32,
            config_source_specifier: Some(ConfigSourceSpecifier::PathConfigSource(
                PathConfigSource {
                    path: listeners_file.display().to_string(),
                    ..Default::default()
                },
            )),
            ..Default::default()
        };
        let dynamic = DynamicResources {
            lds_config: Some(lds),
            ..Default::default()
        };
        (Vec::new(), Some(dynamic))
    } else {
        (listeners(plan), None)
    };
    let b = Bootstrap {
        static_resources: Some(StaticResources {
            listeners,
            clusters: vec![backend_cluster(plan)],
            ..Default::default()
        }),
        dynamic_resources,
        ..Default::default()
    };
    let mut prefixes = vec![stat_prefix(plan)];
    if plan.http3 {
        prefixes.push(format!("{}_quic", stat_prefix(plan)));
    }
    istio_shape::finish(b, "gateway", plan.admin, &prefixes)
}

fn listener(plan: &GatewayPlan) -> Listener {
    let port = plan.listen.port();
    let (filter_chains, listener_filters) = if plan.tls {
        let chains = plan
            .domain_names()
            .map(|domain| {
                let tls = tls_socket(domain_tls(plan, &domain, plan.alpn()));
                FilterChain {
                    name: format!("https.{port}.{domain}"),
                    transport_socket_connect_timeout: istio_shape::secs(15),
                    ..server_chain(plan, &domain, tls, false)
                }
            })
            .collect();
        (chains, vec![istio_shape::tls_inspector()])
    } else {
        let hosts = plan
            .domain_names()
            .map(|d| virtual_host(plan, &d))
            .collect();
        let chain = FilterChain {
            filters: vec![manager(plan, &format!("http.{port}"), hosts, false)],
            ..Default::default()
        };
        (vec![chain], Vec::new())
    };
    Listener {
        name: istio_shape::port_name(port),
        address: Some(socket(plan.listen)),
        listener_filters,
        filter_chains,
        ..Default::default()
    }
}

/// A Gateway server's filter chain: matched by its domain's SNI, its own connection manager
/// and routes behind `socket` (TLS, or QUIC).
fn server_chain(
    plan: &GatewayPlan,
    domain: &str,
    socket: TransportSocket,
    quic: bool,
) -> FilterChain {
    FilterChain {
        filter_chain_match: Some(FilterChainMatch {
            server_names: vec![domain.to_string()],
            ..Default::default()
        }),
        filters: vec![manager(
            plan,
            domain,
            vec![virtual_host(plan, domain)],
            quic,
        )],
        transport_socket: Some(socket),
        ..Default::default()
    }
}

/// A domain's certificate, offering `alpn`.
fn domain_tls(plan: &GatewayPlan, domain: &str, alpn: &[&str]) -> DownstreamTlsContext {
    let (crt, key) = plan.cert_files(domain);
    DownstreamTlsContext {
        common_tls_context: Some(CommonTlsContext {
            tls_certificates: vec![TlsCertificate {
                certificate_chain: file(&plan.path(&crt)),
                private_key: file(&plan.path(&key)),
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
            let socket = TransportSocket {
                name: "envoy.transport_sockets.quic".into(),
                config_type: Some(transport_socket::ConfigType::TypedConfig(pack_any(quic))),
            };
            server_chain(plan, &domain, socket, true)
        })
        .collect();
    Listener {
        name: format!("{}_quic", istio_shape::port_name(plan.listen.port())),
        address: Some(socket_of(plan.listen, socket_address::Protocol::Udp)),
        udp_listener_config: Some(UdpListenerConfig {
            quic_options: Some(QuicProtocolOptions::default()),
            ..Default::default()
        }),
        filter_chains,
        ..Default::default()
    }
}

/// A server's connection manager and its routes (`https.<port>.<domain>` as Istio names them).
fn manager(
    plan: &GatewayPlan,
    server: &str,
    virtual_hosts: Vec<VirtualHost>,
    quic: bool,
) -> envoy_types::pb::envoy::config::listener::v3::Filter {
    let port = plan.listen.port();
    let (prefix, codec) = if quic {
        (format!("{}_quic", stat_prefix(plan)), CodecType::Http3)
    } else {
        (stat_prefix(plan), CodecType::Auto)
    };
    let routes = RouteConfiguration {
        name: if plan.tls {
            format!("https.{port}.{server}")
        } else {
            server.to_string()
        },
        virtual_hosts,
        validate_clusters: Some(envoy_types::pb::google::protobuf::BoolValue { value: false }),
        ..Default::default()
    };
    let mut hcm = istio_shape::connection_manager(
        prefix,
        routes,
        Direction::Gateway,
        codec,
        istio_shape::http_filters(),
    );
    if let Some(path) = &plan.access_log {
        super::access_log::add(&mut hcm, path);
    }
    hcm_filter(hcm)
}

/// One virtual host per domain; each path an exact, case-sensitive route rewritten to `/`
/// (gRPC: unchanged), as a VirtualService's `exact` match with `rewrite.uri` renders.
fn virtual_host(plan: &GatewayPlan, domain: &str) -> VirtualHost {
    let port = plan.listen.port();
    let rewrite = if plan.grpc { "" } else { "/" };
    VirtualHost {
        name: format!("{domain}:{port}"),
        domains: vec![domain.to_string(), format!("{domain}:{port}")],
        routes: plan
            .path_list()
            .map(|path| {
                istio_shape::route(
                    BACKEND_CLUSTER,
                    Some(path),
                    rewrite,
                    Direction::Gateway,
                    format!("{}:{}/*", istio_shape::SERVICE, plan.backend().port()),
                )
            })
            .collect(),
        ..Default::default()
    }
}

fn backend_cluster(plan: &GatewayPlan) -> Cluster {
    let mut cluster =
        istio_shape::with_defaults(static_cluster_of(BACKEND_CLUSTER, &plan.backends), true);
    if plan.grpc {
        cluster.typed_extension_protocol_options = istio_shape::http2_upstream(0, 0, 0);
    }
    cluster
}
