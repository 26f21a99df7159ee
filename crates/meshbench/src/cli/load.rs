//! The flags of a load, shared by `run`, `capacity` (after `--`) and the agents: what to
//! send (`RequestFlags`), how to pace it (`PacingFlags`), what to publish live (`LiveFlags`),
//! `run`'s own (`RunArgs`), and the value enums they take.

use std::path::PathBuf;

use clap::{Args, Parser, ValueEnum};

use super::AgentsFlags;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DelayModeArg {
    Sleep,
    Spin,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ArrivalArg {
    Uniform,
    Poisson,
}

/// `--idle-strategy`: see the engine's `idle` module.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum IdleArg {
    /// With an auto slack, lead: wake ahead of each send by the clock's error and send what
    /// falls due within 0.75 ms at once, early; with a given slack, spin at most a quarter of
    /// the gap to keep within it.
    Auto,
    /// Sleep until each send: cheapest, late by the machine's wake-up error.
    Sleep,
    /// Sleep until the measured p99 wake-up error before each send, then spin.
    Hybrid,
    /// Never sleep while a send is pending: exact, a full core per thread.
    Spin,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum OrderArg {
    RoundRobin,
    Random,
}

/// Who closes first when --requests-per-connection ends a connection.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum CloseFirstArg {
    /// The last request says `Connection: close`; the server closes and keeps the TIME_WAIT.
    Server,
    /// The client closes after the last response and keeps the TIME_WAIT (one local port for
    /// 60 s per connection).
    Client,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

/// Watching a run while it goes: `/metrics`, remote write, the live page (`run`, `experiment`).
#[derive(Debug, Args, Default)]
pub struct LiveFlags {
    /// Serve /metrics for Prometheus while it runs: PORT (loopback) or HOST:PORT.
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<String>,
    /// After the run, keep serving /metrics until a scrape has read the final values or this
    /// long has passed (give at least the scrape interval), e.g. 5s.
    #[arg(long, value_name = "DURATION", default_value = "0s")]
    pub metrics_linger: String,
    /// Push the same series to a Prometheus remote-write receiver, e.g.
    /// http://127.0.0.1:9090/api/v1/write.
    #[arg(long, value_name = "URL")]
    pub prometheus_remote_write: Option<String>,
    /// A header on every remote-write push, e.g. 'Authorization: Bearer TOKEN'; repeatable.
    #[arg(long = "prometheus-remote-write-header", value_name = "NAME: VALUE")]
    pub remote_write_headers: Vec<String>,
    /// Serve a live page of the run: PORT (loopback) or HOST:PORT.
    #[arg(long, value_name = "ADDR")]
    pub web: Option<String>,
    /// Keep serving the live page this long after the run ends (Ctrl-C ends it sooner), e.g.
    /// 10m; the page then shows the final numbers and links the HTML report.
    #[arg(long, value_name = "DURATION", requires = "web", default_value = "0s")]
    pub web_linger: String,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The URL to load, e.g. http://127.0.0.1:8080/ or a template such as
    /// https://w-{1..10}-d-{1..100}.com/get/{1..50} (ranges {A..B}, lists {a,b,c}).
    #[arg(required_unless_present = "targets")]
    pub url: Option<String>,
    /// Read the requests from a file: blocks of "METHOD URL", header lines, an optional @BODYFILE.
    #[arg(long, value_name = "FILE", conflicts_with = "url")]
    pub targets: Option<PathBuf>,
    #[command(flatten)]
    pub request: RequestFlags,
    /// Connections kept open (a closed loop without --in-flight: one request in flight on each).
    #[arg(short = 'c', long, default_value_t = 16, value_name = "N")]
    pub connections: usize,
    /// Closed loop: requests in flight at most, fewer than --connections, which then become a
    /// pool of kept-alive connections (per host, as a k6 virtual user keeps them).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub in_flight: Option<i64>,
    /// The old name of --in-flight, still read.
    #[arg(long, value_name = "N", allow_negative_numbers = true, hide = true)]
    pub concurrency: Option<i64>,
    /// Open loop at this total rate in requests per second; latency counts from the intended
    /// send time (coordinated-omission corrected).
    #[arg(short = 'r', long, value_name = "RPS", allow_negative_numbers = true)]
    pub rate: Option<f64>,
    #[command(flatten)]
    pub pacing: PacingFlags,
    /// How long to measure, e.g. 10s, 2m (default 10s unless --requests is given).
    #[arg(
        short = 'd',
        long,
        value_name = "DURATION",
        conflicts_with = "requests",
        allow_hyphen_values = true
    )]
    pub duration: Option<String>,
    /// Stop after this many measured requests.
    #[arg(short = 'n', long, value_name = "N", allow_negative_numbers = true)]
    pub requests: Option<i64>,
    /// Load before measuring, excluded from the results.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "0s",
        allow_hyphen_values = true
    )]
    pub warmup: String,
    /// Write the result as JSON (schema meshbench/result/v1) to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// No live progress line on stderr.
    #[arg(short = 'q', long)]
    pub quiet: bool,
    /// Fail (exit 1) unless this holds, e.g. 'p99<10ms', 'errors<0.1%', 'rps>=900';
    /// repeatable.
    #[arg(long = "threshold", value_name = "METRIC<VALUE")]
    pub thresholds: Vec<String>,
    #[command(flatten)]
    pub live: LiveFlags,
    #[command(flatten)]
    pub agents: AgentsFlags,
}

/// How each request is made and carried: `meshbench run`'s flags, also taken by `meshbench
/// capacity` after `--` (the rate, duration and connections are the search's own).
#[derive(Debug, Args)]
pub struct RequestFlags {
    /// Order in which requests go through the target list (repeatable with --seed).
    #[arg(long, value_enum, default_value = "round-robin")]
    pub target_order: OrderArg,
    /// Connect to another address for a host, as curl does: HOST:PORT:ADDR:PORT (empty HOST or
    /// PORT matches any; repeatable).
    #[arg(long, value_name = "HOST:PORT:ADDR:PORT")]
    pub connect_to: Vec<String>,
    /// HTTP/2: ALPN h2 over TLS, prior-knowledge h2c over plain TCP.
    #[arg(long)]
    pub http2: bool,
    /// gRPC unary calls over HTTP/2 (h2c or TLS): a bare URL calls fortio's ping
    /// (/fgrpc.PingServer/Ping), a URL path names the method (/pkg.Service/Method) and --body
    /// (TEXT, or @FILE to read it from a file) is its protobuf message. Calls are counted by
    /// grpc-status; --timeout is sent as the call's deadline.
    #[arg(long, conflicts_with = "http2")]
    pub grpc: bool,
    /// HTTP/3 over QUIC (https:// URLs only; UDP to the URL's port). Each connection is its
    /// own UDP socket; --streams requests at once on each.
    #[arg(long, conflicts_with_all = ["http2", "grpc"])]
    pub http3: bool,
    /// HTTP/3: send the first requests of a resumed connection as 0-RTT early data (new
    /// connections after the first to a host resume its session).
    #[arg(long = "h3-0rtt")]
    pub h3_0rtt: bool,
    /// HTTP/3: move each connection to a new local UDP port after every N responses
    /// (connection migration, as after a NAT rebinding); the server must follow.
    #[arg(long, value_name = "N")]
    pub h3_rebind_every: Option<u64>,
    /// gRPC ping: bytes of payload in each ping message (without --body).
    #[arg(long, value_name = "BYTES", default_value_t = 0)]
    pub grpc_payload: usize,
    /// gRPC: the service's .proto (compiled here; imports beside it); --body is then JSON of
    /// the method's request message, the method named by the URL's path.
    #[arg(long, value_name = "FILE")]
    pub proto: Option<PathBuf>,
    /// Concurrent streams per connection (HTTP/2, gRPC, HTTP/3).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        allow_negative_numbers = true
    )]
    pub streams: i64,
    /// Do not verify the server's certificate.
    #[arg(short = 'k', long)]
    pub insecure: bool,
    /// Trust the CA certificates in this PEM file instead of the system's.
    #[arg(long, value_name = "FILE")]
    pub cacert: Option<PathBuf>,
    /// Client certificate (PEM) for mutual TLS; needs --key.
    #[arg(long, value_name = "FILE", requires = "key")]
    pub cert: Option<PathBuf>,
    /// Private key (PEM) of --cert.
    #[arg(long, value_name = "FILE", requires = "cert")]
    pub key: Option<PathBuf>,
    /// Resume TLS sessions on new connections to the same host.
    #[arg(long, value_enum, default_value = "on")]
    pub tls_resume: OnOff,
    /// Close a connection and open a new one after this many requests (1: a new connection
    /// per request).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub requests_per_connection: Option<i64>,
    /// Who closes first when --requests-per-connection ends a connection [default: server over
    /// HTTP/1.1, client over HTTP/2].
    #[arg(long, value_enum, value_name = "SIDE")]
    pub close_first: Option<CloseFirstArg>,
    /// Local addresses new connections leave from, in turn: ADDR or CIDR, comma-separated or
    /// repeated (each address brings its own range of ephemeral ports).
    #[arg(long = "source-address", value_name = "ADDR[,ADDR|CIDR...]")]
    pub source_addresses: Vec<String>,
    /// Open new connections at this rate at most (per second), on an open-loop schedule.
    #[arg(long, value_name = "PER_SEC", allow_negative_numbers = true)]
    pub connection_rate: Option<f64>,
    /// HTTP method.
    #[arg(short = 'm', long, default_value = "GET")]
    pub method: String,
    /// Extra request header, "Name: value" (repeatable).
    #[arg(short = 'H', long = "header", value_name = "HEADER")]
    pub headers: Vec<String>,
    /// Send a body of this many bytes.
    #[arg(
        long,
        value_name = "BYTES",
        conflicts_with = "body",
        allow_negative_numbers = true
    )]
    pub body_size: Option<i64>,
    /// Send this body; @FILE reads it from a file.
    #[arg(long, value_name = "TEXT|@FILE")]
    pub body: Option<String>,
    /// A request without a complete response after this long counts as a timeout.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "10s",
        allow_hyphen_values = true
    )]
    pub timeout: String,
    /// Worker threads (default: the CPUs this process may use, no more than its CPU quota
    /// rounded up, at most one per connection).
    #[arg(short = 't', long, value_name = "N", allow_negative_numbers = true)]
    pub threads: Option<i64>,
    /// Seed for Poisson arrivals and --target-order random.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// How an open loop spaces and paces its sends: `meshbench run`'s flags, also taken by
/// `meshbench capacity` after `--`.
#[derive(Debug, Args)]
pub struct PacingFlags {
    /// How open-loop requests are spaced.
    #[arg(long, value_enum)]
    pub arrival: Option<ArrivalArg>,
    /// How an open loop waits for its next send [default: auto].
    #[arg(long, value_enum, value_name = "STRATEGY")]
    pub idle_strategy: Option<IdleArg>,
    /// How late an open-loop send may leave after its intended instant, e.g. 100us, 1ms, or
    /// auto (from this machine's clock). Sends falling due within it share one wake-up, which
    /// makes the loop cheaper and the arrivals burstier; latency still counts from each
    /// intended instant [default: auto: with --idle-strategy auto, sends lead instead, leaving
    /// at most the clock's lateness and 0.75 ms early, and on time at p99].
    #[arg(long, value_name = "DURATION")]
    pub pacing_slack: Option<String>,
    /// Let sends due within the pacing slack after a wake-up go out at it, early; their
    /// latency then counts from the real send.
    #[arg(long)]
    pub send_early: bool,
}

/// `meshbench capacity URL ... -- FLAGS`: the flags after `--`, parsed once.
#[derive(Debug, Parser)]
#[command(no_binary_name = true, name = "capacity --")]
pub struct PassedRequestFlags {
    #[command(flatten)]
    pub request: RequestFlags,
    #[command(flatten)]
    pub pacing: PacingFlags,
}
