//! What a run is asked to do, fully resolved: addresses looked up, the request serialised,
//! numbers checked. The binary builds a [`LoadSpec`] from flags (and later the experiment file
//! will too); the engine never parses user input itself.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::pacer::Arrival;

/// Closed or open loop.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mode {
    /// Each connection sends its next request as soon as the previous one is answered.
    Closed,
    /// Requests are sent on a schedule of `rate_rps` in total, whatever the responses do.
    Open { rate_rps: f64, arrival: Arrival },
}

/// When the run stops sending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopAt {
    /// After this long (not counting the warm-up).
    Duration(Duration),
    /// After this many measured requests.
    Requests(u64),
}

/// One request, ready for the wire.
#[derive(Debug, Clone)]
pub struct RequestSpec {
    pub method: String,
    /// The URL as the user gave it (for the report).
    pub url: String,
    /// Where to connect.
    pub addr: SocketAddr,
    /// Request line, headers and body, serialised once.
    pub bytes: Arc<[u8]>,
    /// Length of the body inside `bytes`.
    pub body_len: usize,
    /// Extra headers, as given (for the report).
    pub headers: Vec<(String, String)>,
}

/// A fully resolved load test.
#[derive(Debug, Clone)]
pub struct LoadSpec {
    pub request: RequestSpec,
    pub connections: usize,
    /// Worker threads; each owns an equal share of connections and of the rate.
    pub threads: usize,
    pub mode: Mode,
    pub stop: StopAt,
    pub warmup: Duration,
    pub timeout: Duration,
    /// Seed for Poisson arrivals, so that a run can be repeated exactly.
    pub seed: u64,
}

impl LoadSpec {
    /// How long in-flight requests may take to finish once sending stops.
    pub fn drain(&self) -> Duration {
        self.timeout.min(Duration::from_secs(2))
    }
}
