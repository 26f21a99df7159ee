//! The YAML bootstraps against the real Envoy (scripts/install-envoy.sh), not against this
//! crate's own reading of them: every bootstrap meshbench builds (the hops at L7 and L4, the
//! gateway plain, over TLS, with HTTP/3 and with gRPC) and one built by hand that uses every
//! message `envoy::yaml` writes must pass `envoy --mode validate`. The TLS + HTTP/3 gateway and
//! the hand-built bootstrap are then run from their YAML and from their protobuf: each comes
//! up, its listener accepts a connection, and Envoy's own config dumps of the two are equal.
//! Without Envoy these tests fail, saying how to install it.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration as StdDuration, Instant};

use envoy_types::pb::envoy::config::accesslog::v3::{
    access_log, access_log_filter, AccessLog, AccessLogFilter, HeaderFilter,
};
use envoy_types::pb::envoy::config::bootstrap::v3::{bootstrap::StaticResources, Admin, Bootstrap};
use envoy_types::pb::envoy::config::cluster::v3::{
    circuit_breakers, cluster, CircuitBreakers, Cluster,
};
use envoy_types::pb::envoy::config::core::v3::{
    self as core_v3, address, data_source, envoy_internal_address, socket_address,
    transport_socket, Address, DataSource, EnvoyInternalAddress, SocketAddress, TransportSocket,
    TypedExtensionConfig,
};
use envoy_types::pb::envoy::config::listener::v3::{
    filter, listener, listener_filter, Filter, FilterChain, FilterChainMatch, Listener,
    ListenerFilter, QuicProtocolOptions, UdpListenerConfig,
};
use envoy_types::pb::envoy::config::metrics::v3::{
    stats_matcher, tag_specifier, StatsConfig, StatsMatcher, TagSpecifier,
};
use envoy_types::pb::envoy::config::route::v3::{
    header_matcher, retry_policy, route, route_action, route_match, Decorator, HeaderMatcher,
    RetryPolicy, Route, RouteAction, RouteConfiguration, RouteMatch, VirtualHost,
};
use envoy_types::pb::envoy::extensions::access_loggers::file::v3::{
    file_access_log, FileAccessLog,
};
use envoy_types::pb::envoy::extensions::access_loggers::stats::v3 as stats_log;
use envoy_types::pb::envoy::extensions::bootstrap::internal_listener::v3::InternalListener;
use envoy_types::pb::envoy::extensions::filters::http::{
    cors::v3::Cors, fault::v3::HttpFault, grpc_stats::v3 as grpc_stats, lua::v3::Lua,
    router::v3::Router,
};
use envoy_types::pb::envoy::extensions::filters::listener::{
    http_inspector::v3::HttpInspector, original_dst::v3::OriginalDst,
    tls_inspector::v3::TlsInspector,
};
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    http_connection_manager as hcm, http_filter, HttpConnectionManager, HttpFilter,
    RequestIdExtension,
};
use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3::{tcp_proxy, TcpProxy};
use envoy_types::pb::envoy::extensions::request_id::uuid::v3::UuidRequestIdConfig;
use envoy_types::pb::envoy::extensions::retry::host::previous_hosts::v3::PreviousHostsPredicate;
use envoy_types::pb::envoy::extensions::transport_sockets::{
    internal_upstream::v3::InternalUpstreamTransport, quic::v3::QuicDownstreamTransport,
    raw_buffer::v3::RawBuffer, tls::v3 as tls,
};
use envoy_types::pb::envoy::extensions::upstreams::http::v3::{
    http_protocol_options, HttpProtocolOptions,
};
use envoy_types::pb::envoy::r#type::matcher::v3::{
    string_matcher, ListStringMatcher, RegexMatcher, StringMatcher,
};
use envoy_types::pb::envoy::r#type::v3::{Percent, Scope};
use envoy_types::pb::google::protobuf::{BoolValue, Duration, UInt32Value};
use envoy_types::util::pack_any;
use prost::Message;
use serde_yaml_ng::Value as Yaml;

use meshbench_lab::gateway::{self, CertLayout, GatewayPlan};
use meshbench_lab::program::envoy::{self, gateway_bootstrap, hop_bootstrap, yaml::bootstrap_yaml};
use meshbench_lab::program::{Hop, ListenTls, UpstreamTls};
use meshbench_lab::{pki, Program};
use meshbench_results::{topology::Duty, Layer};

/// The Envoy binary; a test without it fails rather than passes.
fn envoy() -> PathBuf {
    meshbench_lab::install::find("envoy", &[])
        .unwrap_or_else(|| panic!("Envoy is not installed: run scripts/install-envoy.sh"))
}

/// A fresh directory for one test's files, removed when the test passes.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("meshbench-yaml-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// Writes `NAME.yaml` and has Envoy validate it; panics with Envoy's words and the YAML.
fn validate(dir: &Path, name: &str, b: &Bootstrap) -> PathBuf {
    let yaml = bootstrap_yaml(b).unwrap_or_else(|e| panic!("{name}: {e}"));
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, &yaml).unwrap();
    let out = Command::new(envoy())
        .args(["--mode", "validate", "--log-level", "warn", "--config-path"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "envoy rejects {name}.yaml ({}):\n{}{}\n--- {}:\n{yaml}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        path.display(),
    );
    path
}

fn hop(dir: &Path, layer: Layer) -> Hop {
    Hop {
        name: "waypoint".into(),
        duty: Duty::Waypoint,
        layer,
        listen: "127.0.0.1:9001".parse().unwrap(),
        listen_tls: Some(ListenTls {
            cert: dir.join("server.pem"),
            key: dir.join("server-key.pem"),
            client_ca: Some(dir.join("ca.pem")),
        }),
        upstream: "127.0.0.1:9002".parse().unwrap(),
        upstream_tls: Some(UpstreamTls {
            ca: dir.join("ca.pem"),
            server_name: "mesh.local".into(),
            client: Some((dir.join("client.pem"), dir.join("client-key.pem"))),
        }),
        http2: false,
        grpc: false,
        http3: false,
        workers: 1,
        dir: dir.to_path_buf(),
        destination: "127.0.0.1:9003".parse().unwrap(),
        hbone_in: false,
        hbone_out: false,
        admin: None,
        istio_telemetry: false,
        access_log: None,
    }
}

#[test]
fn envoy_accepts_the_hop_bootstraps_as_yaml() {
    let s = Scratch::new("hops");
    pki::write_lab_set(&s.0, &["mesh.local".to_string()]).unwrap();
    // Every part the lab's Envoy plays, with and without mutual TLS, HTTP/1.1 and gRPC.
    let parts = [
        (Duty::ClientSidecar, Layer::L7, false),
        (Duty::ServerSidecar, Layer::L7, false),
        (Duty::Waypoint, Layer::L7, false),
        (Duty::Waypoint, Layer::L7, true),
        (Duty::ClientTunnel, Layer::L4, true),
        (Duty::ServerTunnel, Layer::L4, true),
    ];
    for (part, layer, hbone) in parts {
        for (tls, grpc) in [(true, false), (true, true), (false, false)] {
            let mut h = hop(&s.0, layer);
            h.duty = part;
            h.hbone_in = hbone && matches!(part, Duty::ServerTunnel | Duty::Waypoint);
            h.hbone_out = hbone && matches!(part, Duty::ClientTunnel | Duty::Waypoint);
            (h.grpc, h.http2) = (grpc, grpc);
            h.istio_telemetry = tls;
            // Attribution's log on the L7 parts, half of the time.
            if layer == Layer::L7 && tls {
                h.access_log = Some(s.0.join(format!("{part:?}-{grpc}.access.log")));
            }
            if !tls {
                (h.listen_tls, h.upstream_tls) = (None, None);
            }
            let name = format!("{part:?}-hbone{hbone}-tls{tls}-grpc{grpc}");
            validate(&s.0, &name, &hop_bootstrap(&h));
        }
    }
}

fn plan(dir: &Path, listen: SocketAddr) -> GatewayPlan {
    GatewayPlan {
        domains: 3,
        paths: 4,
        tls: true,
        http2: true,
        http3: false,
        grpc: false,
        certs: CertLayout::PerDomain,
        backends: vec!["127.0.0.1:9000".parse().unwrap()],
        listen,
        workers: 1,
        admin: None,
        out: dir.to_path_buf(),
        access_log: None,
        listeners_file: false,
        rotated: Default::default(),
    }
}

/// The plan's certificates and files, as `meshbench gen gateway envoy` writes them.
fn generated(p: GatewayPlan) -> GatewayPlan {
    gateway::generate(&p, &Program::Envoy).unwrap();
    p
}

/// A named change to the gateway plan.
type Variant = (&'static str, fn(&mut GatewayPlan));

#[test]
fn envoy_accepts_the_gateway_bootstraps_as_yaml() {
    let s = Scratch::new("gateways");
    let listen = "127.0.0.1:8443".parse().unwrap();
    let variants: [Variant; 5] = [
        ("plain", |p: &mut GatewayPlan| p.tls = false),
        ("tls", |_: &mut GatewayPlan| {}),
        ("tls-attribution", |p: &mut GatewayPlan| {
            p.access_log = Some(p.out.join("gateway.access.log"))
        }),
        ("tls-http3", |p: &mut GatewayPlan| p.http3 = true),
        ("grpc-shared-http3", |p: &mut GatewayPlan| {
            (p.grpc, p.http3, p.certs) = (true, true, CertLayout::Shared)
        }),
    ];
    for (name, change) in variants {
        let mut p = plan(&s.0.join(name), listen);
        change(&mut p);
        let p = generated(p);
        validate(&s.0, name, &gateway_bootstrap(&p));
    }
}

/// A port free on 127.0.0.1 for both TCP and UDP (the HTTP/3 listener shares it).
fn free_port() -> u16 {
    loop {
        let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = tcp.local_addr().unwrap().port();
        if UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// A GET to Envoy's admin endpoint: the body, or why not.
fn admin_get(admin: SocketAddr, path: &str) -> Result<String, String> {
    let mut conn = TcpStream::connect_timeout(&admin, StdDuration::from_millis(500))
        .map_err(|e| e.to_string())?;
    write!(
        conn,
        "GET {path} HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut response = String::new();
    conn.read_to_string(&mut response)
        .map_err(|e| e.to_string())?;
    match response.split_once("\r\n\r\n") {
        Some((head, body)) if head.starts_with("HTTP/1.1 200") => {
            if head
                .to_ascii_lowercase()
                .contains("transfer-encoding: chunked")
            {
                Ok(dechunk(body))
            } else {
                Ok(body.to_string())
            }
        }
        _ => Err(format!("GET {path}: {response}")),
    }
}

/// A chunked HTTP/1.1 body, joined.
fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if size == 0 || rest.len() < size {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
    out
}

/// Envoy started on `config`, once its listener at `listen` accepts a connection and its admin
/// endpoint says LIVE: its configuration as it dumps it (JSON, read as YAML), less the load
/// times. Envoy is stopped before this returns; a failure to come up panics with Envoy's log.
fn run_and_dump(config: &Path, listen: SocketAddr, admin: SocketAddr, base_id: u32) -> Yaml {
    let mut child = Command::new(envoy())
        .arg("--config-path")
        .arg(config)
        .args([
            "--disable-hot-restart",
            "--concurrency",
            "1",
            "--log-level",
            "warn",
        ])
        .args(["--base-id", &base_id.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let dump = loop {
        let accepts = TcpStream::connect_timeout(&listen, StdDuration::from_millis(200)).is_ok();
        if accepts && admin_get(admin, "/ready").is_ok_and(|b| b.contains("LIVE")) {
            break admin_get(admin, "/config_dump");
        }
        if let Some(status) = child.try_wait().unwrap() {
            break Err(format!("envoy exited ({status})"));
        }
        if started.elapsed() > StdDuration::from_secs(30) {
            break Err("not up within 30 s".to_string());
        }
        std::thread::sleep(StdDuration::from_millis(100));
    };
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    match dump {
        Ok(dump) => {
            let mut dump = serde_yaml_ng::from_str(&dump).unwrap();
            without_load_times(&mut dump);
            dump
        }
        Err(why) => panic!(
            "envoy on {}: {why}\n{}",
            config.display(),
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// Envoy run from the YAML of `b` and then from its protobuf (with an admin endpoint added):
/// both come up, their listener at `listen` accepts a connection, and Envoy's own dumps of
/// what it loaded are the same. The YAML means what the protobuf means, as Envoy reads both (no
/// decoding of ours in between). Returns the dump.
fn runs_the_same(dir: &Path, name: &str, mut b: Bootstrap, listen: SocketAddr) -> String {
    let admin = free_port();
    b.admin = Some(Admin {
        address: tcp(u32::from(admin)),
        ..Default::default()
    });
    let admin: SocketAddr = format!("127.0.0.1:{admin}").parse().unwrap();
    let yaml = validate(dir, name, &b);
    let pb = dir.join(format!("{name}.pb"));
    std::fs::write(&pb, b.encode_to_vec()).unwrap();
    let base_id = std::process::id() % 60_000 + 1000;
    let from_yaml = run_and_dump(&yaml, listen, admin, base_id);
    let from_pb = run_and_dump(&pb, listen, admin, base_id + 1);
    let text = serde_yaml_ng::to_string(&from_yaml).unwrap();
    if from_yaml != from_pb {
        let (a, b) = (dir.join("dump-yaml.yaml"), dir.join("dump-pb.yaml"));
        std::fs::write(&a, text).unwrap();
        std::fs::write(&b, serde_yaml_ng::to_string(&from_pb).unwrap()).unwrap();
        panic!(
            "Envoy loads {name} from YAML and from protobuf differently: compare {} and {}",
            a.display(),
            b.display()
        );
    }
    text
}

#[test]
fn envoy_runs_the_tls_http3_gateway_from_its_yaml_as_from_its_protobuf() {
    let s = Scratch::new("run");
    let listen: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut p = plan(&s.0, listen);
    p.http3 = true;
    let p = generated(p);
    let dump = runs_the_same(&s.0, "gateway", gateway_bootstrap(&p), listen);
    let quic = format!("name: 0.0.0.0_{}_quic", listen.port());
    for wanted in [quic.as_str(), "workspace-1-domain-3.com", "/get/4"] {
        assert!(dump.contains(wanted), "no {wanted} in\n{dump}");
    }
}

/// A config dump, comparable: without `last_updated` (when Envoy loaded a resource), and with
/// each `static_*` list of resources sorted (Envoy dumps them in hash-map order).
fn without_load_times(v: &mut Yaml) {
    match v {
        Yaml::Mapping(m) => {
            m.remove("last_updated");
            for (k, v) in m.iter_mut() {
                without_load_times(v);
                if let (Some(k), Yaml::Sequence(list)) = (k.as_str(), v) {
                    if k.starts_with("static_") {
                        list.sort_by_cached_key(|r| serde_yaml_ng::to_string(r).unwrap());
                    }
                }
            }
        }
        Yaml::Sequence(s) => s.iter_mut().for_each(without_load_times),
        _ => {}
    }
}

// What follows builds, by hand, a bootstrap that uses every message the YAML module writes.

fn secs(seconds: i64) -> Option<Duration> {
    Some(Duration { seconds, nanos: 0 })
}

fn millis(ms: i64) -> Option<Duration> {
    Some(Duration {
        seconds: ms / 1000,
        nanos: (ms % 1000) as i32 * 1_000_000,
    })
}

fn u32v(value: u32) -> Option<UInt32Value> {
    Some(UInt32Value { value })
}

fn yes() -> Option<BoolValue> {
    Some(BoolValue { value: true })
}

fn file(path: &Path) -> Option<DataSource> {
    Some(DataSource {
        specifier: Some(data_source::Specifier::Filename(path.display().to_string())),
        ..Default::default()
    })
}

fn inline(text: &str) -> Option<DataSource> {
    Some(DataSource {
        specifier: Some(data_source::Specifier::InlineString(text.into())),
        ..Default::default()
    })
}

fn sock(protocol: socket_address::Protocol, ip: &str, port: u32) -> SocketAddress {
    SocketAddress {
        protocol: protocol as i32,
        address: ip.into(),
        port_specifier: Some(socket_address::PortSpecifier::PortValue(port)),
        ..Default::default()
    }
}

fn tcp(port: u32) -> Option<Address> {
    Some(Address {
        address: Some(address::Address::SocketAddress(sock(
            socket_address::Protocol::Tcp,
            "127.0.0.1",
            port,
        ))),
    })
}

fn socket<M: prost::Name + prost::Message>(name: &str, config: M) -> Option<TransportSocket> {
    Some(TransportSocket {
        name: name.into(),
        config_type: Some(transport_socket::ConfigType::TypedConfig(pack_any(config))),
    })
}

fn network_filter<M: prost::Name + prost::Message>(name: &str, config: M) -> Filter {
    Filter {
        name: name.into(),
        config_type: Some(filter::ConfigType::TypedConfig(pack_any(config))),
    }
}

fn listener_filter<M: prost::Name + prost::Message>(name: &str, config: M) -> ListenerFilter {
    ListenerFilter {
        name: name.into(),
        config_type: Some(listener_filter::ConfigType::TypedConfig(pack_any(config))),
        ..Default::default()
    }
}

fn http_filter<M: prost::Name + prost::Message>(name: &str, config: M) -> HttpFilter {
    HttpFilter {
        name: name.into(),
        config_type: Some(http_filter::ConfigType::TypedConfig(pack_any(config))),
        ..Default::default()
    }
}

fn access_log<M: prost::Name + prost::Message>(name: &str, config: M) -> AccessLog {
    AccessLog {
        name: name.into(),
        config_type: Some(access_log::ConfigType::TypedConfig(pack_any(config))),
        ..Default::default()
    }
}

fn tcp_proxy_to(cluster: &str) -> Filter {
    network_filter(
        "envoy.filters.network.tcp_proxy",
        TcpProxy {
            stat_prefix: format!("to_{cluster}"),
            cluster_specifier: Some(tcp_proxy::ClusterSpecifier::Cluster(cluster.into())),
            ..Default::default()
        },
    )
}

fn common_tls(dir: &Path, cert: &str, alpn: &[&str]) -> tls::CommonTlsContext {
    tls::CommonTlsContext {
        tls_params: Some(tls::TlsParameters {
            tls_minimum_protocol_version: tls::tls_parameters::TlsProtocol::TlSv12 as i32,
            tls_maximum_protocol_version: tls::tls_parameters::TlsProtocol::TlSv13 as i32,
            cipher_suites: vec![
                "ECDHE-ECDSA-AES128-GCM-SHA256".into(),
                "ECDHE-ECDSA-CHACHA20-POLY1305".into(),
            ],
            ecdh_curves: vec!["X25519".into(), "P-256".into()],
            ..Default::default()
        }),
        tls_certificates: vec![tls::TlsCertificate {
            certificate_chain: file(&dir.join(format!("{cert}.pem"))),
            private_key: file(&dir.join(format!("{cert}-key.pem"))),
            ..Default::default()
        }],
        validation_context_type: Some(
            tls::common_tls_context::ValidationContextType::ValidationContext(
                tls::CertificateValidationContext {
                    trusted_ca: file(&dir.join("ca.pem")),
                    match_typed_subject_alt_names: vec![tls::SubjectAltNameMatcher {
                        san_type: tls::subject_alt_name_matcher::SanType::Dns as i32,
                        matcher: Some(exact(if cert == "server" {
                            "meshbench-client"
                        } else {
                            "mesh.local"
                        })),
                        ..Default::default()
                    }],
                    ..Default::default()
                },
            ),
        ),
        alpn_protocols: alpn.iter().map(|a| a.to_string()).collect(),
        ..Default::default()
    }
}

fn downstream_tls(dir: &Path, alpn: &[&str]) -> tls::DownstreamTlsContext {
    tls::DownstreamTlsContext {
        common_tls_context: Some(common_tls(dir, "server", alpn)),
        require_client_certificate: yes(),
        ..Default::default()
    }
}

fn exact(s: &str) -> StringMatcher {
    matcher(string_matcher::MatchPattern::Exact(s.into()), false)
}

fn matcher(pattern: string_matcher::MatchPattern, ignore_case: bool) -> StringMatcher {
    StringMatcher {
        match_pattern: Some(pattern),
        ignore_case,
    }
}

fn to_cluster(cluster: &str) -> route_action::ClusterSpecifier {
    route_action::ClusterSpecifier::Cluster(cluster.into())
}

fn routes() -> RouteConfiguration {
    let route = |name: &str, path: route_match::PathSpecifier, action: RouteAction| Route {
        name: name.into(),
        r#match: Some(RouteMatch {
            path_specifier: Some(path),
            ..Default::default()
        }),
        action: Some(route::Action::Route(action)),
        ..Default::default()
    };
    let mut api = route(
        "api",
        route_match::PathSpecifier::Prefix("/api/".into()),
        RouteAction {
            cluster_specifier: Some(to_cluster("upstream")),
            prefix_rewrite: "/".into(),
            timeout: secs(15),
            retry_policy: Some(RetryPolicy {
                retry_on: "5xx,reset,connect-failure,retriable-status-codes".into(),
                num_retries: u32v(2),
                retry_host_predicate: vec![retry_policy::RetryHostPredicate {
                    name: "envoy.retry_host_predicates.previous_hosts".into(),
                    config_type: Some(retry_policy::retry_host_predicate::ConfigType::TypedConfig(
                        pack_any(PreviousHostsPredicate::default()),
                    )),
                }],
                host_selection_retry_max_attempts: 3,
                retriable_status_codes: vec![503, 504],
                ..Default::default()
            }),
            max_stream_duration: Some(route_action::MaxStreamDuration {
                max_stream_duration: secs(60),
                grpc_timeout_header_max: secs(30),
                ..Default::default()
            }),
            ..Default::default()
        },
    );
    api.r#match.as_mut().unwrap().case_sensitive = Some(BoolValue { value: false });
    api.decorator = Some(Decorator {
        operation: "api".into(),
        ..Default::default()
    });
    let host = VirtualHost {
        name: "mesh".into(),
        domains: vec!["*".into()],
        routes: vec![
            route(
                "connect",
                route_match::PathSpecifier::ConnectMatcher(Default::default()),
                RouteAction {
                    cluster_specifier: Some(to_cluster("upstream")),
                    upgrade_configs: vec![route_action::UpgradeConfig {
                        upgrade_type: "CONNECT".into(),
                        connect_config: Some(Default::default()),
                        ..Default::default()
                    }],
                    ..Default::default()
                },
            ),
            api,
            route(
                "health",
                route_match::PathSpecifier::Path("/health".into()),
                RouteAction {
                    cluster_specifier: Some(to_cluster("internal")),
                    ..Default::default()
                },
            ),
            route(
                "versioned",
                route_match::PathSpecifier::SafeRegex(RegexMatcher {
                    regex: "^/v[0-9]+/.*".into(),
                    ..Default::default()
                }),
                RouteAction {
                    cluster_specifier: Some(to_cluster("plain")),
                    idle_timeout: millis(1500),
                    ..Default::default()
                },
            ),
            route(
                "rest",
                route_match::PathSpecifier::Prefix("/".into()),
                RouteAction {
                    cluster_specifier: Some(to_cluster("upstream")),
                    ..Default::default()
                },
            ),
        ],
        include_request_attempt_count: true,
        ..Default::default()
    };
    RouteConfiguration {
        name: "mesh".into(),
        virtual_hosts: vec![host],
        validate_clusters: yes(),
        ..Default::default()
    }
}

/// An HTTP connection manager with every field and filter the parallel Envoy work uses.
fn full_hcm(codec: hcm::CodecType) -> HttpConnectionManager {
    let stats_logger = stats_log::Config {
        stats_scope: Some(Scope {
            prefix: "meshbench_access".into(),
            ..Default::default()
        }),
        counters: vec![stats_log::config::Counter {
            stat: Some(stats_log::config::Stat {
                name: "meshbench_requests".into(),
                tags: vec![stats_log::config::Tag {
                    name: "status".into(),
                    value_format: "%RESPONSE_CODE%".into(),
                    ..Default::default()
                }],
            }),
            value_fixed: Some(envoy_types::pb::google::protobuf::UInt64Value { value: 1 }),
            ..Default::default()
        }],
        histograms: vec![stats_log::config::Histogram {
            stat: Some(stats_log::config::Stat {
                name: "meshbench_duration".into(),
                ..Default::default()
            }),
            unit: stats_log::config::histogram::Unit::Milliseconds as i32,
            value_format: "%DURATION%".into(),
        }],
        ..Default::default()
    };
    HttpConnectionManager {
        codec_type: codec as i32,
        stat_prefix: "ingress".into(),
        route_specifier: Some(hcm::RouteSpecifier::RouteConfig(routes())),
        http_filters: vec![
            http_filter(
                "envoy.filters.http.grpc_stats",
                grpc_stats::FilterConfig {
                    emit_filter_state: true,
                    per_method_stat_specifier: Some(
                        grpc_stats::filter_config::PerMethodStatSpecifier::StatsForAllMethods(
                            BoolValue { value: true },
                        ),
                    ),
                    ..Default::default()
                },
            ),
            http_filter("envoy.filters.http.fault", HttpFault::default()),
            http_filter("envoy.filters.http.cors", Cors::default()),
            http_filter(
                "envoy.filters.http.lua",
                Lua {
                    default_source_code: inline(
                        "function envoy_on_request(handle)\n  handle:headers():add(\"x-mesh\", \"1\")\nend\n",
                    ),
                    ..Default::default()
                },
            ),
            http_filter("envoy.filters.http.router", Router::default()),
        ],
        tracing: Some(hcm::Tracing {
            random_sampling: Some(Percent { value: 10.0 }),
            ..Default::default()
        }),
        common_http_protocol_options: Some(core_v3::HttpProtocolOptions {
            idle_timeout: secs(3600),
            max_connection_duration: millis(900_500),
            ..Default::default()
        }),
        http_protocol_options: Some(core_v3::Http1ProtocolOptions {
            accept_http_10: true,
            ..Default::default()
        }),
        http2_protocol_options: Some(core_v3::Http2ProtocolOptions {
            allow_connect: true,
            max_concurrent_streams: u32v(100),
            initial_stream_window_size: u32v(65_536),
            initial_connection_window_size: u32v(1_048_576),
            ..Default::default()
        }),
        http3_protocol_options: Some(Default::default()),
        server_name: "meshbench".into(),
        stream_idle_timeout: secs(300),
        delayed_close_timeout: millis(500),
        access_log: vec![
            AccessLog {
                // Only requests that carry an id, as attribution's log filters them.
                filter: Some(AccessLogFilter {
                    filter_specifier: Some(access_log_filter::FilterSpecifier::HeaderFilter(
                        HeaderFilter {
                            header: Some(HeaderMatcher {
                                name: "x-request-id".into(),
                                header_match_specifier: Some(
                                    header_matcher::HeaderMatchSpecifier::StringMatch(
                                        StringMatcher {
                                            match_pattern: Some(
                                                string_matcher::MatchPattern::Prefix("mb".into()),
                                            ),
                                            ..Default::default()
                                        },
                                    ),
                                ),
                                ..Default::default()
                            }),
                        },
                    )),
                }),
                ..access_log(
                "envoy.access_loggers.file",
                FileAccessLog {
                    path: "/dev/stdout".into(),
                    access_log_format: Some(file_access_log::AccessLogFormat::LogFormat(
                        core_v3::SubstitutionFormatString {
                            format: Some(
                                core_v3::substitution_format_string::Format::TextFormatSource(
                                    inline("%START_TIME% %REQ(:PATH)% %RESPONSE_CODE%\n").unwrap(),
                                ),
                            ),
                            ..Default::default()
                        },
                    )),
                },
            )
            },
            access_log("envoy.access_loggers.stats", stats_logger),
        ],
        use_remote_address: yes(),
        internal_address_config: Some(hcm::InternalAddressConfig {
            cidr_ranges: vec![core_v3::CidrRange {
                address_prefix: "127.0.0.0".into(),
                prefix_len: u32v(8),
            }],
            ..Default::default()
        }),
        generate_request_id: yes(),
        preserve_external_request_id: true,
        forward_client_cert_details: hcm::ForwardClientCertDetails::SanitizeSet as i32,
        set_current_client_cert_details: Some(hcm::SetCurrentClientCertDetails {
            subject: yes(),
            dns: true,
            uri: true,
            ..Default::default()
        }),
        upgrade_configs: vec![
            hcm::UpgradeConfig {
                upgrade_type: "websocket".into(),
                enabled: yes(),
                ..Default::default()
            },
            hcm::UpgradeConfig {
                upgrade_type: "CONNECT".into(),
                ..Default::default()
            },
        ],
        normalize_path: yes(),
        merge_slashes: true,
        path_with_escaped_slashes_action: hcm::PathWithEscapedSlashesAction::UnescapeAndRedirect
            as i32,
        request_id_extension: Some(RequestIdExtension {
            typed_config: Some(pack_any(UuidRequestIdConfig {
                pack_trace_reason: Some(BoolValue { value: false }),
                ..Default::default()
            })),
        }),
        stream_error_on_invalid_http_message: Some(BoolValue { value: false }),
        ..Default::default()
    }
}

fn static_cluster(name: &str, address: Address) -> Cluster {
    Cluster {
        connect_timeout: millis(250),
        ..envoy::static_cluster_at(name, address)
    }
}

/// `ports`: the TLS ingress (TCP, and UDP for QUIC), the tunnel and the outbound listener.
fn kitchen_sink(dir: &Path, ports: [u32; 3]) -> Bootstrap {
    let [ingress_port, tunnel_port, outbound_port] = ports;
    let thresholds = |priority: core_v3::RoutingPriority, n: u32| circuit_breakers::Thresholds {
        priority: priority as i32,
        max_connections: u32v(n),
        max_pending_requests: u32v(n),
        max_requests: u32v(n),
        max_retries: u32v(3),
        track_remaining: true,
        ..Default::default()
    };
    let mut upstream = static_cluster("upstream", tcp(9002).unwrap());
    upstream.lb_policy = cluster::LbPolicy::LeastRequest as i32;
    upstream.per_connection_buffer_limit_bytes = u32v(65_536);
    upstream.circuit_breakers = Some(CircuitBreakers {
        thresholds: vec![
            thresholds(core_v3::RoutingPriority::Default, 1000),
            thresholds(core_v3::RoutingPriority::High, 100),
        ],
        ..Default::default()
    });
    upstream.transport_socket = socket(
        "envoy.transport_sockets.tls",
        tls::UpstreamTlsContext {
            common_tls_context: Some(common_tls(dir, "client", &["h2"])),
            sni: "mesh.local".into(),
            ..Default::default()
        },
    );
    upstream.typed_extension_protocol_options = [(
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions".to_string(),
        pack_any(HttpProtocolOptions {
            common_http_protocol_options: Some(core_v3::HttpProtocolOptions {
                idle_timeout: secs(60),
                max_connection_duration: secs(600),
                ..Default::default()
            }),
            upstream_protocol_options: Some(
                http_protocol_options::UpstreamProtocolOptions::ExplicitHttpConfig(
                    http_protocol_options::ExplicitHttpConfig {
                        protocol_config: Some(
                            http_protocol_options::explicit_http_config::ProtocolConfig::Http2ProtocolOptions(
                                core_v3::Http2ProtocolOptions {
                                    max_concurrent_streams: u32v(100),
                                    ..Default::default()
                                },
                            ),
                        ),
                    },
                ),
            ),
            ..Default::default()
        }),
    )]
    .into();
    upstream.upstream_bind_config = Some(core_v3::BindConfig {
        source_address: Some(sock(socket_address::Protocol::Tcp, "127.0.0.1", 0)),
        ..Default::default()
    });
    upstream.common_lb_config = Some(cluster::CommonLbConfig {
        healthy_panic_threshold: Some(Percent { value: 50.0 }),
        ..Default::default()
    });

    let mut plain = static_cluster("plain", tcp(9003).unwrap());
    plain.typed_extension_protocol_options = [(
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions".to_string(),
        pack_any(HttpProtocolOptions {
            upstream_protocol_options: Some(
                http_protocol_options::UpstreamProtocolOptions::ExplicitHttpConfig(
                    http_protocol_options::ExplicitHttpConfig {
                        protocol_config: Some(
                            http_protocol_options::explicit_http_config::ProtocolConfig::HttpProtocolOptions(
                                Default::default(),
                            ),
                        ),
                    },
                ),
            ),
            ..Default::default()
        }),
    )]
    .into();

    let mut internal = static_cluster(
        "internal",
        Address {
            address: Some(address::Address::EnvoyInternalAddress(
                EnvoyInternalAddress {
                    address_name_specifier: Some(
                        envoy_internal_address::AddressNameSpecifier::ServerListenerName(
                            "internal".into(),
                        ),
                    ),
                    ..Default::default()
                },
            )),
        },
    );
    internal.transport_socket = socket(
        "envoy.transport_sockets.internal_upstream",
        InternalUpstreamTransport {
            transport_socket: socket("envoy.transport_sockets.raw_buffer", RawBuffer {}),
            ..Default::default()
        },
    );

    let original = Cluster {
        name: "original".into(),
        cluster_discovery_type: Some(cluster::ClusterDiscoveryType::Type(
            cluster::DiscoveryType::OriginalDst as i32,
        )),
        connect_timeout: secs(1),
        lb_policy: cluster::LbPolicy::ClusterProvided as i32,
        cleanup_interval: secs(5),
        ..Default::default()
    };

    let ingress = Listener {
        name: "ingress".into(),
        address: tcp(ingress_port),
        listener_filters: vec![
            listener_filter(
                "envoy.filters.listener.tls_inspector",
                TlsInspector::default(),
            ),
            listener_filter(
                "envoy.filters.listener.http_inspector",
                HttpInspector::default(),
            ),
        ],
        listener_filters_timeout: secs(5),
        continue_on_listener_filters_timeout: true,
        per_connection_buffer_limit_bytes: u32v(32_768),
        traffic_direction: core_v3::TrafficDirection::Inbound as i32,
        filter_chains: vec![FilterChain {
            name: "mtls".into(),
            filter_chain_match: Some(FilterChainMatch {
                destination_port: u32v(ingress_port),
                server_names: vec!["mesh.local".into()],
                transport_protocol: "tls".into(),
                application_protocols: vec!["h2".into(), "http/1.1".into()],
                ..Default::default()
            }),
            filters: vec![network_filter(
                "envoy.filters.network.http_connection_manager",
                full_hcm(hcm::CodecType::Auto),
            )],
            transport_socket: socket(
                "envoy.transport_sockets.tls",
                downstream_tls(dir, &["h2", "http/1.1"]),
            ),
            transport_socket_connect_timeout: secs(10),
            ..Default::default()
        }],
        default_filter_chain: Some(FilterChain {
            filters: vec![tcp_proxy_to("plain")],
            ..Default::default()
        }),
        ..Default::default()
    };

    let tunnel = Listener {
        name: "tunnel".into(),
        address: tcp(tunnel_port),
        filter_chains: vec![FilterChain {
            filters: vec![network_filter(
                "envoy.filters.network.tcp_proxy",
                TcpProxy {
                    stat_prefix: "tunnel".into(),
                    cluster_specifier: Some(tcp_proxy::ClusterSpecifier::Cluster(
                        "upstream".into(),
                    )),
                    tunneling_config: Some(tcp_proxy::TunnelingConfig {
                        hostname: "127.0.0.1:9003".into(),
                        headers_to_add: vec![core_v3::HeaderValueOption {
                            header: Some(core_v3::HeaderValue {
                                key: "x-meshbench".into(),
                                value: "tunnel".into(),
                                ..Default::default()
                            }),
                            ..Default::default()
                        }],
                        ..Default::default()
                    }),
                    idle_timeout: secs(3600),
                    max_connect_attempts: u32v(2),
                    ..Default::default()
                },
            )],
            ..Default::default()
        }],
        ..Default::default()
    };

    let internal_listener = Listener {
        name: "internal".into(),
        listener_specifier: Some(listener::ListenerSpecifier::InternalListener(
            Default::default(),
        )),
        filter_chains: vec![FilterChain {
            filters: vec![tcp_proxy_to("plain")],
            ..Default::default()
        }],
        ..Default::default()
    };

    let outbound = Listener {
        name: "outbound".into(),
        address: tcp(outbound_port),
        use_original_dst: yes(),
        listener_filters: vec![listener_filter(
            "envoy.filters.listener.original_dst",
            OriginalDst::default(),
        )],
        traffic_direction: core_v3::TrafficDirection::Outbound as i32,
        filter_chains: vec![FilterChain {
            filters: vec![tcp_proxy_to("original")],
            ..Default::default()
        }],
        ..Default::default()
    };

    let quic = Listener {
        name: "quic".into(),
        address: Some(Address {
            address: Some(address::Address::SocketAddress(sock(
                socket_address::Protocol::Udp,
                "127.0.0.1",
                ingress_port,
            ))),
        }),
        udp_listener_config: Some(UdpListenerConfig {
            quic_options: Some(QuicProtocolOptions {
                idle_timeout: secs(60),
                ..Default::default()
            }),
            ..Default::default()
        }),
        filter_chains: vec![FilterChain {
            filters: vec![network_filter(
                "envoy.filters.network.http_connection_manager",
                full_hcm(hcm::CodecType::Http3),
            )],
            transport_socket: socket(
                "envoy.transport_sockets.quic",
                QuicDownstreamTransport {
                    downstream_tls_context: Some(downstream_tls(dir, &["h3"])),
                    ..Default::default()
                },
            ),
            ..Default::default()
        }],
        ..Default::default()
    };

    let patterns = vec![
        exact("cluster.upstream.upstream_rq_total"),
        matcher(
            string_matcher::MatchPattern::Prefix("http.ingress.".into()),
            false,
        ),
        matcher(
            string_matcher::MatchPattern::Suffix(".upstream_cx_active".into()),
            false,
        ),
        matcher(
            string_matcher::MatchPattern::SafeRegex(RegexMatcher {
                regex: "^listener\\..*downstream_cx_total$".into(),
                ..Default::default()
            }),
            false,
        ),
        matcher(
            string_matcher::MatchPattern::Contains("MESHBENCH".into()),
            true,
        ),
    ];
    Bootstrap {
        node: Some(core_v3::Node {
            id: "kitchen-sink".into(),
            cluster: "meshbench".into(),
            ..Default::default()
        }),
        static_resources: Some(StaticResources {
            listeners: vec![ingress, tunnel, internal_listener, outbound, quic],
            clusters: vec![upstream, plain, internal, original],
            ..Default::default()
        }),
        stats_config: Some(StatsConfig {
            use_all_default_tags: Some(BoolValue { value: false }),
            stats_tags: vec![TagSpecifier {
                tag_name: "meshbench_role".into(),
                tag_value: Some(tag_specifier::TagValue::Regex(
                    "^meshbench\\.((.+?)\\.)".into(),
                )),
            }],
            stats_matcher: Some(StatsMatcher {
                stats_matcher: Some(stats_matcher::StatsMatcher::InclusionList(
                    ListStringMatcher { patterns },
                )),
            }),
            ..Default::default()
        }),
        bootstrap_extensions: vec![TypedExtensionConfig {
            name: "envoy.bootstrap.internal_listener".into(),
            typed_config: Some(pack_any(InternalListener::default())),
        }],
        ..Default::default()
    }
}

#[test]
fn envoy_runs_a_bootstrap_using_every_message_the_yaml_writes_as_from_its_protobuf() {
    let s = Scratch::new("kitchen-sink");
    pki::write_lab_set(&s.0, &["mesh.local".to_string()]).unwrap();
    let ports = [free_port(), free_port(), free_port()].map(u32::from);
    let ingress = format!("127.0.0.1:{}", ports[0]).parse().unwrap();
    let dump = runs_the_same(&s.0, "kitchen-sink", kitchen_sink(&s.0, ports), ingress);
    assert!(dump.contains("envoy.filters.http.lua"), "{dump}");
    // A few lines a reader looks for, as Envoy's own examples write them.
    let text = std::fs::read_to_string(s.0.join("kitchen-sink.yaml")).unwrap();
    for line in [
        "type: STATIC",
        "lb_policy: LEAST_REQUEST",
        "tls_minimum_protocol_version: TLSv1_2",
        "connect_timeout: 0.250s",
        "'@type': type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
        "connect_matcher: {}",
        "internal_listener: {}",
        "require_client_certificate: true",
    ] {
        assert!(text.contains(line), "no {line:?} in\n{text}");
    }
}
