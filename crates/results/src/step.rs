//! What one step asked for, typed: the load (open at a rate, or closed), connections, sizes,
//! protocol and CPU allotment. The experiment's plan produces it for every step, a capacity
//! search for each rate it tries, and the store keeps it (as JSON in the step's `params`
//! column, whose form the store's schema version governs), so every reader gets the same type
//! back instead of looking up keys.
//!
//! The stored form keeps the words it was first written with (`qps`, `jitter`, `mode`); in
//! memory the load is one [`Load`], so an open loop without a rate, or a closed one with
//! arrivals, cannot be represented.

use serde::{Deserialize, Serialize};

use crate::load::{Arrival, LoopMode, Protocol};
use crate::topology::Class;

/// The CPU quota a sweep gave one role of a step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CpuAllotment {
    pub role: Class,
    pub cores: f64,
}

/// How a step offered its requests.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Load {
    /// `rate_rps` requests per second in total, on a schedule that does not wait for answers.
    Open { rate_rps: f64, arrival: Arrival },
    /// Each connection sends its next request when the last one is answered.
    Closed,
}

impl Load {
    /// The load of a loop in `mode`: open at `rate_rps` with `arrival`, or closed (which has
    /// neither). `None` for an open loop without a rate.
    pub fn of(mode: LoopMode, rate_rps: Option<f64>, arrival: Arrival) -> Option<Load> {
        match (mode, rate_rps) {
            (LoopMode::Open, Some(rate_rps)) => Some(Load::Open { rate_rps, arrival }),
            (LoopMode::Open, None) => None,
            (LoopMode::Closed, _) => Some(Load::Closed),
        }
    }

    /// Evenly spaced arrivals at `rate_rps`.
    pub fn open(rate_rps: f64) -> Load {
        Load::Open {
            rate_rps,
            arrival: Arrival::Uniform,
        }
    }

    /// The offered rate of an open loop.
    pub fn rate_rps(&self) -> Option<f64> {
        match self {
            Load::Open { rate_rps, .. } => Some(*rate_rps),
            Load::Closed => None,
        }
    }

    /// Poisson arrivals (the experiment file's `jitter`).
    pub fn is_poisson(&self) -> bool {
        matches!(
            self,
            Load::Open {
                arrival: Arrival::Poisson,
                ..
            }
        )
    }

    pub fn mode(&self) -> LoopMode {
        match self {
            Load::Open { .. } => LoopMode::Open,
            Load::Closed => LoopMode::Closed,
        }
    }
}

/// A step's parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "StoredParams", into = "StoredParams")]
pub struct StepParams {
    pub load: Load,
    /// Connections (a closed loop with a connection pool: requests in flight).
    pub connections: u32,
    /// Response body size the backend was asked for (0 when the target is not ours).
    pub response_bytes: u64,
    /// Request body size (POST when above 0).
    pub request_bytes: u64,
    pub protocol: Protocol,
    /// The swept role's CPU quota, when the experiment sweeps one.
    pub cpu: Option<CpuAllotment>,
}

impl StepParams {
    /// An open-loop step at `rate_rps` against a target that is not a rig (a URL).
    pub fn open(rate_rps: f64, connections: u32, protocol: Protocol) -> StepParams {
        StepParams {
            load: Load::open(rate_rps),
            connections,
            response_bytes: 0,
            request_bytes: 0,
            protocol,
            cpu: None,
        }
    }
}

/// The stored form of [`StepParams`], with the words of its first schema.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredParams {
    /// Offered rate in requests per second; `None` in a closed loop.
    qps: Option<f64>,
    connections: u32,
    response_bytes: u64,
    request_bytes: u64,
    /// Poisson arrivals instead of evenly spaced ones (always `false` in a closed loop).
    jitter: bool,
    mode: LoopMode,
    protocol: Protocol,
    cpu: Option<CpuAllotment>,
}

impl TryFrom<StoredParams> for StepParams {
    type Error = &'static str;

    fn try_from(s: StoredParams) -> Result<StepParams, &'static str> {
        let arrival = if s.jitter {
            Arrival::Poisson
        } else {
            Arrival::Uniform
        };
        let load =
            Load::of(s.mode, s.qps, arrival).ok_or("an open-loop step without a rate (`qps`)")?;
        Ok(StepParams {
            load,
            connections: s.connections,
            response_bytes: s.response_bytes,
            request_bytes: s.request_bytes,
            protocol: s.protocol,
            cpu: s.cpu,
        })
    }
}

impl From<StepParams> for StoredParams {
    fn from(p: StepParams) -> StoredParams {
        StoredParams {
            qps: p.load.rate_rps(),
            connections: p.connections,
            response_bytes: p.response_bytes,
            request_bytes: p.request_bytes,
            jitter: p.load.is_poisson(),
            mode: p.load.mode(),
            protocol: p.protocol,
            cpu: p.cpu,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stored_form_keeps_its_first_words_and_reads_back_equal() {
        let p = StepParams {
            load: Load::Open {
                rate_rps: 250.0,
                arrival: Arrival::Poisson,
            },
            connections: 16,
            response_bytes: 1024,
            request_bytes: 64,
            protocol: Protocol::Http1,
            cpu: Some(CpuAllotment {
                role: Class::Proxy,
                cores: 1.0,
            }),
        };
        let text = serde_json::to_string(&p).unwrap();
        assert_eq!(
            text,
            r#"{"qps":250.0,"connections":16,"response_bytes":1024,"request_bytes":64,"jitter":true,"mode":"open","protocol":"http1","cpu":{"role":"proxy","cores":1.0}}"#
        );
        assert_eq!(serde_json::from_str::<StepParams>(&text).unwrap(), p);
        let closed = r#"{"qps":null,"connections":8,"response_bytes":0,"request_bytes":0,"jitter":false,"mode":"closed","protocol":"http2","cpu":null}"#;
        let back: StepParams = serde_json::from_str(closed).unwrap();
        assert_eq!(back.load, Load::Closed);
        assert_eq!(serde_json::to_string(&back).unwrap(), closed);
    }

    #[test]
    fn an_open_loop_without_a_rate_is_refused() {
        let text = r#"{"qps":null,"connections":8,"response_bytes":0,"request_bytes":0,"jitter":false,"mode":"open","protocol":"http1","cpu":null}"#;
        let err = serde_json::from_str::<StepParams>(text).unwrap_err();
        assert!(err.to_string().contains("without a rate"), "{err}");
    }
}
