//! Pacers say when the next request is due; the driver asks, it never decides by itself.
//!
//! Closed and open loop are two values of one type feeding one request loop (STYLE.md #3). An
//! open-loop pacer hands out *intended* send times: if the driver sends later (no free
//! connection, a busy thread), latency is still measured from the intended time, which is the
//! coordinated-omission correction. Pacers are pure functions of the time they are given, so
//! tests drive them with plain numbers.

pub use meshbench_net::rng::SplitMix64;

use crate::spec::Segment;
use meshbench_results::load::Arrival;

/// The source of intended send times for one worker.
#[derive(Debug, Clone)]
pub enum Pacer {
    /// Closed loop: a request is due as soon as a connection is free; intended = now.
    Closed,
    /// Open loop: a schedule that does not wait for responses.
    Open(Schedule),
}

impl Pacer {
    /// Takes the next request due at or before `now`, returning its intended send time.
    #[inline]
    pub fn due(&mut self, now: u64) -> Option<u64> {
        match self {
            Pacer::Closed => Some(now),
            Pacer::Open(s) => s.due(now),
        }
    }

    /// Mean time between requests; `None` for a closed loop.
    pub fn mean_gap_ns(&self) -> Option<u64> {
        match self {
            Pacer::Closed => None,
            Pacer::Open(s) => Some(s.mean_gap_ns()),
        }
    }

    /// When the next request becomes due; `None` for a closed loop (paced by responses).
    #[inline]
    pub fn wake_at(&self) -> Option<u64> {
        match self {
            Pacer::Closed => None,
            Pacer::Open(s) => Some(s.next),
        }
    }

    pub fn is_open(&self) -> bool {
        matches!(self, Pacer::Open(_))
    }

    /// Sending stopped: takes every open-loop request due at or before `until`, none of which
    /// will be sent, and counts those intended at or after `measured_from` by how long they
    /// waited. A closed loop has no backlog.
    pub fn take_backlog(&mut self, until: u64, measured_from: u64, stale_before: u64) -> Backlog {
        let mut backlog = Backlog::default();
        let Pacer::Open(s) = self else {
            return backlog;
        };
        while let Some(t) = s.due(until) {
            if t < measured_from {
                continue;
            }
            if t < stale_before {
                backlog.timed_out += 1;
            } else {
                backlog.unsent += 1;
            }
        }
        backlog
    }
}

/// Open-loop requests that were due but never sent when sending stopped (no connection came
/// free for them), by how long they had waited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Backlog {
    /// Intended before `stale_before`: they waited longer than the timeout, so they are
    /// timeouts, as they would have been had a connection come free.
    pub timed_out: u64,
    /// Still within the timeout: unfinished.
    pub unsent: u64,
}

/// An open-loop schedule.
#[derive(Debug, Clone)]
pub struct Schedule {
    /// Intended time of the next request, in nanoseconds of the run clock.
    next: u64,
    start: u64,
    /// Mean gap between requests in nanoseconds.
    gap_ns: f64,
    /// Arrivals of the whole schedule handed out so far, this part's or not (uniform times are
    /// computed from it, so they never drift).
    taken: u64,
    /// Arrivals of the whole schedule per arrival of this part.
    stride: u64,
    arrival: Arrival,
    rng: SplitMix64,
}

impl Schedule {
    /// Intended time of the next item.
    pub fn next_at(&self) -> u64 {
        self.next
    }

    /// Mean time between items, in nanoseconds.
    pub fn mean_gap_ns(&self) -> u64 {
        self.gap_ns as u64
    }

    /// Part `segment` of a schedule of `rate_rps` requests per second from `start` (ns) on:
    /// its arrivals `segment.index`, `segment.index + segment.count`, ... Every part computes
    /// the whole schedule from `seed` and keeps its own arrivals, so the parts together are
    /// exactly the undivided schedule, Poisson included.
    pub fn new(rate_rps: f64, start: u64, arrival: Arrival, seed: u64, segment: Segment) -> Self {
        let gap_ns = 1e9 / rate_rps;
        let mut s = Self {
            next: start,
            start,
            gap_ns,
            taken: 0,
            stride: segment.count,
            arrival,
            rng: SplitMix64(seed),
        };
        s.next = s.advance(start, segment.index + 1);
        s
    }

    /// The time of the arrival `n` arrivals after the one at `from`, counting `taken` on.
    fn advance(&mut self, mut from: u64, n: u64) -> u64 {
        match self.arrival {
            Arrival::Uniform => {
                self.taken += n;
                self.start + ((self.taken - 1) as f64 * self.gap_ns) as u64
            }
            Arrival::Poisson => {
                for _ in 0..n {
                    from += self.exp_gap();
                }
                from
            }
        }
    }

    fn exp_gap(&mut self) -> u64 {
        // Inverse transform of an exponential variate; u in (0, 1].
        let u = 1.0 - self.rng.next_f64();
        (-u.ln() * self.gap_ns) as u64
    }

    /// Moves the whole schedule `by` nanoseconds later (the run clock starts after connecting).
    pub fn shift(&mut self, by: u64) {
        self.start += by;
        self.next += by;
    }

    #[inline]
    fn due(&mut self, now: u64) -> Option<u64> {
        if self.next > now {
            return None;
        }
        let t = self.next;
        self.next = self.advance(t, self.stride);
        Some(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// Calls `due` at each time in `polls` until it returns None, collecting intended times.
    fn drain(p: &mut Pacer, polls: &[u64]) -> Vec<u64> {
        let mut out = Vec::new();
        for &now in polls {
            while let Some(t) = p.due(now) {
                out.push(t);
                if !p.is_open() {
                    break;
                }
            }
        }
        out
    }

    #[test]
    fn pacer_table() {
        let uniform = |rate, start| {
            Pacer::Open(Schedule::new(
                rate,
                start,
                Arrival::Uniform,
                1,
                Segment::WHOLE,
            ))
        };
        let cases: Vec<(&str, Pacer, Vec<u64>, Vec<u64>)> = vec![
            (
                "closed: intended is now",
                Pacer::Closed,
                vec![5, 7],
                vec![5, 7],
            ),
            (
                "uniform 1000/s polled on time",
                uniform(1000.0, 0),
                vec![0, MS, 2 * MS],
                vec![0, MS, 2 * MS],
            ),
            (
                "uniform polled late keeps intended times",
                uniform(1000.0, 0),
                vec![3 * MS + 5],
                vec![0, MS, 2 * MS, 3 * MS],
            ),
            (
                "uniform before start",
                uniform(1000.0, 10 * MS),
                vec![0, 9 * MS],
                vec![],
            ),
            (
                "uniform 3/s has no drift",
                uniform(3.0, 0),
                vec![1_000_000_000],
                vec![0, 333_333_333, 666_666_666, 1_000_000_000],
            ),
        ];
        for (name, mut pacer, polls, want) in cases {
            assert_eq!(drain(&mut pacer, &polls), want, "{name}");
        }
    }

    #[test]
    fn backlog_waited_too_long_is_timed_out() {
        let uniform = || {
            Pacer::Open(Schedule::new(
                1000.0,
                0,
                Arrival::Uniform,
                1,
                Segment::WHOLE,
            ))
        };
        // (until, measured from, stale before, backlog)
        let cases = [
            (9 * MS, 0, 0, (0, 10)),
            (9 * MS, 0, 5 * MS, (5, 5)),
            (9 * MS, 2 * MS, 5 * MS, (3, 5)),
            (9 * MS, 0, 10 * MS, (10, 0)),
        ];
        for (until, from, stale, (timed_out, unsent)) in cases {
            let mut p = uniform();
            let want = Backlog { timed_out, unsent };
            assert_eq!(
                p.take_backlog(until, from, stale),
                want,
                "{until} {from} {stale}"
            );
            assert_eq!(p.wake_at(), Some(until + MS), "the backlog is gone");
        }
        assert_eq!(Pacer::Closed.take_backlog(MS, 0, MS), Backlog::default());
    }

    #[test]
    fn wake_at_is_the_next_intended_time() {
        let mut p = Pacer::Open(Schedule::new(
            1000.0,
            0,
            Arrival::Uniform,
            1,
            Segment::WHOLE,
        ));
        assert_eq!(p.wake_at(), Some(0));
        p.due(0);
        assert_eq!(p.wake_at(), Some(MS));
        assert_eq!(Pacer::Closed.wake_at(), None);
    }

    #[test]
    fn poisson_has_the_asked_mean_and_exponential_spread() {
        let mut s = Schedule::new(10_000.0, 0, Arrival::Poisson, 42, Segment::WHOLE);
        let n = 200_000u64;
        let mut prev = 0u64;
        let mut gaps = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let t = s.due(u64::MAX).unwrap();
            gaps.push((t - prev) as f64);
            prev = t;
        }
        let mean = gaps.iter().sum::<f64>() / n as f64;
        assert!(
            (mean - 100_000.0).abs() < 1_000.0,
            "mean gap {mean} ns, want 100 µs ± 1 %"
        );
        // For an exponential distribution the standard deviation equals the mean.
        let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / n as f64;
        let cv = var.sqrt() / mean;
        assert!(
            (cv - 1.0).abs() < 0.02,
            "coefficient of variation {cv}, want 1"
        );
        // Same seed, same schedule.
        let mut a = Schedule::new(500.0, 0, Arrival::Poisson, 7, Segment::WHOLE);
        let mut b = Schedule::new(500.0, 0, Arrival::Poisson, 7, Segment::WHOLE);
        for _ in 0..100 {
            assert_eq!(a.due(u64::MAX), b.due(u64::MAX));
        }
    }

    #[test]
    fn segments_together_are_exactly_the_whole_schedule() {
        for arrival in [Arrival::Uniform, Arrival::Poisson] {
            let whole: Vec<u64> = {
                let mut s = Schedule::new(3_000.0, 5, arrival, 9, Segment::WHOLE);
                (0..6_000).map(|_| s.due(u64::MAX).unwrap()).collect()
            };
            // Three agents of two threads each: parts of parts.
            for (agents, threads) in [(3u64, 2u64), (1, 2), (7, 1)] {
                let mut union = Vec::new();
                for a in 0..agents {
                    for t in 0..threads {
                        let seg = Segment::new(a, agents).split(t, threads);
                        let mut s = Schedule::new(3_000.0, 5, arrival, 9, seg);
                        let mine: Vec<u64> = (0..whole.len() as u64 / (agents * threads))
                            .map(|_| s.due(u64::MAX).unwrap())
                            .collect();
                        for (m, &at) in mine.iter().enumerate() {
                            let k = seg.index + seg.count * m as u64;
                            assert_eq!(at, whole[k as usize], "{arrival:?} {seg:?} arrival {m}");
                        }
                        union.extend(mine);
                    }
                }
                union.sort_unstable();
                let n = union.len();
                assert_eq!(union, whole[..n], "{arrival:?} {agents}x{threads}");
            }
        }
    }

    #[test]
    fn segment_shares_add_up() {
        for (total, n) in [(10u64, 3u64), (1, 4), (0, 2), (1_000_001, 7)] {
            let parts: Vec<u64> = (0..n).map(|i| Segment::new(i, n).share(total)).collect();
            assert_eq!(parts.iter().sum::<u64>(), total);
            assert!(parts.iter().max().unwrap() - parts.iter().min().unwrap() <= 1);
        }
    }
}
