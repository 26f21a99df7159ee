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
//! The server is the crate's one (`crate::http`) with this face's `limits()`: at most
//! [`MAX_CONNECTIONS`] at once (more get a 503), every request head read within 5 s and 8 KiB
//! (a slower one is dropped unanswered), every response closing its connection. A face that
//! answers a few browsers once a second needs no async runtime, and keeping it on plain threads
//! keeps it off the runtime and the cores the load uses. Bound to loopback (the default, see
//! [`listen_addr`](crate::listen_addr)), it also answers only requests whose `Host` is a
//! loopback name, against DNS rebinding.

mod view;

pub use view::{view, BoardView, DoneView, StepView, REPORT_URL};

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use crate::http::{Body, Limits, Request, Response, Routes, Server, WriteLimit};
use crate::{Hub, LiveError};

/// Connections served at once; more are answered 503 and closed.
pub const MAX_CONNECTIONS: usize = 32;
/// The longest a `/api/board?wait=` answer is held.
pub const MAX_WAIT: Duration = Duration::from_secs(10);
/// A report larger than this is not served (a real one is a few MB of inline SVG).
const MAX_REPORT_BYTES: u64 = 512 << 20;

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

/// What a browser may take: one request per connection, its head within 5 s and 8 KiB; a
/// reader that stalls for 10 s is dropped (a report of many MB may take longer as a whole).
fn limits() -> Limits {
    Limits {
        max_connections: MAX_CONNECTIONS,
        max_head_bytes: 8 * 1024,
        head_timeout: Duration::from_secs(5),
        answer_late_heads: false,
        keep_alive: None,
        write: WriteLimit::Stall(Duration::from_secs(10)),
    }
}

/// The page's routes.
struct Page {
    hub: Hub,
    /// Only loopback `Host`s are answered (the server is bound to loopback).
    loopback_only: bool,
}

impl Routes for Page {
    type Receipt = ();

    fn answer(&self, request: &Request) -> (Response, ()) {
        (route(request, self), ())
    }
}

/// A running page server; stops when stopped or dropped.
pub struct WebServer {
    server: Server<Page>,
}

impl WebServer {
    /// Binds `addr` and serves the page of `hub` on its own threads.
    pub fn start(addr: SocketAddr, hub: Hub) -> Result<WebServer, LiveError> {
        let page = Page {
            hub,
            // Binding keeps the address's IP: loopback asked is loopback bound.
            loopback_only: addr.ip().is_loopback(),
        };
        let server = Server::start(addr, "web", page, limits())?;
        Ok(WebServer { server })
    }

    /// The address bound (the real port when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.server.local_addr()
    }

    /// Stops serving: no new connections, and open ones are shut down.
    pub fn stop(self) {
        drop(self);
    }
}

fn route(req: &Request, shared: &Page) -> Response {
    if shared.loopback_only {
        if let Some(host) = &req.host {
            if !is_loopback_host(host) {
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

fn board(req: &Request, shared: &Page) -> Response {
    let (since, wait) = match (
        query_u64(&req.query, "since"),
        query_u64(&req.query, "wait"),
    ) {
        (Ok(s), Ok(w)) => (s.unwrap_or(0), w.unwrap_or(0)),
        (Err(e), _) | (_, Err(e)) => return Response::text(400, &e.to_string()),
    };
    let wait = Duration::from_millis(wait).min(MAX_WAIT);
    let cut = {
        let board = if wait.is_zero() {
            shared.hub.board()
        } else {
            shared.hub.wait(since, wait)
        };
        view(&board, since, meshbench_results::usage::now_ms())
    };
    match serde_json::to_vec(&cut) {
        Ok(json) => Response::new(200, "application/json", Body::Owned(json))
            .with("Cache-Control", "no-store"),
        Err(e) => Response::text(500, &format!("the board did not serialize: {e}")),
    }
}

fn report(shared: &Page) -> Response {
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

/// Whether a `Host` header names this machine's loopback (`localhost`, `127.0.0.1:8080`,
/// `[::1]:9000`): a page bound to loopback answers only those, so that a web site whose name
/// was rebound to 127.0.0.1 cannot read the board from a browser on this machine.
pub fn is_loopback_host(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        match rest.split_once(']') {
            Some((inside, after)) if after.is_empty() || after.starts_with(':') => inside,
            _ => return false,
        }
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            Some(_) => return false,
            None => host,
        }
    };
    name.eq_ignore_ascii_case("localhost")
        || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// A query parameter that must be a whole number and is not (its key).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{key}' must be a whole number")]
pub struct NotANumber {
    pub key: String,
}

/// One query parameter as a number; absent is `None`, present but not a number an error.
pub fn query_u64(query: &str, key: &str) -> Result<Option<u64>, NotANumber> {
    for pair in query.split('&') {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if k == key {
            return v.parse::<u64>().map(Some).map_err(|_| NotANumber {
                key: key.to_string(),
            });
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::{is_loopback_host, query_u64};

    #[test]
    fn loopback_hosts() {
        for ok in [
            "localhost",
            "LOCALHOST:80",
            "127.0.0.1",
            "127.0.0.1:9000",
            "127.3.4.5:1",
            "[::1]",
            "[::1]:8080",
        ] {
            assert!(is_loopback_host(ok), "{ok}");
        }
        for bad in [
            "example.com",
            "example.com:80",
            "10.0.0.1:80",
            "localhost.evil.com",
            "[::1]x",
            "127.0.0.1:80x",
            "",
            "[2001:db8::1]:80",
        ] {
            assert!(!is_loopback_host(bad), "{bad}");
        }
    }

    #[test]
    fn query_numbers() {
        assert_eq!(query_u64("since=12&wait=500", "wait"), Ok(Some(500)));
        assert_eq!(query_u64("since=12", "wait"), Ok(None));
        assert_eq!(query_u64("", "since"), Ok(None));
        assert!(query_u64("since=-1", "since").is_err());
        assert!(query_u64("since=99999999999999999999999", "since").is_err());
    }
}
