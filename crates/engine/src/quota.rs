//! The generator's CPU quota (a pod's CPU limit, a cgroup CFS quota) and its throttling over the
//! measured window.
//!
//! A run reads the quota once, at its start, and the group's throttling counters when its
//! measured window begins and when it ends ([`Window`]); the difference goes into the result
//! (`generator.cpu_quota`) and the self-check (`cpu_throttled`). The reading itself is
//! `meshbench_net::cpu_quota` (cgroup v1 and v2, the smallest quota up to the root).
//!
//! [`cpu_quota`] is also what the idle strategy asks to learn that a quota exists: spinning
//! before sends under a quota spends the quota on nothing and gets every thread stopped until
//! the period ends.

use meshbench_results::run::CpuQuotaUse;

pub use meshbench_net::cpu_quota::{CpuQuota, Throttling};

/// This process's CPU quota now; `None` without one, or where cgroups cannot be read. A few
/// small file reads (tens of µs): ask once per run or per worker, never per send.
pub fn cpu_quota() -> Option<CpuQuota> {
    CpuQuota::of_self()
}

/// The throttling counters read at the two ends of a measured window, on the run clock. The
/// run's coordinating thread asks [`Window::due`] when to wake next and [`Window::read_due`]
/// after each wake; the readings are of the group whose quota limits the run.
pub(crate) struct Window {
    /// When the measured window begins and (for a run of a set duration) ends, run-clock ns.
    begins_ns: u64,
    ends_ns: Option<u64>,
    start: Option<Throttling>,
    end: Option<Throttling>,
    /// The quota's cores; `None`: no quota, nothing to read.
    cores: Option<f64>,
    /// Nothing (more) to read: no quota, or its counters could not be read.
    idle: bool,
}

impl Window {
    /// Readings for a window from `begins_ns` to `ends_ns` (`None`: it ends when the workers
    /// do); nothing is read when `quota` is `None`.
    pub(crate) fn new(quota: Option<&CpuQuota>, begins_ns: u64, ends_ns: Option<u64>) -> Window {
        Window {
            begins_ns,
            ends_ns,
            start: None,
            end: None,
            cores: quota.map(|q| q.cores),
            idle: quota.is_none(),
        }
    }

    /// The run-clock time of the next reading, if one is due at a known time.
    pub(crate) fn due(&self) -> Option<u64> {
        if self.idle {
            None
        } else if self.start.is_none() {
            Some(self.begins_ns)
        } else if self.end.is_none() {
            self.ends_ns
        } else {
            None
        }
    }

    /// Reads the counters (through `read`) if a reading is due at `now_ns`.
    pub(crate) fn read_due(&mut self, now_ns: u64, read: impl Fn() -> Option<Throttling>) {
        if self.idle {
            return;
        }
        if self.start.is_none() && now_ns >= self.begins_ns {
            self.start = read();
            // Unreadable: the window cannot be measured, and is not read again.
            self.idle = self.start.is_none();
        } else if self.start.is_some()
            && self.end.is_none()
            && self.ends_ns.is_some_and(|end| now_ns >= end)
        {
            self.end = read();
        }
    }

    /// The quota's use over the window, once the workers are done: the end is read now if it
    /// was not at a known time. A run stopped before its window began used none of it.
    pub(crate) fn finish(mut self, read: impl Fn() -> Option<Throttling>) -> Option<CpuQuotaUse> {
        let cores = self.cores?;
        if self.start.is_some() && self.end.is_none() {
            self.end = read();
        }
        let used = match (self.start, self.end) {
            (Some(start), Some(end)) => end.since(&start),
            _ => Throttling::default(),
        };
        Some(CpuQuotaUse {
            cores: (cores * 1e4).round() / 1e4,
            periods: used.periods,
            throttled_periods: used.throttled_periods,
            throttled_secs: (used.throttled_ns as f64 / 1e6).round() / 1e3,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::path::PathBuf;

    use super::*;
    use meshbench_net::cpu_quota::Version;

    fn quota() -> CpuQuota {
        CpuQuota {
            cores: 0.05,
            group: PathBuf::from("/sys/fs/cgroup/cpu/pod"),
            version: Version::V1,
        }
    }

    /// Counters that grow by 10 periods, 9 throttled and 0.8 s a reading.
    fn counter() -> impl Fn() -> Option<Throttling> {
        let n = Cell::new(0u64);
        move || {
            n.set(n.get() + 1);
            Some(Throttling {
                periods: 10 * n.get(),
                throttled_periods: 9 * n.get(),
                throttled_ns: 800_000_000 * n.get(),
            })
        }
    }

    #[test]
    fn the_counters_are_read_when_the_window_begins_and_ends() {
        let q = quota();
        let read = counter();
        let mut w = Window::new(Some(&q), 1_000, Some(5_000));
        assert_eq!(w.due(), Some(1_000));
        w.read_due(999, &read);
        assert_eq!(w.due(), Some(1_000), "not yet");
        w.read_due(1_200, &read);
        assert_eq!(w.due(), Some(5_000));
        w.read_due(4_000, &read);
        w.read_due(5_000, &read);
        assert_eq!(w.due(), None);
        // Read at the end of the duration, not again when the workers finish.
        let used = w.finish(&read).unwrap();
        assert_eq!(
            used,
            CpuQuotaUse {
                cores: 0.05,
                periods: 10,
                throttled_periods: 9,
                throttled_secs: 0.8
            }
        );
    }

    #[test]
    fn a_window_of_unknown_length_ends_with_the_workers() {
        let q = quota();
        let read = counter();
        let mut w = Window::new(Some(&q), 0, None);
        w.read_due(0, &read);
        assert_eq!(w.due(), None);
        let used = w.finish(&read).unwrap();
        assert_eq!((used.periods, used.throttled_periods), (10, 9));
    }

    #[test]
    fn without_a_quota_or_counters_nothing_is_read() {
        let w = Window::new(None, 0, Some(10));
        assert_eq!(w.due(), None);
        assert_eq!(w.finish(counter()), None);
        // Stopped during the warm-up: the quota, and no throttling in a window never begun.
        let q = quota();
        let w = Window::new(Some(&q), 1_000, None);
        let used = w.finish(counter()).unwrap();
        assert_eq!((used.cores, used.periods), (0.05, 0));
        // cpu.stat unreadable: read once, then never again.
        let mut w = Window::new(Some(&q), 0, Some(10));
        w.read_due(0, || None);
        assert_eq!(w.due(), None);
        assert_eq!(w.finish(counter()).unwrap().periods, 0);
    }
}
