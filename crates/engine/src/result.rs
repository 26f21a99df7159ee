//! Filling a run's result (`meshbench_results::RunResult`, the `meshbench/result/v1` document)
//! from what the run measured: [`build`] takes the settings as asked, the figures from the
//! merged recorder, and the generator's verdict on itself (the self-check, warnings).

use std::time::SystemTime;

use meshbench_results::run::{
    Bytes, Connections, CpuQuotaUse, Errors, Generator, Histograms, HostCount, Pacing, Requests,
    RunResult, Settings, Stats, TimelinePoint, SCHEMA,
};
use meshbench_results::{
    histogram::encode_histogram,
    load::{LoopMode, PacingSlack},
};

use crate::check::{self, Failure, Figures};
use crate::recorder::{ErrorKind, Recorder};
use crate::spec::{LoadSpec, StopAt};
use meshbench_results::Offer;

/// The failures a recorder counted, by kind.
pub fn errors_of(r: &Recorder) -> Errors {
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

/// Hosts listed one by one in the result.
const MAX_REPORTED_HOSTS: usize = 1000;

/// What a run measured, for [`build`].
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
    /// The largest pacing budget a worker kept, ns (0 in a closed loop).
    pub slack_ns: u64,
    /// The most a worker let a send leave ahead of its instant, ns (0: never early).
    pub ahead_ns: u64,
    /// The median of the workers' CPU per wake-up, ns (0 when none slept).
    pub wake_cost_ns: u64,
    pub timeline: Vec<TimelinePoint>,
    /// Wall-clock start of the measured window.
    pub wall_start: SystemTime,
    /// User + system CPU seconds of the process during the run.
    pub cpu_secs: f64,
    pub rss_max_bytes: u64,
    /// Stopped by the caller (a signal) before its end.
    pub interrupted: bool,
    /// The CPU quota and its throttling over the window (the most throttled part's).
    pub cpu_quota: Option<CpuQuotaUse>,
}

/// `x` rounded to `digits` decimals.
fn round(x: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits);
    (x * scale).round() / scale
}

/// The result document of `spec`'s run from what it measured: the settings as asked, the
/// figures from the merged recorder, and the generator's view of itself.
pub(crate) fn build(spec: &LoadSpec, measured: Measured) -> RunResult {
    let rec = measured.recorder;
    let duration_secs = measured.window_ns as f64 / 1e9;
    let per_sec = |n: f64| {
        if duration_secs > 0.0 {
            n / duration_secs
        } else {
            0.0
        }
    };
    let total = rec.counts.total();
    let throughput_rps = per_sec(total as f64);
    let open = matches!(spec.offer, Offer::Open { .. });
    RunResult {
        schema: SCHEMA.to_string(),
        meshbench_version: env!("CARGO_PKG_VERSION").to_string(),
        url: spec.request.url.clone(),
        settings: settings_of(spec, measured.threads),
        start_time: humantime::format_rfc3339_millis(measured.wall_start).to_string(),
        duration_secs: round(duration_secs, 6),
        partial: measured.interrupted,
        requests: Requests {
            total,
            ok: rec.counts.ok(),
            errors: total - rec.counts.ok(),
            unfinished: rec.unfinished,
        },
        throughput_rps: round(throughput_rps, 2),
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
        errors: errors_of(rec),
        latency_us: Stats::of(&rec.latency),
        service_time_us: Stats::of(&rec.service),
        schedule_lag_us: open.then(|| Stats::of(&rec.lag)),
        bytes: Bytes {
            sent: rec.bytes_sent,
            received: rec.bytes_received,
        },
        connections: connections_of(spec, rec, round(per_sec(rec.conns.opened as f64), 2)),
        hosts: hosts_of(spec, rec),
        histogram: histograms_of(spec, rec),
        generator: generator_of(spec, &measured, throughput_rps),
        timeline: measured.timeline,
        agents: None,
        traces: rec.traces.clone(),
    }
}

/// The settings as asked: what `--json` readers compare runs by.
fn settings_of(spec: &LoadSpec, threads: usize) -> Settings {
    let open = matches!(spec.offer, Offer::Open { .. });
    let tls = is_tls(spec);
    let (rate_rps, arrival) = match spec.offer {
        Offer::Closed => (None, None),
        Offer::Open { rate_rps, arrival } => (Some(rate_rps), Some(arrival)),
    };
    let (duration_secs, requests) = match spec.stop {
        StopAt::Duration(d) => (Some(d.as_secs_f64()), None),
        StopAt::Requests(n) => (None, Some(n)),
    };
    Settings {
        mode: if open {
            LoopMode::Open
        } else {
            LoopMode::Closed
        },
        connections: spec.connections,
        in_flight: spec.in_flight,
        threads,
        rate_rps,
        arrival,
        duration_secs,
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
        protocol: spec.conn.protocol,
        tls,
        streams: if spec.conn.protocol.is_multiplexed() {
            spec.conn.streams
        } else {
            1
        },
        targets: spec.targets.requests.len(),
        hosts: spec.targets.hosts.len(),
        target_order: spec.targets.order,
        requests_per_connection: spec.conn.requests_per_connection,
        close_first: spec
            .conn
            .requests_per_connection
            .map(|_| spec.conn.close_first),
        source_addresses: spec.conn.source_addrs.len(),
        connection_rate: spec.conn.connection_rate,
        tls_resume: tls.then_some(spec.conn.tls_resume),
        idle_strategy: open.then_some(spec.idle),
        pacing_slack_us: open.then(|| spec.slack.given_us()).flatten(),
        send_early: open && spec.send_early,
    }
}

/// TLS over TCP, or QUIC (always TLS).
fn is_tls(spec: &LoadSpec) -> bool {
    spec.conn.tls.is_some() || spec.conn.quic.is_some()
}

/// Connection set-up during the measured window.
fn connections_of(spec: &LoadSpec, rec: &Recorder, rate_per_sec: f64) -> Connections {
    let c = &rec.conns;
    Connections {
        opened: c.opened,
        rate_per_sec,
        closed_by_client: c.closed_by_client,
        closed_by_server: c.closed_by_server,
        tls_handshakes: c.handshakes,
        tls_resumed: c.resumed,
        resumption_ratio: if c.handshakes > 0 {
            round(c.resumed as f64 / c.handshakes as f64, 3)
        } else {
            0.0
        },
        quic_0rtt_accepted: c.zero_rtt,
        quic_migrations: c.migrations,
        connect_us: Stats::of(&c.connect),
        tls_handshake_us: is_tls(spec).then(|| Stats::of(&c.handshake)),
    }
}

/// Finished requests per host, the first [`MAX_REPORTED_HOSTS`] of the target list.
fn hosts_of(spec: &LoadSpec, rec: &Recorder) -> Vec<HostCount> {
    spec.targets
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
        .collect()
}

/// The full histograms, in their transport form.
fn histograms_of(spec: &LoadSpec, rec: &Recorder) -> Histograms {
    let open = matches!(spec.offer, Offer::Open { .. });
    Histograms {
        latency_us: encode_histogram(&rec.latency),
        service_time_us: encode_histogram(&rec.service),
        schedule_lag_us: open.then(|| encode_histogram(&rec.lag)),
        connect_us: encode_histogram(&rec.conns.connect),
        tls_handshake_us: is_tls(spec).then(|| encode_histogram(&rec.conns.handshake)),
    }
}

/// The generator's view of itself: its costs, the self-check's verdict on the run and the
/// warnings about what the totals leave out.
fn generator_of(spec: &LoadSpec, m: &Measured, throughput_rps: f64) -> Generator {
    let rec = m.recorder;
    let wake_error = Stats::of(&rec.wake_error);
    let check = check::judge(&figures_of(spec, m, throughput_rps, &wake_error));
    Generator {
        cpu_secs: round(m.cpu_secs, 3),
        max_thread_utilization: round(m.max_thread_utilization, 3),
        max_thread_busy: round(m.max_thread_busy, 3),
        max_thread_waiting: m.max_thread_waiting.map(|w| round(w, 3)),
        spin_secs: (rec.spin_ns as f64 / 1e6).round() / 1e3,
        wakeup_error_us: (!rec.wake_error.is_empty()).then_some(wake_error),
        pacing: pacing_of(spec, m),
        cpu_quota: m.cpu_quota.clone(),
        rss_max_bytes: m.rss_max_bytes,
        threads: m.threads,
        saturated: check.generator_limited(),
        check,
        late_sends: rec.late_sends,
        queued_sends: rec.queued_sends,
        warnings: warnings_of(rec, m.interrupted),
    }
}

/// How the open loop kept its schedule; `None` for a closed loop.
fn pacing_of(spec: &LoadSpec, m: &Measured) -> Option<Pacing> {
    let Offer::Open { .. } = spec.offer else {
        return None;
    };
    Some(Pacing {
        slack_us: m.slack_ns / 1000,
        slack_auto: spec.slack == PacingSlack::Auto,
        ahead_us: m.ahead_ns / 1000,
        wake_cost_us: round(m.wake_cost_ns as f64 / 1e3, 1),
        sends_per_wake: Stats::of(&m.recorder.sends_per_wake),
        largest_thread_burst_per_ms: m.recorder.largest_burst_per_ms,
    })
}

/// What the self-check judges, all measured by the run itself.
fn figures_of(spec: &LoadSpec, m: &Measured, throughput_rps: f64, wake_error: &Stats) -> Figures {
    let rec = m.recorder;
    let (lag, service) = (Stats::of(&rec.lag), Stats::of(&rec.service));
    Figures {
        rate_rps: spec.offer.rate_rps(),
        connections: spec.connections,
        requests: rec.counts.total(),
        failed: rec.counts.failed(),
        top_failure: Failure::most_frequent(&rec.counts, &rec.messages),
        throughput_rps,
        sends: rec.sends,
        late_sends: rec.late_sends,
        queued_sends: rec.queued_sends,
        lag_p99_us: lag.p99,
        wake_error_p99_us: wake_error.p99,
        busiest_thread_busy: m.max_thread_busy,
        most_waiting_thread: m.max_thread_waiting.unwrap_or(0.0),
        service_min_us: service.min,
        service_at_lower_load_us: spec.service_at_lower_load_us,
        service_p50_us: service.p50,
        service_p99_us: service.p99,
        window_secs: m.window_ns as f64 / 1e9,
        cpu_quota: m.cpu_quota.clone(),
    }
}

/// What the totals leave out, each with what to do about it.
fn warnings_of(rec: &Recorder, interrupted: bool) -> Vec<String> {
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
    warnings
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::spec::{ConnSpec, RequestSpec, Targets};
    use meshbench_results::{
        histogram::{decode_histogram, new_histogram},
        Arrival,
    };

    fn spec(offer: Offer) -> LoadSpec {
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
            in_flight: None,
            threads: 2,
            offer,
            idle: meshbench_results::IdleStrategy::Auto,
            slack: PacingSlack::Auto,
            send_early: false,
            stop: StopAt::Duration(Duration::from_secs(10)),
            warmup: Duration::ZERO,
            timeout: Duration::from_secs(5),
            seed: 1,
            segment: crate::spec::Segment::WHOLE,
            service_at_lower_load_us: None,
            trace_every: None,
        }
    }

    #[test]
    fn the_generator_judges_itself_table() {
        use meshbench_results::Cause;
        let open = Offer::Open {
            rate_rps: 1000.0,
            arrival: Arrival::Uniform,
        };
        // Out of 1,000 sends: (case, offer, late sends, queued sends, busiest thread's busy
        // share, unfinished, interrupted, saturated, causes found, what the warnings say)
        type Row = (
            &'static str,
            Offer,
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
                Offer::Closed,
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
                Offer::Closed,
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
        for (case, offer, late, queued, busy, unfinished, interrupted, saturated, causes, said) in
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
            let result = build(
                &spec(offer),
                Measured {
                    threads: 2,
                    recorder: &rec,
                    window_ns: 10_000_000_000,
                    max_thread_utilization: busy,
                    max_thread_busy: busy,
                    max_thread_waiting: None,
                    slack_ns: 0,
                    ahead_ns: 0,
                    wake_cost_ns: 0,
                    timeline: Vec::new(),
                    wall_start: SystemTime::UNIX_EPOCH,
                    cpu_secs: 1.0,
                    rss_max_bytes: 0,
                    interrupted,
                    cpu_quota: None,
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
                offer != Offer::Closed,
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
        let result = build(
            &spec(Offer::Open {
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
                slack_ns: 0,
                ahead_ns: 0,
                wake_cost_ns: 0,
                timeline: Vec::new(),
                wall_start: SystemTime::UNIX_EPOCH,
                cpu_secs: 0.01,
                rss_max_bytes: 0,
                interrupted: false,
                cpu_quota: None,
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
        let result = build(
            &spec(Offer::Closed),
            Measured {
                threads: 2,
                recorder: &rec,
                window_ns: 2_000_000_000,
                max_thread_utilization: 0.25,
                max_thread_busy: 0.25,
                max_thread_waiting: Some(0.0),
                slack_ns: 0,
                ahead_ns: 0,
                wake_cost_ns: 0,
                timeline: Vec::new(),
                wall_start: SystemTime::UNIX_EPOCH,
                cpu_secs: 0.5,
                rss_max_bytes: 1 << 20,
                interrupted: false,
                cpu_quota: None,
            },
        );
        assert_eq!(result.settings.mode, LoopMode::Closed);
        assert_eq!(
            (result.settings.connections, result.settings.threads),
            (4, 2)
        );
        assert_eq!(
            result.settings.target_order,
            meshbench_results::load::Order::RoundRobin
        );
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
        let mut churn = spec(Offer::Closed);
        churn.conn.requests_per_connection = Some(1);
        churn.conn.source_addrs = vec!["10.0.0.2".parse().unwrap()];
        let result = build(
            &churn,
            Measured {
                threads: 2,
                recorder: &rec,
                window_ns: 1_000_000_000,
                max_thread_utilization: 0.1,
                max_thread_busy: 0.1,
                max_thread_waiting: None,
                slack_ns: 0,
                ahead_ns: 0,
                wake_cost_ns: 0,
                timeline: Vec::new(),
                wall_start: SystemTime::UNIX_EPOCH,
                cpu_secs: 0.1,
                rss_max_bytes: 0,
                interrupted: false,
                cpu_quota: None,
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
        assert_eq!(
            result.settings.close_first,
            Some(meshbench_results::load::CloseFirst::Server)
        );
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
