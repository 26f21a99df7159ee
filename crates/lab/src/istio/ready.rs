//! When an Istio gateway is ready: its Envoy has accepted everything istiod should send.
//! That is the listener with a filter chain per domain, every route, every domain's
//! certificate and the backend's endpoint, with no update rejected. All of it is read from
//! Envoy's admin endpoint: `/config_dump` one section at a time (the routes are the largest
//! part), `/clusters` and `/stats`.
//!
//! A rejected update fails at once, with Envoy's own message. Waiting for it to pass would
//! only end at the time limit.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::process::RoleProcess;
use crate::LabError;

/// What Envoy should hold once istiod's configuration has arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    /// The listener's name, `IP_PORT` (Istio's naming).
    pub listener: String,
    /// Filter chains on it: one per domain with TLS (SNI), else one.
    pub filter_chains: usize,
    /// Routes across the domains' virtual hosts.
    pub routes: usize,
    /// Domain certificates (SDS `kubernetes://NAME`).
    pub certificates: usize,
    /// The backend as `/clusters` lists its endpoint: `HOST::IP:PORT::`.
    pub endpoint: String,
}

/// The largest admin answer read: a config dump at 1,000 domains x 100 paths is about 130 MB.
const MAX_ANSWER: u64 = 1 << 30;

/// `GET path` from Envoy's (or istiod's) plain HTTP endpoint: the status and the body.
pub fn http_get(addr: SocketAddr, path: &str) -> Result<(u16, String), String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_connect(Some(Duration::from_secs(1)))
        .timeout_global(Some(Duration::from_secs(60)))
        .http_status_as_error(false)
        .build()
        .into();
    let mut answer = agent
        .get(format!("http://{addr}{path}"))
        .call()
        .map_err(|e| format!("GET {path}: {e}"))?;
    let status = answer.status().as_u16();
    let body = answer
        .body_mut()
        .with_config()
        .limit(MAX_ANSWER)
        .read_to_string()
        .map_err(|e| format!("GET {path}: {e}"))?;
    Ok((status, body))
}

/// One section of Envoy's `/config_dump` (`dynamic_listeners`, `dynamic_route_configs`,
/// `dynamic_active_secrets`), parsed.
pub fn config_section(admin: SocketAddr, resource: &str) -> Result<Value, String> {
    let (code, body) = http_get(admin, &format!("/config_dump?resource={resource}"))?;
    if code != 200 {
        return Err(format!("/config_dump?resource={resource}: {code}"));
    }
    serde_json::from_str(&body).map_err(|e| format!("/config_dump: {e}"))
}

/// The items of a `?resource=` dump (each under `configs`).
fn items(section: &Value) -> &[Value] {
    section["configs"].as_array().map_or(&[], Vec::as_slice)
}

/// What is still missing from Envoy's configuration (empty: all there), from the three dump
/// sections and the `/clusters` text.
pub fn missing(
    expected: &Expected,
    listeners: &Value,
    routes: &Value,
    secrets: &Value,
    clusters: &str,
) -> Vec<String> {
    let mut out = Vec::new();
    match items(listeners)
        .iter()
        .find(|l| l["name"] == expected.listener.as_str())
    {
        None => out.push(format!("listener {}", expected.listener)),
        Some(l) => {
            let chains = l["active_state"]["listener"]["filter_chains"]
                .as_array()
                .map_or(0, Vec::len);
            if chains != expected.filter_chains {
                out.push(format!(
                    "{} active with {} filter chains (has {chains})",
                    expected.listener, expected.filter_chains
                ));
            }
        }
    }
    let routed: usize = items(routes)
        .iter()
        .filter_map(|r| r["route_config"]["virtual_hosts"].as_array())
        .flatten()
        .filter(|vh| {
            vh["domains"].as_array().is_some_and(|d| {
                d.iter()
                    .any(|d| d.as_str().is_some_and(|d| d.starts_with("workspace-")))
            })
        })
        .map(|vh| vh["routes"].as_array().map_or(0, Vec::len))
        .sum();
    if routed != expected.routes {
        out.push(format!("{} routes (has {routed})", expected.routes));
    }
    let certs = items(secrets)
        .iter()
        .filter(|s| {
            s["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("kubernetes://workspace-"))
        })
        .count();
    if certs != expected.certificates {
        out.push(format!(
            "{} domain certificates (has {certs})",
            expected.certificates
        ));
    }
    if !clusters.contains(&expected.endpoint) {
        out.push(format!("the backend's endpoint ({})", expected.endpoint));
    }
    out
}

/// Every xDS update Envoy refused so far, as `counter: count` (empty: none).
pub fn rejected(admin: SocketAddr) -> Vec<String> {
    let Ok((_, text)) = http_get(admin, "/stats?filter=update_rejected") else {
        return Vec::new();
    };
    text.lines()
        .filter(|l| l.split_once(": ").is_some_and(|(_, v)| v.trim() != "0"))
        .map(str::to_string)
        .collect()
}

/// Waits until Envoy (admin at `admin`, run by `agent`) holds everything `expected` says, at
/// most `limit`; returns how long it took. Fails at once when the agent exits or Envoy rejects
/// an update, and at the limit with what is still missing.
pub fn wait_acked(
    agent: &mut RoleProcess,
    admin: SocketAddr,
    expected: &Expected,
    limit: Duration,
) -> Result<Duration, LabError> {
    let began = Instant::now();
    let mut last = vec!["Envoy's admin endpoint".to_string()];
    loop {
        if let Some(status) = agent.exited() {
            return Err(LabError::BadConfig {
                server: "pilot-agent".into(),
                config: None,
                log: format!("exited ({status}): {}", agent.failure_message()),
            });
        }
        let rejections = rejected(admin);
        if !rejections.is_empty() {
            return Err(LabError::BadConfig {
                server: "envoy (configured by istiod)".into(),
                config: None,
                log: format!(
                    "rejected {}: {}",
                    rejections.join(", "),
                    agent.failure_message()
                ),
            });
        }
        let read = || -> Result<Vec<String>, String> {
            let secrets = config_section(admin, "dynamic_active_secrets")?;
            let listeners = config_section(admin, "dynamic_listeners")?;
            let routes = config_section(admin, "dynamic_route_configs")?;
            let (_, clusters) = http_get(admin, "/clusters")?;
            Ok(missing(expected, &listeners, &routes, &secrets, &clusters))
        };
        match read() {
            Ok(m) if m.is_empty() => return Ok(began.elapsed()),
            Ok(m) => last = m,
            Err(e) => last = vec![e],
        }
        if began.elapsed() > limit {
            return Err(LabError::Io(format!(
                "the Istio gateway's Envoy did not receive its configuration within {} s; still missing: {}",
                limit.as_secs(),
                last.join("; ")
            )));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn expected() -> Expected {
        Expected {
            listener: "127.0.0.1_8443".into(),
            filter_chains: 2,
            routes: 4,
            certificates: 2,
            endpoint: "meshbench-backend.internal::127.0.0.1:9000::".into(),
        }
    }

    #[test]
    fn a_complete_configuration_misses_nothing_and_each_gap_is_named() {
        let listeners = json!({"configs": [{"name": "127.0.0.1_8443",
            "active_state": {"listener": {"filter_chains": [{}, {}]}}}]});
        let vh = |d: &str, n: usize| json!({"domains": [d], "routes": vec![json!({}); n]});
        let routes = json!({"configs": [
            {"route_config": {"virtual_hosts": [vh("workspace-1-domain-1.com", 2), vh("blackhole", 9)]}},
            {"route_config": {"virtual_hosts": [vh("workspace-1-domain-2.com:8443", 2)]}}]});
        let secrets = json!({"configs": [{"name": "kubernetes://workspace-1-domain-1.com-cert"},
            {"name": "kubernetes://workspace-1-domain-2.com-cert"}, {"name": "default"}]});
        let clusters = "outbound|9000||meshbench-backend.internal::127.0.0.1:9000::cx_active::0";
        assert!(missing(&expected(), &listeners, &routes, &secrets, clusters).is_empty());

        let gaps = missing(
            &expected(),
            &json!({}),
            &json!({"configs": []}),
            &json!({"configs": [{"name": "default"}]}),
            "",
        );
        assert_eq!(
            gaps,
            [
                "listener 127.0.0.1_8443",
                "4 routes (has 0)",
                "2 domain certificates (has 0)",
                "the backend's endpoint (meshbench-backend.internal::127.0.0.1:9000::)"
            ]
        );
        let one_chain = json!({"configs": [{"name": "127.0.0.1_8443",
            "active_state": {"listener": {"filter_chains": [{}]}}}]});
        assert_eq!(
            missing(&expected(), &one_chain, &routes, &secrets, clusters),
            ["127.0.0.1_8443 active with 2 filter chains (has 1)"]
        );
    }
}
