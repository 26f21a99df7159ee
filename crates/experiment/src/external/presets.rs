//! The presets of external roles, written once: which series each one reads and how its
//! selector is built from the role's `match`. docs/external.md has the same table for users;
//! `meshbench experiment --dry-run` prints every query a file makes.
//!
//! Kubernetes presets read cAdvisor's series as the kubelet exposes them (`/metrics/cadvisor`,
//! labels `namespace`, `pod`, `container`): CPU and memory per container, network per pod (the
//! kubelet reports it for the pod's sandbox, so it is the whole pod's traffic). The `process`
//! preset reads prometheus-process-exporter's series of one process group (`groupname`),
//! which have no network and no working set.
//!
//! Each figure's query is a `sum` over the selected series, so that several replicas (or a
//! pod's several interfaces) add up to the role's total; counters go through `rate` over the
//! experiment's window (`$window`).

use std::collections::BTreeMap;
use std::fmt;

use meshbench_results::Figure;
use serde::{Deserialize, Serialize, Serializer};
use thiserror::Error;

use super::promql::{selector, Matcher, WINDOW};

/// A preset: a kind of role whose series meshbench knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Preset {
    /// An Istio sidecar: container `istio-proxy` of the pods matched.
    IstioSidecar,
    /// Istio's ingress gateway: `istio-proxy` in `istio-system`, pods `istio-ingressgateway-*`.
    IstioIngressgateway,
    /// Istio ambient's node proxy: `istio-proxy` in `istio-system`, pods `ztunnel-*`.
    Ztunnel,
    /// Istio ambient's L7 proxy: `istio-proxy` of pods `waypoint-*` in the namespace matched.
    Waypoint,
    /// Envoy Gateway's proxies: container `envoy` in `envoy-gateway-system`, pods `envoy-*`.
    EnvoyGateway,
    /// Contour's Envoy: container `envoy` in `projectcontour`, pods `envoy-*`.
    Contour,
    /// The NGINX ingress controller: container `controller` in `ingress-nginx`, pods
    /// `ingress-nginx-controller-*`.
    IngressNginx,
    /// A process group of prometheus-process-exporter (`groupname`).
    Process,
}

/// Where a preset's series come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The kubelet's cAdvisor endpoint: this container of the pods matched.
    Cadvisor {
        container: &'static str,
        /// Defaults of `match` (regular expressions), replaced by the role's own.
        defaults: &'static [(&'static str, &'static str)],
        /// Labels the role's `match` must give (no default would be right).
        required: &'static [&'static str],
        /// Why its network is not read, if it is not.
        no_network: Option<&'static str>,
    },
    /// prometheus-process-exporter: one process group.
    ProcessExporter,
}

/// cAdvisor's series (kubelet `/metrics/cadvisor`).
pub mod cadvisor {
    pub const CPU: &str = "container_cpu_usage_seconds_total";
    pub const WORKING_SET: &str = "container_memory_working_set_bytes";
    pub const RSS: &str = "container_memory_rss";
    pub const RX: &str = "container_network_receive_bytes_total";
    pub const TX: &str = "container_network_transmit_bytes_total";
}

/// prometheus-process-exporter's series.
pub mod process_exporter {
    pub const CPU: &str = "namedprocess_namegroup_cpu_seconds_total";
    pub const MEMORY: &str = "namedprocess_namegroup_memory_bytes";
}

/// Why cAdvisor gives no connection count.
const NO_CONNECTIONS_CADVISOR: &str =
    "cAdvisor has no connection count; give `connections:` a query of the proxy's own metrics";

impl Preset {
    pub const ALL: [Preset; 8] = [
        Preset::IstioSidecar,
        Preset::IstioIngressgateway,
        Preset::Ztunnel,
        Preset::Waypoint,
        Preset::EnvoyGateway,
        Preset::Contour,
        Preset::IngressNginx,
        Preset::Process,
    ];

    /// Its name in the file, in the store (`program`) and in messages.
    pub fn name(self) -> &'static str {
        match self {
            Preset::IstioSidecar => "istio-sidecar",
            Preset::IstioIngressgateway => "istio-ingressgateway",
            Preset::Ztunnel => "ztunnel",
            Preset::Waypoint => "waypoint",
            Preset::EnvoyGateway => "envoy-gateway",
            Preset::Contour => "contour",
            Preset::IngressNginx => "ingress-nginx",
            Preset::Process => "process",
        }
    }

    pub fn source(self) -> Source {
        const ISTIO: &str = "istio-proxy";
        let cadvisor = |container, defaults, required| Source::Cadvisor {
            container,
            defaults,
            required,
            no_network: None,
        };
        match self {
            Preset::IstioSidecar => cadvisor(ISTIO, &[], &["namespace", "pod"]),
            Preset::IstioIngressgateway => cadvisor(
                ISTIO,
                &[
                    ("namespace", "istio-system"),
                    ("pod", "istio-ingressgateway-.*"),
                ],
                &[],
            ),
            Preset::Ztunnel => Source::Cadvisor {
                container: ISTIO,
                defaults: &[("namespace", "istio-system"), ("pod", "ztunnel-.*")],
                required: &[],
                no_network: Some(
                    "ztunnel's sockets live in each workload pod's network namespace, so its own pod's counters do not see the traffic; give `rx:`/`tx:` queries to read it elsewhere",
                ),
            },
            Preset::Waypoint => cadvisor(ISTIO, &[("pod", "waypoint-.*")], &["namespace"]),
            Preset::EnvoyGateway => cadvisor(
                "envoy",
                &[("namespace", "envoy-gateway-system"), ("pod", "envoy-.*")],
                &[],
            ),
            Preset::Contour => cadvisor(
                "envoy",
                &[("namespace", "projectcontour"), ("pod", "envoy-.*")],
                &[],
            ),
            Preset::IngressNginx => cadvisor(
                "controller",
                &[
                    ("namespace", "ingress-nginx"),
                    ("pod", "ingress-nginx-controller-.*"),
                ],
                &[],
            ),
            Preset::Process => Source::ProcessExporter,
        }
    }

    /// Labels the role's `match` must give.
    pub fn required(self) -> &'static [&'static str] {
        match self.source() {
            Source::Cadvisor { required, .. } => required,
            Source::ProcessExporter => &["groupname"],
        }
    }

    /// The queries of a role of this preset whose `match` is `matches` (label -> regular
    /// expression), with `$window` left in for the rate window.
    pub fn queries(self, matches: &BTreeMap<String, String>) -> Queries {
        let mut q = Queries::default();
        match self.source() {
            Source::Cadvisor {
                container,
                defaults,
                no_network,
                ..
            } => {
                // container first, then the match (defaults replaced by the role's own).
                let mut labels: BTreeMap<&str, &str> = defaults.iter().copied().collect();
                labels.insert("container", container);
                for (k, v) in matches {
                    labels.insert(k, v);
                }
                let with = |keep_container: bool| -> Vec<Matcher> {
                    labels
                        .iter()
                        .filter(|(k, _)| keep_container || **k != "container")
                        .map(|(k, v)| {
                            if *k == "container" && *v == container {
                                Matcher::eq(k, v)
                            } else {
                                Matcher::re(k, v)
                            }
                        })
                        .collect()
                };
                let container_sel = with(true);
                let pod_sel = with(false);
                q.set(Figure::Cpu, Query::rate(cadvisor::CPU, &container_sel));
                q.set(
                    Figure::Memory,
                    Query::gauge(cadvisor::WORKING_SET, &container_sel),
                );
                q.set(Figure::Rss, Query::gauge(cadvisor::RSS, &container_sel));
                match no_network {
                    None => {
                        q.set(Figure::Rx, Query::rate(cadvisor::RX, &pod_sel));
                        q.set(Figure::Tx, Query::rate(cadvisor::TX, &pod_sel));
                    }
                    Some(why) => {
                        q.absent(Figure::Rx, why);
                        q.absent(Figure::Tx, why);
                    }
                }
                q.absent(Figure::Connections, NO_CONNECTIONS_CADVISOR);
            }
            Source::ProcessExporter => {
                let sel: Vec<Matcher> = matches.iter().map(|(k, v)| Matcher::re(k, v)).collect();
                q.set(Figure::Cpu, Query::rate(process_exporter::CPU, &sel));
                let mut resident = sel.clone();
                resident.push(Matcher::eq("memtype", "resident"));
                q.set(
                    Figure::Rss,
                    Query::gauge(process_exporter::MEMORY, &resident),
                );
                q.absent(
                    Figure::Memory,
                    "process-exporter has no working set; memory is the resident set (rss)",
                );
                let no_net = "process-exporter has no network series; give `rx:`/`tx:` queries to read it elsewhere";
                q.absent(Figure::Rx, no_net);
                q.absent(Figure::Tx, no_net);
                q.absent(
                    Figure::Connections,
                    "process-exporter has no connection count; give `connections:` a query",
                );
            }
        }
        q
    }
}

impl fmt::Display for Preset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One figure's query.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Query {
    /// PromQL, `$window` in place of the rate window. Its value is the figure in cores
    /// (CPU), bytes (memory, rss), bytes per second (rx, tx) or connections.
    pub expr: String,
    /// The counter series under a `rate`, when the preset knows it: checked for resets and for
    /// series that came or went during the window (a restarted container, a replaced pod).
    pub counter: Option<String>,
    /// The series the query sums, when a preset wrote it: what a reader of the exporter's own
    /// text (a kubelet's `/metrics/cadvisor`) selects and adds up itself, with no PromQL.
    pub summed: Option<Summed>,
}

/// `sum(METRIC{matchers})`, or the same under a `rate`, as data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Summed {
    pub metric: String,
    pub matchers: Vec<Matcher>,
    /// A counter (its rate is the figure), else a gauge.
    pub counter: bool,
}

impl Query {
    /// `sum(rate(METRIC{...}[$window]))`.
    fn rate(metric: &str, matchers: &[Matcher]) -> Query {
        let sel = selector(metric, matchers);
        Query {
            expr: format!("sum(rate({sel}[{WINDOW}]))"),
            counter: Some(sel),
            summed: Some(Summed {
                metric: metric.to_string(),
                matchers: matchers.to_vec(),
                counter: true,
            }),
        }
    }

    /// `sum(METRIC{...})`.
    fn gauge(metric: &str, matchers: &[Matcher]) -> Query {
        Query {
            expr: format!("sum({})", selector(metric, matchers)),
            counter: None,
            summed: Some(Summed {
                metric: metric.to_string(),
                matchers: matchers.to_vec(),
                counter: false,
            }),
        }
    }

    /// A query written in the file (no counter known).
    pub fn given(expr: &str) -> Query {
        Query {
            expr: expr.to_string(),
            counter: None,
            summed: None,
        }
    }
}

/// Why a figure of a role has no query.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum NoQuery {
    /// The preset's exporter has no such series: why, and what to give instead.
    #[error("{0}")]
    Unreadable(&'static str),
    /// The preset does not cover it and the file gives no query.
    #[error("no query given (`{}:`)", .0.name())]
    NotGiven(Figure),
}

/// Serialised as its message.
impl Serialize for NoQuery {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Every figure of a role: its query, or why it has none.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Queries {
    pub by_figure: BTreeMap<Figure, Result<Query, NoQuery>>,
}

impl Queries {
    pub fn set(&mut self, f: Figure, q: Query) {
        self.by_figure.insert(f, Ok(q));
    }

    pub fn absent(&mut self, f: Figure, why: &'static str) {
        self.by_figure.insert(f, Err(NoQuery::Unreadable(why)));
    }

    /// The query of `f`, or why there is none (a figure never set: no query was given).
    pub fn query(&self, f: Figure) -> Result<&Query, NoQuery> {
        match self.by_figure.get(&f) {
            Some(Ok(q)) => Ok(q),
            Some(Err(why)) => Err(why.clone()),
            None => Err(NoQuery::NotGiven(f)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_sidecar_reads_its_container_and_its_pods_network() {
        let q =
            Preset::IstioSidecar.queries(&m(&[("namespace", "bench"), ("pod", "fortioserver-.*")]));
        assert_eq!(
            q.query(Figure::Cpu).unwrap().expr,
            r#"sum(rate(container_cpu_usage_seconds_total{container="istio-proxy",namespace=~"bench",pod=~"fortioserver-.*"}[$window]))"#
        );
        assert_eq!(
            q.query(Figure::Memory).unwrap().expr,
            r#"sum(container_memory_working_set_bytes{container="istio-proxy",namespace=~"bench",pod=~"fortioserver-.*"})"#
        );
        assert_eq!(
            q.query(Figure::Rx).unwrap().expr,
            r#"sum(rate(container_network_receive_bytes_total{namespace=~"bench",pod=~"fortioserver-.*"}[$window]))"#
        );
        assert_eq!(
            q.query(Figure::Cpu).unwrap().counter.as_deref(),
            Some(
                r#"container_cpu_usage_seconds_total{container="istio-proxy",namespace=~"bench",pod=~"fortioserver-.*"}"#
            )
        );
        assert!(q.query(Figure::Connections).is_err());
    }

    #[test]
    fn a_match_replaces_the_defaults_and_values_are_escaped() {
        let q = Preset::IstioIngressgateway.queries(&m(&[("pod", "gw\"-.*"), ("cluster", "a")]));
        assert_eq!(
            q.query(Figure::Cpu).unwrap().expr,
            r#"sum(rate(container_cpu_usage_seconds_total{cluster=~"a",container="istio-proxy",namespace=~"istio-system",pod=~"gw\"-.*"}[$window]))"#
        );
        // A container given in the match is a regular expression like any other.
        let q = Preset::Contour.queries(&m(&[("container", "envoy|shutdown-manager")]));
        assert!(
            q.query(Figure::Cpu)
                .unwrap()
                .expr
                .contains(r#"container=~"envoy|shutdown-manager""#),
            "{:?}",
            q.query(Figure::Cpu)
        );
    }

    #[test]
    fn process_exporter_has_cpu_and_resident_memory_only() {
        let q = Preset::Process.queries(&m(&[("groupname", "nginx")]));
        assert_eq!(
            q.query(Figure::Cpu).unwrap().expr,
            r#"sum(rate(namedprocess_namegroup_cpu_seconds_total{groupname=~"nginx"}[$window]))"#
        );
        assert_eq!(
            q.query(Figure::Rss).unwrap().expr,
            r#"sum(namedprocess_namegroup_memory_bytes{groupname=~"nginx",memtype="resident"})"#
        );
        for f in [Figure::Memory, Figure::Rx, Figure::Tx, Figure::Connections] {
            assert!(q.query(f).is_err(), "{f:?}");
        }
    }

    #[test]
    fn every_preset_has_cpu_and_some_memory() {
        for p in Preset::ALL {
            let mut given = m(&[]);
            for r in p.required() {
                given.insert(r.to_string(), "x".into());
            }
            let q = p.queries(&given);
            assert!(q.query(Figure::Cpu).is_ok(), "{p}");
            assert!(q.query(Figure::Rss).is_ok(), "{p}");
            let text = serde_yaml_ng::to_string(&p).unwrap();
            assert_eq!(text.trim(), p.name());
        }
    }
}
