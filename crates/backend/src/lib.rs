//! The built-in test server (`meshbench backend`): answers HTTP/1.1 with a body of a chosen size,
//! after a chosen delay, with injected error statuses, or echoes the request. It must never be
//! the bottleneck in place of the proxy under test, so it shares the engine's wire layer: one
//! `recv` and one `send` per request, no allocation on the plain path.

pub mod options;
pub mod server;

pub use options::{BackendConfig, Delay, OptionError, RequestOptions, StatusMix};
pub use server::Backend;
