//! Just enough HTTP/1.1 for the page server: read one request head within a byte and time
//! budget, write one response and close. A client that sends too much, too slowly or not HTTP
//! at all costs at most [`HEAD_TIMEOUT`] of one thread and [`MAX_HEAD`] bytes; it never gets
//! past the head (no request here has a body), and nothing it sends is echoed back unescaped.

use std::io::{self, Read, Write};
use std::net::{IpAddr, TcpStream};
use std::time::{Duration, Instant};

/// The longest request head read (request line and headers).
pub const MAX_HEAD: usize = 8 * 1024;
/// The time a client has to send its whole request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// The time a response may take to be written (a reader that stops reading is dropped).
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// A request head, as the router needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// The raw query (after `?`), empty without one.
    pub query: String,
    pub host: Option<String>,
}

/// Why no request was read.
#[derive(Debug)]
pub enum HeadError {
    /// The client closed or went quiet: nothing to answer.
    Gone,
    /// More than [`MAX_HEAD`] bytes without the end of the head.
    TooLarge,
    /// Not an HTTP/1.x request head.
    Malformed,
}

/// Reads one request head from `stream` within [`HEAD_TIMEOUT`] and [`MAX_HEAD`].
pub fn read_head(stream: &mut TcpStream) -> Result<Request, HeadError> {
    let deadline = Instant::now() + HEAD_TIMEOUT;
    let mut buf = vec![0u8; MAX_HEAD];
    let mut len = 0;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(HeadError::Gone);
        }
        stream
            .set_read_timeout(Some(left))
            .map_err(|_| HeadError::Gone)?;
        let n = match stream.read(&mut buf[len..]) {
            Ok(0) => return Err(HeadError::Gone),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return Err(HeadError::Gone),
        };
        len += n;
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(&buf[..len]) {
            Ok(httparse::Status::Complete(_)) => {
                let target = req.path.unwrap_or("/");
                let (path, query) = target.split_once('?').unwrap_or((target, ""));
                let host = req
                    .headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case("host"))
                    .map(|h| String::from_utf8_lossy(h.value).trim().to_string());
                return Ok(Request {
                    method: req.method.unwrap_or("").to_string(),
                    path: path.to_string(),
                    query: query.to_string(),
                    host,
                });
            }
            Ok(httparse::Status::Partial) if len == buf.len() => return Err(HeadError::TooLarge),
            Ok(httparse::Status::Partial) => {}
            // Too many headers is a head too large to bother with.
            Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooLarge),
            Err(_) => return Err(HeadError::Malformed),
        }
    }
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

/// A response: status, content type, extra headers, body.
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

    /// A short plain-text answer (errors, 404s): `text` is ours, never the client's.
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
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "",
    }
}

/// Writes `r` (only its head when `head_only`) and says the connection closes.
pub fn write_response(stream: &mut TcpStream, r: Response, head_only: bool) -> io::Result<()> {
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    let mut head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\
         X-Content-Type-Options: nosniff\r\nReferrer-Policy: no-referrer\r\n",
        r.status,
        reason(r.status),
        r.content_type,
        r.body.len()
    );
    for (name, value) in &r.headers {
        head.push_str(name);
        head.push_str(": ");
        head.push_str(value);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    if !head_only {
        match r.body {
            Body::Static(b) => stream.write_all(b)?,
            Body::Owned(b) => stream.write_all(&b)?,
            Body::File(f, n) => {
                let copied = io::copy(&mut f.take(n), stream)?;
                if copied != n {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the file shrank while it was sent",
                    ));
                }
            }
        }
    }
    stream.flush()
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

/// One query parameter as a number; absent is `None`, present but not a number an error.
pub fn query_u64(query: &str, key: &str) -> Result<Option<u64>, String> {
    for pair in query.split('&') {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if k == key {
            return v
                .parse::<u64>()
                .map(Some)
                .map_err(|_| format!("'{key}' must be a whole number"));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

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
