//! The live stream of a run or an experiment, and the faces that show it while it goes.
//!
//! The runner hands every completed second of a step to a [`Hub`] (counts by status and by
//! kind of error, sends, latency and schedule-lag histograms, the newest reading of each role);
//! the hub adds it to the step's running [`Totals`] and keeps a short history of [`Frame`]s.
//! Each face reads the same board on its own thread and never blocks the load:
//!
//! - `metrics`: `/metrics` for a Prometheus scrape (OpenMetrics text, native histograms in
//!   protobuf when the scraper asks for them);
//! - `remote_write`: pushes the same series to a Prometheus remote-write receiver;
//! - `web`: a page that redraws every second;
//! - `grafana`: a dashboard whose queries are the series above.
//!
//! Series names and labels are written once, in [`names`]; histogram buckets in [`buckets`].
//! Nothing measured depends on whether anyone watches: the hub only reads what the engine
//! counted anyway.

pub mod buckets;
mod hub;
pub mod names;
mod proto;

pub use hub::{Board, Done, Frame, Hub, RoleFrame, Scope, StepInfo, StepState, Totals};

pub mod grafana;
mod http;
pub mod metrics;
pub mod remote_write;
pub mod series;
pub mod web;

use std::net::SocketAddr;

/// Why a face could not start.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error("cannot listen on {addr}: {source}; pick another address or port")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot start the {face} server's thread: {source}")]
    Thread {
        face: &'static str,
        source: std::io::Error,
    },
    #[error("cannot start the remote-write thread: {0}")]
    WriterThread(#[source] std::io::Error),
    #[error("{0}")]
    Config(String),
}

/// A listen address that is neither `PORT` nor `HOST:PORT` (the text as given).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not a listen address; give PORT (loopback), 127.0.0.1:PORT or [::1]:PORT")]
pub struct NotListenAddr(pub String);

/// Parses a listen address: `PORT` or `:PORT` is loopback (127.0.0.1); `HOST:PORT` is taken as
/// given, so binding beyond loopback is always asked for by name.
pub fn listen_addr(text: &str) -> Result<SocketAddr, NotListenAddr> {
    let t = text.trim();
    let port_only = t.strip_prefix(':').unwrap_or(t);
    if let Ok(port) = port_only.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    t.parse::<SocketAddr>()
        .map_err(|_| NotListenAddr(text.to_string()))
}

#[cfg(test)]
mod tests {
    use super::listen_addr;

    #[test]
    fn a_bare_port_is_loopback() {
        assert_eq!(listen_addr("9464").unwrap().to_string(), "127.0.0.1:9464");
        assert_eq!(listen_addr(":0").unwrap().to_string(), "127.0.0.1:0");
        assert_eq!(listen_addr("0.0.0.0:80").unwrap().to_string(), "0.0.0.0:80");
        assert_eq!(listen_addr("[::1]:80").unwrap().to_string(), "[::1]:80");
        assert!(listen_addr("localhost").is_err());
    }
}
