//! Per-worker measurements in constant memory, merged by adding (STYLE.md #4).
//!
//! Each worker owns one [`Recorder`]: six HdrHistograms in microseconds (latency from the
//! intended send time, service time from the actual send, schedule lag, the worker's wake-up
//! error, and in [`ConnRecorder`] TCP connect and TLS handshake times), counts per status code
//! and per error kind ([`Counts`]), failure messages (bounded), sends (late, queued), bytes and
//! per-host counts. Nothing grows with the number of requests. Once a second the worker also
//! hands over an [`Interval`] (the same counts, the latency histogram and a coarse lag
//! histogram) for the timeline and the live stream.

use std::collections::BTreeMap;
use std::ops::AddAssign;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use meshbench_net::grpc::Code;
use meshbench_results::attribution::Sent;
use meshbench_results::histogram::{coarse_form, latency_form};
pub(crate) use meshbench_results::histogram::{new_histogram, new_interval_histogram};

/// Kinds of failed request, counted separately.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The TCP connection could not be established (refused, unreachable).
    Connect,
    /// No complete response within `--timeout` (or the request waited longer than that for a
    /// free connection in an open loop, sent or not when sending stopped). Includes a TCP
    /// connect or TLS handshake that never finished (the message says which).
    Timeout,
    /// The peer reset or closed the connection before the response was complete.
    Reset,
    /// The peer answered bytes that are not valid HTTP/1.1 (a bad head or chunk, bytes after
    /// the response), or a head over 64 KiB.
    Protocol,
    /// Any other socket error.
    Other,
    /// The TLS handshake failed: unknown CA, expired certificate, name mismatch, ALPN refused,
    /// client certificate rejected (the message says which).
    Tls,
    /// The HTTP/2 server sent GOAWAY before this request's stream was processed.
    GoAway,
    /// The HTTP/2 server reset this request's stream (RST_STREAM).
    StreamReset,
    /// No local port was free to connect from (`EADDRNOTAVAIL`, or `EADDRINUSE` at bind or
    /// connect): the ephemeral range towards the target is taken, most often by the TIME_WAIT
    /// sockets of connections the client closed first.
    PortsExhausted,
}

/// Distinct error messages kept per worker; more are folded into the counts only.
const MAX_MESSAGES: usize = 32;

/// Hosts counted one by one; requests to hosts beyond this index are only in the totals. Memory
/// is bounded by hosts (16 bytes each), never by URLs.
pub const MAX_TRACKED_HOSTS: usize = 10_000;

impl ErrorKind {
    pub const ALL: [ErrorKind; 9] = [
        ErrorKind::Connect,
        ErrorKind::Timeout,
        ErrorKind::Reset,
        ErrorKind::Protocol,
        ErrorKind::Other,
        ErrorKind::Tls,
        ErrorKind::GoAway,
        ErrorKind::StreamReset,
        ErrorKind::PortsExhausted,
    ];

    /// The kind [`ErrorKind::name`] names.
    pub fn from_name(name: &str) -> Option<ErrorKind> {
        ErrorKind::ALL.into_iter().find(|k| k.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Connect => "connect",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Reset => "reset",
            ErrorKind::Protocol => "protocol",
            ErrorKind::Other => "other",
            ErrorKind::Tls => "tls",
            ErrorKind::GoAway => "goaway",
            ErrorKind::StreamReset => "stream_reset",
            ErrorKind::PortsExhausted => "ports_exhausted",
        }
    }

    /// Classifies a failure to open a connection: the socket, its bind or `connect`, at once
    /// or as the socket's pending error.
    pub fn of_connect(err: &std::io::Error) -> ErrorKind {
        use std::io::ErrorKind as Io;
        match err.kind() {
            Io::AddrNotAvailable | Io::AddrInUse => ErrorKind::PortsExhausted,
            _ if err.raw_os_error().is_some() => ErrorKind::Connect,
            _ => ErrorKind::Other,
        }
    }

    /// Classifies a socket error met while a request was in flight.
    pub fn of_io(err: &std::io::Error) -> ErrorKind {
        use std::io::ErrorKind as Io;
        match err.kind() {
            Io::ConnectionReset | Io::BrokenPipe | Io::ConnectionAborted => ErrorKind::Reset,
            Io::TimedOut => ErrorKind::Timeout,
            Io::ConnectionRefused | Io::NetworkUnreachable | Io::HostUnreachable => {
                ErrorKind::Connect
            }
            _ => ErrorKind::Other,
        }
    }
}

/// How a response ended: its HTTP status, or, for a gRPC call, its gRPC status (the HTTP
/// status of a gRPC call is nearly always 200 and says nothing about the call).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Http(u16),
    Grpc(Code),
}

impl Status {
    /// A failed request: an HTTP status of 400 or more (or out of range), a gRPC code not OK.
    pub fn failed(self) -> bool {
        match self {
            Status::Http(s) => !(100..400).contains(&s),
            Status::Grpc(c) => !c.is_ok(),
        }
    }
}

impl From<u16> for Status {
    fn from(status: u16) -> Status {
        Status::Http(status)
    }
}

/// Finished requests counted by status code and by kind of failure: what the result and every
/// second of the live stream count alike, merged by adding. In a message it is two sparse maps
/// (code to count, error kind to count).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "CountsForm", try_from = "CountsForm")]
pub struct Counts {
    /// Responses per status code; index = code (codes outside 100..=599 land in 0).
    status: Vec<u64>,
    /// gRPC calls per gRPC status code (index = code).
    grpc: [u64; Code::COUNT],
    errors: [u64; ErrorKind::ALL.len()],
}

impl Default for Counts {
    fn default() -> Self {
        Self {
            status: vec![0; 600],
            grpc: [0; Code::COUNT],
            errors: [0; ErrorKind::ALL.len()],
        }
    }
}

impl Counts {
    /// A complete response with this status.
    #[inline]
    pub fn response(&mut self, status: impl Into<Status>) {
        match status.into() {
            Status::Http(status) => {
                let idx = if (100..600).contains(&status) {
                    status as usize
                } else {
                    0
                };
                self.status[idx] += 1;
            }
            Status::Grpc(code) => self.grpc[code.number() as usize] += 1,
        }
    }

    /// gRPC calls per gRPC status, by code; only codes seen.
    pub fn grpc_codes(&self) -> impl Iterator<Item = (Code, u64)> + '_ {
        self.grpc
            .iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .map(|(code, &n)| (Code::new(code as u32), n))
    }

    /// A failed request.
    #[inline]
    pub fn error(&mut self, kind: ErrorKind) {
        self.errors[kind as usize] += 1;
    }

    /// Counts per status code, ascending; code 0 collects out-of-range codes.
    pub fn status_codes(&self) -> impl Iterator<Item = (u16, u64)> + '_ {
        self.status
            .iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .map(|(code, &n)| (code as u16, n))
    }

    pub fn errors(&self, kind: ErrorKind) -> u64 {
        self.errors[kind as usize]
    }

    /// Responses that count as failed requests: an HTTP status of 400 or more, a gRPC status
    /// other than OK.
    pub fn failed_responses(&self) -> u64 {
        self.http_failures() + self.grpc_failures()
    }

    /// Responses with an HTTP status of 400 or more (or out of range).
    pub fn http_failures(&self) -> u64 {
        self.status[400..].iter().sum::<u64>() + self.status[0]
    }

    /// gRPC calls that ended with a status other than OK.
    pub fn grpc_failures(&self) -> u64 {
        self.grpc[1..].iter().sum()
    }

    pub fn responses(&self) -> u64 {
        self.status.iter().sum::<u64>() + self.grpc.iter().sum::<u64>()
    }

    pub fn transport_errors(&self) -> u64 {
        self.errors.iter().sum()
    }

    /// Finished requests: every response plus every failure.
    pub fn total(&self) -> u64 {
        self.responses() + self.transport_errors()
    }

    /// Responses with a status below 400 or a gRPC status of OK.
    pub fn ok(&self) -> u64 {
        self.responses() - self.failed_responses()
    }

    /// Failed requests: transport failures and responses of 400 or more.
    pub fn failed(&self) -> u64 {
        self.total() - self.ok()
    }
}

/// [`Counts`] as sent: only what is not zero (codes as text, as JSON keys are).
#[derive(Serialize, Deserialize)]
struct CountsForm {
    status: BTreeMap<String, u64>,
    /// gRPC codes by name (`OK`, `UNAVAILABLE`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    grpc: BTreeMap<String, u64>,
    errors: BTreeMap<String, u64>,
}

impl From<Counts> for CountsForm {
    fn from(c: Counts) -> Self {
        CountsForm {
            status: c
                .status_codes()
                .map(|(code, n)| (code.to_string(), n))
                .collect(),
            grpc: c
                .grpc_codes()
                .map(|(code, n)| (code.name().to_string(), n))
                .collect(),
            errors: ErrorKind::ALL
                .into_iter()
                .filter(|&k| c.errors(k) > 0)
                .map(|k| (k.name().to_string(), c.errors(k)))
                .collect(),
        }
    }
}

/// A count in a peer's message that the engine does not keep (`Counts` read back from JSON).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CountsError {
    #[error("status code {0} is not one the engine counts")]
    Status(String),
    #[error("unknown gRPC status '{0}'")]
    Grpc(String),
    #[error("unknown kind of error '{0}'")]
    Kind(String),
}

impl TryFrom<CountsForm> for Counts {
    type Error = CountsError;

    fn try_from(f: CountsForm) -> Result<Self, CountsError> {
        let mut c = Counts::default();
        for (code, n) in f.status {
            let slot = code
                .parse::<usize>()
                .ok()
                .and_then(|i| c.status.get_mut(i))
                .ok_or(CountsError::Status(code))?;
            *slot = n;
        }
        for (name, n) in f.grpc {
            let code = Code::from_name(&name).ok_or(CountsError::Grpc(name))?;
            c.grpc[code.number() as usize] = n;
        }
        for (name, n) in f.errors {
            let kind = ErrorKind::from_name(&name).ok_or(CountsError::Kind(name))?;
            c.errors[kind as usize] = n;
        }
        Ok(c)
    }
}

impl AddAssign<&Counts> for Counts {
    fn add_assign(&mut self, o: &Counts) {
        for (a, b) in self.status.iter_mut().zip(&o.status) {
            *a += b;
        }
        for (a, b) in self.grpc.iter_mut().zip(&o.grpc) {
            *a += b;
        }
        for (a, b) in self.errors.iter_mut().zip(&o.errors) {
            *a += b;
        }
    }
}

/// What one worker measured in one second of the measured window (or, merged, every worker;
/// or, sent by an agent, every worker of that agent).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Interval {
    /// Second of the measured window this covers (0 = the first).
    pub second: u32,
    pub counts: Counts,
    /// Requests put on the wire.
    pub sends: u64,
    /// Connections opened (attempted): past the first second, those the target closed (or
    /// failed) and the load opened again.
    #[serde(default)]
    pub opened: u64,
    /// Connections that failed with requests on them (reset, closed mid-answer, timed out):
    /// each of those requests failed with it, so errors over these are the requests in flight
    /// on a connection when it failed.
    #[serde(default)]
    pub failed_connections: u64,
    /// Latency as the result counts it, 3 significant digits like the result's own, so that
    /// what the live stream exports reads the same percentiles.
    #[serde(with = "latency_form")]
    pub latency: Histogram<u64>,
    /// Schedule lag of the sends, 2 significant digits.
    #[serde(with = "coarse_form")]
    pub lag: Histogram<u64>,
}

impl Interval {
    pub fn new(second: u32) -> Self {
        Self {
            second,
            counts: Counts::default(),
            sends: 0,
            opened: 0,
            failed_connections: 0,
            latency: new_histogram(),
            lag: new_interval_histogram(),
        }
    }
}

impl AddAssign<&Interval> for Interval {
    fn add_assign(&mut self, o: &Interval) {
        self.counts += &o.counts;
        self.sends += o.sends;
        self.opened += o.opened;
        self.failed_connections += o.failed_connections;
        // The bounds are equal by construction, so adding cannot fail.
        self.latency.add(&o.latency).expect("same histogram bounds");
        self.lag.add(&o.lag).expect("same histogram bounds");
    }
}

/// Everything one worker measured; merge several with `+=` (an agent sends its merged one).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Recorder {
    /// Intended send to complete response (coordinated-omission corrected in an open loop).
    #[serde(with = "latency_form")]
    pub latency: Histogram<u64>,
    /// Actual send to complete response.
    #[serde(with = "latency_form")]
    pub service: Histogram<u64>,
    /// Intended to actual send time (open loop).
    #[serde(with = "latency_form")]
    pub lag: Histogram<u64>,
    pub counts: Counts,
    /// Failures counted by "kind: message" (TLS reasons, GOAWAY and reset codes), bounded.
    pub messages: BTreeMap<String, u64>,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// Requests put on the wire.
    pub sends: u64,
    /// Sends more than 1 ms late although a connection was free: the generator's own delay.
    pub late_sends: u64,
    /// Sends that waited for a free connection (the target is slower than the asked rate).
    pub queued_sends: u64,
    /// Requests sent but neither answered nor failed when the run ended.
    pub unfinished: u64,
    /// How late the worker's sleeps ended (µs): the machine's wake-up error.
    #[serde(with = "latency_form")]
    pub wake_error: Histogram<u64>,
    /// Time spent spinning before sends on purpose (the idle strategy's margin), ns.
    pub spin_ns: u64,
    /// Measured sends each wake-up that sent carried (open loop).
    #[serde(with = "latency_form", default = "new_histogram")]
    pub sends_per_wake: Histogram<u64>,
    /// The most measured sends one worker made within one millisecond of the run clock (the
    /// largest of the workers' once merged).
    #[serde(default)]
    pub largest_burst_per_ms: u64,
    pub conns: ConnRecorder,
    /// Per host index: [finished requests, failed ones (transport or status >= 400)].
    pub per_host: Vec<[u64; 2]>,
    /// The measured requests tagged for attribution that were answered (at most
    /// [`MAX_TRACES`] per worker); empty when attribution is off.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub traces: Vec<Sent>,
}

/// The most tagged requests one worker keeps (40 bytes each).
pub const MAX_TRACES: usize = 100_000;

/// Connection set-up during the measured window: how many, how long, how many resumed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConnRecorder {
    /// TCP connect, from `connect()` to the socket being writable (none over QUIC).
    #[serde(with = "latency_form")]
    pub connect: Histogram<u64>,
    /// TLS handshake, from TCP connected to the handshake done (QUIC: from the first packet).
    #[serde(with = "latency_form")]
    pub handshake: Histogram<u64>,
    /// Connections opened (attempted).
    pub opened: u64,
    /// TLS handshakes completed, and how many of them resumed a session.
    pub handshakes: u64,
    pub resumed: u64,
    /// QUIC handshakes where the server accepted the requests sent as 0-RTT early data.
    #[serde(default)]
    pub zero_rtt: u64,
    /// QUIC connections moved to a new local port (`--h3-rebind-every`), carrying on.
    #[serde(default)]
    pub migrations: u64,
    /// Connections the generator closed first, leaving the TIME_WAIT here: ended by
    /// `--requests-per-connection` without asking the server to close (HTTP/2, `--close-first
    /// client`, a `Connection` header of the user's), too many failures in a row on one HTTP/2
    /// connection, or a server that did not close in time.
    pub closed_by_client: u64,
    /// Connections the server closed first (the generator closed its end after the server's):
    /// after a response that ended the connection (the generator asked with `Connection: close`
    /// on its last request, or the server said so itself), or while idle.
    pub closed_by_server: u64,
}

impl Default for ConnRecorder {
    fn default() -> Self {
        Self {
            connect: new_histogram(),
            handshake: new_histogram(),
            opened: 0,
            handshakes: 0,
            resumed: 0,
            zero_rtt: 0,
            migrations: 0,
            closed_by_client: 0,
            closed_by_server: 0,
        }
    }
}

impl Default for Recorder {
    fn default() -> Self {
        Self::new()
    }
}

impl Recorder {
    pub fn new() -> Self {
        Self {
            latency: new_histogram(),
            service: new_histogram(),
            lag: new_histogram(),
            counts: Counts::default(),
            messages: BTreeMap::new(),
            bytes_sent: 0,
            bytes_received: 0,
            sends: 0,
            late_sends: 0,
            queued_sends: 0,
            unfinished: 0,
            wake_error: new_histogram(),
            spin_ns: 0,
            sends_per_wake: new_histogram(),
            largest_burst_per_ms: 0,
            conns: ConnRecorder::default(),
            per_host: Vec::new(),
            traces: Vec::new(),
        }
    }

    /// Adds what one second of the live stream holds (counts, sends, latency, lag): all that
    /// is known of a part whose own recorder never came (an agent lost mid-step).
    pub fn add_second(&mut self, iv: &Interval) {
        self.counts += &iv.counts;
        self.sends += iv.sends;
        self.conns.opened += iv.opened;
        // The engine's own bounds, by construction (a message's are re-homed when decoded).
        self.latency
            .add(&iv.latency)
            .expect("same histogram bounds");
        self.lag
            .add(&iv.lag)
            .expect("lag within the histogram's bounds");
    }

    /// A finished request to host `host` (index into the target list's hosts).
    #[inline]
    pub fn host(&mut self, host: u32, failed: bool) {
        let h = host as usize;
        if h >= MAX_TRACKED_HOSTS {
            return;
        }
        if h >= self.per_host.len() {
            self.per_host.resize(h + 1, [0, 0]);
        }
        let counts = &mut self.per_host[h];
        counts[0] += 1;
        counts[1] += failed as u64;
    }

    /// A complete response: status and times in nanoseconds.
    #[inline]
    pub fn response(&mut self, status: impl Into<Status>, latency_ns: u64, service_ns: u64) {
        self.counts.response(status);
        self.latency.saturating_record(latency_ns / 1000);
        self.service.saturating_record(service_ns / 1000);
    }

    /// A failed request.
    #[inline]
    pub fn error(&mut self, kind: ErrorKind) {
        self.counts.error(kind);
    }

    /// A failed request with a message worth keeping (allocates: error path only).
    pub fn error_with(&mut self, kind: ErrorKind, message: &str) {
        self.error(kind);
        add_message(&mut self.messages, format!("{}: {message}", kind.name()), 1);
    }

    /// A sleep that ended `error_ns` after it was asked to.
    #[inline]
    pub fn wake_error(&mut self, error_ns: u64) {
        self.wake_error.saturating_record(error_ns / 1000);
    }

    /// A wake-up that put `n` measured requests on the wire.
    #[inline]
    pub fn sends_per_wake(&mut self, n: u64) {
        self.sends_per_wake.saturating_record(n);
    }

    /// A request put on the wire `lag_ns` after its intended time.
    #[inline]
    pub fn send(&mut self, lag_ns: u64, generator_late: bool, queued: bool) {
        self.sends += 1;
        self.lag.saturating_record(lag_ns / 1000);
        self.late_sends += generator_late as u64;
        self.queued_sends += queued as u64;
    }
}

fn add_message(messages: &mut BTreeMap<String, u64>, key: String, n: u64) {
    if let Some(count) = messages.get_mut(&key) {
        *count += n;
    } else if messages.len() < MAX_MESSAGES {
        messages.insert(key, n);
    }
}

impl AddAssign<&Recorder> for Recorder {
    fn add_assign(&mut self, o: &Recorder) {
        // The bounds are equal by construction, so adding cannot fail.
        self.latency.add(&o.latency).expect("same histogram bounds");
        self.service.add(&o.service).expect("same histogram bounds");
        self.lag.add(&o.lag).expect("same histogram bounds");
        self.wake_error
            .add(&o.wake_error)
            .expect("same histogram bounds");
        self.spin_ns += o.spin_ns;
        self.sends_per_wake
            .add(&o.sends_per_wake)
            .expect("same histogram bounds");
        self.traces.extend_from_slice(&o.traces);
        self.largest_burst_per_ms = self.largest_burst_per_ms.max(o.largest_burst_per_ms);
        self.counts += &o.counts;
        self.bytes_sent += o.bytes_sent;
        self.bytes_received += o.bytes_received;
        self.sends += o.sends;
        self.late_sends += o.late_sends;
        self.queued_sends += o.queued_sends;
        self.unfinished += o.unfinished;
        for (key, &n) in &o.messages {
            add_message(&mut self.messages, key.clone(), n);
        }
        if self.per_host.len() < o.per_host.len() {
            self.per_host.resize(o.per_host.len(), [0, 0]);
        }
        for (a, b) in self.per_host.iter_mut().zip(&o.per_host) {
            a[0] += b[0];
            a[1] += b[1];
        }
        let (a, b) = (&mut self.conns, &o.conns);
        a.connect.add(&b.connect).expect("same histogram bounds");
        a.handshake
            .add(&b.handshake)
            .expect("same histogram bounds");
        a.opened += b.opened;
        a.handshakes += b.handshakes;
        a.resumed += b.resumed;
        a.zero_rtt += b.zero_rtt;
        a.migrations += b.migrations;
        a.closed_by_client += b.closed_by_client;
        a.closed_by_server += b.closed_by_server;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_table() {
        // (what happens, total, ok, errors by kind [connect, timeout, reset, protocol, other])
        type Step = fn(&mut Recorder);
        type Case = (&'static str, &'static [Step], u64, u64, [u64; 9]);
        let cases: &[Case] = &[
            ("nothing", &[], 0, 0, [0; 9]),
            ("one 200", &[|r| r.response(200, 1000, 900)], 1, 1, [0; 9]),
            (
                "a 503 is a failed request",
                &[|r| r.response(503, 1000, 900)],
                1,
                0,
                [0; 9],
            ),
            (
                "a 302 is fine",
                &[|r| r.response(302, 1000, 900)],
                1,
                1,
                [0; 9],
            ),
            (
                "odd status",
                &[|r| r.response(999, 1000, 900)],
                1,
                0,
                [0; 9],
            ),
            (
                "mixed",
                &[
                    |r| r.response(200, 1, 1),
                    |r| r.error(ErrorKind::Reset),
                    |r| r.error(ErrorKind::Connect),
                ],
                3,
                1,
                [1, 0, 1, 0, 0, 0, 0, 0, 0],
            ),
            (
                "tls, goaway and stream resets are failures of their own",
                &[
                    |r| r.error_with(ErrorKind::Tls, "certificate expired"),
                    |r| r.error_with(ErrorKind::GoAway, "GOAWAY (NO_ERROR)"),
                    |r| r.error_with(ErrorKind::StreamReset, "RST_STREAM (REFUSED_STREAM)"),
                ],
                3,
                0,
                [0, 0, 0, 0, 0, 1, 1, 1, 0],
            ),
        ];
        for (name, steps, total, ok, errs) in cases {
            let mut r = Recorder::new();
            steps.iter().for_each(|s| s(&mut r));
            assert_eq!(r.counts.total(), *total, "{name}: total");
            assert_eq!(r.counts.ok(), *ok, "{name}: ok");
            let got: Vec<u64> = ErrorKind::ALL.iter().map(|k| r.counts.errors(*k)).collect();
            assert_eq!(got, errs.to_vec(), "{name}: errors");
            assert_eq!(
                r.counts.ok() + r.counts.failed_responses() + r.counts.transport_errors(),
                r.counts.total(),
                "{name}: sum"
            );
        }
    }

    #[test]
    fn error_messages_are_counted_and_bounded() {
        let mut r = Recorder::new();
        r.error_with(ErrorKind::Tls, "certificate expired");
        r.error_with(ErrorKind::Tls, "certificate expired");
        for i in 0..100 {
            r.error_with(ErrorKind::StreamReset, &format!("code {i}"));
        }
        assert_eq!(r.messages["tls: certificate expired"], 2);
        assert_eq!(r.messages.len(), MAX_MESSAGES);
        assert_eq!(r.counts.errors(ErrorKind::StreamReset), 100);
        let mut sum = Recorder::new();
        sum += &r;
        sum += &r;
        assert_eq!(sum.messages["tls: certificate expired"], 4);
    }

    #[test]
    fn host_counts_merge_and_stay_bounded() {
        let mut a = Recorder::new();
        a.host(0, false);
        a.host(2, true);
        a.host(MAX_TRACKED_HOSTS as u32 + 5, false);
        let mut b = Recorder::new();
        b.host(4, false);
        a += &b;
        assert_eq!(a.per_host, vec![[1, 0], [0, 0], [1, 1], [0, 0], [1, 0]]);
        assert!(a.per_host.len() <= MAX_TRACKED_HOSTS);
    }

    #[test]
    fn merging_equals_recording_in_one_place() {
        let mut a = Recorder::new();
        let mut b = Recorder::new();
        let mut both = Recorder::new();
        for i in 1..=10_000u64 {
            let (r, us) = if i % 3 == 0 {
                (&mut a, i)
            } else {
                (&mut b, i * 7)
            };
            r.response(200, us * 1000, us * 500);
            both.response(200, us * 1000, us * 500);
        }
        a.error(ErrorKind::Timeout);
        both.error(ErrorKind::Timeout);
        a.bytes_sent = 10;
        b.bytes_sent = 5;
        both.bytes_sent = 15;
        let mut merged = Recorder::new();
        merged += &a;
        merged += &b;
        assert_eq!(merged.latency, both.latency);
        assert_eq!(merged.service, both.service);
        assert_eq!(merged.counts.total(), both.counts.total());
        assert_eq!(merged.bytes_sent, 15);
        for q in [0.5, 0.9, 0.99, 0.999] {
            assert_eq!(
                merged.latency.value_at_quantile(q),
                both.latency.value_at_quantile(q)
            );
        }
    }

    #[test]
    fn histogram_bounds_and_precision() {
        let mut r = Recorder::new();
        r.response(200, 0, 0); // below 1 µs
        r.response(200, 120_000_000_000, 1); // 120 s, above the top: clamped, not lost
        r.response(200, 1_234_567_000, 1); // 1.234567 s
        assert_eq!(r.latency.len(), 3);
        assert_eq!(r.latency.min(), 0);
        assert!(
            r.latency.max() >= meshbench_results::histogram::HIST_MAX_US
                && r.latency.max() <= meshbench_results::histogram::HIST_MAX_US * 1001 / 1000
        );
        let v = r.latency.value_at_quantile(0.5);
        assert!(
            (v as f64 - 1_234_567.0).abs() / 1_234_567.0 < 0.001,
            "3 significant digits: {v}"
        );
    }

    #[test]
    fn memory_does_not_grow_with_requests() {
        let mut r = Recorder::new();
        let before = r.latency.distinct_values();
        for i in 0..1_000_000u64 {
            r.response(200, (i % 50_000) * 1000 + 1000, 1000);
        }
        assert_eq!(
            r.latency.distinct_values(),
            before,
            "histogram storage is fixed up front"
        );
        assert_eq!(r.counts.status.len(), 600);
    }

    #[test]
    fn io_errors_are_classified() {
        use std::io::Error;
        assert_eq!(
            ErrorKind::of_io(&Error::from_raw_os_error(104)),
            ErrorKind::Reset
        );
        assert_eq!(
            ErrorKind::of_io(&Error::from_raw_os_error(32)),
            ErrorKind::Reset
        );
        assert_eq!(
            ErrorKind::of_io(&Error::from_raw_os_error(111)),
            ErrorKind::Connect
        );
        assert_eq!(
            ErrorKind::of_io(&Error::from_raw_os_error(110)),
            ErrorKind::Timeout
        );
        assert_eq!(ErrorKind::of_io(&Error::other("x")), ErrorKind::Other);
    }

    #[test]
    fn connect_errors_are_classified() {
        use std::io::Error;
        // (errno, kind)
        let cases = [
            (99, ErrorKind::PortsExhausted), // EADDRNOTAVAIL
            (98, ErrorKind::PortsExhausted), // EADDRINUSE
            (111, ErrorKind::Connect),       // ECONNREFUSED
            (113, ErrorKind::Connect),       // EHOSTUNREACH
            (24, ErrorKind::Connect),        // EMFILE
        ];
        for (errno, kind) in cases {
            assert_eq!(
                ErrorKind::of_connect(&Error::from_raw_os_error(errno)),
                kind,
                "errno {errno}"
            );
        }
        assert_eq!(ErrorKind::of_connect(&Error::other("x")), ErrorKind::Other);
        let mut r = Recorder::new();
        r.error(ErrorKind::PortsExhausted);
        let mut sum = Recorder::new();
        sum += &r;
        assert_eq!(sum.counts.errors(ErrorKind::PortsExhausted), 1);
        assert_eq!(ErrorKind::PortsExhausted.name(), "ports_exhausted");
    }
}
