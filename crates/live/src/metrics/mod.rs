//! `/metrics`: the board as a Prometheus scrape target.
//!
//! Every scrape reads [`series::families`] of all steps on the board (the lock held only while
//! the families are built, never while a socket is written) and encodes them in the format the
//! scraper's `Accept` asks for ([`negotiate`]):
//!
//! - OpenMetrics 1.0.0 text through `prometheus-client` ([`openmetrics`]), what Prometheus
//!   asks for by default;
//! - length-delimited protobuf with classic *and* native histograms ([`proto`]), what
//!   Prometheus asks for with native histograms on;
//! - the Prometheus text format 0.0.4 ([`text`]) for anyone else (`curl`, `promtool`).
//!
//! The HTTP side is the crate's one server (`crate::http`) with this face's [`Limits`]:
//! connections are kept alive for the next scrape, and [`MetricsServer::wait_scraped`] lets a
//! run that is over keep serving until a scrape has read its final values.
//!
//! `GET` and `HEAD` of `/metrics` (any query string) are served; other paths `404`, other
//! methods `405`. The body is rendered (the board's lock held only while the families are
//! built) before a byte is written.

mod negotiate;
mod openmetrics;
pub mod proto;
mod text;

use std::net::SocketAddr;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

use meshbench_results::usage::now_ms;

pub use crate::http::{Limits, WriteLimit};
pub use negotiate::Format;

use crate::http::{Body, Request, Response, Routes, Server};
use crate::series::{self, Steps};
use crate::{Hub, LiveError};

/// Why a scrape could not be encoded (a bug in a family's name, never the peer's doing).
#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    #[error("metric {name}: {reason}")]
    Name {
        name: &'static str,
        reason: &'static str,
    },
    #[error("the {0} encoder failed")]
    Format(&'static str),
}

/// The path served.
const PATH: &str = "/metrics";

/// What a scraper may take: a request head within 10 s and 8 KiB, a response within 10 s, 32
/// connections at once, each kept alive for the next scrape.
pub fn limits() -> Limits {
    Limits {
        max_connections: 32,
        max_head_bytes: 8 * 1024,
        head_timeout: Duration::from_secs(10),
        answer_late_heads: true,
        // Longer than the usual scrape intervals (15 s, 30 s) so a scraper keeps its
        // connection; a shorter interval's scraper reconnects, which costs nothing.
        keep_alive: Some(Duration::from_secs(65)),
        write: WriteLimit::Whole(Duration::from_secs(10)),
    }
}

/// The face's routes, and what it knows of the scrapes served.
struct Scrapes {
    hub: Hub,
    /// The newest board sequence a complete scrape response carried, `None` before the first.
    served: Mutex<Option<u64>>,
    served_changed: Condvar,
}

impl Scrapes {
    fn served_guard(&self) -> MutexGuard<'_, Option<u64>> {
        self.served.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Routes for Scrapes {
    /// The board sequence a `GET` scrape carried.
    type Receipt = Option<u64>;

    fn answer(&self, request: &Request) -> (Response, Option<u64>) {
        if request.path != PATH {
            let r = Response::text(404, "not found: the metrics are at /metrics");
            return (r, None);
        }
        if request.method != "GET" && request.method != "HEAD" {
            let r = Response::text(405, "/metrics takes GET (or HEAD)").with("Allow", "GET, HEAD");
            return (r, None);
        }
        let format = negotiate::choose(request.accept.as_deref());
        match render(&self.hub, format) {
            Ok((seq, body)) => (
                Response::new(200, format.content_type(), Body::Owned(body)).with("Vary", "Accept"),
                (request.method == "GET").then_some(seq),
            ),
            Err(e) => (Response::text(500, &e.to_string()), None),
        }
    }

    fn written(&self, seq: Option<u64>) {
        let Some(seq) = seq else { return };
        let mut s = self.served_guard();
        *s = Some(s.map_or(seq, |old| old.max(seq)));
        drop(s);
        self.served_changed.notify_all();
    }
}

/// A running `/metrics` server; stops when dropped.
pub struct MetricsServer {
    server: Server<Scrapes>,
}

impl MetricsServer {
    /// Serves the hub's board at `http://addr/metrics` on its own threads, with the default
    /// [`limits`].
    pub fn start(addr: SocketAddr, hub: Hub) -> Result<MetricsServer, LiveError> {
        MetricsServer::start_with(addr, hub, limits())
    }

    /// [`MetricsServer::start`] with other limits.
    pub fn start_with(
        addr: SocketAddr,
        hub: Hub,
        limits: Limits,
    ) -> Result<MetricsServer, LiveError> {
        let scrapes = Scrapes {
            hub,
            served: Mutex::new(None),
            served_changed: Condvar::new(),
        };
        let server = Server::start(addr, "metrics", scrapes, limits)?;
        Ok(MetricsServer { server })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.server.local_addr()
    }

    /// Waits until a scrape has read the board as it is now (its final values, once the run
    /// is over), or `timeout` passes; true if one did. A scrape counts once its whole response
    /// was handed to the socket.
    pub fn wait_scraped(&self, timeout: Duration) -> bool {
        let scrapes = self.server.routes();
        let now = scrapes.hub.board().seq;
        let served = scrapes.served_guard();
        let (served, _) = scrapes
            .served_changed
            .wait_timeout_while(served, timeout, |s| s.is_none_or(|s| s < now))
            .unwrap_or_else(|p| p.into_inner());
        served.is_some_and(|s| s >= now)
    }

    /// Stops serving: no new connections, and open ones are shut down.
    pub fn stop(self) {
        drop(self);
    }
}

/// One scrape: the board's sequence number when it was read, and the body in `format`.
pub fn render(hub: &Hub, format: Format) -> Result<(u64, Vec<u8>), EncodeError> {
    let (seq, families) = {
        let board = hub.board();
        (board.seq, series::families(&board, Steps::All, now_ms()))
    };
    let body = match format {
        Format::Text => text::encode(&families).into_bytes(),
        Format::OpenMetrics => openmetrics::encode(families)?.into_bytes(),
        Format::Protobuf => proto::encode(&families),
    };
    Ok((seq, body))
}

#[cfg(test)]
pub(crate) mod tests {
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::time::Instant;

    use meshbench_engine::recorder::{ErrorKind, Interval};
    use meshbench_results::Sample;

    use super::*;
    use crate::series::Family;
    use crate::{names, Scope, StepInfo};

    fn scope() -> Scope {
        Scope {
            experiment: "e \"quoted\"".into(),
            step: 0,
            variant: "baseline".into(),
        }
    }

    /// A hub with one running step: a few seconds of responses, failures and a role.
    pub(crate) fn sample_hub() -> Hub {
        let hub = Hub::new();
        hub.step_started(StepInfo {
            scope: scope(),
            load: "100 rps".into(),
            target_rps: Some(100.0),
            steps: 1,
            step_secs: 10.0,
            left_after_secs: 0.0,
            started_ms: now_ms(),
        });
        for s in 0..3u32 {
            let mut iv = Interval::new(s);
            for i in 0..200u64 {
                iv.counts.response(if i % 50 == 0 { 503 } else { 200 });
                iv.latency.record(80 + i * i).unwrap();
                // Sends on schedule (lag 0) among them.
                iv.lag.record(i % 100).unwrap();
            }
            iv.counts.error(ErrorKind::Timeout);
            iv.sends = 201;
            let role = Sample {
                t_ms: 1_000 * (s as u64 + 1),
                cpu_ns: 100_000_000 * s as u64,
                rss_bytes: 20 << 20,
                working_set_bytes: None,
                rx_bytes: 1000 * s as u64,
                tx_bytes: 2000 * s as u64,
                connections: 4,
            };
            hub.second(
                &scope(),
                &iv,
                &[(meshbench_results::Role::from_word("proxy"), role)],
                1_000 * (s as u64 + 1),
            );
        }
        hub
    }

    pub(crate) fn sample_families() -> Vec<Family> {
        series::families(&sample_hub().board(), Steps::All, now_ms())
    }

    fn quick() -> Limits {
        Limits {
            max_connections: 4,
            max_head_bytes: 1024,
            head_timeout: Duration::from_millis(500),
            keep_alive: Some(Duration::from_secs(2)),
            write: WriteLimit::Whole(Duration::from_secs(2)),
            ..limits()
        }
    }

    fn server(limits: Limits) -> MetricsServer {
        MetricsServer::start_with("127.0.0.1:0".parse().unwrap(), sample_hub(), limits).unwrap()
    }

    fn connect(s: &MetricsServer) -> TcpStream {
        let c = TcpStream::connect(s.local_addr()).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        c
    }

    /// One response: status, headers (lower-case names) and body, by Content-Length. Reads
    /// no byte past it, so responses on one connection can be read in turn.
    fn response(c: &mut TcpStream) -> (u16, Vec<(String, String)>, Vec<u8>) {
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            c.read_exact(&mut byte).expect("a response head");
            head.push(byte[0]);
        }
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut r = httparse::Response::new(&mut headers);
        assert!(r.parse(&head).unwrap().is_complete());
        let hs: Vec<(String, String)> = r
            .headers
            .iter()
            .map(|h| {
                (
                    h.name.to_ascii_lowercase(),
                    String::from_utf8_lossy(h.value).into_owned(),
                )
            })
            .collect();
        let len: usize = header(&hs, "content-length").parse().unwrap();
        let mut body = vec![0u8; len];
        c.read_exact(&mut body).expect("the whole body");
        (r.code.unwrap(), hs, body)
    }

    fn get(s: &MetricsServer, request: &str) -> (u16, Vec<(String, String)>, Vec<u8>) {
        let mut c = connect(s);
        c.write_all(request.as_bytes()).unwrap();
        response(&mut c)
    }

    fn header<'a>(hs: &'a [(String, String)], name: &str) -> &'a str {
        hs.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .unwrap_or("")
    }

    /// Reads until the peer closes; what came.
    fn until_closed(c: &mut TcpStream) -> String {
        let mut all = Vec::new();
        let _ = c.read_to_end(&mut all);
        String::from_utf8_lossy(&all).into_owned()
    }

    #[test]
    fn each_format_as_asked() {
        let s = server(quick());
        let (status, hs, body) = get(&s, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(status, 200);
        assert_eq!(header(&hs, "content-type"), Format::Text.content_type());
        assert!(String::from_utf8(body)
            .unwrap()
            .contains("# TYPE meshbench_requests_total counter"));

        let (_, hs, body) = get(
            &s,
            "GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text; version=1.0.0\r\n\r\n",
        );
        assert_eq!(
            header(&hs, "content-type"),
            Format::OpenMetrics.content_type()
        );
        assert!(String::from_utf8(body).unwrap().ends_with("# EOF\n"));

        let (_, hs, body) = get(
            &s,
            "GET /metrics HTTP/1.1\r\nAccept: application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.9,*/*;q=0.1\r\n\r\n",
        );
        assert_eq!(header(&hs, "content-type"), Format::Protobuf.content_type());
        let families = proto::decode(&body).unwrap();
        let requests = families.iter().find(|f| f.name == names::REQUESTS).unwrap();
        // 3 seconds of 200 responses and 1 timeout.
        assert_eq!(requests.metric[0].counter.as_ref().unwrap().value, 603.0);
        assert_eq!(header(&hs, "vary"), "Accept");
    }

    #[test]
    fn other_paths_and_methods_are_refused() {
        let s = server(quick());
        assert_eq!(get(&s, "GET / HTTP/1.1\r\n\r\n").0, 404);
        assert_eq!(get(&s, "GET /metricsx HTTP/1.1\r\n\r\n").0, 404);
        let (status, hs, _) = get(&s, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
        assert_eq!(status, 405);
        assert_eq!(header(&hs, "allow"), "GET, HEAD");
        assert_eq!(get(&s, "DELETE /metrics HTTP/1.1\r\n\r\n").0, 405);
        assert_eq!(get(&s, "GET /metrics?name[]=x HTTP/1.1\r\n\r\n").0, 200);
        assert_eq!(get(&s, "garbage\r\n\r\n").0, 400);
    }

    #[test]
    fn head_has_no_body_and_keep_alive_serves_twice() {
        let s = server(quick());
        let mut c = connect(&s);
        c.write_all(b"HEAD /metrics HTTP/1.1\r\n\r\n").unwrap();
        // Parse the head alone: Content-Length says the GET body's size, no body follows.
        let mut buf = [0u8; 4096];
        let n = c.read(&mut buf).unwrap();
        let text = String::from_utf8_lossy(&buf[..n]).into_owned();
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
        assert!(text.ends_with("\r\n\r\n"), "no body after a HEAD: {text}");
        // Pipelined: two GETs in one write, two answers.
        c.write_all(
            b"GET /metrics HTTP/1.1\r\n\r\nGET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n",
        )
        .unwrap();
        let (a, ha, _) = response(&mut c);
        assert_eq!((a, header(&ha, "connection")), (200, "keep-alive"));
        let (b, hb, _) = response(&mut c);
        assert_eq!((b, header(&hb, "connection")), (200, "close"));
        assert_eq!(until_closed(&mut c), "");
    }

    #[test]
    fn a_slow_head_is_cut_off() {
        let limits = quick();
        let s = server(limits.clone());
        let mut c = connect(&s);
        let t = Instant::now();
        c.write_all(b"GET /metrics HTTP/1.1\r\nX-Slow: ").unwrap();
        // Keep dribbling: each byte arrives well within any per-read timeout.
        for _ in 0..8 {
            std::thread::sleep(Duration::from_millis(100));
            if c.write_all(b"a").is_err() {
                break;
            }
        }
        let rest = until_closed(&mut c);
        assert!(rest.starts_with("HTTP/1.1 408 "), "{rest}");
        let took = t.elapsed();
        assert!(
            took < limits.head_timeout + Duration::from_secs(1),
            "{took:?}"
        );
        // A connection that never says anything is closed too, without an answer.
        let mut quiet = connect(&s);
        assert_eq!(until_closed(&mut quiet), "");
    }

    #[test]
    fn a_huge_head_is_refused() {
        let s = server(quick());
        let mut c = connect(&s);
        let big = format!(
            "GET /metrics HTTP/1.1\r\nX-Big: {}\r\n\r\n",
            "a".repeat(4000)
        );
        let _ = c.write_all(big.as_bytes());
        let rest = until_closed(&mut c);
        assert!(rest.starts_with("HTTP/1.1 431 "), "{rest}");
    }

    #[test]
    fn connections_are_bounded() {
        // Idle connections must outlive the test's steps: a long head timeout.
        let limits = Limits {
            head_timeout: Duration::from_secs(10),
            ..quick()
        };
        let s = server(limits.clone());
        let idle: Vec<TcpStream> = (0..limits.max_connections).map(|_| connect(&s)).collect();
        // Let the acceptor take them all.
        let t = Instant::now();
        while s.server.open() < limits.max_connections {
            assert!(t.elapsed() < Duration::from_secs(5));
            std::thread::sleep(Duration::from_millis(5));
        }
        // (Read only: a request sent to a socket closed unread could reset the answer away.)
        let mut extra = connect(&s);
        assert!(until_closed(&mut extra).starts_with("HTTP/1.1 503 "));
        drop(idle);
        // Room again once they are gone.
        let t = Instant::now();
        loop {
            let (status, _, _) = get(&s, "GET /metrics HTTP/1.1\r\n\r\n");
            if status == 200 {
                break;
            }
            assert!(t.elapsed() < Duration::from_secs(5), "still {status}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn wait_scraped_wants_a_scrape_of_the_newest_board() {
        let s = server(quick());
        assert!(!s.wait_scraped(Duration::from_millis(50)), "no scrape yet");
        assert_eq!(get(&s, "GET /metrics HTTP/1.1\r\n\r\n").0, 200);
        // (The server marks the scrape just after the write that the client has seen.)
        assert!(s.wait_scraped(Duration::from_secs(2)));
        // The board changes: the earlier scrape no longer counts; a HEAD does not either.
        s.server.routes().hub.finished(crate::Done {
            report: None,
            outcome: "done".into(),
        });
        assert!(!s.wait_scraped(Duration::from_millis(50)));
        let mut head = connect(&s);
        head.write_all(b"HEAD /metrics HTTP/1.1\r\nConnection: close\r\n\r\n")
            .unwrap();
        assert!(until_closed(&mut head).starts_with("HTTP/1.1 200 OK\r\n"));
        assert!(!s.wait_scraped(Duration::from_millis(50)));
        // A scrape while waiting ends the wait.
        let addr = s.local_addr();
        let scraper = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            let mut c = TcpStream::connect(addr).unwrap();
            c.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
            response(&mut c).0
        });
        let t = Instant::now();
        assert!(s.wait_scraped(Duration::from_secs(5)));
        assert!(t.elapsed() < Duration::from_secs(4));
        assert_eq!(scraper.join().unwrap(), 200);
    }

    #[test]
    fn stop_closes_the_listener_and_open_connections() {
        let s = server(quick());
        let addr = s.local_addr();
        let mut open = connect(&s);
        open.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!(response(&mut open).0, 200);
        let t = Instant::now();
        s.stop();
        assert!(t.elapsed() < Duration::from_secs(2));
        assert_eq!(until_closed(&mut open), "");
        assert!(TcpStream::connect(addr).is_err());
    }

    #[test]
    fn a_taken_port_is_a_bind_error() {
        let s = server(quick());
        let err = MetricsServer::start(s.local_addr(), Hub::new())
            .err()
            .unwrap();
        assert!(matches!(err, LiveError::Bind { addr, .. } if addr == s.local_addr()));
    }

    #[test]
    fn an_empty_board_is_an_empty_scrape() {
        let hub = Hub::new();
        assert!(render(&hub, Format::Text).unwrap().1.is_empty());
        assert!(render(&hub, Format::Protobuf).unwrap().1.is_empty());
        assert_eq!(render(&hub, Format::OpenMetrics).unwrap().1, b"# EOF\n");
    }
}
