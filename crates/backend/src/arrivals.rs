//! The target's view of a load's evenness (`meshbench backend --arrivals FILE`): how evenly did
//! the requests *arrive*, whatever the generator says it sent. Each thread keeps the kernel's
//! receive timestamp (`SO_TIMESTAMPNS`, CLOCK_REALTIME ns) of every segment that starts a new
//! request on a connection in an [`ArrivalLog`]; when the backend stops, the logs are merged and
//! [`summarize`] (pure, on plain numbers) turns them into the steady state's gaps and bursts.
//!
//! The contract: one arrival per read that begins at a request boundary (an HTTP/1.1
//! keep-alive GET is one segment, so one arrival per request; requests pipelined in the same
//! segment count once: they arrived together). Memory is bounded: at most [`MAX_ARRIVALS`]
//! in all (8 bytes each), shared equally by the threads; the rest are counted as dropped.

use std::time::Duration;

use serde::Serialize;

/// The most arrivals kept by all threads together (160 MB of timestamps).
pub const MAX_ARRIVALS: usize = 20_000_000;
/// What each thread allocates up front (512 KiB), growing by doubling up to its share.
const FIRST_ALLOCATION: usize = 1 << 16;

/// One thread's arrivals, in the order it read them.
#[derive(Debug, Default)]
pub struct ArrivalLog {
    stamps: Vec<u64>,
    /// This thread's share of [`MAX_ARRIVALS`].
    cap: usize,
    /// Arrivals past the cap: counted, not kept.
    dropped: u64,
}

impl ArrivalLog {
    /// A log that keeps at most `cap` arrivals.
    pub fn new(cap: usize) -> Self {
        ArrivalLog {
            stamps: Vec::with_capacity(cap.min(FIRST_ALLOCATION)),
            cap,
            dropped: 0,
        }
    }

    /// Records one arrival (CLOCK_REALTIME ns).
    #[inline]
    pub fn record(&mut self, ns: u64) {
        let len = self.stamps.len();
        if len >= self.cap {
            self.dropped += 1;
            return;
        }
        if len == self.stamps.capacity() {
            // Doubling, but never past the cap: the last allocation is exactly the share.
            self.stamps.reserve_exact(len.max(1).min(self.cap - len));
        }
        self.stamps.push(ns);
    }

    /// Adds another thread's log to this one (order does not matter: [`summarize`] sorts).
    pub fn merge(&mut self, other: ArrivalLog) {
        if self.stamps.is_empty() {
            self.stamps = other.stamps;
        } else {
            self.stamps.extend_from_slice(&other.stamps);
        }
        self.dropped += other.dropped;
    }

    /// Records an arrival the kernel did not stamp: the clock now, on the kernel's clock.
    #[inline]
    pub fn record_now(&mut self) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        self.record(now);
    }

    /// The timestamps kept and how many were dropped.
    pub fn into_parts(self) -> (Vec<u64>, u64) {
        (self.stamps, self.dropped)
    }
}

/// The distribution of the gaps between consecutive arrivals, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Gaps {
    pub min: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
    pub mean: f64,
}

/// What `--arrivals FILE` holds: the steady state's arrivals, all threads together.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Arrivals inside the window (after trimming).
    pub requests: u64,
    /// Arrivals recorded in all, trimmed ones included.
    pub recorded: u64,
    /// Arrivals past the memory cap, neither kept nor in any figure.
    pub dropped: u64,
    /// From the first arrival plus the trim to the last arrival minus the trim.
    pub window_secs: f64,
    /// Dropped at each end: the ramp-up and the drain are not the steady state.
    pub trimmed_secs: f64,
    /// Gaps between consecutive arrivals in the window; `null` with fewer than two.
    pub gap_us: Option<Gaps>,
    /// The most arrivals in one millisecond of the clock (bins at whole milliseconds).
    pub largest_burst_per_ms: u64,
    /// `requests / window_secs`.
    pub rate_rps: f64,
}

/// Nearest-rank percentile of sorted values: the smallest value with at least `q` of them at or
/// below it.
fn nearest_rank(sorted: &[f64], q: f64) -> f64 {
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The steady state of a set of arrivals (ns, any order): the first and last `trim` of the span
/// dropped, then gaps between consecutive arrivals and the fullest 1-ms bin.
pub fn summarize(mut stamps: Vec<u64>, trim: Duration, dropped: u64) -> Summary {
    let recorded = stamps.len() as u64;
    stamps.sort_unstable();
    let trim_ns = trim.as_nanos() as u64;
    let (lo, hi) = match (stamps.first(), stamps.last()) {
        (Some(&first), Some(&last)) => {
            (first.saturating_add(trim_ns), last.saturating_sub(trim_ns))
        }
        _ => (0, 0),
    };
    // Arrivals in [lo, hi]; an empty window when the span is shorter than twice the trim.
    let window: &[u64] = if hi > lo {
        let start = stamps.partition_point(|&t| t < lo);
        let end = stamps.partition_point(|&t| t <= hi);
        &stamps[start..end]
    } else {
        &[]
    };
    let window_secs = hi.saturating_sub(lo) as f64 / 1e9;
    let mut gaps: Vec<f64> = window
        .windows(2)
        .map(|w| (w[1] - w[0]) as f64 / 1e3)
        .collect();
    gaps.sort_unstable_by(f64::total_cmp);
    let gap_us = (!gaps.is_empty()).then(|| Gaps {
        min: gaps[0],
        p50: nearest_rank(&gaps, 0.50),
        p90: nearest_rank(&gaps, 0.90),
        p99: nearest_rank(&gaps, 0.99),
        p999: nearest_rank(&gaps, 0.999),
        max: gaps[gaps.len() - 1],
        mean: (window[window.len() - 1] - window[0]) as f64 / 1e3 / gaps.len() as f64,
    });
    let mut largest_burst_per_ms = 0u64;
    let mut i = 0;
    while i < window.len() {
        let bin = window[i] / 1_000_000;
        let run = window[i..].partition_point(|&t| t / 1_000_000 == bin);
        largest_burst_per_ms = largest_burst_per_ms.max(run as u64);
        i += run;
    }
    Summary {
        requests: window.len() as u64,
        recorded,
        dropped,
        window_secs,
        trimmed_secs: trim.as_secs_f64(),
        gap_us,
        largest_burst_per_ms,
        rate_rps: if window_secs > 0.0 {
            window.len() as f64 / window_secs
        } else {
            0.0
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;
    /// Somewhere in 2025 on CLOCK_REALTIME, not on a millisecond boundary.
    const T0: u64 = 1_750_000_000 * SEC + 123_456;

    #[test]
    fn a_uniform_series_has_one_gap_and_no_burst() {
        // 5,000 req/s for 5 s: a gap of 200 us, in the trimmed 3 s 15,000 arrivals.
        let stamps: Vec<u64> = (0..25_000u64).rev().map(|i| T0 + i * 200_000).collect();
        let s = summarize(stamps, Duration::from_secs(1), 0);
        assert_eq!(s.recorded, 25_000);
        assert_eq!(s.requests, 15_000);
        let g = s.gap_us.unwrap();
        for v in [g.min, g.p50, g.p90, g.p99, g.p999, g.max, g.mean] {
            assert!((v - 200.0).abs() < 1e-9, "{g:?}");
        }
        assert_eq!(s.largest_burst_per_ms, 5);
        assert!((s.window_secs - 2.9998).abs() < 1e-9, "{}", s.window_secs);
        assert!((s.rate_rps - 5_000.0).abs() < 1.0, "{}", s.rate_rps);
        assert_eq!(s.trimmed_secs, 1.0);
    }

    #[test]
    fn a_burst_series_shows_its_bursts() {
        // 1,000 req/s as 10 arrivals 1 us apart every 10 ms, for 4 s, bursts starting 0.5 ms
        // into a millisecond.
        let start = 1_750_000_000 * SEC + 500_000;
        let mut stamps = Vec::new();
        for burst in 0..400u64 {
            for k in 0..10u64 {
                stamps.push(start + burst * 10_000_000 + k * 1_000);
            }
        }
        let s = summarize(stamps, Duration::from_secs(1), 7);
        assert_eq!(s.dropped, 7);
        // From 1.0 s to 2.99 s + 9 us after the first: bursts 100..=299, whole.
        assert_eq!(s.requests, 2_000);
        let g = s.gap_us.unwrap();
        assert_eq!(g.min, 1.0);
        assert_eq!(g.p50, 1.0);
        // 1,800 gaps of 1 us, 199 of 9,991 us: 90 % of them (rank 1,800) is still inside a
        // burst, 99 % is a pause.
        assert_eq!(g.p90, 1.0);
        assert_eq!(g.p99, 9_991.0);
        assert_eq!(g.max, 9_991.0);
        assert!((g.mean - 1_990_009.0 / 1_999.0).abs() < 1e-6, "{g:?}");
        assert_eq!(s.largest_burst_per_ms, 10);
    }

    #[test]
    fn bins_are_the_clocks_whole_milliseconds() {
        // Two arrivals either side of a millisecond boundary, 2 us apart: two bins of one, not
        // one of two; four within the same millisecond make a burst of four.
        let ms = 1_750_000_000_000u64 * 1_000_000;
        let stamps = vec![
            ms - 1_000,
            ms + 1_000,
            ms + 5 * 1_000_000 + 10,
            ms + 5 * 1_000_000 + 20,
            ms + 5 * 1_000_000 + 30,
            ms + 5 * 1_000_000 + 999_999,
        ];
        let s = summarize(stamps, Duration::ZERO, 0);
        assert_eq!(s.requests, 6);
        assert_eq!(s.largest_burst_per_ms, 4);
    }

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=1000).map(f64::from).collect();
        assert_eq!(nearest_rank(&v, 0.5), 500.0);
        assert_eq!(nearest_rank(&v, 0.99), 990.0);
        assert_eq!(nearest_rank(&v, 0.999), 999.0);
        assert_eq!(nearest_rank(&v[..1], 0.999), 1.0);
    }

    #[test]
    fn too_short_a_span_leaves_an_empty_window() {
        let stamps: Vec<u64> = (0..100u64).map(|i| T0 + i * 1_000_000).collect();
        let s = summarize(stamps, Duration::from_secs(1), 0);
        assert_eq!((s.requests, s.recorded), (0, 100));
        assert_eq!(s.gap_us, None);
        assert_eq!((s.largest_burst_per_ms, s.rate_rps), (0, 0.0));
        let s = summarize(Vec::new(), Duration::from_secs(1), 0);
        assert_eq!((s.requests, s.window_secs), (0, 0.0));
    }

    #[test]
    fn a_log_keeps_its_share_and_counts_the_rest() {
        let mut log = ArrivalLog::new(100_000);
        for t in 0..100_005u64 {
            log.record(t);
        }
        let mut other = ArrivalLog::new(10);
        other.record(7);
        log.merge(other);
        let (stamps, dropped) = log.into_parts();
        assert_eq!((stamps.len(), dropped), (100_001, 5));
    }
}
