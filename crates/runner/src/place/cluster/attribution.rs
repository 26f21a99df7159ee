//! Per-hop attribution of a cluster step: the proxies are Istio's (injected sidecars, the
//! gateway, the waypoint), told by the run's `Telemetry` to write the engine's tagged requests
//! to their stdout. After the load, the `istio-proxy` log of every pod on the step's path is
//! read through the API server (never from a node's disk), parsed by the one parser
//! (`lab::program::envoy::access_log`), and joined with the agents' tagged requests, which
//! come back with their results. Each pod's node names its clock: every pair of clocks on the
//! path is estimated from the requests themselves (`analysis::attribution::clock_offsets`).
//!
//! The pods live through several steps, so a log holds earlier steps' lines too, with the same
//! ids: only the last minutes are read, and a request's line is the one that began while it was
//! out (`analysis::attribution::LogIndex`).

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use meshbench_analysis::attribution::{clock_offsets, join, LogIndex};
use meshbench_engine::Stop;
use meshbench_k8s::{k8s_openapi, names};
use meshbench_lab::program::envoy::access_log;
use meshbench_results::attribution::{Attribution, HopSeen, Logged, Node, Seen, Sent};
use meshbench_results::{ChainRole, PlayedBy, Program, Topology};

use super::ClusterSite;
use crate::attribution::{read_until_complete, HopLogs};

/// The container Istio's injector puts the proxy in.
const PROXY_CONTAINER: &str = "istio-proxy";

/// How long the lines may take to reach the logs: the proxies flush every 0.2 s
/// (`access_log::ISTIO_FLUSH_INTERVAL`), the kubelet writes what it reads at once.
const FLUSH_WAIT: Duration = Duration::from_secs(5);

/// How often the pods' logs are read again while they lack a request.
const READ_EVERY: Duration = Duration::from_millis(500);

/// The node of the pod each line of a hop came from, by the line's id and start.
type NodeOf = HashMap<(u64, u64), String>;

impl ClusterSite {
    /// The step's attribution: its path as Istio's proxies see it, the logs of its pods read
    /// over the last `window` (the step's whole load and more), joined with `sent`.
    pub(super) fn attribute(
        &self,
        topology: Topology,
        window: Duration,
        sample_rate: f64,
        sent: &[Sent],
        stop: &Stop,
    ) -> Attribution {
        let path: Vec<HopSeen> = topology
            .chain()
            .iter()
            .filter(|r| r.role != ChainRole::Backend)
            .map(|r| HopSeen {
                role: r.role,
                program: PlayedBy::Proxy(Program::Istio),
                seen: match r.role {
                    ChainRole::ZtunnelClient | ChainRole::ZtunnelServer => Seen::ConnectionsOnly,
                    _ => Seen::PerRequest,
                },
            })
            .collect();
        let logging: Vec<ChainRole> = path
            .iter()
            .filter(|h| h.seen == Seen::PerRequest)
            .map(|h| h.role)
            .collect();
        let (logs, nodes): (HopLogs, Vec<NodeOf>) =
            read_until_complete(sent, (FLUSH_WAIT, READ_EVERY), stop, || {
                logging
                    .iter()
                    .map(|&role| {
                        let (lines, node_of) = self.hop_lines(role, window);
                        ((role, lines), node_of)
                    })
                    .unzip()
            });
        let index = LogIndex::new(&logs);
        let agents_node = self.agents_node();
        let by_id: HashMap<u64, &Sent> = sent.iter().map(|s| (s.id, s)).collect();
        let clock = |node: Node, id: u64| -> Option<String> {
            let Node::Hop(role) = node else {
                return agents_node.clone();
            };
            let hop = logs.iter().position(|(r, _)| *r == role)?;
            let line = index.line(hop, by_id.get(&id)?)?;
            nodes[hop].get(&(line.id, line.start_unix_ns)).cloned()
        };
        let mut a = join(sample_rate, path, sent, &logs);
        a.clocks = clock_offsets(sent, &logs, &clock);
        a
    }

    /// The pods that play `role` on the path.
    fn role_pods(&self, role: ChainRole) -> Vec<Pod> {
        let pods = match role {
            ChainRole::ClientProxy => self.pods(&self.agents.agent_selector()),
            ChainRole::ServerProxy => self.pods(names::BACKEND_PODS),
            ChainRole::Gateway => self.pods(names::GATEWAY_PODS),
            // Istio names the waypoint's Deployment after its Gateway.
            ChainRole::Waypoint => self.pods("").map(|all| {
                all.into_iter()
                    .filter(|p| {
                        p.metadata
                            .name
                            .as_deref()
                            .is_some_and(|n| n.starts_with(names::WAYPOINT_POD_PREFIX))
                    })
                    .collect()
            }),
            _ => Ok(Vec::new()),
        };
        pods.unwrap_or_default()
    }

    /// Every line `role`'s pods logged over the last `window`, and each line's node. A pod
    /// whose log cannot be read gives none (its requests are then counted as unjoined).
    fn hop_lines(&self, role: ChainRole, window: Duration) -> (Vec<Logged>, NodeOf) {
        let mut lines = Vec::new();
        let mut node_of = HashMap::new();
        for pod in self.role_pods(role) {
            let (Some(name), node) = (
                pod.metadata.name.as_deref(),
                pod.spec.as_ref().and_then(|s| s.node_name.clone()),
            ) else {
                continue;
            };
            let Ok(text) =
                self.client
                    .container_log(&self.section.namespace, name, PROXY_CONTAINER, window)
            else {
                continue;
            };
            let node = node.unwrap_or_else(|| format!("the node of {name}"));
            for line in text.lines().filter_map(access_log::parse) {
                node_of.insert((line.id, line.start_unix_ns), node.clone());
                lines.push(line);
            }
        }
        (lines, node_of)
    }

    /// The node of the agent pods, when they all sit on one (the client's clock); None when
    /// they are spread, since a tagged request does not say which agent sent it.
    fn agents_node(&self) -> Option<String> {
        let pods = self.pods(&self.agents.agent_selector()).ok()?;
        let mut nodes = pods
            .iter()
            .filter_map(|p| p.spec.as_ref()?.node_name.clone());
        let first = nodes.next()?;
        nodes.all(|n| n == first).then_some(first)
    }
}
