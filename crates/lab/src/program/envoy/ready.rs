//! When an Envoy a control plane configures is ready (Istio's gateway and sidecars, Contour's
//! gateway): it has accepted everything its control plane should send, with no update
//! rejected. For a gateway that is the listener with a filter chain per domain, every route,
//! every domain's certificate and the backend's endpoint; for an Istio sidecar,
//! the capture's listeners (`virtualOutbound`, `virtualInbound`), the Service's outbound
//! listener, and the clusters to the backend pod and to the application beside it. All of it is read from
//! Envoy's admin endpoint through the project's one admin reader
//! (`crate::program::envoy::admin`): `/config_dump` one section at a time (the routes are the
//! largest part), `/clusters` and `/stats`; what is missing is a pure function of those.
//!
//! A rejected update fails at once, with Envoy's own message. Waiting for it to pass would
//! only end at the time limit.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use meshbench_results::Stop;
use serde_json::Value;
use thiserror::Error;

use crate::process::RoleProcess;
use crate::program::envoy::admin::{self, AdminError, DumpSection};
use crate::program::envoy::istio_shape;
use crate::LabError;

/// What a gateway's Envoy should hold once its control plane's configuration has arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    /// The listener's name (Istio's `IP_PORT`, Contour's `ingress_https`).
    pub listener: String,
    /// Filter chains on it: one per domain with TLS (SNI), else one.
    pub filter_chains: usize,
    /// The route configurations counted.
    pub route_configs: RouteConfigs,
    /// Routes across the domains' virtual hosts.
    pub routes: usize,
    /// Domain certificates (SDS secrets whose names hold `workspace-`: Istio's
    /// `kubernetes://NAME`, Contour's `NAMESPACE/NAME/HASH`).
    pub certificates: usize,
    /// The backend's cluster (a part of its name) and the endpoints (its replicas)
    /// `/clusters` should list under it.
    pub backend: (String, Vec<SocketAddr>),
}

/// Which of an Envoy's route configurations hold the domains' routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteConfigs {
    /// Every one (istiod's).
    All,
    /// Those whose names begin with this (Contour's `https/`, leaving out its plain
    /// listener's redirects).
    Prefixed(&'static str),
}

impl RouteConfigs {
    /// Whether the route configuration `name` is counted.
    fn counts(self, name: Option<&str>) -> bool {
        match self {
            RouteConfigs::All => true,
            RouteConfigs::Prefixed(prefix) => name.is_some_and(|n| n.starts_with(prefix)),
        }
    }
}

/// Who runs the Envoy that is awaited and who configures it, as a failure names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfiguredBy {
    /// The process started (Istio's `pilot-agent`, which starts Envoy; Envoy itself).
    pub process: &'static str,
    /// Its control plane (`istiod`, `contour`).
    pub control_plane: &'static str,
}

/// What a sidecar's Envoy should hold once istiod's configuration has arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidecarExpected {
    /// Listeners by name.
    pub listeners: Vec<String>,
    /// Clusters as `/clusters` lists them: a cluster's name, or `NAME::IP:PORT` for an
    /// endpoint of it.
    pub clusters: Vec<String>,
}

impl SidecarExpected {
    /// A server's sidecar: the capture's listeners, and the inbound cluster to the
    /// application on `port` beside it.
    pub fn server(port: u16) -> SidecarExpected {
        SidecarExpected {
            listeners: vec!["virtualOutbound".into(), "virtualInbound".into()],
            clusters: vec![format!("inbound|{port}||")],
        }
    }

    /// A client's sidecar: the capture's listeners, the Service's outbound listener on
    /// `port`, and its cluster to `host` with the backend pod's endpoint `backend`.
    pub fn client(port: u16, host: &str, backend: SocketAddr) -> SidecarExpected {
        SidecarExpected {
            listeners: vec![
                "virtualOutbound".into(),
                "virtualInbound".into(),
                istio_shape::port_name(port),
            ],
            clusters: vec![format!("outbound|{port}||{host}::{backend}")],
        }
    }
}

/// What an Envoy must hold before its role counts as started: a gateway's configuration or a
/// sidecar's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Awaited {
    Gateway(Expected),
    Sidecar(SidecarExpected),
}

impl Awaited {
    /// The routes it waits for (a sidecar's are not counted): a longer wait for more.
    pub fn routes(&self) -> usize {
        match self {
            Awaited::Gateway(expected) => expected.routes,
            Awaited::Sidecar(_) => 0,
        }
    }
}

/// What is still missing from a sidecar's configuration (empty: all there), from its
/// listeners' dump section and the `/clusters` text.
pub fn missing_in_sidecar(
    expected: &SidecarExpected,
    listeners: &Value,
    clusters: &str,
) -> Vec<String> {
    let names: Vec<&str> = items(listeners)
        .iter()
        .filter_map(|l| l["name"].as_str())
        .collect();
    let mut out: Vec<String> = expected
        .listeners
        .iter()
        .filter(|l| !names.contains(&l.as_str()))
        .map(|l| format!("listener {l}"))
        .collect();
    out.extend(
        expected
            .clusters
            .iter()
            .filter(|c| !clusters.contains(&format!("{c}::")))
            .map(|c| format!("cluster {c}")),
    );
    out
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
        .filter(|r| (expected.route_configs).counts(r["route_config"]["name"].as_str()))
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
        .filter(|s| s["name"].as_str().is_some_and(|n| n.contains("workspace-")))
        .count();
    if certs != expected.certificates {
        out.push(format!(
            "{} domain certificates (has {certs})",
            expected.certificates
        ));
    }
    let (cluster, endpoints) = &expected.backend;
    for endpoint in endpoints {
        let listed = format!("::{endpoint}::");
        if !clusters
            .lines()
            .any(|l| l.contains(cluster.as_str()) && l.contains(&listed))
        {
            out.push(format!("the backend's endpoint ({cluster}…::{endpoint})"));
        }
    }
    out
}

/// What the Envoy whose admin is at `admin` still misses of `awaited` (empty: all there),
/// read from its admin endpoint.
pub fn missing_at(admin: SocketAddr, awaited: &Awaited) -> Result<Vec<String>, AdminError> {
    let listeners = admin::config_dump(admin, DumpSection::DynamicListeners, None)?;
    let clusters = admin::clusters(admin)?;
    Ok(match awaited {
        Awaited::Gateway(expected) => {
            let secrets = admin::config_dump(admin, DumpSection::DynamicActiveSecrets, None)?;
            let routes = admin::config_dump(admin, DumpSection::DynamicRouteConfigs, None)?;
            missing(expected, &listeners, &routes, &secrets, &clusters)
        }
        Awaited::Sidecar(expected) => missing_in_sidecar(expected, &listeners, &clusters),
    })
}

/// Every xDS update Envoy refused so far, as `counter: count` (empty: none, or the admin did
/// not answer).
pub fn rejected(admin: SocketAddr) -> Vec<String> {
    admin::rejected_updates(admin).unwrap_or_default()
}

/// Why an Envoy did not come to hold what it awaited.
#[derive(Debug, Error)]
pub enum AckError {
    /// Envoy refused an update: its rejection counters, as `counter: count`.
    #[error("Envoy rejected {}", .rejected.join(", "))]
    Rejected { rejected: Vec<String> },
    /// The time limit passed; what was still missing then.
    #[error(
        "Envoy did not receive its configuration within {} s; still missing: {}",
        .limit.as_secs(),
        .missing.join("; ")
    )]
    TimedOut {
        limit: Duration,
        missing: Vec<String>,
    },
    /// A stop was asked; what was still missing then.
    #[error("stopped while Envoy still missed: {}", .missing.join("; "))]
    Stopped { missing: Vec<String> },
    /// The process that runs Envoy (its agent) ended: why, as the liveness check said.
    #[error("{0}")]
    Exited(String),
}

/// How often the waiter reads Envoy's admin.
const POLL: Duration = Duration::from_millis(250);

/// The one wait for Envoy's ACK: until the Envoy whose admin is at `admin` holds everything
/// `awaited` says, at most `limit`; returns how long it took. Each round asks `exited` first
/// (Some: the process that runs Envoy ended, and why), then Envoy's rejected updates, then
/// what is missing; it fails at once on an exit or a rejection, at the limit with what is
/// still missing, and within 250 ms (a poll) of a `stop`. Readings that fail count as missing (the
/// admin may not listen yet). Reads from this thread's network namespace: a caller whose
/// Envoy lives in another wraps the call in [`crate::netns::within`].
pub fn wait_acked(
    admin: SocketAddr,
    awaited: &Awaited,
    limit: Duration,
    stop: &Stop,
    exited: &mut dyn FnMut() -> Option<String>,
) -> Result<Duration, AckError> {
    let began = Instant::now();
    loop {
        if let Some(why) = exited() {
            return Err(AckError::Exited(why));
        }
        let rejected = rejected(admin);
        if !rejected.is_empty() {
            return Err(AckError::Rejected { rejected });
        }
        let missing = match missing_at(admin, awaited) {
            Ok(m) if m.is_empty() => return Ok(began.elapsed()),
            Ok(m) => m,
            Err(e) => vec![e.to_string()],
        };
        if began.elapsed() > limit {
            return Err(AckError::TimedOut { limit, missing });
        }
        if !stop.sleep(POLL) {
            return Err(AckError::Stopped { missing });
        }
    }
}

/// [`wait_acked`] for a process this lab started (`agent`: an Istio agent, or Envoy itself;
/// its Envoy's admin at `admin` inside network namespace `netns` when given), with the lab's
/// errors: an exit or a rejection is a [`LabError::BadConfig`] naming `by`'s process or its
/// control plane's Envoy, with the tail of its output; a time limit [`LabError::Ack`] naming
/// the role; a stop [`LabError::Stopped`] (never a success).
pub fn wait_agent_acked(
    agent: &mut RoleProcess,
    admin: SocketAddr,
    netns: Option<&str>,
    awaited: &Awaited,
    limit: Duration,
    stop: &Stop,
    by: ConfiguredBy,
) -> Result<Duration, LabError> {
    let waited = crate::netns::within(netns, || {
        wait_acked(admin, awaited, limit, stop, &mut || {
            let status = agent.exited()?;
            Some(format!("exited ({status}): {}", agent.failure_message()))
        })
    })?;
    waited.map_err(|e| match e {
        AckError::Exited(log) => LabError::BadConfig {
            server: by.process.into(),
            config: None,
            log,
        },
        AckError::Rejected { rejected } => LabError::BadConfig {
            server: format!("envoy (configured by {})", by.control_plane),
            config: None,
            log: format!(
                "rejected {}: {}",
                rejected.join(", "),
                agent.failure_message()
            ),
        },
        AckError::Stopped { .. } => LabError::Stopped,
        source @ AckError::TimedOut { .. } => LabError::Ack {
            role: agent.name.clone(),
            source,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_stop_ends_the_wait_for_an_ack_as_stopped_never_as_ready() {
        // An admin nothing answers on: the wait would last its whole minute.
        let admin = SocketAddr::from(([127, 0, 0, 1], crate::port::free_port().unwrap()));
        let awaited = Awaited::Sidecar(SidecarExpected::server(8080));
        let stop = Stop::new();
        let asker = stop.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            asker.request();
        });
        let began = Instant::now();
        let waited = wait_acked(admin, &awaited, Duration::from_secs(60), &stop, &mut || {
            None
        });
        assert!(
            began.elapsed() < Duration::from_secs(2),
            "{:?}",
            began.elapsed()
        );
        t.join().unwrap();
        assert!(
            matches!(waited, Err(AckError::Stopped { .. })),
            "{waited:?}"
        );

        // An agent's wait says it as the lab's one stop.
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = std::process::Command::new("sleep");
        cmd.arg("30");
        let place = crate::process::Placement::default();
        let mut agent = RoleProcess::spawn("agent", cmd, &dir.path().join("log"), &place).unwrap();
        let began = Instant::now();
        let waited = wait_agent_acked(
            &mut agent,
            admin,
            None,
            &awaited,
            Duration::from_secs(60),
            &stop,
            ConfiguredBy {
                process: "pilot-agent",
                control_plane: "istiod",
            },
        );
        assert!(matches!(waited, Err(LabError::Stopped)), "{waited:?}");
        assert!(
            began.elapsed() < Duration::from_secs(2),
            "{:?}",
            began.elapsed()
        );
    }

    fn expected() -> Expected {
        Expected {
            listener: "127.0.0.1_8443".into(),
            filter_chains: 2,
            route_configs: RouteConfigs::All,
            routes: 4,
            certificates: 2,
            backend: (
                "outbound|9000||meshbench-backend.internal".into(),
                vec!["127.0.0.1:9000".parse().unwrap()],
            ),
        }
    }

    #[test]
    fn a_sidecar_misses_each_listener_and_cluster_it_does_not_hold() {
        let expected = SidecarExpected {
            listeners: vec!["virtualOutbound".into(), "virtualInbound".into()],
            clusters: vec!["inbound|8080||".into()],
        };
        let listeners =
            json!({"configs": [{"name": "virtualOutbound"}, {"name": "virtualInbound"}]});
        // `/clusters` as Envoy 1.40 lists a cluster with no hosts (ORIGINAL_DST).
        let clusters = "inbound|8080||::observability_name::inbound|8080||\n";
        assert!(missing_in_sidecar(&expected, &listeners, clusters).is_empty());
        let outbound = "outbound|8080||backend.default.svc.cluster.local";
        let client = SidecarExpected {
            listeners: vec!["0.0.0.0_8080".into()],
            clusters: vec![format!("{outbound}::10.213.1.2:8080")],
        };
        assert_eq!(
            missing_in_sidecar(
                &client,
                &json!({"configs": [{"name": "virtualOutbound"}]}),
                &format!("{outbound}::10.213.1.3:8080::cx_active::0\n")
            ),
            [
                "listener 0.0.0.0_8080".to_string(),
                format!("cluster {outbound}::10.213.1.2:8080")
            ]
        );
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
                "the backend's endpoint (outbound|9000||meshbench-backend.internal…::127.0.0.1:9000)"
            ]
        );
        let one_chain = json!({"configs": [{"name": "127.0.0.1_8443",
            "active_state": {"listener": {"filter_chains": [{}]}}}]});
        assert_eq!(
            missing(&expected(), &one_chain, &routes, &secrets, clusters),
            ["127.0.0.1_8443 active with 2 filter chains (has 1)"]
        );
    }

    #[test]
    fn contours_gateway_counts_its_tls_routes_only_and_names_its_own_cluster() {
        let expected = Expected {
            listener: "ingress_https".into(),
            filter_chains: 1,
            route_configs: RouteConfigs::Prefixed("https/"),
            routes: 2,
            certificates: 1,
            backend: (
                "meshbench/backend/9000/".into(),
                vec!["127.0.0.1:9000".parse().unwrap()],
            ),
        };
        let listeners = json!({"configs": [{"name": "ingress_https",
            "active_state": {"listener": {"filter_chains": [{}]}}}]});
        let vh = |d: &str, n: usize| json!({"domains": [d], "routes": vec![json!({}); n]});
        // The plain listener's redirects name the same domain: not counted.
        let routes = json!({"configs": [
            {"route_config": {"name": "ingress_http", "virtual_hosts": [vh("workspace-1-domain-1.com", 2)]}},
            {"route_config": {"name": "https/workspace-1-domain-1.com", "virtual_hosts": [vh("workspace-1-domain-1.com", 2)]}}]});
        let secrets =
            json!({"configs": [{"name": "meshbench/workspace-1-domain-1.com-cert/3f0c"}]});
        let clusters = "meshbench/backend/9000/da39a3ee5e::127.0.0.1:9000::cx_active::0\n\
                        envoy-admin::127.0.0.1:15000::cx_active::1\n";
        assert!(missing(&expected, &listeners, &routes, &secrets, clusters).is_empty());
        // The endpoint under another cluster is not the backend's.
        let elsewhere = "contour::127.0.0.1:9000::cx_active::0\n";
        assert_eq!(
            missing(&expected, &listeners, &routes, &secrets, elsewhere),
            ["the backend's endpoint (meshbench/backend/9000/…::127.0.0.1:9000)"]
        );
    }
}
