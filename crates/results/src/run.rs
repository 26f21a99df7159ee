//! The result of one run: the `meshbench/result/v1` JSON document (described by
//! `docs/result.schema.json`) that `--json` writes, a stored step keeps and an agent's merge
//! produces. The engine fills it (`meshbench_engine::result`); reports, the store and the
//! answers read it. Every enumerated setting is typed ([`crate::load`]), written with the v1
//! document's words.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::load::{result_words, Arrival, CloseFirst, IdleStrategy, LoopMode, Order, Protocol};
use crate::self_check::SelfCheck;

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
    /// The requests sampled for per-hop attribution, as the generator saw them: handed to the
    /// runner, which joins them with the proxies' logs ([`crate::attribution`]); never part
    /// of the document.
    #[serde(skip)]
    pub traces: Vec<crate::attribution::Sent>,
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
    pub mode: LoopMode,
    pub connections: usize,
    /// Closed loop: requests in flight at most (`--in-flight`), when fewer than the slots.
    /// Results written before the name was settled say `concurrency`.
    #[serde(default, alias = "concurrency")]
    pub in_flight: Option<usize>,
    pub threads: usize,
    pub rate_rps: Option<f64>,
    /// Open loop only.
    pub arrival: Option<Arrival>,
    pub duration_secs: Option<f64>,
    pub requests: Option<u64>,
    pub warmup_secs: f64,
    pub timeout_secs: f64,
    pub method: String,
    pub headers: Vec<[String; 2]>,
    pub body_bytes: usize,
    pub seed: u64,
    /// Written as [`Protocol::name`]: `http/1.1`, `h2`, `grpc` or `h3`.
    #[serde(with = "result_words::protocol")]
    pub protocol: Protocol,
    pub tls: bool,
    /// Concurrent streams per connection (1 for HTTP/1.1).
    pub streams: usize,
    /// Distinct requests in the target list, and the hosts they go to.
    pub targets: usize,
    pub hosts: usize,
    /// Written as [`Order::name`]: `round-robin` or `random`.
    #[serde(with = "result_words::order")]
    pub target_order: Order,
    pub requests_per_connection: Option<u64>,
    /// Who closes first when `requests_per_connection` ends a connection (`server`, `client`;
    /// `null` without it).
    #[serde(default)]
    pub close_first: Option<CloseFirst>,
    /// Local addresses new connections leave from in turn (`--source-address`; 0: the kernel's
    /// choice).
    #[serde(default)]
    pub source_addresses: usize,
    pub connection_rate: Option<f64>,
    pub tls_resume: Option<bool>,
    /// How the open loop waited for its sends (`auto`, `sleep`, `hybrid`, `spin`).
    #[serde(default)]
    pub idle_strategy: Option<IdleStrategy>,
    /// The pacing budget asked (`--pacing-slack`), µs; absent: auto (the budget each worker
    /// chose is `generator.pacing.slack_us`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pacing_slack_us: Option<u64>,
    /// Sends due within the budget after a wake-up went out at it, early (`--send-early`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub send_early: bool,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// How an open loop kept its schedule, as its workers measured it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pacing {
    /// The budget: the most a send was allowed to leave after its intended instant (µs; the
    /// largest any worker used).
    pub slack_us: u64,
    /// Whether each worker chose it from this machine's clock (`auto`) or it was given.
    pub slack_auto: bool,
    /// The most a send was allowed to leave *before* its intended instant (µs; the largest any
    /// worker used; 0: never early). The default leads: it wakes ahead of a send by its clock's
    /// error and sends what falls due within this window at once, its latency counted from the
    /// real send.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub ahead_us: u64,
    /// CPU one timer wake-up cost a worker before the start (µs, the median of the workers'):
    /// what an even schedule pays per wake-up on this machine.
    pub wake_cost_us: f64,
    /// Sends each wake-up that sent carried.
    pub sends_per_wake: Stats,
    /// The most sends one worker thread made within one millisecond of the run clock (bins on
    /// whole milliseconds).
    pub largest_thread_burst_per_ms: u64,
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

/// The generator's CPU quota and what it cost during the measured window. Under a quota the
/// kernel lets the generator's group use `cores` CPUs' worth of time per scheduling period
/// (100 ms by default); a group that uses it up is stopped, every thread, until the period
/// ends, and whatever was due meanwhile goes out late.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuQuotaUse {
    /// The quota in cores (the smallest of the generator's group and its ancestors).
    pub cores: f64,
    /// Scheduling periods of the window in which the group had work to do.
    pub periods: u64,
    /// Of them, periods in which it used the quota up and was stopped until the period ended.
    pub throttled_periods: u64,
    /// How long it stayed stopped so, summed over CPUs, seconds.
    pub throttled_secs: f64,
}

impl CpuQuotaUse {
    /// The share of the window's periods in which the group was stopped (0 without periods).
    pub fn throttled_share(&self) -> f64 {
        self.throttled_periods as f64 / self.periods.max(1) as f64
    }
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
    /// How the open loop spent its pacing budget: the budget, what a wake-up cost, how many
    /// sends each carried (open loop; absent in results before the budget existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pacing: Option<Pacing>,
    /// The CPU limit of the generator's cgroup (a pod's CPU limit) and how often it stopped
    /// the generator during the measured window; `None` without a quota (and in results
    /// written before it was read).
    #[serde(default)]
    pub cpu_quota: Option<CpuQuotaUse>,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::self_check::{Cause, Finding};

    #[test]
    fn a_result_written_before_the_quota_was_read_has_none() {
        let old = include_str!("fixture-run.json");
        assert!(!old.contains("cpu_quota"));
        let run: RunResult = serde_json::from_str(old).expect("an older result reads");
        assert_eq!(run.generator.cpu_quota, None);
        // Written back, it says so: null.
        let text = serde_json::to_value(&run).expect("a result writes");
        assert!(text["generator"]["cpu_quota"].is_null());
    }

    #[test]
    fn a_throttled_run_carries_its_quota_and_its_cause() {
        let mut run: RunResult =
            serde_json::from_str(include_str!("fixture-run.json")).expect("the fixture reads");
        run.generator.cpu_quota = Some(CpuQuotaUse {
            cores: 0.05,
            periods: 30,
            throttled_periods: 27,
            throttled_secs: 2.6,
        });
        run.generator.check.findings.push(Finding {
            cause: Cause::CpuThrottled,
            message: "CPU throttled".into(),
        });
        let text = serde_json::to_value(&run).expect("a result writes");
        assert_eq!(text["generator"]["cpu_quota"]["throttled_periods"], 27);
        assert_eq!(
            text["generator"]["check"]["findings"][0]["cause"],
            "cpu_throttled"
        );
        let back: RunResult = serde_json::from_value(text).expect("and reads back");
        assert_eq!(back.generator.cpu_quota, run.generator.cpu_quota);
        assert!((back.generator.cpu_quota.unwrap().throttled_share() - 0.9).abs() < 1e-9);
        assert!(Cause::CpuThrottled.invalidates());
        assert_eq!(Cause::CpuThrottled.name(), "cpu_throttled");
        assert!(back.generator.check.generator_limited());
    }
}
