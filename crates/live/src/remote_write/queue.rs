//! Requests waiting to be pushed, oldest first, and when to try the oldest again.
//!
//! The queue is bounded: when a new request finds it full, the oldest is dropped (and counted).
//! Every value pushed is cumulative, so a dropped request costs resolution in time, never the
//! totals: the next request that arrives carries them. Order is kept (a receiver refuses a
//! sample older than one it has), so only the head is ever tried; a failed try waits an
//! exponentially growing, jittered delay, or what the receiver asked for in `Retry-After`.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use meshbench_net::rng::SplitMix64;

use super::batch::Lane;

/// One encoded request and what it carries.
#[derive(Debug, Clone)]
pub struct Pending {
    pub lane: Lane,
    /// The snappy-compressed `WriteRequest`.
    pub body: Vec<u8>,
    /// Float samples in it.
    pub samples: u64,
    /// Native histogram samples in it.
    pub histograms: u64,
    /// Tries that failed so far.
    pub failures: u32,
    /// Not to be tried before this.
    pub not_before: Instant,
}

impl Pending {
    /// Samples of both kinds.
    pub fn all_samples(&self) -> u64 {
        self.samples + self.histograms
    }
}

/// The bounded queue.
#[derive(Debug)]
pub struct Queue {
    items: VecDeque<Pending>,
    bound: usize,
}

impl Queue {
    pub fn new(bound: usize) -> Queue {
        Queue {
            items: VecDeque::new(),
            bound: bound.max(1),
        }
    }

    /// Adds a request at the back; returns the oldest if the queue was full and it had to go.
    pub fn push(&mut self, p: Pending) -> Option<Pending> {
        let dropped = (self.items.len() >= self.bound)
            .then(|| self.items.pop_front())
            .flatten();
        self.items.push_back(p);
        dropped
    }

    pub fn head(&self) -> Option<&Pending> {
        self.items.front()
    }

    pub fn head_mut(&mut self) -> Option<&mut Pending> {
        self.items.front_mut()
    }

    pub fn pop(&mut self) -> Option<Pending> {
        self.items.pop_front()
    }

    /// Takes out every request of `lane`.
    pub fn remove_lane(&mut self, lane: Lane) -> Vec<Pending> {
        let (gone, kept): (Vec<Pending>, Vec<Pending>) =
            self.items.drain(..).partition(|p| p.lane == lane);
        self.items = kept.into();
        gone
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Samples of both kinds waiting.
    pub fn samples(&self) -> u64 {
        self.items.iter().map(Pending::all_samples).sum()
    }

    /// Everything, oldest first, leaving the queue empty.
    pub fn drain(&mut self) -> Vec<Pending> {
        self.items.drain(..).collect()
    }
}

/// Delays between tries of one request.
#[derive(Debug, Clone)]
pub struct Backoff {
    /// After the first failure (before jitter).
    pub first: Duration,
    /// The longest delay.
    pub max: Duration,
    rng: SplitMix64,
}

impl Backoff {
    pub fn new(first: Duration, max: Duration, seed: u64) -> Backoff {
        Backoff {
            first,
            max,
            rng: SplitMix64(seed),
        }
    }

    /// The delay after `failures` failed tries (1 or more): `first` doubled each time, capped
    /// at `max`, then between half of it and all of it (so retries of many writers spread).
    pub fn delay(&mut self, failures: u32) -> Duration {
        let doubled = self
            .first
            .saturating_mul(1u32 << failures.saturating_sub(1).min(20));
        let d = doubled.min(self.max);
        d.mul_f64(0.5 + 0.5 * self.rng.next_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(samples: u64, lane: Lane) -> Pending {
        Pending {
            lane,
            body: Vec::new(),
            samples,
            histograms: 0,
            failures: 0,
            not_before: Instant::now(),
        }
    }

    #[test]
    fn a_full_queue_drops_its_oldest() {
        let mut q = Queue::new(3);
        for i in 1..=3 {
            assert!(q.push(pending(i, Lane::Classic)).is_none());
        }
        let dropped = q.push(pending(4, Lane::Classic)).unwrap();
        assert_eq!(dropped.samples, 1);
        assert_eq!(q.len(), 3);
        assert_eq!(q.samples(), 2 + 3 + 4);
        assert_eq!(q.head().unwrap().samples, 2);
    }

    #[test]
    fn a_lane_can_be_taken_out_in_order() {
        let mut q = Queue::new(10);
        q.push(pending(1, Lane::Classic));
        q.push(pending(2, Lane::Native));
        q.push(pending(3, Lane::Classic));
        q.push(pending(4, Lane::Native));
        let gone = q.remove_lane(Lane::Native);
        assert_eq!(gone.iter().map(|p| p.samples).collect::<Vec<_>>(), [2, 4]);
        assert_eq!(
            q.drain().iter().map(|p| p.samples).collect::<Vec<_>>(),
            [1, 3]
        );
    }

    #[test]
    fn backoff_doubles_to_its_cap_with_jitter() {
        let first = Duration::from_millis(200);
        let max = Duration::from_secs(5);
        let mut b = Backoff::new(first, max, 42);
        for failures in 1..30u32 {
            let nominal = first.saturating_mul(1 << (failures - 1).min(20)).min(max);
            for _ in 0..50 {
                let d = b.delay(failures);
                assert!(d >= nominal / 2 && d <= nominal, "{failures}: {d:?}");
            }
        }
        // Jitter: not every delay the same.
        let ds: Vec<Duration> = (0..20).map(|_| b.delay(3)).collect();
        assert!(ds.iter().any(|d| *d != ds[0]));
    }
}
