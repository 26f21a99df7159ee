//! The load engine: pacers decide when requests are due, one driver per thread sends them over
//! HTTP/1.1 or HTTP/2, plain or TLS, or HTTP/3, and records what comes back, and [`run()`] ties the threads
//! into one result.
//!
//! The engine knows nothing of reports, stores or the lab; it takes a resolved [`LoadSpec`] and
//! returns a `meshbench_results::RunResult`, whose words (protocol, arrival, idle strategy...)
//! are the contracts crate's. Its modules, from the outside in:
//!
//! - [`spec`]: what a run is asked to do, fully resolved ([`LoadSpec`], [`Targets`], ...).
//! - [`run`](mod@run): splits the load over worker threads, gathers their seconds into a
//!   timeline and their recorders into one.
//! - [`driver`]: the request loop of one worker thread (scheduling in `driver`, connection set-up
//!   in `driver::connect`, requests on the wire in `driver::exchange`).
//! - `slots`: which slot a due request may take: free queue, host index, held request,
//!   `--in-flight` (pure bookkeeping, unit-tested without sockets).
//! - `request`: one request's life on a slot and the times it is measured by (intended, sent,
//!   arrived; latency, service time, schedule lag).
//! - `conn`: one connection's bookkeeping (state, host, stream, back-off, bytes counted).
//! - [`h2conn`]: HTTP/2 through the h2 crate, polled by the loop.
//! - [`h3conn`]: HTTP/3 through the h3 crate over quinn-proto's QUIC (`quic`), polled by the
//!   loop, one UDP socket per connection.
//! - [`pacer`]: when the next request is due (closed loop, or an open-loop schedule).
//! - [`idle`]: how long to sleep before a send and how long to spin, from the measured clock.
//! - [`recorder`]: what a worker measured, in constant memory, merged by adding.
//! - [`result`]: fills the `meshbench/result/v1` document (`meshbench_results::RunResult`)
//!   from the merged recorder.
//! - [`check`]: the generator's verdict on its run: timer lateness, CPU saturation, a slow
//!   target or too few connections, each with its advice.
//! - [`quota`]: the generator's CPU quota (cgroup) and its throttling over the measured window;
//!   [`quota::cpu_quota`] tells the idle strategy whether a quota exists.
//! - [`Stop`]: the shared handle that ends a run early (stop, then hurry), `meshbench_results`'s.

pub mod check;
mod conn;
pub mod driver;
pub mod h2conn;
pub mod h3conn;
pub mod idle;
pub mod pacer;
mod quic;
pub mod quota;
pub mod recorder;
mod request;
pub mod result;
pub mod run;
mod slots;
pub mod spec;

pub use h3conn::{QuicSpec, QuicTlsError};
pub use meshbench_net::grpc;
pub use meshbench_net::http1::{closing_variant, encode_request};
pub use meshbench_results::Stop;
pub use recorder::Status;
pub use run::{merge, run, run_part, Gathered, Live, Part, RunError, Seconds, WorkerFigures};
pub use spec::{
    ConnSpec, Host, HttpRequest, LoadSpec, RequestSpec, Segment, StopAt, Target, Targets, Wire,
};
