//! The one HTTP/1.1 server under the faces that answer browsers and scrapers (`/metrics`, the
//! live page): a small blocking server on its own threads, written for peers that may be slow
//! or hostile. A face brings only its [`Routes`] (a parsed [`Request`] in, a [`Response`] out)
//! and its [`Limits`]; everything a peer can do to the server is bounded here, once.
//!
//! - One acceptor thread; one thread per connection, at most [`Limits::max_connections`] at
//!   once. One more is answered `503` from the acceptor without blocking, and kept for a
//!   moment while what it sent is read and dropped, so closing it does not reset the answer
//!   away.
//! - A request head must be complete within [`Limits::head_timeout`] of its first byte (of the
//!   connection, for the first request) and within [`Limits::max_head_bytes`]: past the size
//!   the peer gets `431`, past the time `408` or nothing ([`Limits::answer_late_heads`]);
//!   a head that is not HTTP gets `400`. Either way the connection closes.
//! - With [`Limits::keep_alive`] a connection may wait that long for its next request;
//!   without, it closes after one response. A request with a body is answered and its
//!   connection closed: the body is never read, so it cannot be mistaken for a next request.
//! - A response must be taken within [`Limits::write`]. Nothing a peer sends is echoed back.
//! - [`Server::stop`] (or drop) stops accepting, frees the port and shuts down open
//!   connections.

use std::collections::HashMap;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::LiveError;

/// What one peer may take from a server, and how its connections end.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Connections served at once; one more gets `503`.
    pub max_connections: usize,
    /// A request head larger than this gets `431`.
    pub max_head_bytes: usize,
    /// Time for a whole request head, from the connection's start or the head's first byte.
    pub head_timeout: Duration,
    /// `true`: a head cut off by [`Limits::head_timeout`] is answered `408`; `false`: the
    /// connection is dropped without a word.
    pub answer_late_heads: bool,
    /// `Some`: connections are kept alive and may wait this long for their next request;
    /// `None`: every response closes its connection.
    pub keep_alive: Option<Duration>,
    /// How long the peer may take to read a response.
    pub write: WriteLimit,
}

/// How long a peer may take to read a response.
#[derive(Debug, Clone, Copy)]
pub enum WriteLimit {
    /// The whole response within this.
    Whole(Duration),
    /// Each write within this: a peer that keeps reading may take a large body at its pace.
    Stall(Duration),
}

/// What a face answers. Its methods run on the connections' threads, several at once.
pub trait Routes: Send + Sync + 'static {
    /// What [`Routes::written`] is handed once a response was taken whole by the socket.
    type Receipt;

    /// The response to `request` (any method: refusing what it does not serve is the face's).
    fn answer(&self, request: &Request) -> (Response, Self::Receipt);

    /// The response that came with `receipt` was handed whole to the socket.
    fn written(&self, _receipt: Self::Receipt) {}
}

/// A parsed request head: what routing needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    /// The target's path, without query or fragment (origin or absolute form alike).
    pub path: String,
    /// The raw query (after `?`), empty without one.
    pub query: String,
    pub host: Option<String>,
    /// Every `Accept` header, joined into one list.
    pub accept: Option<String>,
    /// The peer would keep the connection (HTTP/1.1 without `close`, or 1.0 with `keep-alive`).
    keep_alive: bool,
    /// A body follows the head (never read: the connection closes after the answer).
    has_body: bool,
}

/// A response body.
pub enum Body {
    Static(&'static [u8]),
    Owned(Vec<u8>),
    /// A file and its length, streamed.
    File(std::fs::File, u64),
}

impl Body {
    fn len(&self) -> u64 {
        match self {
            Body::Static(b) => b.len() as u64,
            Body::Owned(b) => b.len() as u64,
            Body::File(_, n) => *n,
        }
    }
}

/// A response: status, content type, extra headers, body. `HEAD` gets its head only.
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub headers: Vec<(&'static str, &'static str)>,
    pub body: Body,
}

impl Response {
    pub fn new(status: u16, content_type: &'static str, body: Body) -> Response {
        Response {
            status,
            content_type,
            headers: Vec::new(),
            body,
        }
    }

    /// A short plain-text answer (errors, 404s): `text` is ours, never the peer's.
    pub fn text(status: u16, text: &str) -> Response {
        Response::new(
            status,
            "text/plain; charset=utf-8",
            Body::Owned(format!("{text}\n").into_bytes()),
        )
    }

    pub fn with(mut self, name: &'static str, value: &'static str) -> Response {
        self.headers.push((name, value));
        self
    }

    /// The status line and headers.
    fn head(&self, keep_alive: bool) -> String {
        let mut head = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: {}\r\n\
             X-Content-Type-Options: nosniff\r\nReferrer-Policy: no-referrer\r\n",
            self.status,
            reason(self.status),
            self.content_type,
            self.body.len(),
            if keep_alive { "keep-alive" } else { "close" },
        );
        for (name, value) in &self.headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        head
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Error",
    }
}

/// How often the acceptor looks at the stop flag (and at refused connections) while no one
/// connects.
const POLL_MS: i32 = 200;

/// State the acceptor, the connections and the handle share.
struct Shared<R> {
    routes: R,
    limits: Limits,
    stopping: AtomicBool,
    /// Connections being served.
    open: AtomicUsize,
    next_id: AtomicU64,
    /// A clone of each open connection's socket, to shut it down at stop.
    connections: Mutex<HashMap<u64, TcpStream>>,
}

impl<R> Shared<R> {
    fn connections(&self) -> MutexGuard<'_, HashMap<u64, TcpStream>> {
        // Only inserts and removes happen under this lock; a panic cannot leave it half done.
        self.connections.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A running server; stops when dropped.
pub struct Server<R: Routes> {
    addr: SocketAddr,
    shared: Arc<Shared<R>>,
    acceptor: Option<JoinHandle<()>>,
}

impl<R: Routes> Server<R> {
    /// Binds `addr` and serves `routes` on threads named after `name`.
    pub fn start(
        addr: SocketAddr,
        name: &'static str,
        routes: R,
        limits: Limits,
    ) -> Result<Server<R>, LiveError> {
        let bind = |source| LiveError::Bind { addr, source };
        let listener = TcpListener::bind(addr).map_err(bind)?;
        let local = listener.local_addr().map_err(bind)?;
        listener.set_nonblocking(true).map_err(bind)?;
        let shared = Arc::new(Shared {
            routes,
            limits,
            stopping: AtomicBool::new(false),
            open: AtomicUsize::new(0),
            next_id: AtomicU64::new(0),
            connections: Mutex::new(HashMap::new()),
        });
        let s = shared.clone();
        let acceptor = std::thread::Builder::new()
            .name(format!("{name}-accept"))
            .spawn(move || accept_loop(listener, s, name))
            .map_err(|source| LiveError::Thread { face: name, source })?;
        Ok(Server {
            addr: local,
            shared,
            acceptor: Some(acceptor),
        })
    }

    /// The address bound (the real port when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn routes(&self) -> &R {
        &self.shared.routes
    }

    /// Connections being served now.
    #[cfg(test)]
    pub(crate) fn open(&self) -> usize {
        self.shared.open.load(Ordering::Acquire)
    }
}

impl<R: Routes> Drop for Server<R> {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::Release);
        // The acceptor sees the flag within POLL_MS; the listener closes with it.
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        for (_, c) in self.shared.connections().drain() {
            let _ = c.shutdown(Shutdown::Both);
        }
    }
}

/// Waits up to [`POLL_MS`] for a connection on `listener`.
fn readable(listener: &TcpListener) -> bool {
    let mut fd = libc::pollfd {
        fd: listener.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, for the length given.
    unsafe { libc::poll(&mut fd, 1, POLL_MS) > 0 }
}

/// Accepts until the server stops.
fn accept_loop<R: Routes>(listener: TcpListener, shared: Arc<Shared<R>>, name: &'static str) {
    let mut refused = Refused::default();
    while !shared.stopping.load(Ordering::Acquire) {
        refused.tend();
        if !readable(&listener) {
            continue;
        }
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == ErrorKind::WouldBlock => continue,
            // Out of descriptors or a connection reset before accept: wait for the next.
            Err(_) => {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
        };
        if shared.open.fetch_add(1, Ordering::AcqRel) >= shared.limits.max_connections {
            shared.open.fetch_sub(1, Ordering::AcqRel);
            refused.add(stream);
            continue;
        }
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
        if let Ok(clone) = stream.try_clone() {
            shared.connections().insert(id, clone);
        }
        let permit = Permit {
            shared: shared.clone(),
            id,
        };
        // If the thread cannot start, the closure and with it the permit are dropped here.
        let _ = std::thread::Builder::new()
            .name(format!("{name}-conn"))
            .spawn(move || {
                if stream.set_nonblocking(false).is_ok() {
                    serve(&permit.shared, stream);
                }
            });
    }
}

/// A connection's permit to be open (one of [`Limits::max_connections`]), given back when it
/// ends (a panic included).
struct Permit<R> {
    shared: Arc<Shared<R>>,
    id: u64,
}

impl<R> Drop for Permit<R> {
    fn drop(&mut self) {
        self.shared.connections().remove(&self.id);
        self.shared.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Connections over the limit: each is answered `503` at once (if its socket takes the bytes
/// without waiting), then kept by the acceptor for up to [`Refused::KEEP`] while what the peer
/// sent is read and thrown away, so that closing it does not reset the connection under the
/// `503`. At most [`Refused::MAX`] are kept; more are closed at once.
#[derive(Default)]
struct Refused {
    kept: Vec<(TcpStream, Instant)>,
}

impl Refused {
    const KEEP: Duration = Duration::from_secs(1);
    const MAX: usize = 64;

    fn add(&mut self, mut stream: TcpStream) {
        if stream.set_nonblocking(true).is_err() {
            return;
        }
        let r = Response::text(503, "too many connections; retry").with("Retry-After", "1");
        let _ = stream.write_all(head_and_body(&r, false, false).as_slice());
        let _ = stream.shutdown(Shutdown::Write);
        if self.kept.len() < Self::MAX {
            self.kept.push((stream, Instant::now()));
        }
    }

    /// Reads what the kept connections sent; closes those that closed or waited long enough.
    fn tend(&mut self) {
        let mut scratch = [0u8; 4096];
        self.kept.retain_mut(|(stream, since)| loop {
            match stream.read(&mut scratch) {
                Ok(0) => return false,
                Ok(_) => continue,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return since.elapsed() < Self::KEEP,
                Err(_) => return false,
            }
        });
    }
}

/// Why no request came.
#[derive(Debug, PartialEq)]
enum NoRequest {
    /// The peer closed, went quiet, or the socket failed: close without a word.
    Closed,
    /// Answer this status, then close.
    Answer(u16),
}

/// Serves one connection until either side closes it.
fn serve<R: Routes>(shared: &Shared<R>, mut stream: TcpStream) {
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
                let r = Response::text(status, reason(status));
                let _ = write_response(&mut stream, r, false, false, limits.write);
                close(stream);
                return;
            }
        };
        first = false;
        let keep = limits.keep_alive.is_some() && request.keep_alive && !request.has_body;
        let (response, receipt) = shared.routes.answer(&request);
        let head_only = request.method == "HEAD";
        if write_response(&mut stream, response, head_only, keep, limits.write).is_err() {
            return;
        }
        shared.routes.written(receipt);
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
    // may be keep_alive away, and then have head_timeout from their first byte.
    let mut begun = first || !buf.is_empty();
    let mut deadline = Instant::now()
        + match limits.keep_alive {
            Some(idle) if !begun => idle,
            _ => limits.head_timeout,
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
        let Some(left) = deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
        else {
            return Err(if buf.is_empty() || !limits.answer_late_heads {
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
    let (path, query) = split_target(target);
    let mut request = Request {
        method: method.to_string(),
        path: path.to_string(),
        query: query.to_string(),
        host: None,
        accept: None,
        keep_alive: false,
        has_body: false,
    };
    let (mut close, mut keep_alive_token) = (false, false);
    for h in req.headers.iter() {
        let value = String::from_utf8_lossy(h.value);
        if h.name.eq_ignore_ascii_case("host") {
            request.host.get_or_insert_with(|| value.trim().to_string());
        } else if h.name.eq_ignore_ascii_case("accept") {
            // Several Accept headers mean one list.
            request.accept = Some(match request.accept.take() {
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
                Ok(n) => request.has_body |= n > 0,
                Err(_) => return Err(NoRequest::Answer(400)),
            }
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            request.has_body = true;
        }
    }
    request.keep_alive = !close && (version >= 1 || keep_alive_token);
    Ok(Some((request, used)))
}

/// The path and query of a request target, origin form (`/metrics?x`) or absolute form
/// (`http://host/metrics`); a fragment is dropped.
fn split_target(target: &str) -> (&str, &str) {
    let t = match target.split_once("://") {
        Some((_, rest)) => rest.find('/').map_or("/", |i| &rest[i..]),
        None => target,
    };
    let t = t.split('#').next().unwrap_or(t);
    t.split_once('?').unwrap_or((t, ""))
}

/// The head, and the body unless `head_only` or a file (which is streamed after).
fn head_and_body(r: &Response, head_only: bool, keep_alive: bool) -> Vec<u8> {
    let mut out = r.head(keep_alive).into_bytes();
    if !head_only {
        match &r.body {
            Body::Static(b) => out.extend_from_slice(b),
            Body::Owned(b) => out.extend_from_slice(b),
            Body::File(..) => {}
        }
    }
    out
}

/// Writes `r` (only its head when `head_only`) within `limit`, however slowly the peer reads.
fn write_response(
    stream: &mut TcpStream,
    r: Response,
    head_only: bool,
    keep_alive: bool,
    limit: WriteLimit,
) -> io::Result<()> {
    let mut out = Timed {
        stream,
        limit,
        started: Instant::now(),
    };
    // The head, and a body in memory, go out in one write.
    out.write_all(&head_and_body(&r, head_only, keep_alive))?;
    if let (Body::File(f, n), false) = (r.body, head_only) {
        if io::copy(&mut f.take(n), &mut out)? != n {
            return Err(io::Error::new(
                ErrorKind::UnexpectedEof,
                "the file shrank while it was sent",
            ));
        }
    }
    Ok(())
}

/// A socket whose every write is bounded by a [`WriteLimit`].
struct Timed<'a> {
    stream: &'a mut TcpStream,
    limit: WriteLimit,
    /// When the response began, for a [`WriteLimit::Whole`].
    started: Instant,
}

impl Write for Timed<'_> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let left = match self.limit {
            WriteLimit::Whole(d) => d
                .checked_sub(self.started.elapsed())
                .filter(|d| !d.is_zero())
                .ok_or(ErrorKind::TimedOut)?,
            WriteLimit::Stall(d) => d,
        };
        self.stream.set_write_timeout(Some(left))?;
        self.stream.write(data)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.stream.flush()
    }
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
            head("GET /metrics?a=1 HTTP/1.1\r\nHost: x \r\nAccept: a/b\r\nAccept: c/d\r\n\r\nGET")
                .unwrap()
                .unwrap();
        assert_eq!(
            n,
            "GET /metrics?a=1 HTTP/1.1\r\nHost: x \r\nAccept: a/b\r\nAccept: c/d\r\n\r\n".len()
        );
        assert_eq!((r.path.as_str(), r.query.as_str()), ("/metrics", "a=1"));
        assert_eq!(r.host.as_deref(), Some("x"));
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
    fn targets() {
        assert_eq!(split_target("/metrics"), ("/metrics", ""));
        assert_eq!(split_target("/metrics?x=1"), ("/metrics", "x=1"));
        assert_eq!(split_target("/a?x=1#f"), ("/a", "x=1"));
        assert_eq!(split_target("http://h:1/metrics?x"), ("/metrics", "x"));
        assert_eq!(split_target("http://h:1"), ("/", ""));
        assert_eq!(split_target("*"), ("*", ""));
    }
}
