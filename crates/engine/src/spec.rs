//! What a run is asked to do, fully resolved: addresses looked up, every request serialised for
//! its protocol, TLS settings built, numbers checked. The binary builds a [`LoadSpec`] from flags
//! (and later the experiment file will too); the engine never parses user input itself.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;
use serde::{Deserialize, Serialize};

use crate::h3conn::QuicSpec;
use meshbench_results::load::{CloseFirst, IdleStrategy, Order, PacingSlack, Protocol};
use meshbench_results::Offer;

/// When the run stops sending.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopAt {
    /// After this long (not counting the warm-up).
    Duration(Duration),
    /// After this many measured requests.
    Requests(u64),
}

/// Where connections go: one per distinct (address, TLS name) pair. Connections are pooled
/// per host, so a request always goes out on a connection whose TLS name matches its URL.
#[derive(Debug, Clone)]
pub struct Host {
    /// `name:port` as in the URL, for the report.
    pub name: String,
    pub addr: SocketAddr,
    /// SNI and the name the certificate must match (TLS only).
    pub server_name: Option<ServerName<'static>>,
}

/// One request of the target list, ready for the wire.
#[derive(Debug, Clone)]
pub struct Target {
    /// Index into [`Targets::hosts`].
    pub host: u32,
    pub wire: Wire,
    /// A HEAD request: its response has no body whatever it says.
    pub head: bool,
    /// HTTP/1.1 with `--requests-per-connection` and the server closing first: the same request
    /// with `Connection: close`, serialised once, sent as a connection's last request so that
    /// the server closes and keeps the TIME_WAIT. `None` when the request names a `Connection`
    /// of its own (or over HTTP/2): the client then closes first.
    pub closing: Option<Box<[u8]>>,
}

/// A request serialised once for its protocol.
#[derive(Debug, Clone)]
pub enum Wire {
    /// Request line, headers and body.
    Http1(Box<[u8]>),
    /// Head and body as parts: HTTP/2 and gRPC (h2 frames them), HTTP/3 (h3 does).
    Parts(Box<HttpRequest>),
}

/// One request as h2 and h3 send it: the head is cloned per request (cheap: the URI is shared
/// bytes).
#[derive(Debug, Clone)]
pub struct HttpRequest {
    pub method: http::Method,
    pub uri: http::Uri,
    pub headers: http::HeaderMap,
    pub body: bytes::Bytes,
    /// A gRPC call: its outcome is its `grpc-status`, not its HTTP status.
    pub grpc: bool,
}

/// Every request a run may send, and the hosts they go to.
#[derive(Debug, Clone)]
pub struct Targets {
    pub hosts: Vec<Host>,
    pub requests: Vec<Target>,
    pub order: Order,
}

impl Targets {
    /// One plain HTTP/1.1 request to one address.
    pub fn single_http1(addr: SocketAddr, request: Vec<u8>, head: bool) -> Targets {
        Targets {
            hosts: vec![Host {
                name: addr.to_string(),
                addr,
                server_name: None,
            }],
            requests: vec![Target {
                host: 0,
                wire: Wire::Http1(request.into_boxed_slice()),
                head,
                closing: None,
            }],
            order: Order::RoundRobin,
        }
    }
}

/// How the target list was given, for the report.
#[derive(Debug, Clone)]
pub struct RequestSpec {
    pub method: String,
    /// The URL, template or targets file as the user gave it.
    pub url: String,
    /// Length of the body of the first request.
    pub body_len: usize,
    /// Extra headers, as given.
    pub headers: Vec<(String, String)>,
}

/// Connection behaviour: TLS, HTTP version, churn, source addresses.
#[derive(Debug, Clone)]
pub struct ConnSpec {
    pub protocol: Protocol,
    /// TLS settings (trust, client certificate, ALPN, resumption); `None` for plain TCP.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// HTTP/3: QUIC's TLS client and transport settings (`None` for every other protocol).
    pub quic: Option<QuicSpec>,
    /// Concurrent streams per connection, HTTP/2 or HTTP/3 (1 for HTTP/1.1).
    pub streams: usize,
    /// Close and reconnect after this many requests on a connection.
    pub requests_per_connection: Option<u64>,
    /// Who closes first when `requests_per_connection` ends a connection (the requests carry
    /// the closing variant accordingly, see [`Target::closing`]).
    pub close_first: CloseFirst,
    /// Local addresses new connections leave from, in turn (`--source-address`); empty: the
    /// kernel's choice.
    pub source_addrs: Vec<IpAddr>,
    /// New connections per second at most, on an open-loop schedule.
    pub connection_rate: Option<f64>,
    /// Whether `tls` was built with session resumption (for the report).
    pub tls_resume: bool,
}

impl Default for ConnSpec {
    fn default() -> Self {
        ConnSpec {
            protocol: Protocol::Http1,
            tls: None,
            quic: None,
            streams: 1,
            requests_per_connection: None,
            close_first: CloseFirst::Server,
            source_addrs: Vec::new(),
            connection_rate: None,
            tls_resume: true,
        }
    }
}

/// A fully resolved load test.
#[derive(Debug, Clone)]
pub struct LoadSpec {
    pub request: RequestSpec,
    pub targets: Arc<Targets>,
    pub conn: ConnSpec,
    pub connections: usize,
    /// Closed loop: requests in flight at most, across all connections (default: one per
    /// slot). Fewer than the slots makes `connections` a pool of kept-alive connections, as a
    /// k6 virtual user keeps one per host: with many hosts, requests find one already open.
    pub in_flight: Option<usize>,
    /// Worker threads; each owns an equal share of connections and of the rate.
    pub threads: usize,
    /// Closed loop, or open at a rate with its arrivals.
    pub offer: Offer,
    /// How workers wait for their next send in an open loop (`--idle-strategy`).
    pub idle: IdleStrategy,
    /// The most an open-loop send may leave after its intended instant (`--pacing-slack`).
    pub slack: PacingSlack,
    /// Sends due within the slack after a wake-up go out at it, early (`--send-early`).
    pub send_early: bool,
    pub stop: StopAt,
    pub warmup: Duration,
    pub timeout: Duration,
    /// Seed for Poisson arrivals and random target order, so that a run can be repeated exactly.
    pub seed: u64,
    /// The part of the plan this process drives (all of it unless an agent of several).
    pub segment: Segment,
    /// The fastest answer (service time, µs) the caller saw this target give at a lower load,
    /// such as an earlier step of a capacity search: the self-check's evidence of the target's
    /// ordinary speed when this run, past its limit, cannot show it. Changes nothing sent.
    pub service_at_lower_load_us: Option<u64>,
    /// Per-hop attribution: one measured request in this many carries an `x-meshbench-id` the
    /// proxies log, and its own instants are kept ([`meshbench_results::attribution::Sent`]).
    /// `None`: no header, nothing kept (the requests are exactly as serialised).
    pub trace_every: Option<u32>,
}

/// One part of a plan divided over `count` parts (agents, and each agent's threads): part
/// `index` takes arrivals `index`, `index + count`, ... of the whole schedule (uniform or
/// Poisson, from the same seed), requests the same way through the target list, and its share of
/// connections and of a request budget. The union of all parts is exactly the undivided plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    pub index: u64,
    pub count: u64,
}

impl Default for Segment {
    fn default() -> Self {
        Segment::WHOLE
    }
}

impl Segment {
    /// The whole plan.
    pub const WHOLE: Segment = Segment { index: 0, count: 1 };

    /// Part `index` of `count` (`index < count`, `count >= 1`).
    pub fn new(index: u64, count: u64) -> Segment {
        debug_assert!(count >= 1 && index < count, "segment {index}/{count}");
        Segment { index, count }
    }

    /// Part `w` of this part divided again into `n`: arrival `index + count * (w + n * m)`.
    pub fn split(self, w: u64, n: u64) -> Segment {
        Segment::new(self.index + self.count * w, self.count * n)
    }

    /// This part's share of `total` things (connections, a request budget): the shares of all
    /// parts differ by at most one and add up to `total`.
    pub fn share(self, total: u64) -> u64 {
        total / self.count + u64::from(self.index < total % self.count)
    }
}

impl LoadSpec {
    /// How long in-flight requests may take to finish once sending stops.
    pub fn drain(&self) -> Duration {
        self.timeout.min(Duration::from_secs(2))
    }

    /// Seconds the load is planned to take, warm-up included (the warm-up alone when it stops
    /// after a number of requests).
    pub fn planned_secs(&self) -> f64 {
        let measured = match self.stop {
            StopAt::Duration(d) => d.as_secs_f64(),
            StopAt::Requests(_) => 0.0,
        };
        self.warmup.as_secs_f64() + measured
    }
}
