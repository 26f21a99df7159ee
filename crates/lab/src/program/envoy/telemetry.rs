//! Upstream stand-ins for Istio's per-request telemetry, switched on by the experiment file's
//! `proxy.istio_telemetry`. Istio's sidecars run two filters of their own on every request
//! that the upstream Envoy build does not have (they live in Envoy's contrib tree):
//!
//! - metadata exchange: each side adds `x-envoy-peer-metadata` (its workload's labels, a
//!   base64 protobuf Struct of a few hundred bytes) and `x-envoy-peer-metadata-id` to what it
//!   sends and reads the peer's from what it receives. Stand-in: a Lua filter doing the same
//!   header work with a blob of the same size (it does not decode the peer's blob).
//! - `istio.stats`: at the end of each stream, `istio_requests_total` and three histograms
//!   (duration, request and response bytes) with about twenty labels. Stand-in: Envoy's stats
//!   access logger recording the same four metrics with the same label names, their values
//!   from Envoy's own format operators.
//!
//! Neither is Istio's code; both have a cost of the same kind (header work per request, a
//! labelled stat lookup and histogram records per stream), which docs/envoy.md compares.

use base64::Engine;
use envoy_types::pb::envoy::config::accesslog::v3::{access_log, AccessLog};
use envoy_types::pb::envoy::extensions::access_loggers::stats::v3::{config, Config};
use envoy_types::pb::envoy::extensions::filters::http::lua::v3::Lua;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    http_filter, HttpConnectionManager, HttpFilter,
};
use envoy_types::pb::google::protobuf::UInt64Value;
use envoy_types::util::pack_any;
use meshbench_k8s::names::DEFAULT_NAMESPACE;

use super::istio_shape::{Direction, SERVICE};
use crate::pki;

/// What a sidecar says about itself in the exchange: Istio's node metadata fields, with
/// this lab's values (about the size Istio's blob has for a small workload).
fn peer_metadata(role: &str) -> String {
    let fields = [
        ("APP_CONTAINERS", role.to_string()),
        ("CLUSTER_ID", "Kubernetes".into()),
        ("INSTANCE_IPS", "10.0.0.1".into()),
        ("LABELS", format!("app={role},version=v1,security.istio.io/tlsMode=istio,service.istio.io/canonical-name={role},service.istio.io/canonical-revision=v1")),
        ("MESH_ID", pki::TRUST_DOMAIN.into()),
        ("NAME", format!("{role}-6d4b9c7f8-x2x7q")),
        ("NAMESPACE", DEFAULT_NAMESPACE.into()),
        ("OWNER", format!("kubernetes://apis/apps/v1/namespaces/{}/deployments/{role}", DEFAULT_NAMESPACE)),
        ("PLATFORM_METADATA", String::new()),
        ("SERVICE_ACCOUNT", role.to_string()),
        ("WORKLOAD_NAME", role.to_string()),
    ];
    let text: String = fields
        .iter()
        .map(|(k, v)| {
            format!(
                "\n{}{k}\x12{}{v}",
                k.len() as u8 as char,
                v.len() as u8 as char
            )
        })
        .collect();
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// The Lua stand-in for metadata exchange.
fn exchange(role: &str) -> HttpFilter {
    let id = format!(
        "sidecar~10.0.0.1~{role}-6d4b9c7f8-x2x7q.{}~{}.svc.cluster.local",
        DEFAULT_NAMESPACE, DEFAULT_NAMESPACE
    );
    let code = format!(
        r#"local META = "{meta}"
local ID = "{id}"
local function exchange(headers, info)
  local peer = headers:get("x-envoy-peer-metadata")
  local peer_id = headers:get("x-envoy-peer-metadata-id")
  if peer ~= nil then
    info:dynamicMetadata():set("istio.peer", "id", peer_id or "")
    headers:remove("x-envoy-peer-metadata")
    headers:remove("x-envoy-peer-metadata-id")
  end
end
function envoy_on_request(handle)
  exchange(handle:headers(), handle:streamInfo())
  handle:headers():replace("x-envoy-peer-metadata", META)
  handle:headers():replace("x-envoy-peer-metadata-id", ID)
end
function envoy_on_response(handle)
  exchange(handle:headers(), handle:streamInfo())
  handle:headers():replace("x-envoy-peer-metadata", META)
  handle:headers():replace("x-envoy-peer-metadata-id", ID)
end
"#,
        meta = peer_metadata(role),
    );
    HttpFilter {
        name: "envoy.filters.http.lua".into(),
        config_type: Some(http_filter::ConfigType::TypedConfig(pack_any(Lua {
            default_source_code: Some(envoy_types::pb::envoy::config::core::v3::DataSource {
                specifier: Some(
                    envoy_types::pb::envoy::config::core::v3::data_source::Specifier::InlineString(
                        code,
                    ),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }))),
        ..Default::default()
    }
}

/// Istio's standard metrics' labels, each from an Envoy format operator or this lab's value.
fn labels(role: &str, direction: Direction) -> Vec<config::Tag> {
    let reporter = match direction {
        Direction::Inbound => "destination",
        _ => "source",
    };
    let fixed = |v: &str| v.to_string();
    [
        ("reporter", fixed(reporter)),
        ("source_workload", fixed("client")),
        ("source_workload_namespace", fixed(DEFAULT_NAMESPACE)),
        ("source_principal", "%DOWNSTREAM_PEER_URI_SAN%".into()),
        ("source_app", fixed("client")),
        ("source_version", fixed("v1")),
        ("source_cluster", fixed("Kubernetes")),
        ("destination_workload", fixed(role)),
        ("destination_workload_namespace", fixed(DEFAULT_NAMESPACE)),
        ("destination_principal", "%UPSTREAM_PEER_URI_SAN%".into()),
        ("destination_app", fixed("backend")),
        ("destination_version", fixed("v1")),
        ("destination_service", fixed(SERVICE)),
        ("destination_service_name", fixed("backend")),
        ("destination_service_namespace", fixed(DEFAULT_NAMESPACE)),
        ("destination_cluster", fixed("Kubernetes")),
        ("request_protocol", "%PROTOCOL%".into()),
        ("response_code", "%RESPONSE_CODE%".into()),
        ("grpc_response_status", "%GRPC_STATUS_NUMBER%".into()),
        ("response_flags", "%RESPONSE_FLAGS%".into()),
        ("connection_security_policy", fixed("mutual_tls")),
    ]
    .into_iter()
    .map(|(name, value_format)| config::Tag {
        name: name.into(),
        value_format,
        ..Default::default()
    })
    .collect()
}

/// The stats access logger standing for `istio.stats`.
fn standard_metrics(role: &str, direction: Direction) -> AccessLog {
    let stat = |name: &str| {
        Some(config::Stat {
            name: name.into(),
            tags: labels(role, direction),
        })
    };
    let histogram = |name: &str, unit: config::histogram::Unit, value: &str| config::Histogram {
        stat: stat(name),
        unit: unit as i32,
        value_format: value.into(),
    };
    let logger = Config {
        // Its own scope (Envoy wants a scope or a prefix); the metrics keep Istio's names.
        stats_scope: Some(envoy_types::pb::envoy::r#type::v3::Scope::default()),
        counters: vec![config::Counter {
            stat: stat("istio_requests_total"),
            value_fixed: Some(UInt64Value { value: 1 }),
            ..Default::default()
        }],
        histograms: vec![
            histogram(
                "istio_request_duration_milliseconds",
                config::histogram::Unit::Milliseconds,
                "%DURATION%",
            ),
            histogram(
                "istio_request_bytes",
                config::histogram::Unit::Bytes,
                "%BYTES_RECEIVED%",
            ),
            histogram(
                "istio_response_bytes",
                config::histogram::Unit::Bytes,
                "%BYTES_SENT%",
            ),
        ],
        ..Default::default()
    };
    AccessLog {
        name: "envoy.access_loggers.stats".into(),
        config_type: Some(access_log::ConfigType::TypedConfig(pack_any(logger))),
        ..Default::default()
    }
}

/// Adds both stand-ins to a sidecar's or waypoint's connection manager: the exchange before
/// the router (where Istio's filters sit), the metrics as its access log.
pub fn add(hcm: &mut HttpConnectionManager, role: &str, direction: Direction) {
    let router = hcm.http_filters.len().saturating_sub(1);
    hcm.http_filters.insert(router, exchange(role));
    hcm.access_log.push(standard_metrics(role, direction));
}
