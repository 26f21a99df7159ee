//! The command line, declared with clap. Flags say *how* to run; every number is checked later
//! when the run is resolved, so that bad values get a message that says what to change.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "meshbench",
    version,
    about = "Measures what a gateway, reverse proxy or service-mesh data plane costs and how far it scales"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Load-test one URL (closed loop by default, open loop with --rate).
    Run(RunArgs),
    /// Run the built-in test server.
    Backend(BackendArgs),
    /// Start the backend and a real nginx, load both directly and through nginx, compare.
    Demo(DemoArgs),
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ArrivalArg {
    Uniform,
    Poisson,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The URL to load, e.g. http://127.0.0.1:8080/ (http only for now).
    pub url: String,
    /// Concurrent connections (closed loop: requests in flight).
    #[arg(short = 'c', long, default_value_t = 16, value_name = "N")]
    pub connections: usize,
    /// Open loop at this total rate in requests per second; latency counts from the intended
    /// send time (coordinated-omission corrected).
    #[arg(short = 'r', long, value_name = "RPS", allow_negative_numbers = true)]
    pub rate: Option<f64>,
    /// How open-loop requests are spaced.
    #[arg(long, value_enum)]
    pub arrival: Option<ArrivalArg>,
    /// How long to measure, e.g. 10s, 2m (default 10s unless --requests is given).
    #[arg(
        short = 'd',
        long,
        value_name = "DURATION",
        conflicts_with = "requests",
        allow_hyphen_values = true
    )]
    pub duration: Option<String>,
    /// Stop after this many measured requests.
    #[arg(short = 'n', long, value_name = "N", allow_negative_numbers = true)]
    pub requests: Option<i64>,
    /// Load before measuring, excluded from the results.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "0s",
        allow_hyphen_values = true
    )]
    pub warmup: String,
    /// HTTP method.
    #[arg(short = 'm', long, default_value = "GET")]
    pub method: String,
    /// Extra request header, "Name: value" (repeatable).
    #[arg(short = 'H', long = "header", value_name = "HEADER")]
    pub headers: Vec<String>,
    /// Send a body of this many bytes.
    #[arg(
        long,
        value_name = "BYTES",
        conflicts_with = "body",
        allow_negative_numbers = true
    )]
    pub body_size: Option<i64>,
    /// Send this body; @FILE reads it from a file.
    #[arg(long, value_name = "TEXT|@FILE")]
    pub body: Option<String>,
    /// A request without a complete response after this long counts as a timeout.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "10s",
        allow_hyphen_values = true
    )]
    pub timeout: String,
    /// Worker threads (default: the CPUs this process may use, at most one per connection).
    #[arg(short = 't', long, value_name = "N", allow_negative_numbers = true)]
    pub threads: Option<i64>,
    /// Seed for Poisson arrivals.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write the result as JSON (schema meshbench/result/v1) to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// No live progress line on stderr.
    #[arg(short = 'q', long)]
    pub quiet: bool,
}

#[derive(Debug, Args)]
pub struct BackendArgs {
    /// Address to listen on; port 0 picks a free port (printed on stdout).
    #[arg(short = 'l', long, default_value = "127.0.0.1:8080")]
    pub listen: String,
    /// Response body size in bytes (a request may ask for another with ?size=N or
    /// x-meshbench-size).
    #[arg(long, default_value_t = 1024, value_name = "BYTES")]
    pub size: usize,
    /// Delay before answering: 5ms, uniform:1ms..5ms or exp:2ms (per request: ?delay=).
    #[arg(long, value_name = "DELAY")]
    pub delay: Option<String>,
    /// Inject statuses: 503:1% or 503:1%,500:0.5% (per request: ?status=).
    #[arg(long, value_name = "CODE:PCT")]
    pub status: Option<String>,
    /// Event-loop threads.
    #[arg(short = 't', long, default_value_t = 1, value_name = "N")]
    pub threads: usize,
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Length of each of the four runs.
    #[arg(short = 'd', long, default_value = "3s")]
    pub duration: String,
    /// Open-loop rate of the open-loop runs.
    #[arg(short = 'r', long, default_value_t = 2000.0)]
    pub rate: f64,
    /// Connections of every run.
    #[arg(short = 'c', long, default_value_t = 16)]
    pub connections: usize,
    /// Directory for the four JSON results.
    #[arg(long, default_value = "meshbench-demo")]
    pub out: PathBuf,
}
