//! The live web page (`--web ADDR`): one page that redraws every second from the hub's board,
//! and the run's HTML report once there is one.
//!
//! Routes, GET and HEAD only:
//! - `/`, `/page.css`, `/page.js`: the page, compiled into the binary (nothing is fetched from
//!   elsewhere: the machine running a benchmark is often offline);
//! - `/api/board?since=SEQ&wait=MS`: the board as JSON ([`BoardView`]): the steps, the frames
//!   newer than `SEQ`, the end. With `wait`, the answer is held (at most [`MAX_WAIT`]) until the
//!   board changes past `SEQ`: a long poll, so the page redraws as soon as a second lands, with
//!   one request per change and no stream to keep open through proxies;
//! - `/report`: the HTML report named by [`Done::report`](crate::Done), once the run wrote one.
//!
//! The server is the standard library's: an acceptor thread and a thread per connection, at
//! most [`MAX_CONNECTIONS`] at once (more get a 503 and are closed), every request head read in
//! [`http::HEAD_TIMEOUT`] and [`http::MAX_HEAD`] bytes, every response closing its connection.
//! A face that answers a few browsers once a second needs no async runtime, and keeping it on
//! plain threads keeps it off the runtime and the cores the load uses. Bound to loopback (the
//! default, see [`listen_addr`](crate::listen_addr)), it also answers only requests whose
//! `Host` is a loopback name, against DNS rebinding.

mod http;
mod view;

pub use view::{view, BoardView, DoneView, StepView, REPORT_URL};

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use http::{Body, HeadError, Request, Response};

use crate::{Hub, LiveError};

/// Connections served at once; more are answered 503 and closed.
pub const MAX_CONNECTIONS: usize = 32;
/// The longest a `/api/board?wait=` answer is held.
pub const MAX_WAIT: Duration = Duration::from_secs(10);
/// A report larger than this is not served (a real one is a few MB of inline SVG).
const MAX_REPORT_BYTES: u64 = 512 << 20;
/// How often the acceptor looks at the stop flag while no one connects.
const STOP_POLL_MS: i32 = 200;

const PAGE_HTML: &str = include_str!("page.html");
const PAGE_CSS: &str = include_str!("page.css");
const PAGE_JS: &str = include_str!("page.js");

/// The page's own files only; `data:` for the empty favicon.
const PAGE_CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; \
    frame-ancestors 'none'";
/// The report has inline CSS and SVG and no script; it may load nothing.
const REPORT_CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; \
    base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// What every connection's thread reads.
struct Shared {
    hub: Hub,
    /// Only loopback `Host`s are answered (the server is bound to loopback).
    loopback_only: bool,
    active: AtomicUsize,
}

/// A running page server; stops when stopped or dropped.
pub struct WebServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
}

impl WebServer {
    /// Binds `addr` and serves the page of `hub` on its own threads.
    pub fn start(addr: SocketAddr, hub: Hub) -> Result<WebServer, LiveError> {
        let listener =
            TcpListener::bind(addr).map_err(|source| LiveError::Bind { addr, source })?;
        let bound = listener
            .local_addr()
            .and_then(|a| listener.set_nonblocking(true).map(|()| a))
            .map_err(|source| LiveError::Bind { addr, source })?;
        let shared = Arc::new(Shared {
            hub,
            loopback_only: bound.ip().is_loopback(),
            active: AtomicUsize::new(0),
        });
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let acceptor = std::thread::Builder::new()
            .name("meshbench-web".into())
            .spawn(move || accept_loop(listener, shared, flag))
            .map_err(|e| LiveError::Config(format!("cannot start the web page's thread: {e}")))?;
        Ok(WebServer {
            addr: bound,
            stop,
            acceptor: Some(acceptor),
        })
    }

    /// The address bound (the real port when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting; requests being answered finish on their own.
    pub fn stop(self) {
        drop(self);
    }
}

impl Drop for WebServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.acceptor.take() {
            let _ = t.join();
        }
    }
}

/// Waits up to [`STOP_POLL_MS`] for a connection on `listener`.
fn readable(listener: &TcpListener) -> bool {
    let mut fd = libc::pollfd {
        fd: listener.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, for the length given.
    unsafe { libc::poll(&mut fd, 1, STOP_POLL_MS) > 0 }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>, stop: Arc<AtomicBool>) {
    let mut refused = Refused::default();
    while !stop.load(Ordering::Relaxed) {
        refused.tend();
        if !readable(&listener) {
            continue;
        }
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            // Out of descriptors and the like: wait for connections to end.
            Err(_) => {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        if stream.set_nonblocking(false).is_err() {
            continue;
        }
        if shared.active.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
            shared.active.fetch_sub(1, Ordering::AcqRel);
            refused.add(stream);
            continue;
        }
        let s = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("meshbench-web-conn".into())
            .spawn(move || {
                serve(stream, &s);
                s.active.fetch_sub(1, Ordering::AcqRel);
            });
        if spawned.is_err() {
            shared.active.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Connections over [`MAX_CONNECTIONS`]: each is answered 503 at once (if its socket takes
/// the bytes without waiting), then kept by the acceptor for up to [`Refused::KEEP`] while
/// what the client sent is read and thrown away, so that closing it does not reset the
/// connection under the 503. At most [`Refused::MAX`] are kept; more are closed at once.
#[derive(Default)]
struct Refused {
    kept: Vec<(TcpStream, std::time::Instant)>,
}

impl Refused {
    const KEEP: Duration = Duration::from_secs(1);
    const MAX: usize = 64;

    fn add(&mut self, mut stream: TcpStream) {
        if stream.set_nonblocking(true).is_err() {
            return;
        }
        let _ = std::io::Write::write_all(
            &mut stream,
            b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\
              Retry-After: 1\r\n\r\n",
        );
        let _ = stream.shutdown(std::net::Shutdown::Write);
        if self.kept.len() < Self::MAX {
            self.kept.push((stream, std::time::Instant::now()));
        }
    }

    /// Reads what the kept connections sent; closes those that closed or waited long enough.
    fn tend(&mut self) {
        let mut scratch = [0u8; 4096];
        self.kept.retain_mut(|(stream, since)| loop {
            match std::io::Read::read(stream, &mut scratch) {
                Ok(0) => return false,
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    return since.elapsed() < Self::KEEP
                }
                Err(_) => return false,
            }
        });
    }
}

fn serve(mut stream: TcpStream, shared: &Shared) {
    let _ = stream.set_nodelay(true);
    let (response, head_only) = match http::read_head(&mut stream) {
        Ok(req) => {
            let head_only = req.method == "HEAD";
            (route(&req, shared), head_only)
        }
        Err(HeadError::Gone) => return,
        Err(HeadError::TooLarge) => (Response::text(431, "request head too large"), false),
        Err(HeadError::Malformed) => (Response::text(400, "not an HTTP/1.1 request"), false),
    };
    if http::write_response(&mut stream, response, head_only).is_ok() {
        let _ = stream.shutdown(std::net::Shutdown::Write);
    }
}

fn route(req: &Request, shared: &Shared) -> Response {
    if shared.loopback_only {
        if let Some(host) = &req.host {
            if !http::is_loopback_host(host) {
                return Response::text(403, "this page answers only to localhost");
            }
        }
    }
    if req.method != "GET" && req.method != "HEAD" {
        return Response::text(405, "only GET and HEAD").with("Allow", "GET, HEAD");
    }
    let page = |content_type, text: &'static str| {
        Response::new(200, content_type, Body::Static(text.as_bytes()))
            .with("Content-Security-Policy", PAGE_CSP)
            .with("Cache-Control", "no-cache")
    };
    match req.path.as_str() {
        "/" | "/index.html" => page("text/html; charset=utf-8", PAGE_HTML),
        "/page.css" => page("text/css; charset=utf-8", PAGE_CSS),
        "/page.js" => page("text/javascript; charset=utf-8", PAGE_JS),
        "/api/board" => board(req, shared),
        REPORT_URL => report(shared),
        _ => Response::text(404, "not found; the page is at /"),
    }
}

fn board(req: &Request, shared: &Shared) -> Response {
    let (since, wait) = match (
        http::query_u64(&req.query, "since"),
        http::query_u64(&req.query, "wait"),
    ) {
        (Ok(s), Ok(w)) => (s.unwrap_or(0), w.unwrap_or(0)),
        (Err(e), _) | (_, Err(e)) => return Response::text(400, &e),
    };
    let wait = Duration::from_millis(wait).min(MAX_WAIT);
    let cut = {
        let board = if wait.is_zero() {
            shared.hub.board()
        } else {
            shared.hub.wait(since, wait)
        };
        view(&board, since, meshbench_lab::sampler::now_ms())
    };
    match serde_json::to_vec(&cut) {
        Ok(json) => Response::new(200, "application/json", Body::Owned(json))
            .with("Cache-Control", "no-store"),
        Err(e) => Response::text(500, &format!("the board did not serialize: {e}")),
    }
}

fn report(shared: &Shared) -> Response {
    let path = shared
        .hub
        .board()
        .done
        .as_ref()
        .and_then(|d| d.report.clone());
    let Some(path) = path else {
        return Response::text(404, "no report: the run has not written one (yet)");
    };
    let opened = std::fs::File::open(&path).and_then(|f| f.metadata().map(|m| (f, m.len())));
    match opened {
        Ok((_, len)) if len > MAX_REPORT_BYTES => Response::text(
            500,
            "the report is too large to serve; open the file instead",
        ),
        Ok((file, len)) => Response::new(200, "text/html; charset=utf-8", Body::File(file, len))
            .with("Content-Security-Policy", REPORT_CSP)
            .with("Cache-Control", "no-cache"),
        Err(_) => Response::text(
            404,
            "the report file is gone; see the run's output for its path",
        ),
    }
}
