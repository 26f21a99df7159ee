//! The result of a run: the `meshbench/result/v1` JSON document (described by
//! `docs/result.schema.json`), `RunResult::build` that fills it from the merged recorders, and
//! the helpers that summarise histograms (their transport form is [`crate::histogram`]'s).

use std::collections::BTreeMap;
use std::time::SystemTime;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::check::{self, Failure, Figures, SelfCheck};
pub use crate::histogram::{decode_histogram, encode_histogram, DecodeError};
use crate::idle::IdleStrategy;
use crate::pacer::Arrival;
use crate::recorder::{ErrorKind, Recorder};
use crate::spec::{LoadSpec, Mode, Order, StopAt};

/// The value of the `schema` key.
pub const SCHEMA: &str = "meshbench/result/v1";

/// One run, as written by `--json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunResult {
    pub schema: String,
    pub meshbench_version: String,
    pub url: String,
    pub settings: Settings,
    /// Wall-clock start of the measured window, RFC 3339 UTC.
    pub start_time: String,
    /// Length of the measured window (after the warm-up, until the last response).
    pub duration_secs: f64,
    /// True when the run was interrupted (Ctrl-C, SIGTERM) before its end.
    pub partial: bool,
    pub requests: Requests,
    /// Finished requests per second of the measured window.
    pub throughput_rps: f64,
    /// Responses per HTTP status code.
    pub status_codes: BTreeMap<String, u64>,
    /// gRPC calls per gRPC status (`OK`, `UNAVAILABLE`, ...): a gRPC run counts these, not
    /// HTTP statuses.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub grpc_status: BTreeMap<String, u64>,
    /// Failed requests by kind; their sum is `requests.errors`.
    pub errors: Errors,
    /// From the intended send time to the complete response (corrected for coordinated
    /// omission in an open loop; equal to the service time in a closed loop).
    pub latency_us: Stats,
    /// From the actual send to the complete response.
    pub service_time_us: Stats,
    /// From the intended to the actual send time (open loop only).
    pub schedule_lag_us: Option<Stats>,
    pub bytes: Bytes,
    /// Connection set-up during the measured window.
    pub connections: Connections,
    /// Finished requests per host of the target list (the first 1,000 hosts).
    pub hosts: Vec<HostCount>,
    pub timeline: Vec<TimelinePoint>,
    pub histogram: Histograms,
    pub generator: Generator,
    /// Driven by several agents: how they started together and what each did (absent for a
    /// run of one process).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents: Option<Agents>,
}

/// A run several agents drove, each a segment of one plan; the rest of the result is their
/// parts merged exactly.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Agents {
    /// Spread of the instants the agents' schedules began (each one's start plus how late its
    /// first send went out), on the coordinator's clock, µs.
    pub start_skew_us: f64,
    /// The largest uncertainty of a measured clock offset (half the best round trip), µs.
    pub clock_error_us: f64,
    pub agents: Vec<AgentPart>,
}

/// One agent's part of a run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AgentPart {
    pub name: String,
    /// Where the coordinator reached it (or it came from).
    pub address: String,
    /// Its segment: arrivals `segment`, `segment + of`, ... of the plan.
    pub segment: u64,
    pub of: u64,
    pub connections: usize,
    pub threads: usize,
    pub requests: u64,
    pub errors: u64,
    pub p50_us: u64,
    pub p99_us: u64,
    /// CPU seconds it spent (0 when it was lost before its report).
    pub cpu_secs: f64,
    /// Its clock minus the coordinator's, µs, and the round trip it was measured over.
    pub clock_offset_us: f64,
    pub round_trip_us: f64,
    /// When its schedule began after the earliest agent's, µs (`None`: it sent nothing).
    pub start_us: Option<f64>,
    /// Lost during the step (died, cut off, silent): when and why. Only the seconds it
    /// reported before are in the result.
    pub lost: Option<Lost>,
}

/// When and why an agent was lost.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Lost {
    /// Seconds after the step's start.
    pub after_secs: f64,
    pub reason: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Settings {
    /// `closed` or `open`.
    pub mode: String,
    pub connections: usize,
    /// Closed loop: requests in flight at most (`--concurrency`), when fewer than the slots.
    #[serde(default)]
    pub concurrency: Option<usize>,
    pub threads: usize,
    pub rate_rps: Option<f64>,
    pub arrival: Option<String>,
    pub duration_secs: Option<f64>,
    pub requests: Option<u64>,
    pub warmup_secs: f64,
    pub timeout_secs: f64,
    pub method: String,
    pub headers: Vec<[String; 2]>,
    pub body_bytes: usize,
    pub seed: u64,
    /// `http/1.1` or `h2`.
    pub protocol: String,
    pub tls: bool,
    /// Concurrent streams per connection (1 for HTTP/1.1).
    pub streams: usize,
    /// Distinct requests in the target list, and the hosts they go to.
    pub targets: usize,
    pub hosts: usize,
    /// `round-robin` or `random`.
    pub target_order: String,
    pub requests_per_connection: Option<u64>,
    /// Who closes first when `requests_per_connection` ends a connection (`server`, `client`;
    /// `null` without it).
    #[serde(default)]
    pub close_first: Option<String>,
    /// Local addresses new connections leave from in turn (`--source-address`; 0: the kernel's
    /// choice).
    #[serde(default)]
    pub source_addresses: usize,
    pub connection_rate: Option<f64>,
    pub tls_resume: Option<bool>,
    /// How the open loop waited for its sends (`auto`, `sleep`, `hybrid`, `spin`).
    #[serde(default)]
    pub idle_strategy: Option<IdleStrategy>,
}

/// One host's share of the finished requests.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HostCount {
    /// `name:port` from the URL.
    pub host: String,
    pub requests: u64,
    /// Transport failures and statuses of 400 or more.
    pub errors: u64,
}

/// Connections opened during the measured window.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Connections {
    pub opened: u64,
    /// Opened per second of the measured window.
    pub rate_per_sec: f64,
    /// Closed by the generator first (each leaves a TIME_WAIT socket on this machine for 60 s):
    /// ended by `--requests-per-connection` without asking the server to close, or the server
    /// did not close within min(timeout, 1 s) of a response that said it would.
    pub closed_by_client: u64,
    /// Closed by the server first: after a response that ended the connection (asked for with
    /// `Connection: close` on the last request of `--requests-per-connection`, or the server's
    /// own), or while idle.
    #[serde(default)]
    pub closed_by_server: u64,
    pub tls_handshakes: u64,
    pub tls_resumed: u64,
    /// tls_resumed / tls_handshakes (0 without TLS).
    pub resumption_ratio: f64,
    /// HTTP/3: handshakes where the server accepted 0-RTT early data (`--h3-0rtt`).
    #[serde(default)]
    pub quic_0rtt_accepted: u64,
    /// HTTP/3: connections moved to a new local port mid-run (`--h3-rebind-every`).
    #[serde(default)]
    pub quic_migrations: u64,
    /// TCP connect time.
    pub connect_us: Stats,
    /// TLS handshake time, after TCP (none without TLS).
    pub tls_handshake_us: Option<Stats>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Requests {
    /// ok + errors.
    pub total: u64,
    /// Responses with a status below 400.
    pub ok: u64,
    /// Transport failures plus responses with a status of 400 or more.
    pub errors: u64,
    /// Sent but neither answered nor failed when the run ended (not in `total`).
    pub unfinished: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Errors {
    pub connect: u64,
    pub timeout: u64,
    pub reset: u64,
    pub protocol: u64,
    pub other: u64,
    pub tls: u64,
    pub goaway: u64,
    pub stream_reset: u64,
    /// Connects that found no free local port (`EADDRNOTAVAIL`, `EADDRINUSE`).
    #[serde(default)]
    pub ports_exhausted: u64,
    /// Responses with a status of 400 or more (see `status_codes`).
    pub http_status: u64,
    /// gRPC calls with a status other than OK (see `grpc_status`).
    #[serde(default)]
    pub grpc_status: u64,
    /// Counts by "kind: what happened" (TLS reasons, GOAWAY and reset codes; at most 32).
    pub messages: BTreeMap<String, u64>,
}

/// Summary of one histogram, in microseconds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Stats {
    pub count: u64,
    pub min: u64,
    pub mean: f64,
    pub stdev: f64,
    pub p50: u64,
    pub p75: u64,
    pub p90: u64,
    pub p99: u64,
    pub p99_9: u64,
    pub p99_99: u64,
    pub max: u64,
}

impl Stats {
    pub fn of(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Stats {
                count: 0,
                min: 0,
                mean: 0.0,
                stdev: 0.0,
                p50: 0,
                p75: 0,
                p90: 0,
                p99: 0,
                p99_9: 0,
                p99_99: 0,
                max: 0,
            };
        }
        let q = |x| h.value_at_quantile(x);
        Stats {
            count: h.len(),
            min: h.min(),
            mean: round2(h.mean()),
            stdev: round2(h.stdev()),
            p50: q(0.5),
            p75: q(0.75),
            p90: q(0.9),
            p99: q(0.99),
            p99_9: q(0.999),
            p99_99: q(0.9999),
            max: h.max(),
        }
    }
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Bytes {
    pub sent: u64,
    pub received: u64,
}

/// One second of the measured window (the last point may cover less than a second).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TimelinePoint {
    pub second: u32,
    pub requests: u64,
    pub errors: u64,
    pub p50_us: u64,
    /// Added after the first results were stored; 0 when read from those.
    #[serde(default)]
    pub p90_us: u64,
    pub p99_us: u64,
    #[serde(default)]
    pub p999_us: u64,
}

/// Full histograms, HdrHistogram V2 + DEFLATE, base64: results of several processes merge
/// exactly by decoding and adding these.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Histograms {
    pub latency_us: String,
    pub service_time_us: String,
    pub schedule_lag_us: Option<String>,
    pub connect_us: String,
    pub tls_handshake_us: Option<String>,
}

/// The load generator's view of itself.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Generator {
    /// User + system CPU seconds of the whole process during the run.
    pub cpu_secs: f64,
    /// Busiest worker thread's CPU time over its wall time (1.0 = a full core).
    pub max_thread_utilization: f64,
    /// The same without the time it spun before sends on purpose (the idle strategy's).
    #[serde(default)]
    pub max_thread_busy: f64,
    /// The largest share of its window a worker thread spent runnable but waiting for a CPU
    /// (other processes on the generator's CPU); absent where the kernel does not say.
    #[serde(default)]
    pub max_thread_waiting: Option<f64>,
    /// CPU seconds spent spinning before sends on purpose, all threads.
    #[serde(default)]
    pub spin_secs: f64,
    /// How late the workers' sleeps ended: this machine's wake-up error (open loop).
    #[serde(default)]
    pub wakeup_error_us: Option<Stats>,
    pub rss_max_bytes: u64,
    pub threads: usize,
    /// True when the generator, not the target, may have limited the run (timer lateness or
    /// CPU saturation in `check`).
    pub saturated: bool,
    /// The generator's verdict on its run: valid or not, and each cause found with its advice.
    #[serde(default)]
    pub check: SelfCheck,
    /// Sends more than 1 ms late while a connection was free.
    pub late_sends: u64,
    /// Sends that waited for a free connection.
    pub queued_sends: u64,
    pub warnings: Vec<String>,
}

impl Errors {
    pub fn from_recorder(r: &Recorder) -> Self {
        Errors {
            connect: r.counts.errors(ErrorKind::Connect),
            timeout: r.counts.errors(ErrorKind::Timeout),
            reset: r.counts.errors(ErrorKind::Reset),
            protocol: r.counts.errors(ErrorKind::Protocol),
            other: r.counts.errors(ErrorKind::Other),
            tls: r.counts.errors(ErrorKind::Tls),
            goaway: r.counts.errors(ErrorKind::GoAway),
            stream_reset: r.counts.errors(ErrorKind::StreamReset),
            ports_exhausted: r.counts.errors(ErrorKind::PortsExhausted),
            http_status: r.counts.http_failures(),
            grpc_status: r.counts.grpc_failures(),
            messages: r.messages.clone(),
        }
    }
}

/// Hosts listed one by one in the result.
const MAX_REPORTED_HOSTS: usize = 1000;

/// What a run measured, for [`RunResult::build`].
pub(crate) struct Measured<'a> {
    pub threads: usize,
    /// Every worker's recorder, merged.
    pub recorder: &'a Recorder,
    /// The longest measured window among the workers, ns.
    pub window_ns: u64,
    /// The busiest worker's CPU time over its window (1.0 = a full core).
    pub max_thread_utilization: f64,
    /// The same, less the time it spun before sends on purpose.
    pub max_thread_busy: f64,
    /// The largest share of its window a worker waited for a CPU (`None`: not known).
    pub max_thread_waiting: Option<f64>,
    pub timeline: Vec<TimelinePoint>,
    /// Wall-clock start of the measured window.
    pub wall_start: SystemTime,
    /// User + system CPU seconds of the process during the run.
    pub cpu_secs: f64,
    pub rss_max_bytes: u64,
    /// Stopped by the caller (a signal) before its end.
    pub interrupted: bool,
}

impl RunResult {
    /// The result document of `spec`'s run from what it measured: settings as asked, figures
    /// from the merged recorder, and the generator's verdict on itself (warnings, `saturated`).
    pub(crate) fn build(spec: &LoadSpec, measured: Measured) -> RunResult {
        let open = matches!(spec.mode, Mode::Open { .. });
        let tls = spec.conn.tls.is_some() || spec.conn.quic.is_some();
        let Measured {
            threads,
            recorder: rec,
            window_ns,
            max_thread_utilization: max_util,
            max_thread_busy,
            max_thread_waiting,
            timeline,
            wall_start,
            cpu_secs,
            rss_max_bytes,
            interrupted,
        } = measured;
        let duration_secs = window_ns as f64 / 1e9;
        let total = rec.counts.total();
        let lag = Stats::of(&rec.lag);
        let service = Stats::of(&rec.service);
        let wake_error = Stats::of(&rec.wake_error);
        let throughput_rps = if duration_secs > 0.0 {
            total as f64 / duration_secs
        } else {
            0.0
        };
        let check = check::judge(&Figures {
            rate_rps: match spec.mode {
                Mode::Open { rate_rps, .. } => Some(rate_rps),
                Mode::Closed => None,
            },
            connections: spec.connections,
            requests: total,
            failed: rec.counts.failed(),
            top_failure: Failure::most_frequent(&rec.counts, &rec.messages),
            throughput_rps,
            sends: rec.sends,
            late_sends: rec.late_sends,
            queued_sends: rec.queued_sends,
            lag_p99_us: lag.p99,
            wake_error_p99_us: wake_error.p99,
            busiest_thread_busy: max_thread_busy,
            most_waiting_thread: max_thread_waiting.unwrap_or(0.0),
            service_min_us: service.min,
            service_at_lower_load_us: spec.service_at_lower_load_us,
            service_p50_us: service.p50,
            service_p99_us: service.p99,
        });
        let saturated = check.generator_limited();
        let mut warnings = Vec::new();
        if rec.unfinished > 0 {
            warnings.push(format!(
                "{} requests were due or in flight when the run ended and are not in the totals",
                rec.unfinished
            ));
        }
        if interrupted {
            warnings.push("the run was interrupted: this is a partial result".to_string());
        }
        let no_port = rec.counts.errors(ErrorKind::PortsExhausted);
        if no_port > 0 {
            warnings.push(format!(
                "{no_port} connects found no free local port (EADDRNOTAVAIL): the ports towards the target are taken, most likely by TIME_WAIT sockets of connections closed here first; let the server close first (the default of --requests-per-connection over HTTP/1.1), spread connections with --source-address, widen net.ipv4.ip_local_port_range, or open fewer connections per second (--connection-rate)"
            ));
        }
        let (rate_rps, arrival) = match spec.mode {
            Mode::Closed => (None, None),
            Mode::Open { rate_rps, arrival } => (
                Some(rate_rps),
                Some(match arrival {
                    Arrival::Uniform => "uniform".to_string(),
                    Arrival::Poisson => "poisson".to_string(),
                }),
            ),
        };
        let (duration, requests) = match spec.stop {
            StopAt::Duration(d) => (Some(d.as_secs_f64()), None),
            StopAt::Requests(n) => (None, Some(n)),
        };
        RunResult {
            schema: SCHEMA.to_string(),
            meshbench_version: env!("CARGO_PKG_VERSION").to_string(),
            url: spec.request.url.clone(),
            settings: Settings {
                mode: if open { "open" } else { "closed" }.to_string(),
                connections: spec.connections,
                concurrency: spec.concurrency,
                threads,
                rate_rps,
                arrival,
                duration_secs: duration,
                requests,
                warmup_secs: spec.warmup.as_secs_f64(),
                timeout_secs: spec.timeout.as_secs_f64(),
                method: spec.request.method.clone(),
                headers: spec
                    .request
                    .headers
                    .iter()
                    .map(|(n, v)| [n.clone(), v.clone()])
                    .collect(),
                body_bytes: spec.request.body_len,
                seed: spec.seed,
                protocol: spec.conn.protocol.name().to_string(),
                tls,
                streams: if spec.conn.protocol.is_multiplexed() {
                    spec.conn.streams
                } else {
                    1
                },
                targets: spec.targets.requests.len(),
                hosts: spec.targets.hosts.len(),
                target_order: match spec.targets.order {
                    Order::RoundRobin => "round-robin",
                    Order::Random => "random",
                }
                .to_string(),
                requests_per_connection: spec.conn.requests_per_connection,
                close_first: spec
                    .conn
                    .requests_per_connection
                    .map(|_| spec.conn.close_first.name().to_string()),
                source_addresses: spec.conn.source_addrs.len(),
                connection_rate: spec.conn.connection_rate,
                tls_resume: tls.then_some(spec.conn.tls_resume),
                idle_strategy: open.then_some(spec.idle),
            },
            start_time: humantime::format_rfc3339_millis(wall_start).to_string(),
            duration_secs: (duration_secs * 1e6).round() / 1e6,
            partial: interrupted,
            requests: Requests {
                total,
                ok: rec.counts.ok(),
                errors: total - rec.counts.ok(),
                unfinished: rec.unfinished,
            },
            throughput_rps: (throughput_rps * 100.0).round() / 100.0,
            status_codes: rec
                .counts
                .status_codes()
                .map(|(c, n)| (c.to_string(), n))
                .collect(),
            grpc_status: rec
                .counts
                .grpc_codes()
                .map(|(c, n)| (c.name().to_string(), n))
                .collect(),
            errors: Errors::from_recorder(rec),
            latency_us: Stats::of(&rec.latency),
            service_time_us: service,
            schedule_lag_us: open.then_some(lag),
            bytes: Bytes {
                sent: rec.bytes_sent,
                received: rec.bytes_received,
            },
            connections: Connections {
                opened: rec.conns.opened,
                rate_per_sec: if duration_secs > 0.0 {
                    (rec.conns.opened as f64 / duration_secs * 100.0).round() / 100.0
                } else {
                    0.0
                },
                closed_by_client: rec.conns.closed_by_client,
                closed_by_server: rec.conns.closed_by_server,
                tls_handshakes: rec.conns.handshakes,
                tls_resumed: rec.conns.resumed,
                resumption_ratio: if rec.conns.handshakes > 0 {
                    (rec.conns.resumed as f64 / rec.conns.handshakes as f64 * 1000.0).round()
                        / 1000.0
                } else {
                    0.0
                },
                quic_0rtt_accepted: rec.conns.zero_rtt,
                quic_migrations: rec.conns.migrations,
                connect_us: Stats::of(&rec.conns.connect),
                tls_handshake_us: tls.then(|| Stats::of(&rec.conns.handshake)),
            },
            hosts: spec
                .targets
                .hosts
                .iter()
                .take(MAX_REPORTED_HOSTS)
                .enumerate()
                .map(|(i, h)| {
                    let [requests, errors] = rec.per_host.get(i).copied().unwrap_or_default();
                    HostCount {
                        host: h.name.clone(),
                        requests,
                        errors,
                    }
                })
                .collect(),
            timeline,
            histogram: Histograms {
                latency_us: encode_histogram(&rec.latency),
                service_time_us: encode_histogram(&rec.service),
                schedule_lag_us: open.then(|| encode_histogram(&rec.lag)),
                connect_us: encode_histogram(&rec.conns.connect),
                tls_handshake_us: tls.then(|| encode_histogram(&rec.conns.handshake)),
            },
            generator: Generator {
                cpu_secs: (cpu_secs * 1000.0).round() / 1000.0,
                max_thread_utilization: (max_util * 1000.0).round() / 1000.0,
                max_thread_busy: (max_thread_busy * 1000.0).round() / 1000.0,
                max_thread_waiting: max_thread_waiting.map(|w| (w * 1000.0).round() / 1000.0),
                spin_secs: (rec.spin_ns as f64 / 1e6).round() / 1e3,
                wakeup_error_us: (!rec.wake_error.is_empty()).then_some(wake_error),
                rss_max_bytes,
                threads,
                saturated,
                check,
                late_sends: rec.late_sends,
                queued_sends: rec.queued_sends,
                warnings,
            },
            agents: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::recorder::new_histogram;
    use crate::spec::{ConnSpec, RequestSpec, Targets};

    fn spec(mode: Mode) -> LoadSpec {
        let addr = "127.0.0.1:8080".parse().expect("a literal address");
        LoadSpec {
            request: RequestSpec {
                method: "GET".to_string(),
                url: "http://127.0.0.1:8080/".to_string(),
                body_len: 0,
                headers: Vec::new(),
            },
            targets: Arc::new(Targets::single_http1(
                addr,
                b"GET / HTTP/1.1\r\n\r\n".to_vec(),
                false,
            )),
            conn: ConnSpec::default(),
            connections: 4,
            concurrency: None,
            threads: 2,
            mode,
            idle: crate::IdleStrategy::Auto,
            stop: StopAt::Duration(Duration::from_secs(10)),
            warmup: Duration::ZERO,
            timeout: Duration::from_secs(5),
            seed: 1,
            segment: crate::spec::Segment::WHOLE,
            service_at_lower_load_us: None,
        }
    }

    #[test]
    fn the_generator_judges_itself_table() {
        use crate::check::Cause;
        let open = Mode::Open {
            rate_rps: 1000.0,
            arrival: Arrival::Uniform,
        };
        // Out of 1,000 sends: (case, mode, late sends, queued sends, busiest thread's busy
        // share, unfinished, interrupted, saturated, causes found, what the warnings say)
        type Row = (
            &'static str,
            Mode,
            u64,
            u64,
            f64,
            u64,
            bool,
            bool,
            &'static [Cause],
            &'static [&'static str],
        );
        let cases: [Row; 7] = [
            ("a clean run", open, 10, 10, 0.5, 0, false, false, &[], &[]),
            (
                "open loop, 2 % late on an idle thread",
                open,
                20,
                0,
                0.5,
                0,
                false,
                true,
                &[Cause::TimerLateness],
                &[],
            ),
            (
                "a thread at 90 % of a core",
                Mode::Closed,
                0,
                0,
                0.9,
                0,
                false,
                true,
                &[Cause::CpuSaturation],
                &[],
            ),
            (
                "open loop, 2 % queued: the target's fault",
                open,
                0,
                20,
                0.5,
                0,
                false,
                false,
                &[Cause::SlowTarget],
                &[],
            ),
            (
                "requests left unfinished",
                open,
                0,
                0,
                0.5,
                3,
                false,
                false,
                &[],
                &["3 requests were due"],
            ),
            (
                "interrupted",
                Mode::Closed,
                0,
                0,
                0.5,
                0,
                true,
                false,
                &[],
                &["interrupted"],
            ),
            (
                "late and CPU-bound: the CPU",
                open,
                20,
                0,
                0.95,
                0,
                false,
                true,
                &[Cause::CpuSaturation],
                &[],
            ),
        ];
        for (case, mode, late, queued, busy, unfinished, interrupted, saturated, causes, said) in
            cases
        {
            let mut rec = Recorder::new();
            for _ in 0..1000 {
                rec.response(200, 1_000_000, 500_000);
            }
            rec.sends = 1000;
            rec.late_sends = late;
            rec.queued_sends = queued;
            rec.unfinished = unfinished;
            let result = RunResult::build(
                &spec(mode),
                Measured {
                    threads: 2,
                    recorder: &rec,
                    window_ns: 10_000_000_000,
                    max_thread_utilization: busy,
                    max_thread_busy: busy,
                    max_thread_waiting: None,
                    timeline: Vec::new(),
                    wall_start: SystemTime::UNIX_EPOCH,
                    cpu_secs: 1.0,
                    rss_max_bytes: 0,
                    interrupted,
                },
            );
            let g = &result.generator;
            assert_eq!(g.saturated, saturated, "{case}");
            let found: Vec<Cause> = g.check.findings.iter().map(|f| f.cause).collect();
            assert_eq!(found, causes, "{case}");
            assert_eq!(g.warnings.len(), said.len(), "{case}: {:?}", g.warnings);
            for (warning, words) in g.warnings.iter().zip(said) {
                assert!(warning.contains(words), "{case}: {warning}");
            }
            assert_eq!(result.partial, interrupted, "{case}");
            assert_eq!(
                result.schedule_lag_us.is_some(),
                mode != Mode::Closed,
                "{case}"
            );
        }
    }

    #[test]
    fn a_run_without_one_success_measured_nothing_and_says_what_failed() {
        let mut rec = Recorder::new();
        for _ in 0..40 {
            rec.error(ErrorKind::Connect);
        }
        rec.sends = 40;
        // Sends waited for the failed connections' back-off: not the generator's doing.
        rec.late_sends = 20;
        rec.queued_sends = 20;
        let result = RunResult::build(
            &spec(Mode::Open {
                rate_rps: 40.0,
                arrival: Arrival::Uniform,
            }),
            Measured {
                threads: 2,
                recorder: &rec,
                window_ns: 1_000_000_000,
                max_thread_utilization: 0.01,
                max_thread_busy: 0.01,
                max_thread_waiting: Some(0.02),
                timeline: Vec::new(),
                wall_start: SystemTime::UNIX_EPOCH,
                cpu_secs: 0.01,
                rss_max_bytes: 0,
                interrupted: false,
            },
        );
        let check = &result.generator.check;
        assert!(check.measured_nothing() && !check.valid);
        assert_eq!(check.findings.len(), 1, "{:?}", check.findings);
        assert!(!result.generator.saturated);
        let said = &check.findings[0].message;
        assert!(
            said.contains("40 of 40 requests failed, every one at connect (refused"),
            "{said}"
        );
    }

    #[test]
    fn settings_and_figures_come_from_the_spec_and_the_recorder() {
        let mut rec = Recorder::new();
        for _ in 0..30 {
            rec.response(200, 2_000_000, 1_000_000);
        }
        rec.response(503, 2_000_000, 1_000_000);
        rec.conns.opened = 20;
        let result = RunResult::build(
            &spec(Mode::Closed),
            Measured {
                threads: 2,
                recorder: &rec,
                window_ns: 2_000_000_000,
                max_thread_utilization: 0.25,
                max_thread_busy: 0.25,
                max_thread_waiting: Some(0.0),
                timeline: Vec::new(),
                wall_start: SystemTime::UNIX_EPOCH,
                cpu_secs: 0.5,
                rss_max_bytes: 1 << 20,
                interrupted: false,
            },
        );
        assert_eq!(result.settings.mode, "closed");
        assert_eq!(
            (result.settings.connections, result.settings.threads),
            (4, 2)
        );
        assert_eq!(result.settings.target_order, "round-robin");
        assert_eq!(result.start_time, "1970-01-01T00:00:00.000Z");
        assert_eq!(result.duration_secs, 2.0);
        assert_eq!(
            (
                result.requests.total,
                result.requests.ok,
                result.requests.errors
            ),
            (31, 30, 1)
        );
        assert_eq!(result.throughput_rps, 15.5);
        assert_eq!(result.connections.rate_per_sec, 10.0);
        assert_eq!(result.status_codes.get("503"), Some(&1));
        assert_eq!(result.latency_us.p50, 2000);
        assert_eq!(result.service_time_us.p50, 1000);
        assert_eq!(result.hosts.len(), 1);
        assert!(result.connections.tls_handshake_us.is_none());
        assert!(decode_histogram(&result.histogram.latency_us).is_ok());
    }

    #[test]
    fn ports_running_out_is_an_error_of_its_own_with_advice() {
        let mut rec = Recorder::new();
        rec.response(200, 1_000_000, 1_000_000);
        for _ in 0..7 {
            rec.error(ErrorKind::PortsExhausted);
        }
        rec.conns.closed_by_client = 3;
        rec.conns.closed_by_server = 5;
        let mut churn = spec(Mode::Closed);
        churn.conn.requests_per_connection = Some(1);
        churn.conn.source_addrs = vec!["10.0.0.2".parse().unwrap()];
        let result = RunResult::build(
            &churn,
            Measured {
                threads: 2,
                recorder: &rec,
                window_ns: 1_000_000_000,
                max_thread_utilization: 0.1,
                max_thread_busy: 0.1,
                max_thread_waiting: None,
                timeline: Vec::new(),
                wall_start: SystemTime::UNIX_EPOCH,
                cpu_secs: 0.1,
                rss_max_bytes: 0,
                interrupted: false,
            },
        );
        assert_eq!(result.errors.ports_exhausted, 7);
        assert_eq!(result.requests.errors, 7);
        assert_eq!(
            (
                result.connections.closed_by_client,
                result.connections.closed_by_server
            ),
            (3, 5)
        );
        assert_eq!(result.settings.close_first.as_deref(), Some("server"));
        assert_eq!(result.settings.source_addresses, 1);
        let advice = &result.generator.warnings;
        assert_eq!(advice.len(), 1, "{advice:?}");
        for words in [
            "7 connects found no free local port",
            "--source-address",
            "net.ipv4.ip_local_port_range",
            "--connection-rate",
        ] {
            assert!(advice[0].contains(words), "{words}: {}", advice[0]);
        }
        // Read back from a result written before these fields existed.
        let mut old = serde_json::to_value(&result).unwrap();
        old["errors"]
            .as_object_mut()
            .unwrap()
            .remove("ports_exhausted");
        old["connections"]
            .as_object_mut()
            .unwrap()
            .remove("closed_by_server");
        let back: RunResult = serde_json::from_value(old).unwrap();
        assert_eq!(back.errors.ports_exhausted, 0);
    }

    #[test]
    fn histograms_survive_encoding_and_merge_exactly() {
        let mut a = new_histogram();
        let mut b = new_histogram();
        for v in 1..5000u64 {
            a.record(v * 3).unwrap();
            b.record(v * 11).unwrap();
        }
        let mut sum = decode_histogram(&encode_histogram(&a)).unwrap();
        sum.add(decode_histogram(&encode_histogram(&b)).unwrap())
            .unwrap();
        let mut want = a.clone();
        want.add(&b).unwrap();
        assert_eq!(sum, want);
        assert!(decode_histogram("not base64!").is_err());
    }

    #[test]
    fn stats_of_a_known_histogram() {
        let mut h = new_histogram();
        for v in 1..=1000u64 {
            h.record(v).unwrap();
        }
        let s = Stats::of(&h);
        assert_eq!((s.count, s.min, s.max), (1000, 1, 1000));
        assert_eq!((s.p50, s.p90, s.p99), (500, 900, 990));
        assert!((s.mean - 500.5).abs() < 0.01);
        assert_eq!(Stats::of(&new_histogram()).count, 0);
    }
}
