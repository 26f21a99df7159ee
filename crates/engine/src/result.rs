//! The result of a run: the `meshbench/result/v1` JSON document (described by
//! `docs/result.schema.json`) and the helpers that fill it from merged recorders.

use std::collections::BTreeMap;

use base64::Engine as _;
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::recorder::{ErrorKind, Recorder};

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
    pub connection_rate: Option<f64>,
    pub tls_resume: Option<bool>,
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
    /// Closed by the generator after `--requests-per-connection`.
    pub closed_by_client: u64,
    pub tls_handshakes: u64,
    pub tls_resumed: u64,
    /// tls_resumed / tls_handshakes (0 without TLS).
    pub resumption_ratio: f64,
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
    /// Responses with a status of 400 or more (see `status_codes`).
    pub http_status: u64,
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
    pub rss_max_bytes: u64,
    pub threads: usize,
    /// True when the generator, not the target, may have limited the run.
    pub saturated: bool,
    /// Sends more than 1 ms late while a connection was free.
    pub late_sends: u64,
    /// Sends that waited for a free connection.
    pub queued_sends: u64,
    pub warnings: Vec<String>,
}

/// Encodes a histogram as base64 of its compressed V2 form.
pub fn encode_histogram(h: &Histogram<u64>) -> String {
    let mut buf = Vec::new();
    // Serialising into a Vec cannot fail for histograms built by this crate.
    if V2DeflateSerializer::new().serialize(h, &mut buf).is_err() {
        return String::new();
    }
    base64::engine::general_purpose::STANDARD.encode(buf)
}

/// Decodes what [`encode_histogram`] wrote.
pub fn decode_histogram(s: &str) -> Result<Histogram<u64>, String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(s)
        .map_err(|e| format!("histogram is not base64: {e}"))?;
    Deserializer::new()
        .deserialize(&mut bytes.as_slice())
        .map_err(|e| format!("histogram is not HdrHistogram V2: {e:?}"))
}

impl Errors {
    pub fn from_recorder(r: &Recorder) -> Self {
        Errors {
            connect: r.errors(ErrorKind::Connect),
            timeout: r.errors(ErrorKind::Timeout),
            reset: r.errors(ErrorKind::Reset),
            protocol: r.errors(ErrorKind::Protocol),
            other: r.errors(ErrorKind::Other),
            tls: r.errors(ErrorKind::Tls),
            goaway: r.errors(ErrorKind::GoAway),
            stream_reset: r.errors(ErrorKind::StreamReset),
            http_status: r.http_errors(),
            messages: r.messages.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recorder::new_histogram;

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
