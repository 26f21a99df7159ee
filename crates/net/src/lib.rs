//! The wire layer shared by the load engine and the test backend: a thin epoll poller with
//! nanosecond timeouts, non-blocking socket helpers, HTTP/1.1 message framing, and a plain or
//! TLS byte stream over a non-blocking socket.
//!
//! Both sides of a benchmark live on this crate so that neither pays for an async runtime on the
//! hot path: one `send` and one `recv` per request, no allocation, no per-request timer.

pub mod clock;
pub mod cpu_quota;
pub mod grpc;
pub mod http1;
pub mod poller;
pub mod rng;
pub mod socket;
pub mod stream;
pub mod tls;
