//! The series every face speaks, named once: `/metrics`, remote write and the Grafana dashboard
//! all use these names and labels, so a dashboard query matches what was scraped or written.
//!
//! Every series carries [`EXPERIMENT`], [`STEP`] and [`VARIANT`]; role series add [`ROLE`].
//! Counters count the measured window only (warm-up excluded), so at the end of a step they
//! equal the result's counts exactly.

/// Label: the experiment's name (`run` for `meshbench run`).
pub const EXPERIMENT: &str = "experiment";
/// Label: the step's index in its experiment, from 0.
pub const STEP: &str = "step";
/// Label: the variant a step measures (topology, or the external variant's name; `url` for a
/// plain run).
pub const VARIANT: &str = "variant";
/// Label: the role of a system under test (`proxy`, `backend`, an external role's name).
pub const ROLE: &str = "role";
/// Label of [`RESPONSES`]: the HTTP status code.
pub const CODE: &str = "code";
/// Label of [`GRPC_CALLS`]: the gRPC status by name (`OK`, `UNAVAILABLE`).
pub const GRPC_STATUS: &str = "grpc_status";
/// Label of [`TRANSPORT_ERRORS`]: the kind of failure (`timeout`, `connect`, ...).
pub const KIND: &str = "kind";

/// Counter: finished requests (responses and failures), as `requests.total` in the result.
pub const REQUESTS: &str = "meshbench_requests_total";
/// Counter: failed requests (transport failures and statuses of 400 or more), as
/// `requests.errors`.
pub const ERRORS: &str = "meshbench_request_errors_total";
/// Counter: responses by status code.
pub const RESPONSES: &str = "meshbench_responses_total";
/// Counter: gRPC calls by gRPC status (a gRPC run's responses; their HTTP status is not kept).
pub const GRPC_CALLS: &str = "meshbench_grpc_calls_total";
/// Counter: requests that failed without a response, by kind.
pub const TRANSPORT_ERRORS: &str = "meshbench_transport_errors_total";
/// Counter: requests put on the wire (the achieved rate).
pub const SENDS: &str = "meshbench_sends_total";
/// Gauge: the asked rate of an open loop, requests per second (absent in a closed loop).
pub const TARGET_RPS: &str = "meshbench_target_rps";
/// Histogram: latency in seconds, from the intended send (coordinated-omission corrected).
pub const LATENCY: &str = "meshbench_latency_seconds";
/// Histogram: how late sends went out against their schedule, in seconds.
pub const SCHEDULE_LAG: &str = "meshbench_schedule_lag_seconds";
/// Gauge: seconds of the step's load still to run (0 once done).
pub const STEP_REMAINING: &str = "meshbench_step_remaining_seconds";

/// Counter: CPU seconds a role used.
pub const ROLE_CPU: &str = "meshbench_role_cpu_seconds_total";
/// Gauge: a role's memory, the cgroup's working set where there is one, else RSS.
pub const ROLE_MEMORY: &str = "meshbench_role_memory_bytes";
/// Counter: bytes a role received.
pub const ROLE_RX: &str = "meshbench_role_receive_bytes_total";
/// Counter: bytes a role sent.
pub const ROLE_TX: &str = "meshbench_role_transmit_bytes_total";
/// Gauge: a role's open inbound connections.
pub const ROLE_CONNECTIONS: &str = "meshbench_role_connections";
