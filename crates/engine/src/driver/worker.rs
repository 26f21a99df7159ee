//! What a worker is given and what it gives back: its part of the run ([`WorkerPlan`], with
//! attribution's [`Tracing`]), what it shares with the run ([`Control`]), what it reports while
//! it runs ([`WorkerEvent`]) and when it ends ([`WorkerReport`]). Types only; the loop that
//! uses them is the parent's.

use std::sync::Arc;

use meshbench_net::clock::Clock;
use meshbench_results::{IdleStrategy, PacingSlack};

use crate::pacer::Pacer;
use crate::recorder::{Interval, Recorder};
use crate::spec::{ConnSpec, Targets};
use crate::Stop;

/// One worker's part of a run.
pub struct WorkerPlan {
    /// Which worker of the run this is (0-based).
    pub index: usize,
    pub targets: Arc<Targets>,
    pub conn: ConnSpec,
    pub connections: usize,
    /// Requests this worker may have in flight (every slot unless `--in-flight` caps it).
    pub max_in_flight: usize,
    pub pacer: Pacer,
    /// Paces new connections (`--connection-rate`), if limited.
    pub connect_pacer: Option<Pacer>,
    /// Where this worker starts in the target list (round-robin), and how far it moves on
    /// after each request: its part's arrivals in the whole plan, each taking the next target.
    pub first_target: usize,
    pub target_stride: usize,
    /// Where this worker starts in `conn.source_addrs` (round-robin per new connection).
    pub first_source: usize,
    pub seed: u64,
    /// Measured requests this worker may start (`-n`), if bounded.
    pub budget: Option<u64>,
    /// Run-clock time at which measurement starts (after the warm-up).
    pub measure_start: u64,
    /// Run-clock time at which sending stops, if bounded by duration.
    pub send_until: Option<u64>,
    pub timeout_ns: u64,
    pub drain_ns: u64,
    /// How the worker waits for its next send.
    pub idle: IdleStrategy,
    /// The most a send may leave after its intended instant (see [`crate::idle`]).
    pub slack: PacingSlack,
    /// Sends due within the slack after a wake-up go out at it, early (their latency counts
    /// from the real send).
    pub send_early: bool,
    /// The process runs under a CPU quota (`auto` then never spins).
    pub under_quota: bool,
    /// Per-hop attribution: which measured requests carry an id (`None`: none does).
    pub trace: Option<Tracing>,
}

/// Which of a worker's measured requests are tagged for attribution, and their ids.
#[derive(Debug, Clone, Copy)]
pub struct Tracing {
    /// One in this many measured sends.
    pub every: u32,
    /// This worker's ids start here (its part of the plan, shifted above any count it reaches),
    /// so ids are unique across the threads and agents of a run.
    pub id_base: u64,
}

/// Shared between the run and its workers.
pub struct Control {
    pub clock: Clock,
    /// Set by a signal or by the caller: stop sending, drain (unless hurried), report.
    pub stop: Stop,
    /// Run-clock time at which the workers start (set once all are connected).
    pub start_at: std::sync::atomic::AtomicU64,
    pub started: std::sync::Barrier,
}

/// Messages a worker sends while it runs.
pub enum WorkerEvent {
    /// Pre-connection is done; the worker waits for the start signal.
    Ready,
    /// One second (or the final part of one) of the measured window, from worker `.0`.
    Interval(usize, Box<Interval>),
}

/// What a worker hands back when it ends.
pub struct WorkerReport {
    pub recorder: Recorder,
    /// CPU time of this thread during the measured window.
    pub cpu_ns: u64,
    /// Time this thread waited for a CPU during the measured window (`None`: not known).
    pub run_delay_ns: Option<u64>,
    /// Wall time of the measured window as this worker saw it.
    pub window_ns: u64,
    /// This worker's first request, if it sent one: when it was intended and when it went on
    /// the wire (run clock, ns).
    pub first_send: Option<(u64, u64)>,
    /// The pacing budget it kept at the end (ns; 0 in a closed loop).
    pub slack_ns: u64,
    /// How far ahead of its instant a send could leave at the end (ns; 0: never early).
    pub ahead_ns: u64,
    /// CPU of one wake-up, measured before the start (ns; 0 when it did not sleep).
    pub wake_cost_ns: u64,
}
