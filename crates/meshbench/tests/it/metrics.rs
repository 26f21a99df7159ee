//! `/metrics` against the real readers of it: `meshbench run --metrics-listen` loads the
//! backend while `promtool check metrics` lints a scrape taken mid-run and a real Prometheus
//! (Debian's 2.42, started by the test with its own storage) scrapes the run every second.
//! Once the run is over, Prometheus's figures at its last scrape must be the result JSON's:
//! counters exactly, p99 within one histogram bucket (2^(1/64), 1.09 %), from the classic
//! `le` buckets (OpenMetrics text) and, with `--enable-feature=native-histograms`, from the
//! native histogram (protobuf). `--metrics-linger` is what lets a 1 s scrape catch the end.
//!
//! Every process started here is killed when its guard drops, failing test included; every
//! wait is bounded; everything listens on loopback.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::prometheus::{Prometheus, PrometheusOptions};
use common::*;

/// One native bucket's width: the most a quantile read from the buckets can differ from the
/// HDR figure it falls next to.
fn bucket_width() -> f64 {
    (1.0f64 / 64.0).exp2() - 1.0
}

/// A child process killed (and reaped) when dropped.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An HTTP answer: status, headers with lower-case names, body.
type Answer = (u16, Vec<(String, String)>, Vec<u8>);

/// A plain HTTP/1.0 GET (no chunked answers, the server closes).
fn http_get(addr: SocketAddr, target: &str, accept: Option<&str>) -> std::io::Result<Answer> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.set_write_timeout(Some(Duration::from_secs(10)))?;
    let accept = accept.map_or(String::new(), |a| format!("Accept: {a}\r\n"));
    write!(s, "GET {target} HTTP/1.0\r\nHost: {addr}\r\n{accept}\r\n")?;
    let mut all = Vec::new();
    s.read_to_end(&mut all)?;
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut r = httparse::Response::new(&mut headers);
    let n = match r.parse(&all) {
        Ok(httparse::Status::Complete(n)) => n,
        _ => return Err(std::io::Error::other("not an HTTP response")),
    };
    let hs = header_list(r.headers);
    Ok((r.code.unwrap_or(0), hs, all[n..].to_vec()))
}

fn header<'a>(hs: &'a [(String, String)], name: &str) -> &'a str {
    hs.iter()
        .find(|(k, _)| k == name)
        .map_or("", |(_, v)| v.as_str())
}

/// A real Prometheus scraping `target` every second.
fn prometheus(target: SocketAddr, native: bool) -> Prometheus {
    Prometheus::start(&PrometheusOptions {
        scrape: vec![target],
        native_histograms: native,
        ..PrometheusOptions::default()
    })
}

/// `promtool check metrics` on `text`: its exit status and what it said.
fn promtool_check(text: &[u8]) -> (bool, String) {
    let mut child = Guard(
        Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("promtool runs (scripts/install-deps.sh installs it)"),
    );
    let mut stdin = child.0.stdin.take().unwrap();
    stdin.write_all(text).unwrap();
    drop(stdin);
    let t = Instant::now();
    let status = loop {
        if let Some(s) = child.0.try_wait().unwrap() {
            break s;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "promtool hangs");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut said = String::new();
    let _ = child.0.stdout.take().unwrap().read_to_string(&mut said);
    let _ = child.0.stderr.take().unwrap().read_to_string(&mut said);
    (status.success(), said)
}

/// The value of the first sample of `name` in a text-format scrape.
fn text_value(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(&format!("{name}{{")))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// What a run looked like to Prometheus, next to the result JSON.
struct Seen {
    json: serde_json::Value,
    prometheus: Prometheus,
    /// When Prometheus last scraped the run (Unix seconds).
    last_scrape: f64,
    /// Scrapes Prometheus took of the run.
    scrapes: usize,
}

/// Runs `meshbench run` at 500 rps for 6 s against the backend (2 % 503s, so errors are not
/// 0) with `/metrics` on, scraped every second by a Prometheus started before it; lints one
/// scrape mid-run with promtool. Returns once Prometheus has seen the run end.
fn run_scraped(native: bool) -> Seen {
    let backend = BackendProc::start(&["--status", "503:2%", "--delay", "uniform:200us..2ms"]);
    let metrics = free_addr();
    let prometheus = prometheus(metrics, native);
    prometheus.wait_first_scrape();
    let json_path = temp_json(if native { "metrics-native" } else { "metrics" });
    let _ = std::fs::remove_file(&json_path);
    let url = backend.url("/");
    let listen = metrics.to_string();
    let json_arg = json_path.display().to_string();
    let mut run = Guard(spawn_meshbench(&[
        "run",
        &url,
        "--rate",
        "500",
        "-d",
        "6s",
        "--metrics-listen",
        &listen,
        "--metrics-linger",
        "5s",
        "--json",
        &json_arg,
    ]));
    // Its stderr, line by line, kept for messages.
    let (lines_tx, lines) = mpsc::channel::<String>();
    let stderr = run.0.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            all.push_str(&line);
            all.push('\n');
            let _ = lines_tx.send(line);
        }
        all
    });
    let stdout = run.0.stdout.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = BufReader::new(stdout).read_to_string(&mut s);
        s
    });

    // The address it prints is the one asked for.
    let announced = loop {
        let line = lines
            .recv_timeout(Duration::from_secs(15))
            .expect("meshbench announces /metrics on stderr");
        if let Some(u) = line.strip_prefix("metrics: ") {
            break u.trim().to_string();
        }
    };
    assert_eq!(announced, format!("http://{metrics}/metrics"));

    // Mid-run: a scrape with counts in it passes promtool, lint included.
    let t = Instant::now();
    let text = loop {
        if let Ok((200, hs, body)) = http_get(metrics, "/metrics", None) {
            assert!(
                header(&hs, "content-type").starts_with("text/plain; version=0.0.4"),
                "{hs:?}"
            );
            let text = String::from_utf8(body).expect("UTF-8 text");
            if text_value(&text, "meshbench_requests_total").is_some_and(|v| v > 0.0) {
                break text;
            }
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "no counts on /metrics"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    // The other two formats, as Prometheus asks for them.
    let (_, hs, body) = http_get(
        metrics,
        "/metrics",
        Some("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"),
    )
    .unwrap();
    assert_eq!(
        header(&hs, "content-type"),
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    assert!(body.ends_with(b"# EOF\n"));
    let (_, hs, body) = http_get(
        metrics,
        "/metrics",
        Some("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited,*/*;q=0.1"),
    )
    .unwrap();
    assert!(header(&hs, "content-type").starts_with("application/vnd.google.protobuf;"));
    let families = meshbench_live::metrics::proto::decode(&body).expect("delimited protobuf");
    assert!(families
        .iter()
        .any(|f| f.name == "meshbench_latency_seconds"
            && f.metric[0]
                .histogram
                .as_ref()
                .is_some_and(|h| h.schema == 6)));
    let (ok, said) = promtool_check(text.as_bytes());
    assert!(
        ok && said.trim().is_empty(),
        "promtool check metrics: {said}"
    );
    eprintln!(
        "promtool check metrics: clean ({} lines, {} bytes)",
        text.lines().count(),
        text.len()
    );

    // The run ends on its own (6 s, then at most 5 s of linger).
    let t = Instant::now();
    let status = loop {
        if let Some(s) = run.0.try_wait().unwrap() {
            break s;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "meshbench did not finish"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let err = reader.join().unwrap();
    let _ = out_reader.join();
    assert!(status.success(), "meshbench failed: {err}");
    assert!(
        !err.contains("no scrape read the final values"),
        "the linger ended without a scrape of the final values: {err}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json_path).expect("the JSON result"))
            .expect("valid JSON");
    let _ = std::fs::remove_file(&json_path);
    assert_valid(&json);

    // Prometheus has taken every scrape of the run once its next one failed.
    let t = Instant::now();
    while prometheus.target_health() != "down" {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "prometheus never noticed the end: {}",
            prometheus.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The raw samples of the run; the last one is the last scrape (a range selector shows no
    // staleness marker, where an instant query after it would show nothing).
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let r = prometheus.query("meshbench_requests_total{experiment=\"run\"}[5m]", now);
    assert_eq!(r.len(), 1, "{r:?}");
    let values = r[0]["values"].as_array().unwrap().clone();
    let last_scrape = values.last().unwrap()[0].as_f64().unwrap();
    Seen {
        json,
        prometheus,
        last_scrape,
        scrapes: values.len(),
    }
}

const SCOPE: &str = "{experiment=\"run\",step=\"0\",variant=\"url\"}";

/// Counters at the last scrape are the result's, exactly.
fn counters_are_exact(s: &Seen) {
    let p = &s.prometheus;
    let total = u(&s.json, "/requests/total");
    let errors = u(&s.json, "/requests/errors");
    assert!(errors > 0, "the backend's 503s count as errors");
    let at = s.last_scrape;
    let requests = p.scalar(&format!("meshbench_requests_total{SCOPE}"), at);
    let failed = p.scalar(&format!("meshbench_request_errors_total{SCOPE}"), at);
    eprintln!(
        "{} scrapes; last: requests {requests} (JSON {total}), errors {failed} (JSON {errors})",
        s.scrapes
    );
    assert!(s.scrapes >= 3, "Prometheus scraped the run as it went");
    assert_eq!(requests, total as f64);
    assert_eq!(failed, errors as f64);
    let by_code = p.scalar(
        &format!(
            "sum(meshbench_responses_total{SCOPE}) + sum(meshbench_transport_errors_total{SCOPE})"
        ),
        at,
    );
    assert_eq!(by_code, total as f64, "codes and kinds add up to the total");
}

/// A PromQL p99 next to the JSON's, within one bucket.
fn p99_within_a_bucket(s: &Seen, query: &str, what: &str) {
    let json_p99 = f(&s.json, "/latency_us/p99") / 1e6;
    let promql = s.prometheus.scalar(query, s.last_scrape);
    let off = (promql - json_p99) / json_p99;
    eprintln!(
        "{what} p99: PromQL {:.1} µs, JSON {:.1} µs ({:+.3} %)",
        promql * 1e6,
        json_p99 * 1e6,
        off * 100.0
    );
    assert!(
        off.abs() <= bucket_width() + 1e-9,
        "{what}: {promql} vs {json_p99} ({:+.3} %)",
        off * 100.0
    );
}

#[test]
fn prometheus_reads_the_run_from_openmetrics_text() {
    let s = run_scraped(false);
    counters_are_exact(&s);
    let count = s.prometheus.scalar(
        &format!("meshbench_latency_seconds_count{SCOPE}"),
        s.last_scrape,
    );
    assert_eq!(count, u(&s.json, "/latency_us/count") as f64);
    p99_within_a_bucket(
        &s,
        &format!("histogram_quantile(0.99, meshbench_latency_seconds_bucket{SCOPE})"),
        "classic",
    );
}

#[test]
fn prometheus_reads_native_histograms_from_protobuf() {
    let s = run_scraped(true);
    counters_are_exact(&s);
    let count = s.prometheus.scalar(
        &format!("histogram_count(meshbench_latency_seconds{SCOPE})"),
        s.last_scrape,
    );
    assert_eq!(count, u(&s.json, "/latency_us/count") as f64);
    p99_within_a_bucket(
        &s,
        &format!("histogram_quantile(0.99, meshbench_latency_seconds{SCOPE})"),
        "native",
    );
}
