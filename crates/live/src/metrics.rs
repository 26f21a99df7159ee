//! `/metrics`: the board as a Prometheus scrape target (TO BE BUILT: see the issue).

use std::net::SocketAddr;

use crate::{Hub, LiveError};

/// A running `/metrics` server.
pub struct MetricsServer {
    addr: SocketAddr,
}

impl MetricsServer {
    /// Serves the hub's board at `http://addr/metrics` on its own thread.
    pub fn start(addr: SocketAddr, hub: Hub) -> Result<MetricsServer, LiveError> {
        let _ = hub;
        Err(LiveError::Config(format!(
            "/metrics on {addr} is not built yet"
        )))
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops serving.
    pub fn stop(self) {}
}
