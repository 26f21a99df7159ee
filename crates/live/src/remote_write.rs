//! Prometheus remote write: the board pushed to a receiver (TO BE BUILT: see the issue).

use std::time::Duration;

use crate::{Hub, LiveError};

/// Where and how to push.
#[derive(Debug, Clone)]
pub struct RemoteWriteConfig {
    pub url: String,
    /// Extra headers on every push (`Authorization: Bearer ...`, a tenant id).
    pub headers: Vec<(String, String)>,
    /// How often the current values are pushed.
    pub interval: Duration,
}

/// What the pushes did, for the closing line.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PushReport {
    pub requests_sent: u64,
    pub samples_sent: u64,
    pub samples_dropped: u64,
    pub last_error: Option<String>,
}

/// A running pusher.
pub struct RemoteWriter {}

impl RemoteWriter {
    pub fn start(config: RemoteWriteConfig, hub: Hub) -> Result<RemoteWriter, LiveError> {
        let _ = hub;
        Err(LiveError::Config(format!(
            "remote write to {} is not built yet",
            config.url
        )))
    }

    /// Pushes what is left (the last values and the stale markers), waiting at most `timeout`.
    pub fn finish(self, timeout: Duration) -> PushReport {
        let _ = timeout;
        PushReport::default()
    }
}
