//! Black-box tests of `--prometheus-remote-write`: the real binary pushing to a real
//! Prometheus (Debian's 2.42, `scripts/install-deps.sh`) with and without native histograms,
//! then PromQL checked against the run's JSON; to a receiver that is not there and to one that
//! never answers (the run still ends on time); and to a loopback server that checks the
//! headers and decodes every push.
//!
//! Everything listens on loopback; every process started is killed when its guard drops.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::prometheus::{value, Prometheus, PrometheusOptions};
use common::*;
use meshbench_live::remote_write::proto::{decode_body, is_stale, WriteRequest};

const LIMIT: Duration = Duration::from_secs(60);
/// What the run may take beyond its duration when the receiver is down or hangs: the writer
/// gives a failing receiver one second at the end, the rest is starting and stopping.
const SLACK: Duration = Duration::from_millis(2_500);

/// A Prometheus with the remote-write receiver on and nothing to scrape.
fn receiver(natives: bool) -> Prometheus {
    Prometheus::start(&PrometheusOptions {
        remote_write_receiver: true,
        native_histograms: natives,
        ..PrometheusOptions::default()
    })
}

fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// The backend with a share of 500s and an exponential delay, and the run flags that turn the
/// slowest answers into timeouts: every kind of count is non-zero.
fn noisy_backend() -> BackendProc {
    BackendProc::start(&["--delay", "exp:2ms", "--status", "500:3%"])
}

const RUN: [&str; 6] = ["--rate", "500", "-d", "5s", "--timeout", "8ms"];

/// Runs against a real Prometheus and checks PromQL against the JSON at the run's end.
fn against_prometheus(natives: bool) {
    let backend = noisy_backend();
    let prom = receiver(natives);
    let url = backend.url("/");
    let write = prom.write_url();
    let mut args: Vec<&str> = vec![&url];
    args.extend(RUN);
    args.extend(["--prometheus-remote-write", &write]);
    let (out, r) = run_json(&format!("rw-prom-{natives}"), &args, LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(!err.contains("warning: remote write"), "{err}");
    // Without the feature, Prometheus 2.42 refuses native histograms: said once, at the end.
    assert_eq!(
        err.matches("refused native histograms").count(),
        usize::from(!natives),
        "{err}"
    );

    // The run's end: the newest value pushed (range selectors leave stale markers out).
    let after = now_secs();
    let points = prom.query("meshbench_requests_total[10m]", after);
    assert_eq!(points.len(), 1, "{points:?}");
    let values = points[0]["values"].as_array().unwrap();
    let end = values.last().unwrap()[0].as_f64().unwrap();
    // Pushed while it ran, a point per second of data, not only at the end.
    assert!(values.len() >= 4, "{values:?}");

    let total = u(&r, "/requests/total");
    assert_eq!(prom.scalar("meshbench_requests_total", end), total as f64);
    assert_eq!(
        prom.scalar("meshbench_request_errors_total", end),
        u(&r, "/requests/errors") as f64
    );
    let codes: BTreeMap<String, f64> = prom
        .query("meshbench_responses_total", end)
        .iter()
        .map(|s| (s["metric"]["code"].as_str().unwrap().to_string(), value(s)))
        .collect();
    let json_codes: BTreeMap<String, f64> = r["status_codes"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(c, n)| (c.clone(), n.as_f64().unwrap()))
        .collect();
    assert_eq!(codes, json_codes);
    assert!(
        json_codes.get("500").is_some_and(|n| *n > 0.0),
        "{json_codes:?}"
    );
    let kinds = prom.query("meshbench_transport_errors_total", end);
    assert!(!kinds.is_empty());
    let mut transport = 0.0;
    for s in &kinds {
        let kind = s["metric"]["kind"].as_str().unwrap();
        let json = r["errors"][kind].as_f64().unwrap_or(0.0);
        assert_eq!(value(s), json, "kind {kind}");
        transport += json;
    }
    assert!(transport > 0.0, "timeouts at 8 ms: {}", r["errors"]);
    // The histogram counts responses (any status), not requests that got none.
    let responses: f64 = json_codes.values().sum();
    assert_eq!(responses, total as f64 - transport);
    assert_eq!(u(&r, "/latency_us/count") as f64, responses);
    assert_eq!(
        prom.scalar("meshbench_latency_seconds_count", end),
        responses
    );

    for (q, key) in [(0.5, "p50"), (0.9, "p90"), (0.99, "p99")] {
        let want = u(&r, &format!("/latency_us/{key}")) as f64 / 1e6;
        let classic = prom.scalar(
            &format!("histogram_quantile({q}, meshbench_latency_seconds_bucket)"),
            end,
        );
        let off = (classic - want).abs() / want;
        eprintln!(
            "{key}: JSON {want:.6} s, classic {classic:.6} s ({:.2} %)",
            off * 100.0
        );
        assert!(off < 0.02, "{key}: {classic} vs {want}");
        if natives {
            let native = prom.scalar(
                &format!("histogram_quantile({q}, meshbench_latency_seconds)"),
                end,
            );
            let off = (native - want).abs() / want;
            eprintln!("{key}: native {native:.6} s ({:.2} %)", off * 100.0);
            // Within a bucket of schema 6 (1.09 %) and the HDR's 0.1 %.
            assert!(off < 0.02, "{key}: native {native} vs {want}");
        }
    }
    if natives {
        assert_eq!(
            prom.scalar("histogram_count(meshbench_latency_seconds)", end),
            responses
        );
    } else {
        assert!(prom.query("meshbench_latency_seconds", end).is_empty());
    }

    // Stale markers: after the end, every series is gone, not lingering for 5 minutes.
    let live = prom.query(r#"{__name__=~"meshbench_.+"}"#, after);
    assert!(live.is_empty(), "still there after the end: {}", live.len());
    assert!(!prom.query(r#"{__name__=~"meshbench_.+"}"#, end).is_empty());
}

#[test]
fn prometheus_without_native_histograms_reads_what_the_json_says() {
    against_prometheus(false);
}

#[test]
fn prometheus_with_native_histograms_reads_what_the_json_says() {
    against_prometheus(true);
}

/// Runs `-d 3s` pushing to `write`; the run must end on time, exit 0, write its JSON, and say
/// what went wrong in one warning line.
fn ends_on_time(name: &str, write: &str) -> String {
    let backend = BackendProc::start(&[]);
    let url = backend.url("/");
    let t = Instant::now();
    let (out, r) = run_json(
        name,
        &[
            &url,
            "--rate",
            "200",
            "-d",
            "3s",
            "--prometheus-remote-write",
            write,
        ],
        LIMIT,
    );
    let took = t.elapsed();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(u(&r, "/requests/total") > 0);
    assert!(
        took < Duration::from_secs(3) + SLACK,
        "{name}: took {took:?}"
    );
    let err = stderr(&out);
    let warnings: Vec<String> = common::messages(&err)
        .into_iter()
        .filter(|l| l.contains("remote write"))
        .collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(warnings[0].starts_with("warning: remote write:"), "{err}");
    eprintln!("{name}: {took:?}; {}", warnings[0]);
    warnings[0].to_string()
}

#[test]
fn an_unreachable_receiver_does_not_hold_the_run() {
    // A port that was free a moment ago: nothing listens there.
    let closed = free_addr();
    let line = ends_on_time("rw-closed", &format!("http://{closed}/api/v1/write"));
    assert!(line.contains("connection refused"), "{line}");
    assert!(line.contains("0 samples pushed"), "{line}");
}

#[test]
fn a_receiver_that_never_answers_does_not_hold_the_run() {
    let silent = BadServer::start(Misbehaviour::Silent);
    let line = ends_on_time("rw-silent", &format!("http://{}/api/v1/write", silent.addr));
    assert!(line.contains("no answer"), "{line}");
}

/// A push as the receiver saw it: headers and the decoded request.
struct Push {
    headers: Vec<(String, String)>,
    request: WriteRequest,
}

#[test]
fn pushes_carry_the_header_and_decode_to_the_runs_figures() {
    let backend = noisy_backend();
    let rx = RecordingServer::start();
    let url = backend.url("/");
    let write = format!("http://{}/api/v1/write", rx.addr);
    let (out, r) = run_json(
        "rw-capture",
        &[
            &url,
            "--rate",
            "300",
            "-d",
            "3s",
            "--prometheus-remote-write",
            &write,
            "--prometheus-remote-write-header",
            "Authorization: Bearer x",
        ],
        LIMIT,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stderr(&out).contains("remote write"), "{}", stderr(&out));
    let got: Vec<Push> = std::mem::take(&mut *rx.seen.lock().unwrap())
        .into_iter()
        .map(|seen| Push {
            request: decode_body(&seen.body).expect("snappy protobuf"),
            headers: seen.headers,
        })
        .collect();
    assert!(got.len() >= 3, "{} pushes", got.len());

    for p in &got {
        let h = |n: &str| {
            p.headers
                .iter()
                .find(|(k, _)| k == n)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(h("authorization"), Some("Bearer x"));
        assert_eq!(h("content-encoding"), Some("snappy"));
        assert_eq!(h("content-type"), Some("application/x-protobuf"));
        assert_eq!(h("x-prometheus-remote-write-version"), Some("0.1.0"));
        assert!(h("user-agent").is_some_and(|v| v.starts_with("meshbench/")));
        for s in &p.request.timeseries {
            let names: Vec<&str> = s.labels.iter().map(|l| l.name.as_str()).collect();
            assert!(names.windows(2).all(|w| w[0] < w[1]), "sorted: {names:?}");
            assert!(s
                .label("__name__")
                .is_some_and(|n| n.starts_with("meshbench_")));
            assert_eq!(s.label("experiment"), Some("run"));
            assert_eq!(s.label("step"), Some("0"));
            assert_eq!(s.label("variant"), Some("url"));
        }
        // A histogram's classic series travel together: buckets with their count and sum.
        let names: BTreeSet<&str> = p
            .request
            .timeseries
            .iter()
            .filter_map(|s| s.label("__name__"))
            .collect();
        if names.contains("meshbench_latency_seconds_bucket") {
            assert!(names.contains("meshbench_latency_seconds_count"));
            assert!(names.contains("meshbench_latency_seconds_sum"));
        }
    }

    // Each series' history, in the order pushed.
    let mut history: BTreeMap<String, Vec<(i64, f64)>> = BTreeMap::new();
    let mut native_counts: Vec<u64> = Vec::new();
    for s in got.iter().flat_map(|p| &p.request.timeseries) {
        let id = s
            .labels
            .iter()
            .map(|l| format!("{}={}", l.name, l.value))
            .collect::<Vec<_>>()
            .join(",");
        let h = history.entry(id).or_default();
        h.extend(s.samples.iter().map(|x| (x.timestamp, x.value)));
        for x in &s.histograms {
            h.push((x.timestamp, x.sum));
            if let Some(meshbench_live::remote_write::proto::Count::Int(n)) = x.count {
                if !is_stale(x.sum) && s.label("__name__") == Some("meshbench_latency_seconds") {
                    native_counts.push(n);
                }
            }
        }
    }
    // Every series ends with a stale marker, after its last value.
    for (id, h) in &history {
        let (t_end, v_end) = *h.last().unwrap();
        assert!(is_stale(v_end), "{id} does not end stale");
        assert!(h.windows(2).all(|w| w[0].0 < w[1].0), "{id}: out of order");
        assert!(h.len() >= 2 && t_end > h[h.len() - 2].0);
    }
    let last_value = |name: &str, extra: &str| {
        let (_, h) = history
            .iter()
            .find(|(id, _)| id.starts_with(&format!("__name__={name},")) && id.contains(extra))
            .unwrap_or_else(|| panic!("no {name} {extra}"));
        h[h.len() - 2].1
    };
    assert_eq!(
        last_value("meshbench_requests_total", ""),
        u(&r, "/requests/total") as f64
    );
    for (code, n) in r["status_codes"].as_object().unwrap() {
        assert_eq!(
            last_value("meshbench_responses_total", &format!("code={code},")),
            n.as_f64().unwrap()
        );
    }
    let responses = u(&r, "/latency_us/count");
    assert_eq!(
        last_value("meshbench_latency_seconds_bucket", "le=+Inf"),
        responses as f64
    );
    // The receiver took native histograms (it took everything): they went out too.
    assert_eq!(native_counts.last(), Some(&responses));
}
