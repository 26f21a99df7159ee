//! A small client of Prometheus' HTTP API: `/api/v1/query_range` and `/api/v1/query`, each
//! bounded in time, their answers parsed into series of (time, value) points. Failures are
//! typed so that the caller can tell "Prometheus is not there" (stop asking) from "it refused
//! this query" (say which, go on) from "it had nothing".
//!
//! ureq (blocking, rustls) because the queries are made between steps, after the load, from
//! the runner's own thread: an async runtime would buy nothing, and ureq is small, kept up and
//! already speaks the TLS stack the workspace uses. A Prometheus that is a cluster's Service
//! this machine cannot reach is asked the same way through the API server's service proxy
//! ([`Prometheus::through_api_server`]), with the kubeconfig's own credentials.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use serde::Deserialize;
use thiserror::Error;

/// The largest answer read (a matrix of a few series over a step's window is kilobytes).
const MAX_ANSWER_BYTES: u64 = 32 << 20;

/// Why a query got no answer.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum PromError {
    /// No HTTP answer at all: refused, unreachable, timed out, a name that does not resolve.
    #[error("Prometheus at {url} did not answer ({why})")]
    Unreachable { url: String, why: String },
    /// Prometheus answered that it cannot run the query (`bad_data`: a malformed query).
    #[error("Prometheus refused the query ({kind}: {message})")]
    Refused { kind: String, message: String },
    /// Something answered that is not Prometheus' API (another server on that port, a proxy's
    /// error page).
    #[error("{url} did not answer as Prometheus' API does ({why})")]
    NotTheApi { url: String, why: String },
    /// The step's time for reading ran out before this query.
    #[error("no time left to ask (the step's reading is bounded to {0:?})")]
    OutOfTime(Duration),
}

impl PromError {
    /// Whether asking again (another query, the same server) is pointless.
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            PromError::Unreachable { .. } | PromError::NotTheApi { .. } | PromError::OutOfTime(_)
        )
    }
}

/// One series of an answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub labels: BTreeMap<String, String>,
    /// (Unix seconds, value), in time order; values that are not finite numbers are left out.
    pub points: Vec<(f64, f64)>,
}

impl Series {
    /// `{a="x", b="y"}`, for messages.
    pub fn labels_text(&self) -> String {
        let inner: Vec<String> = self
            .labels
            .iter()
            .map(|(k, v)| format!("{k}={v:?}"))
            .collect();
        format!("{{{}}}", inner.join(", "))
    }
}

/// A Prometheus server, asked with a time limit per query and a deadline for all of them.
pub struct Prometheus {
    /// What messages call it: its URL, or its Service.
    base: String,
    via: Via,
    deadline: Instant,
    budget: Duration,
    timeout: Duration,
}

/// How the queries get to Prometheus.
enum Via {
    /// Straight to its URL.
    Http(ureq::Agent),
    /// Through the API server's service proxy, under this path.
    ApiServer {
        client: Box<meshbench_k8s::BlockingClient>,
        path: String,
    },
}

#[derive(Deserialize)]
struct Answer {
    status: String,
    #[serde(default)]
    data: Option<Data>,
    #[serde(default, rename = "errorType")]
    error_type: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
struct Data {
    #[serde(rename = "resultType")]
    result_type: String,
    result: serde_json::Value,
}

#[derive(Deserialize)]
struct RawSeries {
    #[serde(default)]
    metric: BTreeMap<String, String>,
    #[serde(default)]
    values: Vec<(f64, String)>,
    #[serde(default)]
    value: Option<(f64, String)>,
}

impl Prometheus {
    /// A client of the server at `base` (`http://host:9090`, a path prefix kept); each query
    /// takes at most `timeout`, all of them together at most `budget` from now.
    pub fn new(base: &str, timeout: Duration, budget: Duration) -> Prometheus {
        let base = base.trim().trim_end_matches('/').to_string();
        let mut config = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .user_agent(concat!("meshbench/", env!("CARGO_PKG_VERSION")));
        // A Prometheus on this machine is never reached through a proxy from the environment.
        if is_loopback(&base) {
            config = config.proxy(None);
        }
        Prometheus {
            via: Via::Http(config.build().into()),
            base,
            deadline: Instant::now() + budget,
            budget,
            timeout,
        }
    }

    /// A client of Service `namespace/name` on `port`, asked through the API server's
    /// service proxy with `client`'s credentials.
    pub fn through_api_server(
        client: meshbench_k8s::BlockingClient,
        (namespace, name, port): (&str, &str, u16),
        timeout: Duration,
        budget: Duration,
    ) -> Prometheus {
        Prometheus {
            base: format!("Service {namespace}/{name}:{port} (through the API server)"),
            via: Via::ApiServer {
                client: Box::new(client),
                path: format!("/api/v1/namespaces/{namespace}/services/{name}:{port}/proxy"),
            },
            deadline: Instant::now() + budget,
            budget,
            timeout,
        }
    }

    /// `query` evaluated every `step_secs` from `start` to `end` (Unix seconds).
    pub fn query_range(
        &self,
        query: &str,
        start: f64,
        end: f64,
        step_secs: f64,
    ) -> Result<Vec<Series>, PromError> {
        self.get(
            "query_range",
            &[
                ("query", query.to_string()),
                ("start", format!("{start:.3}")),
                ("end", format!("{end:.3}")),
                ("step", format!("{step_secs:.3}")),
            ],
        )
    }

    /// `query` evaluated at `at` (Unix seconds): one point per series.
    pub fn query(&self, query: &str, at: f64) -> Result<Vec<Series>, PromError> {
        self.get(
            "query",
            &[("query", query.to_string()), ("time", format!("{at:.3}"))],
        )
    }

    fn get(&self, endpoint: &str, params: &[(&str, String)]) -> Result<Vec<Series>, PromError> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(PromError::OutOfTime(self.budget));
        }
        // The last query before the deadline gets what is left, not a whole timeout.
        let within = left.min(self.timeout);
        let (url, status, text) = match &self.via {
            Via::Http(agent) => {
                let url = format!("{}/api/v1/{endpoint}", self.base);
                let (status, text) = self.get_http(agent, &url, params, within)?;
                (url, status, text)
            }
            Via::ApiServer { client, path } => {
                let mut query = url::form_urlencoded::Serializer::new(String::new());
                for (k, v) in params {
                    query.append_pair(k, v);
                }
                let url = format!("{path}/api/v1/{endpoint}?{}", query.finish());
                let page = client
                    .get_through(&url, "Prometheus' API", within, MAX_ANSWER_BYTES as usize)
                    .map_err(|e| PromError::Unreachable {
                        url: self.base.clone(),
                        why: e.to_string(),
                    })?;
                (url, page.status, page.text)
            }
        };
        let not_api = |why: String| PromError::NotTheApi {
            url: url.clone(),
            why,
        };
        let answer: Answer = serde_json::from_str(&text).map_err(|_| {
            let head: String = text.chars().take(80).collect();
            not_api(format!("HTTP {status}: {head:?}"))
        })?;
        if answer.status != "success" {
            return Err(PromError::Refused {
                kind: answer
                    .error_type
                    .unwrap_or_else(|| format!("HTTP {status}")),
                message: answer.error.unwrap_or_default(),
            });
        }
        let data = answer
            .data
            .ok_or_else(|| not_api("a success without data".into()))?;
        match data.result_type.as_str() {
            "matrix" | "vector" => {}
            other => {
                return Err(PromError::Refused {
                    kind: "bad_data".into(),
                    message: format!(
                        "the query's value is a {other}, not a series (write it as an instant vector, e.g. sum(...))"
                    ),
                })
            }
        }
        let raw: Vec<RawSeries> = serde_json::from_value(data.result)
            .map_err(|e| not_api(format!("its result is not a list of series: {e}")))?;
        Ok(raw
            .into_iter()
            .map(|r| Series {
                labels: r.metric,
                points: r
                    .values
                    .into_iter()
                    .chain(r.value)
                    .filter_map(|(t, v)| {
                        v.parse::<f64>()
                            .ok()
                            .filter(|v| v.is_finite())
                            .map(|v| (t, v))
                    })
                    .collect(),
            })
            .collect())
    }
}

impl Prometheus {
    /// One GET of `url` with `params`, within `within`: its status and text.
    fn get_http(
        &self,
        agent: &ureq::Agent,
        url: &str,
        params: &[(&str, String)],
        within: Duration,
    ) -> Result<(u16, String), PromError> {
        let mut req = agent.get(url);
        for (k, v) in params {
            req = req.query(*k, v);
        }
        let req = req.config().timeout_global(Some(within)).build();
        let mut resp = req.call().map_err(|e| PromError::Unreachable {
            url: self.base.clone(),
            why: short(&e),
        })?;
        let status = resp.status().as_u16();
        let text = resp
            .body_mut()
            .with_config()
            .limit(MAX_ANSWER_BYTES)
            .read_to_string()
            .map_err(|e| PromError::Unreachable {
                url: self.base.clone(),
                why: format!("the answer broke off: {}", short(&e)),
            })?;
        Ok((status, text))
    }
}

/// ureq's error in a few words.
fn short(e: &ureq::Error) -> String {
    match e {
        ureq::Error::Io(io) => io.to_string(),
        ureq::Error::Timeout(_) => "timed out".into(),
        ureq::Error::HostNotFound => "host not found".into(),
        other => other.to_string(),
    }
}

fn is_loopback(base: &str) -> bool {
    let Ok(u) = url::Url::parse(base) else {
        return false;
    };
    match u.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(a)) => IpAddr::V4(a).is_loopback(),
        Some(url::Host::Ipv6(a)) => IpAddr::V6(a).is_loopback(),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_port_is_unreachable_at_once() {
        // Bind then drop: nothing listens there now.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let p = Prometheus::new(
            &format!("http://127.0.0.1:{port}/"),
            Duration::from_secs(2),
            Duration::from_secs(5),
        );
        let started = Instant::now();
        let err = p.query("up", 0.0).unwrap_err();
        assert!(matches!(err, PromError::Unreachable { .. }), "{err}");
        assert!(err.is_fatal());
        assert!(started.elapsed() < Duration::from_secs(2));
        assert!(
            err.to_string().starts_with(&format!(
                "Prometheus at http://127.0.0.1:{port} did not answer"
            )),
            "{err}"
        );
    }

    #[test]
    fn loopback_hosts_are_told_apart() {
        assert!(is_loopback("http://127.0.0.1:9090"));
        assert!(is_loopback("http://localhost:9090/prom"));
        assert!(is_loopback("http://[::1]:9090"));
        assert!(!is_loopback("http://prometheus.monitoring:9090"));
    }
}
