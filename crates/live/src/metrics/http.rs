//! The HTTP/1.1 side of `/metrics`: a small blocking server on its own threads, written for
//! one route and for peers that may be slow or hostile.
//!
//! - One acceptor thread; one thread per connection, at most [`Limits::max_connections`] at
//!   once (one more is answered `503` and closed at once, from the acceptor, without blocking).
//! - A request head must be complete within [`Limits::head_timeout`] of its first byte (of
//!   the connection, for the first request) and within [`Limits::max_head_bytes`]; past
//!   either the peer gets `408` or `431` and the connection closes. A kept-alive connection
//!   may wait [`Limits::idle_timeout`] for its next request. A response must be taken within
//!   [`Limits::write_timeout`].
//! - `GET` and `HEAD` of `/metrics` (any query string) are served; other paths `404`, other
//!   methods `405`. A request with a body is answered and the connection closed (the body is
//!   never read, so it cannot be mistaken for a next request).
//! - Nothing here holds the board: the body is rendered (the lock held only while the
//!   families are built) before a byte is written.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{negotiate, Limits, Shared};

/// The path served.
const PATH: &str = "/metrics";

/// Accepts until the server stops.
pub(super) fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    for conn in listener.incoming() {
        if shared.stopping.load(Ordering::Acquire) {
            return;
        }
        let stream = match conn {
            Ok(s) => s,
            // Out of descriptors or a connection reset before accept: the next may do.
            Err(_) => {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
        };
        if shared.open.fetch_add(1, Ordering::AcqRel) >= shared.limits.max_connections {
            shared.open.fetch_sub(1, Ordering::AcqRel);
            refuse(stream);
            continue;
        }
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
        if let Ok(clone) = stream.try_clone() {
            shared.connections().insert(id, clone);
        }
        let slot = Slot {
            shared: shared.clone(),
            id,
        };
        // If the thread cannot start, the closure and with it the slot are dropped here.
        let _ = std::thread::Builder::new()
            .name("metrics-conn".into())
            .spawn(move || serve(&slot.shared, stream));
    }
}

/// A connection's place among the open ones, given back when it ends (a panic included).
struct Slot {
    shared: Arc<Shared>,
    id: u64,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.shared.connections().remove(&self.id);
        self.shared.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Over the connection limit: a `503` if the socket takes it at once, then close.
fn refuse(stream: TcpStream) {
    if stream.set_nonblocking(true).is_ok() {
        let r = Response::text(503, "too many connections to /metrics; retry\n");
        let _ = (&stream).write(&r.bytes(false));
    }
}

/// A parsed request head: only what routing needs.
#[derive(Debug)]
struct Request {
    method: String,
    target: String,
    accept: Option<String>,
    keep_alive: bool,
    has_body: bool,
}

/// Why no request came.
#[derive(Debug, PartialEq)]
enum NoRequest {
    /// The peer closed, went quiet between requests, or the socket failed: close silently.
    Closed,
    /// Answer this status, then close.
    Answer(u16),
}

/// Serves one connection until either side closes it.
fn serve(shared: &Shared, mut stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let limits = &shared.limits;
    let mut buf = Vec::new();
    let mut first = true;
    loop {
        if shared.stopping.load(Ordering::Acquire) {
            return;
        }
        let request = match read_request(&mut stream, &mut buf, limits, first) {
            Ok(r) => r,
            Err(NoRequest::Closed) => return,
            Err(NoRequest::Answer(status)) => {
                let r = Response::text(status, &format!("{}\n", reason(status)));
                let _ = write_by(&mut stream, &r.bytes(false), limits.write_timeout);
                close(stream);
                return;
            }
        };
        first = false;
        let keep = request.keep_alive && !request.has_body;
        let response = route(shared, &request);
        if write_by(&mut stream, &response.bytes(keep), limits.write_timeout).is_err() {
            return;
        }
        if let Some(seq) = response.scraped_seq {
            shared.served(seq);
        }
        if !keep {
            close(stream);
            return;
        }
    }
}

/// Reads until `buf` holds a complete request head, within the limits.
fn read_request(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    limits: &Limits,
    first: bool,
) -> Result<Request, NoRequest> {
    // The first request (or one already begun in `buf`) has head_timeout from now; later ones
    // may be idle_timeout away, and then have head_timeout from their first byte.
    let started_at = Instant::now();
    let mut begun = first || !buf.is_empty();
    let mut deadline = started_at
        + if begun {
            limits.head_timeout
        } else {
            limits.idle_timeout
        };
    let mut chunk = [0u8; 4096];
    loop {
        if !buf.is_empty() {
            if let Some((request, used)) = parse(buf)? {
                buf.drain(..used);
                return Ok(request);
            }
            if buf.len() >= limits.max_head_bytes {
                return Err(NoRequest::Answer(431));
            }
        }
        let now = Instant::now();
        let Some(left) = deadline
            .checked_duration_since(now)
            .filter(|d| !d.is_zero())
        else {
            return Err(if buf.is_empty() {
                NoRequest::Closed
            } else {
                NoRequest::Answer(408)
            });
        };
        if stream.set_read_timeout(Some(left)).is_err() {
            return Err(NoRequest::Closed);
        }
        let room = (limits.max_head_bytes - buf.len()).min(chunk.len());
        match stream.read(&mut chunk[..room]) {
            Ok(0) => return Err(NoRequest::Closed),
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                if !begun {
                    begun = true;
                    deadline = deadline.min(Instant::now() + limits.head_timeout);
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return Err(NoRequest::Closed),
        }
    }
}

/// A complete head at the start of `buf` and its length, `None` if more is needed.
fn parse(buf: &[u8]) -> Result<Option<(Request, usize)>, NoRequest> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    let used = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(NoRequest::Answer(431)),
        Err(_) => return Err(NoRequest::Answer(400)),
    };
    let (Some(method), Some(target), Some(version)) = (req.method, req.path, req.version) else {
        return Err(NoRequest::Answer(400));
    };
    let mut accept: Option<String> = None;
    let mut close = false;
    let mut keep_alive_token = false;
    let mut has_body = false;
    for h in req.headers.iter() {
        let value = String::from_utf8_lossy(h.value);
        if h.name.eq_ignore_ascii_case("accept") {
            // Several Accept headers mean one list.
            accept = Some(match accept {
                Some(a) => format!("{a}, {value}"),
                None => value.into_owned(),
            });
        } else if h.name.eq_ignore_ascii_case("connection") {
            for token in value.split(',') {
                let t = token.trim();
                close |= t.eq_ignore_ascii_case("close");
                keep_alive_token |= t.eq_ignore_ascii_case("keep-alive");
            }
        } else if h.name.eq_ignore_ascii_case("content-length") {
            match value.trim().parse::<u64>() {
                Ok(n) => has_body |= n > 0,
                Err(_) => return Err(NoRequest::Answer(400)),
            }
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            has_body = true;
        }
    }
    let keep_alive = if version >= 1 {
        !close
    } else {
        keep_alive_token && !close
    };
    Ok(Some((
        Request {
            method: method.to_string(),
            target: target.to_string(),
            accept,
            keep_alive,
            has_body,
        },
        used,
    )))
}

/// The path of a request target: origin form (`/metrics?x`) or absolute form
/// (`http://host/metrics`).
fn path_of(target: &str) -> &str {
    let t = match target.split_once("://") {
        Some((_, rest)) => rest.find('/').map_or("/", |i| &rest[i..]),
        None => target,
    };
    t.split(['?', '#']).next().unwrap_or(t)
}

/// What to answer.
struct Response {
    status: u16,
    content_type: &'static str,
    body: Vec<u8>,
    /// `HEAD`: the head of the `GET` answer, no body.
    head_only: bool,
    extra: Option<(&'static str, &'static str)>,
    /// Set for a scrape: the board sequence its families were read at.
    scraped_seq: Option<u64>,
}

impl Response {
    fn text(status: u16, body: &str) -> Response {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.as_bytes().to_vec(),
            head_only: false,
            extra: None,
            scraped_seq: None,
        }
    }

    fn bytes(&self, keep_alive: bool) -> Vec<u8> {
        let mut head = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: {}\r\n",
            self.status,
            reason(self.status),
            self.content_type,
            self.body.len(),
            if keep_alive { "keep-alive" } else { "close" },
        );
        if let Some((name, value)) = self.extra {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        let mut out = head.into_bytes();
        if !self.head_only {
            out.extend_from_slice(&self.body);
        }
        out
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Error",
    }
}

fn route(shared: &Shared, request: &Request) -> Response {
    if path_of(&request.target) != PATH {
        return Response::text(404, "not found: the metrics are at /metrics\n");
    }
    let head_only = match request.method.as_str() {
        "GET" => false,
        "HEAD" => true,
        _ => {
            let mut r = Response::text(405, "/metrics takes GET (or HEAD)\n");
            r.extra = Some(("Allow", "GET, HEAD"));
            return r;
        }
    };
    let format = negotiate::choose(request.accept.as_deref());
    match super::render(&shared.hub, format) {
        Ok((seq, body)) => Response {
            status: 200,
            content_type: format.content_type(),
            body,
            head_only,
            extra: Some(("Vary", "Accept")),
            scraped_seq: (!head_only).then_some(seq),
        },
        Err(e) => Response::text(500, &format!("{e}\n")),
    }
}

/// Writes all of `data` within `limit`, however slowly the peer reads.
fn write_by(stream: &mut TcpStream, mut data: &[u8], limit: Duration) -> std::io::Result<()> {
    let deadline = Instant::now() + limit;
    while !data.is_empty() {
        let left = deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or(ErrorKind::TimedOut)?;
        stream.set_write_timeout(Some(left))?;
        match stream.write(data) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => data = &data[n..],
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Closes after a last answer so that it is delivered: a socket closed with unread input
/// resets the connection, which can discard the answer at the peer. So: end our side, then
/// read (and drop) what the peer still sends, briefly and boundedly.
fn close(mut stream: TcpStream) {
    let _ = stream.shutdown(Shutdown::Write);
    let _ = stream.set_read_timeout(Some(Duration::from_millis(250)));
    let mut sink = [0u8; 4096];
    for _ in 0..16 {
        match stream.read(&mut sink) {
            Ok(n) if n > 0 => {}
            _ => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(text: &str) -> Result<Option<(Request, usize)>, NoRequest> {
        parse(text.as_bytes())
    }

    #[test]
    fn heads_parse() {
        let (r, n) =
            head("GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: a/b\r\nAccept: c/d\r\n\r\nGET")
                .unwrap()
                .unwrap();
        assert_eq!(
            n,
            "GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: a/b\r\nAccept: c/d\r\n\r\n".len()
        );
        assert_eq!(r.accept.as_deref(), Some("a/b, c/d"));
        assert!(r.keep_alive && !r.has_body);
        let (r, _) = head("GET / HTTP/1.0\r\n\r\n").unwrap().unwrap();
        assert!(!r.keep_alive);
        let (r, _) = head("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(r.keep_alive);
        let (r, _) = head("GET / HTTP/1.1\r\nConnection: Close\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(!r.keep_alive);
        let (r, _) = head("POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc")
            .unwrap()
            .unwrap();
        assert!(r.has_body);
        assert!(head("GET /metrics HTTP/1.1\r\nHost: x\r\n")
            .unwrap()
            .is_none());
        assert_eq!(
            head("NOT HTTP\r\n\r\n").unwrap_err(),
            NoRequest::Answer(400)
        );
        assert_eq!(
            head("GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n").unwrap_err(),
            NoRequest::Answer(400)
        );
        let many: String = (0..100).map(|i| format!("X-{i}: y\r\n")).collect();
        assert_eq!(
            head(&format!("GET / HTTP/1.1\r\n{many}\r\n")).unwrap_err(),
            NoRequest::Answer(431)
        );
    }

    #[test]
    fn paths() {
        assert_eq!(path_of("/metrics"), "/metrics");
        assert_eq!(path_of("/metrics?x=1"), "/metrics");
        assert_eq!(path_of("http://h:1/metrics?x"), "/metrics");
        assert_eq!(path_of("http://h:1"), "/");
        assert_eq!(path_of("*"), "*");
    }
}
