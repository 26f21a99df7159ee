//! The backend speaks HTTP/1.1 to any client, not only to meshbench: raw sockets check sizes,
//! statuses, delays, echo, HEAD, pipelining, chunked request bodies and bad requests.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{header_list, BackendProc};

/// A response as read off the wire: status, headers (lower-case names), body.
type Response = (u16, Vec<(String, String)>, Vec<u8>);

/// Sends raw bytes and reads until `responses` complete responses arrived (by Content-Length).
fn exchange(backend: &BackendProc, raw: &[u8], responses: usize) -> Vec<Response> {
    let mut s = TcpStream::connect(backend.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = s.write_all(raw); // a refused request may be cut short; the answer still comes
    let mut buf = Vec::new();
    let mut out = Vec::new();
    let mut chunk = [0u8; 65536];
    while out.len() < responses {
        let n = s.read(&mut chunk).expect("response within 5 s");
        assert!(n > 0 || !buf.is_empty(), "connection closed early");
        buf.extend_from_slice(&chunk[..n]);
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut resp = httparse::Response::new(&mut headers);
            let Ok(httparse::Status::Complete(len)) = resp.parse(&buf) else {
                break;
            };
            let hs = header_list(resp.headers);
            let cl: usize = hs
                .iter()
                .find(|(n, _)| n == "content-length")
                .map_or(0, |(_, v)| v.parse().unwrap());
            let body_len = if raw.starts_with(b"HEAD") { 0 } else { cl };
            if buf.len() < len + body_len {
                break;
            }
            out.push((resp.code.unwrap(), hs, buf[len..len + body_len].to_vec()));
            buf.drain(..len + body_len);
        }
        if n == 0 {
            break;
        }
    }
    out
}

#[test]
fn sizes_statuses_and_echo() {
    let backend = BackendProc::start(&["--size", "100"]);
    let r = exchange(&backend, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", 1);
    assert_eq!((r[0].0, r[0].2.len()), (200, 100));
    let r = exchange(
        &backend,
        b"GET /?size=5000&status=503 HTTP/1.1\r\nHost: x\r\n\r\n",
        1,
    );
    assert_eq!((r[0].0, r[0].2.len()), (503, 5000));
    let r = exchange(
        &backend,
        b"GET / HTTP/1.1\r\nHost: x\r\nX-Meshbench-Size: 7\r\nx-meshbench-status: 404\r\n\r\n",
        1,
    );
    assert_eq!((r[0].0, r[0].2.len()), (404, 7));
    let req = b"POST /e?echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello";
    let r = exchange(&backend, req, 1);
    assert_eq!(
        r[0].2,
        req.to_vec(),
        "the request comes back as it was sent"
    );
    let r = exchange(&backend, b"HEAD / HTTP/1.1\r\nHost: x\r\n\r\n", 1);
    assert_eq!(r[0].0, 200);
    assert!(r[0].2.is_empty());
    assert!(r[0].1.contains(&("content-length".into(), "100".into())));
}

#[test]
fn pipelined_and_chunked_requests_are_answered_in_order() {
    let backend = BackendProc::start(&["--size", "10"]);
    let raw = b"GET /?size=1 HTTP/1.1\r\nHost: x\r\n\r\n\
POST /?size=2 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n\
GET /?size=3&delay=20ms HTTP/1.1\r\nHost: x\r\n\r\n\
GET /?size=4 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    let r = exchange(&backend, raw, 4);
    let sizes: Vec<usize> = r.iter().map(|x| x.2.len()).collect();
    assert_eq!(
        sizes,
        vec![1, 2, 3, 4],
        "order kept, even behind a delayed response"
    );
    assert!(r[3].1.contains(&("connection".into(), "close".into())));
}

#[test]
fn delays_are_honoured_without_blocking_other_connections() {
    let backend = BackendProc::start(&["--delay", "200ms"]);
    let slow = std::thread::spawn({
        let addr = backend.addr;
        move || {
            let t = Instant::now();
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
            let mut b = [0u8; 16];
            s.read_exact(&mut b).unwrap();
            t.elapsed()
        }
    });
    std::thread::sleep(Duration::from_millis(20));
    let t = Instant::now();
    let r = exchange(&backend, b"GET /?delay=0 HTTP/1.1\r\nHost: x\r\n\r\n", 1);
    assert_eq!(r[0].0, 200);
    assert!(
        t.elapsed() < Duration::from_millis(150),
        "a delayed connection does not hold up others"
    );
    let waited = slow.join().unwrap();
    assert!(
        waited >= Duration::from_millis(200) && waited < Duration::from_secs(2),
        "{waited:?}"
    );
}

#[test]
fn bad_requests_get_400_and_huge_heads_431() {
    let backend = BackendProc::start(&[]);
    let r = exchange(&backend, b"\x00\x01garbage\r\n\r\n", 1);
    assert_eq!(r[0].0, 400);
    let mut huge = b"GET / HTTP/1.1\r\nX-Big: ".to_vec();
    huge.extend(std::iter::repeat_n(b'a', 100 * 1024));
    let r = exchange(&backend, &huge, 1);
    assert_eq!(r[0].0, 431);
}

#[test]
fn random_bytes_do_not_bring_the_backend_down() {
    let backend = BackendProc::start(&[]);
    let mut rng = 0x2545_f491_4f6c_dd1d_u64;
    for _ in 0..200 {
        let mut s = TcpStream::connect(backend.addr).unwrap();
        let len = 1 + (rng % 3000) as usize;
        let junk: Vec<u8> = (0..len)
            .map(|_| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng as u8
            })
            .collect();
        let _ = s.write_all(&junk);
    }
    let r = exchange(&backend, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", 1);
    assert_eq!(
        r[0].0, 200,
        "still serving after 200 connections of garbage"
    );
}
