//! Envoy's own account of a step, read from its admin endpoint: a second witness beside the
//! engine's counts. The engine says what it sent and what came back; an Envoy role says how
//! many requests it served (by response class), how often its upstreams failed, how many
//! connections it holds open and how much memory it allocated. When the two disagree beyond
//! what the window's edges can explain, one of them did not see what the other did.
//!
//! This module is the project's one reader of Envoy's admin endpoint. Besides the stats it
//! reads what an Istio gateway's readiness needs (`crate::program::envoy::ready`): a section of
//! `/config_dump` ([`config_dump`]), the whole dump's size, `/clusters` and the rejected xDS
//! updates.
//!
//! One reading is one blocking HTTP/1.1 `GET` with ureq, as the runner reads Prometheus,
//! bounded in time and size: the stats (`/stats?filter=...`, plain text, `name: value` lines)
//! connect within [`TIMEOUT`] and answer within [`DEADLINE`] and [`MAX_ANSWER`]; what a
//! gateway's readiness reads (a config dump, the clusters, the rejected updates) may take
//! [`DUMP_DEADLINE`] and [`MAX_DUMP`], as a gateway with thousands of routes needs. The stats text is read by [`parse_stats`], a pure function of its input,
//! tested on text captured from Envoy 1.40. Failures are typed ([`AdminError`]): unreachable,
//! timed out, or not an Envoy admin answer; a reading that fails is a note on the role, never
//! a failed step (the runner decides that).
//!
//! Which stats the reading needs is [`STATS_NEEDED`]: a bootstrap that limits the stats Envoy
//! creates (Istio's `stats_config.stats_matcher.inclusion_list`) must include these prefixes,
//! or the reading finds no request counts.

use std::net::SocketAddr;
use std::time::Duration;

use meshbench_results::{ProxyCounters, ProxyRequests};
use serde_json::Value;
use thiserror::Error;

/// The stat name prefixes this reading needs, for a bootstrap's
/// `stats_config.stats_matcher.inclusion_list` (each as a `prefix` matcher):
///
/// - `http.`: every HTTP connection manager's `downstream_rq_total` and `downstream_rq_1xx`
///   ... `downstream_rq_5xx` (the admin's own `http.admin.` is read and left out);
/// - `cluster.`: each cluster's upstream failures (`upstream_cx_connect_fail`,
///   `upstream_rq_timeout`, `upstream_rq_per_try_timeout`,
///   `upstream_cx_destroy_remote_with_active_rq`, `upstream_rq_retry`,
///   `upstream_rq_pending_overflow`);
/// - `tcp.`: each TCP proxy's `downstream_cx_total` (the connections an L4 tunnel carried);
/// - `listener.`: each listener's `downstream_cx_active` (connections open now);
/// - `server.`: `server.memory_allocated` and `server.memory_heap_size` (also the sign that
///   the answer is Envoy's).
///
/// The request filter of a reading is built from the same list, so what is read is exactly
/// what is asked for.
pub const STATS_NEEDED: &[&str] = &["http.", "cluster.", "tcp.", "listener.", "server."];

/// The connect: an admin on the same machine answers in milliseconds.
pub const TIMEOUT: Duration = Duration::from_secs(1);
/// The whole answer.
pub const DEADLINE: Duration = Duration::from_secs(2);
/// The largest answer read (a rig's Envoy writes ~30 KiB of these stats; Istio's clusters and
/// listeners can write a few MiB).
pub const MAX_ANSWER: usize = 8 << 20;

/// The whole answer of a config dump or `/clusters`.
pub const DUMP_DEADLINE: Duration = Duration::from_secs(60);
/// The largest config dump read: at 1,000 domains x 100 paths an Istio gateway's is about
/// 130 MB.
pub const MAX_DUMP: usize = 1 << 30;

/// How long one reading may take, how large its answer may be, and what it accepts.
#[derive(Debug, Clone, Copy)]
struct Budget {
    deadline: Duration,
    max_bytes: usize,
    accept: &'static str,
}

/// The stats: small and quick, read on every step, as plain text.
const STATS_BUDGET: Budget = Budget {
    deadline: DEADLINE,
    max_bytes: MAX_ANSWER,
    accept: "text/plain",
};
/// A configuration and whether it was accepted: large at thousands of routes, read while a
/// gateway starts, in the form the endpoint gives (JSON for a config dump, text for
/// `/clusters` and the rejected updates).
const CONFIG_BUDGET: Budget = Budget {
    deadline: DUMP_DEADLINE,
    max_bytes: MAX_DUMP,
    accept: "*/*",
};

/// The cluster of Istio's control plane connection: its failures are not the traffic's.
const CONTROL_PLANE_CLUSTER: &str = "xds-grpc";

/// Why an admin endpoint could not be read.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum AdminError {
    #[error("Envoy's admin at {addr} is unreachable ({reason})")]
    Unreachable { addr: SocketAddr, reason: String },
    #[error("Envoy's admin at {addr} did not answer within {secs} s")]
    TimedOut { addr: SocketAddr, secs: f64 },
    #[error("{addr} did not give an Envoy admin answer: {why}")]
    NotEnvoy { addr: SocketAddr, why: NotEnvoy },
}

/// What was wrong with an answer (the part of [`AdminError::NotEnvoy`] the pure functions
/// find, without an address).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum NotEnvoy {
    #[error("not an HTTP/1.1 answer ({0})")]
    Http(String),
    #[error("status {0}")]
    Status(String),
    #[error("more than {mib} MiB")]
    TooLarge { mib: usize },
    #[error("not JSON ({0})")]
    NotJson(String),
    #[error("no server.memory_allocated in its stats (not Envoy's /stats, or `server.` not included by its stats matcher)")]
    NoServerStats,
}

/// Reads the admin endpoint at `addr` once.
pub fn read(addr: SocketAddr) -> Result<ProxyCounters, AdminError> {
    let body = fetch(addr, &stats_path(), STATS_BUDGET)?;
    parse_stats(&String::from_utf8_lossy(&body)).map_err(|why| AdminError::NotEnvoy { addr, why })
}

/// A section of Envoy's `/config_dump` (`?resource=`), each item under `configs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DumpSection {
    DynamicListeners,
    DynamicRouteConfigs,
    DynamicActiveSecrets,
}

impl DumpSection {
    /// Its name as Envoy's `resource` parameter takes it.
    pub fn resource(self) -> &'static str {
        match self {
            DumpSection::DynamicListeners => "dynamic_listeners",
            DumpSection::DynamicRouteConfigs => "dynamic_route_configs",
            DumpSection::DynamicActiveSecrets => "dynamic_active_secrets",
        }
    }
}

/// One section of the config dump of the admin at `addr`, parsed; only the items whose name
/// matches `name_regex` (Envoy's `name_regex`, as given), when there is one.
pub fn config_dump(
    addr: SocketAddr,
    section: DumpSection,
    name_regex: Option<&str>,
) -> Result<Value, AdminError> {
    let filter = name_regex.map_or(String::new(), |r| format!("&name_regex={r}"));
    let path = format!("/config_dump?resource={}{filter}", section.resource());
    let body = fetch(addr, &path, CONFIG_BUDGET)?;
    serde_json::from_slice(&body).map_err(|e| AdminError::NotEnvoy {
        addr,
        why: NotEnvoy::NotJson(e.to_string()),
    })
}

/// The whole config dump of the admin at `addr`, endpoints included (`include_eds`), parsed.
pub fn config_dump_all(addr: SocketAddr) -> Result<Value, AdminError> {
    let body = fetch(addr, "/config_dump?include_eds", CONFIG_BUDGET)?;
    serde_json::from_slice(&body).map_err(|e| AdminError::NotEnvoy {
        addr,
        why: NotEnvoy::NotJson(e.to_string()),
    })
}

/// The size in bytes of the whole config dump of the admin at `addr`.
pub fn config_dump_bytes(addr: SocketAddr) -> Result<usize, AdminError> {
    fetch(addr, "/config_dump", CONFIG_BUDGET).map(|body| body.len())
}

/// `; config dump N MB` for a record line: the size of the config dump of the admin at
/// `addr`, or why it could not be read.
pub fn config_dump_note(addr: SocketAddr) -> String {
    match config_dump_bytes(addr) {
        Ok(bytes) => format!("; config dump {:.1} MB", bytes as f64 / 1e6),
        Err(e) => format!("; config dump: {e}"),
    }
}

/// `/clusters` of the admin at `addr`, as text (`CLUSTER::HOST:PORT::STAT::VALUE` lines).
pub fn clusters(addr: SocketAddr) -> Result<String, AdminError> {
    fetch(addr, "/clusters", CONFIG_BUDGET).map(|body| String::from_utf8_lossy(&body).into_owned())
}

/// `/stats?filter=FILTER` of the admin at `addr`, as text (`name: value` lines).
pub fn stats(addr: SocketAddr, filter: &str) -> Result<String, AdminError> {
    let path = format!("/stats?filter={}", percent_encode(filter));
    fetch(addr, &path, STATS_BUDGET).map(|body| String::from_utf8_lossy(&body).into_owned())
}

/// Every xDS update the Envoy at `addr` refused so far, as `counter: count` (empty: none).
pub fn rejected_updates(addr: SocketAddr) -> Result<Vec<String>, AdminError> {
    let body = fetch(addr, "/stats?filter=update_rejected", CONFIG_BUDGET)?;
    Ok(parse_rejected(&String::from_utf8_lossy(&body)))
}

/// The `update_rejected` counters of `/stats` text that are not 0, as their lines.
pub fn parse_rejected(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.split_once(": ").is_some_and(|(_, v)| v.trim() != "0"))
        .map(str::to_string)
        .collect()
}

/// `/stats?filter=^(http\.|cluster\.|...)`: the stats [`STATS_NEEDED`] names, as plain text.
pub fn stats_path() -> String {
    let alternatives: Vec<String> = STATS_NEEDED.iter().map(|p| p.replace('.', "\\.")).collect();
    format!(
        "/stats?filter={}",
        percent_encode(&format!("^({})", alternatives.join("|")))
    )
}

/// What a query value keeps as it is: RFC 3986's unreserved characters; every other byte is
/// written `%XX`.
const QUERY_VALUE: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

fn percent_encode(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, QUERY_VALUE).to_string()
}

/// One `GET path` over HTTP/1.1 with ureq, bounded in time (connect [`TIMEOUT`], the whole
/// answer the budget's deadline) and size (the budget's bytes); the body of a 200 answer.
fn fetch(addr: SocketAddr, path: &str, budget: Budget) -> Result<Vec<u8>, AdminError> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_connect(Some(TIMEOUT))
        .timeout_global(Some(budget.deadline))
        .http_status_as_error(false)
        .user_agent("meshbench")
        .build()
        .into();
    let failed = |e: ureq::Error| match e {
        ureq::Error::Timeout(_) => AdminError::TimedOut {
            addr,
            secs: budget.deadline.as_secs_f64(),
        },
        ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused => {
            AdminError::Unreachable {
                addr,
                reason: io.to_string(),
            }
        }
        ureq::Error::ConnectionFailed => AdminError::Unreachable {
            addr,
            reason: "connection failed".into(),
        },
        ureq::Error::BodyExceedsLimit(_) => AdminError::NotEnvoy {
            addr,
            why: NotEnvoy::TooLarge {
                mib: budget.max_bytes >> 20,
            },
        },
        other => AdminError::NotEnvoy {
            addr,
            why: NotEnvoy::Http(other.to_string()),
        },
    };
    let mut answer = agent
        .get(format!("http://{addr}{path}"))
        .header("Accept", budget.accept)
        .call()
        .map_err(failed)?;
    let status = answer.status();
    if status != 200 {
        let why = NotEnvoy::Status(status.to_string());
        return Err(AdminError::NotEnvoy { addr, why });
    }
    answer
        .body_mut()
        .with_config()
        .limit(budget.max_bytes as u64)
        .read_to_vec()
        .map_err(failed)
}

/// Reads `/stats` plain text (`name: value` lines; histograms, text readouts and anything
/// else that is not a whole number are skipped) into the figures, summed as
/// [`ProxyCounters`] says. Refused when `server.memory_allocated` is not there: every Envoy
/// has it, so without it the text is not Envoy's stats (or `server.` was excluded).
pub fn parse_stats(text: &str) -> Result<ProxyCounters, NotEnvoy> {
    let mut c = ProxyCounters::default();
    let mut requests: Option<ProxyRequests> = None;
    let mut allocated = None;
    for line in text.lines() {
        let Some((name, value)) = line.split_once(": ") else {
            continue;
        };
        let Ok(v) = value.trim().parse::<u64>() else {
            continue;
        };
        if let Some(rest) = name.strip_prefix("http.") {
            let Some((prefix, stat)) = rest.rsplit_once('.') else {
                continue;
            };
            // The admin's own requests (this reading among them) and per-user-agent copies.
            if prefix == "admin" || prefix.contains(".user_agent.") {
                continue;
            }
            let r = match stat {
                "downstream_rq_total"
                | "downstream_rq_1xx"
                | "downstream_rq_2xx"
                | "downstream_rq_3xx"
                | "downstream_rq_4xx"
                | "downstream_rq_5xx" => requests.get_or_insert_with(ProxyRequests::default),
                _ => continue,
            };
            match stat {
                "downstream_rq_total" => r.total += v,
                "downstream_rq_1xx" => r.status_1xx += v,
                "downstream_rq_2xx" => r.status_2xx += v,
                "downstream_rq_3xx" => r.status_3xx += v,
                "downstream_rq_4xx" => r.status_4xx += v,
                _ => r.status_5xx += v,
            }
        } else if let Some(rest) = name.strip_prefix("cluster.") {
            let Some((cluster, stat)) = rest.rsplit_once('.') else {
                continue;
            };
            if cluster == CONTROL_PLANE_CLUSTER {
                continue;
            }
            let f = &mut c.upstream_failures;
            match stat {
                "upstream_cx_connect_fail" => f.connect_fail += v,
                "upstream_rq_timeout" => f.rq_timeout += v,
                "upstream_rq_per_try_timeout" => f.rq_per_try_timeout += v,
                "upstream_cx_destroy_remote_with_active_rq" => f.remote_closed_active_rq += v,
                "upstream_rq_retry" => f.rq_retry += v,
                "upstream_rq_pending_overflow" => f.rq_pending_overflow += v,
                _ => {}
            }
        } else if let Some(rest) = name.strip_prefix("listener.") {
            let Some(listener) = rest.strip_suffix(".downstream_cx_active") else {
                continue;
            };
            // Listener names are addresses (`127.0.0.1_8080`), dots and all: the per-thread
            // copies end in `.worker_N` or `.main_thread`, the admin's listener is `admin`.
            let last = listener.rsplit('.').next().unwrap_or(listener);
            if listener == "admin"
                || listener.starts_with("admin.")
                || last.starts_with("worker_")
                || last == "main_thread"
            {
                continue;
            }
            c.connections_active += v;
        } else if let Some(rest) = name.strip_prefix("tcp.") {
            if rest.ends_with(".downstream_cx_total") {
                *c.tunnel_connections.get_or_insert(0) += v;
            }
        } else if name == "server.memory_allocated" {
            allocated = Some(v);
        } else if name == "server.memory_heap_size" {
            c.memory_heap_size_bytes = v;
        }
    }
    c.memory_allocated_bytes = allocated.ok_or(NotEnvoy::NoServerStats)?;
    c.requests = requests;
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines of `GET /stats?filter=...` from Envoy 1.40.0 (BoringSSL build) with an L7
    /// listener (`server_proxy`, 2 workers) and an L4 one (`ztunnel`) in front of one cluster
    /// (`next`): three 200s, a 404 from the upstream, two 503s after the upstream was stopped
    /// (connect failures), two connections held open on the L7 listener, one tunnel connection
    /// closed for want of an upstream. Captured by hand and trimmed to a sample of each kind
    /// of line, the ones read among them.
    const CAPTURED: &str = "\
cluster.next.assignment_stale: 0
cluster.next.circuit_breakers.default.rq_pending_open: 0
cluster.next.external.upstream_rq_time: P0(nan,1.0333333333333334) P25(nan,1.0333333333333334) P50(nan,1.0666666666666667) P75(nan,3.033333333333333) P90(nan,3.066666666666667) P95(nan,3.066666666666667) P99(nan,3.066666666666667) P99.5(nan,3.066666666666667) P99.9(nan,3.066666666666667) P100(nan,3.066666666666667)
cluster.next.upstream_cx_connect_fail: 3
cluster.next.upstream_cx_connect_ms: P0(nan,0) P25(nan,0) P50(nan,0) P75(nan,0) P90(nan,1.05) P95(nan,1.05) P99(nan,1.05) P99.5(nan,1.05) P99.9(nan,1.05) P100(nan,1.05)
cluster.next.upstream_cx_destroy_remote_with_active_rq: 0
cluster.next.upstream_rq_pending_overflow: 0
cluster.next.upstream_rq_per_try_timeout: 0
cluster.next.upstream_rq_retry: 0
cluster.next.upstream_rq_retry_backoff_exponential: 0
cluster.next.upstream_rq_retry_limit_exceeded: 0
cluster.next.upstream_rq_retry_success: 0
cluster.next.upstream_rq_timeout: 0
http.admin.downstream_cx_active: 1
http.admin.downstream_rq_1xx: 0
http.admin.downstream_rq_2xx: 6
http.admin.downstream_rq_3xx: 0
http.admin.downstream_rq_4xx: 2
http.admin.downstream_rq_5xx: 0
http.admin.downstream_rq_time: No recorded values
http.admin.downstream_rq_total: 8
http.async-client.no_cluster: 0
http.server_proxy.downstream_cx_active: 2
http.server_proxy.downstream_cx_total: 6
http.server_proxy.downstream_rq_1xx: 0
http.server_proxy.downstream_rq_2xx: 3
http.server_proxy.downstream_rq_3xx: 0
http.server_proxy.downstream_rq_4xx: 1
http.server_proxy.downstream_rq_5xx: 2
http.server_proxy.downstream_rq_timeout: 0
http.server_proxy.downstream_rq_total: 6
listener.127.0.0.1_19902.downstream_cx_active: 2
listener.127.0.0.1_19902.downstream_cx_total: 6
listener.127.0.0.1_19902.http.server_proxy.downstream_rq_2xx: 3
listener.127.0.0.1_19902.worker_0.downstream_cx_active: 2
listener.127.0.0.1_19902.worker_1.downstream_cx_active: 0
listener.127.0.0.1_19903.downstream_cx_active: 0
listener.127.0.0.1_19903.worker_0.downstream_cx_active: 0
listener.127.0.0.1_19903.worker_1.downstream_cx_active: 0
listener.admin.downstream_cx_active: 1
listener.admin.http.admin.downstream_rq_2xx: 6
listener.admin.main_thread.downstream_cx_active: 1
server.memory_allocated: 6453272
server.memory_heap_size: 10485760
server.memory_physical_size: 13560638
tcp.ztunnel.downstream_cx_rx_bytes_total: 79
tcp.ztunnel.downstream_cx_total: 2
tcp.ztunnel.upstream_flush_active: 0
";

    #[test]
    fn captured_stats_are_read_and_summed() {
        let c = parse_stats(CAPTURED).unwrap();
        assert_eq!(
            c.requests,
            Some(ProxyRequests {
                total: 6,
                status_1xx: 0,
                status_2xx: 3,
                status_3xx: 0,
                status_4xx: 1,
                status_5xx: 2,
            }),
            "the admin's own 8 requests are not counted"
        );
        assert_eq!(c.upstream_failures.connect_fail, 3);
        assert_eq!(c.upstream_failures.total(), 3);
        assert_eq!(
            c.connections_active, 2,
            "listeners only: no admin, no per-worker copy"
        );
        assert_eq!(c.tunnel_connections, Some(2));
        assert_eq!(c.memory_allocated_bytes, 6_453_272);
        assert_eq!(c.memory_heap_size_bytes, 10_485_760);
        assert!((c.memory_heap_size_mib() - 10.0).abs() < 1e-9);
    }

    #[test]
    fn managers_and_clusters_add_up_and_the_control_plane_is_left_out() {
        let text = "\
http.inbound_0.0.0.0_8080.downstream_rq_total: 10
http.inbound_0.0.0.0_8080.downstream_rq_2xx: 9
http.inbound_0.0.0.0_8080.downstream_rq_5xx: 1
http.outbound.downstream_rq_total: 5
http.outbound.downstream_rq_2xx: 5
http.outbound.user_agent.curl.downstream_rq_total: 5
cluster.a.upstream_rq_retry: 2
cluster.outbound|8080||svc.ns.svc.cluster.local.upstream_rq_timeout: 4
cluster.xds-grpc.upstream_cx_connect_fail: 7
cluster.b.upstream_rq_pending_overflow: 1
cluster.b.upstream_cx_destroy_remote_with_active_rq: 1
cluster.b.upstream_rq_per_try_timeout: 1
server.memory_allocated: 1
";
        let c = parse_stats(text).unwrap();
        let r = c.requests.unwrap();
        assert_eq!((r.total, r.status_2xx, r.status_5xx), (15, 14, 1));
        let f = c.upstream_failures;
        assert_eq!(
            (
                f.connect_fail,
                f.rq_retry,
                f.rq_timeout,
                f.rq_pending_overflow,
                f.remote_closed_active_rq,
                f.rq_per_try_timeout
            ),
            (0, 2, 4, 1, 1, 1)
        );
        assert_eq!(c.tunnel_connections, None, "no TCP proxy");
        assert_eq!(c.memory_heap_size_bytes, 0);
    }

    #[test]
    fn an_l4_envoy_has_no_requests_and_text_that_is_not_envoys_is_refused() {
        let c = parse_stats("tcp.t.downstream_cx_total: 4\nserver.memory_allocated: 9\n").unwrap();
        assert_eq!((c.requests, c.tunnel_connections), (None, Some(4)));
        for text in [
            "",
            "<html>hello</html>",
            "http.x.downstream_rq_total: 3\n",
            "server.memory_allocated: lots\n",
        ] {
            assert_eq!(parse_stats(text), Err(NotEnvoy::NoServerStats), "{text}");
        }
    }

    #[test]
    fn a_reading_since_another_differences_counters_and_keeps_gauges() {
        let before = parse_stats(
            "http.p.downstream_rq_total: 4\nhttp.p.downstream_rq_2xx: 4\ncluster.c.upstream_rq_retry: 1\n\
             tcp.t.downstream_cx_total: 2\nlistener.1.2.3.4_80.downstream_cx_active: 9\n\
             server.memory_allocated: 100\nserver.memory_heap_size: 200\n",
        )
        .unwrap();
        let after = parse_stats(
            "http.p.downstream_rq_total: 14\nhttp.p.downstream_rq_2xx: 13\nhttp.p.downstream_rq_5xx: 1\n\
             cluster.c.upstream_rq_retry: 3\ntcp.t.downstream_cx_total: 7\n\
             listener.1.2.3.4_80.downstream_cx_active: 1\n\
             server.memory_allocated: 150\nserver.memory_heap_size: 400\n",
        )
        .unwrap();
        let d = after.since(&before);
        let r = d.requests.unwrap();
        assert_eq!((r.total, r.status_2xx, r.status_5xx), (10, 9, 1));
        assert_eq!(d.upstream_failures.rq_retry, 2);
        assert_eq!(d.tunnel_connections, Some(5));
        assert_eq!(d.connections_active, 1);
        assert_eq!(
            (d.memory_allocated_bytes, d.memory_heap_size_bytes),
            (150, 400)
        );
        // A restarted Envoy counts from zero: nothing goes negative.
        assert_eq!(before.since(&after).requests.unwrap().total, 0);
    }

    /// A server on loopback that answers every connection with `answer`, then closes.
    fn liar(answer: &'static [u8]) -> SocketAddr {
        use std::io::{Read, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            for mut s in l.incoming().flatten() {
                let _ = s.read(&mut [0u8; 4096]);
                let _ = s.write_all(answer);
            }
        });
        addr
    }

    #[test]
    fn an_answer_that_is_not_a_200_from_an_http_server_is_not_envoy() {
        type Expected = fn(&NotEnvoy) -> bool;
        let cases: [(&[u8], Expected); 3] = [
            (
                b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n",
                |w| *w == NotEnvoy::Status("404 Not Found".into()),
            ),
            (b"SSH-2.0-OpenSSH\r\n", |w| matches!(w, NotEnvoy::Http(_))),
            (
                b"HTTP/1.1 200 OK\r\ncontent-length: 14\r\n\r\nnot envoy: yes",
                |w| *w == NotEnvoy::NoServerStats,
            ),
        ];
        for (answer, expected) in cases {
            match read(liar(answer)) {
                Err(AdminError::NotEnvoy { why, .. }) if expected(&why) => {}
                other => panic!("{:?}: {other:?}", String::from_utf8_lossy(answer)),
            }
        }
    }

    #[test]
    fn a_config_dump_is_json_and_an_answer_that_is_not_is_refused() {
        let dump =
            b"HTTP/1.1 200 OK\r\ncontent-length: 28\r\n\r\n{\"configs\": [{\"name\": \"l\"}]}";
        let got = config_dump(liar(dump), DumpSection::DynamicListeners, None).unwrap();
        assert_eq!(got["configs"][0]["name"], "l");
        assert_eq!(config_dump_bytes(liar(dump)).unwrap(), 28);
        let text = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello";
        match config_dump(
            liar(text),
            DumpSection::DynamicRouteConfigs,
            Some(".*a.com.*"),
        ) {
            Err(AdminError::NotEnvoy {
                why: NotEnvoy::NotJson(_),
                ..
            }) => {}
            other => panic!("{other:?}"),
        }
        assert_eq!(clusters(liar(text)).unwrap(), "hello");
    }

    #[test]
    fn only_updates_rejected_at_least_once_are_named() {
        let text = "cluster_manager.cds.update_rejected: 0\n\
                    listener_manager.lds.update_rejected: 2\n\
                    http.http.rds.http.5443.update_rejected: 0\n";
        assert_eq!(
            parse_rejected(text),
            ["listener_manager.lds.update_rejected: 2"]
        );
        assert!(parse_rejected("").is_empty());
    }

    #[test]
    fn the_filter_asks_for_what_is_read() {
        assert_eq!(
            stats_path(),
            "/stats?filter=%5E%28http%5C.%7Ccluster%5C.%7Ctcp%5C.%7Clistener%5C.%7Cserver%5C.%29"
        );
    }

    #[test]
    fn an_admin_that_is_not_there_is_unreachable_and_a_silent_one_times_out() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        drop(l);
        assert!(
            matches!(read(addr), Err(AdminError::Unreachable { .. })),
            "a closed port"
        );
        // Accepts (the kernel's backlog) and never answers.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let started = std::time::Instant::now();
        let got = read(silent.local_addr().unwrap());
        assert!(matches!(got, Err(AdminError::TimedOut { .. })), "{got:?}");
        assert!(started.elapsed() < DEADLINE + TIMEOUT);
    }
}
