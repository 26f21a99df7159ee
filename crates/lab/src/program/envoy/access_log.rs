//! The access log per-hop attribution reads: each L7 Envoy on the path writes, for the
//! requests the engine tagged (an [`attribution::ID_HEADER`] with meshbench's prefix) and
//! only for them, the id, when the downstream request began (wall clock) and its later points
//! (ns after that) in one line. The format and its parser live together here, so they cannot
//! drift apart; so do the two ways an Envoy is told to write it:
//!
//! - the lab's own Envoys: [`add`] puts the log in their connection manager, filtered by a
//!   header match, and Envoy flushes its files often ([`FLUSH_ARGS`]);
//! - Envoys istiod configures (Istio's sidecars, gateway, waypoint): Istio's own API, an
//!   `envoyFileAccessLog` provider in the mesh configuration ([`istio_provider`]) and a
//!   `Telemetry` naming it with a CEL filter ([`istio_telemetry`]); the lines go to Envoy's
//!   stdout, the `istio-proxy` container's log, and the agent flushes every
//!   [`ISTIO_FLUSH_INTERVAL`].
//!
//! With attribution off nothing of this is configured.

use std::path::Path;

use envoy_types::pb::envoy::config::accesslog::v3::{
    access_log, access_log_filter, AccessLog, AccessLogFilter, HeaderFilter,
};
use envoy_types::pb::envoy::config::core::v3::{
    data_source, substitution_format_string, DataSource, SubstitutionFormatString,
};
use envoy_types::pb::envoy::config::route::v3::{header_matcher, HeaderMatcher};
use envoy_types::pb::envoy::extensions::access_loggers::file::v3::{
    file_access_log, FileAccessLog,
};
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::HttpConnectionManager;
use envoy_types::pb::envoy::r#type::matcher::v3::{string_matcher, StringMatcher};
use envoy_types::util::pack_any;
use meshbench_k8s::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use meshbench_k8s::objects::istio::{
    ExtensionProvider, FileAccessLogProvider, LogFormat, Telemetry,
};
use meshbench_results::attribution::{self, Logged};

/// One line per tagged request: the id, the start (seconds since the epoch, 6 decimals: what
/// Envoy's start time holds), then the points in ns after it, `-` where the request never got.
pub const FORMAT: &str = "%REQ(X-MESHBENCH-ID)% %START_TIME(%s.%6f)% \
%COMMON_DURATION(DS_RX_BEG:US_TX_BEG:ns)% %COMMON_DURATION(DS_RX_BEG:US_RX_BEG:ns)% \
%COMMON_DURATION(DS_RX_BEG:DS_TX_BEG:ns)% %COMMON_DURATION(DS_RX_BEG:US_CX_BEG:ns)% \
%COMMON_DURATION(DS_RX_BEG:US_CX_END:ns)% %UPSTREAM_REQUEST_ATTEMPT_COUNT% %RESPONSE_CODE%\n";

/// Envoy's command-line flag for how often its log files are flushed (its default is 10 s):
/// the lines are read right after the step.
pub const FLUSH_ARGS: [&str; 2] = ["--file-flush-interval-msec", "200"];

/// The name of attribution's provider in Istio's mesh configuration.
pub const ISTIO_PROVIDER: &str = "meshbench-attribution";

/// Where Envoys istiod configures write the lines: their stdout, the container's log.
pub const ISTIO_PATH: &str = "/dev/stdout";

/// How often an Istio agent's Envoy flushes its log files (ProxyConfig's
/// `fileFlushInterval`; Envoy's default is 10 s) when attribution is on.
pub const ISTIO_FLUSH_INTERVAL: &str = "0.2s";

/// The provider istiod's mesh configuration must name for [`istio_telemetry`].
pub fn istio_provider() -> ExtensionProvider {
    ExtensionProvider {
        name: ISTIO_PROVIDER.into(),
        envoy_file_access_log: Some(FileAccessLogProvider {
            path: ISTIO_PATH.into(),
            log_format: Some(LogFormat {
                text: Some(FORMAT.into()),
            }),
        }),
    }
}

/// The CEL expression that keeps only the engine's requests (Envoy's CEL access-log filter,
/// which Istio's `Telemetry` filter becomes): the header there and with meshbench's prefix.
pub fn istio_filter() -> String {
    let header = attribution::ID_HEADER;
    format!(
        "'{header}' in request.headers && request.headers['{header}'].startsWith('{}')",
        attribution::ID_PREFIX
    )
}

/// The `Telemetry` that logs the tagged requests of every proxy in `namespace` (Istio's root
/// namespace: the whole mesh) to [`ISTIO_PROVIDER`].
pub fn istio_telemetry(namespace: &str) -> Telemetry {
    Telemetry::access_log(
        ObjectMeta {
            name: Some(ISTIO_PROVIDER.into()),
            namespace: Some(namespace.into()),
            ..ObjectMeta::default()
        },
        ISTIO_PROVIDER,
        &istio_filter(),
    )
}

/// Adds the attribution log at `path` to a connection manager.
pub fn add(hcm: &mut HttpConnectionManager, path: &Path) {
    let ours = AccessLogFilter {
        filter_specifier: Some(access_log_filter::FilterSpecifier::HeaderFilter(
            HeaderFilter {
                header: Some(HeaderMatcher {
                    name: attribution::ID_HEADER.into(),
                    header_match_specifier: Some(
                        header_matcher::HeaderMatchSpecifier::StringMatch(StringMatcher {
                            match_pattern: Some(string_matcher::MatchPattern::Prefix(
                                attribution::ID_PREFIX.into(),
                            )),
                            ..Default::default()
                        }),
                    ),
                    ..Default::default()
                }),
            },
        )),
    };
    let file = FileAccessLog {
        path: path.display().to_string(),
        access_log_format: Some(file_access_log::AccessLogFormat::LogFormat(
            SubstitutionFormatString {
                format: Some(substitution_format_string::Format::TextFormatSource(
                    DataSource {
                        specifier: Some(data_source::Specifier::InlineString(FORMAT.into())),
                        ..Default::default()
                    },
                )),
                ..Default::default()
            },
        )),
    };
    hcm.access_log.push(AccessLog {
        name: "envoy.access_loggers.file".into(),
        filter: Some(ours),
        config_type: Some(access_log::ConfigType::TypedConfig(pack_any(file))),
    });
}

/// One line of the log, or `None` when it is not one of the engine's requests or is torn.
pub fn parse(line: &str) -> Option<Logged> {
    let mut fields = line.split_ascii_whitespace();
    let id = attribution::parse_id(fields.next()?)?;
    let start_unix_ns = seconds_to_ns(fields.next()?)?;
    let mut point = || -> Option<Option<u64>> {
        match fields.next()? {
            "-" => Some(None),
            n => n.parse().ok().map(Some),
        }
    };
    let upstream_sent_ns = point()?;
    let upstream_answered_ns = point()?;
    let answered_ns = point()?;
    let connect_begin = point()?;
    let connect_end = point()?;
    let attempts = match fields.next()? {
        "-" => 0,
        n => n.parse().ok()?,
    };
    let status = fields.next()?.parse().unwrap_or(0);
    Some(Logged {
        id,
        start_unix_ns,
        upstream_sent_ns,
        upstream_answered_ns,
        answered_ns,
        connect: connect_begin.zip(connect_end),
        attempts,
        status,
    })
}

/// `1795801751.569744` as ns since the epoch, exactly (no float).
fn seconds_to_ns(text: &str) -> Option<u64> {
    let (secs, frac) = text.split_once('.').unwrap_or((text, ""));
    if frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let frac_ns: u64 = format!("{frac:0<9}").parse().ok()?;
    secs.parse::<u64>()
        .ok()?
        .checked_mul(1_000_000_000)?
        .checked_add(frac_ns)
}

/// Every line of the log at `path` that parses (a missing file: none).
pub fn read(path: &Path) -> Vec<Logged> {
    std::fs::read_to_string(path)
        .map(|text| text.lines().filter_map(parse).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_format_logs_the_header_the_engine_tags() {
        let operator = format!("%REQ({})%", attribution::ID_HEADER.to_ascii_uppercase());
        assert!(FORMAT.starts_with(&operator), "{FORMAT}");
    }

    /// docs/kubernetes.md gives users the provider to add to their mesh configuration: it is
    /// the one the lab's istiod gets.
    #[test]
    fn the_provider_in_docs_kubernetes_md_is_the_labs() {
        let doc = include_str!("../../../../../docs/kubernetes.md");
        let start = doc
            .find("extensionProviders:\n- name: meshbench-attribution")
            .expect("the provider in docs/kubernetes.md");
        let end = start + doc[start..].find("```").expect("the end of its block");
        let mesh: meshbench_k8s::objects::istio::MeshConfig =
            serde_yaml_ng::from_str(&doc[start..end]).unwrap();
        assert_eq!(mesh.extension_providers, vec![istio_provider()]);
    }

    #[test]
    fn a_line_as_envoy_writes_it() {
        let line =
            "mb000000010000002a 1795801751.569744 453853 1767043 1900421 384961 408746 1 200";
        let l = parse(line).unwrap();
        assert_eq!(l.id, (1 << 32) | 42);
        assert_eq!(l.start_unix_ns, 1_795_801_751_569_744_000);
        assert_eq!(l.upstream_sent_ns, Some(453_853));
        assert_eq!(l.upstream_answered_ns, Some(1_767_043));
        assert_eq!(l.answered_ns, Some(1_900_421));
        assert_eq!(l.connect, Some((384_961, 408_746)));
        assert_eq!((l.attempts, l.status), (1, 200));
    }

    #[test]
    fn points_not_reached_and_pooled_connections_are_none() {
        let l = parse("mb0000000000000001 1.5 10 - 30 - - 1 503").unwrap();
        assert_eq!(l.start_unix_ns, 1_500_000_000);
        assert_eq!(l.upstream_answered_ns, None);
        assert_eq!(l.connect, None);
        assert_eq!(l.status, 503);
    }

    #[test]
    fn other_ids_and_torn_lines_are_skipped() {
        assert!(parse("6f1c5a0e-0000-4000-8000-000000000000 1.5 1 2 3 - - 1 200").is_none());
        assert!(parse("mb0000000000000001 1.5 10 20").is_none());
        assert!(parse("").is_none());
    }
}
