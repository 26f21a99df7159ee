//! How the workstation talks to a detached run's coordinator: a few HTTP/1.1 requests, one per
//! connection, to the coordinator's pod loopback ([`CONTROL_PORT`]) through a port-forward, so
//! no Service and no route to the pod are needed and no other pod can reach it.
//!
//! - `GET /status`: [`Status`] as JSON;
//! - `GET /lines?from=N`: the run's output lines from the N-th (0-based), one per line;
//! - `GET /store`: the results store, once the run has ended (409 before);
//! - `POST /stop`: the run is asked to stop (as a Ctrl-C would), 202;
//! - `POST /done`: the results were fetched; the coordinator removes its namespace, 200.
//!
//! Both sides are here, so the paths and the status's shape are written once.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use serde::{Deserialize, Serialize};

pub use meshbench_k8s::detached::CONTROL_PORT;

/// The longest one request may take, bytes of a large store included.
const REQUEST_WITHIN: Duration = Duration::from_secs(120);
/// The longest request head the coordinator reads.
const HEAD_MAX: usize = 8 * 1024;

/// Where the run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// The experiment runs (or is putting the cluster back after a stop).
    Running,
    /// It ended, with `exit_code`; its store can be fetched.
    Ended,
}

/// What `GET /status` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    pub state: RunState,
    /// The run's exit code once it has ended (as `meshbench experiment` documents them).
    pub exit_code: Option<u8>,
    /// How many output lines there are so far.
    pub lines: usize,
    /// A stop was asked for.
    pub stop_asked: bool,
}

/// A request as the coordinator reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Status,
    Lines { from: usize },
    Store,
    Stop,
    Done,
}

/// A refusal by the coordinator: its status and what it said.
#[derive(Debug)]
pub struct Refused {
    pub status: u16,
    pub body: String,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the coordinator answered {}: {}", self.status, self.body)
    }
}

impl std::error::Error for Refused {}

/// Reads one request's head from `stream` (the body, if any, is not used).
pub fn read_request(stream: &mut TcpStream) -> Option<Request> {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    let mut reader = BufReader::new(stream.take(HEAD_MAX as u64));
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut words = line.split_whitespace();
    let (method, target) = (words.next()?, words.next()?);
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    match (method, path) {
        ("GET", "/status") => Some(Request::Status),
        ("GET", "/lines") => {
            let from = query
                .split('&')
                .find_map(|kv| kv.strip_prefix("from="))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            Some(Request::Lines { from })
        }
        ("GET", "/store") => Some(Request::Store),
        ("POST", "/stop") => Some(Request::Stop),
        ("POST", "/done") => Some(Request::Done),
        _ => None,
    }
}

/// Writes an answer and closes.
pub fn answer(stream: &mut TcpStream, status: u16, body: &[u8]) {
    let reason = match status {
        200 => "OK",
        202 => "Accepted",
        404 => "Not Found",
        409 => "Conflict",
        _ => "Error",
    };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream
        .write_all(head.as_bytes())
        .and_then(|()| stream.write_all(body));
}

/// Sends one request to the coordinator at `addr` (a port-forward's local end): the body of a
/// 2xx answer.
pub fn call(addr: SocketAddr, method: &str, path: &str) -> Result<Vec<u8>> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(30))?;
    stream.set_read_timeout(Some(REQUEST_WITHIN))?;
    stream.set_write_timeout(Some(REQUEST_WITHIN))?;
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nhost: coordinator\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
    )?;
    let mut all = Vec::new();
    stream.read_to_end(&mut all)?;
    let split = all
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| anyhow!("the coordinator's answer has no end of head"))?;
    let head = String::from_utf8_lossy(&all[..split]).to_string();
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            anyhow!(
                "the coordinator answered {:?}",
                head.lines().next().unwrap_or("")
            )
        })?;
    let body = all[split + 4..].to_vec();
    if !(200..300).contains(&status) {
        return Err(Refused {
            status,
            body: String::from_utf8_lossy(&body).trim().to_string(),
        }
        .into());
    }
    Ok(body)
}

/// `GET /status`.
pub fn status(addr: SocketAddr) -> Result<Status> {
    let body = call(addr, "GET", "/status")?;
    serde_json::from_slice(&body).context("the coordinator's status")
}

/// `GET /lines?from=N`.
pub fn lines(addr: SocketAddr, from: usize) -> Result<Vec<String>> {
    let body = call(addr, "GET", &format!("/lines?from={from}"))?;
    Ok(String::from_utf8_lossy(&body)
        .lines()
        .map(str::to_string)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A request sent by [`call`] is read back by [`read_request`] and its answer's body
    /// returned, or refused with the status.
    #[test]
    fn a_call_is_read_as_its_request_and_answered() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let served = std::thread::spawn(move || {
            let mut seen = Vec::new();
            for _ in 0..3 {
                let (mut s, _) = listener.accept().unwrap();
                let r = read_request(&mut s);
                match &r {
                    Some(Request::Lines { from: 7 }) => answer(&mut s, 200, b"a\nb\n"),
                    Some(Request::Store) => answer(&mut s, 409, b"still running"),
                    _ => answer(&mut s, 404, b""),
                }
                seen.push(r);
            }
            seen
        });
        assert_eq!(lines(addr, 7).unwrap(), ["a", "b"]);
        let refused = call(addr, "GET", "/store").unwrap_err();
        let refused = refused.downcast_ref::<Refused>().unwrap();
        assert_eq!(
            (refused.status, refused.body.as_str()),
            (409, "still running")
        );
        assert!(call(addr, "GET", "/nothing").is_err());
        assert_eq!(
            served.join().unwrap(),
            [Some(Request::Lines { from: 7 }), Some(Request::Store), None]
        );
    }
}
