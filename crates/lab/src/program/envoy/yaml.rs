//! The bootstrap as YAML: a readable copy, beside the binary one, of what Envoy runs, in the
//! form `envoy --config-path file.yaml` reads (the proto3 JSON mapping written as YAML).
//!
//! envoy-types exposes neither serde nor descriptors, so each message meshbench builds says here,
//! in one line of a macro, which of its fields are written and in what order (the proto's).
//! The mapping follows proto3 JSON: proto field names (snake_case, which Envoy accepts),
//! fields at their default omitted, enums by their proto names, Durations as `"1.500s"`,
//! wrappers as plain values, `Any` as `"@type"` plus the fields of the message it holds,
//! oneofs as the chosen field, maps as maps.
//!
//! Contract: nothing is dropped silently. A field set to something other than its default
//! that this module does not write, a oneof choice it does not write, or an `Any` of a type it
//! does not know is a [`YamlError`] naming it; extending the module is one line per field.

use std::collections::HashMap;

use base64::Engine as _;
use envoy_types::pb::envoy::config::{
    accesslog::v3 as accesslog, bootstrap::v3 as bootstrap, cluster::v3 as cluster,
    core::v3 as core_v3, endpoint::v3 as endpoint, listener::v3 as listener,
    metrics::v3 as metrics, route::v3 as route,
};
use envoy_types::pb::envoy::data::accesslog::v3::AccessLogType;
use envoy_types::pb::envoy::extensions::access_loggers::{
    file::v3 as file_log, stats::v3 as stats_log,
};
use envoy_types::pb::envoy::extensions::bootstrap::internal_listener::v3::InternalListener;
use envoy_types::pb::envoy::extensions::filters::http::{
    cors::v3::Cors, fault::v3::HttpFault, grpc_stats::v3 as grpc_stats, lua::v3::Lua,
    router::v3::Router,
};
use envoy_types::pb::envoy::extensions::filters::listener::{
    http_inspector::v3::HttpInspector, original_dst::v3::OriginalDst,
    tls_inspector::v3::TlsInspector,
};
use envoy_types::pb::envoy::extensions::filters::network::{
    http_connection_manager::v3 as hcm, tcp_proxy::v3 as tcp_proxy,
};
use envoy_types::pb::envoy::extensions::request_id::uuid::v3::UuidRequestIdConfig;
use envoy_types::pb::envoy::extensions::retry::host::previous_hosts::v3::PreviousHostsPredicate;
use envoy_types::pb::envoy::extensions::transport_sockets::{
    internal_upstream::v3::InternalUpstreamTransport, quic::v3::QuicDownstreamTransport,
    raw_buffer::v3::RawBuffer, tls::v3 as tls,
};
use envoy_types::pb::envoy::extensions::upstreams::http::v3 as upstream_http;
use envoy_types::pb::envoy::r#type::{matcher::v3 as matcher, v3 as type_v3};
use envoy_types::pb::google::protobuf as wkt;
use prost::{Message, Name};
use serde_yaml_ng::{Mapping, Value as Yaml};

use bootstrap::Bootstrap;

/// Why a bootstrap could not be written as YAML.
#[derive(Debug, thiserror::Error)]
pub enum YamlError {
    /// An `Any` holds a message this module does not know how to write.
    #[error("an Any holds {type_url}, a type meshbench does not write as YAML")]
    UnknownType { type_url: String },
    #[error("an Any of type {type_url} does not decode: {source}")]
    Decode {
        type_url: String,
        #[source]
        source: prost::DecodeError,
    },
    /// A message sets fields (by proto field number) that are not written.
    #[error("{message} sets field number(s) {fields:?}, which meshbench does not write as YAML")]
    UnwrittenFields { message: String, fields: Vec<u32> },
    /// A oneof chooses a field that is not written.
    #[error("chooses {choice}, which meshbench does not write as YAML")]
    UnwrittenChoice { choice: &'static str },
    #[error("cannot serialize the YAML: {0}")]
    Serialize(#[from] serde_yaml_ng::Error),
    /// Where in the bootstrap, as a path in the YAML (`static_resources.listeners[0]...`).
    #[error("at {path}: {source}")]
    At {
        path: String,
        #[source]
        source: Box<YamlError>,
    },
}

impl YamlError {
    /// The error one level further out: `segment` is a key, or `[index]`.
    fn within(self, segment: &str) -> YamlError {
        match self {
            YamlError::At { path, source } => YamlError::At {
                path: if path.starts_with('[') {
                    format!("{segment}{path}")
                } else {
                    format!("{segment}.{path}")
                },
                source,
            },
            e => YamlError::At {
                path: segment.to_string(),
                source: Box::new(e),
            },
        }
    }
}

/// The bootstrap in Envoy's YAML form (the proto3 JSON mapping written as YAML): what
/// `envoy --config-path file.yaml` reads.
pub fn bootstrap_yaml(b: &Bootstrap) -> Result<String, YamlError> {
    Ok(serde_yaml_ng::to_string(&b.to_yaml()?)?)
}

/// A value in the proto3 JSON mapping.
trait ToYaml {
    fn to_yaml(&self) -> Result<Yaml, YamlError>;
}

/// A oneof: the name of the chosen field and its value.
trait Oneof {
    fn entry(&self) -> Result<(&'static str, Yaml), YamlError>;
}

/// A proto enum, written by name.
trait ProtoEnum {
    fn proto_name(value: i32) -> Option<&'static str>;
}

/// An enum's proto name; a number the enum does not know stays a number (proto3 JSON allows
/// both).
fn enum_value<E: ProtoEnum>(value: i32) -> Yaml {
    E::proto_name(value).map_or(Yaml::from(value), Yaml::from)
}

/// The fields of one message, in the order they are added.
#[derive(Default)]
struct Fields(Mapping);

impl Fields {
    /// A singular, repeated or map field: omitted at its default (zero, empty, unset).
    fn put<T: ToYaml + PartialEq + Default>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), YamlError> {
        if *value != T::default() {
            let v = value.to_yaml().map_err(|e| e.within(key))?;
            self.0.insert(key.into(), v);
        }
        Ok(())
    }

    fn put_enum<E: ProtoEnum>(&mut self, key: &'static str, value: i32) {
        if value != 0 {
            self.0.insert(key.into(), enum_value::<E>(value));
        }
    }

    /// A oneof: the chosen field, even at its default (presence is the choice).
    fn put_oneof<O: Oneof>(&mut self, value: &Option<O>) -> Result<(), YamlError> {
        if let Some(o) = value {
            let (key, v) = o.entry()?;
            self.0.insert(key.into(), v);
        }
        Ok(())
    }
}

/// `r#match` is the proto field `match`.
fn key(rust_name: &'static str) -> &'static str {
    rust_name.strip_prefix("r#").unwrap_or(rust_name)
}

/// What is left of a message once every written field is cleared must be its default.
fn all_written<M: Message + Name + Default + PartialEq>(rest: M) -> Result<(), YamlError> {
    if rest == M::default() {
        return Ok(());
    }
    Err(YamlError::UnwrittenFields {
        message: M::full_name(),
        fields: field_numbers(&rest.encode_to_vec()),
    })
}

/// The field numbers in an encoded message (a few lines of the wire format, for the error).
fn field_numbers(mut bytes: &[u8]) -> Vec<u32> {
    fn varint(bytes: &mut &[u8]) -> Option<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let (&b, tail) = bytes.split_first()?;
            *bytes = tail;
            value |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }
    let mut numbers = Vec::new();
    while let Some(k) = varint(&mut bytes) {
        let number = (k >> 3) as u32;
        if !numbers.contains(&number) {
            numbers.push(number);
        }
        let skip = match k & 7 {
            0 => {
                varint(&mut bytes);
                0
            }
            1 => 8,
            2 => varint(&mut bytes).unwrap_or(u64::MAX) as usize,
            5 => 4,
            _ => break,
        };
        bytes = bytes.get(skip..).unwrap_or_default();
    }
    numbers
}

macro_rules! scalars {
    ($($t:ty),*) => {$(
        impl ToYaml for $t {
            fn to_yaml(&self) -> Result<Yaml, YamlError> {
                Ok(Yaml::from(self.clone()))
            }
        }
    )*};
}
scalars!(String, bool, u32, i64, u64, f64);

impl<T: ToYaml> ToYaml for Option<T> {
    fn to_yaml(&self) -> Result<Yaml, YamlError> {
        self.as_ref().map_or(Ok(Yaml::Null), T::to_yaml)
    }
}

impl<T: ToYaml> ToYaml for Box<T> {
    fn to_yaml(&self) -> Result<Yaml, YamlError> {
        T::to_yaml(self)
    }
}

impl<T: ToYaml> ToYaml for Vec<T> {
    fn to_yaml(&self) -> Result<Yaml, YamlError> {
        self.iter()
            .enumerate()
            .map(|(i, v)| v.to_yaml().map_err(|e| e.within(&format!("[{i}]"))))
            .collect::<Result<_, _>>()
            .map(Yaml::Sequence)
    }
}

/// Maps by key, sorted (the same bootstrap always gives the same text).
impl<T: ToYaml> ToYaml for HashMap<String, T> {
    fn to_yaml(&self) -> Result<Yaml, YamlError> {
        let mut entries: Vec<_> = self.iter().collect();
        entries.sort_by_key(|(k, _)| *k);
        let mut map = Mapping::new();
        for (k, v) in entries {
            let v = v.to_yaml().map_err(|e| e.within(&format!("[{k}]")))?;
            map.insert(k.as_str().into(), v);
        }
        Ok(Yaml::Mapping(map))
    }
}

/// `"10s"`, `"0.500s"`, `"-1.000001s"`: 0, 3, 6 or 9 fractional digits, as proto3 JSON writes.
impl ToYaml for wkt::Duration {
    fn to_yaml(&self) -> Result<Yaml, YamlError> {
        let sign = if self.seconds < 0 || self.nanos < 0 {
            "-"
        } else {
            ""
        };
        let (s, n) = (self.seconds.unsigned_abs(), self.nanos.unsigned_abs());
        let text = if n == 0 {
            format!("{sign}{s}s")
        } else if n % 1_000_000 == 0 {
            format!("{sign}{s}.{:03}s", n / 1_000_000)
        } else if n % 1_000 == 0 {
            format!("{sign}{s}.{:06}s", n / 1_000)
        } else {
            format!("{sign}{s}.{n:09}s")
        };
        Ok(Yaml::from(text))
    }
}

macro_rules! wrappers {
    ($($t:ty),*) => {$(
        /// A wrapper is its plain value.
        impl ToYaml for $t {
            fn to_yaml(&self) -> Result<Yaml, YamlError> {
                self.value.to_yaml()
            }
        }
    )*};
}
wrappers!(
    wkt::BoolValue,
    wkt::UInt32Value,
    wkt::UInt64Value,
    wkt::Int64Value,
    wkt::DoubleValue,
    wkt::StringValue
);

/// google.protobuf.Struct (node metadata, JSON log formats) is plain JSON.
impl ToYaml for wkt::Struct {
    fn to_yaml(&self) -> Result<Yaml, YamlError> {
        self.fields.to_yaml()
    }
}

impl ToYaml for wkt::Value {
    fn to_yaml(&self) -> Result<Yaml, YamlError> {
        use wkt::value::Kind;
        match &self.kind {
            None | Some(Kind::NullValue(_)) => Ok(Yaml::Null),
            Some(Kind::NumberValue(n)) => n.to_yaml(),
            Some(Kind::StringValue(s)) => s.to_yaml(),
            Some(Kind::BoolValue(b)) => b.to_yaml(),
            Some(Kind::StructValue(s)) => s.to_yaml(),
            Some(Kind::ListValue(l)) => l.values.to_yaml(),
        }
    }
}

/// `{"@type": type url, ...the fields of the message it holds}`.
impl ToYaml for wkt::Any {
    fn to_yaml(&self) -> Result<Yaml, YamlError> {
        let inner = self
            .type_url
            .strip_prefix("type.googleapis.com/")
            .and_then(|name| unpack(name, self))
            .ok_or_else(|| YamlError::UnknownType {
                type_url: self.type_url.clone(),
            })??;
        let mut map = Mapping::new();
        map.insert("@type".into(), self.type_url.as_str().into());
        match inner {
            Yaml::Mapping(fields) => map.extend(fields),
            value => {
                map.insert("value".into(), value);
            }
        }
        Ok(Yaml::Mapping(map))
    }
}

/// The messages an `Any` may hold: `None` for any other type.
macro_rules! any_types {
    ($($t:ty),* $(,)?) => {
        fn unpack(full_name: &str, any: &wkt::Any) -> Option<Result<Yaml, YamlError>> {
            $(
                if full_name == <$t as Name>::full_name() {
                    return Some(match <$t>::decode(any.value.as_slice()) {
                        Ok(m) => m.to_yaml(),
                        Err(source) => Err(YamlError::Decode {
                            type_url: any.type_url.clone(),
                            source,
                        }),
                    });
                }
            )*
            None
        }
    };
}

any_types!(
    InternalListener,
    TlsInspector,
    HttpInspector,
    OriginalDst,
    hcm::HttpConnectionManager,
    tcp_proxy::TcpProxy,
    Router,
    grpc_stats::FilterConfig,
    HttpFault,
    Cors,
    Lua,
    stats_log::Config,
    file_log::FileAccessLog,
    UuidRequestIdConfig,
    PreviousHostsPredicate,
    upstream_http::HttpProtocolOptions,
    tls::DownstreamTlsContext,
    tls::UpstreamTlsContext,
    QuicDownstreamTransport,
    RawBuffer,
    InternalUpstreamTransport,
);

macro_rules! proto_enums {
    ($($e:ty),* $(,)?) => {$(
        impl ProtoEnum for $e {
            fn proto_name(value: i32) -> Option<&'static str> {
                <$e>::try_from(value).ok().map(|e| e.as_str_name())
            }
        }
    )*};
}

proto_enums!(
    core_v3::socket_address::Protocol,
    core_v3::TrafficDirection,
    core_v3::RoutingPriority,
    core_v3::HealthStatus,
    core_v3::header_value_option::HeaderAppendAction,
    core_v3::http_protocol_options::HeadersWithUnderscoresAction,
    cluster::cluster::DiscoveryType,
    cluster::cluster::LbPolicy,
    cluster::cluster::DnsLookupFamily,
    route::virtual_host::TlsRequirementType,
    hcm::http_connection_manager::CodecType,
    hcm::http_connection_manager::ForwardClientCertDetails,
    hcm::http_connection_manager::PathWithEscapedSlashesAction,
    tls::tls_parameters::TlsProtocol,
    tls::subject_alt_name_matcher::SanType,
    stats_log::config::histogram::Unit,
    AccessLogType,
);

/// One written field: `put` by default, `(enum E)` for an enum, `(oneof)` for a oneof.
macro_rules! field {
    ($out:ident, $v:expr, $key:expr) => {
        $out.put(key($key), &$v)?
    };
    ($out:ident, $v:expr, $key:expr, enum $e:ty) => {
        $out.put_enum::<$e>(key($key), $v)
    };
    ($out:ident, $v:expr, $key:expr, oneof) => {
        $out.put_oneof(&$v)?
    };
}

/// Messages and the fields written, in proto order; every other field must be at its default.
macro_rules! messages {
    ($($t:ty { $($f:ident $(($($how:tt)+))?),* $(,)? })*) => {$(
        impl ToYaml for $t {
            // An empty message writes nothing and clears nothing.
            #[allow(unused_mut)]
            fn to_yaml(&self) -> Result<Yaml, YamlError> {
                let mut out = Fields::default();
                let mut rest = self.clone();
                $(
                    field!(out, self.$f, stringify!($f) $(, $($how)+)?);
                    rest.$f = Default::default();
                )*
                all_written(rest)?;
                Ok(Yaml::Mapping(out.0))
            }
        }
    )*};
}

/// A choice's value: its own mapping by default, `(enum E)`, `(bytes)` (base64), or
/// `(unwritten)`: an error.
macro_rules! choice {
    ($x:ident, $k:expr) => {
        $x.to_yaml().map_err(|e| e.within($k))
    };
    ($x:ident, $k:expr, enum $e:ty) => {
        Ok::<_, YamlError>(enum_value::<$e>(*$x))
    };
    ($x:ident, $k:expr, bytes) => {
        Ok::<_, YamlError>(Yaml::from(
            base64::engine::general_purpose::STANDARD.encode($x),
        ))
    };
    ($x:ident, $k:expr, unwritten) => {{
        let _ = $x;
        Err(YamlError::UnwrittenChoice { choice: $k })
    }};
}

/// Oneofs: each variant with its proto field name.
macro_rules! oneofs {
    ($($t:ty { $($v:ident => $k:literal $(($($how:tt)+))?),* $(,)? })*) => {$(
        impl Oneof for $t {
            // Deprecated choices are matched too (as unwritten).
            #[allow(deprecated)]
            fn entry(&self) -> Result<(&'static str, Yaml), YamlError> {
                match self {
                    $(Self::$v(x) => Ok(($k, choice!(x, $k $(, $($how)+)?)?)),)*
                }
            }
        }
    )*};
}

// The bootstrap, its node, admin and stats.
messages! {
    Bootstrap {
        node, static_resources, stats_config, stats_flush_interval, admin,
        bootstrap_extensions,
    }
    core_v3::Node { id, cluster, metadata }
    bootstrap::bootstrap::StaticResources { listeners, clusters }
    bootstrap::Admin { access_log, address }
    metrics::StatsConfig { stats_tags, use_all_default_tags, stats_matcher }
    metrics::TagSpecifier { tag_name, tag_value (oneof) }
    metrics::StatsMatcher { stats_matcher (oneof) }
    matcher::ListStringMatcher { patterns }
    matcher::StringMatcher { match_pattern (oneof), ignore_case }
    matcher::RegexMatcher { engine_type (oneof), regex }
    core_v3::TypedExtensionConfig { name, typed_config }
    InternalListener { buffer_size_kb }
}

oneofs! {
    metrics::tag_specifier::TagValue { Regex => "regex", FixedValue => "fixed_value" }
    metrics::stats_matcher::StatsMatcher {
        RejectAll => "reject_all",
        ExclusionList => "exclusion_list",
        InclusionList => "inclusion_list",
    }
    matcher::string_matcher::MatchPattern {
        Exact => "exact",
        Prefix => "prefix",
        Suffix => "suffix",
        SafeRegex => "safe_regex",
        Contains => "contains",
        Custom => "custom" (unwritten),
    }
    matcher::regex_matcher::EngineType { GoogleRe2 => "google_re2" (unwritten) }
}

// Listeners.
messages! {
    listener::Listener {
        name, address, stat_prefix, filter_chains, use_original_dst, default_filter_chain,
        per_connection_buffer_limit_bytes, listener_filters, listener_filters_timeout,
        continue_on_listener_filters_timeout, transparent, freebind,
        traffic_direction (enum core_v3::TrafficDirection), udp_listener_config, access_log,
        bind_to_port, listener_specifier (oneof),
    }
    listener::listener::InternalListenerConfig {}
    listener::ListenerFilter { name, config_type (oneof) }
    TlsInspector {
        enable_ja3_fingerprinting, enable_ja4_fingerprinting, initial_read_buffer_size,
    }
    HttpInspector {}
    OriginalDst {}
    listener::UdpListenerConfig { quic_options }
    listener::QuicProtocolOptions { quic_protocol_options, idle_timeout, crypto_handshake_timeout }
    listener::FilterChain {
        filter_chain_match, filters, transport_socket, transport_socket_connect_timeout, name,
    }
    listener::FilterChainMatch {
        destination_port, prefix_ranges, server_names, transport_protocol, application_protocols,
    }
    listener::Filter { name, config_type (oneof) }
    core_v3::CidrRange { address_prefix, prefix_len }
}

oneofs! {
    listener::listener::ListenerSpecifier { InternalListener => "internal_listener" }
    listener::listener_filter::ConfigType {
        TypedConfig => "typed_config",
        ConfigDiscovery => "config_discovery" (unwritten),
    }
    listener::filter::ConfigType {
        TypedConfig => "typed_config",
        ConfigDiscovery => "config_discovery" (unwritten),
    }
}

// Addresses, data sources, transport sockets, protocol options.
messages! {
    core_v3::Address { address (oneof) }
    core_v3::SocketAddress {
        protocol (enum core_v3::socket_address::Protocol), address, port_specifier (oneof),
        resolver_name, ipv4_compat,
    }
    core_v3::Pipe { path, mode }
    core_v3::EnvoyInternalAddress { address_name_specifier (oneof), endpoint_id }
    core_v3::DataSource { specifier (oneof) }
    core_v3::TransportSocket { name, config_type (oneof) }
    core_v3::BindConfig { source_address, freebind }
    core_v3::HeaderValueOption {
        header, append_action (enum core_v3::header_value_option::HeaderAppendAction),
        keep_empty_value,
    }
    core_v3::HeaderValue { key, value }
    core_v3::HttpProtocolOptions {
        idle_timeout, max_connection_duration, max_headers_count, max_stream_duration,
        headers_with_underscores_action
            (enum core_v3::http_protocol_options::HeadersWithUnderscoresAction),
        max_requests_per_connection,
    }
    core_v3::Http1ProtocolOptions {
        allow_absolute_url, accept_http_10, default_host_for_http_10, enable_trailers,
        allow_chunked_length, override_stream_error_on_invalid_http_message,
    }
    core_v3::Http2ProtocolOptions {
        hpack_table_size, max_concurrent_streams, initial_stream_window_size,
        initial_connection_window_size, allow_connect, allow_metadata,
        override_stream_error_on_invalid_http_message,
    }
    core_v3::Http3ProtocolOptions {
        quic_protocol_options, override_stream_error_on_invalid_http_message,
        allow_extended_connect,
    }
    core_v3::QuicProtocolOptions {
        max_concurrent_streams, initial_stream_window_size, initial_connection_window_size,
        idle_network_timeout,
    }
    core_v3::SubstitutionFormatString { format (oneof), omit_empty_values, content_type }
    type_v3::Percent { value }
    accesslog::AccessLog { name, filter, config_type (oneof) }
    accesslog::AccessLogFilter { filter_specifier (oneof) }
    accesslog::HeaderFilter { header }
    route::HeaderMatcher {
        name, header_match_specifier (oneof), invert_match, treat_missing_header_as_empty,
    }
}

oneofs! {
    core_v3::address::Address {
        SocketAddress => "socket_address",
        Pipe => "pipe",
        EnvoyInternalAddress => "envoy_internal_address",
    }
    core_v3::socket_address::PortSpecifier {
        PortValue => "port_value",
        NamedPort => "named_port",
    }
    core_v3::envoy_internal_address::AddressNameSpecifier {
        ServerListenerName => "server_listener_name",
    }
    core_v3::data_source::Specifier {
        Filename => "filename",
        InlineBytes => "inline_bytes" (bytes),
        InlineString => "inline_string",
        EnvironmentVariable => "environment_variable",
    }
    core_v3::transport_socket::ConfigType { TypedConfig => "typed_config" }
    core_v3::substitution_format_string::Format {
        // Deprecated for text_format_source.
        TextFormat => "text_format" (unwritten),
        JsonFormat => "json_format",
        TextFormatSource => "text_format_source",
    }
    accesslog::access_log::ConfigType { TypedConfig => "typed_config" }
    accesslog::access_log_filter::FilterSpecifier {
        StatusCodeFilter => "status_code_filter" (unwritten),
        DurationFilter => "duration_filter" (unwritten),
        NotHealthCheckFilter => "not_health_check_filter" (unwritten),
        TraceableFilter => "traceable_filter" (unwritten),
        RuntimeFilter => "runtime_filter" (unwritten),
        AndFilter => "and_filter" (unwritten),
        OrFilter => "or_filter" (unwritten),
        HeaderFilter => "header_filter",
        ResponseFlagFilter => "response_flag_filter" (unwritten),
        GrpcStatusFilter => "grpc_status_filter" (unwritten),
        ExtensionFilter => "extension_filter" (unwritten),
        MetadataFilter => "metadata_filter" (unwritten),
        LogTypeFilter => "log_type_filter" (unwritten),
    }
    route::header_matcher::HeaderMatchSpecifier {
        ExactMatch => "exact_match" (unwritten),
        SafeRegexMatch => "safe_regex_match" (unwritten),
        RangeMatch => "range_match" (unwritten),
        PresentMatch => "present_match",
        PrefixMatch => "prefix_match" (unwritten),
        SuffixMatch => "suffix_match" (unwritten),
        ContainsMatch => "contains_match" (unwritten),
        StringMatch => "string_match",
    }
}

// Network filters.
messages! {
    hcm::HttpConnectionManager {
        codec_type (enum hcm::http_connection_manager::CodecType), stat_prefix,
        route_specifier (oneof), http_filters, tracing, common_http_protocol_options,
        http_protocol_options, http2_protocol_options, http3_protocol_options, server_name,
        stream_idle_timeout, request_timeout, drain_timeout, delayed_close_timeout, access_log,
        use_remote_address, xff_num_trusted_hops, internal_address_config, skip_xff_append,
        generate_request_id, preserve_external_request_id, always_set_request_id_in_response,
        forward_client_cert_details (enum hcm::http_connection_manager::ForwardClientCertDetails),
        set_current_client_cert_details, upgrade_configs, normalize_path, merge_slashes,
        path_with_escaped_slashes_action
            (enum hcm::http_connection_manager::PathWithEscapedSlashesAction),
        request_id_extension, stream_error_on_invalid_http_message,
    }
    hcm::HttpFilter { name, config_type (oneof), is_optional, disabled }
    hcm::http_connection_manager::Tracing {
        client_sampling, random_sampling, overall_sampling, verbose, max_path_tag_length,
    }
    hcm::http_connection_manager::InternalAddressConfig { unix_sockets, cidr_ranges }
    hcm::http_connection_manager::SetCurrentClientCertDetails { subject, cert, chain, dns, uri }
    hcm::http_connection_manager::UpgradeConfig { upgrade_type, filters, enabled }
    hcm::RequestIdExtension { typed_config }
    UuidRequestIdConfig { pack_trace_reason, use_request_id_for_trace_sampling }
    tcp_proxy::TcpProxy {
        stat_prefix, cluster_specifier (oneof), idle_timeout, access_log, max_connect_attempts,
        tunneling_config, max_downstream_connection_duration,
    }
    tcp_proxy::tcp_proxy::TunnelingConfig {
        hostname, use_post, headers_to_add, propagate_response_headers, post_path,
    }
}

oneofs! {
    hcm::http_connection_manager::RouteSpecifier {
        Rds => "rds" (unwritten),
        RouteConfig => "route_config",
        ScopedRoutes => "scoped_routes" (unwritten),
    }
    hcm::http_filter::ConfigType {
        TypedConfig => "typed_config",
        ConfigDiscovery => "config_discovery" (unwritten),
    }
    tcp_proxy::tcp_proxy::ClusterSpecifier {
        Cluster => "cluster",
        WeightedClusters => "weighted_clusters" (unwritten),
    }
}

// HTTP filters and access loggers.
messages! {
    Router { dynamic_stats, suppress_envoy_headers }
    grpc_stats::FilterConfig {
        emit_filter_state, per_method_stat_specifier (oneof), enable_upstream_stats,
    }
    HttpFault { upstream_cluster, downstream_nodes, max_active_faults }
    Cors {}
    Lua { source_codes, default_source_code, stat_prefix }
    stats_log::Config { stats_scope, histograms, counters, gauges }
    type_v3::Scope {
        max_counters, max_gauges, max_histograms, enable_eviction, prefix, sharing_name,
    }
    stats_log::config::Stat { name, tags }
    stats_log::config::Tag { name, value_format }
    stats_log::config::Histogram {
        stat, unit (enum stats_log::config::histogram::Unit), value_format,
    }
    stats_log::config::Counter { stat, value_format, value_fixed }
    stats_log::config::Gauge { stat, value_format, value_fixed, add_subtract, set }
    stats_log::config::gauge::Set { log_type (enum AccessLogType) }
    stats_log::config::gauge::PairedAddSubtract {
        add_log_type (enum AccessLogType), sub_log_type (enum AccessLogType),
    }
    file_log::FileAccessLog { path, access_log_format (oneof) }
}

oneofs! {
    grpc_stats::filter_config::PerMethodStatSpecifier {
        IndividualMethodStatsAllowlist => "individual_method_stats_allowlist" (unwritten),
        StatsForAllMethods => "stats_for_all_methods",
    }
    file_log::file_access_log::AccessLogFormat {
        // Deprecated for log_format.
        Format => "format" (unwritten),
        JsonFormat => "json_format" (unwritten),
        TypedJsonFormat => "typed_json_format" (unwritten),
        LogFormat => "log_format",
    }
}

// Routes.
messages! {
    route::RouteConfiguration { name, virtual_hosts, validate_clusters }
    route::VirtualHost {
        name, domains, routes, require_tls (enum route::virtual_host::TlsRequirementType),
        request_headers_to_add, include_request_attempt_count,
        include_attempt_count_in_response, retry_policy,
    }
    route::Route { name, r#match, action (oneof), decorator }
    route::RouteMatch { path_specifier (oneof), case_sensitive }
    route::route_match::ConnectMatcher {}
    route::RouteAction {
        cluster_specifier (oneof), prefix_rewrite, host_rewrite_specifier (oneof), timeout,
        idle_timeout, retry_policy, upgrade_configs, max_stream_duration,
    }
    route::RetryPolicy {
        retry_on, num_retries, per_try_timeout, retry_host_predicate,
        host_selection_retry_max_attempts, retriable_status_codes,
    }
    route::retry_policy::RetryHostPredicate { name, config_type (oneof) }
    PreviousHostsPredicate {}
    route::route_action::MaxStreamDuration {
        max_stream_duration, grpc_timeout_header_max, grpc_timeout_header_offset,
    }
    route::route_action::UpgradeConfig { upgrade_type, enabled, connect_config }
    route::route_action::upgrade_config::ConnectConfig { allow_post }
    route::Decorator { operation, propagate }
}

oneofs! {
    route::route::Action {
        Route => "route",
        Redirect => "redirect" (unwritten),
        DirectResponse => "direct_response" (unwritten),
        FilterAction => "filter_action" (unwritten),
        NonForwardingAction => "non_forwarding_action" (unwritten),
    }
    route::route_match::PathSpecifier {
        Prefix => "prefix",
        Path => "path",
        SafeRegex => "safe_regex",
        ConnectMatcher => "connect_matcher",
        PathSeparatedPrefix => "path_separated_prefix",
        PathMatchPolicy => "path_match_policy" (unwritten),
    }
    route::route_action::ClusterSpecifier {
        Cluster => "cluster",
        ClusterHeader => "cluster_header",
        WeightedClusters => "weighted_clusters" (unwritten),
        ClusterSpecifierPlugin => "cluster_specifier_plugin",
        InlineClusterSpecifierPlugin => "inline_cluster_specifier_plugin" (unwritten),
    }
    route::route_action::HostRewriteSpecifier {
        HostRewriteLiteral => "host_rewrite_literal",
        AutoHostRewrite => "auto_host_rewrite",
        HostRewriteHeader => "host_rewrite_header",
        HostRewritePathRegex => "host_rewrite_path_regex" (unwritten),
        HostRewrite => "host_rewrite",
    }
    route::retry_policy::retry_host_predicate::ConfigType { TypedConfig => "typed_config" }
}

// Clusters and endpoints.
messages! {
    cluster::Cluster {
        name, alt_stat_name, cluster_discovery_type (oneof), connect_timeout,
        per_connection_buffer_limit_bytes, lb_policy (enum cluster::cluster::LbPolicy),
        load_assignment, circuit_breakers, typed_extension_protocol_options,
        dns_lookup_family (enum cluster::cluster::DnsLookupFamily), cleanup_interval,
        upstream_bind_config, common_lb_config, transport_socket,
    }
    cluster::CircuitBreakers { thresholds, per_host_thresholds }
    cluster::circuit_breakers::Thresholds {
        priority (enum core_v3::RoutingPriority), max_connections, max_pending_requests,
        max_requests, max_retries, track_remaining, max_connection_pools,
    }
    cluster::cluster::CommonLbConfig {
        healthy_panic_threshold, update_merge_window, ignore_new_hosts_until_first_hc,
        close_connections_on_host_set_change,
    }
    endpoint::ClusterLoadAssignment { cluster_name, endpoints }
    endpoint::LocalityLbEndpoints { lb_endpoints, load_balancing_weight, priority }
    endpoint::LbEndpoint {
        host_identifier (oneof), health_status (enum core_v3::HealthStatus),
        load_balancing_weight,
    }
    endpoint::Endpoint { address, hostname }
    upstream_http::HttpProtocolOptions {
        common_http_protocol_options, upstream_protocol_options (oneof),
    }
    upstream_http::http_protocol_options::ExplicitHttpConfig { protocol_config (oneof) }
    upstream_http::http_protocol_options::UseDownstreamHttpConfig {
        http_protocol_options, http2_protocol_options, http3_protocol_options,
    }
    upstream_http::http_protocol_options::AutoHttpConfig {
        http_protocol_options, http2_protocol_options, http3_protocol_options,
    }
}

oneofs! {
    cluster::cluster::ClusterDiscoveryType {
        Type => "type" (enum cluster::cluster::DiscoveryType),
        ClusterType => "cluster_type" (unwritten),
    }
    endpoint::lb_endpoint::HostIdentifier {
        Endpoint => "endpoint",
        EndpointName => "endpoint_name",
    }
    upstream_http::http_protocol_options::UpstreamProtocolOptions {
        ExplicitHttpConfig => "explicit_http_config",
        UseDownstreamProtocolConfig => "use_downstream_protocol_config",
        AutoConfig => "auto_config",
    }
    upstream_http::http_protocol_options::explicit_http_config::ProtocolConfig {
        HttpProtocolOptions => "http_protocol_options",
        Http2ProtocolOptions => "http2_protocol_options",
        Http3ProtocolOptions => "http3_protocol_options",
    }
}

// TLS and the other transport sockets.
messages! {
    tls::DownstreamTlsContext {
        common_tls_context, require_client_certificate, require_sni, session_timeout,
    }
    tls::UpstreamTlsContext {
        common_tls_context, sni, auto_host_sni, allow_renegotiation, max_session_keys,
    }
    tls::CommonTlsContext {
        tls_params, tls_certificates, validation_context_type (oneof), alpn_protocols,
    }
    tls::TlsParameters {
        tls_minimum_protocol_version (enum tls::tls_parameters::TlsProtocol),
        tls_maximum_protocol_version (enum tls::tls_parameters::TlsProtocol),
        cipher_suites, ecdh_curves, signature_algorithms,
    }
    tls::TlsCertificate { certificate_chain, private_key, password }
    tls::CertificateValidationContext {
        trusted_ca, verify_certificate_spki, verify_certificate_hash,
        match_typed_subject_alt_names, allow_expired_certificate,
    }
    tls::SubjectAltNameMatcher {
        san_type (enum tls::subject_alt_name_matcher::SanType), matcher, oid,
    }
    QuicDownstreamTransport { downstream_tls_context, enable_early_data }
    RawBuffer {}
    InternalUpstreamTransport { transport_socket }
}

oneofs! {
    tls::common_tls_context::ValidationContextType {
        ValidationContext => "validation_context",
        ValidationContextSdsSecretConfig => "validation_context_sds_secret_config" (unwritten),
        CombinedValidationContext => "combined_validation_context" (unwritten),
        ValidationContextCertificateProvider
            => "validation_context_certificate_provider" (unwritten),
        ValidationContextCertificateProviderInstance
            => "validation_context_certificate_provider_instance" (unwritten),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::util::pack_any;

    fn yaml<T: ToYaml>(v: &T) -> String {
        serde_yaml_ng::to_string(&v.to_yaml().unwrap()).unwrap()
    }

    #[test]
    fn durations_have_0_3_6_or_9_fractional_digits() {
        let d = |seconds, nanos| {
            wkt::Duration { seconds, nanos }
                .to_yaml()
                .unwrap()
                .as_str()
                .unwrap()
                .to_string()
        };
        assert_eq!(d(10, 0), "10s");
        assert_eq!(d(0, 500_000_000), "0.500s");
        assert_eq!(d(1, 1_000), "1.000001s");
        assert_eq!(d(3, 1), "3.000000001s");
        assert_eq!(d(-1, -500_000_000), "-1.500s");
        assert_eq!(d(0, -5_000_000), "-0.005s");
    }

    #[test]
    fn wrappers_are_plain_values_and_present_even_at_zero() {
        let chain = listener::FilterChainMatch {
            destination_port: Some(wkt::UInt32Value { value: 0 }),
            ..Default::default()
        };
        assert_eq!(yaml(&chain), "destination_port: 0\n");
        let ctx = tls::DownstreamTlsContext {
            require_client_certificate: Some(wkt::BoolValue { value: true }),
            ..Default::default()
        };
        assert_eq!(yaml(&ctx), "require_client_certificate: true\n");
    }

    #[test]
    fn enums_by_proto_name_and_defaults_omitted() {
        let params = tls::TlsParameters {
            tls_minimum_protocol_version: tls::tls_parameters::TlsProtocol::TlSv12 as i32,
            // TLS_AUTO is the default: omitted.
            tls_maximum_protocol_version: 0,
            cipher_suites: vec![],
            ..Default::default()
        };
        assert_eq!(yaml(&params), "tls_minimum_protocol_version: TLSv1_2\n");
        let c = cluster::Cluster {
            name: "c".into(),
            cluster_discovery_type: Some(cluster::cluster::ClusterDiscoveryType::Type(
                cluster::cluster::DiscoveryType::Static as i32,
            )),
            lb_policy: cluster::cluster::LbPolicy::LeastRequest as i32,
            ..Default::default()
        };
        // A oneof is written even at its default value (STATIC is 0).
        assert_eq!(
            yaml(&c),
            "name: c\ntype: STATIC\nlb_policy: LEAST_REQUEST\n"
        );
        assert_eq!(yaml(&cluster::Cluster::default()), "{}\n");
        // A number the enum does not know stays a number.
        assert_eq!(enum_value::<cluster::cluster::LbPolicy>(42), Yaml::from(42));
    }

    #[test]
    fn an_any_is_its_type_then_its_fields() {
        let ts = core_v3::TransportSocket {
            name: "envoy.transport_sockets.tls".into(),
            config_type: Some(core_v3::transport_socket::ConfigType::TypedConfig(
                pack_any(tls::UpstreamTlsContext {
                    sni: "mesh.local".into(),
                    ..Default::default()
                }),
            )),
        };
        assert_eq!(
            yaml(&ts),
            "name: envoy.transport_sockets.tls\ntyped_config:\n  '@type': type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext\n  sni: mesh.local\n"
        );
        // An empty message is its type alone; the HTTPFault proto name, not the Rust one.
        assert_eq!(
            yaml(&pack_any(HttpFault::default())),
            "'@type': type.googleapis.com/envoy.extensions.filters.http.fault.v3.HTTPFault\n"
        );
    }

    #[test]
    fn an_any_of_an_unknown_type_is_an_error_naming_it() {
        let any = pack_any(
            envoy_types::pb::envoy::extensions::filters::http::buffer::v3::Buffer::default(),
        );
        let b = Bootstrap {
            bootstrap_extensions: vec![core_v3::TypedExtensionConfig {
                name: "x".into(),
                typed_config: Some(any),
            }],
            ..Default::default()
        };
        let e = bootstrap_yaml(&b).unwrap_err().to_string();
        assert_eq!(
            e,
            "at bootstrap_extensions[0].typed_config: an Any holds type.googleapis.com/envoy.extensions.filters.http.buffer.v3.Buffer, a type meshbench does not write as YAML"
        );
        let garbage = wkt::Any {
            type_url: Router::type_url(),
            value: vec![0xff],
        };
        assert!(matches!(
            garbage.to_yaml(),
            Err(YamlError::Decode { type_url, .. }) if type_url == Router::type_url()
        ));
    }

    #[test]
    fn a_field_or_choice_not_written_is_an_error_not_a_silent_drop() {
        let l = listener::Listener {
            name: "l".into(),
            // Field 30: not written.
            enable_mptcp: true,
            ..Default::default()
        };
        match l.to_yaml() {
            Err(YamlError::UnwrittenFields { message, fields }) => {
                assert_eq!(message, "envoy.config.listener.v3.Listener");
                assert_eq!(fields, [30]);
            }
            other => panic!("{other:?}"),
        }
        let f = listener::Filter {
            name: "f".into(),
            config_type: Some(listener::filter::ConfigType::ConfigDiscovery(
                Default::default(),
            )),
        };
        let b = Bootstrap {
            static_resources: Some(bootstrap::bootstrap::StaticResources {
                listeners: vec![
                    l,
                    listener::Listener {
                        filter_chains: vec![listener::FilterChain {
                            filters: vec![f],
                            ..Default::default()
                        }],
                        ..Default::default()
                    },
                ],
                ..Default::default()
            }),
            ..Default::default()
        };
        // The first error, with where it is.
        assert_eq!(
            bootstrap_yaml(&b).unwrap_err().to_string(),
            "at static_resources.listeners[0]: envoy.config.listener.v3.Listener sets field number(s) [30], which meshbench does not write as YAML"
        );
        let mut b = b;
        b.static_resources.as_mut().unwrap().listeners.remove(0);
        assert_eq!(
            bootstrap_yaml(&b).unwrap_err().to_string(),
            "at static_resources.listeners[0].filter_chains[0].filters[0]: chooses config_discovery, which meshbench does not write as YAML"
        );
    }

    #[test]
    fn maps_are_sorted_and_bytes_are_base64() {
        let lua = Lua {
            source_codes: HashMap::from([
                ("b".to_string(), core_v3::DataSource::default()),
                (
                    "a".to_string(),
                    core_v3::DataSource {
                        specifier: Some(core_v3::data_source::Specifier::InlineBytes(
                            b"hi".to_vec(),
                        )),
                        ..Default::default()
                    },
                ),
            ]),
            ..Default::default()
        };
        assert_eq!(
            yaml(&lua),
            "source_codes:\n  a:\n    inline_bytes: aGk=\n  b: {}\n"
        );
    }

    #[test]
    fn strings_that_read_as_other_yaml_stay_strings() {
        let header = core_v3::HeaderValue {
            key: "true".into(),
            value: "10".into(),
            ..Default::default()
        };
        assert_eq!(yaml(&header), "key: 'true'\nvalue: '10'\n");
    }

    #[test]
    fn field_numbers_read_the_wire_format() {
        let m = listener::Listener {
            name: "x".into(),
            enable_mptcp: true,
            stat_prefix: "p".into(),
            ..Default::default()
        };
        // prost encodes in field-number order.
        assert_eq!(field_numbers(&m.encode_to_vec()), [1, 28, 30]);
    }
}
