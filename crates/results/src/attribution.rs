//! Where a request's latency goes, hop by hop: the contracts of per-hop attribution.
//!
//! The engine tags a sample of its requests with an `x-meshbench-id` and keeps, for each, its own
//! instants ([`Sent`]); each L7 Envoy on the path writes its own for the same id ([`Logged`],
//! from its access log). Joined, they split each sampled request into [`Part`]s that add up to
//! its latency exactly: the instants are consecutive points of one ordered list on one clock
//! (the machine's wall clock), so each part is the distance between two neighbours. What is
//! stored with a step is [`Attribution`]: the path as it was seen, the parts, and per joined
//! request its latency and each part's time; the answers (each part's share of p50, p90, p99)
//! are computed from it by `analysis`.

use serde::{Deserialize, Serialize};

use crate::role::{ChainRole, PlayedBy};

/// The prefix of every id the engine puts in [`ID_HEADER`]: the proxies log only these.
pub const ID_PREFIX: &str = "mb";

/// The header the id travels in: one of meshbench's own, which every proxy forwards as it is.
/// Not `x-request-id`: an edge Envoy that meshbench does not configure (Istio's gateway,
/// Contour's, a cluster's) replaces an external request's id, and Istio's UUID extension may
/// rewrite one.
pub const ID_HEADER: &str = "x-meshbench-id";

/// An id as it is written on the wire: the prefix and 16 hex digits (a fixed length).
pub fn id_text(id: u64) -> String {
    format!("{ID_PREFIX}{id:016x}")
}

/// The id in a header value, if it is one of the engine's.
pub fn parse_id(text: &str) -> Option<u64> {
    let hex = text.strip_prefix(ID_PREFIX)?;
    (hex.len() == 16)
        .then(|| u64::from_str_radix(hex, 16).ok())
        .flatten()
}

/// One sampled request as the generator saw it (answered, measured).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sent {
    pub id: u64,
    /// When it was started, on the wall clock (ns since the Unix epoch).
    pub sent_unix_ns: u64,
    /// How long it waited for its send after its intended time (the schedule lag), ns.
    pub lag_ns: u64,
    /// From its send to the last byte of its response (the kernel's receive stamp), ns.
    pub service_ns: u64,
    /// Its HTTP status (gRPC: the HTTP status of the call).
    pub status: u16,
}

/// What one L7 proxy logged of a sampled request: when its downstream request began (wall
/// clock, µs precision in Envoy's log) and the later points, in ns after it. A point the
/// request never reached is `None`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Logged {
    pub id: u64,
    /// The first byte of the downstream request (`DS_RX_BEG`), ns since the Unix epoch.
    pub start_unix_ns: u64,
    /// The first byte of the upstream request sent (`US_TX_BEG`).
    pub upstream_sent_ns: Option<u64>,
    /// The first byte of the upstream response received (`US_RX_BEG`).
    pub upstream_answered_ns: Option<u64>,
    /// The first byte of the downstream response sent (`DS_TX_BEG`).
    pub answered_ns: Option<u64>,
    /// A new upstream connection for this request: from its start to its end (`US_CX_BEG`,
    /// `US_CX_END`), when it had to wait for one.
    pub connect: Option<(u64, u64)>,
    /// Upstream attempts (more than one: the proxy retried).
    pub attempts: u32,
    pub status: u16,
}

/// A point of the path: the client (meshbench), a hop of the chain, or the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Node {
    Client,
    Hop(ChainRole),
}

/// Which way through a proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Leg {
    /// Downstream request in to upstream request out.
    Request,
    /// Upstream response in to downstream response out.
    Response,
}

/// A part of a request's latency.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "part")]
pub enum Part {
    /// The generator's own wait: intended send to actual send (schedule lag).
    Generator,
    /// Between two logged points, both ways (request there, response back): the network, the
    /// kernels, TLS, and any hop between them that logs nothing per request.
    Link { from: Node, to: Node },
    /// A proxy's own time on one leg (its upstream connect apart).
    Proxy { role: ChainRole, leg: Leg },
    /// A proxy waiting for a new upstream connection (connect and handshake).
    Connect { role: ChainRole },
    /// From the last logged proxy's upstream request to its upstream response: the backend
    /// and the link to it, both ways (the backend logs nothing of its own).
    Backend { after: Node },
}

impl Part {
    /// Its label in tables and charts.
    pub fn label(&self) -> String {
        let node = |n: &Node| match n {
            Node::Client => "client".to_string(),
            Node::Hop(r) => r.name().to_string(),
        };
        match self {
            Part::Generator => "generator (schedule)".into(),
            Part::Link { from, to } => format!("link {} <-> {}", node(from), node(to)),
            Part::Proxy { role, leg } => format!(
                "{} ({})",
                role.name(),
                match leg {
                    Leg::Request => "request",
                    Leg::Response => "response",
                }
            ),
            Part::Connect { role } => format!("{} (upstream connect)", role.name()),
            Part::Backend { .. } => "backend (and its link)".into(),
        }
    }

    /// Its label as a hop of the short view ([`Part::hop`]): a proxy's is its own time.
    pub fn hop_label(&self) -> String {
        match self {
            Part::Proxy { role, .. } | Part::Connect { role } => {
                format!("{} (own time)", role.name())
            }
            other => other.label(),
        }
    }

    /// The hop a part belongs to, for the short view and comparisons: a proxy's legs and
    /// connect together, the backend whichever hop is before it.
    pub fn hop(&self) -> Part {
        match *self {
            Part::Proxy { role, .. } | Part::Connect { role } => Part::Proxy {
                role,
                leg: Leg::Request,
            },
            Part::Backend { .. } => Part::Backend {
                after: Node::Client,
            },
            other => other,
        }
    }
}

/// How a hop of the path could be seen per request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Seen {
    /// An L7 Envoy that logged each sampled request: its own time is split out.
    PerRequest,
    /// A tunnel (TCP or HBONE): it sees connections, not requests; its time is in the link
    /// around it.
    ConnectionsOnly,
    /// A proxy whose logs meshbench does not read per request (nginx, haproxy, caddy, a
    /// command): its time is in the link around it. nginx's and haproxy's own request timings
    /// are in milliseconds, too coarse for sub-millisecond hops.
    NotLogged,
}

/// A hop of the path and how it was seen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HopSeen {
    pub role: ChainRole,
    pub program: PlayedBy,
    pub seen: Seen,
}

/// One joined request: its latency and each part's time, in the order of
/// [`Attribution::parts`]. Parts are signed: a negative one is two clocks disagreeing, kept
/// visible rather than clipped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Split {
    pub latency_ns: u64,
    pub parts_ns: Vec<i64>,
}

/// A step's attribution: what was sampled, the path as seen, and each joined request split.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Attribution {
    /// The share of measured requests tagged.
    pub sample_rate: f64,
    /// The hops of the path (the backend excluded), client side first.
    pub path: Vec<HopSeen>,
    /// The parts every request is split into, in path order.
    pub parts: Vec<Part>,
    /// Requests split (all hops that log had their line).
    pub requests: Vec<Split>,
    /// Sampled requests answered by the engine.
    pub sampled: u64,
    /// ... of which a proxy retried upstream: named here, not split.
    pub retried: u64,
    /// ... of which a hop that logs has no line for (dropped, or not reached).
    pub unjoined: u64,
    /// Splits left out to bound what is stored (the first ones are kept).
    #[serde(default)]
    pub dropped: u64,
    /// Where neighbouring points of the path sit on different machines' clocks (a cluster):
    /// how far apart each pair of clocks was. Empty in the lab (one clock).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clocks: Vec<ClockOffset>,
}

/// How far apart the clocks of two neighbouring logged points of the path are, estimated
/// from the requests themselves as NTP does: each request crosses the link there and back,
/// so with `t1` its send on the near side's clock, `t2` its arrival and `t3` the response's
/// send on the far side's, `t4` the response's arrival on the near side's, the far clock is
/// ahead by at most `t2 - t1` and at least `t3 - t4` (neither crossing takes less than no
/// time). Over all the requests, the middle of the tightest such interval is the estimate and
/// half its width the bound: half the shortest crossing there plus the shortest back. (Should
/// the requests disagree, a clock stepped: the one with the shortest round trip decides.)
///
/// It moves no part of the split: every part is a difference of two points on one clock or
/// a link's round trip, whose two crossings an offset changes by as much and in opposite
/// directions. It says how far one-way readings across the link could be trusted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockOffset {
    /// The point nearer the client and the one after it.
    pub from: Node,
    pub to: Node,
    /// Where each point's clock is (a node's name).
    pub from_clock: String,
    pub to_clock: String,
    /// `to_clock` less `from_clock`, ns.
    pub offset_ns: i64,
    /// How far the true offset may be from `offset_ns`, ns.
    pub bound_ns: u64,
    /// The requests it was estimated over.
    pub requests: u64,
}

/// At most this many splits are stored per step (about 1 MB of JSON with ten parts).
pub const MAX_SPLITS: usize = 20_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_others_are_not_ours() {
        let id = (3u64 << 48) | (1 << 32) | 77;
        assert_eq!(id_text(id).len(), 18);
        assert_eq!(parse_id(&id_text(id)), Some(id));
        assert_eq!(parse_id("mb12"), None);
        assert_eq!(parse_id("6f1c5a0e-0000-4000-8000-000000000000"), None);
    }

    #[test]
    fn parts_are_written_with_their_words() {
        let part = Part::Link {
            from: Node::Client,
            to: Node::Hop(ChainRole::ClientProxy),
        };
        let json = serde_json::to_string(&part).unwrap();
        assert_eq!(
            json,
            r#"{"part":"link","from":"client","to":{"hop":"client_proxy"}}"#
        );
        assert_eq!(serde_json::from_str::<Part>(&json).unwrap(), part);
        assert_eq!(part.label(), "link client <-> client_proxy");
    }
}
