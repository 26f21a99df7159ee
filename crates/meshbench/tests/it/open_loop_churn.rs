//! Open loop with a new connection per request, held against a client that shares nothing
//! with the engine's loop: blocking sockets (std, rustls) and quinn + h3 on tokio, one request
//! at a time at the same rate, each connect + request + response timed from its own start.
//!
//! It guards what once went wrong unnoticed: the loop slept through its connects and
//! handshakes until its next send, so every new connection's request carried the pacer's idle
//! time (p50 9 ms at 200 req/s where the connection took 0.16 ms). Agreement must hold for
//! plain HTTP/1.1, TLS and HTTP/3: meshbench's p50 within 1.5x (+0.2 ms) of the independent
//! client's, the median of interleaved rounds on this shared machine.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;

const LIMIT: Duration = Duration::from_secs(60);
const RATE: u32 = 200;
const SECONDS: u32 = 2;
const ROUNDS: usize = 3;

/// Which connections the independent client makes.
#[derive(Clone, Copy, Debug)]
enum Wire {
    Plain,
    Tls,
    Http3,
}

/// One request on a new connection, timed from the connect to the response's last byte.
trait Client {
    fn one(&mut self) -> Duration;
}

/// HTTP/1.1 over a blocking socket: connect, GET, read the response (its Content-Length), close.
struct PlainClient {
    addr: SocketAddr,
    tls: Option<Arc<rustls::ClientConfig>>,
}

impl Client for PlainClient {
    fn one(&mut self) -> Duration {
        let start = Instant::now();
        let tcp = TcpStream::connect(self.addr).expect("connect");
        tcp.set_nodelay(true).unwrap();
        let request = format!(
            "GET / HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.addr
        );
        match &self.tls {
            None => exchange(tcp, request.as_bytes()),
            Some(config) => {
                let name = rustls::pki_types::ServerName::IpAddress(self.addr.ip().into());
                let session = rustls::ClientConnection::new(config.clone(), name).expect("TLS");
                exchange(rustls::StreamOwned::new(session, tcp), request.as_bytes());
            }
        }
        start.elapsed()
    }
}

/// Writes `request` and reads one response whole (headers, then Content-Length bytes).
fn exchange(mut s: impl Read + Write, request: &[u8]) {
    s.write_all(request).expect("send");
    let mut got = Vec::with_capacity(2048);
    let mut buf = [0u8; 4096];
    loop {
        let n = s.read(&mut buf).expect("read");
        assert!(n > 0, "the server closed before the whole response");
        got.extend_from_slice(&buf[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut response = httparse::Response::new(&mut headers);
        if let Ok(httparse::Status::Complete(head)) = response.parse(&got) {
            assert_eq!(response.code, Some(200));
            let length: usize = response
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                .map(|h| std::str::from_utf8(h.value).unwrap().parse().unwrap())
                .expect("a Content-Length");
            if got.len() >= head + length {
                return;
            }
        }
    }
}

/// HTTP/3 with quinn and h3 on a tokio runtime: a new QUIC connection per request.
struct QuicClient {
    addr: SocketAddr,
    runtime: tokio::runtime::Runtime,
    endpoint: quinn::Endpoint,
}

impl QuicClient {
    fn new(addr: SocketAddr, tls: Arc<rustls::ClientConfig>) -> Self {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut tls = (*tls).clone();
        tls.alpn_protocols = vec![b"h3".to_vec()];
        tls.enable_early_data = false;
        let quic = quinn::crypto::rustls::QuicClientConfig::try_from(tls).expect("QUIC TLS");
        let endpoint = runtime.block_on(async {
            let mut e = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
            e.set_default_client_config(quinn::ClientConfig::new(Arc::new(quic)));
            e
        });
        QuicClient {
            addr,
            runtime,
            endpoint,
        }
    }
}

impl Client for QuicClient {
    fn one(&mut self) -> Duration {
        let (endpoint, addr) = (&self.endpoint, self.addr);
        self.runtime.block_on(async move {
            let start = Instant::now();
            let conn = endpoint
                .connect(addr, "127.0.0.1")
                .unwrap()
                .await
                .expect("QUIC handshake");
            let (mut driver, mut send) = h3::client::new(h3_quinn::Connection::new(conn.clone()))
                .await
                .expect("h3");
            let drive = tokio::spawn(async move {
                std::future::poll_fn(|cx| driver.poll_close(cx)).await;
            });
            let request = http::Request::get(format!("https://{addr}/"))
                .body(())
                .unwrap();
            let mut stream = send.send_request(request).await.expect("request");
            stream.finish().await.expect("finish");
            let response = stream.recv_response().await.expect("response");
            assert_eq!(response.status(), 200);
            while stream.recv_data().await.expect("body").is_some() {}
            let took = start.elapsed();
            conn.close(0u32.into(), b"done");
            drive.abort();
            took
        })
    }
}

/// The independent client's p50 (ms) at `RATE` for `SECONDS`: each request starts at its
/// scheduled time (slept to 300 µs before, then spun), one at a time.
fn independent_p50(client: &mut dyn Client) -> f64 {
    let gap = Duration::from_secs(1) / RATE;
    let start = Instant::now() + Duration::from_millis(20);
    let mut took = Vec::new();
    for i in 0..RATE * SECONDS {
        let due = start + gap * i;
        if let Some(wait) = due
            .checked_duration_since(Instant::now())
            .and_then(|d| d.checked_sub(Duration::from_micros(300)))
        {
            std::thread::sleep(wait);
        }
        while Instant::now() < due {
            std::hint::spin_loop();
        }
        took.push(client.one().as_secs_f64() * 1e3);
    }
    median(&mut took)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn client_tls(ca: &Path) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

/// meshbench's p50 (ms) in open loop at `RATE`, a new connection per request.
fn meshbench_p50(backend: &ProtoBackend, wire: Wire) -> f64 {
    let rate = RATE.to_string();
    let duration = format!("{SECONDS}s");
    let mut rest = vec![
        "-r",
        &rate,
        "-d",
        &duration,
        "--requests-per-connection",
        "1",
    ];
    if let Wire::Http3 = wire {
        rest.push("--http3");
    }
    let (out, r) = run_json_owned("churn-truth", &backend.args("/", &rest), LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(u(&r, "/requests/errors"), 0, "{}", stdout(&out));
    f(&r, "/latency_us/p50") / 1e3
}

/// Interleaves `ROUNDS` rounds of both clients; asserts meshbench's median p50 is within 1.5x
/// (+0.2 ms) of the independent client's.
fn agrees_with_an_independent_client(wire: Wire) {
    let proto = match wire {
        Wire::Plain => Proto::H1,
        Wire::Tls | Wire::Http3 => Proto::H1Tls,
    };
    let extra: &[&str] = match wire {
        Wire::Http3 => &["--http3"],
        _ => &[],
    };
    let backend = ProtoBackend::start(proto, extra);
    let addr = backend.backend.addr;
    let tls = proto
        .tls()
        .then(|| client_tls(&backend.tls_dir.join("ca.pem")));
    let mut client: Box<dyn Client> = match wire {
        Wire::Http3 => Box::new(QuicClient::new(addr, tls.clone().unwrap())),
        _ => Box::new(PlainClient { addr, tls }),
    };
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        theirs.push(independent_p50(client.as_mut()));
        ours.push(meshbench_p50(&backend, wire));
    }
    let (ours_p50, theirs_p50) = (median(&mut ours), median(&mut theirs));
    eprintln!("{wire:?}: p50 meshbench {ours:?} ms, independent {theirs:?} ms");
    assert!(
        ours_p50 <= 1.5 * theirs_p50 + 0.2,
        "{wire:?}: meshbench p50 {ours_p50:.3} ms against {theirs_p50:.3} ms for an independent \
         client (rounds: ours {ours:?}, theirs {theirs:?})"
    );
}

#[test]
fn open_loop_churn_over_http1_takes_no_pacer_idle_time() {
    agrees_with_an_independent_client(Wire::Plain);
}

#[test]
fn open_loop_churn_over_tls_takes_no_pacer_idle_time() {
    agrees_with_an_independent_client(Wire::Tls);
}

#[test]
fn open_loop_churn_over_http3_takes_no_pacer_idle_time() {
    agrees_with_an_independent_client(Wire::Http3);
}
