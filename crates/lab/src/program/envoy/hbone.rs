//! Ambient's tunnels with Envoy at both ends, as Istio's own Envoy-based HBONE does: HTTP
//! CONNECT over HTTP/2 over TLS 1.3 with client certificates (ztunnel's protocol).
//!
//! - The client node's tunnel takes plain TCP and sends each connection as one CONNECT stream
//!   (`tcp_proxy` with `tunneling_config`, the authority being the workload's address) to a
//!   cluster that speaks HTTP/2 (ztunnel's 4 MiB stream / 16 MiB connection windows, 100
//!   streams a connection), TLS 1.3, ALPN h2, its client certificate, the server's SPIFFE id
//!   checked. Streams share pooled connections, as ztunnel's do.
//! - The server node's tunnel terminates: TLS 1.3 with a client certificate required, an
//!   HTTP/2 connection manager that accepts CONNECT (200 streams a connection) and a route
//!   whose `connect_config` turns each stream into a plain TCP connection to the workload.
//! - The waypoint terminates HBONE the same way into an internal listener (`main_internal`)
//!   holding its L7 connection manager, whose cluster is a second internal listener
//!   (`connect_originate`) that originates HBONE to the server's tunnel: Istio's waypoint
//!   layout, with upstream Envoy's internal listeners.

use envoy_types::pb::envoy::config::bootstrap::v3::{bootstrap::StaticResources, Bootstrap};
use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::core::v3::{
    address, envoy_internal_address, Address, EnvoyInternalAddress, Http2ProtocolOptions,
};
use envoy_types::pb::envoy::config::listener::v3::{
    filter, listener, Filter, FilterChain, Listener,
};
use envoy_types::pb::envoy::config::route::v3::{
    route, route_action, route_match, Route, RouteAction, RouteConfiguration, RouteMatch,
    VirtualHost,
};
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    http_connection_manager::{self, CodecType},
};
use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3::{tcp_proxy, TcpProxy};
use envoy_types::pb::google::protobuf::{BoolValue, UInt32Value};
use envoy_types::util::pack_any;

use super::istio_shape::{self, Direction, Versions};
use super::sidecar::hcm_filter;
use super::{access_log, telemetry};
use super::{socket, static_cluster, static_cluster_at};
use crate::program::Hop;

/// ztunnel's HTTP/2 windows and stream limits.
const STREAM_WINDOW: u32 = 4 << 20;
const CONNECTION_WINDOW: u32 = 16 << 20;
const CLIENT_STREAMS: u32 = 100;
const SERVER_STREAMS: u32 = 200;

/// The cluster a tunnel's CONNECT streams go to.
const TUNNEL: &str = "hbone";
/// The workload the server's tunnel connects each stream to.
const WORKLOAD: &str = "workload";
/// The waypoint's internal listeners.
const MAIN: &str = "main_internal";
const ORIGINATE: &str = "connect_originate";

/// The client node's tunnel.
pub fn client(hop: &Hop) -> Bootstrap {
    let listener = Listener {
        name: "ztunnel_outbound".into(),
        address: Some(socket(hop.listen)),
        filter_chains: vec![FilterChain {
            filters: vec![originate(hop, "ztunnel_outbound")],
            ..Default::default()
        }],
        ..Default::default()
    };
    let b = Bootstrap {
        static_resources: Some(StaticResources {
            listeners: vec![listener],
            clusters: vec![tunnel_cluster(hop)],
            ..Default::default()
        }),
        ..Default::default()
    };
    istio_shape::finish(b, &hop.name, hop.admin, &["ztunnel_outbound".into()])
}

/// The server node's tunnel.
pub fn server(hop: &Hop) -> Bootstrap {
    let listener = terminate_listener(hop, "ztunnel_inbound", WORKLOAD);
    let workload = static_cluster(WORKLOAD, hop.upstream);
    let b = Bootstrap {
        static_resources: Some(StaticResources {
            listeners: vec![listener],
            clusters: vec![istio_shape::with_defaults(workload, false)],
            ..Default::default()
        }),
        ..Default::default()
    };
    istio_shape::finish(b, &hop.name, hop.admin, &["ztunnel_inbound".into()])
}

/// The waypoint: HBONE in, its L7 connection manager, HBONE out.
pub fn waypoint(hop: &Hop) -> Bootstrap {
    let port = hop.listen.port();
    let terminate = terminate_listener(hop, "connect_terminate", MAIN);
    let stat_prefix = format!("inbound_{}", istio_shape::port_name(port));
    let mut l7 = istio_shape::connection_manager(
        stat_prefix.clone(),
        RouteConfiguration {
            name: istio_shape::outbound_cluster(port),
            virtual_hosts: vec![VirtualHost {
                name: format!("{}:{port}", istio_shape::SERVICE),
                domains: vec!["*".into()],
                routes: vec![istio_shape::route(
                    ORIGINATE,
                    None,
                    "",
                    Direction::Outbound,
                    format!("{}:{port}/*", istio_shape::SERVICE),
                )],
                ..Default::default()
            }],
            ..Default::default()
        },
        Direction::Inbound,
        CodecType::Auto,
        istio_shape::http_filters(),
    );
    if let Some(path) = &hop.access_log {
        access_log::add(&mut l7, path);
    }
    if hop.istio_telemetry {
        telemetry::add(&mut l7, &hop.name, Direction::Inbound);
    }
    let l7 = hcm_filter(l7);
    let main = internal_listener(MAIN, l7);
    let out = internal_listener(ORIGINATE, originate(hop, ORIGINATE));
    let to_main = istio_shape::with_defaults(internal_cluster(MAIN), false);
    let mut to_originate = istio_shape::with_defaults(internal_cluster(ORIGINATE), true);
    if hop.grpc {
        // The connection manager forwards gRPC as HTTP/2 inside the tunnel.
        to_originate.typed_extension_protocol_options = istio_shape::http2_upstream(0, 0, 0);
    }
    let b = Bootstrap {
        static_resources: Some(StaticResources {
            listeners: vec![terminate, main, out],
            clusters: vec![to_main, to_originate, tunnel_cluster(hop)],
            ..Default::default()
        }),
        bootstrap_extensions: vec![istio_shape::internal_listener_extension()],
        ..Default::default()
    };
    istio_shape::finish(
        b,
        &hop.name,
        hop.admin,
        &["connect_terminate".into(), stat_prefix, ORIGINATE.into()],
    )
}

/// `tcp_proxy` sending each connection as a CONNECT stream to the tunnel cluster.
fn originate(hop: &Hop, stat_prefix: &str) -> Filter {
    Filter {
        name: "envoy.filters.network.tcp_proxy".into(),
        config_type: Some(filter::ConfigType::TypedConfig(pack_any(TcpProxy {
            stat_prefix: stat_prefix.into(),
            cluster_specifier: Some(tcp_proxy::ClusterSpecifier::Cluster(TUNNEL.into())),
            tunneling_config: Some(tcp_proxy::TunnelingConfig {
                hostname: hop.destination.to_string(),
                ..Default::default()
            }),
            ..Default::default()
        }))),
    }
}

/// The cluster of the next tunnel end: HTTP/2 with ztunnel's windows, TLS 1.3 with the client
/// certificate (when the mesh uses mutual TLS), ALPN h2.
fn tunnel_cluster(hop: &Hop) -> Cluster {
    let mut c = istio_shape::with_defaults(static_cluster(TUNNEL, hop.upstream), true);
    c.typed_extension_protocol_options =
        istio_shape::http2_upstream(STREAM_WINDOW, CONNECTION_WINDOW, CLIENT_STREAMS);
    c.transport_socket = hop
        .upstream_tls
        .as_ref()
        .map(|t| istio_shape::upstream_tls(t, Versions::Hbone, &["h2"], t.server_name.clone()));
    c
}

/// A listener that terminates HBONE: TLS 1.3 requiring the client's certificate, HTTP/2 with
/// CONNECT, every CONNECT stream a TCP connection to `cluster`.
fn terminate_listener(hop: &Hop, name: &str, cluster: &str) -> Listener {
    let route = Route {
        r#match: Some(RouteMatch {
            path_specifier: Some(route_match::PathSpecifier::ConnectMatcher(
                route_match::ConnectMatcher {},
            )),
            ..Default::default()
        }),
        action: Some(route::Action::Route(RouteAction {
            cluster_specifier: Some(route_action::ClusterSpecifier::Cluster(cluster.into())),
            upgrade_configs: vec![route_action::UpgradeConfig {
                upgrade_type: "CONNECT".into(),
                connect_config: Some(route_action::upgrade_config::ConnectConfig::default()),
                ..Default::default()
            }],
            timeout: istio_shape::secs(0),
            ..Default::default()
        })),
        name: "connect".into(),
        ..Default::default()
    };
    let mut hcm = istio_shape::connection_manager(
        name.into(),
        RouteConfiguration {
            name: name.into(),
            virtual_hosts: vec![VirtualHost {
                name: "connect".into(),
                domains: vec!["*".into()],
                routes: vec![route],
                ..Default::default()
            }],
            ..Default::default()
        },
        Direction::Inbound,
        CodecType::Http2,
        vec![istio_shape::router()],
    );
    hcm.tracing = None;
    hcm.http2_protocol_options = Some(Http2ProtocolOptions {
        allow_connect: true,
        max_concurrent_streams: Some(UInt32Value {
            value: SERVER_STREAMS,
        }),
        initial_stream_window_size: Some(UInt32Value {
            value: STREAM_WINDOW,
        }),
        initial_connection_window_size: Some(UInt32Value {
            value: CONNECTION_WINDOW,
        }),
        ..Default::default()
    });
    hcm.upgrade_configs = vec![http_connection_manager::UpgradeConfig {
        upgrade_type: "CONNECT".into(),
        enabled: Some(BoolValue { value: true }),
        ..Default::default()
    }];
    Listener {
        name: name.into(),
        address: Some(socket(hop.listen)),
        filter_chains: vec![FilterChain {
            filters: vec![hcm_filter(hcm)],
            transport_socket: hop
                .listen_tls
                .as_ref()
                .map(|t| istio_shape::downstream_tls(t, Versions::Hbone, &["h2"])),
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// A listener reached only from inside this Envoy (no socket).
fn internal_listener(name: &str, filter: Filter) -> Listener {
    Listener {
        name: name.into(),
        listener_specifier: Some(listener::ListenerSpecifier::InternalListener(
            listener::InternalListenerConfig::default(),
        )),
        filter_chains: vec![FilterChain {
            filters: vec![filter],
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// A cluster whose one endpoint is an internal listener.
fn internal_cluster(listener: &str) -> Cluster {
    static_cluster_at(
        listener,
        Address {
            address: Some(address::Address::EnvoyInternalAddress(
                EnvoyInternalAddress {
                    address_name_specifier: Some(
                        envoy_internal_address::AddressNameSpecifier::ServerListenerName(
                            listener.into(),
                        ),
                    ),
                    ..Default::default()
                },
            )),
        },
    )
}
