//! Envoy as Istio's sidecar. The client's sidecar is Istio's outbound side: the per-port
//! listener (`0.0.0.0_<port>`, bound here directly: these sidecars have no iptables redirect
//! into `virtualOutbound`; Istio's own, `proxy.type: istio`, do) with `http_inspector`, a chain for plaintext HTTP/1.1 and h2c into the
//! connection manager, the service's virtual host and an allow-any `*` one, and a default
//! chain passing other TCP through; its cluster `outbound|<port>||<service>` speaks mutual TLS
//! to the next sidecar with Istio's SNI, ALPN and the server's SPIFFE id, and HTTP/1.1 (Istio
//! does not upgrade to h2 between sidecars) unless the traffic is gRPC.
//!
//! The server's sidecar is Istio's inbound side in PERMISSIVE mode (Istio's default):
//! `virtualInbound` with `tls_inspector` and `http_inspector`, a mutual-TLS chain matched by
//! destination port, transport `tls` and Istio's HTTP ALPNs, a plaintext chain, both into the
//! inbound connection manager and `inbound|<port>||` (from 127.0.0.6, as Istio's).
//!
//! A waypoint between non-Envoy tunnels (plain TLS streams, no HBONE) is built as the inbound
//! side with a mutual-TLS chain matched by transport alone, forwarding over mutual TLS.

use envoy_types::pb::envoy::config::bootstrap::v3::{bootstrap::StaticResources, Bootstrap};
use envoy_types::pb::envoy::config::core::v3::TrafficDirection;
use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::listener::v3::{
    filter, Filter, FilterChain, FilterChainMatch, Listener, ListenerFilter,
};
use envoy_types::pb::envoy::config::route::v3::{RouteConfiguration, VirtualHost};
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    http_connection_manager::CodecType,
};
use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3::{tcp_proxy, TcpProxy};
use envoy_types::pb::google::protobuf::UInt32Value;
use envoy_types::util::pack_any;

use super::istio_shape::{self, Direction, Versions};
use super::{access_log, telemetry};
use super::{socket, static_cluster};
use crate::program::Hop;
use meshbench_results::topology::Duty;

/// The cluster Istio's outbound side passes unknown traffic to (here: the same next hop, in
/// the clear).
const PASSTHROUGH: &str = "PassthroughCluster";

/// A connection manager as a network filter.
pub fn hcm_filter(
    hcm: envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::HttpConnectionManager,
) -> Filter {
    Filter {
        name: "envoy.filters.network.http_connection_manager".into(),
        config_type: Some(filter::ConfigType::TypedConfig(pack_any(hcm))),
    }
}

/// The client's sidecar (Istio's outbound side).
pub fn outbound(hop: &Hop) -> Bootstrap {
    let port = hop.listen.port();
    let cluster_name = istio_shape::outbound_cluster(port);
    let stat_prefix = format!("outbound_{}", istio_shape::port_name(port));
    let mut hcm = istio_shape::connection_manager(
        stat_prefix.clone(),
        outbound_routes(hop, &cluster_name),
        Direction::Outbound,
        CodecType::Auto,
        istio_shape::http_filters(),
    );
    if let Some(path) = &hop.access_log {
        access_log::add(&mut hcm, path);
    }
    if hop.istio_telemetry {
        telemetry::add(&mut hcm, &hop.name, Direction::Outbound);
    }
    let listener = outbound_listener(hop, hcm);
    let cluster = outbound_cluster(hop, &cluster_name);
    let passthrough = istio_shape::with_defaults(static_cluster(PASSTHROUGH, hop.upstream), false);
    let b = Bootstrap {
        static_resources: Some(StaticResources {
            listeners: vec![listener],
            clusters: vec![cluster, passthrough],
            ..Default::default()
        }),
        ..Default::default()
    };
    istio_shape::finish(b, &hop.name, hop.admin, &[stat_prefix, PASSTHROUGH.into()])
}

/// The server's sidecar (Istio's inbound side, PERMISSIVE), or a waypoint between plain TLS
/// tunnels.
pub fn inbound(hop: &Hop) -> Bootstrap {
    let port = hop.listen.port();
    let cluster_name = istio_shape::inbound_cluster(port);
    let stat_prefix = format!("inbound_{}", istio_shape::port_name(port));
    let routes = inbound_routes(port, &cluster_name);
    let hcm = || {
        let mut hcm = istio_shape::connection_manager(
            stat_prefix.clone(),
            routes.clone(),
            Direction::Inbound,
            CodecType::Auto,
            istio_shape::http_filters(),
        );
        if let Some(path) = &hop.access_log {
            access_log::add(&mut hcm, path);
        }
        if hop.istio_telemetry {
            telemetry::add(&mut hcm, &hop.name, Direction::Inbound);
        }
        hcm_filter(hcm)
    };
    let (listener_filters, chains) = inbound_chains(hop, &hcm);
    let listener = Listener {
        name: "virtualInbound".into(),
        address: Some(socket(hop.listen)),
        traffic_direction: TrafficDirection::Inbound as i32,
        listener_filters,
        continue_on_listener_filters_timeout: true,
        filter_chains: chains,
        ..Default::default()
    };
    let cluster = inbound_cluster(hop, &cluster_name);
    let b = Bootstrap {
        static_resources: Some(StaticResources {
            listeners: vec![listener],
            clusters: vec![cluster],
            ..Default::default()
        }),
        ..Default::default()
    };
    istio_shape::finish(b, &hop.name, hop.admin, &[stat_prefix])
}

/// The outbound side's routes: the service's virtual host (by its names and the hop's
/// address), and an allow-any `*` one to the passthrough cluster.
fn outbound_routes(hop: &Hop, cluster_name: &str) -> RouteConfiguration {
    let port = hop.listen.port();
    let ip = hop.listen.ip().to_string();
    let service = VirtualHost {
        name: format!("{}:{port}", istio_shape::SERVICE),
        domains: vec![
            istio_shape::SERVICE.to_string(),
            format!("{}:{port}", istio_shape::SERVICE),
            "backend".into(),
            format!("backend:{port}"),
            ip.clone(),
            format!("{ip}:{port}"),
        ],
        routes: vec![istio_shape::route(
            cluster_name,
            None,
            "",
            Direction::Outbound,
            format!("{}:{port}/*", istio_shape::SERVICE),
        )],
        ..Default::default()
    };
    let allow_any = VirtualHost {
        name: "allow_any".into(),
        domains: vec!["*".into()],
        routes: vec![istio_shape::route(
            PASSTHROUGH,
            None,
            "",
            Direction::Outbound,
            "allow_any".into(),
        )],
        ..Default::default()
    };
    RouteConfiguration {
        name: port.to_string(),
        virtual_hosts: vec![service, allow_any],
        validate_clusters: Some(envoy_types::pb::google::protobuf::BoolValue { value: false }),
        ..Default::default()
    }
}

/// The per-port listener: HTTP (told apart by `http_inspector`) into the connection manager
/// `hcm`, anything else passed through.
fn outbound_listener(
    hop: &Hop,
    hcm: envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::HttpConnectionManager,
) -> Listener {
    let port = hop.listen.port();
    let http_chain = FilterChain {
        name: format!("{}_http", istio_shape::port_name(port)),
        filter_chain_match: Some(FilterChainMatch {
            application_protocols: vec!["http/1.1".into(), "h2c".into()],
            ..Default::default()
        }),
        filters: vec![hcm_filter(hcm)],
        ..Default::default()
    };
    let passthrough_chain = FilterChain {
        name: PASSTHROUGH.into(),
        filters: vec![Filter {
            name: "envoy.filters.network.tcp_proxy".into(),
            config_type: Some(filter::ConfigType::TypedConfig(pack_any(TcpProxy {
                stat_prefix: PASSTHROUGH.into(),
                cluster_specifier: Some(tcp_proxy::ClusterSpecifier::Cluster(PASSTHROUGH.into())),
                ..Default::default()
            }))),
        }],
        ..Default::default()
    };
    Listener {
        name: istio_shape::port_name(port),
        address: Some(socket(hop.listen)),
        traffic_direction: TrafficDirection::Outbound as i32,
        listener_filters: vec![istio_shape::http_inspector()],
        filter_chains: vec![http_chain],
        default_filter_chain: Some(passthrough_chain),
        ..Default::default()
    }
}

/// The cluster to the next sidecar: mutual TLS with Istio's SNI and ALPN, HTTP/2 for gRPC.
fn outbound_cluster(hop: &Hop, cluster_name: &str) -> Cluster {
    let port = hop.listen.port();
    let mut cluster = istio_shape::with_defaults(static_cluster(cluster_name, hop.upstream), true);
    if hop.grpc {
        cluster.typed_extension_protocol_options = istio_shape::http2_upstream(0, 0, 0);
    }
    cluster.transport_socket = hop.upstream_tls.as_ref().map(|t| {
        let alpn: &[&str] = if hop.grpc {
            &istio_shape::MTLS_H2_ALPN
        } else {
            &istio_shape::MTLS_HTTP11_ALPN
        };
        istio_shape::upstream_tls(t, Versions::Sidecar, alpn, istio_shape::outbound_sni(port))
    });
    cluster
}

/// The inbound side's routes: every host to the application beside it.
fn inbound_routes(port: u16, cluster_name: &str) -> RouteConfiguration {
    RouteConfiguration {
        name: format!("inbound|{port}||"),
        virtual_hosts: vec![VirtualHost {
            name: format!("inbound|http|{port}"),
            domains: vec!["*".into()],
            routes: vec![istio_shape::route(
                cluster_name,
                None,
                "",
                Direction::Inbound,
                format!("{}:{port}/*", istio_shape::SERVICE),
            )],
            ..Default::default()
        }],
        validate_clusters: Some(envoy_types::pb::google::protobuf::BoolValue { value: false }),
        ..Default::default()
    }
}

/// `virtualInbound`'s listener filters and chains, each into a connection manager made by
/// `hcm`: mutual TLS (with Istio's ALPNs for a sidecar) and, when PERMISSIVE or without TLS,
/// plaintext HTTP.
fn inbound_chains(hop: &Hop, hcm: &dyn Fn() -> Filter) -> (Vec<ListenerFilter>, Vec<FilterChain>) {
    let port = hop.listen.port();
    let on_port = || {
        Some(UInt32Value {
            value: u32::from(port),
        })
    };
    let mut chains = Vec::new();
    let mut listener_filters = vec![istio_shape::tls_inspector()];
    if let Some(tls) = &hop.listen_tls {
        // The sidecar sees Istio's mutual-TLS ALPNs from the client's sidecar; a waypoint
        // between other programs' tunnels sees none.
        let alpns = match hop.duty {
            Duty::ServerSidecar => istio_shape::MTLS_HTTP_ALPNS
                .iter()
                .map(|a| a.to_string())
                .collect(),
            _ => Vec::new(),
        };
        chains.push(FilterChain {
            name: format!("{}_mtls_http", istio_shape::port_name(port)),
            filter_chain_match: Some(FilterChainMatch {
                destination_port: on_port(),
                transport_protocol: "tls".into(),
                application_protocols: alpns,
                ..Default::default()
            }),
            filters: vec![hcm()],
            transport_socket: Some(istio_shape::downstream_tls(
                tls,
                Versions::Sidecar,
                &["h2", "http/1.1"],
            )),
            ..Default::default()
        });
    }
    if hop.listen_tls.is_none() || hop.duty == Duty::ServerSidecar {
        // PERMISSIVE: plaintext HTTP too, told apart by http_inspector.
        listener_filters.push(istio_shape::http_inspector());
        chains.push(FilterChain {
            name: format!("{}_plaintext_http", istio_shape::port_name(port)),
            filter_chain_match: Some(FilterChainMatch {
                destination_port: on_port(),
                transport_protocol: "raw_buffer".into(),
                application_protocols: vec!["http/1.1".into(), "h2c".into()],
                ..Default::default()
            }),
            filters: vec![hcm()],
            ..Default::default()
        });
    }
    (listener_filters, chains)
}

/// The cluster to the application beside it, from 127.0.0.6 as Istio's.
fn inbound_cluster(hop: &Hop, cluster_name: &str) -> Cluster {
    let mut cluster = istio_shape::with_defaults(static_cluster(cluster_name, hop.upstream), false);
    cluster.upstream_bind_config = istio_shape::inbound_bind(hop.upstream);
    if hop.grpc {
        cluster.typed_extension_protocol_options = istio_shape::http2_upstream(0, 0, 0);
    }
    cluster.transport_socket = hop.upstream_tls.as_ref().map(|t| {
        let alpn: &[&str] = if hop.grpc { &["h2"] } else { &[] };
        istio_shape::upstream_tls(t, Versions::Sidecar, alpn, t.server_name.clone())
    });
    cluster
}
