//! A whole run: splits the load across worker threads, starts them together, gathers their
//! per-second intervals into a timeline (and a live view), merges their recorders and judges
//! whether the generator kept up.

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Barrier;
use std::time::{Duration, SystemTime};

use hdrhistogram::Histogram;
use meshbench_net::clock::{process_usage, Clock};
use thiserror::Error;

use crate::driver::{run_worker, Control, WorkerEvent, WorkerPlan, WorkerReport};
use crate::pacer::{Arrival, Pacer, Schedule};
use crate::recorder::{new_interval_histogram, Interval, Recorder};
use crate::result::{Measured, RunResult, TimelinePoint};
use crate::spec::{LoadSpec, Mode, StopAt};
use crate::stop::Stop;

/// Why a run could not be carried out (failures of the target are data, not errors).
#[derive(Debug, Error)]
pub enum RunError {
    #[error("{connections} connections need {needed} file descriptors but the limit is {limit}; raise `ulimit -n` or use fewer connections")]
    TooFewFiles {
        connections: usize,
        needed: u64,
        limit: u64,
    },
    #[error("could not start a worker: {0}")]
    Setup(#[from] std::io::Error),
    #[error("the target list is empty")]
    NoTargets,
    #[error("a worker thread panicked")]
    WorkerPanicked,
}

/// The run as it goes, handed to the caller about every 200 ms: progress for a status line,
/// and every second of the measured window that all workers have reported since the last call.
/// The seconds add up exactly to the result's counts (the same requests, counted once).
#[derive(Debug, Clone, Copy)]
pub struct Live<'a> {
    /// Seconds since the start, warm-up included.
    pub elapsed_secs: f64,
    pub warming_up: bool,
    /// Measured requests finished so far.
    pub requests: u64,
    pub errors: u64,
    /// Requests in the last full second.
    pub last_second_rps: u64,
    pub p50_us: u64,
    pub p99_us: u64,
    /// Seconds completed since the last call, in order, merged over the workers.
    pub seconds: &'a [Interval],
}

/// Runs `spec` to completion or until `stop` is asked; calls `on_live` about every 200 ms.
pub fn run(
    spec: &LoadSpec,
    stop: Stop,
    mut on_live: impl FnMut(&Live),
) -> Result<RunResult, RunError> {
    let warmup_ns = spec.warmup.as_nanos() as u64;
    let limit = meshbench_net::socket::raise_nofile_limit();
    let needed = spec.connections as u64 + 64;
    if spec.targets.requests.is_empty() {
        return Err(RunError::NoTargets);
    }
    if needed > limit {
        return Err(RunError::TooFewFiles {
            connections: spec.connections,
            needed,
            limit,
        });
    }
    // No more threads than connections, nor than requests allowed in flight.
    let busy = spec.concurrency.unwrap_or(usize::MAX).min(spec.connections);
    let threads = spec.threads.clamp(1, busy.max(1));
    let plans = plan_workers(spec, threads);
    let ctl = Control {
        clock: Clock::start(),
        stop: stop.clone(),
        start_at: AtomicU64::new(0),
        started: Barrier::new(threads + 1),
    };
    let (tx, rx) = mpsc::channel();
    let mut gathered = Gathered::default();
    let (reports, wall_start, cpu_before) = std::thread::scope(|s| {
        let handles: Vec<_> = plans
            .into_iter()
            .map(|plan| {
                let tx = tx.clone();
                let ctl = &ctl;
                s.spawn(move || run_worker(plan, ctl, tx))
            })
            .collect();
        drop(tx);
        let mut ready = 0;
        while ready < threads {
            match rx.recv() {
                Ok(WorkerEvent::Ready) => ready += 1,
                Ok(_) => {}
                Err(_) => break,
            }
        }
        let cpu_before = process_usage().0;
        let start_ns = ctl.clock.now() + 200_000;
        ctl.start_at.store(start_ns, Ordering::Release);
        let wall_start = SystemTime::now() + Duration::from_nanos(200_000) + spec.warmup;
        ctl.started.wait();

        let mut pending: BTreeMap<u32, (usize, Interval)> = BTreeMap::new();
        let mut completed: Vec<Interval> = Vec::new();
        let elapsed_ns = || ctl.clock.now().saturating_sub(start_ns);
        loop {
            let msg = rx.recv_timeout(Duration::from_millis(200));
            match msg {
                Ok(WorkerEvent::Interval(iv)) => {
                    match pending.entry(iv.second) {
                        Entry::Vacant(v) => {
                            v.insert((1, *iv));
                        }
                        Entry::Occupied(o) => {
                            let (n, merged) = o.into_mut();
                            *merged += &iv;
                            *n += 1;
                        }
                    }
                    while pending
                        .first_key_value()
                        .is_some_and(|(_, (n, _))| *n == threads)
                    {
                        let (_, (_, iv)) = pending.pop_first().expect("checked non-empty");
                        gathered.push(&iv);
                        completed.push(iv);
                    }
                }
                Ok(WorkerEvent::Ready) => {}
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
            on_live(&gathered.live(elapsed_ns(), warmup_ns, &completed));
            completed.clear();
        }
        // Workers that ended at different times leave seconds not everyone reported.
        for (_, (_, iv)) in pending {
            gathered.push(&iv);
            completed.push(iv);
        }
        if !completed.is_empty() {
            on_live(&gathered.live(elapsed_ns(), warmup_ns, &completed));
        }
        let reports: Vec<_> = handles.into_iter().map(|h| h.join()).collect();
        (reports, wall_start, cpu_before)
    });
    let mut merged = Recorder::new();
    let mut workers: Vec<WorkerReport> = Vec::new();
    for r in reports {
        let report = r.map_err(|_| RunError::WorkerPanicked)??;
        merged += &report.recorder;
        workers.push(report);
    }
    let mut timeline = gathered.timeline;
    while timeline
        .last()
        .is_some_and(|p: &TimelinePoint| p.requests == 0)
    {
        timeline.pop();
    }
    let (cpu_after, rss) = process_usage();
    Ok(RunResult::build(
        spec,
        Measured {
            threads,
            recorder: &merged,
            window_ns: workers.iter().map(|w| w.window_ns).max().unwrap_or(0),
            max_thread_utilization: workers
                .iter()
                .map(|w| w.cpu_ns as f64 / w.window_ns.max(1) as f64)
                .fold(0.0, f64::max),
            max_thread_waiting: workers
                .iter()
                .filter_map(|w| w.run_delay_ns.map(|d| d as f64 / w.window_ns.max(1) as f64))
                .reduce(f64::max),
            max_thread_busy: workers
                .iter()
                .map(|w| {
                    w.cpu_ns.saturating_sub(w.recorder.spin_ns) as f64 / w.window_ns.max(1) as f64
                })
                .fold(0.0, f64::max),
            timeline,
            wall_start,
            cpu_secs: cpu_after - cpu_before,
            rss_max_bytes: rss,
            interrupted: stop.requested(),
        },
    ))
}

/// The seconds every worker has reported, as the timeline and the figures so far.
struct Gathered {
    timeline: Vec<TimelinePoint>,
    so_far: Histogram<u64>,
    requests: u64,
    errors: u64,
    last_second_rps: u64,
}

impl Default for Gathered {
    fn default() -> Self {
        Self {
            timeline: Vec::new(),
            so_far: new_interval_histogram(),
            requests: 0,
            errors: 0,
            last_second_rps: 0,
        }
    }
}

impl Gathered {
    fn push(&mut self, iv: &Interval) {
        // Same bounds by construction.
        let _ = self.so_far.add(&iv.latency);
        let (total, failed) = (iv.counts.total(), iv.counts.failed());
        self.requests += total;
        self.errors += failed;
        self.last_second_rps = total;
        self.timeline.push(TimelinePoint {
            second: iv.second,
            requests: total,
            errors: failed,
            p50_us: iv.latency.value_at_quantile(0.5),
            p90_us: iv.latency.value_at_quantile(0.9),
            p99_us: iv.latency.value_at_quantile(0.99),
            p999_us: iv.latency.value_at_quantile(0.999),
        });
    }

    fn live<'a>(&self, elapsed_ns: u64, warmup_ns: u64, seconds: &'a [Interval]) -> Live<'a> {
        Live {
            elapsed_secs: elapsed_ns as f64 / 1e9,
            warming_up: elapsed_ns < warmup_ns,
            requests: self.requests,
            errors: self.errors,
            last_second_rps: self.last_second_rps,
            p50_us: self.so_far.value_at_quantile(0.5),
            p99_us: self.so_far.value_at_quantile(0.99),
            seconds,
        }
    }
}

/// Splits connections, rate and request budget evenly over `threads` workers. Times are
/// relative to the run start; workers shift them once the clock starts.
fn plan_workers(spec: &LoadSpec, threads: usize) -> Vec<WorkerPlan> {
    let warmup = spec.warmup.as_nanos() as u64;
    let n_targets = spec.targets.requests.len();
    (0..threads)
        .map(|w| {
            let connections = share(spec.connections as u64, threads, w) as usize;
            let slots = connections * spec.conn.streams.max(1);
            let max_in_flight = match spec.concurrency {
                Some(c) => (share(c as u64, threads, w) as usize).min(slots),
                None => slots,
            };
            let part = connections as f64 / spec.connections as f64;
            let seed = spec.seed ^ (w as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let pacer = match spec.mode {
                Mode::Closed => Pacer::Closed,
                Mode::Open { rate_rps, arrival } => {
                    // Stagger uniform workers so that together they are evenly spaced.
                    let offset = match arrival {
                        Arrival::Uniform => (w as f64 * 1e9 / rate_rps) as u64,
                        Arrival::Poisson => 0,
                    };
                    Pacer::Open(Schedule::new(rate_rps * part, offset, arrival, seed))
                }
            };
            let connect_pacer = spec.conn.connection_rate.map(|rate| {
                let offset = (w as f64 * 1e9 / rate) as u64;
                Pacer::Open(Schedule::new(rate * part, offset, Arrival::Uniform, seed))
            });
            let (budget, send_until) = match spec.stop {
                StopAt::Requests(n) => (Some(share(n, threads, w)), None),
                StopAt::Duration(d) => (None, Some(warmup + d.as_nanos() as u64)),
            };
            WorkerPlan {
                targets: spec.targets.clone(),
                conn: spec.conn.clone(),
                connections,
                max_in_flight,
                pacer,
                connect_pacer,
                first_target: w * n_targets / threads,
                first_source: w * spec.conn.source_addrs.len() / threads,
                seed: seed.rotate_left(17),
                budget,
                measure_start: warmup,
                send_until,
                timeout_ns: spec.timeout.as_nanos() as u64,
                drain_ns: spec.drain().as_nanos() as u64,
                idle: spec.idle,
            }
        })
        .collect()
}

/// Worker `w`'s part of `total` split over `n`.
fn share(total: u64, n: usize, w: usize) -> u64 {
    total / n as u64 + u64::from((w as u64) < total % n as u64)
}

#[cfg(test)]
mod tests {
    use super::share;

    #[test]
    fn shares_add_up() {
        for (total, n) in [(10u64, 3usize), (1, 4), (0, 2), (1_000_001, 7)] {
            let parts: Vec<u64> = (0..n).map(|w| share(total, n, w)).collect();
            assert_eq!(parts.iter().sum::<u64>(), total);
            assert!(parts.iter().max().unwrap() - parts.iter().min().unwrap() <= 1);
        }
    }
}
