//! The load engine: pacers decide when requests are due, one driver per thread sends them over
//! HTTP/1.1 or HTTP/2, plain or TLS, and records what comes back, and [`run`] ties the threads
//! into one result.
//!
//! The engine knows nothing of reports, stores or the lab; it takes a resolved [`LoadSpec`] and
//! returns a [`RunResult`].

pub mod driver;
pub mod h2conn;
pub mod pacer;
pub mod recorder;
pub mod result;
pub mod run;
pub mod spec;

pub use h2conn::H2Request;
pub use meshbench_net::http1::encode_request;
pub use result::RunResult;
pub use run::{run, Live, RunError};
pub use spec::{
    ConnSpec, Host, LoadSpec, Mode, Order, Protocol, RequestSpec, StopAt, Target, Targets, Wire,
};
