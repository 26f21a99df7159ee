//! Envoy as a second witness: does a proxy's own request count agree with the engine's? The
//! engine counts the measured window only (requests whose intended send time falls after the
//! warm-up; those unanswered at the end are `unfinished`, outside `total`); an Envoy role's
//! count (its admin read once before the load and once after it, `RoleUsage::proxy`) covers
//! everything in between. The difference is what the window's edges hold, and it can be
//! bounded from the stored step alone ([`Tolerance::of`]); an L7 role whose count lies outside
//! the bounds is flagged ([`Finding::Disagrees`]): one of the two did not see what the other
//! did (requests that went around the proxy, a proxy that answered for itself, a generator that
//! counted what it never sent), and the step's figures deserve a look before they are trusted.
//!
//! L4 roles (tunnels) have no requests: their connections are shown, never compared. Computed
//! from stored data on every read, so steps stored before this check get it too.

use meshbench_results::{
    Arrival, ChainRole, ChangeFigures, Figure, Layer, PlayedBy, ProxyCounters, Role, RunResult,
};
use meshbench_store::StepRecord;
use serde::Serialize;

/// How far a proxy's request count may lie from the engine's, and why; every bound is a count
/// of requests.
///
/// - `low` = the engine's answered requests below 400 (`requests.ok`): each of them went through
///   every L7 proxy of the chain and was counted there before its response left it, and the
///   proxy's first reading precedes the load, so no proxy can have served fewer. (Errors are
///   not in `low`: a refused connect never reached it, a 503 may have come from a hop in front.)
/// - `high` = `requests.total` + [`Tolerance::unfinished`] + [`Tolerance::warmup`] + 2 ×
///   [`Tolerance::in_flight`] + [`Tolerance::retries`] + [`Tolerance::probes`]: everything a
///   proxy may have seen that the measured window does not count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Tolerance {
    pub low: u64,
    pub high: u64,
    /// The engine's `requests.total`: the measured window's count.
    pub engine: u64,
    /// Requests sent during the warm-up, which the engine does not count: rate × warm-up in
    /// an open loop (plus three standard deviations, √n × 3, for Poisson arrivals); in a closed
    /// loop the measured throughput × warm-up × 1.25 (the warm-up runs the same connections
    /// against the same target; a quarter more covers a start faster than the steady state).
    pub warmup: u64,
    /// Requests that can be in flight at once, connections × streams: allowed at each end of
    /// the window (a request whose intended time is inside the window but was sent or counted
    /// across its edge).
    pub in_flight: u64,
    /// Sent but unanswered when the load ended (`requests.unfinished`): the proxy may have
    /// counted them.
    pub unfinished: u64,
    /// Retries counted by the step's Envoys (`upstream_rq_retry`): a retry of the hop in front
    /// is one more request for this one.
    pub retries: u64,
    /// Requests a step's changes sent through the gateway to see each change served
    /// (`ChangeRecord::probes`): not the load's, but the gateway's to count.
    #[serde(skip_serializing_if = "is_zero")]
    pub probes: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Tolerance {
    /// The bounds for a step whose load result is `r`, with `retries` counted by its proxies
    /// and `probes` sent by its changes.
    pub fn of(r: &RunResult, retries: u64, probes: u64) -> Tolerance {
        let s = &r.settings;
        let warmup_secs = s.warmup_secs.max(0.0);
        let warmup = match s.rate_rps {
            Some(rate) => {
                let n = (rate.max(0.0) * warmup_secs).ceil();
                let spread = if s.arrival == Some(Arrival::Poisson) {
                    (3.0 * n.sqrt()).ceil()
                } else {
                    0.0
                };
                (n + spread) as u64
            }
            None => (r.throughput_rps.max(0.0) * warmup_secs * 1.25).ceil() as u64,
        };
        let in_flight = (s.connections.max(1) * s.streams.max(1)) as u64;
        let unfinished = r.requests.unfinished;
        Tolerance {
            low: r.requests.ok,
            high: r.requests.total + unfinished + warmup + 2 * in_flight + retries + probes,
            engine: r.requests.total,
            warmup,
            in_flight,
            unfinished,
            retries,
            probes,
        }
    }

    /// Where a proxy's count of `seen` requests lies.
    pub fn judge(&self, seen: u64) -> Agreement {
        if seen < self.low {
            Agreement::Fewer
        } else if seen > self.high {
            Agreement::More
        } else {
            Agreement::Within
        }
    }
}

/// Where a proxy's count lies against the [`Tolerance`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Agreement {
    Within,
    /// Fewer than the engine's answered requests: the proxy did not see requests the engine
    /// says were answered.
    Fewer,
    /// More than the engine sent and the edges can hold.
    More,
}

/// What one Envoy role's own counts say about its step.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "finding", rename_all = "snake_case")]
pub enum Finding {
    /// An L7 role: its requests against the engine's, and where they lie.
    Requests {
        seen: u64,
        tolerance: Tolerance,
        agreement: Agreement,
    },
    /// An L4 tunnel: connections it carried; never compared, never flagged.
    Tunnel { connections: Option<u64> },
    /// An L7 role whose reading has no request counts (its stats matcher left `http.` out).
    NoRequests,
    /// The step has no load result to compare with (it failed).
    NoLoad,
    /// Its admin could not be read: why.
    Unread { why: String },
}

impl Finding {
    /// Whether the step gets the flag for this role.
    pub fn flagged(&self) -> bool {
        matches!(
            self,
            Finding::Requests {
                agreement: Agreement::Fewer | Agreement::More,
                ..
            }
        )
    }
}

/// One role's witness: its counts (when read) and the finding.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RoleWitness<'a> {
    pub role: &'a Role,
    pub program: &'a PlayedBy,
    pub counters: Option<&'a ProxyCounters>,
    pub finding: Finding,
}

/// Every role of `step` whose admin was read (or failed to be), in the step's role order.
pub fn witnesses(step: &StepRecord) -> Vec<RoleWitness<'_>> {
    let retries: u64 = step
        .usage
        .iter()
        .filter_map(|u| u.proxy.as_ref())
        .map(|p| p.upstream_failures.rq_retry)
        .sum();
    let probes = step.changes.as_ref().map_or(0, ChangeFigures::probes);
    let tolerance = (step.result.as_ref()).map(|r| Tolerance::of(r, retries, probes));
    step.usage
        .iter()
        .filter_map(|u| {
            let layer = u.role.chain_role().and_then(ChainRole::layer);
            let finding = match (&u.proxy, u.missing.get(&Figure::Proxy)) {
                (Some(p), _) => match (layer, p.requests, tolerance) {
                    (Some(Layer::L4), _, _) | (None, None, _) => Finding::Tunnel {
                        connections: p.tunnel_connections,
                    },
                    (_, None, _) => Finding::NoRequests,
                    (_, Some(_), None) => Finding::NoLoad,
                    (_, Some(r), Some(t)) => Finding::Requests {
                        seen: r.total,
                        tolerance: t,
                        agreement: t.judge(r.total),
                    },
                },
                (None, Some(why)) => Finding::Unread { why: why.clone() },
                (None, None) => return None,
            };
            Some(RoleWitness {
                role: &u.role,
                program: &u.program,
                counters: u.proxy.as_ref(),
                finding,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use meshbench_results::{Program, ProxyRequests, RoleUsage, StepParams, Topology, Usage};
    use meshbench_store::{NewExperiment, Store};

    use super::*;

    fn result() -> RunResult {
        meshbench_results::fixtures::run_result()
    }

    /// An open loop at 1000 req/s, 2 s of warm-up, 8 connections, 10,000 requests measured.
    fn open_loop() -> RunResult {
        let mut r = result();
        r.settings.rate_rps = Some(1000.0);
        r.settings.arrival = Some(Arrival::Uniform);
        r.settings.warmup_secs = 2.0;
        r.settings.connections = 8;
        r.requests.total = 10_000;
        r.requests.ok = 9_990;
        r.requests.errors = 10;
        r.requests.unfinished = 3;
        r
    }

    #[test]
    fn the_tolerance_is_what_the_edges_can_hold() {
        let t = Tolerance::of(&open_loop(), 5, 0);
        assert_eq!(
            (t.low, t.warmup, t.in_flight, t.unfinished, t.retries),
            (9_990, 2_000, 8, 3, 5)
        );
        assert_eq!(t.high, 10_000 + 3 + 2_000 + 16 + 5);
        assert_eq!(t.judge(12_000), Agreement::Within);
        assert_eq!(t.judge(9_990), Agreement::Within);
        assert_eq!(t.judge(9_989), Agreement::Fewer);
        assert_eq!(t.judge(12_025), Agreement::More);

        // Poisson arrivals: three standard deviations more warm-up; HTTP/2 streams multiply
        // what is in flight.
        let mut r = open_loop();
        r.settings.arrival = Some(Arrival::Poisson);
        r.settings.streams = 10;
        let t = Tolerance::of(&r, 0, 0);
        assert_eq!((t.warmup, t.in_flight), (2_000 + 135, 80));

        // A closed loop: the measured throughput, a quarter more.
        let mut r = open_loop();
        r.settings.rate_rps = None;
        r.throughput_rps = 400.0;
        assert_eq!(Tolerance::of(&r, 0, 0).warmup, 1_000);
        // No warm-up: only the edges.
        r.settings.warmup_secs = 0.0;
        assert_eq!(Tolerance::of(&r, 0, 0).high, 10_000 + 3 + 16);
    }

    fn envoy_role(role: ChainRole, requests: Option<u64>, tunnel: Option<u64>) -> RoleUsage {
        RoleUsage {
            role: Role::Chain(role),
            program: PlayedBy::Proxy(Program::Envoy),
            workers: 2,
            cpu_limit: None,
            usage: Usage::default(),
            missing: BTreeMap::new(),
            proxy: Some(ProxyCounters {
                requests: requests.map(|n| ProxyRequests {
                    total: n,
                    status_2xx: n,
                    ..ProxyRequests::default()
                }),
                tunnel_connections: tunnel,
                memory_allocated_bytes: 5 << 20,
                memory_heap_size_bytes: 8 << 20,
                ..ProxyCounters::default()
            }),
        }
    }

    #[test]
    fn a_stored_step_is_flagged_where_an_l7_count_disagrees() {
        let mut step = StepRecord::new(0, StepParams::open(1000.0, 8, Default::default()));
        step.kind = Some(Topology::Both.into());
        step.set_result(open_loop());
        step.usage = vec![
            // Saw the window, the warm-up and a little more: agrees.
            envoy_role(ChainRole::ClientProxy, Some(12_004), None),
            // Saw a tenth of it: the flag.
            envoy_role(ChainRole::ServerProxy, Some(1_000), None),
        ];
        let mut unread = envoy_role(ChainRole::Backend, None, None);
        unread.proxy = None;
        unread.program = PlayedBy::Backend;
        step.usage.push(unread);

        // Through the store and back, as `results show` and the report read it.
        let dir = std::env::temp_dir().join(format!("mb-witness-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut store = Store::open(&dir.join("results.db")).unwrap();
        let id = store
            .begin_experiment(&NewExperiment {
                name: "w".into(),
                description: String::new(),
                labels: BTreeMap::new(),
                config: serde_json::json!({}),
                started_at: "2026-11-25T00:00:00Z".into(),
                meshbench_version: "0".into(),
            })
            .unwrap();
        store.add_step(id, &step).unwrap();
        let stored = store.steps(id).unwrap().remove(0).step;
        std::fs::remove_dir_all(&dir).unwrap();

        let w = witnesses(&stored);
        assert_eq!(w.len(), 2, "the backend has no admin: no witness");
        assert_eq!(w[0].role, &Role::Chain(ChainRole::ClientProxy));
        assert!(!w[0].finding.flagged());
        assert!(w[1].finding.flagged());
        assert!(matches!(
            w[1].finding,
            Finding::Requests {
                seen: 1_000,
                agreement: Agreement::Fewer,
                ..
            }
        ));
    }

    #[test]
    fn tunnels_unread_admins_and_failed_steps_are_never_flagged() {
        let mut step = StepRecord::new(0, StepParams::open(1000.0, 8, Default::default()));
        step.kind = Some(Topology::Waypoint.into());
        step.set_result(open_loop());
        let mut unread = envoy_role(ChainRole::Waypoint, None, None);
        unread.proxy = None;
        unread.missing.insert(
            Figure::Proxy,
            "Envoy's admin at 127.0.0.1:1 is unreachable (refused)".into(),
        );
        step.usage = vec![
            // An HBONE tunnel terminates CONNECT in a connection manager: its "requests" are
            // tunnels, not the load's, so its layer decides, not its stats.
            envoy_role(ChainRole::ZtunnelClient, Some(40), Some(8)),
            unread,
            envoy_role(ChainRole::ZtunnelServer, None, Some(8)),
        ];
        let w = witnesses(&step);
        assert_eq!(
            w[0].finding,
            Finding::Tunnel {
                connections: Some(8)
            }
        );
        assert!(matches!(w[1].finding, Finding::Unread { .. }));
        assert!(w.iter().all(|w| !w.finding.flagged()));

        // A failed step has no load to compare with.
        let mut failed = StepRecord::new(0, StepParams::open(1000.0, 8, Default::default()));
        failed.kind = Some(Topology::Serveronly.into());
        failed.usage = vec![envoy_role(ChainRole::ServerProxy, Some(5), None)];
        assert_eq!(witnesses(&failed)[0].finding, Finding::NoLoad);
        // An L7 role whose stats matcher dropped `http.`.
        failed.set_result(open_loop());
        failed.usage = vec![envoy_role(ChainRole::ServerProxy, None, None)];
        assert_eq!(witnesses(&failed)[0].finding, Finding::NoRequests);
    }
}
