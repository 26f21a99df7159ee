//! What load to drive, as typed options: the same value whether it came from `meshbench run`'s
//! flags, an experiment step, a capacity search or (later) a remote coordinator. It is plain data
//! (serde), so it can be stored or sent; [`LoadOptions::resolve`] turns it into the engine's
//! [`LoadSpec`] and is where *every* check happens, before any traffic: contradictions, numbers
//! out of range, URLs, templates and targets files, host names, certificate files.
//!
//! Messages name the command-line flag of each option (`--rate 0: ...`), since that is how most
//! users meet them; an experiment step builds options that pass these checks by construction.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use meshbench_engine::{ConnSpec, LoadSpec, QuicSpec, RequestSpec, StopAt};
use meshbench_net::tls::ClientTlsOptions;
use meshbench_results::{Arrival, CloseFirst, IdleStrategy, Offer, Order, PacingSlack, Protocol};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::source_addrs;

/// The widest pacing budget accepted (µs): 10 ms is already a burst every 10 ms, which is what
/// a generator that paces per connection does (h2load's `--rps`).
pub const MAX_SLACK_US: u64 = 10_000;
use crate::targets::{self, BuildOptions, ConnectTo, GrpcCall, Source};

/// Options that cannot be run, in one line that says what to change.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("{0}")]
pub struct LoadError(pub String);

impl LoadError {
    pub fn new(msg: impl Into<String>) -> LoadError {
        LoadError(msg.into())
    }
}

/// Where the requests come from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TargetSource {
    /// One URL, or a URL template (`https://w-{1..10}.com/get/{1..50}`).
    Url(String),
    /// A targets file: blocks of `METHOD URL`, header lines, an optional `@BODYFILE`.
    File(PathBuf),
    /// A targets file as the coordinator read it (bodies included), for agents on machines
    /// that do not have the file; `name` is the file's name on the coordinator.
    Read {
        name: String,
        targets: Vec<targets::file::FileTarget>,
    },
}

/// The user's `.proto` of a gRPC load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProtoSource {
    /// Compiled when the options are resolved (imports beside it).
    File(PathBuf),
    /// As the coordinator compiled it: the encoded `FileDescriptorSet`, for agents on machines
    /// that do not have the file; `name` is the file's name on the coordinator.
    Compiled { name: String, descriptors: Vec<u8> },
}

/// The request body.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Body {
    #[default]
    Empty,
    /// These bytes.
    Bytes(Vec<u8>),
    /// This many bytes of `x`.
    Size(u64),
    /// The contents of a file, read when the options are resolved.
    File(PathBuf),
}

/// Where the CA certificates to trust come from: a file, or its contents (sent to agents, which
/// do not have the coordinator's files).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum CaSource {
    File(PathBuf),
    /// `name`: the file it was read from.
    Pem {
        name: String,
        pem: String,
    },
}

/// TLS client settings (https:// targets only).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TlsOptions {
    /// Do not verify the server's certificate.
    pub insecure: bool,
    /// Trust these CA certificates (PEM) instead of the system's.
    pub ca: Option<CaSource>,
    /// Client certificate and key (PEM) for mutual TLS.
    pub client_cert: Option<(PathBuf, PathBuf)>,
    /// Resume TLS sessions on new connections to the same host.
    pub resume: bool,
}

impl Default for TlsOptions {
    fn default() -> Self {
        TlsOptions {
            insecure: false,
            ca: None,
            client_cert: None,
            resume: true,
        }
    }
}

/// HTTP/3 settings of the QUIC transport.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QuicOptions {
    /// Send the first requests of a resumed connection as 0-RTT early data.
    pub zero_rtt: bool,
    /// Move each connection to a new local port after this many responses (migration).
    pub rebind_every: Option<u64>,
}

impl TlsOptions {
    fn given(&self) -> bool {
        self.insecure || self.ca.is_some() || self.client_cert.is_some()
    }
}

/// A load test, unresolved. [`LoadOptions::new`] gives `meshbench run`'s defaults.
///
/// Its parts are flattened: the JSON (what agents are sent) has every option at the top.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadOptions {
    /// What to send: targets, method, headers, body.
    #[serde(flatten)]
    pub send: SendOptions,
    /// How to connect: protocol, TLS, QUIC, and how connections are opened and closed.
    #[serde(flatten)]
    pub connect: ConnectOptions,
    pub connections: usize,
    /// How to pace: the loop (closed or open), its rate, and the workers that drive it.
    #[serde(flatten)]
    pub pace: PaceOptions,
    /// When to measure and when to stop.
    #[serde(flatten)]
    pub window: WindowOptions,
    pub timeout: Duration,
}

/// What a load sends: where the requests go and what they carry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SendOptions {
    pub source: TargetSource,
    pub target_order: Order,
    /// `HOST:PORT:ADDR:PORT` rules, as curl's `--connect-to`.
    pub connect_to: Vec<ConnectTo>,
    /// HTTP method of a URL source (a targets file names its own).
    pub method: String,
    /// Extra headers on every request.
    pub headers: Vec<(String, String)>,
    pub body: Body,
    /// gRPC: the ping's payload in bytes, when the request has no message of its own.
    #[serde(default)]
    pub grpc_payload: usize,
    /// gRPC: the user's `.proto`; the body is then JSON of the method's request message.
    #[serde(default)]
    pub grpc_proto: Option<ProtoSource>,
    /// Per-hop attribution: one measured request in this many carries an `x-meshbench-id`
    /// (`None`: no request does).
    #[serde(default)]
    pub trace_every: Option<u32>,
}

/// How a load connects: the protocol and its transport, and each connection's life.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConnectOptions {
    pub protocol: Protocol,
    /// Concurrent HTTP/2 streams per connection.
    pub streams: usize,
    pub tls: TlsOptions,
    /// HTTP/3: 0-RTT and connection migration.
    #[serde(default)]
    pub quic: QuicOptions,
    /// Close and reopen a connection after this many requests.
    pub requests_per_connection: Option<u64>,
    /// Who closes first when `requests_per_connection` ends a connection (`None`: the server
    /// over HTTP/1.1, the client over HTTP/2).
    #[serde(default)]
    pub close_first: Option<CloseFirst>,
    /// Local addresses and CIDR blocks new connections leave from, in turn, as given.
    #[serde(default)]
    pub source_addresses: Vec<String>,
    /// New connections per second at most.
    pub connection_rate: Option<f64>,
}

/// How a load is paced: a closed loop (capped or not) or an open one, and its workers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PaceOptions {
    /// Closed loop: requests in flight at most (fewer than the connections, which then pool).
    pub in_flight: Option<usize>,
    /// Open loop at this total rate; `None` is a closed loop.
    pub rate_rps: Option<f64>,
    /// How open-loop arrivals are spaced (uniform unless given).
    pub arrival: Option<Arrival>,
    /// How an open loop waits for its next send (`auto` unless given).
    pub idle: Option<IdleStrategy>,
    /// How precisely an open loop keeps its schedule (`--pacing-slack`).
    #[serde(default)]
    pub slack: PacingSlack,
    /// Sends due within the slack after a wake-up go out at it (`--send-early`).
    #[serde(default)]
    pub send_early: bool,
    /// Worker threads; `None`: the CPUs this process may use.
    pub threads: Option<usize>,
    /// Seed for Poisson arrivals and random target order.
    pub seed: u64,
}

/// When a load is measured: after the warmup, until the stop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WindowOptions {
    pub stop: StopAt,
    pub warmup: Duration,
}

impl LoadOptions {
    /// A closed loop of 16 connections for 10 s against `source`, GET, 10 s timeout.
    pub fn new(source: TargetSource) -> LoadOptions {
        LoadOptions {
            send: SendOptions {
                source,
                target_order: Order::RoundRobin,
                connect_to: Vec::new(),
                method: "GET".into(),
                headers: Vec::new(),
                body: Body::Empty,
                grpc_payload: 0,
                grpc_proto: None,
                trace_every: None,
            },
            connect: ConnectOptions {
                protocol: Protocol::Http1,
                streams: 1,
                tls: TlsOptions::default(),
                quic: QuicOptions::default(),
                requests_per_connection: None,
                close_first: None,
                source_addresses: Vec::new(),
                connection_rate: None,
            },
            connections: 16,
            pace: PaceOptions {
                in_flight: None,
                rate_rps: None,
                arrival: None,
                idle: None,
                slack: PacingSlack::Auto,
                send_early: false,
                threads: None,
                seed: 1,
            },
            window: WindowOptions {
                stop: StopAt::Duration(Duration::from_secs(10)),
                warmup: Duration::ZERO,
            },
            timeout: Duration::from_secs(10),
        }
    }

    /// Checks everything and builds the run. Nothing is sent here; host names are looked up,
    /// files are read and TLS settings are built.
    pub fn resolve(&self) -> Result<LoadSpec, LoadError> {
        let offer = self.offer()?;
        let threads = self.thread_count()?;
        let method = self.request_method()?;
        self.check_protocol_options()?;
        let proto = self.proto()?;
        let in_flight = self.in_flight_cap()?;
        let close_first = self.who_closes_first()?;
        let source_addrs = source_addrs::parse(&self.connect.source_addresses)?;
        self.check_connection_rate()?;
        self.check_tracing()?;
        let body = self.body_bytes()?;
        let (sources, description) = self.sources(&method, body)?;
        let built = self.build_targets(&sources, close_first, proto)?;
        let host_addrs: Vec<_> = built.targets.hosts.iter().map(|h| h.addr).collect();
        source_addrs::check(
            &source_addrs,
            &host_addrs,
            meshbench_net::socket::check_source,
        )?;
        let tls = self.tls_client(built.tls)?;
        let (tls, quic) = self.quic_transport(tls)?;
        let first_body = sources.first().map_or(0, |s| s.body.len());
        Ok(LoadSpec {
            request: RequestSpec {
                method,
                url: description,
                body_len: first_body,
                headers: self.send.headers.clone(),
            },
            targets: Arc::new(built.targets),
            conn: ConnSpec {
                protocol: self.connect.protocol,
                tls,
                quic,
                streams: self.connect.streams,
                requests_per_connection: self.connect.requests_per_connection,
                close_first,
                source_addrs,
                connection_rate: self.connect.connection_rate,
                tls_resume: self.connect.tls.resume,
            },
            connections: self.connections,
            in_flight,
            threads,
            offer,
            idle: self.pace.idle.unwrap_or_default(),
            slack: self.pace.slack,
            send_early: self.pace.send_early,
            stop: self.window.stop,
            warmup: self.window.warmup,
            timeout: self.timeout,
            seed: self.pace.seed,
            segment: meshbench_engine::Segment::WHOLE,
            service_at_lower_load_us: None,
            trace_every: self.send.trace_every,
        })
    }

    /// Attribution's ids go on HTTP/1.1 and HTTP/2 (gRPC included), and are the only
    /// `x-meshbench-id` a request carries.
    fn check_tracing(&self) -> Result<(), LoadError> {
        let Some(every) = self.send.trace_every else {
            return Ok(());
        };
        if every == 0 {
            return Err(LoadError(
                "attribution samples one request in 0: give at least 1".into(),
            ));
        }
        if self.connect.protocol == Protocol::Http3 {
            return Err(LoadError(
                "attribution is not built for HTTP/3 yet: turn attribution off or use HTTP/1.1 or HTTP/2".into(),
            ));
        }
        if self
            .send
            .headers
            .iter()
            .any(|(name, _)| name.eq_ignore_ascii_case(meshbench_results::attribution::ID_HEADER))
        {
            return Err(LoadError(
                format!(
                "the request sets its own {}, which attribution uses for its ids: drop the header or turn attribution off",
                meshbench_results::attribution::ID_HEADER
            ),
            ));
        }
        Ok(())
    }

    /// Checks the connections, the loop's shape (rate, arrival, idle strategy), the stop and
    /// the timeout; the closed or open loop they make.
    fn offer(&self) -> Result<Offer, LoadError> {
        let bad = |m: String| Err(LoadError(m));
        if self.connections == 0 {
            return bad("--connections 0: must be at least 1".into());
        }
        if self.pace.rate_rps.is_none() && self.pace.idle.is_some() {
            return bad(
                "--idle-strategy applies to an open loop only (a closed loop waits on responses); add --rate RPS"
                    .into(),
            );
        }
        if self.pace.rate_rps.is_none() && self.pace.slack != PacingSlack::Auto {
            return bad("--pacing-slack applies to an open loop only; add --rate RPS".into());
        }
        if self.pace.rate_rps.is_none() && self.pace.send_early {
            return bad("--send-early applies to an open loop only; add --rate RPS".into());
        }
        if self
            .pace
            .slack
            .given_us()
            .is_some_and(|us| us > MAX_SLACK_US)
        {
            return bad(format!(
                "--pacing-slack is at most {} ms: a wider budget would no longer be a schedule",
                MAX_SLACK_US / 1000
            ));
        }
        let offer = match (self.pace.rate_rps, self.pace.arrival) {
            (None, Some(_)) => {
                return bad("--arrival applies to an open loop only; add --rate RPS".into())
            }
            (None, None) => Offer::Closed,
            (Some(r), arrival) => {
                if !r.is_finite() || r <= 0.0 {
                    return bad(format!(
                        "--rate {r}: must be a positive number of requests per second"
                    ));
                }
                Offer::Open {
                    rate_rps: r,
                    arrival: arrival.unwrap_or(Arrival::Uniform),
                }
            }
        };
        match self.window.stop {
            StopAt::Duration(d) if d.is_zero() => {
                return bad("--duration must be longer than 0".into())
            }
            StopAt::Requests(0) => return bad("--requests 0: must be at least 1".into()),
            _ => {}
        }
        if self.timeout.is_zero() {
            return bad("--timeout must be longer than 0".into());
        }
        Ok(offer)
    }

    /// The worker threads asked for, or the CPUs this process may use: those it may run on,
    /// and no more than its CPU quota rounded up (a pod limited to 1.1 CPUs gets 2 threads, not
    /// one per CPU of its node, each of which the quota would stop in turn).
    fn thread_count(&self) -> Result<usize, LoadError> {
        match self.pace.threads {
            Some(0) => Err(LoadError("--threads 0: must be at least 1".into())),
            Some(t) => Ok(t),
            None => {
                let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
                let quota = meshbench_engine::quota::cpu_quota()
                    .map_or(usize::MAX, |q| (q.cores.ceil() as usize).max(1));
                Ok(cpus.min(quota))
            }
        }
    }

    /// The HTTP method, upper-cased (always POST for gRPC), checked to be a token.
    fn request_method(&self) -> Result<String, LoadError> {
        let mut method = self.send.method.trim().to_ascii_uppercase();
        if self.connect.protocol == Protocol::Grpc {
            // Every gRPC call is a POST.
            method = "POST".into();
        }
        if method.is_empty() || !method.bytes().all(|b| b.is_ascii_alphabetic() || b == b'-') {
            return Err(LoadError(format!(
                "--method '{}': not an HTTP method such as GET or POST",
                self.send.method
            )));
        }
        Ok(method)
    }

    /// Checks that streams, QUIC and gRPC options are in range and fit the protocol.
    fn check_protocol_options(&self) -> Result<(), LoadError> {
        let bad = |m: String| Err(LoadError(m));
        if self.connect.streams == 0 {
            return bad("--streams 0: must be at least 1".into());
        }
        if self.connect.streams > 1 && !self.connect.protocol.is_multiplexed() {
            return bad(
                "--streams applies to HTTP/2, gRPC and HTTP/3 only; add --http2, --grpc or --http3"
                    .into(),
            );
        }
        let h3 = self.connect.protocol == Protocol::Http3;
        if !h3 && self.connect.quic != QuicOptions::default() {
            return bad("--h3-0rtt and --h3-rebind-every apply to HTTP/3 only; add --http3".into());
        }
        if self.connect.quic.rebind_every == Some(0) {
            return bad("--h3-rebind-every 0: must be at least 1 response".into());
        }
        if self.connect.quic.zero_rtt && !self.connect.tls.resume {
            return bad("--h3-0rtt needs session resumption (0-RTT resumes a session); drop --tls-resume off".into());
        }
        if self.send.grpc_payload > 0 && self.connect.protocol != Protocol::Grpc {
            return bad("--grpc-payload applies to gRPC only; add --grpc".into());
        }
        if self.send.grpc_proto.is_some() && self.connect.protocol != Protocol::Grpc {
            return bad("--proto applies to gRPC only; add --grpc".into());
        }
        Ok(())
    }

    /// The user's `.proto`, compiled (or decoded as the coordinator compiled it), if given.
    fn proto(&self) -> Result<Option<Arc<targets::proto::Proto>>, LoadError> {
        Ok(match &self.send.grpc_proto {
            Some(source) => Some(std::sync::Arc::new(
                compile_proto(source).map_err(|e| LoadError(format!("--proto {e}")))?,
            )),
            None => None,
        })
    }

    /// The closed loop's cap on requests in flight, checked against the loop and the connections.
    fn in_flight_cap(&self) -> Result<Option<usize>, LoadError> {
        let bad = |m: String| Err(LoadError(m));
        match self.pace.in_flight {
            None => Ok(None),
            Some(_) if self.pace.rate_rps.is_some() => {
                bad("--in-flight caps a closed loop; an open loop's rate sets its own (drop --rate or --in-flight)".into())
            }
            Some(0) => bad("--in-flight 0: must be at least 1".into()),
            Some(n) if n > self.connections * self.connect.streams => {
                bad(format!(
                    "--in-flight {n}: more than the {} connections (x streams) can carry; raise --connections",
                    self.connections
                ))
            }
            Some(n) => Ok(Some(n)),
        }
    }

    /// Checks `--requests-per-connection`; who closes a connection it ends, for this protocol.
    fn who_closes_first(&self) -> Result<CloseFirst, LoadError> {
        let bad = |m: String| Err(LoadError(m));
        if self.connect.requests_per_connection == Some(0) {
            return bad("--requests-per-connection 0: must be at least 1".into());
        }
        match (self.connect.close_first, self.connect.protocol) {
            (Some(_), _) if self.connect.requests_per_connection.is_none() => {
                bad(
                    "--close-first applies to connections ended by --requests-per-connection; add it"
                        .into(),
                )
            }
            (Some(CloseFirst::Server), Protocol::Http2 | Protocol::Grpc | Protocol::Http3) => {
                bad("--close-first server: an HTTP/2 or HTTP/3 client cannot ask the server to close first (a GOAWAY of its own is a client close); drop it, or use HTTP/1.1".into())
            }
            (_, Protocol::Http2 | Protocol::Grpc | Protocol::Http3) => Ok(CloseFirst::Client),
            (asked, Protocol::Http1) => Ok(asked.unwrap_or_default()),
        }
    }

    /// Checks that `--connection-rate`, if given, is a positive number.
    fn check_connection_rate(&self) -> Result<(), LoadError> {
        if let Some(r) = self.connect.connection_rate {
            if !r.is_finite() || r <= 0.0 {
                return Err(LoadError(format!(
                    "--connection-rate {r}: must be a positive number of connections per second"
                )));
            }
        }
        Ok(())
    }

    /// The targets of these sources: templates expanded, host names looked up.
    fn build_targets(
        &self,
        sources: &[Source],
        close_first: CloseFirst,
        proto: Option<Arc<targets::proto::Proto>>,
    ) -> Result<targets::Built, LoadError> {
        targets::build(
            sources,
            &BuildOptions {
                protocol: self.connect.protocol,
                order: self.send.target_order,
                connect_to: &self.send.connect_to,
                announce_close: self.connect.requests_per_connection.is_some()
                    && close_first == CloseFirst::Server,
                grpc: GrpcCall {
                    ping_payload: self.send.grpc_payload,
                    deadline: self.timeout,
                    proto,
                },
            },
        )
    }

    /// Checks the TLS options against the URLs' scheme; the TLS client, with the protocol's
    /// ALPN, when the URLs are https://.
    fn tls_client(&self, https: bool) -> Result<Option<Arc<rustls::ClientConfig>>, LoadError> {
        let bad = |m: String| Err(LoadError(m));
        let h3 = self.connect.protocol == Protocol::Http3;
        if h3 && !https {
            return bad("--http3 needs https:// URLs: QUIC is always TLS".into());
        }
        if !https && self.connect.tls.given() {
            return bad("--insecure, --cacert and --cert apply to https:// URLs only".into());
        }
        if !https {
            return Ok(None);
        }
        let alpn = match self.connect.protocol {
            Protocol::Http1 => vec![b"http/1.1".to_vec()],
            Protocol::Http2 | Protocol::Grpc => vec![b"h2".to_vec()],
            Protocol::Http3 => vec![b"h3".to_vec()],
        };
        let opts = ClientTlsOptions {
            insecure: self.connect.tls.insecure,
            ca: self.connect.tls.ca.clone().map(|c| match c {
                CaSource::File(path) => meshbench_net::tls::Roots::File(path),
                CaSource::Pem { name, pem } => meshbench_net::tls::Roots::Pem {
                    name: name.into(),
                    pem: pem.into_bytes(),
                },
            }),
            client_cert: self.connect.tls.client_cert.clone(),
            alpn,
            resume: self.connect.tls.resume,
        };
        Ok(Some(
            meshbench_net::tls::client_config(&opts).map_err(|e| LoadError(e.to_string()))?,
        ))
    }

    /// HTTP/3 carries its TLS inside QUIC: the TLS client moves there. The TLS client of a
    /// TCP connection, and the QUIC transport of an HTTP/3 one.
    fn quic_transport(
        &self,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Result<(Option<Arc<rustls::ClientConfig>>, Option<QuicSpec>), LoadError> {
        Ok(match tls {
            Some(config) if self.connect.protocol == Protocol::Http3 => {
                let quic = QuicSpec::new(
                    &config,
                    self.connect.streams,
                    self.connect.quic.zero_rtt,
                    self.connect.quic.rebind_every,
                )
                .map_err(|e| LoadError(e.to_string()))?;
                (None, Some(quic))
            }
            other => (other, None),
        })
    }

    fn body_bytes(&self) -> Result<Bytes, LoadError> {
        Ok(match &self.send.body {
            Body::Empty => Bytes::new(),
            Body::Bytes(b) => Bytes::from(b.clone()),
            Body::Size(n) => Bytes::from(vec![b'x'; *n as usize]),
            Body::File(path) => std::fs::read(path).map(Bytes::from).map_err(|e| {
                LoadError(format!(
                    "--body @{}: cannot read the file: {e}",
                    path.display()
                ))
            })?,
        })
    }

    /// The same load with every file it reads (the body, the targets file and its bodies, the
    /// `.proto`, the CA to trust) read into it: what agents on other machines are sent, since
    /// the paths name the coordinator's files. (A client certificate and key are not carried:
    /// an agent needs its own.)
    pub fn self_contained(&self) -> Result<LoadOptions, LoadError> {
        let mut o = self.clone();
        if let Body::File(_) = &o.send.body {
            o.send.body = Body::Bytes(self.body_bytes()?.to_vec());
        }
        if let TargetSource::File(path) = &o.send.source {
            o.send.source = TargetSource::Read {
                name: path.display().to_string(),
                targets: read_targets(path)?,
            };
        }
        if let Some(CaSource::File(path)) = &o.connect.tls.ca {
            let pem = std::fs::read_to_string(path)
                .map_err(|e| LoadError(format!("cannot read {}: {e}", path.display())))?;
            o.connect.tls.ca = Some(CaSource::Pem {
                name: path.display().to_string(),
                pem,
            });
        }
        if let Some(ProtoSource::File(file)) = &o.send.grpc_proto {
            let proto = targets::proto::Proto::compile(file, &[])
                .map_err(|e| LoadError(format!("--proto {e}")))?;
            o.send.grpc_proto = Some(ProtoSource::Compiled {
                name: file.display().to_string(),
                descriptors: proto.descriptors().to_vec(),
            });
        }
        Ok(o)
    }

    /// A targets file's blocks as sources, each with the common headers and, without a body
    /// of its own, the common body.
    fn file_sources(
        &self,
        name: &str,
        blocks: Vec<targets::file::FileTarget>,
        body: &Bytes,
    ) -> (Vec<Source>, String) {
        let list = blocks
            .into_iter()
            .map(|b| {
                let mut all = self.send.headers.clone();
                all.extend(b.headers);
                Source {
                    method: b.method,
                    url: b.url,
                    headers: all,
                    body: b.body.map_or_else(|| body.clone(), Into::into),
                    origin: format!("--targets {name} line {}", b.line),
                }
            })
            .collect();
        (list, format!("@{name}"))
    }

    /// The URL (or template), or every block of the targets file; and how to name them in
    /// reports.
    fn sources(&self, method: &str, body: Bytes) -> Result<(Vec<Source>, String), LoadError> {
        match &self.send.source {
            TargetSource::File(path) => {
                let name = path.display().to_string();
                let blocks = read_targets(path)?;
                Ok(self.file_sources(&name, blocks, &body))
            }
            TargetSource::Read { name, targets } => {
                Ok(self.file_sources(name, targets.clone(), &body))
            }
            TargetSource::Url(url) => Ok((
                vec![Source {
                    method: method.to_string(),
                    url: url.clone(),
                    headers: self.send.headers.clone(),
                    body,
                    origin: "the URL".to_string(),
                }],
                url.clone(),
            )),
        }
    }
}

/// A targets file's blocks, bodies read (relative to the file).
fn read_targets(path: &Path) -> Result<Vec<targets::file::FileTarget>, LoadError> {
    let name = path.display();
    let text = std::fs::read_to_string(path)
        .map_err(|e| LoadError(format!("--targets {name}: cannot read the file: {e}")))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    targets::file::parse(&text, dir).map_err(|e| LoadError(format!("--targets {name}: {e}")))
}

/// The `.proto`'s services, from the file or as the coordinator compiled them.
fn compile_proto(
    source: &ProtoSource,
) -> Result<targets::proto::Proto, targets::proto::ProtoError> {
    match source {
        ProtoSource::File(file) => targets::proto::Proto::compile(file, &[]),
        ProtoSource::Compiled { name, descriptors } => {
            targets::proto::Proto::from_descriptors(name, descriptors.clone())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url() -> LoadOptions {
        LoadOptions::new(TargetSource::Url("http://127.0.0.1:9/".into()))
    }

    /// These options with `change` made to them.
    fn with(mut o: LoadOptions, change: impl FnOnce(&mut LoadOptions)) -> LoadOptions {
        change(&mut o);
        o
    }

    #[test]
    fn every_contradiction_is_refused_before_any_traffic() {
        let cases: Vec<(&str, LoadOptions, &str)> = vec![
            (
                "no connections",
                with(url(), |o| o.connections = 0),
                "--connections 0",
            ),
            (
                "zero rate",
                with(url(), |o| o.pace.rate_rps = Some(0.0)),
                "--rate 0",
            ),
            (
                "nan rate",
                with(url(), |o| o.pace.rate_rps = Some(f64::NAN)),
                "--rate NaN",
            ),
            (
                "arrival without rate",
                with(url(), |o| o.pace.arrival = Some(Arrival::Poisson)),
                "--arrival",
            ),
            (
                "zero duration",
                with(url(), |o| o.window.stop = StopAt::Duration(Duration::ZERO)),
                "--duration",
            ),
            (
                "zero requests",
                with(url(), |o| o.window.stop = StopAt::Requests(0)),
                "--requests 0",
            ),
            (
                "zero timeout",
                with(url(), |o| o.timeout = Duration::ZERO),
                "--timeout",
            ),
            (
                "zero threads",
                with(url(), |o| o.pace.threads = Some(0)),
                "--threads 0",
            ),
            (
                "bad method",
                with(url(), |o| o.send.method = "G T".into()),
                "--method 'G T'",
            ),
            (
                "streams on h1",
                with(url(), |o| o.connect.streams = 4),
                "--streams applies to HTTP/2",
            ),
            (
                "in flight in open loop",
                with(url(), |o| {
                    o.pace.in_flight = Some(2);
                    o.pace.rate_rps = Some(5.0);
                }),
                "--in-flight caps",
            ),
            (
                "in flight over slots",
                with(url(), |o| o.pace.in_flight = Some(17)),
                "--in-flight 17",
            ),
            (
                "zero churn",
                with(url(), |o| o.connect.requests_per_connection = Some(0)),
                "--requests-per-connection 0",
            ),
            (
                "close-first without churn",
                with(url(), |o| o.connect.close_first = Some(CloseFirst::Client)),
                "--close-first applies",
            ),
            (
                "server closing first over h2",
                with(url(), |o| {
                    o.connect.close_first = Some(CloseFirst::Server);
                    o.connect.requests_per_connection = Some(1);
                    o.connect.protocol = Protocol::Http2;
                }),
                "--close-first server",
            ),
            (
                "a source address of another family",
                with(url(), |o| o.connect.source_addresses = vec!["::1".into()]),
                "cannot reach the target 127.0.0.1:9",
            ),
            (
                "a source address not of this machine",
                with(url(), |o| {
                    o.connect.source_addresses = vec!["192.0.2.7".into()]
                }),
                "--source-address '192.0.2.7': not an address of this machine",
            ),
            (
                "a source address that is not one",
                with(url(), |o| {
                    o.connect.source_addresses = vec!["10.0.0.1,x".into()]
                }),
                "--source-address 'x'",
            ),
            (
                "negative connection rate",
                with(url(), |o| o.connect.connection_rate = Some(-1.0)),
                "--connection-rate -1",
            ),
            (
                "tls flags on http",
                with(url(), |o| {
                    o.connect.tls = TlsOptions {
                        insecure: true,
                        ..TlsOptions::default()
                    }
                }),
                "apply to https://",
            ),
            (
                "missing body file",
                with(url(), |o| o.send.body = Body::File("/nonexistent/b".into())),
                "cannot read the file",
            ),
            (
                "missing targets file",
                LoadOptions::new(TargetSource::File("/nonexistent/t.txt".into())),
                "--targets /nonexistent/t.txt",
            ),
            (
                "bad scheme",
                LoadOptions::new(TargetSource::Url("ftp://x/".into())),
                "unsupported scheme",
            ),
        ];
        for (name, opts, needle) in cases {
            let err = opts
                .resolve()
                .err()
                .unwrap_or_else(|| panic!("{name}: accepted"));
            assert!(err.0.contains(needle), "{name}: want {needle:?} in {err}");
            assert!(!err.0.contains('\n'), "{name}: one line: {err}");
        }
    }

    #[test]
    fn resolved_options_carry_every_setting_to_the_engine() {
        let opts = with(url(), |o| {
            o.pace.rate_rps = Some(250.0);
            o.pace.arrival = Some(Arrival::Poisson);
            o.connections = 4;
            o.pace.threads = Some(2);
            o.send.body = Body::Size(3);
            o.send.method = "post".into();
            o.window.stop = StopAt::Requests(100);
            o.window.warmup = Duration::from_secs(1);
            o.pace.seed = 7;
        });
        let spec = opts.resolve().unwrap();
        assert_eq!(
            spec.offer,
            Offer::Open {
                rate_rps: 250.0,
                arrival: Arrival::Poisson
            }
        );
        assert_eq!((spec.connections, spec.threads, spec.seed), (4, 2, 7));
        assert_eq!(spec.stop, StopAt::Requests(100));
        assert_eq!(spec.request.method, "POST");
        assert_eq!(spec.request.body_len, 3);
        assert_eq!(spec.targets.requests.len(), 1);
    }

    #[test]
    fn the_last_request_asks_the_server_to_close() {
        let last = |opts: LoadOptions| {
            let spec = opts.resolve().unwrap();
            let target = &spec.targets.requests[0];
            (
                spec.conn.close_first,
                target
                    .closing
                    .as_ref()
                    .map(|b| String::from_utf8_lossy(b).into_owned()),
            )
        };
        let churn = |n| with(url(), |o| o.connect.requests_per_connection = Some(n));
        let (who, closing) = last(churn(3));
        assert_eq!(who, CloseFirst::Server, "the default");
        let closing = closing.expect("a closing variant");
        assert!(closing.ends_with("Connection: close\r\n\r\n"), "{closing}");
        // Not asked for: no churn, the client closing first, or a Connection of the user's.
        assert_eq!(last(url()).1, None, "connections kept open");
        let client = with(churn(3), |o| {
            o.connect.close_first = Some(CloseFirst::Client)
        });
        assert_eq!(last(client), (CloseFirst::Client, None));
        let own = with(churn(3), |o| {
            o.send.headers = vec![("connection".into(), "keep-alive".into())]
        });
        assert_eq!(last(own).1, None, "the user's Connection header stands");
        // HTTP/2: the client closes.
        let h2 = with(churn(3), |o| o.connect.protocol = Protocol::Http2);
        assert_eq!(last(h2), (CloseFirst::Client, None));
    }

    #[test]
    fn source_addresses_reach_the_engine() {
        let opts = with(url(), |o| {
            o.connect.source_addresses = vec!["127.0.0.1,127.0.0.2".into(), "127.0.0.2".into()]
        });
        let spec = opts.resolve().unwrap();
        let want: Vec<std::net::IpAddr> =
            vec!["127.0.0.1".parse().unwrap(), "127.0.0.2".parse().unwrap()];
        assert_eq!(spec.conn.source_addrs, want);
    }

    #[test]
    fn options_travel_as_json_and_come_back_equal() {
        let opts = with(url(), |o| {
            o.pace.rate_rps = Some(1000.0);
            o.send.connect_to = vec!["::127.0.0.1:8443".parse().unwrap()];
            o.send.headers = vec![("X-A".into(), "1".into())];
        });
        let text = serde_json::to_string(&opts).unwrap();
        assert_eq!(serde_json::from_str::<LoadOptions>(&text).unwrap(), opts);
    }

    #[test]
    fn the_json_has_every_option_at_the_top() {
        let v = serde_json::to_value(url()).unwrap();
        let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        keys.sort_unstable();
        let mut want = vec![
            "source",
            "target_order",
            "connect_to",
            "method",
            "headers",
            "body",
            "grpc_payload",
            "grpc_proto",
            "trace_every",
            "protocol",
            "streams",
            "tls",
            "quic",
            "requests_per_connection",
            "close_first",
            "source_addresses",
            "connection_rate",
            "connections",
            "in_flight",
            "rate_rps",
            "arrival",
            "idle",
            "slack",
            "send_early",
            "threads",
            "seed",
            "stop",
            "warmup",
            "timeout",
        ];
        want.sort_unstable();
        assert_eq!(keys, want);
    }

    #[test]
    fn self_contained_options_need_none_of_the_files() {
        let dir =
            std::env::temp_dir().join(format!("meshbench-self-contained-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("order.json"), "{\"id\": 7}").unwrap();
        std::fs::write(dir.join("common.bin"), "common body").unwrap();
        std::fs::write(
            dir.join("targets.txt"),
            "POST http://127.0.0.1:9/orders\nContent-Type: application/json\n@order.json\n\nGET http://127.0.0.1:9/w-{1..3}\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("ping.proto"),
            "syntax = \"proto3\";\npackage fgrpc;\nmessage PingMessage { string payload = 3; }\nservice PingServer { rpc Ping (PingMessage) returns (PingMessage) {} }\n",
        )
        .unwrap();
        let from_file = with(
            LoadOptions::new(TargetSource::File(dir.join("targets.txt"))),
            |o| o.send.body = Body::File(dir.join("common.bin")),
        );
        let grpc = with(
            LoadOptions::new(TargetSource::Url(
                "http://127.0.0.1:9/fgrpc.PingServer/Ping".into(),
            )),
            |o| {
                o.connect.protocol = Protocol::Grpc;
                o.send.grpc_proto = Some(ProtoSource::File(dir.join("ping.proto")));
                o.send.body = Body::Bytes(br#"{"payload": "hi"}"#.to_vec());
            },
        );
        let requests = |o: &LoadOptions| format!("{:?}", o.resolve().unwrap().targets.requests);
        let before = [requests(&from_file), requests(&grpc)];
        let shipped = [
            from_file.self_contained().unwrap(),
            grpc.self_contained().unwrap(),
        ];
        std::fs::remove_dir_all(&dir).unwrap();
        for (o, want) in shipped.iter().zip(&before) {
            // As an agent gets them: through JSON, on a machine without the files.
            let text = serde_json::to_string(o).unwrap();
            let o: LoadOptions = serde_json::from_str(&text).unwrap();
            assert!(!text.contains("common.bin") && !text.contains("order.json"));
            assert_eq!(&requests(&o), want);
        }
        assert!(from_file.resolve().is_err(), "the files are gone");
    }
}
