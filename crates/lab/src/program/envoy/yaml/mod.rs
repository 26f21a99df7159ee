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
    core_v3::ApiVersion,
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

// After the macros: the table uses them.
mod messages;

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
