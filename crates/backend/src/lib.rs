//! The built-in test server (`meshbench backend`): answers with a body of a chosen size, after a
//! chosen delay, with injected error statuses, or echoes the request. It must never be the
//! bottleneck in place of the proxy under test, so plain HTTP/1.1 shares the engine's wire layer:
//! one `recv` and one `send` per request, no allocation. TLS, HTTP/2, h2c and mutual TLS are
//! served by hyper ([`hyper_server`]) with the same options, HTTP/3 by h3 over quinn
//! ([`h3_server`]) beside it, both answering as `answer.rs` decides. [`hostile`] is the same command
//! turned against its client: one chosen way of breaking HTTP, for tests of what a client or a
//! proxy does with a broken server. [`arrivals`] is the target's own record of when requests
//! arrived (`--arrivals`), to see how evenly a generator's load reaches it.

mod answer;
pub mod arrivals;
mod h3_server;
pub mod hostile;
pub mod hyper_server;
pub mod options;
pub mod server;

pub use arrivals::{ArrivalLog, Gaps, Summary};
pub use hostile::{Hostile, HostileServer, Speaks, UnknownHostile};
pub use hyper_server::{HyperBackend, ServerTls};
pub use options::{BackendConfig, Delay, DelayMode, OptionError, RequestOptions, StatusMix};
pub use server::Backend;
