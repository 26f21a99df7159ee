//! Load from many machines: a coordinator divides one plan over agents, starts them together
//! and merges what they measured into one exact result.
//!
//! ```text
//! coordinator (meshbench run/experiment --agents)            agent (meshbench agent)
//!   Fleet: one control connection per agent ◄──── TCP (+ mutual TLS) ────► session
//!   hello + HMAC proof of the shared token, both ways (auth)
//!   per step: clock offset (pings, as NTP) ─► Prepare(options, segment i of n)
//!             ◄─ Ready (connections open) ─► Start(at: the agent's clock)
//!             ◄─ Second (one interval a second) ... ◄─ Done(part: recorder + figures)
//!   engine::Seconds merges the seconds, engine::merge the parts: the result of one process
//! ```
//!
//! Agents dial the coordinator by default (`--agents N`: the coordinator listens and waits for
//! N); the coordinator can also dial agents that listen (`--agents ADDR,...`). After the TCP
//! connection the two directions are the same protocol ([`wire`]). Faults are data: a lost
//! agent ends its part of the step (what it sent stays counted, the step is partial and says
//! who and when); an agent that hears nothing from its coordinator for a few seconds stops its
//! load. docs/agents.md has the protocol and the failure cases.

pub mod agent;
mod auth;
pub mod coordinator;
mod link;
pub mod wire;

use std::path::PathBuf;
use std::time::Duration;

use thiserror::Error;

pub use auth::{HandshakeError, Side, Token, TokenError};
pub use coordinator::{Fleet, FleetError, Reach as FleetReach};
pub use link::{Tls, TlsFiles};

/// The environment variable that holds the shared token (never a flag: argv is public).
pub const TOKEN_ENV: &str = "MESHBENCH_AGENT_TOKEN";

/// The port agents and coordinators use unless told otherwise.
pub const DEFAULT_PORT: u16 = 7700;

/// Silence after which a peer is taken for gone: the agent stops its load, the coordinator
/// marks the agent lost. Both sides send something at least every [`HEARTBEAT`].
pub const PEER_SILENT: Duration = Duration::from_secs(4);
pub const HEARTBEAT: Duration = Duration::from_secs(1);

/// Why agents could not be set up (a peer's failure during a step is data, not this).
#[derive(Debug, Error)]
pub enum AgentError {
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: String,
        source: std::io::Error,
    },
    #[error("TLS file {path}: {why}")]
    TlsFile { path: PathBuf, why: String },
    #[error("{0}")]
    Handshake(#[from] HandshakeError),
    #[error("no coordinator at {addr} within {waited:?}: {last}")]
    NoCoordinator {
        addr: String,
        waited: Duration,
        last: String,
    },
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

#[cfg(test)]
mod tests;
