//! How Istio configures Envoy, in the pieces every Envoy role of the lab is built from: its
//! names (listeners, clusters, stat prefixes, SNI), its HTTP connection manager (settings and
//! filter chain, less Istio's own filters, which upstream Envoy does not have), its route retry
//! policy, its cluster defaults, its mutual TLS (versions, ciphers, SPIFFE identities, ALPN)
//! and its bootstrap's stats set-up. Read from Istio's sources (pilot/pkg/networking/core,
//! pkg/bootstrap, tools/packaging/common/envoy_bootstrap.json; docs/envoy.md says which file
//! each choice follows); the values are Istio's, the code is ours.

use std::collections::HashMap;
use std::net::SocketAddr;

use envoy_types::pb::envoy::config::bootstrap::v3::{Admin, Bootstrap};
use envoy_types::pb::envoy::config::cluster::v3::{circuit_breakers, CircuitBreakers, Cluster};
use envoy_types::pb::envoy::config::core::v3::{
    BindConfig, Node, TransportSocket, TypedExtensionConfig,
};
use envoy_types::pb::envoy::config::listener::v3::{listener_filter, ListenerFilter};
use envoy_types::pb::envoy::config::metrics::v3::{
    stats_matcher, tag_specifier, StatsConfig, StatsMatcher, TagSpecifier,
};
use envoy_types::pb::envoy::config::route::v3::{
    retry_policy, route, route_action, route_match, Decorator, RetryPolicy, Route, RouteAction,
    RouteMatch,
};
use envoy_types::pb::envoy::extensions::filters::http::cors::v3::Cors;
use envoy_types::pb::envoy::extensions::filters::http::fault::v3::HttpFault;
use envoy_types::pb::envoy::extensions::filters::http::grpc_stats::v3::{
    filter_config, FilterConfig as GrpcStats,
};
use envoy_types::pb::envoy::extensions::filters::http::router::v3::Router;
use envoy_types::pb::envoy::extensions::filters::listener::http_inspector::v3::HttpInspector;
use envoy_types::pb::envoy::extensions::filters::listener::tls_inspector::v3::TlsInspector;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    http_connection_manager, http_filter, HttpConnectionManager, HttpFilter, RequestIdExtension,
};
use envoy_types::pb::envoy::extensions::request_id::uuid::v3::UuidRequestIdConfig;
use envoy_types::pb::envoy::extensions::retry::host::previous_hosts::v3::PreviousHostsPredicate;
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
    common_tls_context, subject_alt_name_matcher, tls_parameters, CertificateValidationContext,
    CommonTlsContext, DownstreamTlsContext, SubjectAltNameMatcher, TlsCertificate, TlsParameters,
    UpstreamTlsContext,
};
use envoy_types::pb::envoy::r#type::matcher::v3::{
    string_matcher, ListStringMatcher, StringMatcher,
};
use envoy_types::pb::envoy::r#type::v3::Percent;
use envoy_types::pb::google::protobuf::{Any, BoolValue, Duration, UInt32Value};
use envoy_types::util::pack_any;
use meshbench_k8s::names::DEFAULT_NAMESPACE;

use super::{file, socket, socket_address, tls_socket};
use crate::pki;
use crate::program::{ListenTls, UpstreamTls};

/// The service the lab's workload stands for, as a cluster's name and a request's host know it.
pub const SERVICE: &str = "backend.default.svc.cluster.local";

/// Istio's ALPN for mutual TLS between sidecars, as its `istio.alpn` filter sets it per
/// request: that filter is Istio's own, so the lab's Envoy offers the values statically, by
/// the protocol the hop forwards.
pub const MTLS_HTTP11_ALPN: [&str; 3] = ["istio-http/1.1", "istio", "http/1.1"];
pub const MTLS_H2_ALPN: [&str; 3] = ["istio-h2", "istio", "h2"];
/// What the inbound listener's mutual-TLS HTTP chain matches (Istio's PERMISSIVE mode).
pub const MTLS_HTTP_ALPNS: [&str; 3] = ["istio-http/1.0", "istio-http/1.1", "istio-h2"];

/// Istio's TLS 1.2 cipher suites for mutual TLS (TLS 1.3's are BoringSSL's, not configurable).
const CIPHERS: [&str; 4] = [
    "ECDHE-ECDSA-AES256-GCM-SHA384",
    "ECDHE-RSA-AES256-GCM-SHA384",
    "ECDHE-ECDSA-AES128-GCM-SHA256",
    "ECDHE-RSA-AES128-GCM-SHA256",
];

/// Every circuit-breaker limit wide open, as Istio leaves them by default.
const NO_LIMIT: u32 = u32::MAX;

pub fn secs(seconds: i64) -> Option<Duration> {
    Some(Duration { seconds, nanos: 0 })
}

fn yes(value: bool) -> Option<BoolValue> {
    Some(BoolValue { value })
}

/// Istio's listener names: `0.0.0.0_8080` for a port.
pub fn port_name(port: u16) -> String {
    listener_name(SocketAddr::from(([0, 0, 0, 0], port)))
}

/// Istio's name of a listener bound to `addr`: `127.0.0.1_8443`, `0.0.0.0_443`.
pub fn listener_name(addr: SocketAddr) -> String {
    format!("{}_{}", addr.ip(), addr.port())
}

/// The outbound cluster of a service port: `outbound|8080||backend.default.svc.cluster.local`.
pub fn outbound_cluster(port: u16) -> String {
    format!("outbound|{port}||{SERVICE}")
}

/// The inbound cluster of a port: `inbound|8080||`.
pub fn inbound_cluster(port: u16) -> String {
    format!("inbound|{port}||")
}

/// The SNI a client sidecar sends to a service port: `outbound_.8080_._.<fqdn>`.
pub fn outbound_sni(port: u16) -> String {
    format!("outbound_.{port}_._.{SERVICE}")
}

/// A listener filter of an upstream extension, by name.
fn listener_filter<M: prost::Name>(name: &str, config: M) -> ListenerFilter {
    ListenerFilter {
        name: name.into(),
        config_type: Some(listener_filter::ConfigType::TypedConfig(pack_any(config))),
        ..Default::default()
    }
}

/// Reads the ClientHello's SNI and ALPN so that filter chains can match them.
pub fn tls_inspector() -> ListenerFilter {
    listener_filter(
        "envoy.filters.listener.tls_inspector",
        TlsInspector::default(),
    )
}

/// Detects plaintext HTTP/1.x or h2c so that filter chains can match it.
pub fn http_inspector() -> ListenerFilter {
    listener_filter(
        "envoy.filters.listener.http_inspector",
        HttpInspector::default(),
    )
}

fn http_filter<M: prost::Name>(name: &str, config: M) -> HttpFilter {
    HttpFilter {
        name: name.into(),
        config_type: Some(http_filter::ConfigType::TypedConfig(pack_any(config))),
        ..Default::default()
    }
}

/// Istio's HTTP filters in its order, less its own (`istio.metadata_exchange`, `istio.alpn`,
/// `istio.stats`: contrib builds only): grpc_stats, fault, cors, router. The telemetry
/// stand-ins, when switched on, go before the router (`telemetry::add`).
pub fn http_filters() -> Vec<HttpFilter> {
    let grpc_stats = GrpcStats {
        emit_filter_state: true,
        per_method_stat_specifier: Some(filter_config::PerMethodStatSpecifier::StatsForAllMethods(
            BoolValue { value: false },
        )),
        ..Default::default()
    };
    vec![
        http_filter("envoy.filters.http.grpc_stats", grpc_stats),
        http_filter("envoy.filters.http.fault", HttpFault::default()),
        http_filter("envoy.filters.http.cors", Cors::default()),
        router(),
    ]
}

/// The router alone: what a connection manager that only forwards needs (HBONE's ends).
pub fn router() -> HttpFilter {
    http_filter("envoy.filters.http.router", Router::default())
}

/// Which side of a workload a connection manager serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Inbound,
    Outbound,
    /// The ingress gateway: traffic from outside the mesh.
    Gateway,
}

/// Istio's HTTP connection manager: codec AUTO (or the one given), UUID request ids, path
/// normalised with escaped slashes kept, no stream idle timeout, tracing at 1 % with no
/// tracer, no access log; inbound names itself `istio-envoy` and appends the client
/// certificate's details; the gateway uses the client's address and sanitises them.
pub fn connection_manager(
    stat_prefix: String,
    routes: envoy_types::pb::envoy::config::route::v3::RouteConfiguration,
    direction: Direction,
    codec: http_connection_manager::CodecType,
    filters: Vec<HttpFilter>,
) -> HttpConnectionManager {
    use http_connection_manager::{
        ForwardClientCertDetails, PathWithEscapedSlashesAction, SetCurrentClientCertDetails,
    };
    let mut hcm = HttpConnectionManager {
        stat_prefix,
        codec_type: codec as i32,
        route_specifier: Some(http_connection_manager::RouteSpecifier::RouteConfig(routes)),
        http_filters: filters,
        use_remote_address: yes(direction == Direction::Gateway),
        normalize_path: yes(true),
        path_with_escaped_slashes_action: PathWithEscapedSlashesAction::KeepUnchanged as i32,
        stream_idle_timeout: secs(0),
        request_id_extension: Some(RequestIdExtension {
            typed_config: Some(pack_any(UuidRequestIdConfig::default())),
        }),
        tracing: Some(http_connection_manager::Tracing {
            random_sampling: Some(Percent { value: 1.0 }),
            ..Default::default()
        }),
        ..Default::default()
    };
    match direction {
        Direction::Inbound => {
            hcm.server_name = "istio-envoy".into();
            hcm.forward_client_cert_details = ForwardClientCertDetails::AppendForward as i32;
            hcm.set_current_client_cert_details = Some(SetCurrentClientCertDetails {
                subject: yes(true),
                dns: true,
                uri: true,
                ..Default::default()
            });
        }
        Direction::Gateway => {
            hcm.forward_client_cert_details = ForwardClientCertDetails::SanitizeSet as i32;
        }
        Direction::Outbound => {}
    }
    hcm
}

/// Istio's default retries on a route: outbound 2 retries on connect failures, refused
/// streams, gRPC unavailable/cancelled and retriable status codes, another host each time;
/// inbound 2 retries on a reset before the request went out.
pub fn retry_policy(direction: Direction) -> RetryPolicy {
    let retry_on = match direction {
        Direction::Inbound => "reset-before-request",
        _ => "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes",
    };
    RetryPolicy {
        retry_on: retry_on.into(),
        num_retries: Some(UInt32Value { value: 2 }),
        retry_host_predicate: match direction {
            Direction::Inbound => Vec::new(),
            _ => vec![retry_policy::RetryHostPredicate {
                name: "envoy.retry_host_predicates.previous_hosts".into(),
                config_type: Some(retry_policy::retry_host_predicate::ConfigType::TypedConfig(
                    pack_any(PreviousHostsPredicate::default()),
                )),
            }],
        },
        host_selection_retry_max_attempts: match direction {
            Direction::Inbound => 0,
            _ => 5,
        },
        ..Default::default()
    }
}

/// A route to `cluster` as Istio writes one: no timeout, its retries, a decorator naming the
/// service; `path` exact (with `rewrite` as its prefix rewrite) or every path.
pub fn route(
    cluster: &str,
    path: Option<String>,
    rewrite: &str,
    direction: Direction,
    operation: String,
) -> Route {
    let specifier = match path {
        Some(p) => route_match::PathSpecifier::Path(p),
        None => route_match::PathSpecifier::Prefix("/".into()),
    };
    Route {
        r#match: Some(RouteMatch {
            path_specifier: Some(specifier),
            case_sensitive: yes(true),
            ..Default::default()
        }),
        action: Some(route::Action::Route(RouteAction {
            cluster_specifier: Some(route_action::ClusterSpecifier::Cluster(cluster.into())),
            prefix_rewrite: rewrite.into(),
            timeout: secs(0),
            retry_policy: Some(retry_policy(direction)),
            max_stream_duration: Some(route_action::MaxStreamDuration {
                max_stream_duration: secs(0),
                grpc_timeout_header_max: secs(0),
                ..Default::default()
            }),
            ..Default::default()
        })),
        decorator: Some(Decorator {
            operation,
            ..Default::default()
        }),
        name: "default".into(),
        ..Default::default()
    }
}

/// Istio's cluster defaults on a static cluster: 10 s to connect, least request (outbound),
/// every circuit-breaker limit at its maximum, no outlier detection.
pub fn with_defaults(mut cluster: Cluster, least_request: bool) -> Cluster {
    use envoy_types::pb::envoy::config::cluster::v3::cluster::LbPolicy;
    cluster.connect_timeout = secs(10);
    if least_request {
        cluster.lb_policy = LbPolicy::LeastRequest as i32;
    }
    let open = Some(UInt32Value { value: NO_LIMIT });
    cluster.circuit_breakers = Some(CircuitBreakers {
        thresholds: vec![circuit_breakers::Thresholds {
            max_connections: open,
            max_pending_requests: open,
            max_requests: open,
            max_retries: open,
            track_remaining: true,
            ..Default::default()
        }],
        ..Default::default()
    });
    cluster
}

/// An inbound cluster's source address: Istio's 127.0.0.6 where the workload is on loopback.
pub fn inbound_bind(upstream: SocketAddr) -> Option<BindConfig> {
    upstream.ip().is_loopback().then(|| BindConfig {
        source_address: Some(socket_address(
            ([127, 0, 0, 6], 0).into(),
            envoy_types::pb::envoy::config::core::v3::socket_address::Protocol::Tcp,
        )),
        ..Default::default()
    })
}

fn tls_params(min_13: bool) -> Option<TlsParameters> {
    Some(TlsParameters {
        tls_minimum_protocol_version: if min_13 {
            tls_parameters::TlsProtocol::TlSv13
        } else {
            tls_parameters::TlsProtocol::TlSv12
        } as i32,
        tls_maximum_protocol_version: tls_parameters::TlsProtocol::TlSv13 as i32,
        cipher_suites: if min_13 {
            Vec::new()
        } else {
            CIPHERS.iter().map(|c| c.to_string()).collect()
        },
        ..Default::default()
    })
}

fn san(matcher: string_matcher::MatchPattern) -> SubjectAltNameMatcher {
    SubjectAltNameMatcher {
        san_type: subject_alt_name_matcher::SanType::Uri as i32,
        matcher: Some(StringMatcher {
            match_pattern: Some(matcher),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Which TLS versions a link allows: Istio's sidecars 1.2-1.3, ztunnel's HBONE 1.3 only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Versions {
    Sidecar,
    Hbone,
}

/// The listening side of mutual TLS: the workload's certificate, a client certificate
/// required when the hop asks for one, its SPIFFE id checked to be in the trust domain.
pub fn downstream_tls(t: &ListenTls, versions: Versions, alpn: &[&str]) -> TransportSocket {
    let validation = t.client_ca.as_ref().map(|ca| {
        common_tls_context::ValidationContextType::ValidationContext(CertificateValidationContext {
            trusted_ca: file(ca),
            match_typed_subject_alt_names: vec![san(string_matcher::MatchPattern::Prefix(
                format!("spiffe://{}/", pki::TRUST_DOMAIN),
            ))],
            ..Default::default()
        })
    });
    tls_socket(DownstreamTlsContext {
        common_tls_context: Some(CommonTlsContext {
            tls_params: tls_params(versions == Versions::Hbone),
            tls_certificates: vec![TlsCertificate {
                certificate_chain: file(&t.cert),
                private_key: file(&t.key),
                ..Default::default()
            }],
            validation_context_type: validation,
            alpn_protocols: alpn.iter().map(|a| a.to_string()).collect(),
            ..Default::default()
        }),
        require_client_certificate: yes(t.client_ca.is_some()),
        ..Default::default()
    })
}

/// The connecting side of mutual TLS: the client workload's certificate, the server's SPIFFE
/// id checked exactly, Istio's SNI and ALPN.
pub fn upstream_tls(
    t: &UpstreamTls,
    versions: Versions,
    alpn: &[&str],
    sni: String,
) -> TransportSocket {
    tls_socket(UpstreamTlsContext {
        common_tls_context: Some(CommonTlsContext {
            tls_params: tls_params(versions == Versions::Hbone),
            tls_certificates: t
                .client
                .iter()
                .map(|(cert, key)| TlsCertificate {
                    certificate_chain: file(cert),
                    private_key: file(key),
                    ..Default::default()
                })
                .collect(),
            validation_context_type: Some(
                common_tls_context::ValidationContextType::ValidationContext(
                    CertificateValidationContext {
                        trusted_ca: file(&t.ca),
                        match_typed_subject_alt_names: vec![san(
                            string_matcher::MatchPattern::Exact(pki::spiffe_id(
                                pki::SERVER_ACCOUNT,
                            )),
                        )],
                        ..Default::default()
                    },
                ),
            ),
            alpn_protocols: alpn.iter().map(|a| a.to_string()).collect(),
            ..Default::default()
        }),
        sni,
        ..Default::default()
    })
}

/// Stats the lab reads from each Envoy's admin endpoint around a step (`admin.rs`: requests by
/// class, upstream failures, connections), beside Istio's inclusion list: prefixes of this
/// bootstrap's own connection managers and clusters, so that only those are created rather than
/// all of `admin::STATS_NEEDED`'s.
fn witness_patterns(stat_prefixes: &[String], clusters: &[String]) -> Vec<StringMatcher> {
    let prefix = |p: String| StringMatcher {
        match_pattern: Some(string_matcher::MatchPattern::Prefix(p)),
        ..Default::default()
    };
    let mut out = Vec::new();
    // Active connections per listener (Istio includes this suffix when it drains on zero).
    out.push(StringMatcher {
        match_pattern: Some(string_matcher::MatchPattern::Suffix(
            "downstream_cx_active".into(),
        )),
        ..Default::default()
    });
    for s in stat_prefixes {
        out.push(prefix(format!("http.{s}.downstream_rq_")));
        out.push(prefix(format!("http.{s}.downstream_cx_")));
        out.push(prefix(format!("tcp.{s}.")));
    }
    for c in clusters {
        out.push(prefix(format!("cluster.{c}.upstream_")));
    }
    out
}

/// Istio's bootstrap stats set-up: its own tag extraction instead of Envoy's defaults, and an
/// inclusion list, so that most connection manager, cluster and listener stats are never
/// created; plus what the lab's reading needs (`witness_patterns`).
pub fn stats_config(stat_prefixes: &[String], clusters: &[String]) -> StatsConfig {
    let tag = |name: &str, regex: &str| TagSpecifier {
        tag_name: name.into(),
        tag_value: Some(tag_specifier::TagValue::Regex(regex.into())),
    };
    let matcher = |p: string_matcher::MatchPattern| StringMatcher {
        match_pattern: Some(p),
        ..Default::default()
    };
    use string_matcher::MatchPattern::{Prefix, SafeRegex, Suffix};
    let mut patterns: Vec<StringMatcher> = [
        "reporter=",
        "cluster_manager",
        "listener_manager",
        "server",
        "cluster.xds-grpc",
        "wasm",
        "component",
        "istio",
    ]
    .iter()
    .map(|p| matcher(Prefix(p.to_string())))
    .collect();
    patterns.extend(
        [
            "rbac.allowed",
            "rbac.denied",
            "shadow_allowed",
            "shadow_denied",
        ]
        .iter()
        .map(|s| matcher(Suffix(s.to_string()))),
    );
    patterns.push(matcher(SafeRegex(
        envoy_types::pb::envoy::r#type::matcher::v3::RegexMatcher {
            regex: r"vhost\..*\.route\..*".into(),
            ..Default::default()
        },
    )));
    patterns.extend(witness_patterns(stat_prefixes, clusters));
    StatsConfig {
        use_all_default_tags: yes(false),
        stats_tags: vec![
            tag("cluster_name", r"^cluster(\.(.+);)"),
            tag("tcp_prefix", r"^tcp\.((.*?)\.)\w+?$"),
            tag("response_code", r"_rq(_(\d{3}))$"),
            tag("response_code_class", r"_rq(_(\dxx))$"),
        ],
        stats_matcher: Some(StatsMatcher {
            stats_matcher: Some(stats_matcher::StatsMatcher::InclusionList(
                ListStringMatcher { patterns },
            )),
        }),
        ..Default::default()
    }
}

/// The parts every bootstrap of the lab shares: a node named after the role, the admin
/// endpoint (the lab reads it after each step), Istio's stats set-up over the connection
/// managers and clusters it has.
pub fn finish(
    mut b: Bootstrap,
    role: &str,
    admin: Option<SocketAddr>,
    stat_prefixes: &[String],
) -> Bootstrap {
    let clusters: Vec<String> = b
        .static_resources
        .iter()
        .flat_map(|r| r.clusters.iter().map(|c| c.name.clone()))
        .collect();
    b.node = Some(Node {
        id: format!(
            "sidecar~127.0.0.1~{role}.{}~{}.svc.cluster.local",
            DEFAULT_NAMESPACE, DEFAULT_NAMESPACE
        ),
        cluster: format!("{role}.{}", DEFAULT_NAMESPACE),
        ..Default::default()
    });
    b.admin = admin.map(|a| Admin {
        address: Some(socket(a)),
        ..Default::default()
    });
    b.stats_config = Some(stats_config(stat_prefixes, &clusters));
    b
}

/// The bootstrap extension internal listeners need (the waypoint's).
pub fn internal_listener_extension() -> TypedExtensionConfig {
    TypedExtensionConfig {
        name: "envoy.bootstrap.internal_listener".into(),
        typed_config: Some(pack_any(
            envoy_types::pb::envoy::extensions::bootstrap::internal_listener::v3::InternalListener::default(),
        )),
    }
}

/// HTTP/2 towards a cluster's endpoints (h2c in the clear, ALPN h2 over TLS), with the
/// windows given (0: Envoy's defaults) and the stream limit given (0: unlimited).
pub fn http2_upstream(window: u32, connection_window: u32, streams: u32) -> HashMap<String, Any> {
    use envoy_types::pb::envoy::config::core::v3::Http2ProtocolOptions;
    use envoy_types::pb::envoy::extensions::upstreams::http::v3::{
        http_protocol_options, HttpProtocolOptions,
    };
    let nonzero = |v: u32| (v > 0).then_some(UInt32Value { value: v });
    let options = HttpProtocolOptions {
        upstream_protocol_options: Some(
            http_protocol_options::UpstreamProtocolOptions::ExplicitHttpConfig(
                http_protocol_options::ExplicitHttpConfig {
                    protocol_config: Some(
                        http_protocol_options::explicit_http_config::ProtocolConfig::Http2ProtocolOptions(
                            Http2ProtocolOptions {
                                initial_stream_window_size: nonzero(window),
                                initial_connection_window_size: nonzero(connection_window),
                                max_concurrent_streams: nonzero(streams),
                                ..Default::default()
                            },
                        ),
                    ),
                },
            ),
        ),
        ..Default::default()
    };
    HashMap::from([(
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions".to_string(),
        pack_any(options),
    )])
}
