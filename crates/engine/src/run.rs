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

use crate::driver::{run_worker, Control, Tracing, WorkerEvent, WorkerPlan};
use crate::pacer::{Pacer, Schedule};
use crate::quota::{self, CpuQuota};
use crate::recorder::{Interval, Recorder};
use crate::result::Measured;
use crate::spec::{LoadSpec, StopAt};
use crate::Stop;
use meshbench_results::Offer;
use meshbench_results::{
    histogram::new_interval_histogram,
    run::{CpuQuotaUse, TimelinePoint},
    Arrival, RunResult,
};
use serde::{Deserialize, Serialize};

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
    #[error("this part of the plan has no connection: give at least one connection per agent")]
    NoConnections,
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

/// What one process measured of its part of a plan: its workers' recorders merged, and what
/// the result's verdict on the generator needs. `run` builds its result from one; a
/// coordinator builds one result from its agents' (see [`merge`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Part {
    pub recorder: Recorder,
    pub workers: Vec<WorkerFigures>,
    /// User + system CPU seconds of the process during the run.
    pub cpu_secs: f64,
    pub rss_max_bytes: u64,
    /// The run clock's zero (the common start when one was given), on CLOCK_MONOTONIC.
    pub start_monotonic_ns: u64,
    /// How late the earliest-intended first send went out after its intended time (ns): with
    /// `start_monotonic_ns`, when this part's schedule really began.
    pub first_send_late_ns: Option<u64>,
    /// Wall-clock start of the measured window.
    pub wall_start: SystemTime,
    /// Stopped (a signal, or the coordinator) before its end.
    pub interrupted: bool,
    /// This part's own seconds.
    pub timeline: Vec<TimelinePoint>,
    /// The process's CPU quota and its throttling over the measured window (`None`: no quota;
    /// absent from agents that predate it).
    #[serde(default)]
    pub cpu_quota: Option<CpuQuotaUse>,
}

/// One worker thread's figures over its measured window.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct WorkerFigures {
    pub window_ns: u64,
    pub cpu_ns: u64,
    /// Time it waited for a CPU (`None`: not known).
    pub run_delay_ns: Option<u64>,
    /// Time it spun before sends on purpose.
    pub spin_ns: u64,
    /// The pacing budget it kept at the end (ns; 0 in a closed loop).
    #[serde(default)]
    pub slack_ns: u64,
    /// How far ahead of its instant a send could leave (ns; 0: never early).
    #[serde(default)]
    pub ahead_ns: u64,
    /// CPU of one wake-up, measured before the start (ns; 0 when it did not sleep).
    #[serde(default)]
    pub wake_cost_ns: u64,
}

/// Runs `spec` to completion or until `stop` is asked; calls `on_live` about every 200 ms.
pub fn run(spec: &LoadSpec, stop: Stop, on_live: impl FnMut(&Live)) -> Result<RunResult, RunError> {
    let part = run_part(spec, stop, || None, on_live)?;
    let timeline = part.timeline.clone();
    Ok(merge(
        spec,
        std::slice::from_ref(&part),
        timeline,
        part.wall_start,
        part.interrupted,
    ))
}

/// The result of `spec` from the parts that drove it (one process's, or every agent's): the
/// recorders added (exact: HDR histograms add), the settings as asked, the generator judged by
/// its busiest worker anywhere. `timeline` is the parts' seconds merged ([`Seconds`]).
pub fn merge(
    spec: &LoadSpec,
    parts: &[Part],
    timeline: Vec<TimelinePoint>,
    wall_start: SystemTime,
    interrupted: bool,
) -> RunResult {
    let mut merged = Recorder::new();
    for p in parts {
        merged += &p.recorder;
    }
    let workers = || parts.iter().flat_map(|p| &p.workers);
    let share = |ns: u64, w: &WorkerFigures| ns as f64 / w.window_ns.max(1) as f64;
    crate::result::build(
        spec,
        Measured {
            threads: workers().count(),
            recorder: &merged,
            window_ns: workers().map(|w| w.window_ns).max().unwrap_or(0),
            max_thread_utilization: workers().map(|w| share(w.cpu_ns, w)).fold(0.0, f64::max),
            max_thread_waiting: workers()
                .filter_map(|w| w.run_delay_ns.map(|d| share(d, w)))
                .reduce(f64::max),
            max_thread_busy: workers()
                .map(|w| share(w.cpu_ns.saturating_sub(w.spin_ns), w))
                .fold(0.0, f64::max),
            slack_ns: workers().map(|w| w.slack_ns).max().unwrap_or(0),
            ahead_ns: workers().map(|w| w.ahead_ns).max().unwrap_or(0),
            wake_cost_ns: median(workers().map(|w| w.wake_cost_ns).filter(|&ns| ns > 0)),
            timeline,
            wall_start,
            cpu_secs: parts.iter().map(|p| p.cpu_secs).sum(),
            rss_max_bytes: parts.iter().map(|p| p.rss_max_bytes).sum(),
            interrupted: interrupted || parts.iter().any(|p| p.interrupted),
            cpu_quota: most_throttled(parts),
        },
    )
}

/// The median of `values` (the lower of the middle two); 0 when there are none.
fn median(values: impl Iterator<Item = u64>) -> u64 {
    let mut v: Vec<u64> = values.collect();
    v.sort_unstable();
    v.get(v.len().saturating_sub(1) / 2).copied().unwrap_or(0)
}

/// The quota of the part throttled in the largest share of its periods (the first of equals):
/// agents each have their own, and the worst one is what may have delayed sends.
fn most_throttled(parts: &[Part]) -> Option<CpuQuotaUse> {
    parts
        .iter()
        .filter_map(|p| p.cpu_quota.as_ref())
        .fold(None, |worst: Option<&CpuQuotaUse>, q| match worst {
            Some(w) if w.throttled_share() >= q.throttled_share() => worst,
            _ => Some(q),
        })
        .cloned()
}

/// Drives this process's part of `spec` (its [`Segment`](crate::spec::Segment)) and returns
/// what it measured; `on_live` sees the run about every 200 ms. Once every connection is open,
/// `ready` is asked when to start: a time on CLOCK_MONOTONIC (an agent waits for its
/// coordinator's common start), or `None` for now.
pub fn run_part(
    spec: &LoadSpec,
    stop: Stop,
    ready: impl FnOnce() -> Option<u64>,
    mut on_live: impl FnMut(&Live),
) -> Result<Part, RunError> {
    let warmup_ns = spec.warmup.as_nanos() as u64;
    let limit = meshbench_net::socket::raise_nofile_limit();
    let connections = spec.segment.share(spec.connections as u64) as usize;
    let needed = connections as u64 + 64;
    if spec.targets.requests.is_empty() {
        return Err(RunError::NoTargets);
    }
    if connections == 0 {
        return Err(RunError::NoConnections);
    }
    if needed > limit {
        return Err(RunError::TooFewFiles {
            connections,
            needed,
            limit,
        });
    }
    // No more threads than connections, nor than requests allowed in flight.
    let in_flight = spec
        .in_flight
        .map(|c| spec.segment.share(c as u64) as usize);
    let busy = in_flight.unwrap_or(usize::MAX).min(connections);
    let threads = spec.threads.clamp(1, busy.max(1));
    // Read once; its throttling counters at both ends of the measured window.
    let cpu_quota = quota::cpu_quota();
    let plans = plan_workers(spec, threads, cpu_quota.is_some());
    let ctl = Control {
        clock: Clock::start(),
        stop: stop.clone(),
        start_at: AtomicU64::new(0),
        started: Barrier::new(threads + 1),
    };
    let throttling = || cpu_quota.as_ref().and_then(CpuQuota::throttling);
    let (tx, rx) = mpsc::channel();
    let mut gathered = Gathered::default();
    let (reports, wall_start, cpu_before, start_ns, quota_window) = std::thread::scope(|s| {
        let handles: Vec<_> = plans
            .into_iter()
            .map(|plan| {
                let tx = tx.clone();
                let ctl = &ctl;
                s.spawn(move || run_worker(plan, ctl, tx))
            })
            .collect();
        drop(tx);
        let mut connected = 0;
        while connected < threads {
            match rx.recv() {
                Ok(WorkerEvent::Ready) => connected += 1,
                Ok(_) => {}
                Err(_) => break,
            }
        }
        let start_at = ready();
        let cpu_before = process_usage().0;
        let now = ctl.clock.now();
        // A common start in the future is kept; one already past (or none) is now.
        let start_ns = start_at
            .map(|at| ctl.clock.from_monotonic(at))
            .unwrap_or(0)
            .max(now + 200_000);
        ctl.start_at.store(start_ns, Ordering::Release);
        let wall_start = SystemTime::now() + Duration::from_nanos(start_ns - now) + spec.warmup;
        ctl.started.wait();

        let mut seconds = Seconds::new(threads);
        let mut completed: Vec<Interval> = Vec::new();
        let elapsed_ns = || ctl.clock.now().saturating_sub(start_ns);
        let window_ns = start_ns + warmup_ns;
        let mut quota_window = quota::Window::new(
            cpu_quota.as_ref(),
            window_ns,
            match spec.stop {
                StopAt::Duration(d) => Some(window_ns + d.as_nanos() as u64),
                StopAt::Requests(_) => None,
            },
        );
        loop {
            // Every 200 ms, or sooner when the quota's counters are due.
            let wait = quota_window
                .due()
                .map_or(200_000_000, |at| at.saturating_sub(ctl.clock.now()))
                .min(200_000_000);
            match rx.recv_timeout(Duration::from_nanos(wait)) {
                Ok(WorkerEvent::Interval(w, iv)) => seconds.add(w, *iv, &mut completed),
                Ok(WorkerEvent::Ready) | Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
            quota_window.read_due(ctl.clock.now(), throttling);
            completed.iter().for_each(|iv| gathered.push(iv));
            on_live(&gathered.live(elapsed_ns(), warmup_ns, &completed));
            completed.clear();
        }
        // Workers that ended at different times leave seconds not everyone reported.
        seconds.finish(&mut completed);
        if !completed.is_empty() {
            completed.iter().for_each(|iv| gathered.push(iv));
            on_live(&gathered.live(elapsed_ns(), warmup_ns, &completed));
        }
        let reports: Vec<_> = handles.into_iter().map(|h| h.join()).collect();
        (reports, wall_start, cpu_before, start_ns, quota_window)
    });
    let mut recorder = Recorder::new();
    let mut workers = Vec::new();
    let mut first_send: Option<(u64, u64)> = None;
    for r in reports {
        let report = r.map_err(|_| RunError::WorkerPanicked)??;
        recorder += &report.recorder;
        first_send = match (first_send, report.first_send) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        workers.push(WorkerFigures {
            window_ns: report.window_ns,
            cpu_ns: report.cpu_ns,
            run_delay_ns: report.run_delay_ns,
            spin_ns: report.recorder.spin_ns,
            slack_ns: report.slack_ns,
            ahead_ns: report.ahead_ns,
            wake_cost_ns: report.wake_cost_ns,
        });
    }
    let (cpu_after, rss) = process_usage();
    Ok(Part {
        recorder,
        workers,
        cpu_secs: cpu_after - cpu_before,
        rss_max_bytes: rss,
        start_monotonic_ns: ctl.clock.to_monotonic(start_ns),
        // A closed loop's sends are intended when they go out; its schedule is the start.
        first_send_late_ns: first_send.map(|(intended, sent)| match spec.offer {
            Offer::Open { .. } => sent.saturating_sub(intended),
            Offer::Closed => sent.saturating_sub(start_ns),
        }),
        wall_start,
        interrupted: stop.requested(),
        timeline: gathered.into_timeline(),
        cpu_quota: quota_window.finish(throttling),
    })
}

/// Seconds from several sources (the workers of a run, the agents of a coordinator), merged in
/// order. Each source reports its seconds in order; a second is complete once every source
/// still there has reported it or a later one. A source that is gone (an agent lost) no
/// longer holds the others back, and what it reported stays counted.
pub struct Seconds {
    /// Per source: the last second it reported; `None` before its first.
    last: Vec<Option<u32>>,
    gone: Vec<bool>,
    pending: BTreeMap<u32, Interval>,
}

impl Seconds {
    pub fn new(sources: usize) -> Seconds {
        Seconds {
            last: vec![None; sources],
            gone: vec![false; sources],
            pending: BTreeMap::new(),
        }
    }

    /// Source `source` reported `iv`; seconds now complete are appended to `done`, in order.
    pub fn add(&mut self, source: usize, iv: Interval, done: &mut Vec<Interval>) {
        let Some(last) = self.last.get_mut(source) else {
            return;
        };
        *last = Some(iv.second.max(last.unwrap_or(0)));
        match self.pending.entry(iv.second) {
            Entry::Vacant(v) => {
                v.insert(iv);
            }
            Entry::Occupied(mut o) => *o.get_mut() += &iv,
        }
        self.release(done);
    }

    /// Source `source` will report no more.
    pub fn gone(&mut self, source: usize, done: &mut Vec<Interval>) {
        if let Some(g) = self.gone.get_mut(source) {
            *g = true;
        }
        self.release(done);
    }

    /// Every source has ended: what is pending is complete.
    pub fn finish(&mut self, done: &mut Vec<Interval>) {
        done.extend(std::mem::take(&mut self.pending).into_values());
    }

    fn release(&mut self, done: &mut Vec<Interval>) {
        let mut horizon = u32::MAX;
        for (last, gone) in self.last.iter().zip(&self.gone) {
            match (gone, last) {
                (true, _) => {}
                (false, None) => return,
                (false, Some(s)) => horizon = horizon.min(*s),
            }
        }
        while let Some(entry) = self.pending.first_entry() {
            if *entry.key() > horizon {
                break;
            }
            done.push(entry.remove());
        }
    }
}

/// The completed seconds so far, as the timeline and the figures a status line shows.
pub struct Gathered {
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
    /// One more completed second.
    pub fn push(&mut self, iv: &Interval) {
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

    /// The run as it goes, with `seconds` the ones completed since the last call.
    pub fn live<'a>(&self, elapsed_ns: u64, warmup_ns: u64, seconds: &'a [Interval]) -> Live<'a> {
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

    /// The timeline, without the empty seconds at its end (the drain after the last response).
    pub fn into_timeline(self) -> Vec<TimelinePoint> {
        let mut timeline = self.timeline;
        while timeline.last().is_some_and(|p| p.requests == 0) {
            timeline.pop();
        }
        timeline
    }
}

/// Splits this process's part of the plan over `threads` workers: worker `w` takes part `w` of
/// the segment again (its arrivals, its requests' places in the target list, its share of a
/// request budget), and its share of the segment's connections. Times are relative to the run
/// start; workers shift them once the clock starts.
fn plan_workers(spec: &LoadSpec, threads: usize, under_quota: bool) -> Vec<WorkerPlan> {
    let warmup = spec.warmup.as_nanos() as u64;
    let n_targets = spec.targets.requests.len() as u64;
    let n_sources = spec.conn.source_addrs.len() as u64;
    let own_connections = spec.segment.share(spec.connections as u64);
    let own_in_flight = spec.in_flight.map(|c| spec.segment.share(c as u64));
    (0..threads)
        .map(|w| {
            let part = spec.segment.split(w as u64, threads as u64);
            let connections = share(own_connections, threads, w) as usize;
            let slots = connections * spec.conn.streams.max(1);
            let max_in_flight = match own_in_flight {
                Some(c) => (share(c, threads, w) as usize).min(slots),
                None => slots,
            };
            let pacer = match spec.offer {
                Offer::Closed => Pacer::Closed,
                Offer::Open { rate_rps, arrival } => {
                    Pacer::Open(Schedule::new(rate_rps, 0, arrival, spec.seed, part))
                }
            };
            let connect_pacer = spec
                .conn
                .connection_rate
                .map(|rate| Pacer::Open(Schedule::new(rate, 0, Arrival::Uniform, spec.seed, part)));
            let (budget, send_until) = match spec.stop {
                StopAt::Requests(n) => (Some(part.share(n)), None),
                StopAt::Duration(d) => (None, Some(warmup + d.as_nanos() as u64)),
            };
            WorkerPlan {
                index: w,
                targets: spec.targets.clone(),
                conn: spec.conn.clone(),
                connections,
                max_in_flight,
                pacer,
                connect_pacer,
                first_target: (part.index % n_targets) as usize,
                target_stride: (part.count % n_targets) as usize,
                first_source: (part.index * n_sources / part.count) as usize,
                seed: (spec.seed ^ part.index.wrapping_mul(0x9E37_79B9_7F4A_7C15)).rotate_left(17),
                budget,
                measure_start: warmup,
                send_until,
                timeout_ns: spec.timeout.as_nanos() as u64,
                drain_ns: spec.drain().as_nanos() as u64,
                idle: spec.idle,
                slack: spec.slack,
                send_early: spec.send_early,
                under_quota,
                trace: spec.trace_every.map(|every| Tracing {
                    every: every.max(1),
                    id_base: part.index << 40,
                }),
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

    use super::Seconds;
    use crate::recorder::{Interval, Recorder};

    fn second(s: u32, requests: u64) -> Interval {
        let mut iv = Interval::new(s);
        for i in 0..requests {
            iv.counts.response(200);
            iv.latency.record(100 + i).unwrap();
        }
        iv
    }

    #[test]
    fn seconds_complete_when_every_source_still_there_reported_them() {
        let mut merger = Seconds::new(3);
        let mut done = Vec::new();
        merger.add(0, second(0, 1), &mut done);
        merger.add(1, second(0, 2), &mut done);
        assert!(done.is_empty(), "source 2 has not reported second 0");
        merger.add(2, second(0, 4), &mut done);
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].counts.total(), 7);
        // Source 2 is lost after second 0: second 1 needs only 0 and 1 now.
        merger.add(0, second(1, 1), &mut done);
        merger.gone(2, &mut done);
        assert_eq!(done.len(), 1);
        merger.add(1, second(1, 1), &mut done);
        assert_eq!(done.len(), 2);
        assert_eq!(done[1].counts.total(), 2);
        // One source ahead waits for the other; the end releases everything.
        merger.add(0, second(2, 3), &mut done);
        assert_eq!(done.len(), 2);
        merger.finish(&mut done);
        assert_eq!(done.iter().map(|iv| iv.counts.total()).sum::<u64>(), 12);
        assert_eq!(
            done.iter().map(|iv| iv.second).collect::<Vec<_>>(),
            [0, 1, 2]
        );
    }

    #[test]
    fn a_second_and_a_recorder_survive_the_wire_exactly() {
        let iv = second(3, 500);
        let text = serde_json::to_string(&iv).unwrap();
        let back: Interval = serde_json::from_str(&text).unwrap();
        assert_eq!(back.counts, iv.counts);
        assert_eq!(back.latency, iv.latency);
        let mut rec = Recorder::new();
        rec.response(503, 2_000_000, 1_500_000);
        rec.error_with(crate::recorder::ErrorKind::Tls, "unknown CA");
        rec.bytes_sent = 77;
        let back: Recorder = serde_json::from_str(&serde_json::to_string(&rec).unwrap()).unwrap();
        assert_eq!(back.counts, rec.counts);
        assert_eq!(back.latency, rec.latency);
        assert_eq!(back.messages, rec.messages);
        assert_eq!(back.bytes_sent, 77);
        // A histogram beyond the engine's bounds, a code or a kind it does not know: refused.
        let mut wide = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 1 << 40, 3).unwrap();
        wide.record(1 << 39).unwrap();
        let bad = text.replace(
            &meshbench_results::histogram::encode_histogram(&iv.latency),
            &meshbench_results::histogram::encode_histogram(&wide),
        );
        assert!(serde_json::from_str::<Interval>(&bad).is_err());
        let bad = text.replace("\"200\"", "\"700\"");
        assert!(serde_json::from_str::<Interval>(&bad).is_err(), "{bad}");
    }
}
