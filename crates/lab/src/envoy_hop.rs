//! An Envoy sidecar, waypoint or tunnel hop as a static bootstrap built from the typed Envoy API
//! (envoy-types), like the gateway's: one listener (plain, TLS, or TLS requiring a client
//! certificate signed by the mesh CA) whose filter is an HTTP connection manager routing
//! everything to the `next` cluster (L7) or a TCP proxy to it (L4); the cluster reaches the next
//! hop plain or over TLS with a client certificate and SNI. Written as binary protobuf and run
//! with `envoy --config-path`. No Envoy binary exists on the machines this is built on: the
//! bootstrap is tested by decoding it back.

use envoy_types::pb::envoy::config::bootstrap::v3::{bootstrap::StaticResources, Bootstrap};
use envoy_types::pb::envoy::config::core::v3::{transport_socket, TransportSocket};
use envoy_types::pb::envoy::config::listener::v3::{filter, Filter, FilterChain, Listener};
use envoy_types::pb::envoy::config::route::v3::{
    route, route_action, route_match, Route, RouteAction, RouteMatch, VirtualHost,
};
use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3::{tcp_proxy, TcpProxy};
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
    common_tls_context, CertificateValidationContext, CommonTlsContext, DownstreamTlsContext,
    TlsCertificate, UpstreamTlsContext,
};
use envoy_types::pb::google::protobuf::BoolValue;
use envoy_types::util::pack_any;

use crate::gateway::envoy::{file, http_connection_manager, socket, static_cluster};
use crate::hop::{Hop, Layer};

/// The cluster every hop forwards to.
pub const NEXT: &str = "next";

fn p(path: &std::path::Path) -> Option<envoy_types::pb::envoy::config::core::v3::DataSource> {
    file(path.display().to_string())
}

fn tls_socket<M: prost::Name>(context: M) -> TransportSocket {
    TransportSocket {
        name: "envoy.transport_sockets.tls".into(),
        config_type: Some(transport_socket::ConfigType::TypedConfig(pack_any(context))),
    }
}

/// The bootstrap of one hop.
pub fn bootstrap(hop: &Hop) -> Bootstrap {
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
    let mut cluster = static_cluster(NEXT, hop.upstream);
    cluster.transport_socket = hop.upstream_tls.as_ref().map(|t| {
        tls_socket(UpstreamTlsContext {
            common_tls_context: Some(CommonTlsContext {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hop::{ListenTls, UpstreamTls};
    use envoy_types::pb::envoy::config::core::v3::transport_socket::ConfigType;
    use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
        http_connection_manager, HttpConnectionManager,
    };
    use envoy_types::pb::google::protobuf::Any;
    use prost::Message;
    use std::path::PathBuf;

    fn hop(layer: Layer) -> Hop {
        let d = PathBuf::from("/pki");
        Hop {
            name: "waypoint".into(),
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
            workers: 1,
            dir: PathBuf::from("/tmp"),
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
        let bytes = bootstrap(&hop(Layer::L7)).encode_to_vec();
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
        let b = bootstrap(&h);
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
}
