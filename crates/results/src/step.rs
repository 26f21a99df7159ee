//! What one step asked for, typed: its offer (open at a rate, or closed), connections and
//! requests in flight, sizes, protocol and CPU allotment. The experiment's plan produces it for every step, a capacity
//! search for each rate it tries, and the store keeps it (as JSON in the step's `params`
//! column, whose form the store's schema version governs), so every reader gets the same type
//! back instead of looking up keys. The part of it that names a step's load in tables and
//! groups its repeats is a [`LoadPoint`], whose text is the one every output prints.
//!
//! The stored form is written in the words of the experiment file (`rate_rps`, `arrival`,
//! `in_flight`) and reads the words it was first written with (`qps`, `jitter`) too; in memory
//! the offer is one [`Offer`], so an open loop without a rate, or a closed one with arrivals,
//! cannot be represented.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};

use serde::{Deserialize, Serialize};

use crate::control_plane::MeshScale;
use crate::load::{Arrival, LoopMode, Protocol};
use crate::topology::Class;

/// The CPU quota a sweep gave one role of a step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CpuAllotment {
    pub role: Class,
    pub cores: f64,
}

/// How a load offers its requests: the loop, and an open loop's rate and arrivals (the
/// engine's pacer is made from it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Offer {
    /// `rate_rps` requests per second in total, on a schedule that does not wait for answers.
    Open { rate_rps: f64, arrival: Arrival },
    /// Each connection sends its next request when the last one is answered.
    Closed,
}

impl Offer {
    /// The offer of a loop in `mode`: open at `rate_rps` with `arrival`, or closed (which has
    /// neither). `None` for an open loop without a rate.
    pub fn of(mode: LoopMode, rate_rps: Option<f64>, arrival: Arrival) -> Option<Offer> {
        match (mode, rate_rps) {
            (LoopMode::Open, Some(rate_rps)) => Some(Offer::Open { rate_rps, arrival }),
            (LoopMode::Open, None) => None,
            (LoopMode::Closed, _) => Some(Offer::Closed),
        }
    }

    /// Evenly spaced arrivals at `rate_rps`.
    pub fn open(rate_rps: f64) -> Offer {
        Offer::Open {
            rate_rps,
            arrival: Arrival::Uniform,
        }
    }

    /// The offered rate of an open loop.
    pub fn rate_rps(&self) -> Option<f64> {
        match self {
            Offer::Open { rate_rps, .. } => Some(*rate_rps),
            Offer::Closed => None,
        }
    }

    /// Poisson arrivals (the experiment file's `arrival: poisson`).
    pub fn is_poisson(&self) -> bool {
        matches!(
            self,
            Offer::Open {
                arrival: Arrival::Poisson,
                ..
            }
        )
    }

    pub fn mode(&self) -> LoopMode {
        match self {
            Offer::Open { .. } => LoopMode::Open,
            Offer::Closed => LoopMode::Closed,
        }
    }

    /// The same loop at another rate (a closed loop has none).
    pub fn with_rate(self, rate_rps: f64) -> Offer {
        match self {
            Offer::Open { arrival, .. } => Offer::Open { rate_rps, arrival },
            Offer::Closed => Offer::Closed,
        }
    }
}

/// One step's load: its offer, over how many connections with how many requests in flight,
/// for responses of what size. The plan makes one for each cell of the experiment file's load
/// matrix; the analysis reads one back from every stored step and groups repeats by it. Its
/// text ([`fmt::Display`]) is how every output names a load (`1000 rps x 16 conns, 4096 B,
/// poisson`), and its order is the order of the tables.
///
/// Two points are the same when their rates agree to a thousandth of a request per second:
/// repeats of one step group together however their rate was computed.
#[derive(Debug, Clone, Copy)]
pub struct LoadPoint {
    pub offer: Offer,
    /// Connections the generator keeps open.
    pub connections: u32,
    /// A closed loop's requests in flight at most, when fewer than its connections (which are
    /// then a pool); `None`: one per connection (x streams).
    pub in_flight: Option<u32>,
    /// Response body size the backend was asked for; `None` where the target chooses its
    /// responses (a URL, an external server, a `meshbench run --json` file): never labelled
    /// as a size then.
    pub response_bytes: Option<u64>,
}

impl LoadPoint {
    /// The response size an experiment asks for unless it says otherwise, which the text
    /// leaves unsaid.
    pub const DEFAULT_RESPONSE_BYTES: u64 = 1024;

    /// The offered rate of an open loop.
    pub fn rate_rps(&self) -> Option<f64> {
        self.offer.rate_rps()
    }

    /// The offered rate in thousandths of a request per second, exact, for grouping and order.
    pub fn rate_rps_milli(&self) -> Option<u64> {
        self.rate_rps().map(|q| (q * 1000.0).round() as u64)
    }

    /// What orders and identifies a load point.
    fn key(&self) -> (Option<u64>, u32, Option<u32>, Option<u64>, bool) {
        (
            self.rate_rps_milli(),
            self.connections,
            self.in_flight,
            self.response_bytes,
            self.offer.is_poisson(),
        )
    }
}

impl PartialEq for LoadPoint {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for LoadPoint {}

impl PartialOrd for LoadPoint {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for LoadPoint {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(&other.key())
    }
}

impl Hash for LoadPoint {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.key().hash(state);
    }
}

/// `1000 rps x 16 conns`, `max rps x 320 conns, 32 in flight, 4096 B`, `250 rps x 4 conns,
/// poisson`: the rate to a thousandth, a closed loop's cap on requests in flight, the response
/// size when it is known and not the default, `poisson` for Poisson arrivals. Width and
/// alignment apply (`{:<28}`), as for text.
impl fmt::Display for LoadPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut text = match self.rate_rps_milli() {
            Some(milli) => format!("{} rps", milli as f64 / 1000.0),
            None => "max rps".to_string(),
        };
        text.push_str(&format!(" x {} conns", self.connections));
        if let Some(n) = self.in_flight {
            text.push_str(&format!(", {n} in flight"));
        }
        if let Some(bytes) = self
            .response_bytes
            .filter(|&b| b != Self::DEFAULT_RESPONSE_BYTES)
        {
            text.push_str(&format!(", {bytes} B"));
        }
        if self.offer.is_poisson() {
            text.push_str(", poisson");
        }
        f.pad(&text)
    }
}

/// A step's parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "StoredParams", into = "StoredParams")]
pub struct StepParams {
    pub offer: Offer,
    /// Connections the generator kept open.
    pub connections: u32,
    /// A closed loop's requests in flight at most, when fewer than its connections.
    pub in_flight: Option<u32>,
    /// Response body size the backend was asked for (0 when the target is not ours).
    pub response_bytes: u64,
    /// Request body size (POST when above 0).
    pub request_bytes: u64,
    pub protocol: Protocol,
    /// The swept role's CPU quota, when the experiment sweeps one.
    pub cpu: Option<CpuAllotment>,
    /// A `control_plane` step's mesh: it sends no load, so its offer is closed with no
    /// connection and this says what it asked instead.
    pub mesh: Option<MeshScale>,
}

impl StepParams {
    /// A `control_plane` step: no load, the mesh `scale`.
    pub fn control_plane(scale: MeshScale) -> StepParams {
        StepParams {
            offer: Offer::Closed,
            connections: 0,
            in_flight: None,
            response_bytes: 0,
            request_bytes: 0,
            protocol: Protocol::Http2,
            cpu: None,
            mesh: Some(scale),
        }
    }

    /// An open-loop step at `rate_rps` against a target that is not a rig (a URL).
    pub fn open(rate_rps: f64, connections: u32, protocol: Protocol) -> StepParams {
        StepParams {
            offer: Offer::open(rate_rps),
            connections,
            in_flight: None,
            response_bytes: 0,
            request_bytes: 0,
            protocol,
            cpu: None,
            mesh: None,
        }
    }
}

/// The stored form of [`StepParams`], in the experiment file's words. Stores written before
/// the words were settled say `qps` for `rate_rps` and `jitter` (a boolean) for `arrival`, and
/// had no `in_flight` (a closed loop with a pool stored its cap as `connections`): they read
/// back as they were written.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredParams {
    /// Offered rate in requests per second; `None` in a closed loop.
    #[serde(alias = "qps")]
    rate_rps: Option<f64>,
    connections: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    in_flight: Option<u32>,
    response_bytes: u64,
    request_bytes: u64,
    /// An open loop's arrivals; absent in a closed loop and in the first schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    arrival: Option<Arrival>,
    /// The first schema's word for Poisson arrivals; read, never written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    jitter: Option<bool>,
    mode: LoopMode,
    protocol: Protocol,
    cpu: Option<CpuAllotment>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mesh: Option<MeshScale>,
}

impl TryFrom<StoredParams> for StepParams {
    type Error = &'static str;

    fn try_from(s: StoredParams) -> Result<StepParams, &'static str> {
        let arrival = match (s.arrival, s.jitter) {
            (Some(arrival), _) => arrival,
            (None, Some(true)) => Arrival::Poisson,
            (None, _) => Arrival::Uniform,
        };
        let offer = Offer::of(s.mode, s.rate_rps, arrival)
            .ok_or("an open-loop step without a rate (`rate_rps`)")?;
        Ok(StepParams {
            offer,
            connections: s.connections,
            in_flight: s.in_flight,
            response_bytes: s.response_bytes,
            request_bytes: s.request_bytes,
            protocol: s.protocol,
            cpu: s.cpu,
            mesh: s.mesh,
        })
    }
}

impl From<StepParams> for StoredParams {
    fn from(p: StepParams) -> StoredParams {
        let arrival = match p.offer {
            Offer::Open { arrival, .. } => Some(arrival),
            Offer::Closed => None,
        };
        StoredParams {
            rate_rps: p.offer.rate_rps(),
            connections: p.connections,
            in_flight: p.in_flight,
            response_bytes: p.response_bytes,
            request_bytes: p.request_bytes,
            arrival,
            jitter: None,
            mode: p.offer.mode(),
            protocol: p.protocol,
            cpu: p.cpu,
            mesh: p.mesh,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stored_form_says_the_files_words_and_reads_the_first_ones() {
        let p = StepParams {
            offer: Offer::Open {
                rate_rps: 250.0,
                arrival: Arrival::Poisson,
            },
            connections: 16,
            in_flight: None,
            response_bytes: 1024,
            request_bytes: 64,
            protocol: Protocol::Http1,
            cpu: Some(CpuAllotment {
                role: Class::Proxy,
                cores: 1.0,
            }),
            mesh: None,
        };
        let text = serde_json::to_string(&p).unwrap();
        assert_eq!(
            text,
            r#"{"rate_rps":250.0,"connections":16,"response_bytes":1024,"request_bytes":64,"arrival":"poisson","mode":"open","protocol":"http1","cpu":{"role":"proxy","cores":1.0}}"#
        );
        assert_eq!(serde_json::from_str::<StepParams>(&text).unwrap(), p);
        // The first schema's words read as the same params.
        let first = r#"{"qps":250.0,"connections":16,"response_bytes":1024,"request_bytes":64,"jitter":true,"mode":"open","protocol":"http1","cpu":{"role":"proxy","cores":1.0}}"#;
        assert_eq!(serde_json::from_str::<StepParams>(first).unwrap(), p);
        let closed = r#"{"qps":null,"connections":8,"response_bytes":0,"request_bytes":0,"jitter":false,"mode":"closed","protocol":"http2","cpu":null}"#;
        let back: StepParams = serde_json::from_str(closed).unwrap();
        assert_eq!(back.offer, Offer::Closed);
        assert_eq!(
            serde_json::to_string(&back).unwrap(),
            r#"{"rate_rps":null,"connections":8,"response_bytes":0,"request_bytes":0,"mode":"closed","protocol":"http2","cpu":null}"#
        );
        let pool = StepParams {
            in_flight: Some(32),
            connections: 320,
            ..back
        };
        let text = serde_json::to_string(&pool).unwrap();
        assert!(
            text.contains(r#""connections":320,"in_flight":32,"#),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<StepParams>(&text).unwrap(), pool);
    }

    #[test]
    fn a_load_point_reads_as_the_tables_print_it() {
        let point = |offer, response_bytes| LoadPoint {
            offer,
            connections: 16,
            in_flight: None,
            response_bytes,
        };
        let open = Offer::open(1000.0);
        assert_eq!(point(open, Some(1024)).to_string(), "1000 rps x 16 conns");
        assert_eq!(
            format!("[{:<21}]", point(open, None)),
            "[1000 rps x 16 conns  ]"
        );
        assert_eq!(point(open, None).to_string(), "1000 rps x 16 conns");
        assert_eq!(
            point(Offer::open(333.33333), Some(4096)).to_string(),
            "333.333 rps x 16 conns, 4096 B"
        );
        let poisson = Offer::Open {
            rate_rps: 250.5,
            arrival: Arrival::Poisson,
        };
        assert_eq!(
            point(poisson, Some(0)).to_string(),
            "250.5 rps x 16 conns, 0 B, poisson"
        );
        assert_eq!(point(Offer::Closed, None).to_string(), "max rps x 16 conns");
        let pool = LoadPoint {
            connections: 320,
            in_flight: Some(32),
            ..point(Offer::Closed, None)
        };
        assert_eq!(pool.to_string(), "max rps x 320 conns, 32 in flight");
        // Ordered as the tables are: closed first, then by rate; equal to a thousandth.
        assert!(point(Offer::Closed, None) < point(open, None));
        assert_eq!(point(open, None), point(Offer::open(1000.0001), None));
    }

    #[test]
    fn an_open_loop_without_a_rate_is_refused() {
        let text = r#"{"qps":null,"connections":8,"response_bytes":0,"request_bytes":0,"jitter":false,"mode":"open","protocol":"http1","cpu":null}"#;
        let err = serde_json::from_str::<StepParams>(text).unwrap_err();
        assert!(err.to_string().contains("without a rate"), "{err}");
    }
}
