//! One push over HTTP: the receiver's URL and the user's headers checked once at start (a bad
//! one is a configuration error, not a failed push), then a blocking POST per request with
//! connect and overall timeouts, its answer sorted into what the queue does next.
//!
//! The client is `ureq` (blocking, one connection kept alive, rustls with the ring provider
//! and Mozilla's roots for `https`): the writer has its own thread, so nothing async is needed.
//! Credentials in the URL (`https://user:token@host/...`) become a basic `Authorization`
//! header and never appear in a message; neither do header values or the query string.

use std::io::ErrorKind as Io;
use std::time::Duration;

use base64::Engine;
use ureq::http::{HeaderName, HeaderValue};

use crate::LiveError;

/// Headers the protocol sets; a user's header must not repeat them.
const OURS: [&str; 6] = [
    "content-type",
    "content-encoding",
    "content-length",
    "transfer-encoding",
    "x-prometheus-remote-write-version",
    "host",
];

/// How much of an error answer is kept for the message.
const ERROR_BODY_BYTES: u64 = 512;
/// Retry-After beyond this is cut to it: the queue keeps only so much anyway.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);

/// A receiver's answer to one push, when it was not a success.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    /// The HTTP status, if an answer came.
    pub status: Option<u16>,
    /// What went wrong, for people: `connection refused`, `HTTP 400: out of order sample`.
    pub message: String,
    /// How long the receiver asked to be left alone (429 or 503 with `Retry-After`).
    pub retry_after: Option<Duration>,
}

impl Failure {
    /// Worth trying again: no answer, too many requests, or a server error.
    pub fn retryable(&self) -> bool {
        match self.status {
            None => true,
            Some(s) => s == 429 || s >= 500,
        }
    }

    /// The receiver says it does not take native histograms: a 4xx other than 429, or an
    /// error that names them (Prometheus without `--enable-feature=native-histograms` answers
    /// 500 to a request that carries one).
    pub fn refuses_natives(&self) -> bool {
        match self.status {
            Some(s) if (400..500).contains(&s) && s != 429 => true,
            Some(_) => self.message.to_ascii_lowercase().contains("histogram"),
            None => false,
        }
    }
}

/// The receiver and how to reach it.
pub struct Sender {
    agent: ureq::Agent,
    url: String,
    /// The URL without credentials or query, for messages.
    shown: String,
    headers: Vec<(HeaderName, HeaderValue)>,
}

impl Sender {
    pub fn new(
        url: &str,
        headers: &[(String, String)],
        connect_timeout: Duration,
    ) -> Result<Sender, LiveError> {
        let bad = |why: String| LiveError::Config(format!("remote-write URL '{url}': {why}"));
        let mut parsed = url::Url::parse(url.trim()).map_err(|e| {
            bad(format!(
                "{e}; give one like http://127.0.0.1:9090/api/v1/write"
            ))
        })?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(bad(format!(
                "the scheme is '{}'; it must be http or https, as in \
                 http://127.0.0.1:9090/api/v1/write",
                parsed.scheme()
            )));
        }
        if parsed.host_str().is_none_or(str::is_empty) {
            return Err(bad("no host".into()));
        }
        let mut out: Vec<(HeaderName, HeaderValue)> = Vec::new();
        if !parsed.username().is_empty() {
            let user = percent_decoded(parsed.username());
            let password = parsed.password().map(percent_decoded).unwrap_or_default();
            let token =
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
            let value = HeaderValue::from_str(&format!("Basic {token}"))
                .map_err(|_| bad("credentials that cannot be a header".into()))?;
            out.push((HeaderName::from_static("authorization"), value));
            let _ = parsed.set_username("");
            let _ = parsed.set_password(None);
        }
        let mut user_agent = format!("meshbench/{}", env!("CARGO_PKG_VERSION"));
        for (name, value) in headers {
            let bad_header =
                |why: &str| LiveError::Config(format!("remote-write header '{name}': {why}"));
            let n = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| bad_header("not a valid header name"))?;
            if OURS.contains(&n.as_str()) {
                return Err(bad_header("remote write sets this header itself"));
            }
            let v = HeaderValue::from_str(value)
                .map_err(|_| bad_header("the value has characters a header cannot carry"))?;
            if n.as_str() == "user-agent" {
                user_agent = value.clone();
                continue;
            }
            out.push((n, v));
        }
        let mut shown = parsed.clone();
        shown.set_query(None);
        shown.set_fragment(None);
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_connect(Some(connect_timeout))
            .user_agent(user_agent)
            .build();
        Ok(Sender {
            agent: config.into(),
            url: parsed.to_string(),
            shown: shown.to_string(),
            headers: out,
        })
    }

    /// The receiver's URL as messages show it.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// Pushes one snappy-compressed `WriteRequest`, waiting at most `timeout` for the answer.
    pub fn post(&self, body: &[u8], timeout: Duration) -> Result<(), Failure> {
        let mut req = self
            .agent
            .post(&self.url)
            .header("Content-Encoding", "snappy")
            .header("Content-Type", "application/x-protobuf")
            .header("X-Prometheus-Remote-Write-Version", "0.1.0");
        for (n, v) in &self.headers {
            req = req.header(n, v);
        }
        let answer = req
            .config()
            .timeout_global(Some(timeout))
            .build()
            .send(body);
        let mut resp = match answer {
            Ok(r) => r,
            Err(e) => {
                return Err(Failure {
                    status: None,
                    message: describe(&e, timeout),
                    retry_after: None,
                })
            }
        };
        let status = resp.status().as_u16();
        let text = resp
            .body_mut()
            .with_config()
            .limit(ERROR_BODY_BYTES)
            .read_to_vec()
            .map(|b| String::from_utf8_lossy(&b).trim().to_string())
            .unwrap_or_default();
        if (200..300).contains(&status) {
            return Ok(());
        }
        let retry_after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(|s| Duration::from_secs(s).min(MAX_RETRY_AFTER));
        let first_line = text
            .lines()
            .next()
            .unwrap_or("")
            .chars()
            .take(200)
            .collect::<String>();
        let reason = resp.status().canonical_reason().unwrap_or("");
        Err(Failure {
            status: Some(status),
            message: if first_line.is_empty() {
                format!("HTTP {status} {reason}").trim_end().to_string()
            } else {
                format!("HTTP {status}: {first_line}")
            },
            retry_after,
        })
    }
}

/// `%XX` escapes of a URL's user or password as the bytes they stand for.
fn percent_decoded(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).and_then(|&c| hex(c)),
            b.get(i + 2).and_then(|&c| hex(c)),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A transport error in words a person acts on.
fn describe(e: &ureq::Error, timeout: Duration) -> String {
    match e {
        ureq::Error::Io(io) => match io.kind() {
            Io::ConnectionRefused => "connection refused".into(),
            Io::ConnectionReset => "connection reset by the receiver".into(),
            Io::TimedOut | Io::WouldBlock => {
                format!("no answer within {} (timed out)", secs(timeout))
            }
            Io::UnexpectedEof | Io::ConnectionAborted | Io::BrokenPipe => {
                "the receiver closed the connection".into()
            }
            _ => io.to_string(),
        },
        ureq::Error::Timeout(ureq::Timeout::Connect) => "could not connect (timed out)".into(),
        ureq::Error::Timeout(_) => format!("no answer within {} (timed out)", secs(timeout)),
        ureq::Error::HostNotFound => "host not found".into(),
        other => other.to_string(),
    }
}

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sender(url: &str, headers: &[(&str, &str)]) -> Result<Sender, LiveError> {
        let h: Vec<(String, String)> = headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        Sender::new(url, &h, Duration::from_secs(1))
    }

    fn message(r: Result<Sender, LiveError>) -> String {
        match r {
            Ok(_) => panic!("accepted"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn bad_urls_and_headers_are_one_clear_line() {
        for (url, says) in [
            ("localhost:9090/api/v1/write", "scheme"),
            ("127.0.0.1:9090", "relative URL"),
            ("ftp://h/api", "must be http or https"),
            ("http://", "empty host"),
            ("not a url", "relative URL"),
        ] {
            let m = message(sender(url, &[]));
            assert!(m.contains(says) && !m.contains('\n'), "{url}: {m}");
            assert!(m.starts_with("remote-write URL"), "{m}");
        }
        let m = message(sender("http://h/w", &[("Content-Type", "text/plain")]));
        assert!(m.contains("sets this header itself"), "{m}");
        let m = message(sender("http://h/w", &[("Bad Name", "x")]));
        assert!(m.contains("not a valid header name"), "{m}");
        let m = message(sender("http://h/w", &[("X-Ok", "a\u{7f}b")]));
        assert!(m.contains("cannot carry"), "{m}");
        assert!(sender("https://h:9/api/v1/push", &[("Authorization", "Bearer x")]).is_ok());
    }

    #[test]
    fn credentials_become_a_header_and_stay_out_of_messages() {
        let s = sender("https://me:s%40cr+t@example.test/api/v1/push?key=abc", &[]).unwrap();
        assert_eq!(s.shown(), "https://example.test/api/v1/push");
        let (n, v) = &s.headers[0];
        assert_eq!(n.as_str(), "authorization");
        let token = v.to_str().unwrap().strip_prefix("Basic ").unwrap();
        let plain = base64::engine::general_purpose::STANDARD
            .decode(token)
            .unwrap();
        assert_eq!(plain, b"me:s@cr+t");
    }

    #[test]
    fn answers_sort_into_retry_drop_and_native_refusal() {
        let f = |status, message: &str| Failure {
            status,
            message: message.into(),
            retry_after: None,
        };
        assert!(f(None, "connection refused").retryable());
        assert!(f(Some(429), "HTTP 429").retryable());
        assert!(f(Some(503), "HTTP 503").retryable());
        assert!(!f(Some(400), "HTTP 400: out of order sample").retryable());
        assert!(!f(Some(401), "HTTP 401").retryable());
        assert!(f(Some(400), "HTTP 400: x").refuses_natives());
        assert!(!f(Some(429), "HTTP 429").refuses_natives());
        assert!(f(Some(500), "HTTP 500: native histograms are disabled").refuses_natives());
        assert!(!f(Some(503), "HTTP 503: busy").refuses_natives());
        assert!(!f(None, "connection refused").refuses_natives());
    }
}
