//! The table of what is written: each message meshbench builds with its written fields in
//! proto order (`messages!`), and each oneof with its choices' proto names (`oneofs!`). The
//! macros and the mapping's rules are the parent's ([`super`]); extending the YAML is a line
//! here.

// The message types are the parent's imports (the `Any` and enum tables there name them too).
use super::*;

// The bootstrap, its node, admin and stats.
messages! {
    Bootstrap {
        node, static_resources, dynamic_resources, stats_config, stats_flush_interval, admin,
        bootstrap_extensions,
    }
    core_v3::Node { id, cluster, metadata }
    bootstrap::bootstrap::StaticResources { listeners, clusters }
    bootstrap::bootstrap::DynamicResources { lds_config }
    core_v3::ConfigSource {
        config_source_specifier (oneof), resource_api_version (enum core_v3::ApiVersion),
    }
    core_v3::PathConfigSource { path }
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
    core_v3::config_source::ConfigSourceSpecifier {
        Path => "path" (unwritten),
        PathConfigSource => "path_config_source",
        ApiConfigSource => "api_config_source" (unwritten),
        Ads => "ads" (unwritten),
        Self_ => "self" (unwritten),
    }
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
