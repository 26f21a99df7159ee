//! The control plane's cost: what a `control_plane` step asked istiod to serve ([`MeshScale`]:
//! proxies connected over ADS, services, Istio objects and the rates of change) and what it
//! measured beyond istiod's own CPU and memory, which are a role's usage like any other
//! ([`crate::Role::Istiod`]): how long a change took from the API server to each proxy's ACK
//! ([`Propagation`], per xDS type that carried it), how many pushes and bytes that took, and
//! whether the simulated proxies were sent what the real Envoy accepted ([`Agreement`]).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// What the proxies connect as: a pod's sidecar, or an ingress gateway (Envoy's node type
/// `sidecar` or `router`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum ProxyKind {
    #[default]
    Sidecar,
    Gateway,
}

impl ProxyKind {
    /// Its word in the experiment file and in results.
    pub fn name(self) -> &'static str {
        match self {
            ProxyKind::Sidecar => "sidecar",
            ProxyKind::Gateway => "gateway",
        }
    }
}

/// One cell of the control-plane matrix: the mesh istiod serves during a step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MeshScale {
    pub kind: ProxyKind,
    /// Simulated proxies connected over ADS (the real Envoy comes on top).
    pub proxies: u32,
    /// Kubernetes Services, each with its EndpointSlice.
    pub services: u32,
    /// Istio objects: VirtualServices and DestinationRules, one of each per service in turn.
    pub istio_objects: u32,
    /// Endpoint changes written per second (an EndpointSlice edited).
    pub endpoint_churn_per_s: f64,
    /// Configuration changes written per second (a ServiceEntry edited).
    pub config_churn_per_s: f64,
}

impl MeshScale {
    /// What orders and identifies a cell (rates to a thousandth).
    fn key(&self) -> (ProxyKind, u32, u32, u32, u64, u64) {
        (
            self.kind,
            self.proxies,
            self.services,
            self.istio_objects,
            (self.endpoint_churn_per_s * 1000.0).round() as u64,
            (self.config_churn_per_s * 1000.0).round() as u64,
        )
    }

    /// Whether it writes any change at its own pace (besides the one probe of each kind).
    pub fn churns(&self) -> bool {
        self.endpoint_churn_per_s > 0.0 || self.config_churn_per_s > 0.0
    }
}

impl Eq for MeshScale {}

impl PartialOrd for MeshScale {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for MeshScale {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key().cmp(&other.key())
    }
}

/// `200 sidecars x 100 services, 20 objects, churn 1+0.2/s`: proxies, services, objects, and
/// the endpoint and configuration changes per second when there are any.
impl fmt::Display for MeshScale {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut text = format!(
            "{} {}s x {} services, {} objects",
            self.proxies,
            self.kind.name(),
            self.services,
            self.istio_objects
        );
        if self.churns() {
            text.push_str(&format!(
                ", churn {}+{}/s",
                self.endpoint_churn_per_s, self.config_churn_per_s
            ));
        }
        f.pad(&text)
    }
}

/// The xDS type a change reached the proxies in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum XdsType {
    /// Clusters: a configuration change adds one.
    Cds,
    /// Endpoints: an endpoint change edits one cluster's.
    Eds,
    /// Listeners: a configuration change adds one (sidecars only; a gateway has none without
    /// a Gateway object).
    Lds,
}

impl XdsType {
    pub const ALL: [XdsType; 3] = [XdsType::Cds, XdsType::Eds, XdsType::Lds];

    pub fn name(self) -> &'static str {
        match self {
            XdsType::Cds => "cds",
            XdsType::Eds => "eds",
            XdsType::Lds => "lds",
        }
    }

    /// Its resource type URL, as istiod labels its push counts.
    pub const fn type_url(self) -> &'static str {
        match self {
            XdsType::Cds => "type.googleapis.com/envoy.config.cluster.v3.Cluster",
            XdsType::Eds => "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment",
            XdsType::Lds => "type.googleapis.com/envoy.config.listener.v3.Listener",
        }
    }
}

impl fmt::Display for XdsType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// How the changes of one xDS type propagated: from the instant meshbench wrote a change to
/// the API server until a proxy ACKed the response that carried it, for every (change, proxy)
/// pair.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Propagation {
    pub xds: XdsType,
    /// Changes written.
    pub changes: u32,
    /// (change, proxy) pairs that should have arrived, and those ACKed within the limit; the
    /// difference never arrived and is in no percentile.
    pub expected: u64,
    pub acked: u64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Per change, the time until 90 % of the proxies had ACKed it; the median over the
    /// changes (SMP's `lds_latency_ms` / `cds_latency_ms`). `None` when no change reached 90 %.
    pub to_90_percent_ms: Option<f64>,
}

impl Propagation {
    /// The figures of `latencies_ms` (one per ACKed pair, any order) and, per change, the
    /// time its 90th percent proxy ACKed it.
    pub fn of(
        xds: XdsType,
        changes: u32,
        expected: u64,
        latencies_ms: &mut [f64],
        to_90_percent_ms: &mut [f64],
    ) -> Propagation {
        latencies_ms.sort_by(f64::total_cmp);
        to_90_percent_ms.sort_by(f64::total_cmp);
        Propagation {
            xds,
            changes,
            expected,
            acked: latencies_ms.len() as u64,
            p50_ms: quantile(latencies_ms, 0.50),
            p90_ms: quantile(latencies_ms, 0.90),
            p99_ms: quantile(latencies_ms, 0.99),
            max_ms: latencies_ms.last().copied().unwrap_or(0.0),
            to_90_percent_ms: (!to_90_percent_ms.is_empty())
                .then(|| quantile(to_90_percent_ms, 0.50)),
        }
    }

    /// Pairs that never arrived.
    pub fn missed(&self) -> u64 {
        self.expected.saturating_sub(self.acked)
    }
}

/// The value at quantile `q` of `sorted` (nearest rank), 0 for none.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// Whether a simulated proxy with the real Envoy's node was sent what that Envoy ACKed: every
/// (type, name, version) the real one holds against the simulated one's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Agreement {
    /// The node both connected as.
    pub node: String,
    /// Resources compared, per xDS type.
    pub resources: BTreeMap<String, u32>,
    /// What differed, one line each (the first 20); empty when they agree.
    pub differences: Vec<String>,
}

impl Agreement {
    pub fn agrees(&self) -> bool {
        self.differences.is_empty()
    }
}

/// What a control-plane step measured, besides istiod's usage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControlPlaneFigures {
    /// Simulated proxies still connected at the window's end, and the real Envoys.
    pub connected: u32,
    pub real_proxies: u32,
    /// What istiod held: Services (with the ServiceEntry churned), endpoints, VirtualServices
    /// and DestinationRules.
    pub services: u32,
    pub endpoints: u32,
    pub virtual_services: u32,
    pub destination_rules: u32,
    /// From the first simulated proxy's connection until every one had ACKed a full
    /// configuration (clusters, endpoints, listeners, routes).
    pub converged_secs: f64,
    /// Per xDS type that carried changes.
    pub propagation: Vec<Propagation>,
    /// istiod's own count of pushes over the window, by xDS type (`pilot_xds_pushes`).
    pub pushes: BTreeMap<String, u64>,
    /// Bytes of xDS responses the simulated proxies received over the window, and per second.
    pub xds_bytes: u64,
    pub xds_bytes_per_sec: f64,
    /// The simulated proxies' own CPU over the window (threads of this process), so that what
    /// they took from istiod's machine is known.
    pub clients_cpu_millicores: f64,
    /// The real Envoy against a simulated proxy of the same node.
    pub agreement: Agreement,
}

impl ControlPlaneFigures {
    /// The propagation of changes of type `xds`, if any were measured.
    pub fn propagation(&self, xds: XdsType) -> Option<&Propagation> {
        self.propagation.iter().find(|p| p.xds == xds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn propagation_reads_nearest_rank_percentiles_and_the_median_ninetieth() {
        let mut lat: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        let mut ninety = vec![30.0, 10.0, 20.0];
        let p = Propagation::of(XdsType::Cds, 3, 120, &mut lat, &mut ninety);
        assert_eq!(
            (p.p50_ms, p.p90_ms, p.p99_ms, p.max_ms),
            (50.0, 90.0, 99.0, 100.0)
        );
        assert_eq!(p.to_90_percent_ms, Some(20.0));
        assert_eq!(p.missed(), 20);
        let none = Propagation::of(XdsType::Lds, 1, 10, &mut [], &mut []);
        assert_eq!((none.p99_ms, none.to_90_percent_ms), (0.0, None));
    }

    #[test]
    fn a_scale_reads_as_the_tables_print_it_and_round_trips() {
        let s = MeshScale {
            kind: ProxyKind::Sidecar,
            proxies: 200,
            services: 100,
            istio_objects: 20,
            endpoint_churn_per_s: 1.0,
            config_churn_per_s: 0.2,
        };
        assert_eq!(
            s.to_string(),
            "200 sidecars x 100 services, 20 objects, churn 1+0.2/s"
        );
        let quiet = MeshScale {
            endpoint_churn_per_s: 0.0,
            config_churn_per_s: 0.0,
            ..s
        };
        assert_eq!(quiet.to_string(), "200 sidecars x 100 services, 20 objects");
        assert!(quiet < s);
        let text = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<MeshScale>(&text).unwrap(), s);
    }
}
