//! The live web page (TO BE BUILT: see the issue).

use std::net::SocketAddr;

use crate::{Hub, LiveError};

/// A running page server.
pub struct WebServer {
    addr: SocketAddr,
}

impl WebServer {
    pub fn start(addr: SocketAddr, hub: Hub) -> Result<WebServer, LiveError> {
        let _ = hub;
        Err(LiveError::Config(format!(
            "the web view on {addr} is not built yet"
        )))
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops serving.
    pub fn stop(self) {}
}
