//! The board every face reads, and the hub that writes it.
//!
//! The runner's thread calls [`Hub::second`] once per completed second; that adds the second
//! to its step's [`Totals`] (exact: counts add, HDR histograms add) and appends a [`Frame`] to
//! a bounded history, under a lock held for microseconds. Faces read the board on their own
//! threads (a scrape, a push, a page poll) and wait for changes with [`Hub::wait`]; none of
//! them can slow the load, and the load never waits for them.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use hdrhistogram::Histogram;
use meshbench_engine::recorder::{Counts, Interval};
use meshbench_results::{
    histogram::{new_histogram, new_interval_histogram},
    Role, Sample,
};
use serde::Serialize;

/// Frames kept for the web page: ten minutes of seconds.
pub const HISTORY: usize = 600;
/// Steps whose totals stay on the board after they end (older ones leave `/metrics`).
pub const KEPT_STEPS: usize = 8;

/// Which step a second belongs to: the labels every series carries.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Scope {
    pub experiment: String,
    pub step: u32,
    pub variant: String,
}

/// A step as it starts.
#[derive(Debug, Clone, Serialize)]
pub struct StepInfo {
    pub scope: Scope,
    /// The load in words (`1000 rps x 16 conn`), for people.
    pub load: String,
    /// The asked rate of an open loop.
    pub target_rps: Option<f64>,
    /// Steps in the plan, and seconds this one and those after it take.
    pub steps: usize,
    pub step_secs: f64,
    pub left_after_secs: f64,
    /// Wall clock at the start, ms since the Unix epoch.
    pub started_ms: u64,
}

/// Everything a step measured so far, cumulative over its measured window.
#[derive(Debug, Clone)]
pub struct Totals {
    pub counts: Counts,
    pub sends: u64,
    /// Latency in µs, 3 significant digits (as the result's histogram).
    pub latency: Histogram<u64>,
    /// Schedule lag in µs.
    pub lag: Histogram<u64>,
    /// The newest reading of each role.
    pub roles: BTreeMap<String, Sample>,
    /// Seconds added.
    pub seconds: u32,
    /// Wall clock of the newest second, ms since the Unix epoch.
    pub last_ms: u64,
}

impl Default for Totals {
    fn default() -> Self {
        Self {
            counts: Counts::default(),
            sends: 0,
            latency: new_histogram(),
            lag: new_interval_histogram(),
            roles: BTreeMap::new(),
            seconds: 0,
            last_ms: 0,
        }
    }
}

/// A step on the board.
#[derive(Debug, Clone)]
pub struct StepState {
    pub info: StepInfo,
    pub totals: Totals,
    /// The step's load is over; its series end here.
    pub finished: bool,
}

/// One role in one second, as the page draws it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RoleFrame {
    pub role: String,
    /// Over the second before (none on the first reading).
    pub cpu_millicores: Option<f64>,
    pub memory_bytes: u64,
}

/// One second of one step, as the page draws it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Frame {
    /// Board sequence number of this frame.
    pub seq: u64,
    pub scope: Scope,
    /// Second of the step's measured window.
    pub second: u32,
    /// Wall clock at the end of the second, ms since the Unix epoch.
    pub t_ms: u64,
    pub requests: u64,
    pub errors: u64,
    pub sends: u64,
    pub target_rps: Option<f64>,
    /// Failures by kind in this second (kinds with none left out).
    pub errors_by_kind: BTreeMap<String, u64>,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
    pub lag_p99_us: u64,
    pub roles: Vec<RoleFrame>,
}

/// The run's end.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Done {
    /// Where the HTML report is, when one was written.
    pub report: Option<String>,
    /// One line on how it ended (`done`, `interrupted`, `failed: ...`).
    pub outcome: String,
}

/// What the faces read.
#[derive(Debug, Default)]
pub struct Board {
    /// Steps seen, oldest first; finished ones beyond [`KEPT_STEPS`] are dropped.
    pub steps: VecDeque<StepState>,
    /// The last seconds, oldest first, at most [`HISTORY`].
    pub frames: VecDeque<Frame>,
    /// Bumped at every change.
    pub seq: u64,
    pub done: Option<Done>,
}

impl Board {
    pub fn step(&self, scope: &Scope) -> Option<&StepState> {
        self.steps.iter().find(|s| &s.info.scope == scope)
    }

    /// The step now running, if any.
    pub fn current(&self) -> Option<&StepState> {
        self.steps.back().filter(|s| !s.finished)
    }
}

/// The handle the runner writes through and every face reads through; cheap to clone.
#[derive(Clone, Default)]
pub struct Hub {
    shared: Arc<(Mutex<Board>, Condvar)>,
}

impl Hub {
    pub fn new() -> Hub {
        Hub::default()
    }

    /// Reads the board (briefly: the runner waits for the lock).
    pub fn board(&self) -> MutexGuard<'_, Board> {
        // A face that panicked while reading left nothing half-written: the board is only
        // changed under `change`, which does not panic.
        self.shared.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until the board changes past `seen` or `timeout` passes; returns the board.
    pub fn wait(&self, seen: u64, timeout: Duration) -> MutexGuard<'_, Board> {
        let board = self.board();
        self.shared
            .1
            .wait_timeout_while(board, timeout, |b| b.seq <= seen)
            .map(|(b, _)| b)
            .unwrap_or_else(|p| p.into_inner().0)
    }

    fn change(&self, f: impl FnOnce(&mut Board)) {
        let mut board = self.board();
        f(&mut board);
        board.seq += 1;
        drop(board);
        self.shared.1.notify_all();
    }

    /// A step's load is about to start.
    pub fn step_started(&self, info: StepInfo) {
        self.change(|b| {
            for s in b.steps.iter_mut() {
                s.finished = true;
            }
            b.steps.retain(|s| s.info.scope != info.scope);
            b.steps.push_back(StepState {
                info,
                totals: Totals::default(),
                finished: false,
            });
            while b.steps.len() > KEPT_STEPS {
                b.steps.pop_front();
            }
            b.done = None;
        });
    }

    /// Every second a load's [`meshbench_engine::Live`] completed since the last one, each as
    /// [`Hub::second`] takes it, stamped `t_ms`.
    pub fn seconds(
        &self,
        scope: &Scope,
        live: &meshbench_engine::Live,
        roles: &[(Role, Sample)],
        t_ms: u64,
    ) {
        for second in live.seconds {
            self.second(scope, second, roles, t_ms);
        }
    }

    /// A completed second of the step `scope` (started with [`Hub::step_started`]), with the
    /// newest reading of each role.
    pub fn second(&self, scope: &Scope, second: &Interval, roles: &[(Role, Sample)], t_ms: u64) {
        self.change(|b| {
            let seq = b.seq + 1;
            let Some(step) = b.steps.iter_mut().find(|s| &s.info.scope == scope) else {
                return;
            };
            let t = &mut step.totals;
            t.counts += &second.counts;
            t.sends += second.sends;
            // Same bounds by construction, so adding cannot fail.
            let _ = t.latency.add(&second.latency);
            let _ = t.lag.add(&second.lag);
            t.seconds += 1;
            t.last_ms = t_ms;
            let role_frames = roles
                .iter()
                .map(|(role, now)| {
                    let cpu_millicores = t.roles.get(role.name()).and_then(|before| {
                        let wall_ns = now.t_ms.checked_sub(before.t_ms)?.checked_mul(1_000_000)?;
                        (wall_ns > 0).then(|| {
                            now.cpu_ns.saturating_sub(before.cpu_ns) as f64 * 1000.0
                                / wall_ns as f64
                        })
                    });
                    RoleFrame {
                        role: role.name().to_string(),
                        cpu_millicores,
                        memory_bytes: now.working_set_bytes.unwrap_or(now.rss_bytes),
                    }
                })
                .collect();
            for (role, now) in roles {
                t.roles.insert(role.name().to_string(), *now);
            }
            let q = |p| second.latency.value_at_quantile(p);
            let frame = Frame {
                seq,
                scope: scope.clone(),
                second: second.second,
                t_ms,
                requests: second.counts.total(),
                errors: second.counts.failed(),
                sends: second.sends,
                target_rps: step.info.target_rps,
                errors_by_kind: meshbench_engine::recorder::ErrorKind::ALL
                    .iter()
                    .map(|&k| (k.name().to_string(), second.counts.errors(k)))
                    .chain([
                        ("http_status".to_string(), second.counts.http_failures()),
                        ("grpc_status".to_string(), second.counts.grpc_failures()),
                    ])
                    .filter(|(_, n)| *n > 0)
                    .collect(),
                p50_us: q(0.5),
                p90_us: q(0.9),
                p99_us: q(0.99),
                p999_us: q(0.999),
                max_us: second.latency.max(),
                lag_p99_us: second.lag.value_at_quantile(0.99),
                roles: role_frames,
            };
            b.frames.push_back(frame);
            while b.frames.len() > HISTORY {
                b.frames.pop_front();
            }
        });
    }

    /// The step's load is over.
    pub fn step_finished(&self, scope: &Scope) {
        self.change(|b| {
            if let Some(s) = b.steps.iter_mut().find(|s| &s.info.scope == scope) {
                s.finished = true;
            }
        });
    }

    /// The run or experiment is over.
    pub fn finished(&self, done: Done) {
        self.change(|b| {
            for s in b.steps.iter_mut() {
                s.finished = true;
            }
            b.done = Some(done);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use meshbench_engine::recorder::ErrorKind;

    fn scope(step: u32) -> Scope {
        Scope {
            experiment: "e".into(),
            step,
            variant: "baseline".into(),
        }
    }

    fn info(step: u32) -> StepInfo {
        StepInfo {
            scope: scope(step),
            load: "100 rps".into(),
            target_rps: Some(100.0),
            steps: 2,
            step_secs: 3.0,
            left_after_secs: 0.0,
            started_ms: 0,
        }
    }

    fn second(n: u32, ok: u64, timeouts: u64) -> Interval {
        let mut iv = Interval::new(n);
        for i in 0..ok {
            iv.counts.response(200);
            iv.latency.record(100 + i).unwrap();
        }
        for _ in 0..timeouts {
            iv.counts.error(ErrorKind::Timeout);
        }
        iv.sends = ok + timeouts;
        iv
    }

    #[test]
    fn totals_add_seconds_exactly() {
        let hub = Hub::new();
        hub.step_started(info(0));
        hub.second(&scope(0), &second(0, 90, 1), &[], 1_000);
        hub.second(&scope(0), &second(1, 100, 0), &[], 2_000);
        hub.step_finished(&scope(0));
        let b = hub.board();
        let t = &b.step(&scope(0)).unwrap().totals;
        assert_eq!(t.counts.total(), 191);
        assert_eq!(t.counts.failed(), 1);
        assert_eq!(t.latency.len(), 190);
        assert_eq!(t.sends, 191);
        assert_eq!(b.frames.len(), 2);
        assert_eq!(b.frames[0].errors_by_kind.get("timeout"), Some(&1));
        assert!(b.current().is_none());
    }

    #[test]
    fn roles_get_a_rate_from_the_second_reading() {
        let hub = Hub::new();
        hub.step_started(info(0));
        let reading = |t_ms, cpu_ns| Sample {
            t_ms,
            cpu_ns,
            rss_bytes: 10 << 20,
            working_set_bytes: None,
            rx_bytes: 0,
            tx_bytes: 0,
            connections: 1,
        };
        hub.second(
            &scope(0),
            &second(0, 1, 0),
            &[(Role::from_word("proxy"), reading(1_000, 0))],
            1_000,
        );
        hub.second(
            &scope(0),
            &second(1, 1, 0),
            &[(Role::from_word("proxy"), reading(2_000, 250_000_000))],
            2_000,
        );
        let b = hub.board();
        assert_eq!(b.frames[0].roles[0].cpu_millicores, None);
        assert_eq!(b.frames[1].roles[0].cpu_millicores, Some(250.0));
        assert_eq!(b.frames[1].roles[0].memory_bytes, 10 << 20);
    }

    #[test]
    fn old_steps_leave_the_board() {
        let hub = Hub::new();
        for i in 0..(KEPT_STEPS as u32 + 3) {
            hub.step_started(info(i));
        }
        let b = hub.board();
        assert_eq!(b.steps.len(), KEPT_STEPS);
        assert_eq!(b.current().unwrap().info.scope.step, KEPT_STEPS as u32 + 2);
    }
}
