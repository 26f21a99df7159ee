//! Envoy: a static bootstrap built from the typed Envoy API (the envoy-types crate), so its
//! structure is checked by the compiler rather than by a YAML template. One listener; per
//! domain a filter chain matched by SNI with that domain's certificate, an HTTP connection
//! manager whose virtual host holds one exact-path route per path, rewritten to `/` and sent to
//! a static `backend` cluster.
//!
//! Written as binary protobuf (`envoy.pb`), which Envoy loads with `--config-path envoy.pb`.
//! Envoy cannot be installed on the machines this project is built on, so the bootstrap is
//! tested by decoding it back and walking every route, not by starting Envoy.

use std::net::SocketAddr;
use std::path::PathBuf;

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
    filter, Filter, FilterChain, FilterChainMatch, Listener,
};
use envoy_types::pb::envoy::config::route::v3::{
    route, route_action, route_match, Route, RouteAction, RouteConfiguration, RouteMatch,
    VirtualHost,
};
use envoy_types::pb::envoy::extensions::filters::http::router::v3::Router;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    http_connection_manager, http_filter, HttpConnectionManager, HttpFilter,
};
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
    CommonTlsContext, DownstreamTlsContext, TlsCertificate,
};
use envoy_types::pb::google::protobuf::Duration;
use envoy_types::util::pack_any;
use prost::Message;

use super::{write as write_file, GatewayPlan};
use crate::LabError;

/// The cluster every route goes to.
pub const BACKEND_CLUSTER: &str = "backend";

pub fn write(plan: &GatewayPlan) -> Result<Vec<PathBuf>, LabError> {
    let bytes = bootstrap(plan).encode_to_vec();
    let path = plan.path("envoy.pb");
    std::fs::write(&path, bytes)
        .map_err(|e| LabError::Io(format!("cannot write {}: {e}", path.display())))?;
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
        write_file(&plan.path("envoy-README.txt"), &readme)?,
    ])
}

/// The whole bootstrap.
pub fn bootstrap(plan: &GatewayPlan) -> Bootstrap {
    Bootstrap {
        static_resources: Some(StaticResources {
            listeners: vec![listener(plan)],
            clusters: vec![backend_cluster(plan.backend)],
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub(crate) fn socket(addr: SocketAddr) -> Address {
    Address {
        address: Some(address::Address::SocketAddress(SocketAddress {
            address: addr.ip().to_string(),
            port_specifier: Some(socket_address::PortSpecifier::PortValue(u32::from(
                addr.port(),
            ))),
            ..Default::default()
        })),
    }
}

pub(crate) fn file(path: String) -> Option<DataSource> {
    Some(DataSource {
        specifier: Some(data_source::Specifier::Filename(path)),
        ..Default::default()
    })
}

fn listener(plan: &GatewayPlan) -> Listener {
    let filter_chains = if plan.tls {
        plan.domain_names()
            .map(|domain| {
                let (crt, key) = plan.cert_files(&domain);
                let tls = DownstreamTlsContext {
                    common_tls_context: Some(CommonTlsContext {
                        tls_certificates: vec![TlsCertificate {
                            certificate_chain: file(plan.path(&crt).display().to_string()),
                            private_key: file(plan.path(&key).display().to_string()),
                            ..Default::default()
                        }],
                        alpn_protocols: plan.alpn().iter().map(|p| p.to_string()).collect(),
                        ..Default::default()
                    }),
                    ..Default::default()
                };
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

fn http_manager(plan: &GatewayPlan, virtual_hosts: Vec<VirtualHost>) -> Filter {
    http_connection_manager(
        "gateway",
        &format!("routes-{}", plan.listen.port()),
        virtual_hosts,
    )
}

/// An HTTP connection manager (codec AUTO: HTTP/1.1, h2, and h2c with prior knowledge) with
/// inline routes and the router filter: the L7 filter of the gateway and of every Envoy hop.
pub(crate) fn http_connection_manager(
    stat_prefix: &str,
    route_name: &str,
    virtual_hosts: Vec<VirtualHost>,
) -> Filter {
    let hcm = HttpConnectionManager {
        stat_prefix: stat_prefix.into(),
        codec_type: http_connection_manager::CodecType::Auto as i32,
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
                    prefix_rewrite: "/".into(),
                    ..Default::default()
                })),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

fn backend_cluster(backend: SocketAddr) -> Cluster {
    static_cluster(BACKEND_CLUSTER, backend)
}

/// A cluster of one static endpoint.
pub(crate) fn static_cluster(name: &str, backend: SocketAddr) -> Cluster {
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
